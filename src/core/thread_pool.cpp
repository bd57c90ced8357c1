// Job hand-off: the caller writes the job, bumps generation_ (release) and works on its
// own share; workers spin on generation_ for a short while, then sleep on it (futex via
// std::atomic::wait). The last worker to finish wakes the caller if it went to sleep.
#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ridge {

namespace {

// Set while a thread runs a share of some pool's job, so a nested parallel_for runs
// inline (waking the same workers again would deadlock) with the outer thread index.
thread_local bool tls_in_job = false;
thread_local int tls_thread = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until pred() holds or `budget` has passed; true when pred() held.
template <class Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget) {
  if (budget.count() <= 0) return pred();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    // Yield rather than burn the core: when threads outnumber free cores, the thread
    // we are waiting for may need this one to run.
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, std::chrono::microseconds spin) : spin_(spin) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = std::max(1, n_threads);
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  ranges_ = std::make_unique<ChunkRange[]>(static_cast<size_t>(n_threads_));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::do_share(int thread) {
  const bool outer_in_job = tls_in_job;
  const int outer_thread = tls_thread;
  tls_in_job = true;
  tls_thread = thread;
  try {
    if (job_grain_ < 0) {
      do_stealing_share(thread);
    } else if (job_grain_ == 0) {
      const int64_t begin = job_n_ * thread / n_threads_;
      const int64_t end = job_n_ * (thread + 1) / n_threads_;
      if (begin < end) job_call_(job_fn_, begin, end, thread);
    } else {
      for (;;) {
        const int64_t begin = next_index_.fetch_add(job_grain_, std::memory_order_relaxed);
        if (begin >= job_n_) break;
        job_call_(job_fn_, begin, std::min(job_n_, begin + job_grain_), thread);
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  tls_in_job = outer_in_job;
  tls_thread = outer_thread;
}

int64_t ThreadPool::claim_chunk(int owner, bool front) {
  std::atomic<uint64_t>& range = ranges_[owner].front_back;
  uint64_t v = range.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t begin = v & 0xffffffffu, end = v >> 32;
    if (begin >= end) return -1;
    const uint64_t next = front ? (begin + 1) | (end << 32) : begin | ((end - 1) << 32);
    if (range.compare_exchange_weak(v, next, std::memory_order_relaxed))
      return static_cast<int64_t>(front ? begin : end - 1);
  }
}

void ThreadPool::do_stealing_share(int thread) {
  const int64_t grain = -job_grain_;
  auto run_chunk = [&](int64_t c) { job_call_(job_fn_, c * grain, std::min(job_n_, (c + 1) * grain), thread); };
  for (int64_t c; (c = claim_chunk(thread, /*front=*/true)) >= 0;) run_chunk(c);
  for (int i = 1; i < n_threads_; ++i) {
    const int victim = (thread + i) % n_threads_;
    for (int64_t c; (c = claim_chunk(victim, /*front=*/false)) >= 0;) run_chunk(c);
  }
}

void ThreadPool::run(int64_t n, int64_t grain, void* fn, Trampoline call) {
  if (n <= 0) return;
  // One dynamic chunk has no one to share with: run it here rather than wake the workers
  // (the caller would otherwise wait for whichever thread took it).
  if (tls_in_job || n_threads_ == 1 || (grain != 0 && n <= (grain < 0 ? -grain : grain))) {
    call(fn, 0, n, tls_in_job ? tls_thread : 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  job_n_ = n;
  job_grain_ = grain;
  job_fn_ = fn;
  job_call_ = call;
  error_ = nullptr;
  next_index_.store(0, std::memory_order_relaxed);
  if (grain < 0) {
    // Chunk counts are packed in 32 bits; a larger chunk keeps them there.
    if ((n - grain - 1) / -grain > int64_t{0xffffffff}) job_grain_ = grain = -((n + 0xfffffffe) / 0xffffffff);
    const int64_t n_chunks = (n - grain - 1) / -grain;
    for (int t = 0; t < n_threads_; ++t) {
      const uint64_t begin = static_cast<uint64_t>(n_chunks * t / n_threads_);
      const uint64_t end = static_cast<uint64_t>(n_chunks * (t + 1) / n_threads_);
      ranges_[t].front_back.store(begin | (end << 32), std::memory_order_relaxed);
    }
  }
  pending_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with the workers' sleeping_workers_ increment: either a worker sees
  // the new generation before sleeping, or we see it asleep and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  do_share(0);

  auto done = [this] { return pending_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done, spin_)) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    for (int left; (left = pending_workers_.load(std::memory_order_seq_cst)) != 0;)
      pending_workers_.wait(left, std::memory_order_seq_cst);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker_loop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(changed, spin_)) {
      sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
      while (generation_.load(std::memory_order_seq_cst) == seen)
        generation_.wait(seen, std::memory_order_seq_cst);
      sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    do_share(thread);
    if (pending_workers_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst))
      pending_workers_.notify_one();
  }
}

}  // namespace ridge
