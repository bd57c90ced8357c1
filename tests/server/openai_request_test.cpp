// Request parsing and validation: what a client sending a bad field sees (status, param,
// code), and how good requests become engine requests (tokens, limits, seeds).
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "server/api_error.h"

namespace ridge::server {
namespace {

const std::string kStories = std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf";

// Runs parse and reports the ApiError (status, param, code) it throws.
ApiError parse_error(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  try {
    parse_api_request(body, endpoint);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return ApiError(0, "");
}

TEST(ParseRequest, MalformedJsonIs400InvalidJson) {
  ApiError e = parse_error(R"({"prompt": "hi",)");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(parse_error("[1, 2]").status, 400);  // not an object
}

TEST(ParseRequest, NumberOverflowIs400NamingTheField) {
  // 1e400 is valid JSON but no double: a 400 naming the field, not a 500.
  ApiError e = parse_error(R"({"prompt": "hi", "max_tokens": 1e400})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.code, "invalid_value");
  EXPECT_EQ(parse_error(R"({"prompt": "hi", "temperature": -1e999})").param, "temperature");
}

TEST(ParseRequest, BodiesNestedTooDeeplyAre400NamingTheField) {
  // What reads the body later (schemas, templates, dump()) recurses per level: refused at parse.
  const int n = 100000;
  std::ostringstream body;  // not a chain of +: GCC 12 warns falsely on those
  body << R"({"messages": [{"role": "user", "content": )" << std::string(n, '[') << std::string(n, ']') << "}]}";
  ApiError e = parse_error(body.str(), Endpoint::kChatCompletions);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "content");
  EXPECT_NE(std::string(e.what()).find("nested deeper than 256 levels"), std::string::npos) << e.what();
}

TEST(ParseRequest, HugeObjectsInKeyOrderedFieldsAre400) {
  // tools and response_format are re-read keeping key order, which costs O(keys^2) per object:
  // a schema with 200000 properties held a server thread for over ten minutes.
  std::string props;
  for (int i = 0; i < 1001; ++i) props += (i == 0 ? "\"k" : ", \"k") + std::to_string(i) + "\": {}";
  ApiError e = parse_error(R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": {"type": "object", "properties": {)" + props + "}}}}}",
                           Endpoint::kChatCompletions);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format");
  EXPECT_NE(std::string(e.what()).find("more than 1000 keys"), std::string::npos) << e.what();
}

TEST(ParseRequest, WrongTypesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "max_tokens": "12"})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "stream": 1})", "stream"},
      {R"({"prompt": "a", "stop": 7})", "stop"},
      {R"({"prompt": "a", "stop": ["x", 3]})", "stop[1]"},
      {R"({"prompt": "a", "model": 5})", "model"},
      {R"({"prompt": {"text": "a"}})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": "a", "seed": "x"})", "seed"},
  };
  for (const Case& c : cases) {
    ApiError e = parse_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, "invalid_type") << c.body;
  }
}

TEST(ParseRequest, OutOfRangeValuesAre400) {
  EXPECT_EQ(parse_error(R"({"prompt": "a", "max_tokens": -5})").code, "integer_below_min_value");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "temperature": 2.5})").param, "temperature");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "top_p": -0.1})").param, "top_p");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "n": 0})").param, "n");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "n": 1000})").code, "integer_above_max_value");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "logprobs": 50})").param, "logprobs");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "repetition_penalty": 0})").param, "repetition_penalty");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "stop": [""]})").param, "stop[0]");
  EXPECT_EQ(parse_error(R"({"prompt": [-1]})").param, "prompt[0]");
}

TEST(ParseRequest, MissingAndUnsupportedFields) {
  EXPECT_EQ(parse_error(R"({"max_tokens": 3})").code, "missing_required_parameter");
  EXPECT_EQ(parse_error(R"({"model": "m"})", Endpoint::kChatCompletions).param, "messages");
  EXPECT_EQ(parse_error(R"({"messages": []})", Endpoint::kChatCompletions).code, "empty_array");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "robot", "content": "x"}]})", Endpoint::kChatCompletions).param,
            "messages[0].role");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user"}]})", Endpoint::kChatCompletions).param,
            "messages[0].content");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "echo": true})").code, "unsupported_parameter");
  EXPECT_EQ(parse_error(R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"prompt": "a", "stream_options": {"include_usage": true}})").param, "stream_options");
  EXPECT_EQ(parse_error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})",
                        Endpoint::kChatCompletions)
                .param,
            "top_logprobs");
}

TEST(ParseRequest, ReadsEveryField) {
  ApiRequest r = parse_api_request(
      R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0, "top_p": 0.9, "top_k": 5,
          "min_p": 0.1, "seed": 42, "stop": ["\n", "end"], "n": 2, "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": 3, "presence_penalty": 0.5,
          "frequency_penalty": -0.5, "repetition_penalty": 1.1, "user": "ignored", "max_completion_tokens": 3})",
      Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "Once");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens is chat's name only
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "end"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
}

TEST(ParseRequest, ChatFieldsAndContentParts) {
  ApiRequest r = parse_api_request(
      R"({"messages": [{"role": "developer", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
          "max_tokens": 9, "max_completion_tokens": 4, "logprobs": true, "top_logprobs": 2, "stop": "x"})",
      Endpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.max_tokens, 4);  // the newer name wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.seed_given);
}

TEST(ParseRequest, PromptForms) {
  EXPECT_EQ(parse_api_request(R"({"prompt": ["one"]})", Endpoint::kCompletions).prompt_text, "one");
  ApiRequest tokens = parse_api_request(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletions);
  EXPECT_TRUE(tokens.prompt_is_tokens);
  EXPECT_EQ(tokens.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ApiRequest nested = parse_api_request(R"({"prompt": [[4, 5]]})", Endpoint::kCompletions);
  EXPECT_EQ(nested.prompt_tokens, (std::vector<int32_t>{4, 5}));
  // Explicit nulls mean "not given", as OpenAI's clients send them.
  ApiRequest nulls = parse_api_request(R"({"prompt": "a", "max_tokens": null, "stop": null})", Endpoint::kCompletions);
  EXPECT_FALSE(nulls.max_tokens.has_value());
}

TEST(ChoiceSeed, FirstChoiceKeepsTheSeedOthersDiffer) {
  EXPECT_EQ(choice_seed(42, 0), 42u);
  std::set<uint64_t> seen;
  for (int i = 0; i < 16; ++i) seen.insert(choice_seed(42, i));
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(choice_seed(42, 3), choice_seed(42, 3));
  EXPECT_NE(choice_seed(42, 1), choice_seed(43, 1));
}

class BuildRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tokenizer_ = new Tokenizer(Tokenizer::from_gguf(gguf::File::open(kStories))); }
  static void TearDownTestSuite() { delete tokenizer_; }
  static Tokenizer* tokenizer_;

  ApiError build_error(const std::string& body, Endpoint endpoint, PromptLimits limits,
                       const ChatTemplate* tmpl = nullptr) {
    try {
      build_engine_requests(parse_api_request(body, endpoint), *tokenizer_, tmpl, limits);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << body;
    return ApiError(0, "");
  }
};
Tokenizer* BuildRequests::tokenizer_ = nullptr;

TEST_F(BuildRequests, TokenizesAndFillsEveryChoice) {
  ApiRequest r = parse_api_request(R"({"prompt": "Once upon a time", "seed": 7, "n": 3, "logprobs": 2,
                                       "stop": ["."], "temperature": 0.5})",
                                   Endpoint::kCompletions);
  auto params = build_engine_requests(r, *tokenizer_, nullptr, {.n_ctx = 512});
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].prompt, tokenizer_->encode("Once upon a time"));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(params[i].prompt, params[0].prompt);
    EXPECT_EQ(params[i].max_tokens, kDefaultCompletionMaxTokens);
    EXPECT_EQ(params[i].sampling.seed, choice_seed(7, i));
    EXPECT_TRUE(params[i].sampling.logprobs);
    EXPECT_EQ(params[i].sampling.n_logprobs, 2);
    EXPECT_EQ(params[i].stop, std::vector<std::string>{"."});
    EXPECT_FLOAT_EQ(params[i].sampling.temperature, 0.5f);
  }
}

TEST_F(BuildRequests, ContextAndPromptLimitsNameTheNumbers) {
  const int32_t n_prompt = static_cast<int32_t>(tokenizer_->encode("Once upon a time").size());
  ApiError e = build_error(R"({"prompt": "Once upon a time", "max_tokens": 100})", Endpoint::kCompletions,
                           {.n_ctx = 64});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(std::string(e.what()).find("maximum context length is 64"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(std::to_string(n_prompt + 100)), std::string::npos) << e.what();

  // Exactly filling the context is allowed.
  auto ok = build_engine_requests(
      parse_api_request(str_cat(R"({"prompt": "Once upon a time", "max_tokens": )", 64 - n_prompt, "}"),
                        Endpoint::kCompletions),
      *tokenizer_, nullptr, {.n_ctx = 64});
  EXPECT_EQ(ok[0].max_tokens, 64 - n_prompt);

  ApiError limit = build_error(R"({"prompt": "Once upon a time"})", Endpoint::kCompletions,
                               {.n_ctx = 512, .max_prompt_tokens = 2});
  EXPECT_EQ(limit.code, "prompt_too_long");
  EXPECT_NE(std::string(limit.what()).find("limit of 2"), std::string::npos) << limit.what();

  // Without max_tokens the default shrinks to what the context has left.
  auto capped = build_engine_requests(parse_api_request(R"({"prompt": "Once upon a time"})", Endpoint::kCompletions),
                                      *tokenizer_, nullptr, {.n_ctx = n_prompt + 3});
  EXPECT_EQ(capped[0].max_tokens, 3);
}

TEST_F(BuildRequests, TokenIdsOutsideTheVocabularyAre400) {
  ApiError e = build_error(str_cat(R"({"prompt": [1, )", tokenizer_->n_vocab(), "]}"), Endpoint::kCompletions,
                           {.n_ctx = 512});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
}

TEST_F(BuildRequests, ChatWithoutTemplateIsAClear400) {
  ApiError e = build_error(R"({"messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChatCompletions,
                           {.n_ctx = 512}, nullptr);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "chat_template_missing");
  EXPECT_NE(std::string(e.what()).find("/v1/completions"), std::string::npos);
}

TEST_F(BuildRequests, ChatUsesTheTemplateAndFillsTheContext) {
  ChatTemplate tmpl{ChatFormat::kChatML, ""};
  ApiRequest r = parse_api_request(R"({"messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChatCompletions);
  auto params = build_engine_requests(r, *tokenizer_, &tmpl, {.n_ctx = 256});
  std::vector<ChatMessage> messages{{"user", "hi"}};
  std::vector<int32_t> expected = tokenizer_->encode(apply_chat_template(tmpl, messages, true), true, true);
  EXPECT_EQ(params[0].prompt, expected);
  EXPECT_EQ(params[0].max_tokens, 256 - static_cast<int32_t>(expected.size()));
}

TEST_F(BuildRequests, ModelTemplateErrorsAreOpenAiErrors) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}]})";
  // The conversation is refused by the template (raise_exception): the client's 400.
  ChatTemplate refusing = chat_template_from_jinja("{{ raise_exception('Roles must alternate') }}", "tmpl", "", "", false);
  ApiError e = build_error(chat, Endpoint::kChatCompletions, {.n_ctx = 256}, &refusing);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(std::string(e.what()).find("Roles must alternate"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("line 1, column"), std::string::npos) << e.what();
  // The model's template does not parse: the server's 500, with the location.
  ChatTemplate broken = chat_template_from_jinja("{% if %}", "tmpl", "", "", false);
  e = build_error(chat, Endpoint::kChatCompletions, {.n_ctx = 256}, &broken);
  EXPECT_EQ(e.status, 500);
  EXPECT_EQ(e.code, "chat_template_error");
  EXPECT_NE(std::string(e.what()).find("tmpl, line 1, column"), std::string::npos) << e.what();
}

TEST_F(BuildRequests, ToolMessagesReachTheModelTemplate) {
  ChatTemplate tmpl = chat_template_from_jinja(
      "{% for m in messages %}{{ m.role }}|{{ m.content }}|{{ m.tool_calls[0].function.arguments.city if m.tool_calls }}"
      "{{ m.tool_call_id }};{% endfor %}",
      "tmpl", "", "", false);
  ApiRequest r = parse_api_request(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "21C"}]})",
                                   Endpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  auto params = build_engine_requests(r, *tokenizer_, &tmpl, {.n_ctx = 256});
  EXPECT_EQ(params[0].prompt, tokenizer_->encode("user|weather?|;assistant|None|Paris;tool|21C|c1;"));
  ApiError e = build_error(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
                           Endpoint::kChatCompletions, {.n_ctx = 256}, &tmpl);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[0].tool_calls");
}

TEST(ApiErrorJson, HasOpenAiShape) {
  nlohmann::json j = error_json(ApiError(401, "no key", "", "invalid_api_key"));
  EXPECT_EQ(j["error"]["message"], "no key");
  EXPECT_EQ(j["error"]["type"], "authentication_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "invalid_api_key");
  EXPECT_EQ(error_json(ApiError(500, "x"))["error"]["type"], "server_error");
  // Half a UTF-8 character (a token piece) becomes U+FFFD instead of throwing.
  EXPECT_EQ(dump_json(nlohmann::json("a\xe2\x82")), "\"a\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace ridge::server
