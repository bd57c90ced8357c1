// Structured output for the OpenAI endpoints: the grammar a request's output must follow,
// from `response_format` (json_object, json_schema), llama-server's `grammar` (GBNF), or a
// forced tool call (tool_choice "required" or a named function). Errors are ApiError(400)
// naming the field.
//
//   auto g = structured_output_grammar(body);   // null when the output is free text
//   auto t = tool_call_grammar(tools_json, "get_weather", false);   // <tool_call>...</tool_call>
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace ridge::server {

// response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict", "description"}} and grammar (a GBNF string; not together with a
// response_format other than text). body_text: the same body, for the schema's key order.
std::shared_ptr<const grammar::Grammar> structured_output_grammar(std::string_view body_text,
                                                                  const nlohmann::json& body);

// The Hermes / Qwen2.5 call syntax, <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>,
// with ARGS following the tool's parameters schema. tools_json: the request's tools array;
// only: the one function allowed ("" for any of them); several: calls separated by a newline
// (parallel_tool_calls), else exactly one.
std::shared_ptr<const grammar::Grammar> tool_call_grammar(const std::string& tools_json, const std::string& only,
                                                          bool several);

}  // namespace ridge::server
