// What a test reads from a request's stream, collected: the engine tests' common helper.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge::test {

// stories260K (a tiny real Llama from the fixtures), loaded once per test binary for
// batches of up to 128 tokens.
struct StoriesModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

inline StoriesModel& stories() {
  static StoriesModel f = [] {
    StoriesModel x;
    x.model = Model::load(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf",
                          {.n_threads = 2, .max_batch_tokens = 128});
    x.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(x.model->file()));
    return x;
  }();
  return f;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t n_events = 0;
  int32_t spec_drafted = 0, spec_accepted = 0;
};

// Reads the stream to its end.
inline Output collect(RequestStream& stream) {
  Output out;
  for (StreamEvent ev; stream.next(ev);) {
    ++out.n_events;
    out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    out.text += ev.text;
    out.logprobs.insert(out.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    out.top_logprobs.insert(out.top_logprobs.end(), ev.top_logprobs.begin(), ev.top_logprobs.end());
    if (ev.finished) {
      out.reason = ev.finish_reason;
      out.error = ev.error;
      out.completion_tokens = ev.completion_tokens;
      out.cached_prompt_tokens = ev.cached_prompt_tokens;
      out.spec_drafted = ev.spec_drafted;
      out.spec_accepted = ev.spec_accepted;
    }
  }
  return out;
}

// Metrics once nothing runs or waits and no block (nor draft block) is held, or after 5 s.
inline EngineMetrics wait_until_idle(const Engine& engine) {
  EngineMetrics m = engine.metrics();
  for (int i = 0; i < 500 && (m.requests_running > 0 || m.requests_waiting > 0 || m.kv_blocks_used > 0 ||
                              m.draft_kv_blocks_used > 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = engine.metrics();
  }
  return m;
}

// A real model's GGUF in the model cache (RIDGE_MODEL_CACHE or ~/.cache/ridge/models),
// or "" when it has not been fetched.
inline std::string cached_model(const std::string& name) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("RIDGE_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path cache = env != nullptr && *env != '\0' ? fs::path(env) : fs::path(home ? home : ".") / ".cache/ridge/models";
  std::error_code ec;
  if (fs::is_directory(cache / name, ec))
    for (const auto& e : fs::directory_iterator(cache / name, ec))
      if (e.path().extension() == ".gguf") return e.path().string();
  return "";
}

}  // namespace ridge::test
