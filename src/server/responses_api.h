// The OpenAI Responses API (POST /v1/responses) as a translation onto the chat machinery,
// as anthropic_messages.h does for Anthropic: the request's input items become chat
// messages, its flat tools and text.format become chat tools and response_format (then
// parsed, templated and grammar-constrained by openai_request.h), and the chat answer or
// stream becomes a Response object or Responses' typed SSE events. Nothing is stored, so
// previous_response_id is refused.
//
//   ResponsesRequest r = parse_responses_request(req.body);   // throws ApiError naming the Responses field
//   ... submit(r.chat) ...
//   ResponseJson reply = responses_object(chat_response, r.echo, model_name);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace ridge::server {

struct ResponsesRequest {
  ApiRequest chat;    // the same request as /v1/chat/completions would take it
  ResponseJson echo;  // the request fields a Response repeats (instructions, tools, text, ...)
};

// The Responses body as a /v1/chat/completions body. Throws ApiError(400) naming the
// Responses field: malformed JSON, a missing input, an unknown item or content type, a
// non-function tool, a bad text.format, previous_response_id (nothing is stored).
std::string chat_body_from_responses(std::string_view body);

// chat_body_from_responses, then parse_api_request, with the chat parser's errors
// renamed to the Responses fields (responses_error).
ResponsesRequest parse_responses_request(std::string_view body);

// A chat-path error re-told with the Responses names of its field: max_tokens is
// max_output_tokens, response_format is text.format, messages is input, tools[i].function.X
// is tools[i].X.
ApiError responses_error(const ApiError& chat_error);

// A /v1/chat/completions response (one choice) as a Response: a "message" output item
// for the text and a "function_call" item per tool call; status "incomplete" with
// incomplete_details.reason "max_output_tokens" when the length limit ended it.
ResponseJson responses_object(const nlohmann::json& chat_response, const ResponseJson& echo,
                              const std::string& model);

// A streamed chat response (its SSE text, include_usage on) re-told as Responses' events,
// "event: <type>\ndata: {type, sequence_number, ...}\n\n": response.created and
// response.in_progress, per output item output_item.added, content_part.added /
// output_text.delta / output_text.done / content_part.done (a message) or
// function_call_arguments.delta / .done (a call), output_item.done, each item closed
// before the next opens; then response.completed or response.incomplete. A chat error
// chunk becomes "error" and response.failed.
class ResponsesStream {
 public:
  ResponsesStream(ResponseJson echo, std::string model);
  // Takes any part of the chat stream; returns the Responses events it completes.
  std::string feed(std::string_view chat_sse);

 private:
  std::string on_chunk(const nlohmann::json& chunk);
  std::string emit(const char* type, ResponseJson data);
  std::string close_item();
  ResponseJson snapshot(const char* status) const;

  ResponseJson echo_;
  std::string model_;
  std::string id_;
  int64_t created_at_ = 0;
  std::string pending_;             // chat SSE text not yet ending in a blank line
  int64_t sequence_number_ = 0;
  ResponseJson output_ = ResponseJson::array();  // the items closed so far
  ResponseJson open_item_;          // the open item (null when none)
  std::string open_text_;           // the open message's text so far
  bool incomplete_ = false;         // the chat finish_reason was "length"
  ResponseJson usage_;              // from the chat usage chunk
  bool ended_ = false;              // a final (or failure) event was sent
};

}  // namespace ridge::server
