// Tokenizer: text <-> token ids for SentencePiece-BPE and byte-level BPE vocabularies,
// matching llama.cpp token for token (special-token splitting, dummy prefix, byte fallback,
// pre-tokenizer regexes, merge order).
//
//   gguf::File f = gguf::File::open("model.gguf");
//   Tokenizer tok = Tokenizer::from_gguf(f);
//   std::vector<int32_t> ids = tok.encode("Hello world");   // BOS added if the model wants it
//   std::string text = tok.decode(ids);                     // "Hello world"
//   for (int32_t id : ids) std::cout << tok.token_to_piece(id);   // streaming
//
// Encoding is const and keeps no shared state, so one Tokenizer serves many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ridge::gguf {
class File;
}

namespace ridge {

class PreTokenizer;
struct BpeTables;
struct SpmTables;

// A stretch of bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

struct DecodeOptions {
  // Print CONTROL and UNKNOWN tokens (BOS, <|im_end|>, ...) as their text; off, they
  // print nothing, as llama.cpp does without `special`.
  bool render_special = false;
  // Vocabs that add a dummy-prefix space (SentencePiece) lose one leading space on the
  // first token after an optional BOS, so decode(encode(text)) == text.
  bool strip_leading_space = true;
  // llama.cpp's clean_up_tokenization_spaces (" ," -> ",", " 's" -> "'s") where the
  // vocab asks for it. Off by default: it is lossy, and streamed pieces never get it.
  bool clean_up_spaces = false;
};

class Tokenizer {
 public:
  // Throws ridge::Error when the BPE pre-tokenizer (tokenizer.ggml.pre) is unknown.
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: BOS/EOS as the vocab asks (add_bos_token / add_eos_token).
  // parse_special: CONTROL tokens written in the text ("<|im_start|>") become their ids;
  // USER_DEFINED tokens are always matched, as in llama.cpp.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  // A prompt made of trusted markup (a chat template's "<|im_start|>user\n") and untrusted
  // content (what a client sent): CONTROL tokens are recognised only where their whole
  // text lies inside one of the `markup` ranges (sorted, not overlapping); special-token
  // text in content is tokenized as text. Raw text is still tokenized across the
  // boundaries, so content without special-token text gets exactly the tokens of
  // encode(text, add_special, /*parse_special=*/true).
  std::vector<int32_t> encode_with_markup(std::string_view text, std::span<const TextRange> markup,
                                          bool add_special = true) const;
  // Throws ridge::Error on an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // The bytes one token stands for (may be part of a UTF-8 character); the view lives as
  // long as the Tokenizer (moving it keeps views valid).
  std::string_view token_to_piece(int32_t id, bool render_special = false) const;

  int32_t bos() const { return vocab_.bos(); }  // Vocab::kNoToken when absent
  int32_t eos() const { return vocab_.eos(); }
  int32_t eot() const { return vocab_.eot(); }
  bool is_end_of_generation(int32_t id) const { return vocab_.is_eog(id); }
  int32_t n_vocab() const { return vocab_.n_tokens(); }
  const Vocab& vocab() const { return vocab_; }

 private:
  struct Fragment {
    int32_t token;          // Vocab::kNoToken for raw text
    std::string_view text;  // raw text when token is kNoToken
  };
  // markup: when given, CONTROL tokens are split out only inside these ranges.
  std::vector<Fragment> split_special(std::string_view text, bool parse_special,
                                      const std::span<const TextRange>* markup = nullptr) const;
  std::vector<int32_t> encode_fragments(std::span<const Fragment> fragments, size_t text_size,
                                        bool add_special) const;
  void build_special_trie();
  void build_pieces();
  void check_id(int32_t id) const;

  Vocab vocab_;
  std::unique_ptr<const PreTokenizer> pre_;  // BPE only
  std::unique_ptr<const BpeTables> bpe_;     // BPE only
  std::unique_ptr<const SpmTables> spm_;     // SPM only

  // Trie over the texts of special tokens, for finding them in one pass.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t rank = -1;  // index into vocab_.special_tokens() when a token ends here
  };
  std::vector<TrieNode> trie_;
  bool trie_first_byte_[256] = {};

  // Decoded bytes per token id (special tokens' text), back to back in one buffer;
  // CONTROL and UNKNOWN ones print only on request.
  tokenizer_detail::StringTable pieces_;
};

// How two tokenizers map ids differently, for an error message ("" when they map every id
// to the same token): the sizes, BOS or EOS, or the first id whose text or end-of-
// generation mark differs. A draft model must agree with its target on every id: its
// drafted ids go to the target as they are.
std::string vocabulary_difference(const Tokenizer& a, const Tokenizer& b);

}  // namespace ridge
