// RequestStream (engine.h): the queue of events between the engine thread and a reader.
#include "engine/engine.h"

namespace ridge {

bool RequestStream::next(StreamEvent& event) {
  std::unique_lock lock(mutex_);
  if (finished_read_) return false;
  ready_.wait(lock, [&] { return !events_.empty(); });
  event = std::move(events_.front());
  events_.pop_front();
  if (event.finished) finished_read_ = true;
  return true;
}

bool RequestStream::next_for(StreamEvent& event, std::chrono::milliseconds timeout, bool& timed_out) {
  std::unique_lock lock(mutex_);
  timed_out = false;
  if (finished_read_) return false;
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) {
    timed_out = true;
    return false;
  }
  event = std::move(events_.front());
  events_.pop_front();
  if (event.finished) finished_read_ = true;
  return true;
}

void RequestStream::cancel() {
  std::lock_guard lock(mutex_);
  cancel_requested_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancel_requested_;
}

void RequestStream::push(StreamEvent event) {
  event.time = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

}  // namespace ridge
