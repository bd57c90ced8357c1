// An httplib::Server whose connections are read by one reception thread, not by the
// worker threads: a request reaches a worker only once its headers and its whole body
// have arrived, so a slow or idle client holds a socket, never a worker. Reception keeps
// total-time deadlines (not per-read timeouts, which a client sending a byte a second
// never trips), the body limit (Content-Length or chunked) and a cap on open
// connections, and answers 408, 413, 431 and 503 itself.
//
//   GuardedHttpServer http({.max_connections = 512, .n_workers = 72}, refusal_body);
//   http.Get("/health", ...);            // routes as on any httplib::Server
//   http.bind_to_port(host, port);
//   http.listen_after_bind();            // until http.stop()
//   http.close_connections();            // then: drop what is held, join the workers
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ridge::server {

struct ConnectionLimits {
  size_t max_connections = 512;  // open sockets, waiting or being served; more get 503
  size_t n_workers = 8;          // threads that run handlers (and stream responses)
  std::chrono::milliseconds idle_timeout{5000};     // keep-alive: until a next request starts
  std::chrono::milliseconds header_timeout{10000};  // first byte of a request to its blank line
  std::chrono::milliseconds body_timeout{30000};    // end of the headers to the end of the body
  std::chrono::milliseconds write_timeout{30000};   // one blocked write of a response
  size_t max_header_bytes = 16u << 10;              // request line and headers; more get 431
  size_t max_body_bytes = 8u << 20;                 // decoded body; more get 413
  size_t max_requests_per_connection = 100;
};

// The JSON body of an error reception answers itself (408, 413, 431, 503); called once
// per refusal, so it may also count them.
using RefusalBody = std::function<std::string(int status)>;

// Whether the client of the request this thread is handling is still connected: false
// once it has closed its socket. For handlers that wait before they answer (a response
// not streamed); always true on a thread that is not one of GuardedHttpServer's workers.
bool client_connected();

class GuardedHttpServer : public httplib::Server {
 public:
  GuardedHttpServer(ConnectionLimits limits, RefusalBody refusal_body);
  ~GuardedHttpServer() override;

  // After listen_after_bind() returned: closes every held connection and joins the
  // workers (a response being streamed finishes first). Idempotent.
  void close_connections();
  size_t open_connections() const;

 private:
  struct Connection;
  class Reception;
  // httplib's accept loop hands each new socket here (on its own thread, through an
  // inline task queue); it goes to reception, never to a worker directly.
  bool process_and_close_socket(socket_t sock) override;
  void serve(std::unique_ptr<Connection> conn);

  ConnectionLimits limits_;
  std::unique_ptr<Reception> reception_;
  std::unique_ptr<httplib::ThreadPool> workers_;
  std::atomic<bool> closed_{false};
};

}  // namespace ridge::server
