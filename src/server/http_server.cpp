#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>

#include "engine/embedding.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/embeddings_api.h"
#include "server/guarded_http.h"
#include "server/metrics_text.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "server/tokenize_api.h"
#include "server/web_assets.h"

namespace ridge::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How long a reader waits on the engine before checking that the client is still there.
constexpr auto kDisconnectPoll = std::chrono::milliseconds(100);
// With several choices, each stream is polled briefly in turn.
constexpr auto kMultiChoicePoll = std::chrono::milliseconds(2);

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_json(e)), "application/json");
}

// Compares without an early exit, so the time taken does not reveal a matching prefix.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

// One in-flight completion request: its choices' streams and what they produced so far.
// Streaming, shared by the content provider and its releaser, which cancels whatever is
// unfinished if the response is dropped (client gone before or while streaming).
struct Exchange {
  ApiRequest request;
  ResponseMeta meta;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<ChoiceResult> results;
  std::vector<bool> finished;
  std::vector<size_t> text_offsets;  // completions logprobs: characters of the tokens so far per choice
  int failure_status = 0;            // not 0: an error body with this status replaced the result
  int64_t prompt_tokens = 0;         // the first choice's prompt as prefilled (Anthropic's input_tokens)
  // Chat with tools: the syntax of the model's calls, and per choice (streaming) the
  // parser that splits its text into content and calls.
  ToolCallSyntax tool_syntax = ToolCallSyntax::kNone;
  std::vector<ToolCallParser> tool_parsers;

  void cancel_unfinished() {
    for (size_t i = 0; i < streams.size(); ++i)
      if (!finished[i]) streams[i]->cancel();
  }
  bool all_finished() const {
    for (bool f : finished)
      if (!f) return false;
    return true;
  }
};

// One /v1/embeddings request: an engine request per input, each pooling its hidden
// states as the engine computes them. Whatever is unfinished is cancelled at the end.
struct EmbeddingExchange {
  EmbeddingsRequest request;
  std::vector<std::shared_ptr<EmbeddingPool>> pools;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<bool> finished;
  int64_t prompt_tokens = 0;
  int failure_status = 0;  // as for Exchange

  void cancel_unfinished() {
    for (size_t i = 0; i < streams.size(); ++i)
      if (!finished[i]) streams[i]->cancel();
  }
};

// The status and message of a request the engine ended without a result.
std::pair<int, std::string> ended_early(const StreamEvent& event, const std::string& while_doing) {
  if (event.finish_reason == FinishReason::kError)
    return {500, str_cat("The engine failed while ", while_doing, ": ", event.error)};
  return {503, "The request was cancelled because the server is shutting down."};
}

// A response that is not streamed is collected whole before anything is sent, so its
// status can still say how it ended (500 when the engine failed, 503 when the server is
// shutting down). `relay` writes the body to the sink it is given, whose is_writable
// watches the client's socket meanwhile; it returns false when the client went away.
template <class Relay>
void answer_whole(httplib::Response& res, const int& failure_status, Relay&& relay) {
  std::string body;
  httplib::DataSink sink;
  sink.write = [&body](const char* data, size_t n) {
    body.append(data, n);
    return true;
  };
  sink.is_writable = [] { return client_connected(); };
  sink.done = [] {};
  if (!relay(sink)) return;  // nobody to answer
  res.status = failure_status != 0 ? failure_status : 200;
  res.set_content(std::move(body), "application/json");
}

// An engine refusal as the API gives it; a full queue is OpenAI's rate-limit shape (type
// "requests", code "rate_limit_exceeded") with Retry-After.
void send_engine_error(httplib::Response& res, const EngineError& e, const std::string& param,
                       int32_t retry_after_seconds) {
  if (e.status == 429) {
    res.set_header("Retry-After", std::to_string(retry_after_seconds));
    send_error(res, ApiError(429, e.what(), param, "rate_limit_exceeded", "requests"));
    return;
  }
  send_error(res, ApiError(e.status, e.what(), param, e.code));
}

// Paths that need the API key when the server has one: the OpenAI API and llama-server's
// /tokenize and /detokenize (which guards them too). The page, /health and /metrics stay
// open, as llama.cpp's are.
bool needs_api_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

ConnectionLimits connection_limits(const ServerOptions& o) {
  using std::chrono::milliseconds;
  ConnectionLimits l;
  l.max_connections = static_cast<size_t>(std::max(1, o.max_connections));
  l.n_workers = static_cast<size_t>(o.n_http_threads > 0 ? o.n_http_threads : 64 + 8);
  l.idle_timeout = milliseconds(o.idle_timeout_ms);
  l.header_timeout = milliseconds(o.header_timeout_ms);
  l.body_timeout = milliseconds(o.body_timeout_ms);
  // A streaming client that stops reading makes a write block; after this long its
  // request is treated as disconnected and cancelled.
  l.write_timeout = milliseconds(30000);
  l.max_body_bytes = o.max_body_bytes;
  return l;
}

// The error a refusal carries, whether httplib or reception answers it.
ApiError refusal_error(int status) {
  switch (status) {
    case 408: return ApiError(408, "The request did not arrive in time (headers or body too slow).", "", "request_timeout");
    case 413: return ApiError(413, "The request body is larger than this server accepts (--max-body-bytes).", "",
                              "request_too_large");
    case 431: return ApiError(431, "The request headers are too large.", "", "headers_too_large");
    case 501: return ApiError(501, "Unsupported Transfer-Encoding; send Content-Length or chunked.", "",
                              "unsupported_transfer_encoding");
    case 503: return ApiError(503, "The server has too many open connections; retry later.", "", "too_many_connections");
    default: return ApiError(status, "The request is not valid HTTP.", "", "bad_request");
  }
}

// "application/json" or "application/json; charset=utf-8", in any case.
bool is_json_content_type(const std::string& value) {
  std::string type = value.substr(0, value.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type == "application/json";
}

}  // namespace

struct Server::Impl {
  Impl(Engine& engine, std::optional<ChatTemplate> chat_template, ServerOptions options)
      : engine(engine),
        chat_template(std::move(chat_template)),
        options(std::move(options)),
        spec_method(engine.metrics().spec_method),
        http(connection_limits(this->options), [this](int status) {
          count_response(status);
          return dump_json(error_json(refusal_error(status)));
        }) {}

  Engine& engine;
  std::optional<ChatTemplate> chat_template;
  ServerOptions options;
  SpecMethod spec_method;  // the engine's proposer, named in responses and /v1/models
  std::mutex counts_mutex;
  std::map<int, uint64_t> response_counts;  // by HTTP status, for /metrics
  GuardedHttpServer http;                    // last: its threads use the members above

  void install_routes();
  void count_response(int status) {
    std::lock_guard lock(counts_mutex);
    ++response_counts[status];
  }
  // CORS and the request's media type; false when `res` already holds the answer.
  bool allowed_by_policy(const httplib::Request& req, httplib::Response& res) const;
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void handle_embeddings(const httplib::Request& req, httplib::Response& res);
  // Anthropic's /v1/messages and /v1/messages/count_tokens, through the chat path.
  void handle_messages(const httplib::Request& req, httplib::Response& res, MessagesEndpoint endpoint);
  // OpenAI's /v1/responses, through the chat path.
  void handle_responses(const httplib::Request& req, httplib::Response& res);
  // The answer of a protocol told over the chat path (Messages, Responses): streaming, the
  // chat SSE re-told by `retell` on its way out; whole, the chat response JSON converted by
  // `convert` (to the body text), and an error (the chat path's, or a failed relay) written by `fail`.
  void answer_retold(const std::shared_ptr<Exchange>& ex, httplib::Response& res,
                     std::function<std::string(std::string_view)> retell,
                     const std::function<std::string(const json&)>& convert,
                     const std::function<void(const ApiError&)>& fail);
  std::shared_ptr<EmbeddingExchange> submit_embeddings(EmbeddingsRequest request);
  // Waits for every input's vector and writes the response; false when the client went away.
  bool relay_embeddings(EmbeddingExchange& ex, httplib::DataSink& sink) const;
  void check_model(const std::string& model) const;
  std::shared_ptr<Exchange> submit(ApiRequest request, Endpoint endpoint);
  // Relays events until every choice finishes; false when the client went away.
  bool relay(Exchange& ex, httplib::DataSink& sink) const;
  // relay, an exception turned into a 500 (an SSE error event once streaming), and the
  // request's unfinished choices cancelled; false: the client is gone.
  bool relay_or_fail(Exchange& ex, httplib::DataSink& sink) const;
  bool on_event(Exchange& ex, size_t choice, const StreamEvent& event, httplib::DataSink& sink) const;
  // Streaming with tools: the event's text through the choice's parser, as content and
  // tool-call chunks.
  bool stream_tool_event(Exchange& ex, size_t choice, const StreamEvent& event, httplib::DataSink& sink) const;
  static bool write_failure(Exchange& ex, httplib::DataSink& sink, int status, const std::string& message);
  json models_json() const;
};

Server::Server(Engine& engine, std::optional<ChatTemplate> chat_template, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(chat_template), std::move(options))) {
  impl_->install_routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (o.port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) throw Error(str_cat("serve: cannot bind ", o.host, " to a free port"));
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    throw Error(str_cat("serve: cannot listen on ", o.host, ":", o.port, " (address in use or not available)"));
  }
  return port;
}

void Server::run() {
  impl_->http.listen_after_bind();
  impl_->http.close_connections();
}

void Server::stop() { impl_->http.stop(); }

void Server::Impl::install_routes() {
  // Each SSE event is a small write: without TCP_NODELAY, Nagle's algorithm holds it
  // until the client's delayed ACK (~40 ms), which shows up as time to first token.
  // (Reception sets it on every accepted socket too.)
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR only: a restart binds at once past TIME_WAIT, but a second server on the
  // same port is refused. (httplib's default, SO_REUSEPORT, lets it bind and take half of
  // the connections.)
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return allowed_by_policy(req, res) && authorized(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                                               : httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib raises itself (unknown path, body too large, bad request line) get the
  // same OpenAI-style body as ours; responses that already have one keep it.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404)
      send_error(res, ApiError(404, str_cat("Unknown request URL: ", req.method, " ", req.path, "."), "", "unknown_url"));
    else if (res.status == 413)
      send_error(res, refusal_error(413));
    else
      send_error(res, ApiError(res.status, str_cat("HTTP error ", res.status, " for ", req.method, " ", req.path, ".")));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, str_cat("Internal server error: ", what)));
  });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) { count_response(res.status); });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::map<int, uint64_t> counts;
    {
      std::lock_guard lock(counts_mutex);
      counts = response_counts;
    }
    res.set_content(render_metrics(engine.metrics(), counts), kPrometheusContentType);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json(models_json()), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      check_model(req.matches[1]);
      res.set_content(dump_json(models_json()["data"][0]), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::kCompletions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::kChatCompletions);
  });
  http.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    handle_messages(req, res, MessagesEndpoint::kCreate);
  });
  http.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    handle_messages(req, res, MessagesEndpoint::kCountTokens);
  });
  http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses(req, res);
  });
  http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    handle_embeddings(req, res);
  });
  // llama-server's tokenizer endpoints (outside /v1, as there): the tokenizer is const and
  // thread-safe, so they run on the HTTP thread without the engine.
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      res.set_content(dump_json(tokenize_json(parse_tokenize_request(req.body), engine.tokenizer())),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::vector<int32_t> tokens = parse_detokenize_request(req.body, engine.tokenizer());
      res.set_content(dump_json(detokenize_json(tokens, engine.tokenizer())), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  // The chat page: "/" and the files beside it.
  http.Get(R"(/([A-Za-z0-9_.\-]*))", [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* asset = find_web_asset(req.path);
    if (asset == nullptr) {
      send_error(res, ApiError(404, str_cat("Unknown request URL: GET ", req.path, "."), "", "unknown_url"));
      return;
    }
    res.set_header("Content-Security-Policy", kPageSecurityPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(asset->body.data(), asset->body.size(), content_type_for(asset->path));
  });
}

bool Server::Impl::allowed_by_policy(const httplib::Request& req, httplib::Response& res) const {
  // CORS: off unless --cors-origin names the page's origin. A browser sends Origin on
  // cross-site requests; without Access-Control-Allow-Origin it hides the answer, and
  // without an answered preflight it sends no JSON body at all.
  const std::string origin = req.get_header_value("Origin");
  bool origin_allowed = false;
  for (const std::string& o : options.cors_origins) origin_allowed = origin_allowed || o == "*" || o == origin;
  if (!origin.empty() && origin_allowed) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {
    if (origin.empty() || !origin_allowed) {
      send_error(res, ApiError(403, origin.empty() ? "OPTIONS is only answered as a CORS preflight."
                                                   : str_cat("Origin '", origin, "' is not allowed (--cors-origin)."),
                               "", "cors_origin_not_allowed"));
      return false;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "600");
    return false;
  }
  // The API takes JSON only: a text/plain or form POST is what a hostile page can send
  // cross-site without a preflight, so it is refused, not parsed.
  if (req.method == "POST" && !is_json_content_type(req.get_header_value("Content-Type"))) {
    const std::string type = req.get_header_value("Content-Type");
    send_error(res, ApiError(415,
                             str_cat("Unsupported Content-Type '", type.empty() ? "(none)" : type,
                                     "': send the request body as JSON with 'Content-Type: application/json'."),
                             "", "unsupported_media_type"));
    return false;
  }
  return true;
}

bool Server::Impl::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options.api_key.empty() || !needs_api_key(req.path)) return true;
  // Anthropic's clients read their own error shape.
  auto send_error = [&req](httplib::Response& res, const ApiError& e) {
    if (req.path.rfind("/v1/messages", 0) != 0) return ridge::server::send_error(res, e);
    res.status = e.status;
    res.set_content(dump_json(messages_error_json(e)), "application/json");
  };
  // Anthropic's clients send the key as x-api-key.
  const std::string x_api_key = req.get_header_value("x-api-key");
  if (req.get_header_value("Authorization").empty() && !x_api_key.empty()) {
    if (same_secret(x_api_key, options.api_key)) return true;
    send_error(res, ApiError(401, "Incorrect API key provided.", "", "invalid_api_key"));
    return false;
  }
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.empty()) {
    send_error(res, ApiError(401,
                             "You didn't provide an API key. You need to provide your API key in an Authorization "
                             "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                             "", "missing_api_key"));
    return false;
  }
  if (header.rfind(prefix, 0) != 0 || !same_secret(header.substr(prefix.size()), options.api_key)) {
    send_error(res, ApiError(401, "Incorrect API key provided.", "", "invalid_api_key"));
    return false;
  }
  return true;
}

json Server::Impl::models_json() const {
  const Model& model = engine.model();
  json entry = {{"id", options.model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "ridge"},
                {"meta",
                 {{"architecture", model.config().summary()},
                  {"n_ctx", engine.limits().max_request_tokens},
                  {"n_vocab", engine.tokenizer().n_vocab()},
                  {"chat_template", chat_template ? json(std::string(chat_template_name(*chat_template)))
                                                  : json(nullptr)},
                  {"speculative", spec_method != SpecMethod::kNone ? json(spec_method_name(spec_method))
                                                                   : json(nullptr)}}}};
  return {{"object", "list"}, {"data", json::array({entry})}};
}

void Server::Impl::check_model(const std::string& model) const {
  if (model.empty() || model == options.model_name) return;
  throw ApiError(404, str_cat("The model `", model, "` does not exist. This server serves `", options.model_name, "`."),
                 "model", "model_not_found");
}

std::shared_ptr<Exchange> Server::Impl::submit(ApiRequest request, Endpoint endpoint) {
  check_model(request.model);
  if (!request.seed_given) {
    std::random_device rd;
    request.sampling.seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  PromptLimits limits{.n_ctx = engine.limits().max_request_tokens, .max_prompt_tokens = options.max_prompt_tokens};
  std::vector<RequestParams> params =
      build_engine_requests(request, engine.tokenizer(), chat_template ? &*chat_template : nullptr, limits);

  auto ex = std::make_shared<Exchange>();
  ex->meta = make_response_meta(endpoint, options.model_name, spec_method);
  ex->request = std::move(request);
  ex->prompt_tokens = params.empty() ? 0 : static_cast<int64_t>(params[0].prompt.size());
  ex->streams = engine.submit(std::move(params));  // all or nothing: n choices are one request
  ex->finished.assign(ex->streams.size(), false);
  ex->results.resize(ex->streams.size());
  ex->text_offsets.assign(ex->streams.size(), 0);
  if (endpoint == Endpoint::kChatCompletions && ex->request.tools_active() && chat_template)
    ex->tool_syntax = tool_call_syntax(*chat_template);
  ex->tool_parsers.assign(ex->streams.size(), ToolCallParser(ex->request.tool_names));
  return ex;
}

void Server::Impl::handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  std::shared_ptr<Exchange> ex;
  try {
    ex = submit(parse_api_request(req.body, endpoint), endpoint);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const EngineError& e) {
    // The engine names request fields as /v1/completions does; chat's prompt is its messages.
    send_engine_error(res, e, e.param == "prompt" && endpoint == Endpoint::kChatCompletions ? "messages" : e.param,
                      options.retry_after_seconds);
    return;
  } catch (const Error& e) {
    send_error(res, ApiError(400, e.what()));
    return;
  }
  auto relay_or_fail = [this, ex](httplib::DataSink& sink) { return this->relay_or_fail(*ex, sink); };
  if (!ex->request.stream) {
    answer_whole(res, ex->failure_status, relay_or_fail);
    return;
  }
  // A stream answers through a chunked provider: where a client that went away is noticed
  // (sink.is_writable) and its request cancelled, even before any output.
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [relay_or_fail](size_t, httplib::DataSink& sink) {
        const bool ok = relay_or_fail(sink);
        if (ok) sink.done();
        return ok;  // false drops the connection
      },
      [ex](bool) { ex->cancel_unfinished(); });
}

bool Server::Impl::relay_or_fail(Exchange& ex, httplib::DataSink& sink) const {
  bool ok = false;
  try {
    ok = relay(ex, sink);
  } catch (const std::exception& e) {
    ok = write_failure(ex, sink, 500, str_cat("Internal server error: ", e.what()));
  }
  ex.cancel_unfinished();
  return ok;
}

bool Server::Impl::write_failure(Exchange& ex, httplib::DataSink& sink, int status, const std::string& message) {
  // The JSON error object replaces the result (answer_whole sends it with `status`); a
  // stream has sent its status line already, so there it is an SSE event (OpenAI's
  // clients raise on an "error" event).
  ex.cancel_unfinished();
  ex.finished.assign(ex.finished.size(), true);
  ex.failure_status = status;
  std::string body = dump_json(error_json(ApiError(status, message)));
  if (ex.request.stream) body = "data: " + body + "\n\n";
  return sink.write(body.data(), body.size());
}

bool Server::Impl::relay(Exchange& ex, httplib::DataSink& sink) const {
  const bool stream = ex.request.stream;
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  if (stream && ex.meta.endpoint == Endpoint::kChatCompletions)
    for (size_t i = 0; i < ex.streams.size(); ++i)
      if (!write(sse_event(role_chunk(ex.meta, static_cast<int32_t>(i), ex.request.include_usage)))) return false;

  auto last_check = Clock::now();
  while (!ex.all_finished()) {
    size_t unfinished = 0;
    for (bool f : ex.finished) unfinished += f ? 0 : 1;
    const auto wait = unfinished == 1 ? kDisconnectPoll : kMultiChoicePoll;
    for (size_t i = 0; i < ex.streams.size(); ++i) {
      if (ex.finished[i]) continue;
      StreamEvent event;
      bool timed_out = false;
      if (ex.streams[i]->next_for(event, wait, timed_out)) {
        if (!on_event(ex, i, event, sink)) return false;
      } else if (!timed_out) {
        ex.finished[i] = true;  // the stream ended without a final event we saw
      }
    }
    if (Clock::now() - last_check >= kDisconnectPoll) {
      if (!sink.is_writable()) return false;
      last_check = Clock::now();
    }
  }
  if (ex.failure_status != 0) return true;

  if (stream) {
    if (ex.request.include_usage && !write(sse_event(usage_chunk(ex.meta, total_usage(ex.results))))) return false;
    return write(kSseDone);
  }
  return write(dump_json(response_json(ex.meta, ex.results, engine.tokenizer(), ex.request, ex.tool_syntax)));
}

bool Server::Impl::on_event(Exchange& ex, size_t choice, const StreamEvent& event, httplib::DataSink& sink) const {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  ex.results[choice].add(event);
  if (event.finished) ex.finished[choice] = true;

  if (event.finished &&
      (event.finish_reason == FinishReason::kError || event.finish_reason == FinishReason::kCancelled)) {
    // Not the client's doing (a disconnect never gets here): an engine failure, or the
    // engine stopping.
    const auto [status, message] = ended_early(event, "generating");
    return write_failure(ex, sink, status, message);
  }
  if (!ex.request.stream) return true;
  if (ex.tool_syntax != ToolCallSyntax::kNone) return stream_tool_event(ex, choice, event, sink);

  const auto index = static_cast<int32_t>(choice);
  if (!event.text.empty() || (ex.request.logprobs && !event.tokens.empty())) {
    if (!write(sse_event(text_chunk(ex.meta, index, event, engine.tokenizer(), ex.request, ex.text_offsets[choice]))))
      return false;
  }
  // Counted over the tokens, as a whole response counts them: the text an event carries
  // differs from its tokens' while a stop string holds some back.
  if (ex.request.logprobs) ex.text_offsets[choice] += pieces_length(engine.tokenizer(), event.tokens);
  if (event.finished && !write(sse_event(finish_chunk(ex.meta, index, event.finish_reason, ex.request.include_usage))))
    return false;
  return true;
}

bool Server::Impl::stream_tool_event(Exchange& ex, size_t choice, const StreamEvent& event,
                                     httplib::DataSink& sink) const {
  auto write = [&](const ResponseJson& chunk) {
    const std::string s = sse_event(chunk);
    return sink.write(s.data(), s.size());
  };
  const auto index = static_cast<int32_t>(choice);
  ToolCallParser& parser = ex.tool_parsers[choice];
  std::vector<ToolCallPiece> pieces = parser.feed(event.text);
  if (event.finished)
    for (ToolCallPiece& p : parser.finish()) pieces.push_back(std::move(p));

  // This event's tokens (and logprobs) ride on the first chunk written for it; when the
  // parser holds all of its text back, they still go out (with no text) if asked for.
  StreamEvent rest = event;
  rest.text.clear();
  bool tokens_sent = false;
  auto next_event = [&](std::string text) {
    StreamEvent e = tokens_sent ? StreamEvent{} : rest;
    tokens_sent = true;
    e.text = std::move(text);
    return e;
  };
  int32_t call_index = parser.n_calls();
  for (const ToolCallPiece& p : pieces) call_index -= p.is_call ? 1 : 0;
  for (const ToolCallPiece& p : pieces) {
    if (!p.is_call) {
      if (!write(text_chunk(ex.meta, index, next_event(p.content), engine.tokenizer(), ex.request, 0))) return false;
      continue;
    }
    if (ex.request.logprobs && !tokens_sent &&
        !write(text_chunk(ex.meta, index, next_event(""), engine.tokenizer(), ex.request, 0)))
      return false;
    for (const ResponseJson& chunk :
         tool_call_chunks(ex.meta, index, call_index++, new_tool_call_id(), p.call, ex.request.include_usage))
      if (!write(chunk)) return false;
  }
  if (ex.request.logprobs && !tokens_sent && !event.tokens.empty() &&
      !write(text_chunk(ex.meta, index, next_event(""), engine.tokenizer(), ex.request, 0)))
    return false;
  if (event.finished &&
      !write(finish_chunk(ex.meta, index, event.finish_reason, ex.request.include_usage, parser.n_calls() > 0)))
    return false;
  return true;
}

void Server::Impl::handle_messages(const httplib::Request& req, httplib::Response& res, MessagesEndpoint endpoint) {
  auto fail = [&res](const ApiError& e) {
    res.status = e.status;
    res.set_content(dump_json(messages_error_json(e)), "application/json");
  };
  std::shared_ptr<Exchange> ex;
  try {
    ApiRequest request = parse_api_request(chat_body_from_messages(req.body, endpoint), Endpoint::kChatCompletions);
    if (endpoint == MessagesEndpoint::kCountTokens) {
      check_model(request.model);
      PromptLimits limits{.n_ctx = engine.limits().max_request_tokens, .max_prompt_tokens = options.max_prompt_tokens};
      const std::vector<RequestParams> params =
          build_engine_requests(request, engine.tokenizer(), chat_template ? &*chat_template : nullptr, limits);
      res.set_content(dump_json(json{{"input_tokens", params.at(0).prompt.size()}}), "application/json");
      return;
    }
    ex = submit(std::move(request), Endpoint::kChatCompletions);
  } catch (const ApiError& e) {
    fail(e);
    return;
  } catch (const EngineError& e) {
    if (e.status == 429) res.set_header("Retry-After", std::to_string(options.retry_after_seconds));
    fail(ApiError(e.status, e.what(), e.param));
    return;
  } catch (const Error& e) {
    fail(ApiError(400, e.what()));
    return;
  }
  auto told = std::make_shared<MessagesStream>(options.model_name, ex->prompt_tokens);
  answer_retold(
      ex, res, [told](std::string_view chat_sse) { return told->feed(chat_sse); },
      [this](const json& chat) { return dump_json(messages_response_json(chat, options.model_name)); }, fail);
}

void Server::Impl::handle_responses(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<Exchange> ex;
  ResponseJson echo;
  try {
    ResponsesRequest request = parse_responses_request(req.body);
    echo = std::move(request.echo);
    ex = submit(std::move(request.chat), Endpoint::kChatCompletions);
  } catch (const ApiError& e) {
    send_error(res, responses_error(e));
    return;
  } catch (const EngineError& e) {
    send_engine_error(res, e, responses_error(ApiError(e.status, e.what(), e.param)).param, options.retry_after_seconds);
    return;
  } catch (const Error& e) {
    send_error(res, ApiError(400, e.what()));
    return;
  }
  auto told = std::make_shared<ResponsesStream>(echo, options.model_name);
  answer_retold(
      ex, res, [told](std::string_view chat_sse) { return told->feed(chat_sse); },
      [this, echo](const json& chat) { return dump_json(responses_object(chat, echo, options.model_name)); },
      [&res](const ApiError& e) { send_error(res, e); });
}

void Server::Impl::answer_retold(const std::shared_ptr<Exchange>& ex, httplib::Response& res,
                                 std::function<std::string(std::string_view)> retell,
                                 const std::function<std::string(const json&)>& convert,
                                 const std::function<void(const ApiError&)>& fail) {
  if (ex->request.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, ex, retell = std::move(retell)](size_t, httplib::DataSink& sink) {
          httplib::DataSink retold;
          retold.write = [&sink, &retell](const char* data, size_t n) {
            const std::string out = retell(std::string_view(data, n));
            return out.empty() || sink.write(out.data(), out.size());
          };
          retold.is_writable = [&sink] { return sink.is_writable(); };
          const bool ok = relay_or_fail(*ex, retold);
          if (ok) sink.done();
          return ok;
        },
        [ex](bool) { ex->cancel_unfinished(); });
    return;
  }
  answer_whole(res, ex->failure_status, [this, ex](httplib::DataSink& sink) { return relay_or_fail(*ex, sink); });
  // The chat answer (or its OpenAI-shaped error) in the protocol's shape.
  const json chat = json::parse(res.body, nullptr, false);
  if (res.status != 200 || chat.is_discarded()) {
    const std::string message = chat.is_object() && chat.contains("error") ? chat["error"].value("message", "") : res.body;
    fail(ApiError(res.status == 200 ? 500 : res.status, message));
    return;
  }
  res.set_content(convert(chat), "application/json");
}

std::shared_ptr<EmbeddingExchange> Server::Impl::submit_embeddings(EmbeddingsRequest request) {
  check_model(request.model);
  const ModelConfig& config = engine.model().config();
  if (config.pooling != Pooling::kMean && config.pooling != Pooling::kCls && config.pooling != Pooling::kLast)
    throw ApiError(400, str_cat("This model's pooling type is '", pooling_name(config.pooling),
                                "', which gives no single vector per input; /v1/embeddings needs mean, cls or last."),
                   "", "pooling_not_supported");
  PromptLimits limits{.n_ctx = engine.limits().max_request_tokens, .max_prompt_tokens = options.max_prompt_tokens};
  std::vector<std::vector<int32_t>> prompts = embedding_prompts(request, engine.tokenizer(), config.n_embd, limits);
  // All inputs are queued at once (computed together, all or none), so no more than the
  // engine's queue takes.
  if (static_cast<int64_t>(prompts.size()) > engine.limits().max_queue)
    throw ApiError(400, str_cat("'input' has ", prompts.size(), " items; this server queues at most ",
                                engine.limits().max_queue, " at once (--max-queue). Send fewer per request."),
                   "input", "too_many_inputs");

  auto ex = std::make_shared<EmbeddingExchange>();
  std::vector<RequestParams> params(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto pool = std::make_shared<EmbeddingPool>(config.pooling, config.n_embd, static_cast<int32_t>(prompts[i].size()));
    params[i].prompt = std::move(prompts[i]);
    params[i].hidden = [pool](int32_t position, std::span<const float> hidden) { pool->add(position, hidden); };
    ex->prompt_tokens += static_cast<int64_t>(params[i].prompt.size());
    ex->pools.push_back(std::move(pool));
  }
  ex->request = std::move(request);
  ex->streams = engine.submit(std::move(params));
  ex->finished.assign(ex->streams.size(), false);
  return ex;
}

void Server::Impl::handle_embeddings(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<EmbeddingExchange> ex;
  try {
    ex = submit_embeddings(parse_embeddings_request(req.body));
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const EngineError& e) {
    send_engine_error(res, e, e.param == "prompt" ? "input" : e.param, options.retry_after_seconds);
    return;
  } catch (const Error& e) {
    send_error(res, ApiError(400, e.what()));
    return;
  }
  answer_whole(res, ex->failure_status, [this, ex](httplib::DataSink& sink) {
    bool ok = false;
    try {
      ok = relay_embeddings(*ex, sink);
    } catch (const std::exception& e) {
      ex->failure_status = 500;
      const std::string body = dump_json(error_json(ApiError(500, str_cat("Internal server error: ", e.what()))));
      ok = sink.write(body.data(), body.size());
    }
    ex->cancel_unfinished();
    return ok;
  });
}

bool Server::Impl::relay_embeddings(EmbeddingExchange& ex, httplib::DataSink& sink) const {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  for (size_t i = 0; i < ex.streams.size(); ++i) {
    while (!ex.finished[i]) {
      StreamEvent event;
      bool timed_out = false;
      if (!ex.streams[i]->next_for(event, kDisconnectPoll, timed_out)) {
        if (!timed_out) ex.finished[i] = true;  // ended without a final event we saw
        if (!sink.is_writable()) return false;
        continue;
      }
      if (!event.finished) continue;
      ex.finished[i] = true;
      if (event.finish_reason != FinishReason::kLength) {
        ex.cancel_unfinished();
        ex.finished.assign(ex.finished.size(), true);
        const auto [status, message] = ended_early(event, str_cat("embedding input ", i));
        ex.failure_status = status;
        return write(dump_json(error_json(ApiError(status, message))));
      }
    }
  }
  std::vector<std::vector<float>> vectors;
  vectors.reserve(ex.pools.size());
  for (const std::shared_ptr<EmbeddingPool>& pool : ex.pools) vectors.push_back(pool->result());
  return write(dump_json(embeddings_json(ex.request, options.model_name, vectors, ex.prompt_tokens)));
}

}  // namespace ridge::server
