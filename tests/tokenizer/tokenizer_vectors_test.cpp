// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0): every case of every fixture
// vocabulary must come out token for token, with add_special and parse_special off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tokenizer_fixtures.h"

namespace ridge {
namespace {

using test::escaped;
using test::join_ids;

// Runs all cases; reports each mismatch with input, expected and actual ids.
void expect_vectors(const Tokenizer& tok, const std::string& vector_name) {
  const std::vector<test::VectorCase> cases = test::read_test_vectors(vector_name);
  ASSERT_EQ(cases.size(), 46u) << vector_name;
  int passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> actual = tok.encode(cases[i].input, false, false);
    if (actual == cases[i].expected) {
      ++passed;
    } else {
      ADD_FAILURE() << vector_name << " case " << i << " '" << escaped(cases[i].input) << "'\n"
                    << "  expected: " << join_ids(cases[i].expected) << "\n"
                    << "  actual:   " << join_ids(actual);
    }
  }
  std::printf("[ vectors  ] %-16s %d/%zu\n", vector_name.c_str(), passed, cases.size());
}

class GgufVectors : public testing::TestWithParam<const char*> {};

TEST_P(GgufVectors, MatchLlamaCpp) { expect_vectors(test::fixture_tokenizer(GetParam()), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufVectors,
                         testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "mpt",
                                         "refact", "starcoder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(TiktokenVectors, Llama3MatchesLlamaCpp) {
  expect_vectors(test::fixture_tokenizer("llama-bpe"), "llama-bpe");
}

TEST(HfVectors, Qwen2MatchesLlamaCpp) { expect_vectors(test::fixture_tokenizer("qwen2"), "qwen2"); }

TEST(ModelVectors, Qwen25VocabMatchesQwen2Vectors) {
  const Tokenizer* tok = test::model_tokenizer("qwen2.5-coder-0.5b");
  if (tok == nullptr) {
    GTEST_SKIP() << "qwen2.5-coder-0.5b not fetched (scripts/fetch-models --path qwen2.5-coder-0.5b)";
  }
  expect_vectors(*tok, "qwen2");
}

}  // namespace
}  // namespace ridge
