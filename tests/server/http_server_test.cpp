// The server end to end in one process: a real Engine on stories260K behind the real
// HTTP server on a free loopback port, driven by cpp-httplib's client. (The Python tests
// add the official openai client, concurrency, preemption and the chat page.)
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>

namespace ridge::server {
namespace {

using nlohmann::json;

const std::string kStories = std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf";

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(kStories, {.n_threads = 1, .max_batch_tokens = 128}).release();
    tokenizer_ = new Tokenizer(Tokenizer::from_gguf(model_->file()));
    engine_ = new Engine(*model_, *tokenizer_, {.parallel = 4, .max_batch_tokens = 128, .n_ctx = 512});
    engine_->start();
    ServerOptions options;
    options.port = 0;
    options.model_name = "stories";
    options.max_body_bytes = 4096;
    options.max_prompt_tokens = 100;
    server_ = new Server(*engine_, std::nullopt, options);
    port_ = server_->bind();
    thread_ = new std::thread([] { server_->run(); });
  }
  static void TearDownTestSuite() {
    server_->stop();
    thread_->join();
    delete thread_;
    delete server_;
    engine_->stop();
    delete engine_;
    delete tokenizer_;
    delete model_;
  }

  static httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  static json post(const std::string& path, const std::string& body, int expected_status) {
    auto res = client().Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(res) << "no response for " << body;
    if (!res) return json();
    EXPECT_EQ(res->status, expected_status) << body << " -> " << res->body;
    return json::parse(res->body);
  }
  static std::string metrics_text() {
    auto res = client().Get("/metrics");
    return res ? res->body : std::string();
  }
  // One value from a /metrics text; -1 when it is not there.
  static int64_t metric_in(const std::string& text, const std::string& name) {
    std::smatch m;
    std::regex re("\n" + name + " ([0-9.e+]+)\n");
    if (!std::regex_search(text, m, re)) return -1;
    return static_cast<int64_t>(std::stod(m[1]));
  }
  static int64_t metric(const std::string& name) { return metric_in(metrics_text(), name); }

  // Waits until n more requests than `finished_before` have ended, then checks that none
  // is left running or waiting and no KV block is held, all in one /metrics snapshot.
  // The counter is what to wait on, not a gauge reaching 0: the engine publishes metrics
  // after each step, so a client can hold its first token while /metrics still shows the
  // snapshot from before its request was admitted (0 blocks used, 0 running).
  static void expect_ended_and_freed(int64_t finished_before, int64_t n) {
    const std::string finished = "ridge_requests_finished_total";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string text = metrics_text();
    while (metric_in(text, finished) < finished_before + n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      text = metrics_text();
    }
    EXPECT_EQ(metric_in(text, finished), finished_before + n) << text;
    EXPECT_EQ(metric_in(text, "ridge_requests_running"), 0) << text;
    EXPECT_EQ(metric_in(text, "ridge_requests_waiting"), 0) << text;
    EXPECT_EQ(metric_in(text, "ridge_kv_blocks_used"), 0) << text;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
  static Engine* engine_;
  static Server* server_;
  static std::thread* thread_;
  static int port_;
};
Model* HttpServerTest::model_ = nullptr;
Tokenizer* HttpServerTest::tokenizer_ = nullptr;
Engine* HttpServerTest::engine_ = nullptr;
Server* HttpServerTest::server_ = nullptr;
std::thread* HttpServerTest::thread_ = nullptr;
int HttpServerTest::port_ = 0;

TEST_F(HttpServerTest, HealthModelsAndPage) {
  auto health = client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
  auto models = client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "stories");
  auto page = client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<html"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
}

TEST_F(HttpServerTest, GreedyCompletionIsReproducibleAndCounted) {
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})";
  json a = post("/v1/completions", body, 200);
  json b = post("/v1/completions", body, 200);
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["model"], "stories");
  EXPECT_FALSE(a["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["completion_tokens"], 12);
  EXPECT_EQ(a["usage"]["prompt_tokens"], tokenizer_->encode("Once upon a time").size());
}

TEST_F(HttpServerTest, StreamingSendsSseChunksThenDone) {
  std::string received;
  auto res = client().Post("/v1/completions",
                           R"({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": true,
                               "stream_options": {"include_usage": true}})",
                           "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::string& text = res->body;
  ASSERT_TRUE(text.ends_with("data: [DONE]\n\n")) << text;
  // Every event is "data: {json}\n\n"; the text pieces add up to the non-streaming answer.
  std::string joined;
  json last;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    std::string event = text.substr(pos, end - pos);
    pos = end + 2;
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    if (event == "data: [DONE]") break;
    last = json::parse(event.substr(6));
    if (!last["choices"].empty()) joined += last["choices"][0]["text"].get<std::string>();
  }
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 6);
  json whole = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0})", 200);
  EXPECT_EQ(joined, whole["choices"][0]["text"]);
}

TEST_F(HttpServerTest, BadRequestsGetOpenAiErrorsAndTheServerKeepsServing) {
  EXPECT_EQ(post("/v1/completions", "{not json", 400)["error"]["code"], "invalid_json");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400)["error"]["param"], "max_tokens");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404)["error"]["code"], "model_not_found");
  EXPECT_EQ(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", 400)["error"]["code"],
            "chat_template_missing");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "max_tokens": 600})", 400)["error"]["code"],
            "context_length_exceeded");
  std::string long_prompt(400, 'a');
  for (size_t i = 1; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  EXPECT_EQ(post("/v1/completions", json({{"prompt", long_prompt}}).dump(), 400)["error"]["code"], "prompt_too_long");
  EXPECT_EQ(post("/v1/completions", json({{"prompt", std::string(5000, 'a')}}).dump(), 413)["error"]["type"],
            "invalid_request_error");
  EXPECT_EQ(post("/v1/nothing", "{}", 404)["error"]["code"], "unknown_url");
  json ok = post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", 200);
  EXPECT_EQ(ok["usage"]["completion_tokens"], 2);
}

TEST_F(HttpServerTest, DisconnectCancelsTheRequestAndFreesItsBlocks) {
  // A long generation, read until the first chunk arrives, then the client hangs up.
  const int64_t finished_before = metric("ridge_requests_finished_total");
  const int64_t generated_before = metric("ridge_generation_tokens_total");
  httplib::Client c = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = R"({"prompt": "Once upon a time", "max_tokens": 480, "ignore_eos": true, "stream": true})";
  bool got_data = false;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    got_data = true;
    return false;  // abort: closes the connection
  };
  c.send(req);
  EXPECT_TRUE(got_data);
  expect_ended_and_freed(finished_before, 1);
  // It stopped early instead of running to the end.
  EXPECT_LT(metric("ridge_generation_tokens_total") - generated_before, 480);
}

}  // namespace
}  // namespace ridge::server
