// decode(encode(text)) == text on real text, for the fixture vocabularies and the real
// model vocabularies when scripts/fetch-models has fetched them.
#include <gtest/gtest.h>

#include "tokenizer_fixtures.h"

namespace ridge {
namespace {

constexpr size_t kWikiBytes = 100 * 1024;

// Round trip through decode, and through the streamed pieces one token at a time.
void expect_round_trip(const Tokenizer& tok, const std::string& text, const std::string& name,
                       bool prose = true) {
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_FALSE(ids.empty());
  const std::string decoded = tok.decode(ids);
  if (decoded != text) {
    size_t at = 0;
    while (at < decoded.size() && at < text.size() && decoded[at] == text[at]) ++at;
    FAIL() << name << ": round trip differs at byte " << at << ": expected '"
           << test::escaped(text.substr(at, 40)) << "', got '"
           << test::escaped(decoded.substr(at, 40)) << "'";
  }
  std::string streamed;
  for (int32_t id : ids) streamed += tok.token_to_piece(id);
  const std::string prefix = tok.vocab().add_space_prefix() ? " " : "";
  EXPECT_EQ(streamed, prefix + text) << name << ": streamed pieces differ";
  // English prose needs far fewer tokens than bytes; a broken merge would not.
  if (prose) {
    EXPECT_LT(ids.size(), text.size() / 3) << name;
  }
}

class FixtureRoundTrip : public testing::TestWithParam<const char*> {};

TEST_P(FixtureRoundTrip, WikiText) {
  expect_round_trip(test::fixture_tokenizer(GetParam()), test::wiki_text(kWikiBytes), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureRoundTrip,
                         testing::Values("llama-spm", "gpt-2", "qwen2", "llama-bpe", "phi-3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(FixtureRoundTrip, MixedScriptsAndWhitespace) {
  const std::string text =
      "  Tabs\tand\n\nnewlines \r\n ünïcödé — 日本語のテキスト 🦙🚀 123456789 \u00a0nbsp  ";
  for (const char* name : {"llama-spm", "gpt-2", "qwen2", "llama-bpe", "mpt", "starcoder"}) {
    expect_round_trip(test::fixture_tokenizer(name), text, name, /*prose=*/false);
  }
}

class ModelRoundTrip : public testing::TestWithParam<const char*> {};

TEST_P(ModelRoundTrip, WikiText) {
  const Tokenizer* tok = test::model_tokenizer(GetParam());
  if (tok == nullptr) {
    GTEST_SKIP() << GetParam() << " not fetched (scripts/fetch-models --path " << GetParam() << ")";
  }
  expect_round_trip(*tok, test::wiki_text(kWikiBytes), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, ModelRoundTrip,
                         testing::Values("gemma3-270m", "qwen2.5-coder-0.5b"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ModelVocab, Gemma3SpecialTokens) {
  const Tokenizer* tok = test::model_tokenizer("gemma3-270m");
  if (tok == nullptr) GTEST_SKIP() << "gemma3-270m not fetched (scripts/fetch-models --path gemma3-270m)";
  const Vocab& v = tok->vocab();
  EXPECT_EQ(v.type(), VocabType::kSentencePiece);
  EXPECT_EQ(v.n_tokens(), 262144);
  EXPECT_FALSE(v.add_space_prefix());
  const int32_t start = v.find("<start_of_turn>");
  const int32_t end = v.find("<end_of_turn>");
  ASSERT_NE(start, Vocab::kNoToken);
  ASSERT_NE(end, Vocab::kNoToken);
  EXPECT_EQ(tok->eot(), end);
  EXPECT_TRUE(tok->is_end_of_generation(end));
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos()));
  const std::vector<int32_t> ids = tok->encode("<start_of_turn>user\nHi<end_of_turn>\n");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids[0], tok->bos());
  EXPECT_EQ(ids[1], start);
  EXPECT_EQ(ids[ids.size() - 2], end);
  // No dummy prefix: "Hello" and " Hello" differ.
  EXPECT_NE(tok->encode("Hello", false), tok->encode(" Hello", false));
  EXPECT_EQ(tok->decode(tok->encode(" Hello", false)), " Hello");
}

TEST(ModelVocab, Qwen25ChatTokens) {
  const Tokenizer* tok = test::model_tokenizer("qwen2.5-coder-0.5b");
  if (tok == nullptr) {
    GTEST_SKIP() << "qwen2.5-coder-0.5b not fetched (scripts/fetch-models --path qwen2.5-coder-0.5b)";
  }
  EXPECT_EQ(tok->n_vocab(), 151936);
  EXPECT_EQ(tok->encode("<|im_start|>system\n", true, true).front(), 151644);
  EXPECT_TRUE(tok->is_end_of_generation(151645));
  // <tool_call> is user-defined: matched even without parse_special.
  EXPECT_EQ(tok->encode("<tool_call>", false, false), (std::vector<int32_t>{151657}));
}

}  // namespace
}  // namespace ridge
