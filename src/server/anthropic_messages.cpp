#include "server/anthropic_messages.h"

#include "core/error.h"
#include "server/openai_response.h"

namespace ridge::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw ApiError(400, str_cat("'", field, "': ", message), field, "invalid_value");
}

const ordered_json* find(const ordered_json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// A string, or a list of text blocks joined (system, tool_result content).
std::string text_of(const ordered_json& value, const std::string& field) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) bad(field, "must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = str_cat(field, "[", i, "]");
    const ordered_json& block = value[i];
    if (!block.is_object() || block.value("type", "") != "text") bad(at, "must be a text block {type: \"text\", text}");
    const ordered_json* t = find(block, "text");
    if (t == nullptr || !t->is_string()) bad(at + ".text", "must be a string");
    text += t->get<std::string>();
  }
  return text;
}

// One Anthropic message as one or more OpenAI chat messages: an assistant turn's
// tool_use blocks become its tool_calls, a user turn's tool_result blocks become "tool"
// messages (before the rest of that turn's text).
void add_message(const ordered_json& msg, const std::string& at, ordered_json& out) {
  if (!msg.is_object()) bad(at, "must be an object {role, content}");
  const ordered_json* role = find(msg, "role");
  if (role == nullptr || !role->is_string() || (*role != "user" && *role != "assistant"))
    bad(at + ".role", "must be \"user\" or \"assistant\"");
  const ordered_json* content = find(msg, "content");
  if (content == nullptr) bad(at + ".content", "is required");
  ordered_json chat = {{"role", *role}};
  if (content->is_string()) {
    chat["content"] = *content;
    out.push_back(std::move(chat));
    return;
  }
  if (!content->is_array()) bad(at + ".content", "must be a string or an array of content blocks");
  std::string text;
  ordered_json tool_calls = ordered_json::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bat = str_cat(at, ".content[", i, "]");
    const ordered_json& block = (*content)[i];
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) bad(bat + ".type", "is required");
    const std::string type = block["type"];
    if (type == "text") {
      text += text_of(ordered_json::array({block}), bat);
    } else if (type == "tool_use") {
      if (*role != "assistant") bad(bat, "tool_use blocks belong to assistant turns");
      const ordered_json* id = find(block, "id");
      const ordered_json* name = find(block, "name");
      if (id == nullptr || !id->is_string()) bad(bat + ".id", "must be a string");
      if (name == nullptr || !name->is_string()) bad(bat + ".name", "must be a string");
      const ordered_json* input = find(block, "input");
      if (input != nullptr && !input->is_object()) bad(bat + ".input", "must be an object");
      tool_calls.push_back({{"id", *id},
                            {"type", "function"},
                            {"function", {{"name", *name}, {"arguments", (input ? *input : ordered_json::object()).dump()}}}});
    } else if (type == "tool_result") {
      if (*role != "user") bad(bat, "tool_result blocks belong to user turns");
      const ordered_json* id = find(block, "tool_use_id");
      if (id == nullptr || !id->is_string()) bad(bat + ".tool_use_id", "must be a string");
      const ordered_json* result = find(block, "content");
      std::string result_text = result ? text_of(*result, bat + ".content") : "";
      const ordered_json* is_error = find(block, "is_error");
      if (is_error != nullptr && !is_error->is_boolean()) bad(bat + ".is_error", "must be a boolean");
      if (is_error != nullptr && is_error->get<bool>()) result_text = "Error: " + result_text;
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result_text}});
    } else {
      bad(bat + ".type", str_cat("'", type, "' is not supported (text, tool_use, tool_result)"));
    }
  }
  if (!tool_calls.empty()) {
    chat["content"] = text.empty() ? ordered_json(nullptr) : ordered_json(text);
    chat["tool_calls"] = std::move(tool_calls);
    out.push_back(std::move(chat));
  } else if (!text.empty() || *role == "assistant") {
    chat["content"] = text;
    out.push_back(std::move(chat));
  }
}

ordered_json chat_tools(const ordered_json& tools) {
  if (!tools.is_array()) bad("tools", "must be an array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = str_cat("tools[", i, "]");
    const ordered_json& t = tools[i];
    if (!t.is_object()) bad(at, "must be an object {name, description, input_schema}");
    const ordered_json* name = find(t, "name");
    if (name == nullptr || !name->is_string()) bad(at + ".name", "must be a string");
    ordered_json function = {{"name", *name}};
    if (const ordered_json* d = find(t, "description")) function["description"] = *d;
    const ordered_json* schema = find(t, "input_schema");
    if (schema == nullptr || !schema->is_object()) bad(at + ".input_schema", "must be an object");
    function["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

}  // namespace

std::string chat_body_from_messages(std::string_view body_text, MessagesEndpoint endpoint) {
  ordered_json body = ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError(400, "The request body is not valid JSON.", "", "invalid_json");
  if (!body.is_object()) throw ApiError(400, "The request body must be a JSON object.", "", "invalid_json");

  ordered_json chat = ordered_json::object();
  if (const ordered_json* m = find(body, "model")) chat["model"] = *m;
  const ordered_json* max_tokens = find(body, "max_tokens");
  if (max_tokens != nullptr)
    chat["max_tokens"] = *max_tokens;  // its type and range checked as chat's
  else if (endpoint == MessagesEndpoint::kCreate)
    bad("max_tokens", "is required");

  ordered_json messages = ordered_json::array();
  if (const ordered_json* system = find(body, "system")) messages.push_back({{"role", "system"}, {"content", text_of(*system, "system")}});
  const ordered_json* turns = find(body, "messages");
  if (turns == nullptr) bad("messages", "is required");
  if (!turns->is_array() || turns->empty()) bad("messages", "must be a non-empty array");
  for (size_t i = 0; i < turns->size(); ++i) add_message((*turns)[i], str_cat("messages[", i, "]"), messages);
  chat["messages"] = std::move(messages);

  if (const ordered_json* stop = find(body, "stop_sequences")) {
    if (!stop->is_array()) bad("stop_sequences", "must be an array of strings");
    for (const ordered_json& s : *stop)
      if (!s.is_string()) bad("stop_sequences", "must be an array of strings");
    if (!stop->empty()) chat["stop"] = *stop;
  }
  for (const char* key : {"temperature", "top_p", "top_k"})
    if (const ordered_json* v = find(body, key)) chat[key] = *v;
  if (const ordered_json* stream = find(body, "stream")) {
    if (!stream->is_boolean()) bad("stream", "must be a boolean");
    if (stream->get<bool>()) chat["stream"] = true, chat["stream_options"] = {{"include_usage", true}};
  }
  if (const ordered_json* tools = find(body, "tools"); tools != nullptr && !tools->empty()) chat["tools"] = chat_tools(*tools);
  if (const ordered_json* choice = find(body, "tool_choice")) {
    if (!choice->is_object() || !choice->contains("type") || !(*choice)["type"].is_string())
      bad("tool_choice.type", "is required (auto, any, tool, none)");
    const std::string type = (*choice)["type"];
    if (type == "auto") {
      chat["tool_choice"] = "auto";
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "none") {
      chat["tool_choice"] = "none";
    } else if (type == "tool") {
      const ordered_json* name = find(*choice, "name");
      if (name == nullptr || !name->is_string()) bad("tool_choice.name", "must be a string");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      bad("tool_choice.type", str_cat("'", type, "' is not one of auto, any, tool, none"));
    }
    if (const ordered_json* one = find(*choice, "disable_parallel_tool_use")) {
      if (!one->is_boolean()) bad("tool_choice.disable_parallel_tool_use", "must be a boolean");
      if (one->get<bool>() && chat.contains("tools")) chat["parallel_tool_calls"] = false;
    }
  }
  return chat.dump();
}

json messages_response_json(const json& chat_response, const std::string& model) {
  const json& choice = chat_response.at("choices").at(0);
  const json& message = choice.at("message");
  json content = json::array();
  if (message.contains("content") && message["content"].is_string() && !message["content"].get<std::string>().empty())
    content.push_back({{"type", "text"}, {"text", message["content"]}});
  bool made_calls = false;
  if (message.contains("tool_calls") && message["tool_calls"].is_array())
    for (const json& call : message["tool_calls"]) {
      json input = json::parse(call.at("function").at("arguments").get<std::string>(), nullptr, false);
      if (input.is_discarded() || !input.is_object()) input = json::object();
      content.push_back({{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", call["function"]["name"]}, {"input", input}});
      made_calls = true;
    }
  const std::string finish = choice.value("finish_reason", "stop");
  // The chat response does not say whether a stop string or the end of turn ended it,
  // so stop_reason is end_turn for both and stop_sequence is null.
  const char* stop_reason = made_calls ? "tool_use" : finish == "length" ? "max_tokens" : "end_turn";
  const json& usage = chat_response.at("usage");
  return {{"id", random_id("msg_")},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason},
          {"stop_sequence", nullptr},
          {"usage", {{"input_tokens", usage.at("prompt_tokens")}, {"output_tokens", usage.at("completion_tokens")}}}};
}

namespace {
std::string event(const char* name, const json& data) { return named_sse_event(name, data); }
}  // namespace

MessagesStream::MessagesStream(std::string model, int64_t input_tokens)
    : model_(std::move(model)), input_tokens_(input_tokens) {}

std::string MessagesStream::close_block() {
  if (open_type_.empty()) return "";
  open_type_.clear();
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesStream::feed(std::string_view chat_sse) {
  std::string out;
  for (const std::string& line : take_sse_data(pending_, chat_sse)) {
    if (line == "[DONE]") {
      out += close_block();
      out += event("message_delta", {{"type", "message_delta"},
                                     {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", nullptr}}},
                                     {"usage", {{"output_tokens", output_tokens_}}}});
      out += event("message_stop", {{"type", "message_stop"}});
      continue;
    }
    out += on_chunk(json::parse(line, nullptr, false));
  }
  return out;
}

std::string MessagesStream::on_chunk(const json& chunk) {
  if (!chunk.is_object()) return "";
  if (chunk.contains("error")) {
    const json& e = chunk["error"];
    return event("error", {{"type", "error"},
                           {"error", {{"type", e.value("type", "") == "server_error" ? "api_error" : "overloaded_error"},
                                      {"message", e.value("message", "")}}}});
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) output_tokens_ = chunk["usage"].value("completion_tokens", 0);
  if (!chunk.contains("choices") || chunk["choices"].empty()) return "";
  const json& choice = chunk["choices"][0];
  const json& delta = choice.value("delta", json::object());
  std::string out;
  if (delta.contains("role")) {
    out += event("message_start",
                 {{"type", "message_start"},
                  {"message", {{"id", random_id("msg_")}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
                               {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                               {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}}}});
  }
  if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
    if (open_type_ != "text") {
      out += close_block();
      open_type_ = "text";
      ++index_;
      out += event("content_block_start", {{"type", "content_block_start"}, {"index", index_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", delta["content"]}}}});
  }
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array())
    for (const json& call : delta["tool_calls"]) {
      const json& function = call.value("function", json::object());
      if (call.contains("id")) {  // a call's first chunk opens its block
        out += close_block();
        open_type_ = "tool_use";
        ++index_;
        out += event("content_block_start",
                     {{"type", "content_block_start"}, {"index", index_},
                      {"content_block", {{"type", "tool_use"}, {"id", random_id("toolu_")},
                                         {"name", function.value("name", "")}, {"input", json::object()}}}});
      }
      const std::string arguments = function.value("arguments", "");
      if (!arguments.empty())
        out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                             {"delta", {{"type", "input_json_delta"}, {"partial_json", arguments}}}});
    }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    const std::string finish = choice["finish_reason"];
    stop_reason_ = finish == "tool_calls" ? "tool_use" : finish == "length" ? "max_tokens" : "end_turn";
  }
  return out;
}

json messages_error_json(const ApiError& error) {
  const char* type = error.status == 401   ? "authentication_error"
                     : error.status == 403 ? "permission_error"
                     : error.status == 404 ? "not_found_error"
                     : error.status == 413 ? "request_too_large"
                     : error.status == 429 ? "rate_limit_error"
                     : error.status == 503 ? "overloaded_error"
                     : error.status >= 500 ? "api_error"
                                           : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", error.what()}}}};
}

}  // namespace ridge::server
