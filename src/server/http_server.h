// The OpenAI-compatible HTTP server over an Engine: /v1/completions and
// /v1/chat/completions (JSON or SSE streaming), /v1/models, /health, /metrics and the
// chat page at /. Each request runs on an HTTP thread that submits to the engine and
// relays its stream; a client that goes away cancels its request. No request can take
// the server down: every failure becomes an OpenAI-style error response.
//
//   Server server(engine, chat_template, {.host = "127.0.0.1", .port = 8080, .model_name = "gemma3-270m"});
//   int port = server.bind();     // throws ridge::Error if the address is taken
//   server.run();                 // blocks until server.stop() (from another thread)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"

namespace ridge::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port (bind() returns it)
  std::string model_name = "model";       // the id /v1/models lists and requests may name
  std::string api_key;                    // "": no authentication
  size_t max_body_bytes = 8u << 20;       // larger request bodies get 413
  int32_t max_prompt_tokens = 0;          // 0: only the context limits the prompt
  int32_t n_http_threads = 0;             // 0: enough for every running and queued request
  int32_t retry_after_seconds = 1;        // Retry-After of a 429 (queue full)
  // Connections: a request reaches an HTTP thread only once it has fully arrived.
  int32_t max_connections = 512;          // open sockets at once; more get 503
  int32_t header_timeout_ms = 10000;      // a request's headers, from its first byte (total)
  int32_t body_timeout_ms = 30000;        // its body, from the end of the headers (total)
  int32_t idle_timeout_ms = 5000;         // a keep-alive connection between requests
  // Origins a browser page may call the API from ("*": any); empty: no CORS headers, so
  // other sites' pages cannot read answers or send JSON bodies to this server.
  std::vector<std::string> cors_origins;
};

class Server {
 public:
  // chat_template: nullopt when the model has none (chat requests then get a 400).
  Server(Engine& engine, std::optional<ChatTemplate> chat_template, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws ridge::Error naming host:port.
  int bind();
  // Accepts and serves connections until stop(). bind() first.
  void run();
  // Stops accepting and returns run(); safe from any thread, and before run().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::server
