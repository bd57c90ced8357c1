#include "server/responses_api.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "server/json_fields.h"

namespace ridge::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& message, const char* code = "invalid_value") {
  throw ApiError(400, str_cat("Invalid '", field, "': ", message), field, code);
}

[[noreturn]] void missing(const std::string& field) {
  throw ApiError(400, str_cat("Missing required parameter: '", field, "'."), field, "missing_required_parameter");
}

const ordered_json* find(const ordered_json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

const ordered_json& string_at(const ordered_json& object, const char* key, const std::string& at) {
  const ordered_json* v = find(object, key);
  if (v == nullptr) missing(str_cat(at, ".", key));
  if (!v->is_string()) bad(str_cat(at, ".", key), "expected a string.", "invalid_type");
  return *v;
}

// A string, or a list of text parts (input_text, output_text) joined.
std::string text_of(const ordered_json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(at, "expected a string or an array of content parts.", "invalid_type");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_at = str_cat(at, "[", i, "]");
    const ordered_json& part = content[i];
    if (!part.is_object()) bad(part_at, "expected an object {type, text}.", "invalid_type");
    const std::string type = string_at(part, "type", part_at).get<std::string>();
    if (type != "input_text" && type != "output_text")
      bad(part_at + ".type", str_cat("'", type, "' content is not supported; only input_text and output_text."),
          "unsupported_value");
    text += string_at(part, "text", part_at).get<std::string>();
  }
  return text;
}

// The chat conversation so far ends in an assistant turn that function_call items may
// join (one assistant turn carries all the calls made after its text).
ordered_json& assistant_turn(ordered_json& messages) {
  if (messages.empty() || messages.back()["role"] != "assistant")
    messages.push_back({{"role", "assistant"}, {"content", nullptr}});
  ordered_json& turn = messages.back();
  if (!turn.contains("tool_calls")) turn["tool_calls"] = ordered_json::array();
  return turn;
}

void add_item(const ordered_json& item, const std::string& at, ordered_json& messages) {
  if (!item.is_object()) bad(at, "expected an object (a message or another input item).", "invalid_type");
  const ordered_json* type_field = find(item, "type");
  if (type_field != nullptr && !type_field->is_string()) bad(at + ".type", "expected a string.", "invalid_type");
  // EasyInputMessage {role, content} has no type.
  const std::string type = type_field ? type_field->get<std::string>() : "message";
  if (type == "message") {
    std::string role = string_at(item, "role", at).get<std::string>();
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      bad(at + ".role", str_cat("'", role, "'; supported roles are user, assistant, system and developer."));
    const ordered_json* content = find(item, "content");
    if (content == nullptr) missing(at + ".content");
    messages.push_back({{"role", role}, {"content", text_of(*content, at + ".content")}});
  } else if (type == "function_call") {
    const ordered_json& call_id = string_at(item, "call_id", at);
    const ordered_json& name = string_at(item, "name", at);
    const ordered_json& arguments = string_at(item, "arguments", at);
    assistant_turn(messages)["tool_calls"].push_back(
        {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
  } else if (type == "function_call_output") {
    const ordered_json& call_id = string_at(item, "call_id", at);
    const ordered_json* output = find(item, "output");
    if (output == nullptr) missing(at + ".output");
    messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text_of(*output, at + ".output")}});
  } else if (type == "reasoning") {
    // A reasoning model's earlier thinking: the chat templates here render none, so it
    // is accepted and left out, as a model without reasoning would treat it.
  } else if (type == "item_reference") {
    bad(at + ".type", "item_reference needs stored items; this server stores no responses. Send the items themselves.",
        "unsupported_value");
  } else {
    bad(at + ".type", str_cat("'", type, "' items are not supported; use message, function_call, "
                                         "function_call_output or reasoning."),
        "unsupported_value");
  }
}

// [{type: "function", name, description?, parameters?, strict?}] as chat's nested tools.
ordered_json chat_tools(const ordered_json& tools) {
  if (!tools.is_array()) bad("tools", "expected an array.", "invalid_type");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = str_cat("tools[", i, "]");
    const ordered_json& tool = tools[i];
    if (!tool.is_object()) bad(at, "expected an object {type: \"function\", name, parameters}.", "invalid_type");
    const std::string type = string_at(tool, "type", at).get<std::string>();
    if (type != "function")
      bad(at + ".type", str_cat("'", type, "' tools are not supported; only function tools."), "unsupported_value");
    ordered_json function = ordered_json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (const ordered_json* v = find(tool, key)) function[key] = *v;
    if (!function.contains("name")) missing(at + ".name");
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

ordered_json chat_tool_choice(const ordered_json& choice) {
  if (choice.is_string()) return choice;  // none, auto, required: chat's own values
  if (!choice.is_object()) bad("tool_choice", "expected a string or an object.", "invalid_type");
  const std::string type = string_at(choice, "type", "tool_choice").get<std::string>();
  if (type != "function")
    bad("tool_choice.type", str_cat("'", type, "' is not supported; use {type: \"function\", name}."),
        "unsupported_value");
  return {{"type", "function"}, {"function", {{"name", string_at(choice, "name", "tool_choice")}}}};
}

// text.format as chat's response_format.
ordered_json chat_response_format(const ordered_json& text) {
  if (!text.is_object()) bad("text", "expected an object {format}.", "invalid_type");
  const ordered_json* format = find(text, "format");
  if (format == nullptr) return nullptr;
  if (!format->is_object()) bad("text.format", "expected an object {type, ...}.", "invalid_type");
  const std::string type = string_at(*format, "type", "text.format").get<std::string>();
  if (type == "text" || type == "json_object") return {{"type", type}};
  if (type != "json_schema")
    bad("text.format.type", str_cat("'", type, "'; expected text, json_object or json_schema."));
  ordered_json schema = {{"name", string_at(*format, "name", "text.format")}};
  const ordered_json* s = find(*format, "schema");
  if (s == nullptr) missing("text.format.schema");
  for (const char* key : {"schema", "strict", "description"})
    if (const ordered_json* v = find(*format, key)) schema[key] = *v;
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

const char* kStoreless = "this server stores no responses, so there is none to continue; send the whole "
                         "conversation in 'input' (and store: false).";

// The request fields a Response repeats, with the API's defaults.
ordered_json echo_fields(const ordered_json& body) {
  auto given = [&](const char* key, ordered_json fallback) {
    const ordered_json* v = find(body, key);
    return v ? *v : fallback;
  };
  ordered_json text = given("text", {{"format", {{"type", "text"}}}});
  if (!text.contains("format")) text["format"] = {{"type", "text"}};
  return {{"instructions", given("instructions", nullptr)},
          {"max_output_tokens", given("max_output_tokens", nullptr)},
          {"metadata", given("metadata", ordered_json::object())},
          {"parallel_tool_calls", given("parallel_tool_calls", true)},
          {"previous_response_id", nullptr},
          {"reasoning", given("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
          {"store", false},
          {"temperature", given("temperature", 1.0)},
          {"text", std::move(text)},
          {"tool_choice", given("tool_choice", "auto")},
          {"tools", given("tools", ordered_json::array())},
          {"top_p", given("top_p", 1.0)},
          {"truncation", "disabled"},
          {"user", given("user", nullptr)}};
}

ordered_json parse_body(std::string_view body_text) {
  ordered_json body = ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError(400, "The request body is not valid JSON.", "", "invalid_json");
  if (!body.is_object()) throw ApiError(400, "The request body must be a JSON object.", "", "invalid_json");
  return body;
}

}  // namespace

std::string chat_body_from_responses(std::string_view body_text) {
  const ordered_json body = parse_body(body_text);
  if (find(body, "previous_response_id") != nullptr) bad("previous_response_id", kStoreless, "unsupported_value");
  if (find(body, "conversation") != nullptr) bad("conversation", kStoreless, "unsupported_value");
  if (const ordered_json* v = find(body, "store"); v != nullptr && !v->is_boolean())
    bad("store", "expected a boolean.", "invalid_type");  // true is accepted: nothing is kept either way
  if (const ordered_json* v = find(body, "background"); v != nullptr && *v != false)
    bad("background", "background responses are not supported.", "unsupported_value");
  if (const ordered_json* v = find(body, "reasoning")) {
    // Accepted for reasoning clients; the chat templates here take no effort setting.
    if (!v->is_object()) bad("reasoning", "expected an object {effort, summary}.", "invalid_type");
    if (const ordered_json* e = find(*v, "effort"); e != nullptr && !e->is_string())
      bad("reasoning.effort", "expected a string.", "invalid_type");
  }

  ordered_json chat = ordered_json::object();
  if (const ordered_json* m = find(body, "model")) chat["model"] = *m;
  ordered_json messages = ordered_json::array();
  if (const ordered_json* instructions = find(body, "instructions"))
    messages.push_back({{"role", "system"}, {"content", text_of(*instructions, "instructions")}});
  const ordered_json* input = find(body, "input");
  if (input == nullptr) missing("input");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) add_item((*input)[i], str_cat("input[", i, "]"), messages);
  } else {
    bad("input", "expected a string or an array of input items.", "invalid_type");
  }
  if (messages.empty()) bad("input", "no message to answer (only reasoning items?).");
  chat["messages"] = std::move(messages);

  // Type and range checks are chat's (responses_error renames the fields back); seed,
  // top_k, min_p and ignore_eos are ridge's chat extensions, taken here too.
  if (const ordered_json* v = find(body, "max_output_tokens")) chat["max_tokens"] = *v;
  for (const char* key : {"temperature", "top_p", "parallel_tool_calls", "seed", "top_k", "min_p", "ignore_eos"})
    if (const ordered_json* v = find(body, key)) chat[key] = *v;
  if (const ordered_json* stream = find(body, "stream")) {
    if (!stream->is_boolean()) bad("stream", "expected a boolean.", "invalid_type");
    if (stream->get<bool>()) chat["stream"] = true, chat["stream_options"] = {{"include_usage", true}};
  }
  if (const ordered_json* tools = find(body, "tools")) chat["tools"] = chat_tools(*tools);
  if (const ordered_json* choice = find(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*choice);
  if (const ordered_json* text = find(body, "text"))
    if (ordered_json format = chat_response_format(*text); !format.is_null()) chat["response_format"] = std::move(format);
  return chat.dump();
}

ApiError responses_error(const ApiError& e) {
  // Chat names first, most specific first; "messages[3]" cannot be mapped back to an
  // input index (instructions and merged calls shift them), so it becomes "input".
  static const std::pair<std::string_view, std::string_view> kRenames[] = {
      {"max_tokens", "max_output_tokens"},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      {"prompt", "input"},
      {"messages", "input"},
  };
  std::string param = e.param;
  std::string message = e.what();
  auto rename = [&](std::string_view from, std::string_view to) {
    if (param.rfind(from, 0) != 0) return false;
    std::string renamed = str_cat(to, param.substr(from.size()));
    if (from == "messages") renamed = "input";
    for (size_t at = 0; (at = message.find(param, at)) != std::string::npos; at += renamed.size())
      message.replace(at, param.size(), renamed);
    param = std::move(renamed);
    return true;
  };
  bool done = false;
  for (const auto& [from, to] : kRenames) done = done || rename(from, to);
  // tools[i].function.name -> tools[i].name
  if (const size_t at = param.find(".function."); !done && param.rfind("tools[", 0) == 0 && at != std::string::npos)
    rename(param.substr(0, at + 10), param.substr(0, at + 1));
  return ApiError(e.status, message, param, e.code, e.type);
}

ResponsesRequest parse_responses_request(std::string_view body) {
  ResponsesRequest r;
  const std::string chat = chat_body_from_responses(body);
  try {
    r.chat = parse_api_request(chat, Endpoint::kChatCompletions);
  } catch (const ApiError& e) {
    throw responses_error(e);
  }
  r.echo = echo_fields(parse_body(body));
  return r;
}

namespace {

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ordered_json message_item(const std::string& id, const char* status, const std::string& text) {
  ordered_json content = ordered_json::array();
  if (std::string_view(status) != "in_progress")
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", ordered_json::array()}, {"logprobs", ordered_json::array()}});
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

ordered_json call_item(const std::string& call_id, const std::string& name, const std::string& arguments,
                       const char* status) {
  return {{"type", "function_call"}, {"id", random_id("fc_")}, {"call_id", call_id}, {"name", name},
          {"arguments", arguments}, {"status", status}};
}

// chat usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}.
ordered_json responses_usage(const json& usage) {
  const int64_t input = usage.value("prompt_tokens", 0);
  const int64_t output = usage.value("completion_tokens", 0);
  int64_t cached = 0;
  if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
    cached = usage["prompt_tokens_details"].value("cached_tokens", 0);
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

ordered_json response_base(const std::string& id, int64_t created_at, const char* status, const std::string& model,
                           const ordered_json& echo) {
  ordered_json r = {{"id", id}, {"object", "response"}, {"created_at", created_at}, {"status", status},
                    {"background", false}, {"error", nullptr}, {"incomplete_details", nullptr}};
  if (std::string_view(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  r["model"] = model;
  r["output"] = ordered_json::array();
  for (const auto& [key, value] : echo.items()) r[key] = value;
  r["usage"] = nullptr;
  return r;
}

}  // namespace

ResponseJson responses_object(const json& chat_response, const ResponseJson& echo, const std::string& model) {
  const json& choice = chat_response.at("choices").at(0);
  const json& message = choice.at("message");
  const bool incomplete = choice.value("finish_reason", "stop") == "length";
  const char* status = incomplete ? "incomplete" : "completed";
  ordered_json r = response_base(random_id("resp_"), chat_response.value("created", now_seconds()), status, model, echo);
  if (message.contains("content") && message["content"].is_string() && !message["content"].get<std::string>().empty())
    r["output"].push_back(message_item(random_id("msg_"), status, message["content"]));
  if (message.contains("tool_calls") && message["tool_calls"].is_array())
    for (const json& call : message["tool_calls"])
      r["output"].push_back(call_item(call.at("id"), call.at("function").at("name"),
                                      call.at("function").at("arguments"), "completed"));
  r["usage"] = responses_usage(chat_response.at("usage"));
  return r;
}

ResponsesStream::ResponsesStream(ResponseJson echo, std::string model)
    : echo_(std::move(echo)), model_(std::move(model)), id_(random_id("resp_")), created_at_(now_seconds()) {}

std::string ResponsesStream::emit(const char* type, ResponseJson data) {
  ResponseJson event = {{"type", type}, {"sequence_number", sequence_number_++}};
  for (auto& [key, value] : data.items()) event[key] = std::move(value);
  return named_sse_event(type, event);
}

ResponseJson ResponsesStream::snapshot(const char* status) const {
  ResponseJson r = response_base(id_, created_at_, status, model_, echo_);
  r["output"] = output_;
  if (!usage_.is_null()) r["usage"] = usage_;
  return r;
}

std::string ResponsesStream::close_item() {
  if (open_item_.is_null()) return "";
  const int64_t index = static_cast<int64_t>(output_.size());
  const std::string item_id = open_item_["id"];
  const char* status = incomplete_ ? "incomplete" : "completed";
  std::string out;
  ResponseJson done;
  if (open_item_["type"] == "message") {
    done = message_item(item_id, status, open_text_);
    const ResponseJson& part = done["content"][0];
    out += emit("response.output_text.done", {{"item_id", item_id}, {"output_index", index}, {"content_index", 0},
                                              {"text", open_text_}, {"logprobs", ResponseJson::array()}});
    out += emit("response.content_part.done",
                {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  } else {
    done = open_item_;
    done["status"] = status;
    out += emit("response.function_call_arguments.done",
                {{"item_id", item_id}, {"output_index", index}, {"name", done["name"]}, {"arguments", done["arguments"]}});
  }
  out += emit("response.output_item.done", {{"output_index", index}, {"item", done}});
  output_.push_back(std::move(done));
  open_item_ = nullptr;
  open_text_.clear();
  return out;
}

std::string ResponsesStream::feed(std::string_view chat_sse) {
  std::string out;
  for (const std::string& data : take_sse_data(pending_, chat_sse)) {
    if (ended_) continue;
    if (data == "[DONE]") {
      out += close_item();
      const char* status = incomplete_ ? "incomplete" : "completed";
      out += emit(incomplete_ ? "response.incomplete" : "response.completed", {{"response", snapshot(status)}});
      ended_ = true;
      continue;
    }
    out += on_chunk(json::parse(data, nullptr, false));
  }
  return out;
}

std::string ResponsesStream::on_chunk(const json& chunk) {
  if (!chunk.is_object()) return "";
  std::string out;
  if (chunk.contains("error")) {
    const json& e = chunk["error"];
    const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "server_error";
    out += emit("error", {{"code", code}, {"message", e.value("message", "")}, {"param", nullptr}});
    ResponseJson failed = snapshot("failed");
    failed["error"] = {{"code", "server_error"}, {"message", e.value("message", "")}};
    out += emit("response.failed", {{"response", std::move(failed)}});
    ended_ = true;
    return out;
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = responses_usage(chunk["usage"]);
  if (!chunk.contains("choices") || chunk["choices"].empty()) return "";
  const json& choice = chunk["choices"][0];
  const json& delta = choice.value("delta", json::object());
  if (delta.contains("role")) {
    out += emit("response.created", {{"response", snapshot("in_progress")}});
    out += emit("response.in_progress", {{"response", snapshot("in_progress")}});
  }
  if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty()) {
    if (open_item_.is_null() || open_item_["type"] != "message") {
      out += close_item();
      open_item_ = message_item(random_id("msg_"), "in_progress", "");
      const std::string item_id = open_item_["id"];
      out += emit("response.output_item.added", {{"output_index", output_.size()}, {"item", open_item_}});
      out += emit("response.content_part.added",
                  {{"item_id", item_id}, {"output_index", output_.size()}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ResponseJson::array()}, {"logprobs", ResponseJson::array()}}}});
    }
    const std::string text = delta["content"];
    open_text_ += text;
    out += emit("response.output_text.delta", {{"item_id", open_item_["id"]}, {"output_index", output_.size()},
                                               {"content_index", 0}, {"delta", text}, {"logprobs", ResponseJson::array()}});
  }
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array())
    for (const json& call : delta["tool_calls"]) {
      const json& function = call.value("function", json::object());
      if (call.contains("id")) {  // a call's first chunk opens its item
        out += close_item();
        open_item_ = call_item(call["id"], function.value("name", ""), "", "in_progress");
        out += emit("response.output_item.added", {{"output_index", output_.size()}, {"item", open_item_}});
      }
      const std::string arguments = function.value("arguments", "");
      if (!arguments.empty() && !open_item_.is_null() && open_item_["type"] == "function_call") {
        open_item_["arguments"] = open_item_["arguments"].get<std::string>() + arguments;
        out += emit("response.function_call_arguments.delta",
                    {{"item_id", open_item_["id"]}, {"output_index", output_.size()}, {"delta", arguments}});
      }
    }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    incomplete_ = choice["finish_reason"] == "length";
  return out;
}

}  // namespace ridge::server
