// Errors at file, network and API boundaries: one exception type whose message names
// what went wrong and where. Internal preconditions use assert instead.
//
//   throw ridge::Error(ridge::str_cat("gguf: tensor '", name, "' extends past end of file"));
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ridge {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates anything that can be streamed; keeps error sites to one readable line.
template <class... Parts>
std::string str_cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

}  // namespace ridge
