// Counts heap allocations, so a test can show a hot loop allocates nothing:
//
//   const long before = ridge::test::allocations();
//   ... the loop ...
//   EXPECT_EQ(ridge::test::allocations(), before);
//
// It replaces the global operator new and delete, so exactly one source file of a test
// binary may include it. The nothrow forms are replaced too (std::stable_sort's buffer
// uses them): left to a sanitizer's runtime, they would come from its allocator and be
// freed here with free(), which AddressSanitizer reports as a mismatch.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

namespace ridge::test {
inline std::atomic<long> g_allocations{0};
inline long allocations() { return g_allocations.load(); }
}  // namespace ridge::test

// GCC cannot see that these replacements pair malloc with free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  ++ridge::test::g_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  ++ridge::test::g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop
