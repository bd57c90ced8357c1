// std::vector storage on 64-byte boundaries, for rows the kernels read and write a
// vector at a time. With malloc's 16-byte alignment every 64-byte store of a row spans
// two cache lines; on a prompt's matmul outputs that doubled the lines each store
// claims and cost a tenth of the AMX kernels' time.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ridge {

template <class T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}  // NOLINT: rebinding is implicit
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlign})); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{kAlign}); }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace ridge
