#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include <random>
#include <utility>

namespace ridge::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr const char* kSpace = " \t\r\n";

// The length of the longest proper prefix of `tag` that `text` ends with: bytes that may
// become the tag once more text arrives.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

// {"name": "...", "arguments": {...}} (arguments may also be a JSON string, or absent).
// ordered_json keeps the model's key order in the arguments text.
bool parse_call(std::string_view body, ParsedToolCall& call) {
  using nlohmann::ordered_json;
  const ordered_json j = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end() || args->is_null())
    call.arguments = "{}";
  else if (args->is_object())
    call.arguments = args->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  else if (args->is_string())
    call.arguments = args->get<std::string>();
  else
    return false;
  return true;
}

}  // namespace

// The block kinds: Hermes' tags, and the Markdown JSON fence Qwen2.5-Coder writes its
// calls in (llama.cpp's Hermes parser accepts it too); a fence is a call only when it
// names one of the request's tools, so a JSON answer is not mistaken for one.
const ToolCallParser::Block ToolCallParser::kBlocks[2] = {
    {"<tool_call>", "</tool_call>", /*needs_known_name=*/false},
    {"```json", "```", /*needs_known_name=*/true},
};

ToolCallParser::ToolCallParser(std::vector<std::string> tool_names) : tool_names_(std::move(tool_names)) {}

ToolCallSyntax tool_call_syntax(const ChatTemplate& tmpl) {
  if (tmpl.jinja != nullptr && tmpl.jinja_source.find(kOpen) != std::string::npos) return ToolCallSyntax::kHermes;
  return ToolCallSyntax::kNone;
}

void ToolCallParser::emit_content(std::string_view text, std::vector<ToolCallPiece>& out) {
  const size_t last = text.find_last_not_of(kSpace);
  if (last == std::string_view::npos) {
    pending_space_ += text;
    return;
  }
  std::string content = std::exchange(pending_space_, std::string(text.substr(last + 1)));
  text = text.substr(0, last + 1);
  if (n_calls_ > 0 && !content_emitted_) {  // whitespace that only followed a call
    content.clear();
    text.remove_prefix(text.find_first_not_of(kSpace));
  }
  content += text;
  content_emitted_ = true;
  if (!out.empty() && !out.back().is_call)
    out.back().content += content;
  else
    out.push_back(ToolCallPiece{.is_call = false, .content = std::move(content), .call = {}});
}

void ToolCallParser::end_block(std::string_view body, bool closed, std::vector<ToolCallPiece>& out) {
  const Block& block = *block_;
  block_ = nullptr;
  ToolCallPiece piece;
  auto known = [&] {
    for (const std::string& name : tool_names_)
      if (name == piece.call.name) return true;
    return false;
  };
  if (parse_call(body, piece.call) && (!block.needs_known_name || known())) {
    piece.is_call = true;
    out.push_back(std::move(piece));
    ++n_calls_;
    block_space_.clear();
    return;
  }
  // Not a call: the block is the model's text after all, with the space before it.
  pending_space_ = std::exchange(block_space_, std::string());
  std::string raw(block.open);
  raw += body;
  if (closed) raw += block.close;
  emit_content(raw, out);
}

std::vector<ToolCallPiece> ToolCallParser::feed(std::string_view text) {
  std::vector<ToolCallPiece> out;
  pending_ += text;
  // Fences are looked for only when a call in one could be recognised.
  const size_t n_kinds = tool_names_.empty() ? 1 : 2;
  for (;;) {
    if (block_ == nullptr) {
      size_t open = std::string::npos;
      for (size_t k = 0; k < n_kinds; ++k) {
        const size_t at = pending_.find(kBlocks[k].open);
        if (at < open) open = at, block_ = &kBlocks[k];
      }
      if (block_ == nullptr) {
        size_t held = 0;
        for (size_t k = 0; k < n_kinds; ++k) held = std::max(held, partial_tag_suffix(pending_, kBlocks[k].open));
        const size_t emit = pending_.size() - held;
        emit_content(std::string_view(pending_).substr(0, emit), out);
        pending_.erase(0, emit);
        return out;
      }
      emit_content(std::string_view(pending_).substr(0, open), out);
      block_space_ = std::exchange(pending_space_, std::string());
      pending_.erase(0, open + block_->open.size());
    } else {
      const size_t close = pending_.find(block_->close);
      if (close == std::string::npos) return out;  // the block is held until it closes
      const std::string body = pending_.substr(0, close);
      pending_.erase(0, close + block_->close.size());
      end_block(body, /*closed=*/true, out);
    }
  }
}

std::vector<ToolCallPiece> ToolCallParser::finish() {
  std::vector<ToolCallPiece> out;
  if (block_ != nullptr)
    end_block(pending_, /*closed=*/false, out);
  else
    emit_content(pending_, out);
  pending_.clear();
  // Trailing whitespace is the model's own when it called nothing; after calls it only
  // separated them.
  if (n_calls_ == 0 && !pending_space_.empty()) {
    if (!out.empty() && !out.back().is_call)
      out.back().content += pending_space_;
    else
      out.push_back(ToolCallPiece{.is_call = false, .content = pending_space_, .call = {}});
  }
  pending_space_.clear();
  return out;
}

ParsedToolOutput parse_tool_output(std::string_view text, std::vector<std::string> tool_names) {
  ToolCallParser parser(std::move(tool_names));
  ParsedToolOutput result;
  auto take = [&](std::vector<ToolCallPiece> pieces) {
    for (ToolCallPiece& p : pieces) {
      if (p.is_call)
        result.calls.push_back(std::move(p.call));
      else
        result.content += p.content;
    }
  };
  take(parser.feed(text));
  take(parser.finish());
  return result;
}

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

}  // namespace ridge::server
