// Shared helpers for the kernel tests: seeded random data, the tolerance check, and a
// paged KV cache for the attention tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/isa.h"

namespace ridge::kernels::testing {

// Every ISA this CPU supports, kScalar first: for tests that check each path it can run.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa isa : kAllIsas)
    if (cpu_supports(isa)) v.push_back(isa);
  return v;
}

// The distinct loop families of kernels built as scalar, AVX2 and AVX-512 (attention):
// kScalar, kAvx2 and kAvx512Vnni, those this CPU supports.
inline std::vector<Isa> loop_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni})
    if (cpu_supports(isa)) v.push_back(isa);
  return v;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - ref| <= abs + rel * |ref|, the llm.c style check used for every kernel.
inline bool close(double got, double ref, double abs = 1e-5, double rel = 1e-4) {
  return std::fabs(got - ref) <= abs + rel * std::fabs(ref);
}

}  // namespace ridge::kernels::testing

namespace ridge::kernels::testing {

// One sequence's cache for the attention tests: dense K/V scattered into a shuffled pool
// of blocks. Every float a kernel must not read (spare blocks, slots past n_kv, blocks
// wholly before the first query's window, whose table id is -1) is NaN, so reading one
// poisons the output. Queries are the last n_q positions.
struct PagedKvShape {
  int64_t n_head = 4, n_kv_head = 2, d_head = 16, block_size = 16;
  int64_t n_kv = 37, n_q = 1, window = 0;
  int64_t spare_blocks = 2;  // NaN blocks in the pool past the sequence's own
  bool recycle = true;       // give blocks wholly outside every window the id -1
};

struct PagedKv {
  std::vector<float> q, k, v;         // q [n_q][n_head][d_head]; k, v dense [n_kv][n_kv_head][d_head]
  std::vector<int32_t> q_pos, table;  // [n_q], [ceil(n_kv / block_size)]
  std::vector<float> k_pool, v_pool;  // [n_blocks][block_size][n_kv_head][d_head]
  int64_t n_blocks = 0;
};

// round(x) rounds K and V first (to f16 for an f16 cache), so the pools hold exact values.
template <class Round>
PagedKv make_paged_kv(const PagedKvShape& c, uint32_t seed, Round round) {
  PagedKv s;
  const int64_t row = c.n_kv_head * c.d_head;
  s.q = random_floats(c.n_q * c.n_head * c.d_head, seed);
  s.k = random_floats(c.n_kv * row, seed + 1);
  s.v = random_floats(c.n_kv * row, seed + 2);
  for (float& x : s.k) x = round(x);
  for (float& x : s.v) x = round(x);
  for (int64_t t = 0; t < c.n_q; ++t) s.q_pos.push_back(static_cast<int32_t>(c.n_kv - c.n_q + t));
  const int64_t n_logical = (c.n_kv + c.block_size - 1) / c.block_size;
  s.n_blocks = n_logical + c.spare_blocks;
  std::vector<int32_t> ids(static_cast<size_t>(s.n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  s.k_pool.assign(s.n_blocks * c.block_size * row, std::numeric_limits<float>::quiet_NaN());
  s.v_pool.assign(s.k_pool.size(), std::numeric_limits<float>::quiet_NaN());
  const int64_t first_visible = c.window > 0 ? std::max<int64_t>(0, s.q_pos[0] - c.window + 1) : 0;
  for (int64_t b = 0; b < n_logical; ++b) {
    const bool recycled = c.recycle && (b + 1) * c.block_size <= first_visible;
    s.table.push_back(recycled ? -1 : ids[b]);
    if (recycled) continue;
    for (int64_t slot = 0; slot < c.block_size && b * c.block_size + slot < c.n_kv; ++slot) {
      const int64_t j = b * c.block_size + slot;
      std::copy_n(s.k.begin() + j * row, row, s.k_pool.begin() + (ids[b] * c.block_size + slot) * row);
      std::copy_n(s.v.begin() + j * row, row, s.v_pool.begin() + (ids[b] * c.block_size + slot) * row);
    }
  }
  return s;
}

}  // namespace ridge::kernels::testing
