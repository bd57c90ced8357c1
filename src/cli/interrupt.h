// Ctrl-C (SIGINT) for a command that stops cleanly: the first sets a flag the command
// polls (run prints what it generated and its timings; quantize leaves no files); a second
// ends the process at once, as the default action would. SIGTERM keeps its own action.
//
//   catch_interrupts();
//   while (working) { if (interrupted()) throw Interrupted("run"); ... }
//
// main() turns Interrupted into exit status 130, as a shell reports a process Ctrl-C ended.
#pragma once

#include <stdexcept>
#include <string>

namespace ridge::cli {

struct Interrupted : std::runtime_error {
  explicit Interrupted(const std::string& what) : std::runtime_error(what + ": interrupted") {}
};

void catch_interrupts();
bool interrupted();

// SIGINT and SIGTERM to `handler` (restarting interrupted system calls): for a command
// with its own way to stop (serve's pipe).
void handle_stop_signals(void (*handler)(int));

}  // namespace ridge::cli
