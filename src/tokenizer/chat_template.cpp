#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

#include <vector>

namespace ridge {
namespace {

// The built-in formats know three roles and no tools.
void check_role(const ChatMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant")
    throw Error(str_cat("chat message role '", m.role, "' is not one of system, user, assistant",
                        m.role == "tool" ? " (tool messages need the model's own chat template)" : ""));
  if (!m.tool_calls.empty())
    throw Error("tool calls in a message need the model's own chat template (tokenizer.chat_template)");
}

jinja::Str content(const std::string& s) { return jinja::Str::content(s); }
jinja::Str key(const char* s) { return jinja::Str::markup(s); }

// OpenAI sends arguments as JSON text; templates (Qwen's `arguments | tojson`) expect
// the object, as llama.cpp and vLLM give them. Text that is no JSON object stays text.
jinja::Value tool_arguments(const std::string& text) {
  try {
    jinja::Value v = jinja::parse_json(text);
    if (v.is_dict()) return v;
  } catch (const Error&) {
  }
  return jinja::Value(content(text));
}

// Builds a ChatPrompt piece by piece, recording which pieces are markup.
class PromptBuilder {
 public:
  PromptBuilder& markup(std::string_view s) {
    if (s.empty()) return *this;
    if (!p_.markup.empty() && p_.markup.back().end == p_.text.size()) {
      p_.markup.back().end += s.size();  // adjacent markup: one range
    } else {
      p_.markup.push_back({p_.text.size(), p_.text.size() + s.size()});
    }
    p_.text += s;
    return *this;
  }
  PromptBuilder& content(std::string_view s) {
    p_.text += s;
    return *this;
  }
  ChatPrompt take() { return std::move(p_); }

 private:
  ChatPrompt p_;
};

ChatPrompt render_chatml(std::span<const ChatMessage> messages, bool add_assistant) {
  PromptBuilder b;
  for (const ChatMessage& m : messages)
    b.markup("<|im_start|>").markup(m.role).markup("\n").content(m.content).markup("<|im_end|>\n");
  if (add_assistant) b.markup("<|im_start|>assistant\n");
  return b.take();
}

// Gemma has no system role: the system text opens the first user turn.
ChatPrompt render_gemma(std::span<const ChatMessage> messages, bool add_assistant) {
  PromptBuilder b;
  std::vector<const ChatMessage*> system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.push_back(&m);
      continue;
    }
    b.markup("<start_of_turn>").markup(m.role == "assistant" ? "model" : "user").markup("\n");
    if (m.role == "user") {
      for (const ChatMessage* s : system) b.content(s->content).markup("\n\n");
      system.clear();
    }
    b.content(m.content).markup("<end_of_turn>\n");
  }
  if (add_assistant) b.markup("<start_of_turn>model\n");
  return b.take();
}

ChatPrompt render_llama3(std::span<const ChatMessage> messages, bool add_assistant) {
  PromptBuilder b;
  for (const ChatMessage& m : messages)
    b.markup("<|start_header_id|>").markup(m.role).markup("<|end_header_id|>\n\n").content(m.content).markup("<|eot_id|>");
  if (add_assistant) b.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return b.take();
}

// [INST] user [/INST] answer</s>, with a system text in <<SYS>> inside the first [INST].
ChatPrompt render_llama2(std::span<const ChatMessage> messages, bool add_assistant) {
  PromptBuilder b;
  const ChatMessage* system = nullptr;
  bool first = true;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = &m;
    } else if (m.role == "user") {
      b.markup(first ? "" : "<s>").markup("[INST] ");
      if (system != nullptr) b.markup("<<SYS>>\n").content(system->content).markup("\n<</SYS>>\n\n");
      b.content(m.content).markup(" [/INST]");
      system = nullptr;
      first = false;
    } else {
      b.markup(" ").content(m.content).markup("</s>");
    }
  }
  (void)add_assistant;  // the assistant turn opens right after [/INST]
  return b.take();
}

}  // namespace

jinja::Value chat_messages_value(std::span<const ChatMessage> messages) {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    auto d = std::make_shared<jinja::Dict>();
    d->set(key("role"), jinja::Value(content(m.role)));
    if (!m.tool_calls.empty() && m.content.empty()) d->set(key("content"), jinja::Value(jinja::None{}));
    else d->set(key("content"), jinja::Value(content(m.content)));
    if (!m.tool_calls.empty()) {
      jinja::List calls;
      for (const ToolCall& c : m.tool_calls) {
        auto function = std::make_shared<jinja::Dict>();
        function->set(key("name"), jinja::Value(content(c.name)));
        function->set(key("arguments"), tool_arguments(c.arguments));
        auto call = std::make_shared<jinja::Dict>();
        if (!c.id.empty()) call->set(key("id"), jinja::Value(content(c.id)));
        call->set(key("type"), jinja::Value(jinja::Str::markup("function")));
        call->set(key("function"), jinja::Value(function));
        calls.emplace_back(call);
      }
      d->set(key("tool_calls"), jinja::Value(std::move(calls)));
    }
    if (!m.tool_call_id.empty()) d->set(key("tool_call_id"), jinja::Value(content(m.tool_call_id)));
    if (!m.name.empty()) d->set(key("name"), jinja::Value(content(m.name)));
    list.emplace_back(d);
  }
  return jinja::Value(std::move(list));
}

std::string_view chat_template_name(const ChatTemplate& tmpl) {
  return tmpl.uses_jinja() ? "jinja" : chat_format_name(tmpl.format);
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kLlama3: return "llama3";
  }
  return "?";
}

bool chat_format_from_template(std::string_view jinja, ChatFormat& format) {
  if (jinja.find("<|im_start|>") != std::string_view::npos) format = ChatFormat::kChatML;
  else if (jinja.find("<start_of_turn>") != std::string_view::npos) format = ChatFormat::kGemma;
  else if (jinja.find("<|start_header_id|>") != std::string_view::npos) format = ChatFormat::kLlama3;
  else if (jinja.find("[INST]") != std::string_view::npos) format = ChatFormat::kLlama2;
  else return false;
  return true;
}

ChatTemplate chat_template_from_jinja(std::string_view source, std::string name, std::string bos_token,
                                      std::string eos_token, bool tokenizer_adds_bos) {
  ChatTemplate t;
  chat_format_from_template(source, t.format);  // for display only; the template renders
  try {
    t.jinja = std::make_shared<const jinja::Template>(jinja::Template::parse(source, std::move(name)));
  } catch (const jinja::TemplateError& e) {
    t.parse_error = e;
  }
  t.jinja_source = std::string(source);
  t.bos_token = std::move(bos_token);
  t.eos_token = std::move(eos_token);
  t.tokenizer_adds_bos = tokenizer_adds_bos;
  return t;
}

ChatTemplate detect_chat_template(const gguf::File& file) {
  std::string jinja = file.get_string("tokenizer.chat_template", "");
  if (!jinja.empty()) {
    const Vocab vocab = Vocab::from_gguf(file);
    auto text = [&](int32_t id) { return vocab.contains(id) ? std::string(vocab.text(id)) : std::string(); };
    return chat_template_from_jinja(jinja, str_cat(file.name(), ": tokenizer.chat_template"), text(vocab.bos()),
                                    text(vocab.eos()), vocab.add_bos() && vocab.contains(vocab.bos()));
  }
  std::string arch = file.get_string("general.architecture", "");
  if (arch == "gemma3" || arch == "gemma2" || arch == "gemma") return {ChatFormat::kGemma, ""};
  if (arch == "qwen2" || arch == "qwen3") return {ChatFormat::kChatML, ""};
  throw Error(str_cat(file.name(), ": no chat template recognised (tokenizer.chat_template ",
                      jinja.empty() ? "absent" : "unrecognised", ", architecture '", arch, "')"));
}

std::string apply_chat_template(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                                bool add_assistant, std::string_view tools_json) {
  return render_chat_prompt(tmpl, messages, add_assistant, tools_json).text;
}

ChatPrompt render_jinja_chat(const ChatTemplate& tmpl, const jinja::Value& messages, const jinja::Value& tools,
                             bool add_generation_prompt, const jinja::Dict* extra_variables) {
  if (tmpl.parse_error) throw *tmpl.parse_error;
  if (!tmpl.jinja) throw Error("this model has no chat template of its own (tokenizer.chat_template)");
  // What apply_chat_template passes: the conversation, the tools (None when absent),
  // the flag, and the special tokens' text (trusted, so markup).
  jinja::Dict vars;
  vars.set(key("messages"), messages);
  vars.set(key("tools"), tools);
  vars.set(key("add_generation_prompt"), jinja::Value(add_generation_prompt));
  if (!tmpl.bos_token.empty()) vars.set(key("bos_token"), jinja::Value(jinja::Str::markup(tmpl.bos_token)));
  if (!tmpl.eos_token.empty()) vars.set(key("eos_token"), jinja::Value(jinja::Str::markup(tmpl.eos_token)));
  if (extra_variables != nullptr)
    for (const auto& [name, value] : extra_variables->entries) vars.set(name, value);
  jinja::Str out = tmpl.jinja->render(vars);
  return ChatPrompt{out.text(), out.markup_ranges()};
}

ChatPrompt render_chat_prompt(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                              bool add_assistant, std::string_view tools_json) {
  if (tmpl.uses_jinja()) {
    jinja::Value tools = tools_json.empty() ? jinja::Value(jinja::None{}) : jinja::parse_json(tools_json);
    ChatPrompt p = render_jinja_chat(tmpl, chat_messages_value(messages), tools, add_assistant);
    // The tokenizer adds BOS itself; the template's own copy would make two.
    const size_t n = tmpl.bos_token.size();
    if (tmpl.tokenizer_adds_bos && n > 0 && p.text.compare(0, n, tmpl.bos_token) == 0 && !p.markup.empty() &&
        p.markup[0].begin == 0 && p.markup[0].end >= n) {
      p.text.erase(0, n);
      std::vector<TextRange> shifted;
      for (const TextRange& r : p.markup)
        if (r.end > n) shifted.push_back({r.begin < n ? 0 : r.begin - n, r.end - n});
      p.markup = std::move(shifted);
    }
    return p;
  }
  if (!tools_json.empty()) throw Error("tools need the model's own chat template (tokenizer.chat_template)");
  for (const ChatMessage& m : messages) check_role(m);
  std::vector<ChatMessage> with_system;
  if (!tmpl.default_system.empty() && (messages.empty() || messages[0].role != "system")) {
    with_system.push_back({"system", tmpl.default_system});
    with_system.insert(with_system.end(), messages.begin(), messages.end());
    messages = with_system;
  }
  switch (tmpl.format) {
    case ChatFormat::kChatML: return render_chatml(messages, add_assistant);
    case ChatFormat::kGemma: return render_gemma(messages, add_assistant);
    case ChatFormat::kLlama3: return render_llama3(messages, add_assistant);
    case ChatFormat::kLlama2: return render_llama2(messages, add_assistant);
  }
  return {};
}

}  // namespace ridge
