// Pre-tokenizers: every llama.cpp name, golden splits of the fixture strings (from Python's
// regex module), hand-written splitters against the regex engine, llama.cpp's quirks, speed.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace ridge {
namespace {

using Pieces = std::vector<std::string_view>;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The 46 test strings of llama.cpp's test-tokenizer-0 (.inp format, see fixtures/README.md).
std::vector<std::string> fixture_cases() {
  const std::string text = read_file(std::string(RIDGE_FIXTURES) + "/vocab/ggml-vocab-gpt-2.gguf.inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find(separator, pos);
    if (end == std::string::npos) break;
    cases.push_back(text.substr(pos, end - pos));
    pos = end + separator.size();
  }
  return cases;
}

const std::string& wiki_text() {
  static const std::string text = read_file(std::string(RIDGE_FIXTURES) + "/text/wiki.test.raw");
  return text;
}

// Random strings over an alphabet of every character kind the patterns treat differently.
std::vector<std::string> random_cases(size_t count, uint32_t seed) {
  static const std::vector<std::string> alphabet = {
      "a", "Z", "s", "S", "t", "d", "l", "L", "e", "r", "v", "m", "'", "0", "7", "!", ".", ",", "~",
      "$", "+", "<", "_", "/", "(", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\x01",
      "\xC3\xA9", "\xC3\x80", "\xC3\x9F", "\xCE\xA3", "\xE4\xB8\xAD", "\xE3\x81\x82", "\xEA\xB0\x80",
      "\xCC\x81", "\xD9\xA3", "\xE2\x85\xAB", "\xC2\xBD", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
      "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\xE2\x80\x8B", "\xE3\x80\x82", "\xEF\xBC\x81",
      "\xFF", "\xE2\x82"};  // the last two are malformed UTF-8
  std::mt19937 rng(seed);
  std::vector<std::string> out(count);
  for (std::string& s : out) {
    const size_t n = rng() % 24;
    for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  }
  return out;
}

Pieces split(std::string_view name, std::string_view text) { return PreTokenizer::for_name(name).split(text); }

TEST(PreTokenizer, KnowsEveryLlamaCppName) {
  const std::vector<std::string> names = PreTokenizer::known_names();
  EXPECT_GE(names.size(), 90u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "duplicate name";
  for (const char* required :
       {"default", "llama3", "llama-v3", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3",
        "falcon", "mpt", "starcoder", "gpt-2", "refact", "command-r", "stablelm2", "qwen2", "olmo", "dbrx",
        "smaug-bpe", "poro-chat", "jais", "chatglm-bpe", "viking", "tekken", "smollm", "codeshell", "bloom",
        "gpt3-finnish", "exaone", "chameleon", "minerva-7b", "megrez", "gpt-4o", "superbpe", "trillion",
        "bailingmoe", "llama4", "pixtral", "seed-coder", "kimi-k2", "afmoe", "qwen35", "gemma4"}) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), required)) << required;
  }
  for (const std::string& name : names) {
    const PreTokenizer pre = PreTokenizer::for_name(name);
    EXPECT_EQ(pre.name(), name);
    EXPECT_FALSE(pre.patterns().empty()) << name;
    EXPECT_EQ(split(name, "Hello world").size() >= 1, true) << name;
  }
}

TEST(PreTokenizer, UnknownNameThrowsListingKnownNames) {
  try {
    PreTokenizer::for_name("no-such-tokenizer");
    FAIL() << "expected ridge::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("no-such-tokenizer"), std::string::npos) << message;
    EXPECT_NE(message.find("llama-bpe"), std::string::npos) << message;
    EXPECT_NE(message.find("qwen2"), std::string::npos) << message;
  }
}

TEST(PreTokenizer, ByteEncodingFlag) {
  EXPECT_TRUE(PreTokenizer::for_name("gpt-2").byte_encode());
  EXPECT_TRUE(PreTokenizer::for_name("llama-bpe").byte_encode());
  EXPECT_FALSE(PreTokenizer::for_name("gemma4").byte_encode());
  EXPECT_FALSE(PreTokenizer::for_name("whitespace").byte_encode());
}

// Golden file: piece byte lengths of the fixture strings from Python's regex module.
TEST(PreTokenizer, FixtureSplitsEqualPythonRegexModule) {
  const std::vector<std::string> cases = fixture_cases();
  ASSERT_EQ(cases.size(), 46u);
  std::istringstream golden(read_file(std::string(RIDGE_SOURCE_DIR) + "/tests/tokenizer/golden/pretokenizer_splits.txt"));
  std::string line;
  size_t checked = 0;
  while (std::getline(golden, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    size_t index = 0;
    fields >> name >> index;
    std::vector<size_t> expected;
    for (size_t n; fields >> n;) expected.push_back(n);
    ASSERT_LT(index, cases.size());
    std::vector<size_t> got;
    for (std::string_view piece : split(name, cases[index])) got.push_back(piece.size());
    EXPECT_EQ(got, expected) << name << " case " << index << ": '" << cases[index] << "'";
    ++checked;
  }
  EXPECT_EQ(checked, 3u * 46u);
}

TEST(PreTokenizer, FixtureExamples) {
  const std::string_view text = "Hello world!! I'm   fine\n\n  123456";
  EXPECT_EQ(split("gpt-2", text),
            (Pieces{"Hello", " world", "!!", " I", "'m", "  ", " fine", "\n\n ", " 123456"}));
  EXPECT_EQ(split("llama-bpe", text),
            (Pieces{"Hello", " world", "!!", " I", "'m", "  ", " fine", "\n\n", " ", " ", "123", "456"}));
  EXPECT_EQ(split("qwen2", "I'M 2024"), (Pieces{"I", "'M", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(split("llama-bpe", "\t\tx  \n y"), (Pieces{"\t", "\tx", "  \n", " y"}));
  EXPECT_EQ(split("deepseek-llm", "I'm  \n  "), (Pieces{"I", "'", "m", "  ", "\n", "  "}));
  EXPECT_EQ(split("deepseek-coder", "x = foo(1)"), (Pieces{"x", " =", " foo", "(", "1", ")"}));
  EXPECT_EQ(split("default", "Hello, 2024 world!!"), (Pieces{"Hello", ",", " ", "202", "4", " world", "!!"}));
  EXPECT_EQ(split("bloom", "Hello, world. Ok"), (Pieces{"Hello", ",", " world", ".", " Ok"}));
  EXPECT_EQ(split("gpt-4o", "HelloWorld it's"), (Pieces{"Hello", "World", " it's"}));
  EXPECT_EQ(split("chameleon", "<sentinel:12>IMGIMGABZ  x"),
            (Pieces{"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ", "  ", "x"}));
  EXPECT_EQ(split("whitespace", "a b  c"), (Pieces{"a", " ", "b", "  ", "c"}));
  EXPECT_EQ(split("gemma4", "a b\n\nc"), (Pieces{"a b", "\n\n", "c"}));
  EXPECT_EQ(split("superbpe", "x1234567y"), (Pieces{"x", "1", "234", "567", "y"}));
  EXPECT_EQ(split("tiny_aya", "1234567 abc"), (Pieces{"1", "234", "567", " abc"}));
  EXPECT_EQ(split("gpt-2", ""), Pieces{});
}

// Where llama.cpp's std::regex path differs from plain Unicode regex semantics, we follow it.
TEST(PreTokenizer, ReproducesLlamaCppCategoryQuirks) {
  // \p{Lu} means \p{L}: Youtu does not cut "HelloWorld" at the capital (GPT-4o's spelling does).
  EXPECT_EQ(split("youtu", "HelloWorld"), (Pieces{"HelloWorld"}));
  // '~' is not \p{S}: DeepSeek-V3 leaves it unmatched instead of joining it with '/'.
  EXPECT_EQ(split("deepseek-v3", "~/ ~\xC3\xA9"), (Pieces{"~", "/", " ", "~\xC3\xA9"}));
  // U+3000 counts as \s but not as itself. DeepSeek-LLM's \s?[...\u3000-\u3002]+ takes one
  // U+3000 as the optional space but not the other as a range member, and its CJK regex
  // [\u4E00-\u9FA5\u0800-\u4E00...]+ then takes the U+3002 but neither U+3000 (with plain
  // Unicode semantics all three would stay one piece).
  EXPECT_EQ(split("deepseek-llm", "a\xE3\x80\x80\xE3\x80\x80\xE3\x80\x82"),
            (Pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80", "\xE3\x80\x82"}));
}

TEST(PreTokenizer, KimiK2HandWrittenSplitter) {
  EXPECT_EQ(split("kimi-k2", "\xE4\xBD\xA0\xE5\xA5\xBDworld's 1234"),
            (Pieces{"\xE4\xBD\xA0\xE5\xA5\xBD", "world's", " ", "123", "4"}));
  EXPECT_EQ(split("kimi-k2", "Hello  world\n\n!!\n"), (Pieces{"Hello", " ", " world", "\n\n", "!!\n"}));
  EXPECT_EQ(split("kimi-k2", " \xE4\xB8\xAD" "a"), (Pieces{" ", "\xE4\xB8\xAD", "a"}));
}

TEST(PreTokenizer, AfmoeDigitGroups) {
  // Alone, the digit stage keeps the text before a run with its first group, as llama.cpp does.
  const PreTokenizer digits = PreTokenizer::from_patterns("afmoe-digits", {R"(\p{AFMoE_digits})"});
  EXPECT_EQ(digits.split("ab12345 x"), (Pieces{"ab12", "345", " x"}));
  EXPECT_EQ(digits.split("123456"), (Pieces{"123", "456"}));
  // The later regexes separate it again.
  EXPECT_EQ(split("afmoe", "ab12345 x"), (Pieces{"ab", "12", "345", " x"}));
}

// Our hand-written GPT-2 / Llama 3 / Qwen 2 splitters must give what the regexes give.
TEST(PreTokenizer, FastPathsEqualTheRegexEngine) {
  std::vector<std::string> texts = fixture_cases();
  for (std::string& s : random_cases(3000, 7)) texts.push_back(std::move(s));
  texts.push_back(wiki_text());
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2"}) {
    const PreTokenizer fast = PreTokenizer::for_name(name);
    const PreTokenizer slow = PreTokenizer::from_patterns(name, fast.patterns(), false);
    for (const std::string& text : texts) {
      ASSERT_EQ(fast.split(text), slow.split(text)) << name << ": '" << text.substr(0, 200) << "'";
    }
  }
}

TEST(PreTokenizer, PiecesCoverTheTextInOrder) {
  std::vector<std::string> texts = random_cases(200, 11);
  texts.push_back(wiki_text().substr(0, 65536));
  texts.push_back("bad \xFF\xFE utf8 \xE2\x82 end");
  for (const std::string& name : PreTokenizer::known_names()) {
    const PreTokenizer pre = PreTokenizer::for_name(name);
    for (const std::string& text : texts) {
      const Pieces pieces = pre.split(text);
      const char* next = text.data();
      for (std::string_view piece : pieces) {
        ASSERT_FALSE(piece.empty()) << name;
        ASSERT_EQ(piece.data(), next) << name << ": '" << text.substr(0, 100) << "'";
        next += piece.size();
      }
      ASSERT_EQ(next, text.data() + text.size()) << name;
    }
  }
}

TEST(PreTokenizer, MalformedUtf8SplitsAsReplacementCharacters) {
  EXPECT_EQ(split("gpt-2", "ab\xFF" "cd"), (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split("llama-bpe", "ab \xFF\xFE!"), (Pieces{"ab", " \xFF\xFE!"}));
}

// Loose bound against pathological slowness; the real figure is in bench/.
TEST(PreTokenizer, SplitsOneMegabyteQuickly) {
  std::string text;
  while (text.size() < (1u << 20)) text += wiki_text();
  text.resize(1u << 20);
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "gpt-4o", "deepseek-v3", "jais-2"}) {
    const PreTokenizer pre = PreTokenizer::for_name(name);
    const auto start = std::chrono::steady_clock::now();
    const Pieces pieces = pre.split(text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GT(pieces.size(), 100000u) << name;
    EXPECT_LT(seconds, 3.0) << name;
  }
}

}  // namespace
}  // namespace ridge
