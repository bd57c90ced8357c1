// Speculative decoding on the real models users run (fetched by scripts/fetch-models;
// scripts/test fetches them): greedy output with each proposer is token for token the
// output without it, alone and batched with other requests. Qwen2.5-Coder 1.5B drafts
// with Qwen2.5-Coder 0.5B (same vocabulary); Gemma 3 270M with n-gram lookup (its
// sliding-window layers roll back through windows).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace ridge {
namespace {

using test::cached_model;

namespace fs = std::filesystem;

std::vector<std::vector<int32_t>> generate(Engine& engine, const std::vector<RequestParams>& requests,
                                           int32_t* accepted) {
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(std::vector<RequestParams>(requests));
  std::vector<std::vector<int32_t>> out;
  for (auto& s : streams) {
    std::vector<int32_t> tokens;
    for (StreamEvent ev; s->next(ev);) {
      tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) *accepted += ev.spec_accepted;
    }
    out.push_back(std::move(tokens));
  }
  return out;
}

// A code edit (most of the answer repeats the prompt) and a free continuation. Without a
// chat template the code is repeated `repeat` times, to run past a sliding window.
std::vector<RequestParams> requests(const Tokenizer& tok, bool chatml, int32_t max_tokens, int repeat = 1) {
  const std::string code =
      "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n"
      "    return 2 * (width + height)\n\n\ndef describe(width, height):\n"
      "    print('area', area(width, height))\n    print('perimeter', perimeter(width, height))\n";
  std::vector<std::string> texts;
  if (chatml) {
    texts.push_back("<|im_start|>user\nRename the parameter `height` to `h` everywhere in this code and print the "
                    "whole file:\n\n" + code + "<|im_end|>\n<|im_start|>assistant\n");
    texts.push_back("<|im_start|>user\nWrite a short story about a lighthouse.<|im_end|>\n<|im_start|>assistant\n");
  } else {
    std::string repeated;
    for (int i = 0; i < repeat; ++i) repeated += code + "\n\n";
    texts.push_back(repeated + code.substr(0, 60));
    texts.push_back("The lighthouse keeper climbed the stairs every night, and");
  }
  std::vector<RequestParams> out;
  for (const std::string& t : texts) {
    RequestParams p;
    p.prompt = tok.encode(t);
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    out.push_back(std::move(p));
  }
  return out;
}

void expect_same_greedy_output(const std::string& target_name, const std::string& draft_name, SpecMethod method,
                               bool chatml, int32_t max_tokens, int repeat = 1) {
  const std::string target_path = cached_model(target_name);
  if (target_path.empty()) GTEST_SKIP() << target_name << " is not in the model cache (scripts/fetch-models)";
  auto target = Model::load(target_path, {.n_threads = 2, .max_batch_tokens = 128});
  std::unique_ptr<Model> draft;
  if (!draft_name.empty()) {
    const std::string draft_path = cached_model(draft_name);
    if (draft_path.empty()) GTEST_SKIP() << draft_name << " is not in the model cache";
    draft = Model::load(draft_path, {.max_batch_tokens = 128, .pool = &target->pool()});
  }
  const Tokenizer tok = Tokenizer::from_gguf(target->file());
  const std::vector<RequestParams> reqs = requests(tok, chatml, max_tokens, repeat);
  EngineOptions o;
  o.parallel = 3;
  o.max_batch_tokens = 128;
  o.n_ctx = 1024;
  ASSERT_LT(reqs[0].prompt.size() + static_cast<size_t>(max_tokens), static_cast<size_t>(o.n_ctx));
  if (repeat > 1) {
    ASSERT_GT(reqs[0].prompt.size(), 520u) << "the prompt should outgrow a 512-token window";
  }
  o.prefix_cache = false;
  int32_t unused = 0;
  std::vector<std::vector<int32_t>> plain;
  {
    Engine e(*target, tok, o);
    e.start();
    for (const RequestParams& p : reqs) plain.push_back(generate(e, {p}, &unused)[0]);
  }
  o.speculative.method = method;
  o.speculative.adaptive = false;  // draft every step: the most verification there can be
  o.speculative.draft_max = 5;
  Engine e(*target, tok, o, draft.get());
  e.start();
  int32_t accepted = 0;
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(generate(e, {reqs[i]}, &accepted)[0], plain[i]) << "alone, request " << i;
  // Batched: both requests and a third, unrelated one, in the same steps.
  std::vector<RequestParams> batch = reqs;
  batch.push_back(reqs[1]);
  batch.back().prompt.resize(batch.back().prompt.size() / 2);
  const std::vector<std::vector<int32_t>> got = generate(e, batch, &accepted);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], plain[i]) << "batched, request " << i;
  EXPECT_GT(accepted, max_tokens / 2) << "speculation should have accepted drafts";
  const EngineMetrics m = e.metrics();
  EXPECT_GT(m.spec_draft_tokens_total, m.spec_accepted_tokens_total) << "and rejected some";
}

TEST(SpeculativeRealModels, QwenCoderWithItsSmallSiblingAsDraft) {
  expect_same_greedy_output("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", SpecMethod::kDraftModel, true, 48);
}

TEST(SpeculativeRealModels, QwenCoderWithNgramLookup) {
  expect_same_greedy_output("qwen2.5-coder-1.5b", "", SpecMethod::kNgram, true, 48);
}

TEST(SpeculativeRealModels, Gemma3WithNgramLookupAcrossItsSlidingWindows) {
  // The code prompt is ~610 tokens: decoding runs past the 512-token window, where
  // rejected drafts roll back over recycled window blocks.
  expect_same_greedy_output("gemma3-270m", "", SpecMethod::kNgram, false, 64, /*repeat=*/9);
}

}  // namespace
}  // namespace ridge
