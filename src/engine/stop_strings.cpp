#include "engine/stop_strings.h"

#include <algorithm>

namespace ridge {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
  size_t longest = 0;
  for (const std::string& s : stops_) longest = std::max(longest, s.size());
  held_.reserve(2 * longest + 64);
}

bool StopMatcher::push(std::string_view text, std::string& out) {
  if (stopped_) return true;
  held_.append(text);
  // Everything before held_ was emitted because no stop string could start there, so the
  // earliest complete match inside held_ is the first one in the whole output.
  size_t first_match = std::string::npos;
  for (const std::string& s : stops_) first_match = std::min(first_match, held_.find(s));
  if (first_match != std::string::npos) {
    out.append(held_, 0, first_match);
    held_.clear();
    stopped_ = true;
    return true;
  }
  // Keep the longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopMatcher::flush(std::string& out) {
  if (!stopped_) out.append(held_);
  held_.clear();
}

}  // namespace ridge
