// Chat templates: turns a conversation into the prompt text a model was trained on. The
// format is detected from the GGUF's tokenizer.chat_template (by its telltale markers, as
// llama.cpp does, rather than running Jinja), falling back to the architecture.
//
//   ChatTemplate t = detect_chat_template(file);        // throws if none can be found
//   ChatPrompt p = render_chat_prompt(t, {{"user", "Hi"}}, /*add_assistant=*/true);
//   std::vector<int32_t> ids = tokenizer.encode_with_markup(p.text, p.markup);
//
// Message content is untrusted: only the template's own markup may become special
// tokens, so a message holding "<|im_end|>" cannot close its turn and forge another.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

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

// A rendered conversation: the prompt text and where the template's own markup lies in
// it (sorted); everything else is message content.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> markup;
};

// Renders the conversation; with add_assistant, ends with the opening of the assistant's
// turn so generation continues as the assistant. BOS is not included (the tokenizer adds
// it). Throws ridge::Error for an unknown role.
ChatPrompt render_chat_prompt(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant);
// The text of render_chat_prompt, for a caller that trusts the content (its own user's
// terminal) and tokenizes it with parse_special.
std::string apply_chat_template(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant);

}  // namespace ridge
