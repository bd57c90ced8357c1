// The Messages API translation: bad Anthropic fields are a 400 naming the field, and a
// good request becomes the chat request (system, tool_use / tool_result turns, tools,
// tool_choice) that openai_request.h then parses.
#include "server/anthropic_messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_request.h"

namespace ridge::server {
namespace {

using nlohmann::json;

ApiError translate_error(const std::string& body, MessagesEndpoint endpoint = MessagesEndpoint::kCreate) {
  try {
    chat_body_from_messages(body, endpoint);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

TEST(MessagesRequest, BadFieldsAre400NamingTheField) {
  EXPECT_EQ(translate_error("{").status, 400);
  EXPECT_EQ(translate_error(R"({"messages":[{"role":"user","content":"hi"}]})").param, "max_tokens");
  EXPECT_EQ(translate_error(R"({"max_tokens":5})").param, "messages");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"system","content":"hi"}]})").param,
            "messages[0].role");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"system":[{"type":"text"}]})")
                .param,
            "system[0].text");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"stop_sequences":"x"})").param,
            "stop_sequences");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"x"}})")
                .param,
            "tool_choice.type");
  EXPECT_EQ(translate_error(R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]})").param,
            "tools[0].input_schema");
}

TEST(MessagesRequest, CountTokensNeedsNoMaxTokens) {
  EXPECT_NO_THROW(chat_body_from_messages(R"({"messages":[{"role":"user","content":"hi"}]})",
                                          MessagesEndpoint::kCountTokens));
}

TEST(MessagesRequest, ChatFieldErrorsKeepAnthropicNames) {
  // max_tokens and temperature pass through under the same names, so chat's checks name them.
  const std::string chat = chat_body_from_messages(R"({"max_tokens":-1,"messages":[{"role":"user","content":"x"}]})",
                                                   MessagesEndpoint::kCreate);
  try {
    parse_api_request(chat, Endpoint::kChatCompletions);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
  }
}

TEST(MessagesRequest, ToolTurnsBecomeChatToolCallsAndToolMessages) {
  const json chat = json::parse(chat_body_from_messages(R"({
    "model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "be brief"}],
    "stop_sequences": ["END"], "temperature": 0, "top_k": 3, "metadata": {"user_id": "u"},
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "get_weather"},
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}], "is_error": true}]}
    ]})", MessagesEndpoint::kCreate));
  EXPECT_EQ(chat["messages"][0], json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(chat["messages"][2]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(chat["messages"][3], json({{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "Error: sunny"}}));
  EXPECT_EQ(chat["stop"], json({"END"}));
  EXPECT_EQ(chat["top_k"], 3);
  EXPECT_FALSE(chat.contains("metadata"));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"], json({{"type", "object"}}));
  EXPECT_EQ(chat["tool_choice"]["function"]["name"], "get_weather");
  const ApiRequest r = parse_api_request(chat.dump(), Endpoint::kChatCompletions);
  EXPECT_EQ(r.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(r.messages.size(), 4u);
}

TEST(MessagesRequest, ToolChoiceTypesMapOntoChat) {
  auto choice = [](const std::string& type) {
    return json::parse(chat_body_from_messages(
        R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":")" + type + R"("}})",
        MessagesEndpoint::kCreate))["tool_choice"];
  };
  EXPECT_EQ(choice("auto"), "auto");
  EXPECT_EQ(choice("any"), "required");
  EXPECT_EQ(choice("none"), "none");
}

TEST(MessagesResponse, ChatResponseBecomesMessage) {
  const json chat = json::parse(R"({"choices":[{"message":{"role":"assistant","content":"hi",
      "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
      "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":3}})");
  const json m = messages_response_json(chat, "model");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["content"][0], json({{"type", "text"}, {"text", "hi"}}));
  EXPECT_EQ(m["content"][1]["input"], json({{"a", 1}}));
  EXPECT_EQ(m["content"][1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"], json({{"input_tokens", 7}, {"output_tokens", 3}}));
  json length = chat;
  length["choices"][0]["message"].erase("tool_calls");
  length["choices"][0]["finish_reason"] = "length";
  EXPECT_EQ(messages_response_json(length, "model")["stop_reason"], "max_tokens");
}

TEST(MessagesStream, ChatChunksBecomeAnthropicEvents) {
  MessagesStream stream("m", 9);
  std::string out = stream.feed(R"(data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]})" "\n\n");
  out += stream.feed(R"(data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]})" "\n\ndata: {\"choices\":[{\"index\":0,");
  out += stream.feed(R"("delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}}]})" "\n\n");
  out += stream.feed(R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})" "\n\n");
  out += stream.feed(R"(data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}})" "\n\ndata: [DONE]\n\n");
  std::vector<std::string> names;
  for (size_t at = 0; (at = out.find("event: ", at)) != std::string::npos; at += 7)
    names.push_back(out.substr(at + 7, out.find('\n', at) - at - 7));
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                             "content_block_stop", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_NE(out.find(R"("input_tokens":9)"), std::string::npos);
  EXPECT_NE(out.find(R"("stop_reason":"tool_use")"), std::string::npos);
  EXPECT_NE(out.find(R"("usage":{"output_tokens":4})"), std::string::npos);
  EXPECT_NE(out.find(R"({"partial_json":"{}","type":"input_json_delta"})"), std::string::npos);
}

TEST(MessagesError, AnthropicShape) {
  const json e = messages_error_json(ApiError(400, "'max_tokens': is required", "max_tokens"));
  EXPECT_EQ(e, json({{"type", "error"}, {"error", {{"type", "invalid_request_error"}, {"message", "'max_tokens': is required"}}}}));
  EXPECT_EQ(messages_error_json(ApiError(503, "x"))["error"]["type"], "overloaded_error");
}

}  // namespace
}  // namespace ridge::server
