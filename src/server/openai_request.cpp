#include "server/openai_request.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace ridge::server {
namespace {

using nlohmann::json;

void parse_prompt(const json& body, ApiRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) throw ApiError(400, "Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
  const json* prompt = p;
  if (p->is_array() && !is_token_array(*p)) {
    // A list of prompts: one is served (as its own request); a batch is not.
    if (p->size() != 1)
      unsupported("prompt", str_cat("a list of ", p->size(), " prompts; send one prompt per request"));
    prompt = &(*p)[0];
  }
  if (prompt->is_string()) {
    r.prompt_text = prompt->get<std::string>();
  } else if (is_token_array(*prompt)) {
    r.prompt_tokens = get_token_ids(*prompt, "prompt");
    r.prompt_is_tokens = true;
  } else {
    wrong_type("prompt", "a string or an array of token ids", *prompt);
  }
}

std::string message_content(const json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(name, "a string or an array of content parts", content);
  // [{"type": "text", "text": "..."}, ...]: text parts joined; other kinds are refused.
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    std::string part_name = str_cat(name, "[", i, "]");
    if (!part.is_object()) wrong_type(part_name, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr || get_string(*type, part_name + ".type") != "text")
      unsupported(part_name + ".type", "only text content parts are supported");
    const json* t = field(part, "text");
    if (t == nullptr)
      throw ApiError(400, str_cat("Missing required parameter: '", part_name, ".text'."), part_name + ".text",
                     "missing_required_parameter");
    text += get_string(*t, part_name + ".text");
  }
  return text;
}

// An assistant turn's tool_calls, as OpenAI sends them back: [{id, type: "function",
// function: {name, arguments: JSON text}}].
std::vector<ToolCall> parse_tool_calls(const json& calls, const std::string& name) {
  if (!calls.is_array()) wrong_type(name, "an array", calls);
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const std::string call_name = str_cat(name, "[", i, "]");
    if (!c.is_object()) wrong_type(call_name, "an object", c);
    ToolCall call;
    if (const json* id = field(c, "id")) call.id = get_string(*id, call_name + ".id");
    if (const json* type = field(c, "type"); type != nullptr && get_string(*type, call_name + ".type") != "function")
      unsupported(call_name + ".type", "only function tool calls are supported");
    const json* function = field(c, "function");
    if (function == nullptr)
      throw ApiError(400, str_cat("Missing required parameter: '", call_name, ".function'."), call_name + ".function",
                     "missing_required_parameter");
    if (!function->is_object()) wrong_type(call_name + ".function", "an object", *function);
    const json* fname = field(*function, "name");
    if (fname == nullptr)
      throw ApiError(400, str_cat("Missing required parameter: '", call_name, ".function.name'."),
                     call_name + ".function.name", "missing_required_parameter");
    call.name = get_string(*fname, call_name + ".function.name");
    if (const json* args = field(*function, "arguments"))
      call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
    out.push_back(std::move(call));
  }
  return out;
}

void parse_messages(const json& body, ApiRequest& r) {
  const json* m = field(body, "messages");
  if (m == nullptr)
    throw ApiError(400, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
  if (!m->is_array()) wrong_type("messages", "an array", *m);
  if (m->empty())
    throw ApiError(400, "Invalid 'messages': empty array. Expected an array with minimum length 1.", "messages",
                   "empty_array");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    std::string name = str_cat("messages[", i, "]");
    if (!msg.is_object()) wrong_type(name, "an object", msg);
    const json* role = field(msg, "role");
    if (role == nullptr)
      throw ApiError(400, str_cat("Missing required parameter: '", name, ".role'."), name + ".role",
                     "missing_required_parameter");
    std::string role_text = get_string(*role, name + ".role");
    if (role_text == "developer") role_text = "system";  // OpenAI's newer name for it
    if (role_text != "system" && role_text != "user" && role_text != "assistant" && role_text != "tool")
      throw ApiError(400, str_cat("Invalid value for '", name, ".role': '", role_text,
                                  "'; supported roles are system, developer, user, assistant and tool."),
                     name + ".role", "invalid_value");
    ChatMessage message;
    message.role = role_text;
    if (const json* calls = field(msg, "tool_calls")) {
      if (role_text != "assistant") unsupported(name + ".tool_calls", "only assistant messages carry tool_calls");
      message.tool_calls = parse_tool_calls(*calls, name + ".tool_calls");
    }
    if (role_text == "tool") {
      if (const json* id = field(msg, "tool_call_id")) message.tool_call_id = get_string(*id, name + ".tool_call_id");
    }
    if (const json* n = field(msg, "name")) message.name = get_string(*n, name + ".name");
    // An assistant turn that only called tools may have null or no content.
    const json* content = field(msg, "content");
    if (content == nullptr && message.tool_calls.empty())
      throw ApiError(400, str_cat("Missing required parameter: '", name, ".content'."), name + ".content",
                     "missing_required_parameter");
    if (content != nullptr && !(content->is_null() && !message.tool_calls.empty()))
      message.content = message_content(*content, name + ".content");
    r.messages.push_back(std::move(message));
  }
}

void parse_stop(const json& body, ApiRequest& r) {
  const json* s = field(body, "stop");
  if (s == nullptr) return;
  auto add = [&](const json& v, const std::string& name) {
    std::string text = get_string(v, name);
    if (text.empty()) throw ApiError(400, str_cat("Invalid '", name, "': empty stop string."), name, "invalid_value");
    r.stop.push_back(std::move(text));
  };
  if (s->is_string()) {
    add(*s, "stop");
  } else if (s->is_array()) {
    if (s->size() > static_cast<size_t>(kMaxStopStrings))
      throw ApiError(400, str_cat("Invalid 'stop': at most ", kMaxStopStrings, " stop strings, got ", s->size(), "."),
                     "stop", "invalid_value");
    for (size_t i = 0; i < s->size(); ++i) add((*s)[i], str_cat("stop[", i, "]"));
  } else {
    wrong_type("stop", "a string or an array of strings", *s);
  }
}

void parse_sampling(const json& body, ApiRequest& r) {
  SamplingParams& s = r.sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  if (const json* v = field(body, "temperature")) s.temperature = static_cast<float>(get_number(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) s.top_p = static_cast<float>(get_number(*v, "top_p", 0, 1));
  if (const json* v = field(body, "top_k")) s.top_k = static_cast<int>(get_integer(*v, "top_k", 0, 1 << 30));
  if (const json* v = field(body, "min_p")) s.min_p = static_cast<float>(get_number(*v, "min_p", 0, 1));
  if (const json* v = field(body, "presence_penalty"))
    s.presence_penalty = static_cast<float>(get_number(*v, "presence_penalty", -2, 2));
  if (const json* v = field(body, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(get_number(*v, "frequency_penalty", -2, 2));
  if (const json* v = field(body, "repetition_penalty")) {
    double p = get_number(*v, "repetition_penalty", 0, 100);
    if (p <= 0) out_of_range("repetition_penalty", "a value > 0", p);
    s.repetition_penalty = static_cast<float>(p);
  }
  if (const json* v = field(body, "repeat_last_n"))
    s.repeat_last_n = static_cast<int>(get_integer(*v, "repeat_last_n", -1, 1 << 30));
  if (const json* v = field(body, "seed")) {
    s.seed = static_cast<uint64_t>(
        get_integer(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
}

void parse_logprobs(const json& body, ApiRequest& r) {
  const json* lp = field(body, "logprobs");
  if (r.endpoint == Endpoint::kCompletions) {
    // Completions: `logprobs` is the number of alternatives (0: the chosen token only).
    if (lp != nullptr) {
      r.logprobs = true;
      r.top_logprobs = static_cast<int32_t>(get_integer(*lp, "logprobs", 0, kMaxCompletionLogprobs));
    }
    return;
  }
  // Chat: `logprobs` is a switch and `top_logprobs` the number of alternatives.
  if (lp != nullptr) r.logprobs = get_bool(*lp, "logprobs");
  if (const json* top = field(body, "top_logprobs")) {
    r.top_logprobs = static_cast<int32_t>(get_integer(*top, "top_logprobs", 0, kMaxTopLogprobs));
    if (!r.logprobs && r.top_logprobs > 0)
      throw ApiError(400, "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
                     "top_logprobs", "invalid_value");
  }
}

[[noreturn]] void missing(const std::string& name) {
  throw ApiError(400, str_cat("Missing required parameter: '", name, "'."), name, "missing_required_parameter");
}

// [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
void check_tools(const json& tools, std::vector<std::string>& names) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string name = str_cat("tools[", i, "]");
    if (!tool.is_object()) wrong_type(name, "an object", tool);
    const json* type = field(tool, "type");
    if (type == nullptr) missing(name + ".type");
    if (get_string(*type, name + ".type") != "function")
      unsupported(name + ".type", "only function tools are supported");
    const json* function = field(tool, "function");
    if (function == nullptr) missing(name + ".function");
    if (!function->is_object()) wrong_type(name + ".function", "an object", *function);
    const json* fname = field(*function, "name");
    if (fname == nullptr) missing(name + ".function.name");
    const std::string fname_text = get_string(*fname, name + ".function.name");
    if (fname_text.empty() || fname_text.size() > 64)
      throw ApiError(400, str_cat("Invalid '", name, ".function.name': expected 1 to 64 characters, got ",
                                  fname_text.size(), "."),
                     name + ".function.name", "invalid_value");
    names.push_back(fname_text);
    if (const json* d = field(*function, "description")) get_string(*d, name + ".function.description");
    if (const json* p = field(*function, "parameters"); p != nullptr && !p->is_object())
      wrong_type(name + ".function.parameters", "an object (a JSON Schema)", *p);
    if (const json* s = field(*function, "strict")) get_bool(*s, name + ".function.strict");
  }
}

void parse_tools(std::string_view body_text, const json& body, ApiRequest& r) {
  const json* tools = field(body, "tools");
  if (tools != nullptr) {
    check_tools(*tools, r.tool_names);
    // The sorted-key json above would reorder each tool's keys; the template must see the
    // client's order, as jinja2 under Hugging Face does, so the text comes from an
    // order-keeping parse of the same body.
    if (!tools->empty()) r.tools_json = ordered_field(body_text, "tools").dump();
  }
  const json* choice = field(body, "tool_choice");
  r.tool_choice = r.tools_json.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (choice != nullptr) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        r.tool_choice = ToolChoice::kNone;
      } else if (c == "auto" || c == "required") {
        if (r.tools_json.empty())
          throw ApiError(400, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                         "tool_choice", "invalid_value");
        r.tool_choice = c == "required" ? ToolChoice::kRequired : ToolChoice::kAuto;
      } else {
        throw ApiError(400, str_cat("Invalid value for 'tool_choice': '", c,
                                    "'; expected 'none', 'auto', 'required' or {\"type\": \"function\", ...}."),
                       "tool_choice", "invalid_value");
      }
    } else if (choice->is_object()) {
      const json* type = field(*choice, "type");
      if (type == nullptr) missing("tool_choice.type");
      if (get_string(*type, "tool_choice.type") != "function")
        unsupported("tool_choice.type", "only function tools are supported");
      const json* function = field(*choice, "function");
      if (function == nullptr) missing("tool_choice.function");
      if (!function->is_object()) wrong_type("tool_choice.function", "an object", *function);
      const json* fname = field(*function, "name");
      if (fname == nullptr) missing("tool_choice.function.name");
      r.tool_choice_function = get_string(*fname, "tool_choice.function.name");
      if (r.tools_json.empty())
        throw ApiError(400, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                       "tool_choice", "invalid_value");
      r.tool_choice = ToolChoice::kFunction;
    } else {
      wrong_type("tool_choice", "a string or an object", *choice);
    }
  }
  if (const json* v = field(body, "parallel_tool_calls")) r.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");
  if (r.tools_forced()) {
    if (r.grammar)
      throw ApiError(400, "Invalid 'tool_choice': a forced tool call cannot be combined with 'response_format' or "
                          "'grammar'.", "tool_choice", "invalid_value");
    r.grammar = tool_call_grammar(r.tools_json, r.tool_choice_function,
                                  r.tool_choice == ToolChoice::kRequired && r.parallel_tool_calls);
  }
}

void refuse_unsupported(const json& body, Endpoint endpoint) {
  if (const json* v = field(body, "echo"); v != nullptr && get_bool(*v, "echo")) unsupported("echo", "echo is not supported");
  if (field(body, "suffix") != nullptr) unsupported("suffix", "suffix (fill-in-the-middle) is not supported");
  if (const json* v = field(body, "best_of"); v != nullptr && get_integer(*v, "best_of", 1, kMaxChoices) > 1)
    unsupported("best_of", "best_of > 1 is not supported; use n");
  if (const json* v = field(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty()))
    unsupported("logit_bias", "logit_bias is not supported");
  if (const json* v = field(body, "functions"); v != nullptr && !(v->is_array() && v->empty()))
    unsupported("functions", "the deprecated 'functions' parameter is not supported; use 'tools'");
  if (endpoint == Endpoint::kCompletions)
    for (const char* name : {"tools", "tool_choice"})
      if (field(body, name) != nullptr) unsupported(name, "tools are a /v1/chat/completions parameter");
  (void)endpoint;
}

}  // namespace

ApiRequest parse_api_request(std::string_view body_text, Endpoint endpoint) {
  const json body = parse_json_body(body_text);

  ApiRequest r;
  r.endpoint = endpoint;
  if (const json* v = field(body, "model")) r.model = get_string(*v, "model");
  if (endpoint == Endpoint::kCompletions)
    parse_prompt(body, r);
  else
    parse_messages(body, r);
  refuse_unsupported(body, endpoint);
  r.grammar = structured_output_grammar(body_text, body);
  if (endpoint == Endpoint::kChatCompletions) parse_tools(body_text, body, r);

  // Chat's newer name wins when both are given, as in OpenAI's API.
  const char* max_name = "max_tokens";
  const json* max = field(body, "max_tokens");
  if (endpoint == Endpoint::kChatCompletions && field(body, "max_completion_tokens") != nullptr) {
    max_name = "max_completion_tokens";
    max = field(body, max_name);
  }
  if (max != nullptr) r.max_tokens = static_cast<int32_t>(get_integer(*max, max_name, 1, std::numeric_limits<int32_t>::max()));

  parse_sampling(body, r);
  parse_stop(body, r);
  parse_logprobs(body, r);
  if (const json* v = field(body, "n")) r.n = static_cast<int32_t>(get_integer(*v, "n", 1, kMaxChoices));
  if (const json* v = field(body, "stream")) r.stream = get_bool(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!r.stream)
      throw ApiError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                     "stream_options", "invalid_value");
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (const json* u = field(*v, "include_usage")) r.include_usage = get_bool(*u, "stream_options.include_usage");
  }
  if (const json* v = field(body, "ignore_eos")) r.ignore_eos = get_bool(*v, "ignore_eos");
  return r;
}

std::vector<RequestParams> build_engine_requests(const ApiRequest& request, const Tokenizer& tokenizer,
                                                 const ChatTemplate* chat_template, const PromptLimits& limits) {
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const char* prompt_field = chat ? "messages" : "prompt";
  std::vector<int32_t> prompt;
  if (chat) {
    if (chat_template == nullptr)
      throw ApiError(400,
                     "This model has no chat template (tokenizer.chat_template is absent and its architecture "
                     "implies none), so /v1/chat/completions cannot format the conversation; use /v1/completions "
                     "with a prompt instead.",
                     "messages", "chat_template_missing");
    const std::string_view tools = request.tools_active() ? std::string_view(request.tools_json) : std::string_view();
    if (!tools.empty() && !chat_template->jinja)
      throw ApiError(400,
                     "This model has no chat template of its own (tokenizer.chat_template), so it cannot be shown "
                     "tools; send the request without 'tools'.",
                     "tools", "unsupported_parameter");
    // After that check: 'auto' is advice a model with a template of its own can take.
    if (request.tools_forced() && tool_call_syntax(*chat_template) != ToolCallSyntax::kHermes)
      throw ApiError(400,
                     "Unsupported value for 'tool_choice': this model's chat template teaches no tool-call syntax "
                     "this server can enforce (<tool_call>...</tool_call>); use 'auto'.",
                     "tool_choice", "unsupported_value");
    ChatPrompt rendered;
    try {
      rendered = render_chat_prompt(*chat_template, request.messages, /*add_assistant=*/true, tools);
    } catch (const jinja::TemplateError& e) {
      // A template that does not parse is the model's fault (500); one that fails or
      // refuses on this conversation (raise_exception) answers the client (400).
      if (e.kind() == jinja::TemplateError::Kind::kSyntax)
        throw ApiError(500, str_cat("The model's chat template cannot be used: ", e.what()), "", "chat_template_error");
      throw ApiError(400, str_cat("The model's chat template cannot render these messages: ", e.what()), "messages",
                     "invalid_value");
    } catch (const Error& e) {
      throw ApiError(400, str_cat("Invalid 'messages': ", e.what()), "messages", "invalid_value");
    }
    // Only the template's markup becomes control tokens: "<|im_end|>" typed in a message
    // stays text, so a client cannot close its turn and forge a system one.
    prompt = tokenizer.encode_with_markup(rendered.text, rendered.markup, /*add_special=*/true);
  } else if (request.prompt_is_tokens) {
    for (size_t i = 0; i < request.prompt_tokens.size(); ++i)
      if (request.prompt_tokens[i] >= tokenizer.n_vocab())
        throw ApiError(400, str_cat("Invalid 'prompt[", i, "]': token id ", request.prompt_tokens[i],
                                    " is outside the vocabulary (0 .. ", tokenizer.n_vocab() - 1, ")."),
                       "prompt", "invalid_value");
    prompt = request.prompt_tokens;
  } else {
    // A raw prompt is the client's whole input, template included, so special-token text
    // in it is parsed (as llama.cpp's /completion does); it can forge nothing it could not
    // already write.
    prompt = tokenizer.encode(request.prompt_text, /*add_special=*/true, /*parse_special=*/true);
  }

  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0)
    throw ApiError(400, str_cat("Invalid '", prompt_field, "': the prompt is empty."), prompt_field, "invalid_value");
  if (limits.max_prompt_tokens > 0 && n_prompt > limits.max_prompt_tokens)
    throw ApiError(400, str_cat("The prompt has ", n_prompt, " tokens, over this server's limit of ",
                                limits.max_prompt_tokens, " prompt tokens (--max-prompt-tokens)."),
                   prompt_field, "prompt_too_long");
  const int64_t room = static_cast<int64_t>(limits.n_ctx) - n_prompt;
  int64_t max_tokens = 0;
  if (request.max_tokens) {
    max_tokens = *request.max_tokens;
    if (max_tokens > room)
      throw ApiError(400, str_cat("This model's maximum context length is ", limits.n_ctx,
                                  " tokens. However, you requested ", n_prompt + max_tokens, " tokens (", n_prompt,
                                  " in the ", chat ? "messages" : "prompt", ", ", max_tokens,
                                  " in the completion). Please reduce the length of the ", prompt_field,
                                  " or completion."),
                     prompt_field, "context_length_exceeded");
  } else {
    if (room < 1)
      throw ApiError(400, str_cat("This model's maximum context length is ", limits.n_ctx, " tokens. However, your ",
                                  chat ? "messages" : "prompt", " resulted in ", n_prompt,
                                  " tokens, leaving no room for the completion."),
                     prompt_field, "context_length_exceeded");
    max_tokens = chat ? room : std::min<int64_t>(kDefaultCompletionMaxTokens, room);
  }

  std::vector<RequestParams> out(static_cast<size_t>(request.n));
  for (int32_t i = 0; i < request.n; ++i) {
    RequestParams& p = out[static_cast<size_t>(i)];
    p.prompt = prompt;
    p.max_tokens = static_cast<int32_t>(max_tokens);
    p.sampling = request.sampling;
    p.sampling.seed = choice_seed(request.sampling.seed, i);
    p.sampling.logprobs = request.logprobs;
    p.sampling.n_logprobs = request.logprobs ? request.top_logprobs : 0;
    p.stop = request.stop;
    p.ignore_eos = request.ignore_eos;
    p.grammar = request.grammar;
  }
  return out;
}

}  // namespace ridge::server
