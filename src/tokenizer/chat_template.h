// Chat templates: turns a conversation into the prompt text a model was trained on. The
// format is detected from the GGUF's tokenizer.chat_template (by its telltale markers, as
// llama.cpp does, rather than running Jinja), falling back to the architecture.
//
//   ChatTemplate t = detect_chat_template(file);        // throws if none can be found
//   std::string prompt = apply_chat_template(t, {{"user", "Hi"}}, /*add_assistant=*/true);
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace ridge::gguf {
class File;
}

namespace ridge {

enum class ChatFormat { kChatML, kGemma, kLlama2, kLlama3 };

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// A format plus the system message the template inserts when the conversation has none
// (Qwen's templates do: "You are Qwen, created by Alibaba Cloud. ...").
struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatML;
  std::string default_system;
};

std::string_view chat_format_name(ChatFormat format);

// From a Jinja template's markers: <|im_start|> ChatML (Qwen), <start_of_turn> Gemma,
// <|start_header_id|> Llama 3, [INST] Llama 2 / Mistral. Returns false if none match.
bool chat_format_from_template(std::string_view jinja, ChatFormat& format);

// tokenizer.chat_template if present and recognised, else by general.architecture
// (gemma3 -> Gemma, qwen2/qwen3 -> ChatML). Throws ridge::Error naming the model when
// neither tells.
ChatTemplate detect_chat_template(const gguf::File& file);

// Renders the conversation; with add_assistant, ends with the opening of the assistant's
// turn so generation continues as the assistant. BOS is not included (the tokenizer adds
// it). Throws ridge::Error for an unknown role.
std::string apply_chat_template(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant);

}  // namespace ridge
