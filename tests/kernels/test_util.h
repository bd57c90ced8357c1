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

// Key lanes for the tile-step tests: token i of step s sees lanes [begin[s][i], end[s][i])
// of n_keys, and about one token in five sees none.
struct StepLanes {
  std::vector<std::vector<int>> begin, end;
};

inline StepLanes random_step_lanes(int64_t n_tokens, int n_keys, uint32_t seed, int n_steps = 2) {
  std::mt19937 rng(seed);
  StepLanes lanes{std::vector<std::vector<int>>(n_steps), std::vector<std::vector<int>>(n_steps)};
  for (int s = 0; s < n_steps; ++s)
    for (int64_t i = 0; i < n_tokens; ++i) {
      int a = static_cast<int>(rng() % (n_keys + 1)), b = static_cast<int>(rng() % (n_keys + 1));
      if (a > b) std::swap(a, b);
      if (rng() % 5 == 0) a = b = 0;  // a token that sees none of these keys
      lanes.begin[s].push_back(a);
      lanes.end[s].push_back(b);
    }
  return lanes;
}

// What step s of `lanes` reads: the lanes its tokens span (lane_begin >= lane_end when no
// token sees a key) and the K and V rows of each lane some token sees. A lane between the
// tokens' lanes stays null: it may be a recycled block.
template <class T>
struct StepRows {
  int lane_begin = 0, lane_end = 0;
  std::vector<const T*> k, v;
};

template <class T>
StepRows<T> step_rows(const StepLanes& lanes, int s, const T* k, const T* v, int64_t row_stride, int n_keys) {
  const auto& begin = lanes.begin[s];
  const auto& end = lanes.end[s];
  StepRows<T> rows{n_keys, 0, std::vector<const T*>(n_keys, nullptr), std::vector<const T*>(n_keys, nullptr)};
  for (size_t i = 0; i < begin.size(); ++i)
    if (begin[i] < end[i]) rows.lane_begin = std::min(rows.lane_begin, begin[i]), rows.lane_end = std::max(rows.lane_end, end[i]);
  for (int l = rows.lane_begin; l < rows.lane_end; ++l) {
    bool seen = false;
    for (size_t i = 0; i < begin.size(); ++i) seen = seen || (begin[i] <= l && l < end[i]);
    if (!seen) continue;
    rows.k[l] = k + l * row_stride;
    rows.v[l] = v + l * row_stride;
  }
  return rows;
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
