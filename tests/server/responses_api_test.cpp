// The Responses API translation: bad Responses fields are a 400 naming the Responses
// field (also when the chat parser is the one that refuses), input items become the chat
// conversation, flat tools and text.format become chat's, and a chat answer or stream
// becomes a Response object or the typed Responses events.
#include "server/responses_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ridge::server {
namespace {

using nlohmann::json;

ApiError request_error(const std::string& body) {
  try {
    parse_responses_request(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

std::string with_input(const std::string& rest) { return R"({"model":"m","input":"hi")" + rest + "}"; }

TEST(ResponsesRequest, BadFieldsAre400NamingTheField) {
  EXPECT_EQ(request_error("{").status, 400);
  EXPECT_EQ(request_error(R"({"model":"m"})").param, "input");
  EXPECT_EQ(request_error(R"({"input":5})").param, "input");
  EXPECT_EQ(request_error(R"({"input":[{"type":"web_search_call"}]})").param, "input[0].type");
  EXPECT_EQ(request_error(R"({"input":[{"role":"tool","content":"x"}]})").param, "input[0].role");
  EXPECT_EQ(request_error(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})").param,
            "input[0].content[0].type");
  EXPECT_EQ(request_error(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})").param,
            "input[0].call_id");
  EXPECT_EQ(request_error(R"({"input":[{"type":"function_call_output","call_id":"c"}]})").param, "input[0].output");
  EXPECT_EQ(request_error(R"({"input":[{"type":"item_reference","id":"msg_1"}]})").param, "input[0].type");
  EXPECT_EQ(request_error(with_input(R"(,"tools":[{"type":"web_search"}])")).param, "tools[0].type");
  EXPECT_EQ(request_error(with_input(R"(,"tools":[{"type":"function"}])")).param, "tools[0].name");
  EXPECT_EQ(request_error(with_input(R"(,"tool_choice":{"type":"file_search"})")).param, "tool_choice.type");
  EXPECT_EQ(request_error(with_input(R"(,"text":{"format":{"type":"json_schema","name":"x"}})")).param,
            "text.format.schema");
  EXPECT_EQ(request_error(with_input(R"(,"text":{"format":{"type":"yaml"}})")).param, "text.format.type");
  EXPECT_EQ(request_error(with_input(R"(,"reasoning":{"effort":3})")).param, "reasoning.effort");
  EXPECT_EQ(request_error(with_input(R"(,"stream":"yes")")).param, "stream");
}

TEST(ResponsesRequest, ChatParserErrorsNameTheResponsesField) {
  const ApiError e = request_error(with_input(R"(,"max_output_tokens":-5)"));
  EXPECT_EQ(e.param, "max_output_tokens");
  EXPECT_NE(std::string(e.what()).find("max_output_tokens"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("max_tokens"), std::string::npos) << e.what();
  EXPECT_EQ(request_error(with_input(R"(,"temperature":5)")).param, "temperature");
  EXPECT_EQ(request_error(with_input(R"(,"tools":[{"type":"function","name":"f","parameters":3}])")).param,
            "tools[0].parameters");
  EXPECT_EQ(request_error(with_input(R"(,"tool_choice":"sometimes","tools":[{"type":"function","name":"f"}])")).param,
            "tool_choice");
  EXPECT_EQ(request_error(with_input(R"(,"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"},"strict":"no"}})"))
                .param,
            "text.format.strict");
}

TEST(ResponsesRequest, StoredResponsesAreRefused) {
  const ApiError e = request_error(with_input(R"(,"previous_response_id":"resp_1","store":true)"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_NE(std::string(e.what()).find("stores no responses"), std::string::npos) << e.what();
  EXPECT_EQ(request_error(with_input(R"(,"conversation":"conv_1")")).param, "conversation");
  EXPECT_NO_THROW(parse_responses_request(with_input(R"(,"store":true,"previous_response_id":null)")));
}

TEST(ResponsesRequest, ItemsBecomeTheChatConversation) {
  const json chat = json::parse(chat_body_from_responses(R"({
    "model": "m", "instructions": "be brief", "max_output_tokens": 40, "temperature": 0,
    "metadata": {"k": "v"}, "reasoning": {"effort": "low"}, "store": false, "include": [], "stop": ["x"],
    "input": [
      {"role": "developer", "content": "use tools"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather "}, {"type": "input_text", "text": "in Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]}
    ]})"));
  const json& m = chat["messages"];
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(m[1], json({{"role", "developer"}, {"content", "use tools"}}));  // chat maps it to system
  EXPECT_EQ(m[2], json({{"role", "user"}, {"content", "weather in Paris?"}}));
  EXPECT_EQ(m[3]["content"], "Checking.");
  ASSERT_EQ(m[3]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[3]["tool_calls"][0], json::parse(R"({"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(m[4], json({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}));
  EXPECT_EQ(m[5]["content"], "noon");
  EXPECT_EQ(chat["max_tokens"], 40);
  EXPECT_EQ(chat["temperature"], 0);
  for (const char* dropped : {"metadata", "reasoning", "store", "include", "stop", "instructions", "input"})
    EXPECT_FALSE(chat.contains(dropped)) << dropped;

  // A function_call with no assistant text before it opens an assistant turn of its own.
  const json bare = json::parse(chat_body_from_responses(R"({"input": [{"role":"user","content":"q"},
      {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c","output":"r"}]})"));
  EXPECT_EQ(bare["messages"][1]["role"], "assistant");
  EXPECT_TRUE(bare["messages"][1]["content"].is_null());
  EXPECT_EQ(bare["messages"][1]["tool_calls"].size(), 1u);

  const ResponsesRequest r = parse_responses_request(R"({"input": "hi", "instructions": "sys"})");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(r.chat.messages[1].content, "hi");
}

TEST(ResponsesRequest, FlatToolsAndTextFormatBecomeChats) {
  const ResponsesRequest r = parse_responses_request(R"({"input": "weather?", "stream": true,
      "tools": [{"type": "function", "name": "get_weather", "description": "d", "strict": true,
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
      "tool_choice": {"type": "function", "name": "get_weather"}})");
  EXPECT_EQ(r.chat.tool_names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(r.chat.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.chat.tool_choice_function, "get_weather");
  EXPECT_NE(r.chat.grammar, nullptr);  // the forced call is constrained
  // The client's key order, nested as chat's.
  EXPECT_EQ(r.chat.tools_json, R"([{"type":"function","function":{"name":"get_weather","description":"d",)"
                               R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},)"
                               R"("required":["city"]},"strict":true}}])");
  EXPECT_TRUE(r.chat.stream);
  EXPECT_TRUE(r.chat.include_usage);
  EXPECT_EQ(r.echo["tools"][0]["name"], "get_weather");  // echoed flat, as sent
  EXPECT_EQ(r.echo["tool_choice"]["type"], "function");

  EXPECT_EQ(parse_responses_request(R"({"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required"})")
                .chat.tool_choice,
            ToolChoice::kRequired);
  EXPECT_EQ(parse_responses_request(R"({"input":"x","tools":[{"type":"function","name":"f"}]})").chat.tool_choice,
            ToolChoice::kAuto);

  const ResponsesRequest schema = parse_responses_request(R"({"input": "x", "text": {"format":
      {"type": "json_schema", "name": "city", "strict": true,
       "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}})");
  EXPECT_NE(schema.chat.grammar, nullptr);
  EXPECT_EQ(schema.echo["text"]["format"]["name"], "city");
  EXPECT_NE(parse_responses_request(R"({"input":"x","text":{"format":{"type":"json_object"}}})").chat.grammar, nullptr);
  const ResponsesRequest plain = parse_responses_request(R"({"input":"x","text":{"format":{"type":"text"}}})");
  EXPECT_EQ(plain.chat.grammar, nullptr);
  EXPECT_EQ(parse_responses_request(R"({"input":"x"})").echo["text"], json::parse(R"({"format":{"type":"text"}})"));
}

TEST(ResponsesRequest, ErrorRenames) {
  EXPECT_EQ(responses_error(ApiError(400, "x", "tools[2].function.name")).param, "tools[2].name");
  EXPECT_EQ(responses_error(ApiError(400, "x", "response_format.json_schema.schema")).param, "text.format.schema");
  EXPECT_EQ(responses_error(ApiError(400, "x", "messages[3].content")).param, "input");
  EXPECT_EQ(responses_error(ApiError(400, "x", "prompt")).param, "input");
  EXPECT_EQ(responses_error(ApiError(400, "x", "seed")).param, "seed");
  const ApiError e = responses_error(ApiError(429, "'max_tokens' too big", "max_tokens", "c", "requests"));
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.code, "c");
  EXPECT_EQ(e.type, "requests");
  EXPECT_STREQ(e.what(), "'max_output_tokens' too big");
}

const json kChat = json::parse(R"({"created": 1700000000, "choices":[{"index":0,"message":{"role":"assistant","content":"hi",
    "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
    "finish_reason":"tool_calls"}],
    "usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}})");

TEST(ResponsesObject, ChatResponseBecomesResponse) {
  const ResponseJson echo = parse_responses_request(R"({"input":"x","instructions":"sys","temperature":0.5})").echo;
  const ResponseJson r = responses_object(kChat, echo, "model");
  EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 1700000000);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_TRUE(r["incomplete_details"].is_null());
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_EQ(r["model"], "model");
  EXPECT_EQ(r["instructions"], "sys");
  EXPECT_EQ(r["temperature"], 0.5);
  ASSERT_EQ(r["output"].size(), 2u);
  const ResponseJson& message = r["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "completed");
  EXPECT_EQ(message["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "hi");
  EXPECT_EQ(message["content"][0]["annotations"], ResponseJson::array());
  const ResponseJson& call = r["output"][1];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(call["call_id"], "call_1");
  EXPECT_EQ(call["name"], "f");
  EXPECT_EQ(call["arguments"], R"({"a":1})");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(r["usage"], ResponseJson::parse(R"({"input_tokens":7,"input_tokens_details":{"cached_tokens":4},
      "output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":10})"));
  EXPECT_FALSE(r.contains("output_text"));  // the SDK computes it from output

  json length = kChat;
  length["choices"][0]["message"].erase("tool_calls");
  length["choices"][0]["finish_reason"] = "length";
  const ResponseJson cut = responses_object(length, echo, "model");
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"], ResponseJson({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");
}

struct Event {
  std::string name;
  json data;
};

std::vector<Event> events_of(const std::string& sse) {
  std::vector<Event> events;
  for (size_t at = 0, end; (end = sse.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string block = sse.substr(at, end - at);
    const size_t newline = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(newline + 1, 6, "data: "), 0) << block;
    events.push_back({block.substr(7, newline - 7), json::parse(block.substr(newline + 7))});
  }
  return events;
}

const std::string kChatStream =
    R"(data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null})" "\n\n"
    R"(data: {"choices":[{"index":0,"delta":{"content":"Let me "}}],"usage":null})" "\n\n"
    R"(data: {"choices":[{"index":0,"delta":{"content":"check."}}],"usage":null})" "\n\n"
    R"(data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"f","arguments":""}}]}}]})" "\n\n"
    R"(data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]})" "\n\n"
    R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null})" "\n\n"
    R"(data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}})" "\n\n"
    "data: [DONE]\n\n";

TEST(ResponsesStream, ChatChunksBecomeResponsesEvents) {
  ResponsesStream stream(parse_responses_request(R"({"input":"x"})").echo, "m");
  // Fed in uneven pieces, as the relay writes.
  std::string out;
  for (size_t at = 0; at < kChatStream.size(); at += 37) out += stream.feed(std::string_view(kChatStream).substr(at, 37));
  const std::vector<Event> events = events_of(out);
  std::vector<std::string> names;
  for (const Event& e : events) names.push_back(e.name);
  ASSERT_EQ(names, (std::vector<std::string>{
                       "response.created", "response.in_progress",
                       "response.output_item.added", "response.content_part.added",
                       "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done",
                       "response.completed"}));
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["type"], events[i].name);
    EXPECT_EQ(events[i].data["sequence_number"], i);
  }
  const std::string response_id = events[0].data["response"]["id"];
  EXPECT_EQ(response_id.rfind("resp_", 0), 0u);
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  const std::string message_id = events[2].data["item"]["id"];
  EXPECT_EQ(events[2].data["item"]["status"], "in_progress");
  EXPECT_EQ(events[4].data["item_id"], message_id);
  EXPECT_EQ(events[4].data["delta"], "Let me ");
  EXPECT_EQ(events[6].data["text"], "Let me check.");
  EXPECT_EQ(events[8].data["item"]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(events[8].data["item"]["id"], message_id);
  EXPECT_EQ(events[9].data["output_index"], 1);
  EXPECT_EQ(events[9].data["item"]["call_id"], "call_9");
  EXPECT_EQ(events[9].data["item"]["arguments"], "");
  const std::string call_id = events[9].data["item"]["id"];
  EXPECT_EQ(events[10].data["item_id"], call_id);
  EXPECT_EQ(events[11].data["arguments"], R"({"a":1})");
  EXPECT_EQ(events[12].data["item"]["id"], call_id);
  EXPECT_EQ(events[12].data["item"]["status"], "completed");
  const json& final = events[13].data["response"];
  EXPECT_EQ(final["id"], response_id);
  EXPECT_EQ(final["status"], "completed");
  EXPECT_EQ(final["output"].size(), 2u);
  EXPECT_EQ(final["output"][0], events[8].data["item"]);
  EXPECT_EQ(final["output"][1], events[12].data["item"]);
  EXPECT_EQ(final["usage"]["input_tokens"], 9);
  EXPECT_EQ(final["usage"]["output_tokens"], 4);
  EXPECT_EQ(final["usage"]["total_tokens"], 13);
}

TEST(ResponsesStream, LengthIsIncompleteAndErrorsFail) {
  ResponsesStream cut(parse_responses_request(R"({"input":"x"})").echo, "m");
  const std::vector<Event> events = events_of(cut.feed(
      R"(data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})" "\n\n"
      R"(data: {"choices":[{"index":0,"delta":{"content":"One"}}]})" "\n\n"
      R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})" "\n\n"
      R"(data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}})" "\n\ndata: [DONE]\n\n"));
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().name, "response.incomplete");
  EXPECT_EQ(events.back().data["response"]["status"], "incomplete");
  EXPECT_EQ(events.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(events.back().data["response"]["output"][0]["status"], "incomplete");

  ResponsesStream failing(parse_responses_request(R"({"input":"x"})").echo, "m");
  const std::vector<Event> failed = events_of(failing.feed(
      R"(data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})" "\n\n"
      R"(data: {"error":{"message":"Internal server error: boom","type":"server_error","param":null,"code":null}})" "\n\n"));
  ASSERT_EQ(failed.size(), 4u);
  EXPECT_EQ(failed[2].name, "error");
  EXPECT_EQ(failed[2].data["message"], "Internal server error: boom");
  EXPECT_EQ(failed[3].name, "response.failed");
  EXPECT_EQ(failed[3].data["response"]["status"], "failed");
  EXPECT_EQ(failed[3].data["response"]["error"]["message"], "Internal server error: boom");
}

}  // namespace
}  // namespace ridge::server
