#include "server/guarded_http.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ridge::server {
namespace {

using Clock = std::chrono::steady_clock;

// After a refusal the socket is read and discarded this long before closing, so the
// client (still sending its body) gets to read the answer instead of a reset.
constexpr auto kLingerOnRefusal = std::chrono::milliseconds(2000);
constexpr size_t kRecvChunk = 64u << 10;
constexpr size_t kMaxChunkLine = 1024;  // "1f3a;ext=...\r\n"

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool icontains(std::string_view haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         }) != haystack.end();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

void set_nonblocking(int sock) { fcntl(sock, F_SETFL, fcntl(sock, F_GETFL, 0) | O_NONBLOCK); }

// Sends what the socket takes now; a refusal is best effort.
void send_now(int sock, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void close_socket(int sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// The socket of the request this worker thread is handling; -1 between requests.
thread_local int t_client_socket = -1;

struct ClientSocketScope {
  explicit ClientSocketScope(int sock) { t_client_socket = sock; }
  ~ClientSocketScope() { t_client_socket = -1; }
  ClientSocketScope(const ClientSocketScope&) = delete;
  ClientSocketScope& operator=(const ClientSocketScope&) = delete;
};

// A peer that closed reads as EOF (httplib's is_socket_alive); one that sent more (a
// pipelined request) or nothing is still there.
bool peer_connected(int sock) {
  pollfd r{sock, POLLIN, 0};
  if (::poll(&r, 1, 0) <= 0) return true;
  if (r.revents & (POLLERR | POLLNVAL)) return false;
  char byte;
  return ::recv(sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

// A stream over one request that reception has read whole: httplib parses it from
// memory and never waits on the client for it; responses go straight to the socket.
class RequestStream : public httplib::Stream {
 public:
  RequestStream(int sock, std::string_view request, std::chrono::milliseconds write_timeout)
      : sock_(sock), request_(request), write_timeout_(write_timeout) {}

  bool is_readable() const override { return read_ < request_.size(); }
  bool is_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(write_timeout_.count())) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
    return peer_connected(sock_);  // writable is not alive
  }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, request_.size() - read_);
    std::memcpy(ptr, request_.data() + read_, n);
    read_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    const auto deadline = Clock::now() + write_timeout_;
    for (;;) {
      ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{sock_, POLLOUT, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return -1;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  void address(bool local, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int rc = local ? getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len)
                   : getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len);
    if (rc != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
      port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
      port = ntohs(a->sin6_port);
    }
    ip = text;
  }

  int sock_;
  std::string_view request_;
  size_t read_ = 0;
  std::chrono::milliseconds write_timeout_;
};

// Runs each task at once on the caller (httplib's accept thread): the task only hands
// the new socket to reception.
class InlineTaskQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

// One client socket and what has arrived of its current request.
struct GuardedHttpServer::Connection {
  enum class Phase { kIdle, kHeaders, kBody, kLingering };

  int sock = -1;
  std::string bytes;  // from the start of the current request
  Phase phase = Phase::kIdle;
  Clock::time_point deadline;
  size_t served = 0;  // requests answered on this connection

  // Framing of the current request, filled in as it arrives.
  size_t header_end = 0;  // offset just past the blank line; 0 until then
  bool chunked = false;
  uint64_t content_length = 0;
  bool expect_continue = false;
  size_t expect_at = 0;       // offset of the Expect header's name
  bool close_after = false;   // "Connection: close", or the body's end is unknowable
  size_t chunk_pos = 0;       // chunked: offset of the next chunk-size line
  bool in_trailers = false;
  uint64_t decoded = 0;       // chunked: body bytes so far
  size_t request_end = 0;     // offset just past the request; 0 until it is whole

  void start_next_request() {
    bytes.erase(0, request_end);
    header_end = content_length = decoded = chunk_pos = request_end = expect_at = 0;
    chunked = expect_continue = close_after = in_trailers = false;
  }

  // Parses the request line's headers. Returns an HTTP status to refuse with, or 0.
  int parse_headers() {
    std::string_view head = std::string_view(bytes).substr(0, header_end);
    size_t line_start = head.find('\n') + 1;  // skip the request line
    bool have_length = false;
    while (line_start < head.size()) {
      size_t eol = head.find('\n', line_start);
      std::string_view line = head.substr(line_start, eol - line_start);
      line_start = eol + 1;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
      if (iequals(name, "Content-Length")) {
        if (value.empty() || value.size() > 18 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return 400;
        uint64_t length = std::stoull(std::string(value));
        if (have_length && length != content_length) return 400;
        content_length = length;
        have_length = true;
      } else if (iequals(name, "Transfer-Encoding")) {
        if (!icontains(value, "chunked")) return 501;  // a length we could not know
        chunked = true;
      } else if (iequals(name, "Expect")) {
        expect_continue = iequals(value, "100-continue");
        expect_at = static_cast<size_t>(name.data() - bytes.data());
      } else if (iequals(name, "Connection")) {
        close_after = close_after || icontains(value, "close");
      }
    }
    if (chunked) {
      close_after = close_after || have_length;  // both framings: do not trust what follows
      content_length = 0;
    }
    return 0;
  }

  // Follows the request's framing over the bytes so far: sets header_end, then
  // request_end once the request is whole. Returns a status to refuse with, or 0.
  int advance(const ConnectionLimits& limits) {
    if (header_end == 0) {
      size_t crlf = bytes.find("\r\n\r\n"), lf = bytes.find("\n\n");
      size_t end = std::min(crlf == std::string::npos ? crlf : crlf + 4, lf == std::string::npos ? lf : lf + 2);
      if (end == std::string::npos) return bytes.size() > limits.max_header_bytes ? 431 : 0;
      if (end > limits.max_header_bytes) return 431;
      header_end = end;
      if (int status = parse_headers()) return status;
      if (!chunked && content_length > limits.max_body_bytes) return 413;
      chunk_pos = header_end;
    }
    if (!chunked) {
      if (bytes.size() >= header_end + content_length) request_end = header_end + content_length;
      return 0;
    }
    // Framing may cost more than the data it carries, but not without bound.
    if (bytes.size() - header_end > 4 * limits.max_body_bytes + kRecvChunk) return 413;
    for (;;) {
      std::string_view rest = std::string_view(bytes).substr(chunk_pos);
      size_t eol = rest.find('\n');
      if (eol == std::string_view::npos) return rest.size() > kMaxChunkLine ? 400 : 0;
      std::string_view line = trim(rest.substr(0, eol));
      if (in_trailers) {
        chunk_pos += eol + 1;
        if (line.empty()) {
          request_end = chunk_pos;
          return 0;
        }
        if (chunk_pos - header_end > limits.max_body_bytes + limits.max_header_bytes) return 413;
        continue;
      }
      line = line.substr(0, line.find(';'));
      line = trim(line);
      if (line.empty() || line.size() > 15 || !std::all_of(line.begin(), line.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c)) != 0;
          }))
        return line.size() > 15 ? 413 : 400;
      const uint64_t size = std::stoull(std::string(line), nullptr, 16);
      if (size == 0) {
        in_trailers = true;
        chunk_pos += eol + 1;
        continue;
      }
      if (decoded + size > limits.max_body_bytes) return 413;
      const size_t need = eol + 1 + size + 2;
      if (rest.size() < need) return 0;
      if (rest[need - 2] != '\r' || rest[need - 1] != '\n') return 400;
      decoded += size;
      chunk_pos += need;
    }
  }
};

// The one thread that reads from clients: it polls every connection that is between
// requests or in the middle of sending one, and hands whole requests to the workers.
class GuardedHttpServer::Reception {
 public:
  Reception(GuardedHttpServer& server, const ConnectionLimits& limits, RefusalBody refusal_body)
      : server_(server), limits_(limits), refusal_body_(std::move(refusal_body)) {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw Error(str_cat("serve: eventfd failed: ", std::strerror(errno)));
    thread_ = std::thread([this] { loop(); });
  }
  ~Reception() {
    stop();
    ::close(wake_fd_);
  }

  // A new socket from the accept loop.
  void adopt(int sock) {
    if (open_.fetch_add(1) >= limits_.max_connections) {
      refuse_and_close(sock, 503);
      return;
    }
    set_nonblocking(sock);
    int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_unique<Connection>();
    conn->sock = sock;
    give_back(std::move(conn));
  }

  // A connection between requests (new, or answered and kept alive).
  void give_back(std::unique_ptr<Connection> conn) {
    conn->phase = Connection::Phase::kIdle;
    conn->deadline = Clock::now() + limits_.idle_timeout;
    {
      std::lock_guard lock(mutex_);
      if (!stopped_) {
        inbox_.push_back(std::move(conn));
        conn = nullptr;
      }
    }
    if (conn) {
      close(*conn);
      return;
    }
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  void close(Connection& conn) {
    close_socket(conn.sock);
    conn.sock = -1;
    open_.fetch_sub(1);
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
    for (auto& c : held_) close(*c);
    for (auto& c : inbox_) close(*c);
    held_.clear();
    inbox_.clear();
  }

  size_t open() const { return open_.load(); }

 private:
  void refuse_and_close(int sock, int status) {
    send_now(sock, response_text(status));
    close_socket(sock);
    open_.fetch_sub(1);
  }

  std::string response_text(int status) {
    std::string body = refusal_body_ ? refusal_body_(status) : std::string();
    return str_cat("HTTP/1.1 ", status, " ", reason_phrase(status), "\r\nContent-Type: application/json\r\n",
                   "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  }

  // Answers with an error and stops reading requests; the socket stays open a little
  // while, discarding what the client still sends, so the answer is not lost to a reset.
  void refuse(Connection& conn, int status) {
    send_now(conn.sock, response_text(status));
    ::shutdown(conn.sock, SHUT_WR);
    conn.phase = Connection::Phase::kLingering;
    conn.deadline = Clock::now() + kLingerOnRefusal;
    conn.bytes.clear();
    conn.bytes.shrink_to_fit();
  }

  // Follows what has arrived; true when the connection left reception (to a worker, or closed).
  bool on_bytes(Connection& conn) {
    if (conn.phase == Connection::Phase::kIdle) {
      // Blank lines between requests are allowed before a request line.
      size_t skip = conn.bytes.find_first_not_of("\r\n");
      conn.bytes.erase(0, skip == std::string::npos ? conn.bytes.size() : skip);
      if (conn.bytes.empty()) return false;
      conn.phase = Connection::Phase::kHeaders;
      conn.deadline = Clock::now() + limits_.header_timeout;
    }
    const bool had_headers = conn.header_end != 0;
    if (int status = conn.advance(limits_)) {
      refuse(conn, status);
      return false;
    }
    if (!had_headers && conn.header_end != 0 && conn.expect_continue) {
      // Reception answers "Expect: 100-continue" (the body must arrive before a worker
      // sees the request); renaming the header, same length, keeps httplib from sending
      // a second 100 after the body is in.
      if (conn.request_end == 0) send_now(conn.sock, "HTTP/1.1 100 Continue\r\n\r\n");
      conn.bytes[conn.expect_at] = 'X';
    }
    if (conn.request_end != 0) return true;
    if (!had_headers && conn.header_end != 0) {
      conn.phase = Connection::Phase::kBody;
      conn.deadline = Clock::now() + limits_.body_timeout;
    }
    return false;
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<char> chunk(kRecvChunk);
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        for (auto& c : inbox_) held_.push_back(std::move(c));
        inbox_.clear();
      }
      // Leftover bytes of a kept-alive connection may already hold the next request.
      for (size_t i = 0; i < held_.size();) {
        Connection& c = *held_[i];
        if (c.phase == Connection::Phase::kIdle && !c.bytes.empty() && on_bytes(c)) {
          dispatch(i);
          continue;
        }
        ++i;
      }

      auto now = Clock::now();
      auto next = now + std::chrono::seconds(1);
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      for (auto& c : held_) {
        fds.push_back({c->sock, POLLIN, 0});
        next = std::min(next, c->deadline);
      }
      int wait_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents & POLLIN) {
        uint64_t n;
        (void)!::read(wake_fd_, &n, sizeof(n));
      }

      now = Clock::now();
      // Walk backwards so removals do not disturb the indexes still to visit.
      for (size_t k = held_.size(); k-- > 0;) {
        Connection& c = *held_[k];
        const short revents = fds[k + 1].revents;
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
          ssize_t n = ::recv(c.sock, chunk.data(), chunk.size(), MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            drop(k);
            continue;
          }
          if (n > 0 && c.phase != Connection::Phase::kLingering) {
            c.bytes.append(chunk.data(), static_cast<size_t>(n));
            if (on_bytes(c)) {
              dispatch(k);
              continue;
            }
          }
        }
        if (now >= c.deadline) {
          // A request that is late gets 408; a quiet keep-alive or lingering socket just closes.
          if (c.phase == Connection::Phase::kHeaders || c.phase == Connection::Phase::kBody) {
            refuse(c, 408);
            continue;
          }
          drop(k);
        }
      }
    }
  }

  void drop(size_t k) {
    close(*held_[k]);
    remove(k);
  }
  std::unique_ptr<Connection> remove(size_t k) {
    std::unique_ptr<Connection> c = std::move(held_[k]);
    held_[k] = std::move(held_.back());
    held_.pop_back();
    return c;
  }
  void dispatch(size_t k) {
    std::shared_ptr<Connection> c(remove(k).release());
    // httplib::ThreadPool takes a copyable std::function, hence the shared_ptr.
    server_.workers_->enqueue([this, c]() mutable {
      auto owned = std::make_unique<Connection>(std::move(*c));
      server_.serve(std::move(owned));
    });
  }

  GuardedHttpServer& server_;
  const ConnectionLimits& limits_;
  RefusalBody refusal_body_;
  int wake_fd_ = -1;
  std::atomic<size_t> open_{0};
  std::mutex mutex_;
  bool stopped_ = false;
  std::vector<std::unique_ptr<Connection>> inbox_;  // guarded by mutex_
  std::vector<std::unique_ptr<Connection>> held_;   // reception thread only
  std::thread thread_;
};

GuardedHttpServer::GuardedHttpServer(ConnectionLimits limits, RefusalBody refusal_body) : limits_(limits) {
  workers_ = std::make_unique<httplib::ThreadPool>(std::max<size_t>(1, limits_.n_workers));
  reception_ = std::make_unique<Reception>(*this, limits_, std::move(refusal_body));
  new_task_queue = [] { return new InlineTaskQueue; };
  set_payload_max_length(limits_.max_body_bytes);
}

GuardedHttpServer::~GuardedHttpServer() { close_connections(); }

void GuardedHttpServer::close_connections() {
  if (closed_.exchange(true)) return;
  reception_->stop();
  workers_->shutdown();
}

size_t GuardedHttpServer::open_connections() const { return reception_->open(); }

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  reception_->adopt(sock);
  return true;
}

bool client_connected() { return t_client_socket < 0 || peer_connected(t_client_socket); }

void GuardedHttpServer::serve(std::unique_ptr<Connection> conn) {
  ++conn->served;
  const bool last = conn->close_after || conn->served >= limits_.max_requests_per_connection || closed_.load();
  RequestStream stream(conn->sock, std::string_view(conn->bytes).substr(0, conn->request_end), limits_.write_timeout);
  bool connection_closed = false;
  bool ok = false;
  {
    ClientSocketScope current(conn->sock);
    ok = process_request(stream, last, connection_closed, nullptr);
  }
  if (!ok || last || connection_closed) {
    reception_->close(*conn);
    return;
  }
  conn->start_next_request();
  reception_->give_back(std::move(conn));
}

}  // namespace ridge::server
