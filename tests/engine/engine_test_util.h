// What a test reads from a request's stream, collected: the engine tests' common helper.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace ridge::test {

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

}  // namespace ridge::test
