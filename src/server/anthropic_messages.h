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

// {"type": "error", "error": {"type": "invalid_request_error" | ..., "message": ...}}
nlohmann::json messages_error_json(const ApiError& error);

}  // namespace ridge::server
