#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "gguf/gguf.h"

#include <vector>

namespace ridge {
namespace {

void check_role(const ChatMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant")
    throw Error(str_cat("chat message role '", m.role, "' is not one of system, user, assistant"));
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

ChatTemplate detect_chat_template(const gguf::File& file) {
  ChatTemplate t;
  std::string jinja = file.get_string("tokenizer.chat_template", "");
  if (!jinja.empty() && chat_format_from_template(jinja, t.format)) {
    // The one default system text in wide use; others would need a Jinja engine.
    constexpr std::string_view kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    if (jinja.find(kQwenSystem) != std::string::npos) t.default_system = kQwenSystem;
    return t;
  }
  std::string arch = file.get_string("general.architecture", "");
  if (arch == "gemma3" || arch == "gemma2" || arch == "gemma") return {ChatFormat::kGemma, ""};
  if (arch == "qwen2" || arch == "qwen3") return {ChatFormat::kChatML, ""};
  throw Error(str_cat(file.name(), ": no chat template recognised (tokenizer.chat_template ",
                      jinja.empty() ? "absent" : "unrecognised", ", architecture '", arch, "')"));
}

std::string apply_chat_template(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                                bool add_assistant) {
  return render_chat_prompt(tmpl, messages, add_assistant).text;
}

ChatPrompt render_chat_prompt(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                              bool add_assistant) {
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
