// The MPI Communicator. Collectives are non-blocking calls polled to completion, so a
// rank can give up on a peer that died or hangs (Open MPI's shared-memory transport
// never reports a dead peer by itself) instead of waiting forever; MPI_Abort then ends
// every rank, and mpirun exits non-zero.
#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/mpi.h"

namespace ridge::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

double timeout_seconds() {
  const char* env = std::getenv("RIDGE_TP_TIMEOUT");
  if (env == nullptr || *env == '\0') return 60.0;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(s > 0))
    throw Error(str_cat("RIDGE_TP_TIMEOUT='", env, "': expected a positive number of seconds"));
  return s;
}

// mpirun ends every rank with SIGTERM when one exits or dies (or on Ctrl-C): say so, on
// each rank, in place of a silent end (mpirun's own message names the rank that went
// first). ridge serve blocks SIGTERM for its own orderly stop, which this leaves alone.
char g_sigterm_message[256];
size_t g_sigterm_length = 0;

void on_sigterm(int) {
  ssize_t ignored = write(STDERR_FILENO, g_sigterm_message, g_sigterm_length);
  (void)ignored;
  _exit(1);
}

void report_sigterm(int rank, int size) {
  g_sigterm_length = static_cast<size_t>(std::snprintf(
      g_sigterm_message, sizeof g_sigterm_message,
      "ridge: error: tensor parallel rank %d of %d: ended by SIGTERM: mpirun ends every rank when one exits or dies "
      "(its message names the rank) or when the job is interrupted\n",
      rank, size));
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  if (current.sa_handler != SIG_DFL) return;  // someone else's handler: theirs to report
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(int tp) : timeout_(timeout_seconds()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) throw Error("tensor parallel: MPI is already initialized in this process");
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw Error("tensor parallel: this MPI library does not offer MPI_THREAD_SERIALIZED (the engine thread, "
                  "not the main thread, runs the collectives)");
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (size_ != tp) {
      const int size = size_;
      MPI_Comm_free(&comm_);
      MPI_Finalize();
      throw Error(size == 1 ? str_cat("--tp ", tp, " needs ", tp, " MPI ranks: start it as mpirun -np ", tp,
                                      " ridge ... --tp ", tp)
                            : str_cat("--tp ", tp, " but mpirun started ", size, " ranks: use mpirun -np ", tp));
    }
    report_sigterm(rank_, size_);
  }

  ~MpiCommunicator() override {
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void broadcast(void* data, size_t bytes) override {
    MPI_Request request;
    check(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, 0, comm_, &request), "broadcast");
    // Rank 0 sends and must hear back in time; the others wait for the next step however
    // long the server idles.
    wait(request, "broadcast", rank_ == 0);
  }

  void all_reduce_sum(float* data, int64_t n) override {
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &request),
          "all-reduce");
    wait(request, "all-reduce", true);
    all_reduce_bytes_ += static_cast<uint64_t>(n) * sizeof(float);
  }

  [[noreturn]] void abort(const std::string& message) override { fail(message); }

  void gather_columns(float* whole, int64_t rows, int64_t whole_cols, const float* part,
                      const int64_t* col_first) override {
    if (rank_ != 0) {
      MPI_Request request;
      const int64_t n = rows * (col_first[rank_ + 1] - col_first[rank_]);
      check(MPI_Isend(part, static_cast<int>(n), MPI_FLOAT, 0, kGatherTag, comm_, &request), "gather");
      wait(request, "gather", true);
      return;
    }
    // Each rank's block lands straight in its columns: a strided receive type per rank.
    for (int r = 1; r < size_; ++r) {
      MPI_Datatype columns;
      MPI_Type_vector(static_cast<int>(rows), static_cast<int>(col_first[r + 1] - col_first[r]),
                      static_cast<int>(whole_cols), MPI_FLOAT, &columns);
      MPI_Type_commit(&columns);
      MPI_Request request;
      check(MPI_Irecv(whole + col_first[r], 1, columns, r, kGatherTag, comm_, &request), "gather");
      wait(request, "gather", true);
      MPI_Type_free(&columns);
    }
  }

 private:
  // Polls the request: spinning for the first 100 us (a step's collectives follow each
  // other within microseconds), then yielding the core until 5 ms (a rank that shares its
  // core with the peer it waits for, or with other processes, must let them run), then
  // sleeping in growing naps so an idle worker does not burn a core.
  void wait(MPI_Request& request, const char* what, bool deadline) {
    const Clock::time_point start = Clock::now();
    auto nap = std::chrono::microseconds(0);
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (polls % 64 != 63) continue;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited < 100e-6) continue;
      if (waited < 5e-3) {
        std::this_thread::yield();
        continue;
      }
      if (deadline && waited > timeout_) fail(str_cat(what, " did not complete in ", timeout_,
                                                       " s (RIDGE_TP_TIMEOUT): another rank has died or hangs"));
      nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(20));
      std::this_thread::sleep_for(nap);
    }
  }

  void check(int code, const char* what) {
    if (code != MPI_SUCCESS) fail(str_cat(what, " failed: ", mpi_error_text(code)));
  }

  // No way back from a broken collective (the others may be inside it): say which rank
  // saw what, then end the job.
  [[noreturn]] void fail(const std::string& message) {
    std::fprintf(stderr, "ridge: error: tensor parallel rank %d of %d: %s; ending the job\n", rank_, size_,
                 message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

  static constexpr int kGatherTag = 7;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  double timeout_;
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Communicator> start_mpi(int tp) {
  if (tp < 1) throw Error(str_cat("--tp must be at least 1, got ", tp));
  if (tp == 1) return nullptr;
  return std::make_unique<MpiCommunicator>(tp);
}

}  // namespace ridge::dist
