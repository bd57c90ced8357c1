#include "server/openai_response.h"

#include <chrono>
#include <random>
#include <string_view>

#include "server/api_error.h"

namespace ridge::server {

using json = ResponseJson;

namespace {

const char* object_name(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json chunk_base(const ResponseMeta& meta) {
  return {{"id", meta.id},
          {"object", object_name(meta.endpoint, true)},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", kSystemFingerprint}};
}

json bytes_of(std::string_view piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

ResponseMeta make_response_meta(Endpoint endpoint, const std::string& model, SpecMethod spec_method) {
  ResponseMeta meta;
  meta.spec_method = spec_method;
  meta.endpoint = endpoint;
  meta.id = random_id(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-");
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  meta.model = model;
  return meta;
}

void ChoiceResult::add(const StreamEvent& event) {
  text += event.text;
  tokens.insert(tokens.end(), event.tokens.begin(), event.tokens.end());
  logprobs.insert(logprobs.end(), event.logprobs.begin(), event.logprobs.end());
  top_logprobs.insert(top_logprobs.end(), event.top_logprobs.begin(), event.top_logprobs.end());
  prompt_tokens = event.prompt_tokens;
  completion_tokens = event.completion_tokens;
  cached_prompt_tokens = event.cached_prompt_tokens;
  spec_steps = event.spec_steps;
  spec_drafted = event.spec_drafted;
  spec_accepted = event.spec_accepted;
  if (event.finished) finish_reason = event.finish_reason;
}

Usage total_usage(const std::vector<ChoiceResult>& choices) {
  Usage u;
  if (choices.empty()) return u;
  u.prompt_tokens = choices[0].prompt_tokens;
  u.cached_tokens = choices[0].cached_prompt_tokens;
  for (const ChoiceResult& c : choices) {
    u.completion_tokens += c.completion_tokens;
    u.spec_steps += c.spec_steps;
    u.spec_drafted += c.spec_drafted;
    u.spec_accepted += c.spec_accepted;
  }
  return u;
}

json speculative_json(SpecMethod method, const Usage& usage) {
  return {{"proposer", spec_method_name(method)},
          {"num_drafts", usage.spec_steps},
          {"num_draft_tokens", usage.spec_drafted},
          {"num_accepted_tokens", usage.spec_accepted}};
}

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", 0}}}};
}

const char* api_finish_reason(FinishReason reason, bool made_tool_calls) {
  if (made_tool_calls) return "tool_calls";  // as vLLM: calls made win over how it ended
  return reason == FinishReason::kLength ? "length" : "stop";
}

size_t text_length(std::string_view utf8) {
  size_t n = 0;
  for (const char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

size_t pieces_length(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens) {
  size_t n = 0;
  for (const int32_t t : tokens) n += text_length(tokenizer.token_to_piece(t));
  return n;
}

json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                   const std::vector<float>& logprobs, const std::vector<std::vector<TokenLogprob>>& top_logprobs,
                   bool with_top, size_t text_offset_base) {
  // The engine gives one logprob per token; guard anyway so a mismatch cannot read past.
  const size_t n = std::min(tokens.size(), logprobs.size());
  auto top_at = [&](size_t i) -> const std::vector<TokenLogprob>* {
    return with_top && i < top_logprobs.size() ? &top_logprobs[i] : nullptr;
  };
  if (endpoint == Endpoint::kCompletions) {
    json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t offset = text_offset_base;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view piece = tokenizer.token_to_piece(tokens[i]);
      toks.push_back(piece);
      lps.push_back(logprobs[i]);
      offsets.push_back(offset);
      offset += text_length(piece);
      json alternatives = json::object();
      if (const auto* top = top_at(i))
        for (const TokenLogprob& t : *top) alternatives[tokenizer.token_to_piece(t.token)] = t.logprob;
      tops.push_back(std::move(alternatives));
    }
    return {{"tokens", toks},
            {"token_logprobs", lps},
            {"top_logprobs", with_top ? tops : json(nullptr)},
            {"text_offset", offsets}};
  }
  json content = json::array();
  for (size_t i = 0; i < n; ++i) {
    const std::string_view piece = tokenizer.token_to_piece(tokens[i]);
    json alternatives = json::array();
    if (const auto* top = top_at(i))
      for (const TokenLogprob& t : *top) {
        const std::string_view alt = tokenizer.token_to_piece(t.token);
        alternatives.push_back({{"token", alt}, {"logprob", t.logprob}, {"bytes", bytes_of(alt)}});
      }
    content.push_back(
        {{"token", piece}, {"logprob", logprobs[i]}, {"bytes", bytes_of(piece)}, {"top_logprobs", alternatives}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, const Tokenizer& tokenizer,
                   const ApiRequest& request, ToolCallSyntax tool_syntax) {
  json out_choices = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json lp = request.logprobs ? logprobs_json(meta.endpoint, tokenizer, c.tokens, c.logprobs, c.top_logprobs,
                                               request.top_logprobs > 0, 0)
                               : json(nullptr);
    if (meta.endpoint == Endpoint::kCompletions)
      out_choices.push_back(
          {{"text", c.text}, {"index", i}, {"logprobs", lp}, {"finish_reason", api_finish_reason(c.finish_reason)}});
    else if (tool_syntax == ToolCallSyntax::kNone)
      out_choices.push_back({{"index", i},
                             {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                             {"logprobs", lp},
                             {"finish_reason", api_finish_reason(c.finish_reason)}});
    else {
      ParsedToolOutput parsed = parse_tool_output(c.text, request.tool_names);
      json message = {{"role", "assistant"},
                      {"content", parsed.content.empty() ? json(nullptr) : json(parsed.content)},
                      {"refusal", nullptr}};
      if (!parsed.calls.empty()) {
        json calls = json::array();
        for (const ParsedToolCall& call : parsed.calls)
          calls.push_back({{"id", new_tool_call_id()},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        message["tool_calls"] = std::move(calls);
      }
      out_choices.push_back({{"index", i},
                             {"message", std::move(message)},
                             {"logprobs", lp},
                             {"finish_reason", api_finish_reason(c.finish_reason, !parsed.calls.empty())}});
    }
  }
  const Usage usage = total_usage(choices);
  json out = {{"id", meta.id},
              {"object", object_name(meta.endpoint, false)},
              {"created", meta.created},
              {"model", meta.model},
              {"system_fingerprint", kSystemFingerprint},
              {"choices", out_choices},
              {"usage", usage_json(usage)}};
  if (meta.spec_method != SpecMethod::kNone) out["speculative"] = speculative_json(meta.spec_method, usage);
  return out;
}

json role_chunk(const ResponseMeta& meta, int32_t index, bool include_usage) {
  json chunk = chunk_base(meta);
  chunk["choices"] = json::array(
      {{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
        {"finish_reason", nullptr}}});
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json text_chunk(const ResponseMeta& meta, int32_t index, const StreamEvent& event, const Tokenizer& tokenizer,
                const ApiRequest& request, size_t text_offset_base) {
  json chunk = chunk_base(meta);
  json lp = request.logprobs ? logprobs_json(meta.endpoint, tokenizer, event.tokens, event.logprobs,
                                             event.top_logprobs, request.top_logprobs > 0, text_offset_base)
                             : json(nullptr);
  if (meta.endpoint == Endpoint::kCompletions)
    chunk["choices"] = json::array(
        {{{"text", event.text}, {"index", index}, {"logprobs", lp}, {"finish_reason", nullptr}}});
  else
    chunk["choices"] = json::array(
        {{{"index", index}, {"delta", {{"content", event.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}});
  if (request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json finish_chunk(const ResponseMeta& meta, int32_t index, FinishReason reason, bool include_usage,
                  bool made_tool_calls) {
  json chunk = chunk_base(meta);
  if (meta.endpoint == Endpoint::kCompletions)
    chunk["choices"] = json::array(
        {{{"text", ""}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", api_finish_reason(reason)}}});
  else
    chunk["choices"] = json::array({{{"index", index},
                                     {"delta", json::object()},
                                     {"logprobs", nullptr},
                                     {"finish_reason", api_finish_reason(reason, made_tool_calls)}}});
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

std::vector<json> tool_call_chunks(const ResponseMeta& meta, int32_t index, int32_t call_index,
                                   const std::string& call_id, const ParsedToolCall& call, bool include_usage) {
  auto chunk_with = [&](json tool_call) {
    json chunk = chunk_base(meta);
    chunk["choices"] = json::array({{{"index", index},
                                     {"delta", {{"tool_calls", json::array({std::move(tool_call)})}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    if (include_usage) chunk["usage"] = nullptr;
    return chunk;
  };
  return {chunk_with({{"index", call_index},
                      {"id", call_id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", ""}}}}),
          chunk_with({{"index", call_index}, {"function", {{"arguments", call.arguments}}}})};
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  json chunk = chunk_base(meta);
  chunk["choices"] = json::array();
  chunk["usage"] = usage_json(usage);
  if (meta.spec_method != SpecMethod::kNone) chunk["speculative"] = speculative_json(meta.spec_method, usage);
  return chunk;
}

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

std::string named_sse_event(std::string_view name, const json& value) {
  return str_cat("event: ", name, "\ndata: ", dump_json(value), "\n\n");
}

std::vector<std::string> take_sse_data(std::string& pending, std::string_view more) {
  pending.append(more);
  std::vector<std::string> data;
  size_t begin = 0;
  for (size_t end; (end = pending.find("\n\n", begin)) != std::string::npos; begin = end + 2)
    if (pending.compare(begin, 6, "data: ") == 0) data.push_back(pending.substr(begin + 6, end - begin - 6));
  pending.erase(0, begin);
  return data;
}

std::string random_id(std::string_view prefix) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

}  // namespace ridge::server
