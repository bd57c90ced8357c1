// Per-thread float scratch for the kernels, plus one region all threads share (matmul's
// quantized activations), sized once at start-up so that a forward step allocates
// nothing. Each thread's slice starts on its own cache line.
//
//   Scratch scratch(pool.n_threads(), std::max(matmul_scratch_floats(w), other_needs));
//   scratch.reserve_shared(matmul_shared_bytes(w, max_tokens));
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

  // Grows (never shrinks) the shared region to at least `bytes`. Allocates: start-up only.
  void reserve_shared(size_t bytes) {
    if (bytes <= shared_bytes_) return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw Error(str_cat("scratch: cannot allocate ", rounded, " shared bytes"));
    shared_.reset(static_cast<unsigned char*>(p));
    shared_bytes_ = rounded;
  }
  unsigned char* shared_data() const { return shared_.get(); }
  size_t shared_bytes() const { return shared_bytes_; }
  void require_shared(size_t bytes, const char* who) const {
    if (bytes > shared_bytes_)
      throw Error(str_cat(who, ": scratch has ", shared_bytes_, " shared bytes, needs ", bytes,
                          " (size it with reserve_shared at start-up)"));
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
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  std::unique_ptr<unsigned char[], Free> shared_;
  size_t shared_bytes_ = 0;
  int n_threads_ = 0;
  size_t stride_ = 0;
};

}  // namespace ridge::kernels
