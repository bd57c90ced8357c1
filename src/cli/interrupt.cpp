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

}  // namespace

void handle_stop_signals(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void catch_interrupts() { handle_stop_signals(on_interrupt); }

bool interrupted() { return g_interrupted.load(); }

}  // namespace ridge::cli
