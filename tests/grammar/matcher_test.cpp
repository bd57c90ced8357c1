// Token masks: the trie walk allows exactly the tokens a token-by-token check allows, on a
// small vocabulary and on a real model's (Qwen2.5, 151k tokens); end-of-generation only at
// a complete state; and the walk's time per mask.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../tokenizer/tokenizer_fixtures.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace ridge::grammar {
namespace {

// The reference: token t is allowed iff its bytes, one by one, keep the automaton alive
// (or it ends generation at a complete state).
std::vector<bool> brute_force(Automaton& a, const TokenTrie& trie, int32_t state) {
  std::vector<bool> allowed(static_cast<size_t>(trie.n_tokens()));
  for (int32_t t = 0; t < trie.n_tokens(); ++t) {
    if (trie.is_eog(t))
      allowed[static_cast<size_t>(t)] = a.complete(state);
    else
      allowed[static_cast<size_t>(t)] = !trie.piece(t).empty() && a.step(state, trie.piece(t)) != Automaton::kDead;
  }
  return allowed;
}

void expect_mask_matches(GrammarMatcher& m, Automaton& reference, const TokenTrie& trie, int32_t state,
                         int32_t reference_state, const std::string& where) {
  const TokenMask& mask = m.mask(state);
  const std::vector<bool> expected = brute_force(reference, trie, reference_state);
  int32_t n_expected = 0, mismatches = 0;
  for (int32_t t = 0; t < trie.n_tokens(); ++t) {
    n_expected += expected[static_cast<size_t>(t)] ? 1 : 0;
    if (mask.allows(t) != expected[static_cast<size_t>(t)] && ++mismatches <= 5)
      ADD_FAILURE() << where << ": token " << t << " '" << trie.piece(t) << "' mask " << mask.allows(t);
  }
  EXPECT_EQ(mask.n_allowed, n_expected) << where;
}

TEST(TokenMask, SmallVocabularyMatchesTokenByTokenCheck) {
  auto trie = std::make_shared<const TokenTrie>(
      TokenTrie({"a", "ab", "abc", "b", "", "ba", "\"", "a\"", "ab", "<eos>", "c"}, {9}));
  auto g = std::make_shared<const Grammar>(parse_gbnf(R"(root ::= "a" [bc]* "\"")"));
  GrammarMatcher m(g, trie);
  Automaton reference(g);
  expect_mask_matches(m, reference, *trie, m.state(), reference.start(), "start");
  EXPECT_TRUE(m.mask(m.state()).allows(0));   // "a"
  EXPECT_TRUE(m.mask(m.state()).allows(2));   // "abc"
  EXPECT_TRUE(m.mask(m.state()).allows(8));   // a duplicate piece
  EXPECT_FALSE(m.mask(m.state()).allows(3));  // "b"
  EXPECT_FALSE(m.mask(m.state()).allows(4));  // no text
  EXPECT_FALSE(m.mask(m.state()).allows(9));  // end of generation: not complete yet
  ASSERT_TRUE(m.accept(1));                   // "ab"
  EXPECT_FALSE(m.accept(0));                  // "a" cannot follow
  ASSERT_TRUE(m.accept(7) == false);          // "a\"" neither
  ASSERT_TRUE(m.accept(6));                   // "\"": complete
  EXPECT_TRUE(m.complete());
  const TokenMask& done = m.mask(m.state());
  EXPECT_EQ(done.n_allowed, 1);
  EXPECT_TRUE(done.allows(9));
}

TEST(TokenMask, ApplyMaskRefusesWithMinusInfinity) {
  auto trie = std::make_shared<const TokenTrie>(TokenTrie({"x", "y", "xy"}, {}));
  GrammarMatcher m(std::make_shared<const Grammar>(parse_gbnf(R"(root ::= "x" "y"?)")), trie);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};  // one padded row entry past the vocabulary
  EXPECT_EQ(m.apply_mask(m.state(), logits), 2);
  EXPECT_EQ(logits[0], 1.0f);
  EXPECT_TRUE(std::isinf(logits[1]) && logits[1] < 0);
  EXPECT_EQ(logits[2], 3.0f);
  EXPECT_TRUE(std::isinf(logits[3]));
}

// A JSON-schema grammar on Qwen2.5's vocabulary, along a generated answer: at each state the
// trie walk gives the brute-force mask; the walk's time is reported (no-cache, fresh states).
TEST(TokenMask, RealVocabularyAlongAJsonAnswer) {
  const Tokenizer* tok = test::model_tokenizer("qwen2.5-coder-0.5b");
  if (tok == nullptr) GTEST_SKIP() << "qwen2.5-coder-0.5b is not in the model cache (scripts/fetch-models)";
  auto trie = std::make_shared<const TokenTrie>(TokenTrie::from_tokenizer(*tok));
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}}, "score": {"type": "number"},
      "ok": {"type": "boolean"}}, "required": ["name", "tags", "score", "ok"], "additionalProperties": false})";
  auto g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(schema)));
  const std::string answer = R"({"name": "Zoë \"Z\" Ng", "tags": ["a", "b"], "score": -1.25e2, "ok": true})";
  const std::vector<int32_t> tokens = tok->encode(answer, /*add_special=*/false);

  GrammarMatcher m(g, trie);
  Automaton reference(g);
  int32_t ref_state = reference.start();
  double total_ms = 0;
  int32_t n_masks = 0;
  for (size_t i = 0; i <= tokens.size(); ++i) {
    GrammarMatcher fresh(g, trie);  // no cached masks, no cached transitions: the worst case
    for (size_t k = 0; k < i; ++k) ASSERT_TRUE(fresh.accept(tokens[k]));  // walks only the path
    const int32_t s = fresh.state();
    const auto t0 = std::chrono::steady_clock::now();
    fresh.mask(s);
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++n_masks;
    if (i % 3 == 0 || i == tokens.size()) expect_mask_matches(m, reference, *trie, m.state(), ref_state, str_cat("after ", i, " tokens"));
    if (i == tokens.size()) break;
    ASSERT_TRUE(m.mask(m.state()).allows(tokens[i])) << "token " << i << " '" << tok->token_to_piece(tokens[i]) << "'";
    ASSERT_TRUE(m.accept(tokens[i]));
    ref_state = reference.step(ref_state, trie->piece(tokens[i]));
  }
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.mask(m.state()).allows(tok->vocab().eog_ids()[0]));
  // The steady state: the same answer again, every state's mask cached, applied to a row.
  GrammarMatcher again(g, trie);
  for (int32_t t : tokens) ASSERT_TRUE(again.accept(t));  // same states, discovered
  again.set_state(again.automaton().start());
  std::vector<float> row(static_cast<size_t>(trie->n_tokens()), 0.0f);
  for (int32_t t : tokens) {
    again.mask(again.state());
    ASSERT_TRUE(again.accept(t));
  }
  again.set_state(again.automaton().start());
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t t : tokens) {
    again.apply_mask(again.state(), row);
    again.accept(t);
  }
  const double cached_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / tokens.size();
  std::printf("[ mask ] %d masks over %d tokens: uncached %.2f ms each on average; cached, applied to a row and "
              "advanced: %.3f ms per token\n",
              n_masks, trie->n_tokens(), total_ms / n_masks, cached_ms);
}

}  // namespace
}  // namespace ridge::grammar
