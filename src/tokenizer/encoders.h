// Internal to the tokenizer room: the two merge algorithms behind Tokenizer::encode.
// Each encoder lives for one encode() call and caches word -> ids for that call only,
// so a Tokenizer stays free of shared mutable state.
//
//   SpmEncoder spm(vocab, *SpmTables::build(vocab));
//   spm.encode("▁Hello▁world", out);          // text already ▁-escaped
//   BpeEncoder bpe(vocab, tables);
//   bpe.encode_word("Hello", out);            // one pre-token, raw bytes
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/string_table.h"
#include "tokenizer/vocab.h"

namespace ridge {

namespace tokenizer_detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Token ids of already-encoded words, stored back to back.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;  // longer words are rare; not worth keeping
  // Appends the cached ids of `word` to out; false if absent.
  bool emit(std::string_view word, std::vector<int32_t>& out) const;
  // Remembers out[from..] as the ids of `word`.
  void store(std::string_view word, const std::vector<int32_t>& out, size_t from);

 private:
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
      spans_;
  std::vector<int32_t> ids_;
};

// Length of the UTF-8 sequence a lead byte announces, the way llama.cpp walks text
// (a stray continuation byte counts as one character).
inline size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

inline constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace tokenizer_detail

// SentencePiece BPE (llama.cpp "SPM"): start from UTF-8 characters, repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token (ties: leftmost), then
// fall back to <0xXX> byte tokens for what is left.
// Where SentencePiece text may be cut into words that merge independently: before a
// U+2581 that follows another character, unless some token has a U+2581 after another
// character and is spelled out in the text across that point (Gemma has ">▁</").
struct SpmTables {
  static constexpr size_t kMaxSpanningTokens = 256;  // beyond this, do not cut at all

  static std::unique_ptr<SpmTables> build(const Vocab& vocab);
  bool can_break_at(std::string_view text, size_t pos) const;

  bool split_words = true;
  std::vector<std::pair<std::string, uint32_t>> spanning;  // token text, offset of its U+2581
};

// SentencePiece BPE (llama.cpp "SPM"): start from UTF-8 characters, repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token (ties: leftmost), then
// fall back to <0xXX> byte tokens for what is left.
class SpmEncoder {
 public:
  SpmEncoder(const Vocab& vocab, const SpmTables& tables) : vocab_(vocab), tables_(tables) {}
  void encode(std::string_view escaped, std::vector<int32_t>& out);

 private:
  void encode_segment(std::string_view segment, std::vector<int32_t>& out);
  void try_add_bigram(std::string_view segment, int32_t left, int32_t right);

  struct Symbol {
    uint32_t start, len;
    int32_t prev, next;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
  };

  const Vocab& vocab_;
  const SpmTables& tables_;
  tokenizer_detail::WordCache cache_;
  std::vector<Symbol> symbols_;
  std::vector<Bigram> heap_;
};

// Byte-level BPE tables, compiled once from a Vocab: token texts and merges taken out of
// GPT-2's bytes-to-unicode form into raw bytes, and every string a merge can produce
// given a small integer id ("piece"), so merging compares integers.
struct BpeTables {
  static std::unique_ptr<BpeTables> build(const Vocab& vocab);

  int32_t find_piece(std::string_view raw) const { return pieces.find(raw); }  // -1 if none
  struct Merge {
    int32_t rank;
    int32_t result;  // piece id of left + right
  };
  const Merge* find_merge(int32_t left, int32_t right) const;

  tokenizer_detail::StringTable pieces;  // piece id -> raw bytes, and back
  std::vector<int32_t> piece_token;      // piece -> token id, or Vocab::kNoToken

  // Merges in an open-addressing table keyed by left piece << 32 | right piece: merge
  // lookups dominate encoding, and a flat table costs one cache miss per lookup.
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  std::vector<MergeSlot> merge_slots;  // size is a power of two
  int merge_shift = 64;                // hash >> shift = slot
  void insert_merge(int32_t left, int32_t right, Merge merge);  // keeps the first one
  int32_t byte_piece[256];
  // What llama.cpp emits for a byte left in a symbol that is no token: the tokens whose
  // text is one byte of that byte's mapped UTF-8 form.
  std::vector<int32_t> byte_fallback[256];
};

class BpeEncoder {
 public:
  BpeEncoder(const Vocab& vocab, const BpeTables& tables) : vocab_(vocab), tables_(tables) {}
  // Encodes one pre-token (raw bytes): lowest-rank merge first, ties leftmost.
  void encode_word(std::string_view word, std::vector<int32_t>& out);

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out);
  void try_add_bigram(int32_t left, int32_t right);

  struct Symbol {
    uint32_t start, len;
    int32_t piece;
    int32_t prev, next;
  };
  struct Bigram {
    int32_t rank;
    int32_t left, right;
    int32_t result;
    uint32_t size;
  };

  const Vocab& vocab_;
  const BpeTables& tables_;
  tokenizer_detail::WordCache cache_;
  std::vector<Symbol> symbols_;
  std::vector<Bigram> heap_;
};

}  // namespace ridge
