// The server end to end in one process: a real Engine on stories260K behind the real
// HTTP server on a free loopback port, driven by cpp-httplib's client. (The Python tests
// add the official openai client, concurrency, preemption and the chat page.)
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
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

  // /metrics once no request is running or waiting. Every earlier request has then ended
  // in what it shows: a client can hold its whole response while the engine has yet to
  // publish the step that finished it (it streams before it publishes), but a snapshot
  // with nothing running or waiting comes after that step.
  static std::string quiet_metrics_text() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string text = metrics_text();
    while ((metric_in(text, "ridge_requests_running") != 0 || metric_in(text, "ridge_requests_waiting") != 0) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      text = metrics_text();
    }
    return text;
  }

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

TEST_F(HttpServerTest, ASecondServerOnTheSamePortIsRefused) {
  // With SO_REUSEPORT it would bind too and take some of this server's connections.
  ServerOptions options;
  options.port = port_;
  options.host = "127.0.0.1";
  Server second(*engine_, std::nullopt, options);
  try {
    second.bind();
    ADD_FAILURE() << "a second server bound port " << port_;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("address in use"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client().Get("/health")->status, 200);
}

TEST_F(HttpServerTest, AnEngineFailureIsA500UnlessTheStreamHasBegun) {
  // A grammar with 2^n parses after n bytes: the engine gives up on it part way through.
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 60},
                     {"temperature", 0},
                     {"grammar", R"(root ::= [a-z ,] root "y" | [a-z ,] root "z" | "")"}};
  const json failed = post("/v1/completions", body.dump(), 500);
  EXPECT_EQ(failed["error"]["type"], "server_error") << failed;
  EXPECT_NE(failed["error"]["message"].get<std::string>().find("too ambiguous"), std::string::npos) << failed;

  // Streamed, the 200 is out before the failure: the error is an SSE event, and no [DONE].
  json streamed = body;
  streamed["stream"] = true;
  auto res = client().Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("data: {\"error\""), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("too ambiguous"), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find("[DONE]"), std::string::npos) << res->body;

  // The server goes on serving.
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})", 200)["usage"]["completion_tokens"], 2);
}

TEST_F(HttpServerTest, StreamedTextOffsetsAreTheWholeResponsesWhileAStopStringHoldsTextBack) {
  // "e!!" never matches, but holds back every "e" the text ends in until the next token.
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0},
               {"logprobs", 1},            {"stop", json::array({"e!!"})}};
  const json whole = post("/v1/completions", body.dump(), 200)["choices"][0];
  const json& offsets = whole["logprobs"]["text_offset"];
  const json& tokens = whole["logprobs"]["tokens"];
  ASSERT_EQ(offsets.size(), 40u);
  const std::string text = whole["text"];
  for (size_t i = 0; i < tokens.size(); ++i) {  // each token is found at its offset (the text is ASCII)
    const std::string piece = tokens[i];
    EXPECT_EQ(text.substr(offsets[i].get<size_t>(), piece.size()), piece) << i;
  }

  body["stream"] = true;
  auto res = client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  json streamed = json::array();
  int held_back = 0;  // events whose text is not their tokens'
  for (size_t at = res->body.find("data: {"); at != std::string::npos; at = res->body.find("data: {", at + 1)) {
    const json choice = json::parse(res->body.substr(at + 6, res->body.find("\n\n", at) - at - 6))["choices"][0];
    if (choice["logprobs"].is_null()) continue;
    std::string pieces;
    for (const json& t : choice["logprobs"]["tokens"]) pieces += t.get<std::string>();
    held_back += pieces != choice["text"] ? 1 : 0;
    for (const json& o : choice["logprobs"]["text_offset"]) streamed.push_back(o);
  }
  EXPECT_GT(held_back, 0) << "the stop string held nothing back: the test tests nothing";
  EXPECT_EQ(streamed, offsets);
}

// Where a client hangs up on a completion it asked for.
enum class HangUp {
  kBeforeReading,     // sends the request and closes at once: gone before it is submitted
  kAfterHeaders,      // the status line and headers, before any content
  kAfterFirstEvent,   // one SSE event (streaming only)
  kAfterTwentyEvents  // part way through the stream
};

const char* hang_up_name(HangUp h) {
  switch (h) {
    case HangUp::kBeforeReading: return "before reading anything";
    case HangUp::kAfterHeaders: return "after the headers";
    case HangUp::kAfterFirstEvent: return "after the first event";
    case HangUp::kAfterTwentyEvents: return "after twenty events";
  }
  return "?";
}

// Posts a completion to the server at `port` and hangs up at `when`.
void post_and_hang_up(int port, const std::string& body, HangUp when) {
  if (when == HangUp::kBeforeReading) {  // a raw socket: httplib's client always waits for the status
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    close(fd);
    return;
  }
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body;
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return when != HangUp::kAfterHeaders;  // false: the client closes the connection
  };
  const int events_to_read = when == HangUp::kAfterFirstEvent ? 1 : 20;
  int events = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    for (std::string_view rest(data, n); rest.find("\n\n") != std::string_view::npos;
         rest.remove_prefix(rest.find("\n\n") + 2))
      ++events;
    return events < events_to_read;
  };
  EXPECT_FALSE(c.send(req)) << "the client was to hang up " << hang_up_name(when);
  EXPECT_EQ(status, 200);
  if (when != HangUp::kAfterHeaders) {
    EXPECT_EQ(events, events_to_read);
  }
}

TEST_F(HttpServerTest, DisconnectCancelsTheRequestAndFreesItsBlocks) {
  // A long generation (480 tokens) whose client hangs up at each point in turn.
  constexpr int kMaxTokens = 480;
  struct Case {
    bool stream;
    int n;  // choices
    HangUp when;
  };
  for (const Case& c : std::initializer_list<Case>{{true, 1, HangUp::kAfterFirstEvent},
                                                    {true, 1, HangUp::kBeforeReading},
                                                    {true, 1, HangUp::kAfterHeaders},
                                                    {true, 1, HangUp::kAfterTwentyEvents},
                                                    {true, 4, HangUp::kAfterFirstEvent},
                                                    {false, 1, HangUp::kBeforeReading},
                                                    {false, 4, HangUp::kBeforeReading}}) {
    SCOPED_TRACE(std::string(c.stream ? "streaming" : "not streaming") + ", n=" + std::to_string(c.n) +
                 ", hung up " + hang_up_name(c.when));
    const std::string before = quiet_metrics_text();
    const int64_t generated_before = metric_in(before, "ridge_generation_tokens_total");
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true},
                       {"stream", c.stream},           {"n", c.n}};
    post_and_hang_up(port_, body.dump(), c.when);
    const int64_t generated_at_hang_up = metric("ridge_generation_tokens_total") - generated_before;
    expect_ended_and_freed(metric_in(before, "ridge_requests_finished_total"), c.n);
    // A stream notices the hang-up at its next write and stops early, if it was still
    // running then. (A client kept off the CPU under load may read its first event only
    // after the last was generated. The count read after the hang-up lags the engine by at
    // most one step, a token per choice.) Without a stream, the server looks for the client
    // every 100 ms, about as long as this generation takes: it may end by its length first.
    if (c.stream && generated_at_hang_up + c.n < kMaxTokens * c.n) {
      EXPECT_LT(metric("ridge_generation_tokens_total") - generated_before, kMaxTokens * c.n);
    }
  }
}

}  // namespace
}  // namespace ridge::server
