// Stop strings for streamed generation: passes text through, holding back whatever could
// still be the beginning of a stop string, and reports the first complete match (the stop
// string and anything after it are never emitted).
//
//   StopMatcher stop({"\n\n", "User:"});
//   std::string out;
//   bool hit = stop.push("Hello\n", out);   // out == "Hello", "\n" held back
//   hit = stop.push("\nmore", out);         // true; out still "Hello": generation ends
//   stop.flush(out);                        // at the end without a match: the held text
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ridge {

class StopMatcher {
 public:
  StopMatcher() = default;
  // Empty strings are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends text. Appends to out what is now certain to be output; returns true when a
  // stop string completed (out then ends just before it, and later pushes are ignored).
  bool push(std::string_view text, std::string& out);
  // Appends the text still held back (call once generation ended without a match).
  void flush(std::string& out);
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;   // text after the last emitted byte; no complete match inside
  bool stopped_ = false;
};

}  // namespace ridge
