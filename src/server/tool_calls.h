// Tool calls in a chat model's output: which syntax the model's chat template teaches it,
// and a parser that splits the generated text into content and calls, whole or streamed.
// Qwen2.5 and Hermes-style templates write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
//
//   ToolCallParser parser;                                      // one per choice
//   for (const ToolCallPiece& p : parser.feed(event.text)) ...;  // content or a whole call
//   for (const ToolCallPiece& p : parser.finish()) ...;          // at the end of the stream
//   ParsedToolOutput all = parse_tool_output(text);             // the same, in one go
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace ridge::server {

enum class ToolCallSyntax {
  kNone,    // the template shows no call syntax we know: output stays content
  kHermes,  // <tool_call>{"name", "arguments"}</tool_call> (Qwen2.5, Hermes, ...)
};

// kHermes when the model's own template mentions <tool_call>, else kNone.
ToolCallSyntax tool_call_syntax(const ChatTemplate& tmpl);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text, the model's key order kept
};

// A piece of output: content text, or one complete call.
struct ToolCallPiece {
  bool is_call = false;
  std::string content;  // when !is_call
  ParsedToolCall call;  // when is_call
};

// Splits text into content and <tool_call> blocks as it arrives (and, given the tool
// names, ```json fences naming one of them: Qwen2.5-Coder writes its calls so). Text that
// may be the start of a block is held back until it is known; a block is held until it closes
// and then becomes a call, or content (its raw text) when its JSON is not a call object.
// Whitespace that only separates calls from each other or from content is dropped; between
// content before and after a call, the whitespace after the call is kept.
class ToolCallParser {
 public:
  // tool_names: the request's tools; a ```json fence is a call only if it names one.
  explicit ToolCallParser(std::vector<std::string> tool_names = {});
  std::vector<ToolCallPiece> feed(std::string_view text);
  // The end of the output: what was held back. An unclosed block whose JSON is a complete
  // call is a call (the model stopped before "</tool_call>"); otherwise it is content.
  std::vector<ToolCallPiece> finish();
  int n_calls() const { return n_calls_; }

 private:
  struct Block {
    std::string_view open, close;
    bool needs_known_name;  // a call only if it names one of tool_names_
  };
  static const Block kBlocks[2];

  void emit_content(std::string_view text, std::vector<ToolCallPiece>& out);
  void end_block(std::string_view body, bool closed, std::vector<ToolCallPiece>& out);

  std::string pending_;        // outside a block: a possible tag start; inside: the block's body
  std::string pending_space_;  // trailing whitespace of content, dropped if a call follows
  std::string block_space_;    // the whitespace before the open block, kept if it is not a call
  std::vector<std::string> tool_names_;
  const Block* block_ = nullptr;  // the open block, if inside one
  bool content_emitted_ = false;  // whitespace after a call and before any content is dropped
  int n_calls_ = 0;
};

struct ParsedToolOutput {
  std::string content;  // the text outside the calls
  std::vector<ParsedToolCall> calls;
};

ParsedToolOutput parse_tool_output(std::string_view text, std::vector<std::string> tool_names = {});

// "call_" and 24 random letters and digits.
std::string new_tool_call_id();

}  // namespace ridge::server
