// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) as a translation
// onto the OpenAI chat machinery: the request body becomes a /v1/chat/completions body
// (then parsed, templated and tool-constrained by openai_request.h), and the chat
// response becomes a Messages response. Nothing about chat or tools is decided twice.
//
//   std::string chat = chat_body_from_messages(req.body, MessagesEndpoint::kCreate);  // throws ApiError
//   ApiRequest r = parse_api_request(chat, Endpoint::kChatCompletions);
//   ... response_json(...) ...
//   nlohmann::json reply = messages_response_json(chat_response, model_name);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace ridge::server {

enum class MessagesEndpoint { kCreate, kCountTokens };

// Throws ApiError(400) naming the Anthropic field for malformed JSON, a missing
// max_tokens (kCreate), a wrong type or an unknown block type.
std::string chat_body_from_messages(std::string_view body, MessagesEndpoint endpoint);

// A /v1/chat/completions response (one choice) as a Messages response: content blocks
// (text, tool_use with ids "toolu_..."), stop_reason, usage {input_tokens, output_tokens}.
nlohmann::json messages_response_json(const nlohmann::json& chat_response, const std::string& model);

// A streamed chat response (its SSE text, "data: {...}\n\n" chunks, include_usage on)
// re-told as Anthropic's event sequence: message_start, per block content_block_start /
// content_block_delta (text_delta, input_json_delta) / content_block_stop, each block
// closed before the next opens, then message_delta (stop_reason, usage) and message_stop.
class MessagesStream {
 public:
  MessagesStream(std::string model, int64_t input_tokens);
  // Takes any part of the chat stream; returns the Anthropic events it completes.
  std::string feed(std::string_view chat_sse);

 private:
  std::string on_chunk(const nlohmann::json& chunk);
  std::string close_block();
  std::string model_;
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
  std::string pending_;          // chat SSE text not yet ending in a blank line
  std::string open_type_;        // "", "text" or "tool_use": the open block
  int32_t index_ = -1;           // the open (or last) block's index
  std::string stop_reason_ = "end_turn";
};

// {"type": "error", "error": {"type": "invalid_request_error" | ..., "message": ...}}
nlohmann::json messages_error_json(const ApiError& error);

}  // namespace ridge::server
