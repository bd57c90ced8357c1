// Chat templates: turns a conversation into the prompt text a model was trained on. A
// model with tokenizer.chat_template renders that Jinja template (tokenizer/jinja/), as
// Hugging Face's apply_chat_template does; one without falls back to four built-in
// formats chosen by its architecture.
//
//   ChatTemplate t = detect_chat_template(file);        // throws if none can be found
//   ChatPrompt p = render_chat_prompt(t, {{"user", "Hi"}}, /*add_assistant=*/true);
//   std::vector<int32_t> ids = tokenizer.encode_with_markup(p.text, p.markup);
//
// Message content is untrusted: only the template's own markup may become special
// tokens, so a message holding "<|im_end|>" cannot close its turn and forge another.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"
#include "tokenizer/tokenizer.h"

namespace ridge::gguf {
class File;
}

namespace ridge {

enum class ChatFormat { kChatML, kGemma, kLlama2, kLlama3 };

// A tool call an assistant turn made, as OpenAI's API carries it.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text; the template sees it parsed when it is an object
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content) : role(std::move(role)), content(std::move(content)) {}

  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;  // for an assistant turn with tool calls, "" is passed as None
  std::vector<ToolCall> tool_calls;  // assistant turns
  std::string tool_call_id;          // tool turns: the call this answers ("" if none)
  std::string name;                  // tool turns: the tool's name ("" if none)
};

// The model's own template when it has one; else a built-in format plus the system
// message the template inserts when the conversation has none (Qwen's templates do:
// "You are Qwen, created by Alibaba Cloud. ...").
struct ChatTemplate {
  ChatTemplate() = default;
  ChatTemplate(ChatFormat format, std::string default_system)
      : format(format), default_system(std::move(default_system)) {}

  ChatFormat format = ChatFormat::kChatML;  // the fallback, used when `jinja` is null
  std::string default_system;
  std::shared_ptr<const jinja::Template> jinja;  // tokenizer.chat_template, parsed
  std::string jinja_source;  // its text: what a server reads the tool-call syntax from
  // tokenizer.chat_template did not parse: rendering throws this (a server answers 500).
  std::optional<jinja::TemplateError> parse_error;
  std::string bos_token, eos_token;  // their text, as the template sees them
  bool tokenizer_adds_bos = false;   // a leading bos_token the template writes is dropped

  bool uses_jinja() const { return jinja != nullptr || parse_error.has_value(); }
};

std::string_view chat_format_name(ChatFormat format);
// "jinja" for the model's own template, else the built-in format's name.
std::string_view chat_template_name(const ChatTemplate& tmpl);

// From a Jinja template's markers: <|im_start|> ChatML (Qwen), <start_of_turn> Gemma,
// <|start_header_id|> Llama 3, [INST] Llama 2 / Mistral. Returns false if none match.
bool chat_format_from_template(std::string_view jinja, ChatFormat& format);

// tokenizer.chat_template if present (parsed; a syntax error is kept in parse_error and
// thrown on use), else a built-in format by general.architecture (gemma3 -> Gemma,
// qwen2/qwen3 -> ChatML). Throws ridge::Error naming the model when neither tells.
ChatTemplate detect_chat_template(const gguf::File& file);
// A template from Jinja source, with the special tokens' text as the model has them.
ChatTemplate chat_template_from_jinja(std::string_view source, std::string name, std::string bos_token,
                                      std::string eos_token, bool tokenizer_adds_bos);

// A rendered conversation: the prompt text and where the template's own markup lies in
// it (sorted); everything else is message content.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> markup;
};

// Renders the conversation; with add_assistant, ends with the opening of the assistant's
// turn so generation continues as the assistant. BOS is not included when the tokenizer
// adds it. tools_json: the request's tools as a JSON array ("" for none), for templates
// that render them. Throws ridge::Error for a role or tool call the built-in formats
// cannot show, jinja::TemplateError for a template that fails (or raise_exception()s).
ChatPrompt render_chat_prompt(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant,
                              std::string_view tools_json = {});
// The model's own template over messages and tools given as values (JSON parsed with
// jinja::parse_json), exactly as apply_chat_template renders it: BOS text included.
// extra_variables: more keyword arguments for the template (apply_chat_template's
// **kwargs), e.g. a date_string. Throws ridge::Error if the model has no template.
ChatPrompt render_jinja_chat(const ChatTemplate& tmpl, const jinja::Value& messages, const jinja::Value& tools,
                             bool add_generation_prompt, const jinja::Dict* extra_variables = nullptr);
// The messages as the template sees them: a list of dicts with role, content and, when
// present, tool_calls ({id, type, function: {name, arguments}}), tool_call_id and name.
jinja::Value chat_messages_value(std::span<const ChatMessage> messages);
// The text of render_chat_prompt, for a caller that trusts the content (its own user's
// terminal) and tokenizes it with parse_special.
std::string apply_chat_template(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant,
                                std::string_view tools_json = {});

}  // namespace ridge
