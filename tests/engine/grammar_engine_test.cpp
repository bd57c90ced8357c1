// Constrained decoding in the engine: output follows the request's grammar (greedy and
// sampled, alone and batched with unconstrained requests, which stay unchanged), and with
// speculative decoding (n-gram lookup, a draft model) greedy constrained output is token for
// token the output without speculation.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace ridge {
namespace {

using test::collect;
using test::Output;
using test::stories;

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf) {
  return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
}

// Whether text is a complete sentence of g (or, when !complete, a prefix of one).
bool follows(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text, bool complete) {
  grammar::Automaton a(g);
  const int32_t s = a.step(a.start(), text);
  return s != grammar::Automaton::kDead && (!complete || a.complete(s));
}

const char* kStoryGrammar = R"(root ::= "Once upon a time, " sentence{2,3}
sentence ::= [A-Za-z] [a-z ,]{1,40} ". ")";

TEST(GrammarEngine, OutputFollowsTheGrammarGreedyAndSampled) {
  auto& m = stories();
  Engine engine(*m.model, *m.tokenizer, {.parallel = 4, .max_batch_tokens = 128, .n_ctx = 256});
  engine.start();
  const auto g = compile(kStoryGrammar);
  std::vector<RequestParams> batch;
  for (int i = 0; i < 4; ++i) {
    RequestParams p;
    p.prompt = m.tokenizer->encode("Once upon a time");
    p.max_tokens = 150;
    p.sampling.temperature = i == 0 ? 0.0f : 1.0f;
    p.sampling.seed = 100 + static_cast<uint64_t>(i);
    p.grammar = g;
    batch.push_back(std::move(p));
  }
  RequestParams free;  // unconstrained, in the same steps
  free.prompt = m.tokenizer->encode("Once upon a time");
  free.max_tokens = 40;
  free.sampling.temperature = 0;
  RequestParams free_alone = free;
  batch.push_back(std::move(free));
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(std::move(batch));
  for (size_t i = 0; i + 1 < streams.size(); ++i) {
    const Output out = collect(*streams[i]);
    EXPECT_EQ(out.reason, FinishReason::kStop) << i << ": " << out.text << " " << out.error;
    EXPECT_TRUE(follows(g, out.text, true)) << i << ": '" << out.text << "'";
  }
  const Output batched_free = collect(*streams.back());
  const Output alone = collect(*engine.submit(std::move(free_alone)));
  EXPECT_EQ(batched_free.tokens, alone.tokens);
  EXPECT_FALSE(follows(g, alone.text, false)) << "the model left alone should not happen to follow the grammar";
}

TEST(GrammarEngine, ACompleteSentenceEndsGeneration) {
  auto& m = stories();
  Engine engine(*m.model, *m.tokenizer, {.parallel = 1, .max_batch_tokens = 64, .n_ctx = 128});
  engine.start();
  RequestParams p;
  p.prompt = m.tokenizer->encode("Once upon a time");
  p.max_tokens = 50;
  p.sampling.temperature = 0;
  p.sampling.logprobs = true;
  p.sampling.n_logprobs = 5;
  p.grammar = compile(R"(root ::= " there was a " ("cat" | "dog") ".")");
  const Output out = collect(*engine.submit(std::move(p)));
  EXPECT_EQ(out.reason, FinishReason::kStop);
  EXPECT_TRUE(out.text == " there was a cat." || out.text == " there was a dog.") << out.text;
  // Refused tokens are no alternatives: every reported logprob is finite, fewer than 5 where
  // the grammar allows fewer tokens.
  bool fewer = false;
  for (const std::vector<TokenLogprob>& top : out.top_logprobs) {
    fewer = fewer || top.size() < 5;
    for (const TokenLogprob& t : top) EXPECT_TRUE(std::isfinite(t.logprob)) << t.token;
  }
  EXPECT_TRUE(fewer);
}

TEST(GrammarEngine, AGrammarThatFailsEndsOnlyItsOwnRequest) {
  auto& m = stories();
  Engine engine(*m.model, *m.tokenizer, {.parallel = 2, .max_batch_tokens = 64, .n_ctx = 128});
  engine.start();
  RequestParams bad;
  bad.prompt = m.tokenizer->encode("Once upon a time");
  bad.max_tokens = 60;
  bad.sampling.temperature = 0;
  bad.grammar = compile(R"(root ::= [a-z ,] root "y" | [a-z ,] root "z" | "")");  // 2^n parses after n bytes
  RequestParams good = bad;
  good.grammar = nullptr;
  std::vector<RequestParams> batch;
  batch.push_back(std::move(bad));
  batch.push_back(std::move(good));
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(std::move(batch));
  const Output failed = collect(*streams[0]);
  EXPECT_EQ(failed.reason, FinishReason::kError);
  EXPECT_NE(failed.error.find("too ambiguous"), std::string::npos) << failed.error;
  const Output fine = collect(*streams[1]);
  EXPECT_EQ(fine.reason, FinishReason::kLength);
  EXPECT_EQ(fine.completion_tokens, 60);
}

// Qwen2.5-Coder 0.5B asked to repeat a JSON object (n-gram lookup drafts most of it), under
// a JSON Schema grammar; and as its own draft model (unconstrained drafts the grammar cuts).
void expect_speculation_keeps_constrained_output(SpecMethod method) {
  const std::string path = test::cached_model("qwen2.5-coder-0.5b");
  if (path.empty()) GTEST_SKIP() << "qwen2.5-coder-0.5b is not in the model cache (scripts/fetch-models)";
  auto model = Model::load(path, {.n_threads = 2, .max_batch_tokens = 128});
  std::unique_ptr<Model> draft;
  if (method == SpecMethod::kDraftModel) draft = Model::load(path, {.max_batch_tokens = 128, .pool = &model->pool()});
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  // "full_name" where the prompt says "name", one of its two "langs": the model's own choice
  // is refused there, so verification must mask its rows to pick what plain constrained
  // decoding picks (the draft-model case fails without the masks; n-gram drafts here stop
  // before those positions, so that case checks equality and draft truncation).
  const std::string schema = R"({"type": "object", "properties": {"full_name": {"type": "string"},
      "langs": {"type": "array", "items": {"type": "string"}, "maxItems": 1}, "age": {"type": "integer"}},
      "required": ["full_name", "langs", "age"], "additionalProperties": false})";
  const auto g = compile(grammar::json_schema_to_gbnf(schema));
  RequestParams p;
  p.prompt = tok.encode(
      "<|im_start|>user\nCopy this JSON exactly, with the age changed to 41: {\"name\": \"Ada Lovelace\", \"langs\": "
      "[\"analytical engine\", \"notes\"], \"age\": 36}<|im_end|>\n<|im_start|>assistant\n");
  p.max_tokens = 40;
  p.sampling.temperature = 0;
  p.grammar = g;
  EngineOptions o{.parallel = 2, .max_batch_tokens = 128, .n_ctx = 512};
  o.prefix_cache = false;
  Output plain;
  {
    Engine e(*model, tok, o);
    e.start();
    plain = collect(*e.submit(p));
  }
  EXPECT_TRUE(follows(g, plain.text, plain.reason == FinishReason::kStop)) << plain.text;
  o.speculative.method = method;
  o.speculative.adaptive = false;
  o.speculative.draft_max = 5;
  Engine e(*model, tok, o, draft.get());
  e.start();
  const Output spec = collect(*e.submit(p));
  EXPECT_EQ(spec.tokens, plain.tokens) << "plain: " << plain.text << "\nspeculative: " << spec.text;
  EXPECT_GT(spec.spec_accepted, 0) << "drafts should have been accepted";
}

TEST(GrammarEngine, NgramSpeculationKeepsGreedyConstrainedOutput) {
  expect_speculation_keeps_constrained_output(SpecMethod::kNgram);
}

TEST(GrammarEngine, DraftModelSpeculationKeepsGreedyConstrainedOutput) {
  expect_speculation_keeps_constrained_output(SpecMethod::kDraftModel);
}

}  // namespace
}  // namespace ridge
