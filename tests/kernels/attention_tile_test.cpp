// The tiled attention step and the prefill path built on it: the AVX2 and AVX-512 steps
// against the scalar step that defines their arithmetic (bit for bit, f32 and f16,
// ragged lanes, head sizes with tails, softcap, rescaling states), and whole prefills
// against each token computed alone (bit for bit, every ISA and across ISAs) and against
// the float64 reference, for lengths that are not multiples of the tile or the block,
// sliding windows, GQA ratios 1..7 and head sizes 64, 128, 256.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"
#include "kernels/attention/attention.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::make_paged_kv;
using testing::PagedKv;
using testing::PagedKvShape;
using testing::random_floats;
using testing::random_step_lanes;
using testing::step_rows;
using testing::StepLanes;
using testing::StepRows;

// The step's three builds: scalar, AVX2 and AVX-512 (on the ISAs that have them).
std::vector<Isa> all_isas() { return testing::loop_isas(); }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const char* name(Isa isa) { return isa_name(isa); }

template <class T>
void run_step(Isa isa, const AttentionTileStep<T>& st) {
  if (isa_has_avx512(isa))
    attention_tile_step_avx512(st);
  else if (isa_has_avx2(isa))
    attention_tile_step_avx2(st);
  else
    attention_tile_step_scalar(st);
}

uint16_t to_cache(float x, uint16_t) { return fp32_to_fp16(x); }
float to_cache(float x, float) { return x; }

// Two steps in a row (so the second rescales states the first left) over random lanes
// per token, some empty, and rows no token sees left null; every ISA's states must equal
// the scalar step's bits.
template <class T>
void check_steps(int64_t n_tokens, int64_t n_heads, int64_t d_head, float softcap, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens << " heads " << n_heads << " d_head " << d_head
                                    << " softcap " << softcap << " seed " << seed);
  constexpr int kKeys = kAttentionStepKeys;
  const int64_t n_rows = n_tokens * n_heads, row_stride = d_head + 3;
  const auto q = random_floats(n_rows * d_head, seed);
  const int64_t qt_stride = (n_rows + 15) / 16 * 16;
  std::vector<float> qt(qt_stride * d_head, 0.0f);
  for (int64_t row = 0; row < n_rows; ++row)
    for (int64_t d = 0; d < d_head; ++d) qt[d * qt_stride + row] = q[row * d_head + d];
  std::vector<T> k, v;
  for (float x : random_floats(kKeys * row_stride, seed + 1, 2.0f)) k.push_back(to_cache(x, T{}));
  for (float x : random_floats(kKeys * row_stride, seed + 2)) v.push_back(to_cache(x, T{}));
  const StepLanes lanes = random_step_lanes(n_tokens, kKeys, seed);
  std::vector<std::vector<float>> want;
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> acc(n_rows * d_head, 0.0f), max(n_rows, -INFINITY), sum(n_rows, 0.0f);
    std::vector<float> work(attention_tile_work_floats(n_rows, d_head), kNaN);
    for (int s = 0; s < 2; ++s) {
      const StepRows<T> rows = step_rows(lanes, s, k.data(), v.data(), row_stride, kKeys);
      if (rows.lane_begin >= rows.lane_end) continue;
      AttentionTileStep<T> st;
      st.lane_begin = rows.lane_begin;
      st.lane_end = rows.lane_end;
      st.qt = qt.data();
      st.qt_stride = qt_stride;
      st.q = q.data();
      st.q_token_stride = n_heads * d_head;
      st.n_tokens = n_tokens;
      st.n_heads = n_heads;
      st.d_head = d_head;
      st.k_rows = rows.k.data();
      st.v_rows = rows.v.data();
      st.token_lane_begin = lanes.begin[s].data();
      st.token_lane_end = lanes.end[s].data();
      st.scale = 0.7f;
      st.softcap = softcap;
      st.acc = acc.data();
      st.max = max.data();
      st.sum = sum.data();
      st.work = work.data();
      run_step(isa, st);
    }
    std::vector<float> all = acc;
    all.insert(all.end(), max.begin(), max.end());
    all.insert(all.end(), sum.begin(), sum.end());
    if (want.empty()) {
      want.push_back(all);
      continue;
    }
    for (size_t e = 0; e < all.size(); ++e)
      ASSERT_EQ(std::bit_cast<uint32_t>(all[e]), std::bit_cast<uint32_t>(want[0][e])) << "element " << e;
  }
}

TEST(AttentionTileStep, SimdStepsEqualTheScalarStep) {
  uint32_t seed = 1;
  for (int64_t n_tokens : {1, 3, 16})
    for (int64_t n_heads : {1, 2, 5, 7})
      for (int64_t d_head : {7, 16, 40, 64, 72, 128, 256})
        for (float softcap : {0.0f, 3.0f}) {
          check_steps<float>(n_tokens, n_heads, d_head, softcap, ++seed);
          check_steps<uint16_t>(n_tokens, n_heads, d_head, softcap, ++seed);
        }
}

TEST(AttentionTileStep, ExpPolyIsTheVectorExp) {
  // The scalar polynomial against std::exp over the range the softmax uses.
  for (float x = -87.0f; x <= 0.0f; x += 0.0173f) ASSERT_NEAR(attention_exp_poly(x), std::exp(x), 3e-7f * std::exp(x) + 1e-37f) << x;
  EXPECT_EQ(attention_exp_poly(0.0f), 1.0f);
}

struct Prefill {
  int64_t n_head, n_kv_head, d_head, n_kv, n_q, window;
  float softcap;
  int64_t block_size = 16;
};

// A prefill chunk through attention() against each token alone (bit for bit, per ISA),
// every ISA against the first (bit for bit: the steps share their arithmetic), and
// against the float64 reference.
template <class T>
void check_prefill(const Prefill& p, int n_threads = 2) {
  SCOPED_TRACE(::testing::Message() << (sizeof(T) == 2 ? "f16" : "f32") << " n_head " << p.n_head << " n_kv_head "
                                    << p.n_kv_head << " d_head " << p.d_head << " n_kv " << p.n_kv << " n_q " << p.n_q
                                    << " window " << p.window << " softcap " << p.softcap << " block "
                                    << p.block_size);
  const PagedKvShape shape{p.n_head, p.n_kv_head, p.d_head, p.block_size, p.n_kv, p.n_q, p.window};
  const PagedKv s = make_paged_kv(shape, 7, [](float x) {
    return sizeof(T) == 2 ? fp16_to_fp32(fp32_to_fp16(x)) : x;
  });
  std::vector<T> k_pool, v_pool;
  for (float x : s.k_pool) k_pool.push_back(to_cache(x, T{}));
  for (float x : s.v_pool) v_pool.push_back(to_cache(x, T{}));
  const PagedKvLayer<T> kv{k_pool.data(), v_pool.data(), s.n_blocks, p.block_size, p.n_kv_head, p.d_head};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(p.d_head)), p.softcap, p.window};
  std::vector<float> want(s.q.size());
  attention_reference(s.q.data(), s.q_pos.data(), p.n_q, p.n_head, s.k.data(), s.v.data(), p.n_kv, p.n_kv_head,
                      p.d_head, params, want.data());
  ThreadPool pool(n_threads);
  Scratch scratch(n_threads, attention_scratch_floats(p.n_head, p.n_kv_head, p.d_head, p.block_size));
  scratch.reserve_shared(size_t{1} << 20);
  std::vector<float> first_isa;
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> together(s.q.size(), -1.0f), alone(s.q.size(), -2.0f);
    const AttentionSequence all{s.q.data(), s.q_pos.data(), p.n_q, s.table, p.n_kv, together.data()};
    attention_isa(kv, std::span<const AttentionSequence>(&all, 1), p.n_head, params, pool, scratch, isa);
    const int64_t per_token = p.n_head * p.d_head;
    for (int64_t t = 0; t < p.n_q; ++t) {
      const AttentionSequence one{s.q.data() + t * per_token, s.q_pos.data() + t, 1, s.table, p.n_kv,
                                  alone.data() + t * per_token};
      attention_isa(kv, std::span<const AttentionSequence>(&one, 1), p.n_head, params, pool, scratch, isa);
    }
    for (size_t e = 0; e < together.size(); ++e) {
      ASSERT_EQ(std::bit_cast<uint32_t>(together[e]), std::bit_cast<uint32_t>(alone[e]))
          << "token " << e / per_token << ", element " << e % per_token;
      ASSERT_TRUE(close(together[e], want[e], 1e-6, 2e-5)) << e << ": " << together[e] << " vs " << want[e];
    }
    if (first_isa.empty()) {
      first_isa = together;
      continue;
    }
    for (size_t e = 0; e < together.size(); ++e)
      ASSERT_EQ(std::bit_cast<uint32_t>(together[e]), std::bit_cast<uint32_t>(first_isa[e])) << "vs scalar, " << e;
  }
}

TEST(AttentionTile, PrefillEqualsEachTokenAloneAndTheReference) {
  for (int64_t d_head : {64, 128, 256})
    for (int64_t ratio : {1, 2, 3, 4, 5, 6, 7}) {
      const Prefill p{2 * ratio, 2, d_head, 83, 37, 0, 0.0f};
      check_prefill<uint16_t>(p);
      if (ratio == 7 || d_head == 64) check_prefill<float>(p);
    }
}

TEST(AttentionTile, SlidingWindowsSoftcapAndChunkBoundaries) {
  for (const Prefill& p : {Prefill{14, 2, 64, 613, 45, 0, 0.0f}, Prefill{4, 1, 256, 530, 29, 257, 0.0f},
                           Prefill{4, 1, 256, 300, 33, 64, 30.0f}, Prefill{6, 2, 64, 270, 20, 17, 5.0f},
                           Prefill{3, 1, 128, 100, 100, 0, 0.0f}, Prefill{7, 1, 64, 41, 41, 5, 0.0f}}) {
    check_prefill<uint16_t>(p, 3);
    check_prefill<float>(p);
  }
}

TEST(AttentionTile, OddBlockAndHeadSizes) {
  for (const Prefill& p : {Prefill{6, 3, 7, 130, 23, 11, 0.0f, 5}, Prefill{4, 2, 72, 99, 30, 0, 0.0f, 24},
                           Prefill{4, 2, 40, 77, 19, 33, 0.0f, 32}, Prefill{2, 1, 64, 50, 50, 0, 0.0f, 8}})
    check_prefill<uint16_t>(p);
}

}  // namespace
}  // namespace ridge::kernels


namespace ridge::kernels {
namespace {

// The Q8_0/Q4_0 step: AVX2 and AVX-512 VNNI against the scalar step that defines it (bit for bit,
// two steps in a row over random ragged lanes with null rows, rows in lanes and keys in
// lanes, softcap), and the scalar step's scores against a float64 dot of the same
// integers.
template <class Block>
void quantize_rows(const std::vector<float>& x, std::vector<Block>& out) {
  out.resize(x.size() / 32);
  if constexpr (std::is_same_v<Block, BlockQ8_0>)
    quantize_row_q8_0(x.data(), out.data(), static_cast<int64_t>(x.size()));
  else
    quantize_row_q4_0(x.data(), out.data(), static_cast<int64_t>(x.size()));
}

// Random normal values, or (extremes) random signs, which quantize to +-127 in every Q8_0
// block: the largest integer dots, where a 16-bit pair sum would saturate first.
std::vector<float> quant_test_values(int64_t n, uint32_t seed, float scale, bool extremes) {
  std::vector<float> x = random_floats(n, seed, scale);
  if (extremes)
    for (float& e : x) e = e < 0 ? -scale : scale;
  return x;
}

template <class Block>
void check_quant_steps(int64_t n_tokens, int64_t n_heads, int64_t d_head, float softcap, uint32_t seed,
                       bool extremes = false) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<Block, BlockQ8_0> ? "q8_0" : "q4_0") << " tokens "
                                    << n_tokens << " heads " << n_heads << " d_head " << d_head << " softcap "
                                    << softcap << " seed " << seed << (extremes ? " extremes" : ""));
  constexpr int kKeys = kAttentionStepKeys;
  const int64_t n_rows = n_tokens * n_heads, n_blocks = d_head / 32, row_blocks = n_blocks + 1;
  std::vector<BlockQ8_0> q8;
  quantize_rows(quant_test_values(n_rows * d_head, seed, 1.0f, extremes), q8);
  std::vector<uint8_t> q8t(attention_quant_queries_bytes(n_rows, d_head));
  attention_quant_queries(q8.data(), n_rows, d_head, q8t.data());
  std::vector<Block> k, v;  // rows of row_blocks blocks: a row stride longer than a row
  quantize_rows(quant_test_values(kKeys * row_blocks * 32, seed + 1, 2.0f, extremes), k);
  quantize_rows(random_floats(kKeys * row_blocks * 32, seed + 2), v);
  std::vector<float> want;
  const StepLanes lanes = random_step_lanes(n_tokens, kKeys, seed);
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> acc(n_rows * d_head, 0.0f), max(n_rows, -INFINITY), sum(n_rows, 0.0f);
    std::vector<float> work(attention_tile_work_floats(n_rows, d_head), kNaN);
    for (int s = 0; s < 2; ++s) {
      const StepRows<Block> rows = step_rows(lanes, s, k.data(), v.data(), row_blocks, kKeys);
      if (rows.lane_begin >= rows.lane_end) continue;
      AttentionTileStep<Block> st;
      st.lane_begin = rows.lane_begin;
      st.lane_end = rows.lane_end;
      st.q8 = q8.data();
      st.q8t = q8t.data();
      st.n_tokens = n_tokens;
      st.n_heads = n_heads;
      st.d_head = d_head;
      st.k_rows = rows.k.data();
      st.v_rows = rows.v.data();
      st.token_lane_begin = lanes.begin[s].data();
      st.token_lane_end = lanes.end[s].data();
      st.scale = 0.3f;
      st.softcap = softcap;
      st.acc = acc.data();
      st.max = max.data();
      st.sum = sum.data();
      st.work = work.data();
      run_step(isa, st);
    }
    std::vector<float> all = acc;
    all.insert(all.end(), max.begin(), max.end());
    all.insert(all.end(), sum.begin(), sum.end());
    if (want.empty()) {
      want = all;
      continue;
    }
    for (size_t e = 0; e < all.size(); ++e)
      ASSERT_EQ(std::bit_cast<uint32_t>(all[e]), std::bit_cast<uint32_t>(want[e])) << "element " << e;
  }
  // One step's running max, against float64 scores of the same integers and scales.
  if (softcap == 0) {
    auto value = [](const auto& b, int i) -> double {
      if constexpr (std::is_same_v<std::decay_t<decltype(b)>, BlockQ8_0>)
        return b.qs[i] * static_cast<double>(fp16_to_fp32(b.d));
      else
        return ((i < 16 ? b.qs[i] & 15 : b.qs[i - 16] >> 4) - 8) * static_cast<double>(fp16_to_fp32(b.d));
    };
    std::vector<float> acc(n_rows * d_head, 0.0f), max(n_rows, -INFINITY), sum(n_rows, 0.0f);
    std::vector<float> work(attention_tile_work_floats(n_rows, d_head));
    std::vector<int> lb(n_tokens, 0), le(n_tokens, kKeys);
    std::vector<const Block*> k_rows(kKeys), v_rows(kKeys);
    for (int l = 0; l < kKeys; ++l) k_rows[l] = k.data() + l * row_blocks, v_rows[l] = v.data() + l * row_blocks;
    AttentionTileStep<Block> st;
    st.q8 = q8.data();
    st.n_tokens = n_tokens;
    st.n_heads = n_heads;
    st.d_head = d_head;
    st.k_rows = k_rows.data();
    st.v_rows = v_rows.data();
    st.lane_begin = 0;
    st.lane_end = kKeys;
    st.token_lane_begin = lb.data();
    st.token_lane_end = le.data();
    st.scale = 0.3f;
    st.acc = acc.data();
    st.max = max.data();
    st.sum = sum.data();
    st.work = work.data();
    attention_tile_step_scalar(st);
    for (int64_t row = 0; row < n_rows; ++row) {
      double best = -INFINITY;
      for (int l = 0; l < kKeys; ++l) {
        double dot = 0;
        for (int64_t d = 0; d < d_head; ++d) {
          const BlockQ8_0& qb = q8[row * n_blocks + d / 32];
          dot += qb.qs[d % 32] * static_cast<double>(fp16_to_fp32(qb.d)) * value(k_rows[l][d / 32], d % 32);
        }
        best = std::max(best, 0.3 * dot);
      }
      ASSERT_NEAR(max[row], best, 1e-5 * (1 + std::abs(best))) << "row " << row;
    }
  }
}

TEST(AttentionTileStep, QuantizedCacheStepEqualsItsScalarDefinition) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni})
    if (!cpu_supports(isa)) std::printf("skipped: no %s, so no %s Q8_0/Q4_0 step here\n", name(isa), name(isa));
  uint32_t seed = 900;
  for (int64_t n_tokens : {1, 3, 16})
    for (int64_t n_heads : {1, 2, 5, 7})
      for (int64_t d_head : {32, 64, 96, 128, 256})
        for (float softcap : {0.0f, 3.0f}) {
          check_quant_steps<BlockQ8_0>(n_tokens, n_heads, d_head, softcap, ++seed);
          check_quant_steps<BlockQ4_0>(n_tokens, n_heads, d_head, softcap, ++seed);
        }
  for (int64_t n_tokens : {1, 16}) check_quant_steps<BlockQ8_0>(n_tokens, 7, 64, 0.0f, ++seed, true);
}

}  // namespace
}  // namespace ridge::kernels
