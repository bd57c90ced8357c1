#include "cli/interrupt.h"

#include <signal.h>

#include <atomic>

namespace ridge::cli {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the flag is set from a signal handler");

void on_interrupt(int sig) {
  if (g_interrupted.exchange(true)) {  // the second: stop now
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void install(int sig, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(sig, &action, nullptr);
}

}  // namespace

void handle_stop_signals(void (*handler)(int)) {
  install(SIGINT, handler);
  install(SIGTERM, handler);
}

// SIGINT only: SIGTERM keeps its action, which for a tensor-parallel rank is the
// communicator's report of why mpirun ended the job (a rank stuck in a collective could not
// stop cleanly anyway).
void catch_interrupts() { install(SIGINT, on_interrupt); }

bool interrupted() { return g_interrupted.load(); }

}  // namespace ridge::cli
