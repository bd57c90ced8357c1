// Per-thread float scratch for the kernels, sized once at start-up so that a forward
// step allocates nothing. Each thread's slice starts on its own cache line.
//
//   Scratch scratch(pool.n_threads(), std::max(matmul_scratch_floats(w), other_needs));
//   float* mine = scratch.thread_data(thread);   // inside a parallel_for body
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace ridge::kernels {

class Scratch {
 public:
  Scratch() = default;
  Scratch(int n_threads, size_t floats_per_thread) { reserve(n_threads, floats_per_thread); }

  // Grows (never shrinks) to at least n_threads slices of floats_per_thread floats.
  // Allocates: call at start-up, not inside the step.
  void reserve(int n_threads, size_t floats_per_thread) {
    if (n_threads <= n_threads_ && floats_per_thread <= stride_) return;
    const int threads = n_threads > n_threads_ ? n_threads : n_threads_;
    size_t stride = floats_per_thread > stride_ ? floats_per_thread : stride_;
    stride = (stride + kLineFloats - 1) / kLineFloats * kLineFloats;
    const size_t bytes = static_cast<size_t>(threads) * stride * sizeof(float);
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw Error(str_cat("scratch: cannot allocate ", bytes, " bytes"));
    data_.reset(static_cast<float*>(p));
    n_threads_ = threads;
    stride_ = stride;
  }

  float* thread_data(int thread) const { return data_.get() + static_cast<size_t>(thread) * stride_; }
  size_t floats_per_thread() const { return stride_; }
  int n_threads() const { return n_threads_; }

  // Throws ridge::Error naming `who` when the scratch is smaller than a kernel needs.
  void require(int n_threads, size_t floats_per_thread, const char* who) const {
    if (n_threads > n_threads_ || floats_per_thread > stride_)
      throw Error(str_cat(who, ": scratch has ", n_threads_, " x ", stride_, " floats, needs ",
                          n_threads, " x ", floats_per_thread, " (size it with reserve at start-up)"));
  }

 private:
  static constexpr size_t kLineFloats = 16;  // 64-byte cache line
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int n_threads_ = 0;
  size_t stride_ = 0;
};

}  // namespace ridge::kernels
