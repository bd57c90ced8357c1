// Turns the JSON body of an OpenAI /v1/completions or /v1/chat/completions request into
// engine requests: strict type and range checks (a 400 naming the field), then the chat
// template, tokenization and the context limits (a 400 naming the numbers).
//
//   ApiRequest r = parse_api_request(body, Endpoint::kChatCompletions);   // throws ApiError
//   std::vector<RequestParams> choices = build_engine_requests(r, tokenizer, &tmpl, limits);
//   for (auto& p : choices) streams.push_back(engine.submit(std::move(p)));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {

enum class Endpoint { kCompletions, kChatCompletions };

// tool_choice: "none" renders no tools (the model, never shown them, answers in text);
// "auto" renders them and parses the calls the model makes; "required" and a named
// function (kFunction) render them too and constrain the output with a grammar to calls
// in the template's syntax (<tool_call>...</tool_call>), of any tool or of the named one.
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

// Largest values accepted for list-like fields (OpenAI's own limits where it has them).
inline constexpr int32_t kMaxChoices = 16;          // n
inline constexpr int32_t kMaxStopStrings = 16;      // stop
inline constexpr int32_t kMaxCompletionLogprobs = 20;  // completions `logprobs`
inline constexpr int32_t kMaxTopLogprobs = 20;      // chat `top_logprobs`
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;  // OpenAI's default for completions

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                      // "" when the request names none
  // Completions: the prompt as text, or as token ids (prompt_is_tokens).
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // Chat: the conversation.
  std::vector<ChatMessage> messages;

  std::optional<int32_t> max_tokens;      // absent: 16 for completions, the rest of the context for chat
  SamplingParams sampling;                // OpenAI defaults: temperature 1, top_p 1
  bool seed_given = false;                // else the server draws a random seed
  std::vector<std::string> stop;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  bool logprobs = false;
  int32_t top_logprobs = 0;               // alternatives per token
  bool ignore_eos = false;                // extension: generate past end-of-generation
  // Chat: the tools, as the JSON text of the array in the client's key order (the
  // template renders them as jinja2 would); "" when none were given.
  std::string tools_json;
  std::vector<std::string> tool_names;         // their function names, in order
  ToolChoice tool_choice = ToolChoice::kNone;  // kAuto by default when tools are given
  std::string tool_choice_function;            // kFunction: the function's name
  bool parallel_tool_calls = true;             // auto: the model decides how many it makes;
                                               // forced: false allows exactly one call
  // Constrained decoding (structured_output.h): response_format json_object/json_schema,
  // grammar, or forced tool calls; null for free text.
  std::shared_ptr<const grammar::Grammar> grammar;

  // The tools the template renders: none when tool_choice is none.
  bool tools_active() const { return tool_choice != ToolChoice::kNone && !tools_json.empty(); }
  bool tools_forced() const { return tool_choice == ToolChoice::kRequired || tool_choice == ToolChoice::kFunction; }
};

// Throws ApiError(400) for malformed JSON, a wrong type, a value out of range or an
// unsupported option, naming the field (OpenAI's `param`).
ApiRequest parse_api_request(std::string_view body, Endpoint endpoint);

struct PromptLimits {
  int32_t n_ctx = 0;              // prompt + completion at most: the engine's real per-request
                                  // limit (EngineLimits::max_request_tokens)
  int32_t max_prompt_tokens = 0;  // server limit; 0: none beyond the context
};

using ridge::choice_seed;  // the seed of each of n choices (engine/sampler.h)

// One engine request per choice (n), with the prompt templated (chat) and tokenized.
// chat_template is null when the model has none: chat requests are then a 400. Throws
// ApiError(400) for token ids outside the vocabulary, a prompt over max_prompt_tokens,
// or prompt + max_tokens over the context.
std::vector<RequestParams> build_engine_requests(const ApiRequest& request, const Tokenizer& tokenizer,
                                                 const ChatTemplate* chat_template, const PromptLimits& limits);

}  // namespace ridge::server
