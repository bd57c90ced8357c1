#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ridge {
namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyBos = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kKeyEos = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kKeyEot = "tokenizer.ggml.eot_token_id";
constexpr std::string_view kKeyEom = "tokenizer.ggml.eom_token_id";
constexpr std::string_view kKeyUnk = "tokenizer.ggml.unknown_token_id";
constexpr std::string_view kKeySep = "tokenizer.ggml.seperator_token_id";  // sic, as in GGUF
constexpr std::string_view kKeyPad = "tokenizer.ggml.padding_token_id";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

// Per-pre-tokenizer flags as llama.cpp sets them (its regexes live in PreTokenizer).
struct PreFlags {
  bool ignore_merges = false;
  bool add_bos = false;
  bool clean_spaces = true;
  bool no_bos = false;
};

PreFlags pre_flags(std::string_view pre) {
  static constexpr std::string_view kLlama3[] = {
      "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
      "midm-2.0", "lfm2", "jina-v5-nano"};
  static constexpr std::string_view kNoCleanSpaces[] = {
      "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu", "command-r",
      "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35", "poro-chat", "viking",
      "tekken", "smollm", "chameleon", "gpt-4o", "llama4", "kanana2", "talkie",
      "granite-embed-multi-97m", "tiny_aya", "cohere2moe", "superbpe", "trillion",
      "granite-docling", "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan",
      "hunyuan-dense", "hy_v4", "joyai-llm", "kimi-k2", "ufakzeka", "grok-2", "afmoe",
      "laguna", "minimax-m2", "solar-open", "sarvam-moe"};
  auto in = [&](std::span<const std::string_view> names) {
    return std::find(names.begin(), names.end(), pre) != names.end();
  };
  PreFlags flags;
  if (in(kLlama3)) {
    flags.ignore_merges = true;
    flags.add_bos = true;
  }
  if (pre == "tekken") {
    flags.ignore_merges = true;
    flags.add_bos = true;
  }
  if (pre == "minicpm5" || pre == "youtu" || pre == "granite-embed-multi-97m") {
    flags.ignore_merges = true;
  }
  if (pre == "chameleon") flags.add_bos = true;
  if (pre == "glm4" || pre == "chatglm-bpe") flags.no_bos = true;
  if (in(kNoCleanSpaces)) flags.clean_spaces = false;
  return flags;
}

// Token texts llama.cpp uses to find end-of-turn and fill-in-the-middle tokens that
// the converter did not name in metadata (first listed wins here, for determinism).
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                             "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};

bool parse_byte_token(std::string_view text, uint8_t& byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return false;
  byte = static_cast<uint8_t>(hi * 16 + lo);
  return true;
}

std::string prefix(const std::string& origin) { return origin.empty() ? "vocab: " : origin + ": "; }

// --- GGUF reading -------------------------------------------------------------------

const gguf::Array& typed_array(const gguf::File& file, std::string_view key,
                               const gguf::Array& array, bool (*ok)(gguf::ValueType),
                               std::string_view expected) {
  if (!ok(array.elem_type())) {
    throw Error(str_cat(file.name(), ": key '", key, "' is an array of ",
                        gguf::value_type_name(array.elem_type()), ", expected ", expected));
  }
  return array;
}

bool is_string_type(gguf::ValueType t) { return t == gguf::ValueType::STRING; }
bool is_number_type(gguf::ValueType t) {
  return t != gguf::ValueType::STRING && t != gguf::ValueType::ARRAY &&
         t != gguf::ValueType::BOOL;
}
bool is_integer_type(gguf::ValueType t) {
  return is_number_type(t) && t != gguf::ValueType::FLOAT32 && t != gguf::ValueType::FLOAT64;
}

std::optional<int32_t> read_token_id(const gguf::File& file, std::string_view key) {
  if (!file.has(key)) return std::nullopt;
  const int64_t value = file.get_i64(key);
  // 0xFFFFFFFF is how some converters spell "none" in a uint32 key.
  if (value < 0 || value == 0xFFFFFFFFll) return Vocab::kNoToken;
  if (value > INT32_MAX) {
    throw Error(str_cat(file.name(), ": key '", key, "' = ", value, " is not a valid token id"));
  }
  return static_cast<int32_t>(value);
}

std::optional<bool> read_flag(const gguf::File& file, std::string_view key) {
  if (!file.has(key)) return std::nullopt;
  return file.get_bool(key);
}

}  // namespace

class Vocab::Strings {
 public:
  explicit Strings(const std::vector<std::string>* list) : list_(list) {}
  explicit Strings(const gguf::Array* array) : array_(array) {}  // null: no strings
  size_t size() const {
    return list_ != nullptr ? list_->size() : array_ != nullptr ? array_->size() : 0;
  }
  std::string_view operator[](size_t i) const {
    return list_ != nullptr ? std::string_view((*list_)[i]) : array_->string_at(i);
  }

 private:
  const std::vector<std::string>* list_ = nullptr;
  const gguf::Array* array_ = nullptr;
};

std::string_view token_type_name(TokenType type) {
  switch (type) {
    case TokenType::kUndefined: return "UNDEFINED";
    case TokenType::kNormal: return "NORMAL";
    case TokenType::kUnknown: return "UNKNOWN";
    case TokenType::kControl: return "CONTROL";
    case TokenType::kUserDefined: return "USER_DEFINED";
    case TokenType::kUnused: return "UNUSED";
    case TokenType::kByte: return "BYTE";
  }
  return "?";
}

Vocab Vocab::from_gguf(const gguf::File& file) {
  VocabSpec spec;
  spec.origin = file.name();
  const std::string model = file.get_string(kKeyModel);
  if (model == "llama") {
    spec.type = VocabType::kSentencePiece;
  } else if (model == "gpt2") {
    spec.type = VocabType::kBytePairEncoding;
  } else {
    static constexpr std::pair<std::string_view, std::string_view> kKnown[] = {
        {"bert", "WordPiece (BERT)"}, {"t5", "Unigram (T5)"}, {"rwkv", "RWKV"},
        {"plamo2", "PLaMo-2"}, {"gemma4", "Gemma 4 BPE"}, {"none", "no vocabulary"},
        {"no_vocab", "no vocabulary"}, {"hybriddna", "hybrid DNA BPE"},
        {"whitespace", "whitespace BPE"}};
    for (const auto& [name, what] : kKnown) {
      if (model == name) {
        throw Error(str_cat(file.name(), ": ", kKeyModel, " = '", model, "' (", what,
                            ") is not supported; ridge reads 'llama' (SentencePiece BPE) "
                            "and 'gpt2' (byte-level BPE) vocabularies"));
      }
    }
    throw Error(str_cat(file.name(), ": unknown ", kKeyModel, " = '", model, "'"));
  }
  spec.pre = file.get_string(kKeyPre, "");
  spec.model_name = file.get_string("general.name", "");

  // Token texts and merges are read in place: copying them into the VocabSpec first
  // would hold every string twice while the Vocab is built.
  const gguf::Array* tokens = file.find_array(kKeyTokens);
  if (tokens == nullptr) {
    throw Error(str_cat(file.name(), ": missing metadata key '", kKeyTokens,
                        "': the file carries no tokenizer vocabulary"));
  }
  typed_array(file, kKeyTokens, *tokens, is_string_type, "strings");

  if (const gguf::Array* scores = file.find_array(kKeyScores)) {
    typed_array(file, kKeyScores, *scores, is_number_type, "numbers");
    spec.scores.reserve(scores->size());
    for (size_t i = 0; i < scores->size(); ++i)
      spec.scores.push_back(static_cast<float>(scores->at(i).as_f64()));
  }
  if (const gguf::Array* types = file.find_array(kKeyTypes)) {
    typed_array(file, kKeyTypes, *types, is_integer_type, "integers");
    spec.types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      const int64_t t = types->at(i).as_i64();
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
        throw Error(str_cat(file.name(), ": ", kKeyTypes, "[", i, "] = ", t,
                            " is not a token type (0..6)"));
      }
      spec.types.push_back(static_cast<TokenType>(t));
    }
  }
  const gguf::Array* merges = file.find_array(kKeyMerges);
  if (merges != nullptr) {
    typed_array(file, kKeyMerges, *merges, is_string_type, "strings");
  } else if (spec.type == VocabType::kBytePairEncoding) {
    throw Error(str_cat(file.name(), ": missing metadata key '", kKeyMerges,
                        "', which a 'gpt2' (BPE) vocabulary needs"));
  }

  spec.bos_id = read_token_id(file, kKeyBos);
  spec.eos_id = read_token_id(file, kKeyEos);
  spec.eot_id = read_token_id(file, kKeyEot);
  spec.eom_id = read_token_id(file, kKeyEom);
  spec.unk_id = read_token_id(file, kKeyUnk);
  spec.sep_id = read_token_id(file, kKeySep);
  spec.pad_id = read_token_id(file, kKeyPad);
  spec.add_bos = read_flag(file, kKeyAddBos);
  spec.add_eos = read_flag(file, kKeyAddEos);
  spec.add_space_prefix = read_flag(file, kKeyAddSpacePrefix);
  return build(spec, Strings(tokens), Strings(merges));
}

Vocab Vocab::from_spec(VocabSpec spec) {
  return build(spec, Strings(&spec.tokens), Strings(&spec.merges));
}

Vocab Vocab::build(VocabSpec& spec, const Strings& tokens, const Strings& merges) {
  const std::string where = prefix(spec.origin);
  const size_t n = tokens.size();
  if (n == 0) throw Error(str_cat(where, kKeyTokens, " is empty"));
  if (n > static_cast<size_t>(INT32_MAX)) throw Error(str_cat(where, kKeyTokens, " is too long"));
  if (!spec.scores.empty() && spec.scores.size() != n) {
    throw Error(str_cat(where, kKeyScores, " has ", spec.scores.size(), " entries but ",
                        kKeyTokens, " has ", n));
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    throw Error(str_cat(where, kKeyTypes, " has ", spec.types.size(), " entries but ",
                        kKeyTokens, " has ", n));
  }

  Vocab v;
  v.type_ = spec.type;
  v.pre_ = spec.pre.empty() ? "default" : spec.pre;
  size_t text_bytes = 0;
  for (size_t i = 0; i < n; ++i) text_bytes += tokens[i].size();
  v.texts_.reserve(n, text_bytes, n);
  v.attrs_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view text = tokens[i];
    const TokenType type = spec.types.empty() ? TokenType::kNormal : spec.types[i];
    if (type > TokenType::kByte) {
      throw Error(str_cat(where, kKeyTypes, "[", i, "] = ", static_cast<int>(type),
                          " is not a token type (0..6)"));
    }
    uint8_t byte = 0;
    if (type == TokenType::kByte && !parse_byte_token(text, byte)) {
      throw Error(str_cat(where, "token ", i, " '", text,
                          "' has type BYTE but is not spelled <0xXX>"));
    }
    v.attrs_[i].type = type;
    const int32_t id = v.texts_.append(text);
    // Empty texts are unreachable by encoding; a repeated text keeps its first id.
    if (!text.empty()) v.texts_.index(id);
  }
  v.scores_ = std::move(spec.scores);
  if (v.scores_.empty()) v.scores_.assign(n, 0.0f);

  size_t merge_bytes = 0;
  for (size_t i = 0; i < merges.size(); ++i) merge_bytes += merges[i].size();
  v.merges_.reserve(merges.size(), merge_bytes, 0);
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos) {
      throw Error(str_cat(where, kKeyMerges, "[", i, "] = '", m,
                          "' is not of the form 'left right'"));
    }
    v.merges_.append(m);
  }
  if (v.type_ == VocabType::kBytePairEncoding && v.merges_.size() == 0) {
    throw Error(str_cat(where, kKeyMerges, " is empty; a BPE vocabulary needs merges"));
  }

  for (int b = 0; b < 256; ++b) {
    char spelled[7];
    std::snprintf(spelled, sizeof spelled, "<0x%02X>", b);
    int32_t id = v.find(spelled);
    if (id == kNoToken) id = v.find(std::string(1, static_cast<char>(b)));
    v.byte_tokens_[b] = id;
  }

  v.resolve_specials(spec);
  v.detect_eog();
  v.build_special_list();
  v.apply_model_quirks(spec.model_name);
  return v;
}

void Vocab::resolve_specials(const VocabSpec& spec) {
  const std::string where = prefix(spec.origin);
  const bool spm = type_ == VocabType::kSentencePiece;
  const PreFlags flags = spm ? PreFlags{} : pre_flags(pre_);

  // llama.cpp defaults per tokenizer model; a default outside the vocab means "none".
  auto fallback = [&](int32_t id) { return contains(id) ? id : kNoToken; };
  bos_ = fallback(spm ? 1 : 11);
  eos_ = fallback(spm ? 2 : 11);
  unk_ = spm ? fallback(0) : kNoToken;
  if (flags.no_bos) bos_ = kNoToken;
  add_bos_ = spm || flags.add_bos;
  add_eos_ = false;
  add_space_prefix_ = spm;
  ignore_merges_ = !spm && flags.ignore_merges;
  clean_spaces_ = !spm && flags.clean_spaces;

  auto take = [&](const std::optional<int32_t>& given, std::string_view key, int32_t& id) {
    if (!given) return;
    if (*given < 0) {
      id = kNoToken;
    } else if (!contains(*given)) {
      throw Error(str_cat(where, key, " = ", *given, " is out of range for ", n_tokens(),
                          " tokens"));
    } else {
      id = *given;
    }
  };
  take(spec.bos_id, kKeyBos, bos_);
  take(spec.eos_id, kKeyEos, eos_);
  take(spec.eot_id, kKeyEot, eot_);
  take(spec.eom_id, kKeyEom, eom_);
  take(spec.unk_id, kKeyUnk, unk_);
  take(spec.sep_id, kKeySep, sep_);
  take(spec.pad_id, kKeyPad, pad_);
  if (spec.add_bos) add_bos_ = *spec.add_bos;
  if (spec.add_eos) add_eos_ = *spec.add_eos;
  if (spec.add_space_prefix) add_space_prefix_ = *spec.add_space_prefix;
  if (add_bos_ && bos_ == kNoToken) {
    throw Error(str_cat(where, kKeyAddBos, " is true but ", kKeyBos, " is not set"));
  }
  if (add_eos_ && eos_ == kNoToken) {
    throw Error(str_cat(where, kKeyAddEos, " is true but ", kKeyEos, " is not set"));
  }
}

void Vocab::detect_eog() {
  // A token named like a control token is treated as one even if typed otherwise.
  auto mark_control = [&](int32_t id) { attrs_[static_cast<size_t>(id)].type = TokenType::kControl; };
  auto first_of = [&](std::span<const std::string_view> texts) {
    for (std::string_view t : texts) {
      if (int32_t id = find(t); id != kNoToken) return id;
    }
    return kNoToken;
  };
  if (eot_ == kNoToken) {
    eot_ = first_of(kEotTexts);
    if (eot_ != kNoToken) mark_control(eot_);
  }
  if (eom_ == kNoToken) {
    eom_ = find("<|eom_id|>");
    if (eom_ != kNoToken) mark_control(eom_);
  }

  std::vector<int32_t> eog;
  for (auto texts : {std::span<const std::string_view>(kFimPadTexts),
                     std::span<const std::string_view>(kFimRepTexts),
                     std::span<const std::string_view>(kFimSepTexts)}) {
    if (int32_t id = first_of(texts); id != kNoToken) {
      mark_control(id);
      eog.push_back(id);
    }
  }
  for (std::string_view t : kEogTexts) {
    if (int32_t id = find(t); id != kNoToken) {
      mark_control(id);
      eog.push_back(id);
    }
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id != kNoToken) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ids_ = std::move(eog);
}

void Vocab::build_special_list() {
  special_tokens_.clear();
  for (int32_t id = 0; id < n_tokens(); ++id) {
    const TokenData& t = token(id);
    if (t.text.empty()) continue;
    if (t.type == TokenType::kControl || t.type == TokenType::kUserDefined ||
        t.type == TokenType::kUnknown) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return text(a).size() > text(b).size();
  });
}

void Vocab::apply_model_quirks(const std::string& model_name) {
  std::string name = model_name;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  // Phi-3's HF tokenizer strips whitespace to the right of its special tokens.
  for (int32_t id : special_tokens_) attrs_[static_cast<size_t>(id)].rstrip = true;
  if (int32_t id = find("</s>"); id != kNoToken) attrs_[static_cast<size_t>(id)].rstrip = true;
  for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (int32_t id = find(t); id != kNoToken) attrs_[static_cast<size_t>(id)].rstrip = false;
  }
}

TokenData Vocab::token(int32_t id) const {
  const TokenAttrs& a = attrs_[static_cast<size_t>(id)];
  return {text(id), score(id), a.type, a.lstrip, a.rstrip};
}

std::pair<std::string_view, std::string_view> Vocab::merge(size_t rank) const {
  const std::string_view m = merges_[static_cast<int32_t>(rank)];
  const size_t space = m.find(' ', 1);  // checked when built
  return {m.substr(0, space), m.substr(space + 1)};
}

bool Vocab::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace ridge
