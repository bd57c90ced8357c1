// response_format, grammar and forced tool calls as the request parser reads them: which
// grammar a request gets, and the 400s (naming the field) for bad ones.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "grammar/matcher.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace ridge::server {
namespace {

ApiRequest chat(const std::string& rest) {
  return parse_api_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + rest + "}",
                           Endpoint::kChatCompletions);
}

ApiError chat_error(const std::string& rest) {
  try {
    chat(rest);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << rest;
  return ApiError(0, "");
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  grammar::Automaton a(g);
  const int32_t s = a.step(a.start(), text);
  return s != grammar::Automaton::kDead && a.complete(s);
}

TEST(StructuredOutput, TextMeansNoGrammar) {
  EXPECT_EQ(chat(R"("response_format": {"type": "text"})").grammar, nullptr);
  EXPECT_EQ(chat(R"("max_tokens": 5)").grammar, nullptr);
}

TEST(StructuredOutput, JsonObjectAndJsonSchema) {
  const ApiRequest any = chat(R"("response_format": {"type": "json_object"})");
  ASSERT_NE(any.grammar, nullptr);
  EXPECT_TRUE(accepts(any.grammar, R"({"x": [1, 2]})"));
  EXPECT_FALSE(accepts(any.grammar, "[1, 2]"));
  // The schema's properties keep the client's order (b before a), not sorted.
  const ApiRequest typed = chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": true,
      "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "boolean"}},
      "required": ["b", "a"], "additionalProperties": false}}})");
  ASSERT_NE(typed.grammar, nullptr);
  EXPECT_TRUE(accepts(typed.grammar, R"({"b": 1, "a": true})"));
  EXPECT_FALSE(accepts(typed.grammar, R"({"a": true, "b": 1})"));
}

TEST(StructuredOutput, GbnfGrammarOnBothEndpoints) {
  const ApiRequest c = parse_api_request(R"({"prompt": "x", "grammar": "root ::= [0-9]+"})", Endpoint::kCompletions);
  ASSERT_NE(c.grammar, nullptr);
  EXPECT_TRUE(accepts(c.grammar, "2026"));
  EXPECT_NE(chat(R"("grammar": "root ::= \"a\"")").grammar, nullptr);
}

TEST(StructuredOutput, BadRequestsAre400sNamingTheField) {
  struct Case {
    std::string rest, param, message;
  };
  const Case cases[] = {
      {R"("response_format": {"type": "yaml"})", "response_format.type", "expected 'text', 'json_object'"},
      {R"("response_format": "json")", "response_format", "expected an object"},
      {R"("response_format": {})", "response_format.type", "Missing required parameter"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema", "Missing"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema.name",
       "Missing"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
          "properties": {"when": {"type": "string", "format": "date-time"}}}}})",
       "response_format.json_schema.schema", "#/properties/when/format: the keyword 'format' is not supported"},
      {R"("grammar": "root ::= (\"a\"")", "grammar", "line 1, column 14: expected ')'"},
      {R"("grammar": 5)", "grammar", "expected a string"},
      {R"("grammar": "root ::= \"a\"", "response_format": {"type": "json_object"})", "grammar", "not both"},
  };
  for (const Case& c : cases) {
    const ApiError e = chat_error(c.rest);
    EXPECT_EQ(e.status, 400) << c.rest;
    EXPECT_EQ(e.param, c.param) << c.rest << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
  }
}

TEST(StructuredOutput, ForcedToolCallGrammar) {
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}])";
  const auto any = tool_call_grammar(tools, "", /*several=*/true);
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(accepts(any, weather));
  EXPECT_TRUE(accepts(any, weather + "\n" + now));
  EXPECT_FALSE(accepts(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(any, "Sure! " + weather));
  const auto one = tool_call_grammar(tools, "now", /*several=*/false);
  EXPECT_TRUE(accepts(one, now));
  EXPECT_FALSE(accepts(one, weather));
  EXPECT_FALSE(accepts(one, now + "\n" + now));
  try {
    tool_call_grammar(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"n": {"type": "integer", "maximum": 3}}}}}])", "", false);
    ADD_FAILURE() << "no error for an unsupported keyword";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(std::string(e.what()).find("tools[0].function.parameters#/properties/n/maximum"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ridge::server
