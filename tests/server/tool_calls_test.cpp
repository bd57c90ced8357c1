// Tool calls: the request's tools and tool_choice (validation, what the template sees),
// and the parser that turns Hermes-style <tool_call> blocks in the model's output into
// calls, whole and streamed at every split of the text.
#include "server/tool_calls.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace ridge::server {
namespace {

// The parser's pieces flattened for comparison: content runs joined, each call as
// "CALL name args".
std::vector<std::string> flatten(const std::vector<ToolCallPiece>& pieces) {
  std::vector<std::string> out;
  for (const ToolCallPiece& p : pieces) {
    if (p.is_call) {
      out.push_back("CALL " + p.call.name + " " + p.call.arguments);
    } else if (!out.empty() && out.back().rfind("CALL ", 0) != 0) {
      out.back() += p.content;
    } else {
      out.push_back(p.content);
    }
  }
  return out;
}

std::vector<ToolCallPiece> run(const std::vector<std::string>& parts, const std::vector<std::string>& names = {}) {
  ToolCallParser parser(names);
  std::vector<ToolCallPiece> all;
  for (const std::string& part : parts)
    for (ToolCallPiece& p : parser.feed(part)) all.push_back(std::move(p));
  for (ToolCallPiece& p : parser.finish()) all.push_back(std::move(p));
  return all;
}

const std::string kTwoCalls =
    "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
    "\"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";

TEST(ToolCallParser, CompleteOutputWithTextAndTwoCalls) {
  ParsedToolOutput out = parse_tool_output(kTwoCalls);
  EXPECT_EQ(out.content, "Let me check both.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  // The model's key order is kept (unit after city), compact JSON.
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, R"({"zone":"CET"})");
}

TEST(ToolCallParser, OnlyACallHasNoContent) {
  ParsedToolOutput out =
      parse_tool_output("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"x":[1,2]})");
}

TEST(ToolCallParser, TextWithoutCallsIsUnchanged) {
  const std::string text = "  Plain answer, with a < sign and <tool_ in it.\n\n";
  ParsedToolOutput out = parse_tool_output(text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(parse_tool_output("ends with <tool_c").content, "ends with <tool_c");
}

TEST(ToolCallParser, TextAfterACallIsContent) {
  ParsedToolOutput out = parse_tool_output(
      "Before.\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nAfter it.");
  EXPECT_EQ(out.content, "Before.\nAfter it.");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{}");
}

TEST(ToolCallParser, MalformedBlocksStayContent) {
  // Not JSON, JSON that is no call object, a call without a name, arguments of a wrong type.
  for (const std::string block :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}\n</tool_call>", "<tool_call>[1, 2]</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"}) {
    ParsedToolOutput out = parse_tool_output("Text.\n" + block);
    EXPECT_EQ(out.content, "Text.\n" + block);
    EXPECT_TRUE(out.calls.empty()) << block;
  }
  // A good call beside a bad one: the call is parsed, the bad block kept as text.
  ParsedToolOutput out = parse_tool_output(
      "<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{oops}</tool_call>");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{}");
  EXPECT_EQ(out.content, "<tool_call>{oops}</tool_call>");
}

TEST(ToolCallParser, ArgumentsGivenAsAString) {
  ParsedToolOutput out = parse_tool_output(R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"a": 1})");
}

TEST(ToolCallParser, UnclosedBlockAtTheEnd) {
  // The model stopped before </tool_call>: a complete call is still a call...
  ParsedToolOutput out = parse_tool_output("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.content, "");
  // ...a cut-off one is content.
  out = parse_tool_output("Hi <tool_call>\n{\"name\": \"f\", \"argum");
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, "Hi <tool_call>\n{\"name\": \"f\", \"argum");
}

TEST(ToolCallParser, StreamingSplitAtEveryByteGivesTheSameResult) {
  const std::vector<std::string> texts = {
      kTwoCalls,
      "no calls at all < <tool <tool_call",
      "Text.\n<tool_call>{not json}</tool_call>\nmore\n",
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"</tool\"}}</tool_call>  \n tail",
      "<tool_call>{\"name\": \"f\"}",
  };
  for (const std::string& text : texts) {
    const std::vector<std::string> whole = flatten(run({text}));
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      EXPECT_EQ(flatten(run({text.substr(0, cut), text.substr(cut)})), whole) << "cut at " << cut << " of " << text;
      for (size_t cut2 = cut; cut2 <= text.size(); cut2 += 7)
        EXPECT_EQ(flatten(run({text.substr(0, cut), text.substr(cut, cut2 - cut), text.substr(cut2)})), whole);
    }
    // One byte at a time.
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    EXPECT_EQ(flatten(run(bytes)), whole) << text;
  }
}

// Qwen2.5-Coder writes its calls as a Markdown JSON fence instead of <tool_call>.
const std::string kFencedCall =
    "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```";

TEST(ToolCallParser, JsonFenceNamingARequestToolIsACall) {
  ParsedToolOutput out = parse_tool_output(kFencedCall, {"get_time", "get_weather"});
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(out.content, "");
  // A fence naming no tool of the request, a fence of other JSON, or no tool names: content.
  EXPECT_TRUE(parse_tool_output(kFencedCall, {"get_time"}).calls.empty());
  EXPECT_EQ(parse_tool_output(kFencedCall, {"get_time"}).content, kFencedCall);
  EXPECT_EQ(parse_tool_output(kFencedCall).content, kFencedCall);
  const std::string other = "Here:\n```json\n{\"a\": 1}\n```\nDone.";
  EXPECT_EQ(parse_tool_output(other, {"get_weather"}).content, other);
}

TEST(ToolCallParser, JsonFenceStreamedAtEverySplit) {
  const std::vector<std::string> names = {"get_weather"};
  for (const std::string& text : {kFencedCall, "Sure.\n" + kFencedCall + "\n", std::string("a ``` b ```json\n[1]\n``` c")}) {
    const std::vector<std::string> whole = flatten(run({text}, names));
    for (size_t cut = 0; cut <= text.size(); ++cut)
      EXPECT_EQ(flatten(run({text.substr(0, cut), text.substr(cut)}, names)), whole) << "cut at " << cut << " of " << text;
  }
  EXPECT_EQ(flatten(run({"Sure.\n" + kFencedCall + "\n"}, names)),
            (std::vector<std::string>{"Sure.", "CALL get_weather {\"city\":\"Paris\"}"}));
}

TEST(ToolCallParser, HoldsBackOnlyWhatMayBeATag) {
  ToolCallParser parser;
  EXPECT_EQ(flatten(parser.feed("Hello <tool")), std::vector<std::string>{"Hello"});  // " <tool" held
  EXPECT_EQ(flatten(parser.feed("box> and")), std::vector<std::string>{" <toolbox> and"});
  EXPECT_TRUE(parser.feed("<tool_call>{\"name\": \"f\"").empty());  // the block is held until it closes
  EXPECT_EQ(flatten(parser.feed("}</tool_call>")), std::vector<std::string>{"CALL f {}"});
  EXPECT_EQ(parser.n_calls(), 1);
  EXPECT_TRUE(parser.finish().empty());
}

TEST(ToolCallSyntax, FromTheTemplateText) {
  ChatTemplate qwen = chat_template_from_jinja(
      "{% if tools %}<tools>{{ tools | tojson }}</tools> reply in <tool_call></tool_call>{% endif %}", "t", "", "",
      false);
  EXPECT_EQ(tool_call_syntax(qwen), ToolCallSyntax::kHermes);
  ChatTemplate other = chat_template_from_jinja("{{ messages[0].content }}", "t", "", "", false);
  EXPECT_EQ(tool_call_syntax(other), ToolCallSyntax::kNone);
  EXPECT_EQ(tool_call_syntax(ChatTemplate{ChatFormat::kChatML, ""}), ToolCallSyntax::kNone);
}

TEST(ToolCallId, UniqueAndPrefixed) {
  const std::string a = new_tool_call_id(), b = new_tool_call_id();
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
}

// ---------------------------------------------------------------- the request side

constexpr const char* kMessages = R"("messages": [{"role": "user", "content": "weather in Paris?"}])";
const std::string kTool =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";

ApiError chat_error(const std::string& rest) {
  try {
    parse_api_request(std::string("{") + kMessages + ", " + rest + "}", Endpoint::kChatCompletions);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << rest;
  return ApiError(0, "");
}

TEST(ToolsRequest, BadToolsNameTheField) {
  struct Case {
    std::string rest;
    const char* param;
  };
  const std::vector<Case> cases = {
      {R"("tools": {"type": "function"})", "tools"},
      {R"("tools": [3])", "tools[0]"},
      {R"("tools": [{"function": {"name": "f"}}])", "tools[0].type"},
      {R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "tools[0].function"},
      {R"("tools": [{"type": "function", "function": {}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": 5}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
      {"\"tools\": [" + kTool + R"(, {"type": "function", "function": {"name": "f", "parameters": "x"}}])",
       "tools[1].function.parameters"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "description": 1}}])",
       "tools[0].function.description"},
      {R"("tool_choice": "auto")", "tool_choice"},  // no tools to choose from
      {"\"tools\": [" + kTool + R"(], "tool_choice": "sometimes")", "tool_choice"},
      {"\"tools\": [" + kTool + R"(], "tool_choice": 1)", "tool_choice"},
      {"\"tools\": [" + kTool + R"(], "tool_choice": {"type": "function"})", "tool_choice.function"},
      {"\"tools\": [" + kTool + R"(], "parallel_tool_calls": "yes")", "parallel_tool_calls"},
      {R"("functions": [{"name": "f"}])", "functions"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_error(c.rest);
    EXPECT_EQ(e.status, 400) << c.rest;
    EXPECT_EQ(e.param, c.param) << c.rest << ": " << e.what();
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(ToolsRequest, RequiredAndNamedChoiceRenderTheToolsAndForceACallWithAGrammar) {
  for (const std::string& choice : {std::string(R"("required")"),
                                   std::string(R"({"type": "function", "function": {"name": "get_weather"}})")}) {
    const ApiRequest r = parse_api_request(
        R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + kTool + "], \"tool_choice\": " + choice + "}",
        Endpoint::kChatCompletions);
    EXPECT_TRUE(r.tools_active()) << choice;
    EXPECT_TRUE(r.tools_forced()) << choice;
    ASSERT_NE(r.grammar, nullptr) << choice;
  }
  // A name that is not among the tools.
  ApiError e = chat_error("\"tools\": [" + kTool + R"(], "tool_choice": {"type": "function", "function": {"name": "nope"}})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(std::string(e.what()).find("no function named 'nope'"), std::string::npos) << e.what();
  // And not together with a response_format.
  e = chat_error("\"tools\": [" + kTool + R"(], "tool_choice": "required", "response_format": {"type": "json_object"})");
  EXPECT_EQ(e.param, "tool_choice");
}

TEST(ToolsRequest, ToolsAreAChatParameter) {
  try {
    parse_api_request("{\"prompt\": \"x\", \"tools\": [" + kTool + "]}", Endpoint::kCompletions);
    ADD_FAILURE() << "completions accepted tools";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
  }
}

TEST(ToolsRequest, ChoiceDefaultsAndTheClientsKeyOrder) {
  // "function" before "type" and "name" after "parameters": the text keeps that order.
  const std::string tools =
      R"([{"function": {"parameters": {"type": "object"}, "name": "f"}, "type": "function"}])";
  ApiRequest r = parse_api_request(std::string("{") + kMessages + ", \"tools\": " + tools + "}",
                                   Endpoint::kChatCompletions);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.tools_active());
  EXPECT_EQ(r.tools_json, R"([{"function":{"parameters":{"type":"object"},"name":"f"},"type":"function"}])");
  EXPECT_TRUE(r.parallel_tool_calls);

  r = parse_api_request(std::string("{") + kMessages + ", \"tools\": " + tools +
                            R"(, "tool_choice": "none", "parallel_tool_calls": false})",
                        Endpoint::kChatCompletions);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(r.tools_active());
  EXPECT_FALSE(r.parallel_tool_calls);

  r = parse_api_request(std::string("{") + kMessages + R"(, "tools": [], "tool_choice": "none"})",
                        Endpoint::kChatCompletions);
  EXPECT_FALSE(r.tools_active());
}

class ToolsPrompt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = new Tokenizer(
        Tokenizer::from_gguf(gguf::File::open(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf")));
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static Tokenizer* tokenizer_;
};
Tokenizer* ToolsPrompt::tokenizer_ = nullptr;

TEST_F(ToolsPrompt, AutoRendersTheToolsInOrderAndNoneRendersNone) {
  ChatTemplate tmpl = chat_template_from_jinja(
      "{% if tools %}{% for t in tools %}[{{ t | tojson }}]{% endfor %}{% endif %}"
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      "tmpl", "", "", false);
  const std::string tools = R"([{"function": {"name": "f", "description": "d"}, "type": "function"}])";
  const std::string body = std::string("{") + kMessages + ", \"tools\": " + tools;
  auto prompt = [&](const std::string& rest) {
    return build_engine_requests(parse_api_request(body + rest + "}", Endpoint::kChatCompletions), *tokenizer_, &tmpl,
                                 {.n_ctx = 512})[0]
        .prompt;
  };
  EXPECT_EQ(prompt(""), tokenizer_->encode(
                            R"([{"function": {"name": "f", "description": "d"}, "type": "function"}]weather in Paris?)"));
  EXPECT_EQ(prompt(R"(, "tool_choice": "none")"), tokenizer_->encode("weather in Paris?"));

  // A template of its own that teaches no <tool_call> syntax: a forced call cannot be
  // enforced by the grammar, so it is refused naming tool_choice, with 'auto' as the way.
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "f"}})"}) {
    try {
      prompt(std::string(R"(, "tool_choice": )") + choice);
      ADD_FAILURE() << "a template without a tool-call syntax accepted a forced call: " << choice;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "tool_choice") << e.what();
      EXPECT_NE(std::string(e.what()).find("use 'auto'"), std::string::npos) << e.what();
    }
  }

  // A built-in format cannot show tools: 400 naming them.
  ChatTemplate builtin{ChatFormat::kChatML, ""};
  try {
    build_engine_requests(parse_api_request(body + "}", Endpoint::kChatCompletions), *tokenizer_, &builtin,
                          {.n_ctx = 512});
    ADD_FAILURE() << "a built-in format accepted tools";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tools");
  }
  // So for a forced call too: that error, not advice to use 'auto', which it refuses as well.
  try {
    build_engine_requests(parse_api_request(body + R"(, "tool_choice": "required"})", Endpoint::kChatCompletions),
                          *tokenizer_, &builtin, {.n_ctx = 512});
    ADD_FAILURE() << "a built-in format accepted a forced tool call";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools") << e.what();
    EXPECT_EQ(std::string(e.what()).find("use 'auto'"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- the response side

TEST(ToolsResponse, WholeResponseCarriesCallsAndNullContent) {
  Tokenizer tokenizer = Tokenizer::from_gguf(gguf::File::open(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf"));
  ApiRequest request;
  request.endpoint = Endpoint::kChatCompletions;
  ResponseMeta meta = make_response_meta(Endpoint::kChatCompletions, "m");
  std::vector<ChoiceResult> choices(2);
  choices[0].text = kTwoCalls.substr(kTwoCalls.find("<tool_call>"));
  choices[0].finish_reason = FinishReason::kStop;
  choices[1].text = "No tools needed.";
  choices[1].finish_reason = FinishReason::kStop;
  nlohmann::json out = response_json(meta, choices, tokenizer, request, ToolCallSyntax::kHermes);
  const nlohmann::json& first = out["choices"][0];
  EXPECT_EQ(first["finish_reason"], "tool_calls");
  EXPECT_TRUE(first["message"]["content"].is_null());
  ASSERT_EQ(first["message"]["tool_calls"].size(), 2u);
  const nlohmann::json& call = first["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_TRUE(call["function"]["arguments"].is_string());
  EXPECT_EQ(nlohmann::json::parse(call["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_NE(call["id"], first["message"]["tool_calls"][1]["id"]);
  const nlohmann::json& second = out["choices"][1];
  EXPECT_EQ(second["finish_reason"], "stop");
  EXPECT_EQ(second["message"]["content"], "No tools needed.");
  EXPECT_FALSE(second["message"].contains("tool_calls"));

  // Without a syntax (tool_choice none, or a template without one) the text is content.
  out = response_json(meta, choices, tokenizer, request);
  EXPECT_EQ(out["choices"][0]["message"]["content"], choices[0].text);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
}

TEST(ToolsResponse, StreamedCallChunks) {
  ResponseMeta meta = make_response_meta(Endpoint::kChatCompletions, "m");
  std::vector<ResponseJson> chunks =
      tool_call_chunks(meta, 0, 1, "call_x", ParsedToolCall{"f", R"({"a":1})"}, /*include_usage=*/false);
  ASSERT_EQ(chunks.size(), 2u);
  const ResponseJson& open = chunks[0]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(open["index"], 1);
  EXPECT_EQ(open["id"], "call_x");
  EXPECT_EQ(open["type"], "function");
  EXPECT_EQ(open["function"]["name"], "f");
  const nlohmann::json& args = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(args["index"], 1);
  EXPECT_FALSE(args.contains("id"));
  EXPECT_EQ(args["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(finish_chunk(meta, 0, FinishReason::kStop, false, true)["choices"][0]["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace ridge::server
