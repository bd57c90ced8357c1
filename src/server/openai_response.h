// The JSON OpenAI's clients expect back: whole responses, SSE stream chunks, usage and
// logprobs, for both /v1/completions ("text_completion") and /v1/chat/completions
// ("chat.completion" / "chat.completion.chunk").
//
//   ResponseMeta meta = make_response_meta(Endpoint::kChatCompletions, "gemma3-270m");
//   sink.write(sse_event(role_chunk(meta, 0)));            // data: {...}\n\n
//   sink.write(sse_event(text_chunk(meta, 0, ev, tok)));   // per StreamEvent
//   sink.write(kSseDone);
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {

// Responses keep their keys in the order written, as OpenAI sends them: a completion's
// top_logprobs most likely first, not alphabetical.
using ResponseJson = nlohmann::ordered_json;

inline constexpr const char* kSseDone = "data: [DONE]\n\n";
inline constexpr const char* kSystemFingerprint = "fp_ridge_0_1";

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  SpecMethod spec_method = SpecMethod::kNone;  // the server's proposer: kNone sends no "speculative"
};

// A fresh random id and the current time.
ResponseMeta make_response_meta(Endpoint endpoint, const std::string& model,
                                SpecMethod spec_method = SpecMethod::kNone);

// What one choice produced, accumulated from its stream events.
struct ChoiceResult {
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;                          // per token, when requested
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, when requested
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  int32_t spec_steps = 0;     // speculative decoding: verifications of a draft,
  int32_t spec_drafted = 0;   // tokens drafted,
  int32_t spec_accepted = 0;  // and of those, accepted

  void add(const StreamEvent& event);
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t spec_steps = 0;
  int32_t spec_drafted = 0;
  int32_t spec_accepted = 0;
};

// Prompt counted once (all choices share it), completion and speculative tokens summed
// over choices.
Usage total_usage(const std::vector<ChoiceResult>& choices);
ResponseJson usage_json(const Usage& usage);
// The ridge extension beside "usage" when the server runs speculative decoding:
// {"proposer", "num_drafts", "num_draft_tokens", "num_accepted_tokens"} (vLLM's metric
// names, for this response).
ResponseJson speculative_json(SpecMethod method, const Usage& usage);

// "stop" or "length" (cancelled and error requests never reach a response); "tool_calls"
// when the choice made tool calls.
const char* api_finish_reason(FinishReason reason, bool made_tool_calls = false);

// Characters (code points) in UTF-8 text, as clients index the text they get: a piece
// that ends inside a character counts that character once, at its first byte.
size_t text_length(std::string_view utf8);
// text_length of the tokens' pieces one after another: where the next token's
// text_offset is, counted from the first of them.
size_t pieces_length(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens);

// The logprobs object of a choice or chunk for tokens [begin, end) of these arrays:
// completions {tokens, token_logprobs, top_logprobs, text_offset} (text_offset in
// characters, counted from text_offset_base), chat {content: [{token, logprob, bytes,
// top_logprobs}], refusal}.
ResponseJson logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                             const std::vector<float>& logprobs,
                             const std::vector<std::vector<TokenLogprob>>& top_logprobs, bool with_top,
                             size_t text_offset_base);

// A whole non-streaming response. With tool_syntax (chat, tools active), each choice's
// text is split into message.content (null when empty) and message.tool_calls.
ResponseJson response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             const Tokenizer& tokenizer, const ApiRequest& request,
                             ToolCallSyntax tool_syntax = ToolCallSyntax::kNone);

// Stream chunks. role_chunk opens a chat choice (delta.role); text_chunk carries one
// event's text (and logprobs); finish_chunk closes a choice with its finish_reason;
// usage_chunk is the final chunk of stream_options.include_usage (empty choices; with
// "speculative" when meta.spec_method is not kNone, as the whole response).
ResponseJson role_chunk(const ResponseMeta& meta, int32_t index, bool include_usage);
ResponseJson text_chunk(const ResponseMeta& meta, int32_t index, const StreamEvent& event,
                          const Tokenizer& tokenizer, const ApiRequest& request, size_t text_offset_base);
ResponseJson finish_chunk(const ResponseMeta& meta, int32_t index, FinishReason reason, bool include_usage,
                            bool made_tool_calls = false);
// A chat tool call streamed as OpenAI streams one: a chunk opening it (delta.tool_calls
// [{index, id, type, function: {name, arguments: ""}}]) and one with its arguments.
std::vector<ResponseJson> tool_call_chunks(const ResponseMeta& meta, int32_t index, int32_t call_index,
                                             const std::string& call_id, const ParsedToolCall& call,
                                             bool include_usage);
ResponseJson usage_chunk(const ResponseMeta& meta, const Usage& usage);

// "data: <json>\n\n"
std::string sse_event(const ResponseJson& value);
// "event: <name>\ndata: <json>\n\n": the typed events of the Anthropic and Responses streams.
std::string named_sse_event(std::string_view name, const ResponseJson& value);

// The data of each complete SSE event in pending + more ("data: X\n\n" gives X), in
// order; the incomplete rest stays in pending. For re-telling the chat stream.
std::vector<std::string> take_sse_data(std::string& pending, std::string_view more);

// prefix and 24 random letters and digits: response, message and item ids.
std::string random_id(std::string_view prefix);

}  // namespace ridge::server
