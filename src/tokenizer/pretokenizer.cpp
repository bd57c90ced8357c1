#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace ridge {
namespace {

// The regexes below are the facts of llama.cpp's src/llama-vocab.cpp (llm_tokenizer_bpe),
// written as raw strings: "\r" "\n" there are either escapes or the characters themselves,
// which match the same. Names map to types as in llama_vocab::impl::load. A few code points
// are written as \u escapes (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A, U+F900): they
// have canonical singleton decompositions, so Unicode normalization in editors and tools
// silently turns them into other code points (U+2126 OHM SIGN into U+03A9, ...).

// GPT-2's pattern without the final |\s+ (which never changes the split: a lone whitespace
// before a non-space is left unmatched and becomes a piece of its own anyway).
constexpr std::string_view kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// The tokenizer.json spelling; llama.cpp recognizes it for its hand-written path too.
constexpr std::string_view kLlama3CaseInsensitive =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Not regexes: llama.cpp runs hand-written splitters when it sees these.
constexpr std::string_view kKimiK2 = R"re(\p{Han}+)re";
constexpr std::string_view kAfmoeDigits = R"re(\p{AFMoE_digits})re";

constexpr std::string_view kDeepseekV3Main =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kCjkKana = "[一-龥぀-ゟ゠-ヿ]+";
constexpr std::string_view kCjkHangul = "[一-龥ࠀ-一가-퟿]+";
constexpr std::string_view kScandinavian = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
constexpr std::string_view kGpt4oLike =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kCasedWords =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLines = R"re([^\n]+|[\n]+)re";

struct PreType {
  std::string_view label;  // llama.cpp's LLAMA_VOCAB_PRE_TYPE_<label>, to read beside it
  std::vector<std::string_view> names;
  std::vector<std::string_view> patterns;
  bool byte_encode = true;
};

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> types = {
      {"DEFAULT", {"default"}, {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {"LLAMA3",
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano", "dbrx", "smaug-bpe", "glm4", "chatglm-bpe"},
       {kLlama3}},
      {"JAIS2",
       {"jais-2"},
       {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re"}},
      {"DEEPSEEK_LLM",
       {"deepseek-llm"},
       {R"re([\r\n])re",
        R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
        R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re", kCjkHangul, R"re(\p{N}+)re"}},
      {"DEEPSEEK3_LLM",
       {"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"},
       {R"re(\p{N}{1,3})re", kCjkKana, kDeepseekV3Main}},
      {"SPARK2_5",
       {"spark2_5"},
       {R"re(\p{N}{1,3})re", kCjkKana,
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re",
        R"re(\p{N})re"}},
      {"YOUTU",
       {"youtu"},
       {"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
        R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"DEEPSEEK_CODER",
       {"deepseek-coder"},
       {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjkHangul, R"re(\p{N})re"}},
      {"FALCON", {"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}},
      {"STARCODER",
       {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"re(\p{N})re", kGpt2}},
      {"GPT2",
       {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
        "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo",
        "jais", "trillion", "granite-docling"},
       {kGpt2}},
      {"QWEN2",
       {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
        "grok-2"},
       {kQwen2}},
      {"QWEN35",
       {"qwen35"},
       {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"PORO", {"poro-chat", "bloom", "gpt3-finnish"}, {kScandinavian}},
      {"VIKING", {"viking"}, {kScandinavian, R"re(\p{N})re"}},
      {"TEKKEN",
       {"tekken"},
       {R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"CHAMELEON",
       {"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"re(([\t\n]|    |  ))re",
        R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2}},
      {"GPT4O", {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4oLike}},
      {"GRANITE_EMB_MULTI",
       {"granite-embed-multi-97m"},
       {R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"TINY_AYA", {"tiny_aya", "cohere2moe"}, {R"re(\d{1,3}(?=(?:\d{3})*\b))re", kCasedWords}},
      {"KIMI_K2", {"kimi-k2"}, {kKimiK2}},
      {"SUPERBPE", {"superbpe"}, {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"}},
      {"BAILINGMOE",
       {"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      {"SEED_CODER",
       {"seed-coder"},
       {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"UFAKZEKA",
       {"ufakzeka"},
       {R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {"AFMOE",
       {"afmoe"},
       {kAfmoeDigits, "[一-鿿㐀-䶿\uF900-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+", kDeepseekV3Main}},
      {"LAGUNA", {"laguna"}, {kLines, kQwen2}},
      {"EXAONE_MOE",
       {"exaone-moe"},
       {R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      // Gemma 4 and Sarvam replace spaces with U+2581 and merge raw UTF-8; they only cut lines.
      {"GEMMA4", {"gemma4", "granite-embed-multi-311m"}, {kLines}, false},
      {"SARVAM_MOE", {"sarvam-moe"}, {kLines}, false},
      {"MINICPM5",
       {"minicpm5"},
       {R"re(\p{N}{1,3})re",
        R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      // llama.cpp's whitespace tokenizer also drops the whitespace pieces; that is the
      // tokenizer's business, here they stay so the pieces cover the text.
      {"WHITESPACE", {"whitespace"}, {R"re(\S+)re"}, false},
  };
  return types;
}

// --- hand-written splitters ------------------------------------------------------------
// Each appends piece ends for text[begin, end) through Cuts; the GPT-2 and Llama-3 ones give
// exactly what their regex gives (tests compare them with the regex engine and Python).

class Cuts {
 public:
  Cuts(std::vector<size_t>& out, size_t begin) : out_(out), last_(begin) {}
  // Ends a piece at code point index at; an empty piece is dropped.
  void cut(size_t at) {
    if (at > last_) {
      out_.push_back(at);
      last_ = at;
    }
  }

 private:
  std::vector<size_t>& out_;
  size_t last_;
};

enum class Kind : uint8_t { kLetter, kNumber, kSpace, kOther };  // \p{L}, \p{N}, \s, the rest

Kind kind_at(const DecodedText& t, size_t i) {
  const uint8_t info = t.info(i);
  if (info & DecodedText::kWhitespaceBit) return Kind::kSpace;
  const uint32_t bit = 1u << (info & DecodedText::kCategoryBits);
  if (bit & unicode::kLetterMask) return Kind::kLetter;
  if (bit & unicode::kNumberMask) return Kind::kNumber;
  return Kind::kOther;
}

bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Length of 's 't 're 've 'm 'll 'd at pos (0 if none); ASCII case folded if fold_case.
size_t contraction_at(const DecodedText& t, size_t pos, size_t end, bool fold_case) {
  if (pos + 1 >= end || t.code_point(pos) != '\'') return 0;
  auto at = [&](size_t i) { return fold_case ? unicode::to_lower(t.code_point(i)) : t.code_point(i); };
  const uint32_t c1 = at(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const uint32_t c2 = at(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

//  ?[^\s\p{L}\p{N}]+[\r\n]*  at pos; returns the end, or pos if it does not match.
size_t punctuation_run_end(const DecodedText& t, size_t pos, size_t end, bool eat_newlines) {
  size_t p = pos;
  if (t.code_point(p) == ' ' && p + 1 < end && kind_at(t, p + 1) == Kind::kOther) ++p;
  if (kind_at(t, p) != Kind::kOther) return pos;
  while (p < end && kind_at(t, p) == Kind::kOther) ++p;
  while (eat_newlines && p < end && is_newline(t.code_point(p))) ++p;
  return p;
}

// At whitespace pos: \s*[\r\n]+ | \s+(?!\S) | \s+ , the Llama-3 whitespace alternatives.
size_t llama3_whitespace_end(const DecodedText& t, size_t pos, size_t end) {
  size_t p = pos;
  size_t after_last_newline = 0;
  while (p < end && t.is_whitespace(p)) {
    if (is_newline(t.code_point(p))) after_last_newline = p + 1;
    ++p;
  }
  if (after_last_newline != 0) return after_last_newline;
  if (p < end && p - pos > 1) return p - 1;  // leave the last space to the word after it
  return p;
}

void split_gpt2(const DecodedText& t, size_t begin, size_t end, Cuts& cuts) {
  size_t pos = begin;
  while (pos < end) {
    if (size_t n = contraction_at(t, pos, end, false)) {
      cuts.cut(pos += n);
      continue;
    }
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    const size_t q = (t.code_point(pos) == ' ' && pos + 1 < end && !t.is_whitespace(pos + 1)) ? pos + 1 : pos;
    const Kind kind = kind_at(t, q);
    if (kind != Kind::kSpace) {
      size_t p = q + 1;
      while (p < end && kind_at(t, p) == kind) ++p;
      cuts.cut(pos = p);
      continue;
    }
    // \s+(?!\S); a single whitespace before a non-space is left unmatched, a piece anyway.
    size_t p = pos;
    while (p < end && t.is_whitespace(p)) ++p;
    cuts.cut(pos = (p < end && p - pos > 1) ? p - 1 : p);
  }
}

// Llama 3 (max_digits 3) and Qwen 2 (max_digits 1).
void split_llama3(const DecodedText& t, size_t begin, size_t end, size_t max_digits, Cuts& cuts) {
  size_t pos = begin;
  while (pos < end) {
    if (size_t n = contraction_at(t, pos, end, true)) {
      cuts.cut(pos += n);
      continue;
    }
    const uint32_t cp = t.code_point(pos);
    const Kind kind = kind_at(t, pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (kind == Kind::kLetter ||
        (kind != Kind::kNumber && !is_newline(cp) && pos + 1 < end && kind_at(t, pos + 1) == Kind::kLetter)) {
      size_t p = pos + 1;
      while (p < end && kind_at(t, p) == Kind::kLetter) ++p;
      cuts.cut(pos = p);
      continue;
    }
    // \p{N}{1,max_digits}
    if (kind == Kind::kNumber) {
      size_t p = pos + 1;
      while (p < end && p - pos < max_digits && kind_at(t, p) == Kind::kNumber) ++p;
      cuts.cut(pos = p);
      continue;
    }
    if (size_t p = punctuation_run_end(t, pos, end, true); p != pos) {
      cuts.cut(pos = p);
      continue;
    }
    cuts.cut(pos = llama3_whitespace_end(t, pos, end));
  }
}

// Han as llama.cpp's unicode_cpt_is_han defines it (CJK ideograph blocks).
bool is_han(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2EBEF && !(cp >= 0x2A6E0 && cp <= 0x2A6FF)) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Kimi K2: llama.cpp's hand-written version of
//   [\p{Han}]+ | [^\r\n\p{L}\p{N}]?<non-Han letters>+(contraction)? | \p{N}{1,3}
//   |  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// where "letters" are \p{L} only (its cased-letter classes are not told apart).
void split_kimi_k2(const DecodedText& t, size_t begin, size_t end, Cuts& cuts) {
  auto non_han_letter = [&](size_t i) {
    return i < end && kind_at(t, i) == Kind::kLetter && !is_han(t.code_point(i));
  };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t cp = t.code_point(pos);
    const Kind kind = kind_at(t, pos);
    if (is_han(cp)) {
      size_t p = pos + 1;
      while (p < end && is_han(t.code_point(p))) ++p;
      cuts.cut(pos = p);
      continue;
    }
    const bool can_lead = !is_newline(cp) && kind != Kind::kLetter && kind != Kind::kNumber;
    if (non_han_letter(pos) || (can_lead && non_han_letter(pos + 1))) {
      size_t p = can_lead ? pos + 1 : pos;
      while (non_han_letter(p)) ++p;
      p += contraction_at(t, p, end, true);
      cuts.cut(pos = p);
      continue;
    }
    if (kind == Kind::kNumber) {
      size_t p = pos + 1;
      while (p < end && p - pos < 3 && kind_at(t, p) == Kind::kNumber) ++p;
      cuts.cut(pos = p);
      continue;
    }
    if (size_t p = punctuation_run_end(t, pos, end, true); p != pos) {
      cuts.cut(pos = p);
      continue;
    }
    cuts.cut(pos = llama3_whitespace_end(t, pos, end));
  }
}

// AFMoE digits: each run of \p{N} splits into its leading len % 3 digits, then groups of
// three. As in llama.cpp, the text before a run is not cut off on its own: it stays in the
// piece with the run's first group (later regexes separate it again).
void split_afmoe_digits(const DecodedText& t, size_t begin, size_t end, Cuts& cuts) {
  size_t pos = begin;
  while (pos < end) {
    if (kind_at(t, pos) != Kind::kNumber) {
      ++pos;
      continue;
    }
    size_t run_end = pos;
    while (run_end < end && kind_at(t, run_end) == Kind::kNumber) ++run_end;
    size_t group = pos + (run_end - pos) % 3;
    cuts.cut(group);
    for (; group < run_end; group += 3) cuts.cut(group + 3);
    pos = run_end;
  }
  cuts.cut(end);
}

}  // namespace

struct PreTokenizer::Stage {
  enum class Kind { kRegex, kGpt2, kLlama3, kKimiK2, kAfmoeDigits };
  Kind kind = Kind::kRegex;
  size_t max_digits = 3;  // kLlama3
  std::optional<Regex> regex;

  static Stage make(std::string_view pattern, bool fast_paths) {
    Stage s;
    if (pattern == kKimiK2) {
      s.kind = Kind::kKimiK2;
    } else if (pattern == kAfmoeDigits) {
      s.kind = Kind::kAfmoeDigits;
    } else if (fast_paths && pattern == kGpt2) {
      s.kind = Kind::kGpt2;
    } else if (fast_paths && (pattern == kLlama3 || pattern == kLlama3CaseInsensitive || pattern == kQwen2)) {
      s.kind = Kind::kLlama3;
      s.max_digits = pattern == kQwen2 ? 1 : 3;
    } else {
      s.regex.emplace(pattern, RegexOptions{.llama_cpp = true});
    }
    return s;
  }

  void apply(const DecodedText& t, size_t begin, size_t end, Cuts& cuts,
             std::vector<Regex::Match>& scratch) const {
    switch (kind) {
      case Kind::kGpt2:
        split_gpt2(t, begin, end, cuts);
        break;
      case Kind::kLlama3:
        split_llama3(t, begin, end, max_digits, cuts);
        break;
      case Kind::kKimiK2:
        split_kimi_k2(t, begin, end, cuts);
        break;
      case Kind::kAfmoeDigits:
        split_afmoe_digits(t, begin, end, cuts);
        break;
      case Kind::kRegex:
        scratch.clear();
        regex->find_all(t, begin, end, scratch);
        for (const Regex::Match& m : scratch) {
          cuts.cut(m.begin);  // the unmatched stretch before the match
          cuts.cut(m.end);
        }
        cuts.cut(end);
        break;
    }
  }
};

PreTokenizer PreTokenizer::for_name(std::string_view pre) {
  for (const PreType& type : pre_types()) {
    if (std::find(type.names.begin(), type.names.end(), pre) == type.names.end()) continue;
    std::vector<std::string> patterns(type.patterns.begin(), type.patterns.end());
    PreTokenizer p = from_patterns(std::string(pre), std::move(patterns));
    p.byte_encode_ = type.byte_encode;
    return p;
  }
  std::string known;
  for (const std::string& name : known_names()) known += (known.empty() ? "" : ", ") + name;
  throw Error(str_cat("pre-tokenizer: unknown tokenizer.ggml.pre '", pre, "'; known: ", known));
}

PreTokenizer PreTokenizer::from_patterns(std::string name, std::vector<std::string> patterns, bool fast_paths) {
  auto stages = std::make_shared<std::vector<Stage>>();
  for (const std::string& pattern : patterns) {
    try {
      stages->push_back(Stage::make(pattern, fast_paths));
    } catch (const Error& e) {
      throw Error(str_cat("pre-tokenizer '", name, "': ", e.what()));
    }
  }
  PreTokenizer p;
  p.name_ = std::move(name);
  p.patterns_ = std::move(patterns);
  p.stages_ = std::move(stages);
  return p;
}

std::vector<std::string> PreTokenizer::known_names() {
  std::vector<std::string> names;
  for (const PreType& type : pre_types()) names.insert(names.end(), type.names.begin(), type.names.end());
  std::sort(names.begin(), names.end());
  return names;
}

void PreTokenizer::split(const DecodedText& text, std::vector<size_t>& piece_ends) const {
  if (text.size() == 0) return;
  std::vector<size_t> ends{text.size()};
  std::vector<size_t> next;
  std::vector<Regex::Match> scratch;
  for (const Stage& stage : *stages_) {
    next.clear();
    next.reserve(ends.size() * 2);
    size_t begin = 0;
    for (size_t end : ends) {
      Cuts cuts(next, begin);
      stage.apply(text, begin, end, cuts, scratch);
      begin = end;
    }
    ends.swap(next);
  }
  piece_ends.insert(piece_ends.end(), ends.begin(), ends.end());
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  const DecodedText decoded(text);
  std::vector<size_t> ends;
  split(decoded, ends);
  std::vector<std::string_view> pieces;
  pieces.reserve(ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    const size_t from = decoded.byte_offset(begin);
    pieces.push_back(text.substr(from, decoded.byte_offset(end) - from));
    begin = end;
  }
  return pieces;
}

}  // namespace ridge
