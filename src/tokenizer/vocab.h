// Vocab: the token table and tokenizer settings of a model, read from GGUF metadata
// (tokenizer.ggml.*) or built from plain C++ data, validated, with llama.cpp's defaults.
//
//   gguf::File f = gguf::File::open("model.gguf");
//   Vocab vocab = Vocab::from_gguf(f);          // throws ridge::Error naming the bad key
//   int32_t id = vocab.find("▁the");            // -1 if absent
//
//   VocabSpec spec;                             // or build one directly (tests, other formats)
//   spec.type = VocabType::kBytePairEncoding;
//   spec.pre = "gpt-2";
//   spec.tokens = {...};  spec.merges = {"Ġ t", ...};
//   Vocab v = Vocab::from_spec(std::move(spec));
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/string_table.h"

namespace ridge::gguf {
class File;
}

namespace ridge {

// tokenizer.ggml.model: "llama" is SentencePiece BPE (Llama 2, Gemma), "gpt2" is
// byte-level BPE (GPT-2, Llama 3, Qwen).
enum class VocabType { kSentencePiece, kBytePairEncoding };

// tokenizer.ggml.token_type values (the GGUF integers).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// One token's entry, put together on request (Vocab keeps texts, scores and types in
// separate flat arrays); text points into the Vocab.
struct TokenData {
  std::string_view text;  // as stored: SPM with U+2581 for spaces, BPE in GPT-2 byte-mapped form
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
  bool lstrip = false;  // when parsed as a special token, eat whitespace on its left
  bool rstrip = false;  // ... and on its right (llama.cpp sets these for Phi-3)
};

// Everything a vocabulary is made of, one field per GGUF key; unset optionals take the
// llama.cpp default for the type. Field names in errors use the GGUF key names.
struct VocabSpec {
  VocabType type = VocabType::kSentencePiece;
  std::string pre;                   // tokenizer.ggml.pre (BPE pre-tokenizer); "" = "default"
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores; empty = all 0
  std::vector<TokenType> types;      // tokenizer.ggml.token_type; empty = all NORMAL
  std::vector<std::string> merges;   // tokenizer.ggml.merges: "left right", rank order (BPE)
  std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string model_name;  // general.name: llama.cpp keys a few per-model quirks on it
  std::string origin;      // where the data came from, prefixed to error messages
};

class Vocab {
 public:
  static constexpr int32_t kNoToken = -1;

  // Reads tokenizer.ggml.* (and general.name). Rejects tokenizer models other than
  // "llama" and "gpt2" with an error naming the model.
  static Vocab from_gguf(const gguf::File& file);
  // Validates: array lengths agree, ids in range, merges well formed, byte tokens
  // spelled <0xXX>. A text that occurs twice keeps its first id for encoding; the
  // later ids still decode.
  static Vocab from_spec(VocabSpec spec);

  VocabType type() const { return type_; }
  const std::string& pre() const { return pre_; }  // "default" when unset
  int32_t n_tokens() const { return texts_.size(); }
  bool contains(int32_t id) const { return id >= 0 && id < n_tokens(); }
  TokenData token(int32_t id) const;
  std::string_view text(int32_t id) const { return texts_[id]; }
  float score(int32_t id) const { return scores_[static_cast<size_t>(id)]; }
  TokenType token_type(int32_t id) const { return attrs_[static_cast<size_t>(id)].type; }
  int32_t find(std::string_view text) const { return texts_.find(text); }  // kNoToken when absent

  // BPE merges in rank order, split at the first space after position 0.
  size_t n_merges() const { return static_cast<size_t>(merges_.size()); }
  std::pair<std::string_view, std::string_view> merge(size_t rank) const;

  int32_t bos() const { return bos_; }  // kNoToken when the vocab has none
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  int32_t unk() const { return unk_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // BPE: a pre-token that is itself a token is emitted without merging (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }
  // llama.cpp's clean_up_tokenization_spaces for this pre-tokenizer (" ," -> ",").
  bool clean_spaces() const { return clean_spaces_; }

  bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, EOM and their kin
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }

  // Tokens found in text before tokenization (CONTROL, USER_DEFINED, UNKNOWN), longest
  // text first, ties by id: the order llama.cpp matches them in.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }

  // SPM byte fallback: the <0xXX> token for a byte, else the one-byte token, else kNoToken.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }

 private:
  struct TokenAttrs {
    TokenType type = TokenType::kNormal;
    bool lstrip = false, rstrip = false;
  };
  class Strings;  // token texts or merges, from a VocabSpec or read in place from GGUF
  // from_spec's checks and construction, with the token texts and merges passed apart
  // from spec so that from_gguf can read them in place.
  static Vocab build(VocabSpec& spec, const Strings& tokens, const Strings& merges);

  void resolve_specials(const VocabSpec& spec);
  void detect_eog();
  void apply_model_quirks(const std::string& model_name);
  void build_special_list();

  VocabType type_ = VocabType::kSentencePiece;
  std::string pre_ = "default";
  // Token texts by id; the index finds the first id of each non-empty text.
  tokenizer_detail::StringTable texts_;
  std::vector<float> scores_;
  std::vector<TokenAttrs> attrs_;
  tokenizer_detail::StringTable merges_;  // "left right" by rank, not indexed
  int32_t bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken;
  int32_t unk_ = kNoToken, sep_ = kNoToken, pad_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool ignore_merges_ = false, clean_spaces_ = false;
  std::vector<int32_t> eog_ids_;  // sorted
  std::vector<int32_t> special_tokens_;
  int32_t byte_tokens_[256];
};

std::string_view token_type_name(TokenType type);

}  // namespace ridge
