// A small persistent thread pool for data-parallel kernels: the calling thread and
// n_threads - 1 workers split an index range. No allocation and no std::function per call.
//
//   ThreadPool pool(4);                                      // 0: hardware concurrency
//   pool.parallel_for(n_out, [&](int64_t begin, int64_t end, int thread) {
//     for (int64_t o = begin; o < end; ++o) y[o] = dot(w + o * n_in, x, n_in);
//   });
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ridge {

class ThreadPool {
 public:
  // n_threads <= 0 means std::thread::hardware_concurrency(). Idle workers spin for
  // `spin` after each job before sleeping on a futex, so back-to-back kernels of one
  // forward step wake them without a system call.
  explicit ThreadPool(int n_threads = 0,
                      std::chrono::microseconds spin = std::chrono::microseconds(50));
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Splits [0, n) into n_threads() contiguous near-equal chunks and calls
  // fn(begin, end, thread) once for each non-empty chunk; thread t gets chunk t and the
  // caller is thread 0. Returns when every chunk is done and rethrows the first
  // exception fn threw. A call from inside fn (nested) runs inline on that thread.
  template <class Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    run(n, 0, const_cast<void*>(static_cast<const void*>(&fn)), &invoke<std::remove_reference_t<Fn>>);
  }

  // Like parallel_for, but threads take chunks of `grain` indices from a shared counter:
  // for work items of uneven cost (causal attention). Chunk order over threads is
  // unspecified; every index is still covered exactly once. A job of one chunk
  // (n <= grain) runs on the caller as thread 0 without waking the workers.
  template <class Fn>
  void parallel_for_dynamic(int64_t n, int64_t grain, Fn&& fn) {
    run(n, grain < 1 ? 1 : grain, const_cast<void*>(static_cast<const void*>(&fn)),
        &invoke<std::remove_reference_t<Fn>>);
  }

  // Like parallel_for, in chunks of `grain` indices: thread t owns the t-th contiguous
  // range (as parallel_for splits [0, n), rounded to whole chunks) and walks it in order;
  // a thread done with its own range then takes chunks from the far end of the others'.
  // For streaming kernels (decode matmuls): each thread reads one forward stream, so its
  // prefetches of the next rows are never wasted, and a thread slowed by another process
  // still does not hold up the job. Every index is covered exactly once. A job of one
  // chunk runs on the caller.
  template <class Fn>
  void parallel_for_stealing(int64_t n, int64_t grain, Fn&& fn) {
    run(n, -(grain < 1 ? 1 : grain), const_cast<void*>(static_cast<const void*>(&fn)),
        &invoke<std::remove_reference_t<Fn>>);
  }

 private:
  using Trampoline = void (*)(void* fn, int64_t begin, int64_t end, int thread);

  template <class Fn>
  static void invoke(void* fn, int64_t begin, int64_t end, int thread) {
    (*static_cast<Fn*>(fn))(begin, end, thread);
  }

  // grain == 0: static contiguous chunks; grain > 0: dynamic chunks of that size;
  // grain < 0: owned ranges with stealing, chunks of -grain.
  void run(int64_t n, int64_t grain, void* fn, Trampoline call);
  void do_share(int thread);
  void do_stealing_share(int thread);
  // Claims the next chunk of thread `owner`'s range: its front when `owner` is the
  // caller's own range, its back otherwise. -1 when the range is empty.
  int64_t claim_chunk(int owner, bool front);
  void worker_loop(int thread);

  int n_threads_ = 1;
  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one job at a time when several threads share the pool

  // The current job, published by the release increment of generation_.
  int64_t job_n_ = 0;
  int64_t job_grain_ = 0;
  void* job_fn_ = nullptr;
  Trampoline job_call_ = nullptr;
  alignas(64) std::atomic<int64_t> next_index_{0};   // dynamic scheduling counter
  // Stealing mode: per thread, its unclaimed chunks [front, back) packed as
  // front | back << 32, one cache line each.
  struct alignas(64) ChunkRange {
    std::atomic<uint64_t> front_back{0};
  };
  std::unique_ptr<ChunkRange[]> ranges_;

  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per job
  std::atomic<int> sleeping_workers_{0};
  alignas(64) std::atomic<int> pending_workers_{0};  // workers not yet done with the job
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace ridge
