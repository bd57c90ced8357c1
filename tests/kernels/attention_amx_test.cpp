// The AMX-BF16 attention step (split bf16, attention_tile_step_amx) against the scalar
// step and the float64 reference, within a tolerance derived from its rounding; and
// whole attention() calls on Isa::kAmxInt8 over f16 caches: a prefill's tokens equal each
// token computed alone (decode) bit for bit, for lengths that are not multiples of the
// tile or the step, with and without sliding windows and softcap, causal masks across
// blocks, and decode split over threads. Skipped on CPUs without AMX-BF16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention/attention.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::make_paged_kv;
using testing::PagedKv;
using testing::PagedKvShape;
using testing::random_floats;
using testing::random_step_lanes;
using testing::step_rows;
using testing::StepLanes;
using testing::StepRows;

#define SKIP_WITHOUT_AMX_BF16()                                                                        \
  if (!attention_tile_amx_usable(64))                                                                   \
  GTEST_SKIP() << "skipped: this CPU (or OS) has no AMX-BF16 tiles (amx_bf16 and the tile permission " \
                  "of amx_int8), so attention never runs the AMX step here"

// The error bound of split bf16 for one query row against a set of keys: each product is
// good to 2^-16 of |q_d k_d| (lo parts rounded to 2^-17 of the value, the dropped lo*lo
// below 2^-18), so a score to eps = 2^-16 * scale * sum_d |q_d k_d|; the probabilities'
// lo parts add 2^-17 of each p. An output (a convex mix of V) then moves by at most
// (e^{2 eps} - 1 + 2^-16) * max |v|; the tests allow 4 eps + 2^-15 of it, plus f32 noise.
double score_eps(const float* q, const float* k_dense, int64_t n_keys, int64_t key_stride, int64_t d_head,
                 double scale) {
  double worst = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    double sum = 0;
    for (int64_t d = 0; d < d_head; ++d) sum += std::fabs(double{q[d]} * k_dense[j * key_stride + d]);
    worst = std::max(worst, sum);
  }
  return std::ldexp(1.0, -16) * scale * worst;
}

double output_tolerance(double eps, double v_max) { return (4 * eps + std::ldexp(1.0, -15)) * v_max + 1e-6; }

// Two steps in a row (the second rescales the first's states) over random lanes per
// token, some empty, rows no token sees left null: the AMX step's normalized outputs and
// maxima against the scalar step's.
void check_step(int64_t n_tokens, int64_t n_heads, int64_t d_head, float softcap, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "tokens " << n_tokens << " heads " << n_heads << " d_head " << d_head
                                    << " softcap " << softcap << " seed " << seed);
  constexpr int kKeys = kAttentionStepKeys;
  const int64_t n_rows = n_tokens * n_heads, row_stride = d_head + 64;  // rows of a wider cache
  const auto q = random_floats(n_rows * d_head, seed);
  const int64_t qt_stride = (n_rows + 15) / 16 * 16;
  std::vector<float> qt(qt_stride * d_head, 0.0f);
  for (int64_t row = 0; row < n_rows; ++row)
    for (int64_t d = 0; d < d_head; ++d) qt[d * qt_stride + row] = q[row * d_head + d];
  const float scale = 0.7f / std::sqrt(static_cast<float>(d_head));
  std::vector<uint16_t> qb(2 * qt_stride * d_head, 0xffff);
  attention_amx_queries(q.data(), n_heads * d_head, n_tokens, n_heads, d_head, scale, qb.data());
  std::vector<uint16_t> k, v;
  std::vector<float> k_wide, v_wide;
  for (float x : random_floats(kKeys * row_stride, seed + 1, 2.0f)) k.push_back(fp32_to_fp16(x));
  for (float x : random_floats(kKeys * row_stride, seed + 2)) v.push_back(fp32_to_fp16(x));
  for (uint16_t h : k) k_wide.push_back(fp16_to_fp32(h));
  for (uint16_t h : v) v_wide.push_back(fp16_to_fp32(h));
  const StepLanes lanes = random_step_lanes(n_tokens, kKeys, seed);
  struct State {
    std::vector<float> acc, max, sum;
  };
  auto run = [&](bool amx) {
    State st{std::vector<float>(n_rows * d_head, 0.0f), std::vector<float>(n_rows, -INFINITY),
             std::vector<float>(n_rows, 0.0f)};
    std::vector<float> work(attention_tile_work_floats(n_rows, d_head), std::nanf(""));
    AttentionTileStep<uint16_t> last;
    last.n_tokens = n_tokens;
    last.n_heads = n_heads;
    last.d_head = d_head;
    last.acc = st.acc.data();
    last.work = work.data();
    for (int s = 0; s < 2; ++s) {
      const StepRows<uint16_t> rows = step_rows(lanes, s, k.data(), v.data(), row_stride, kKeys);
      if (rows.lane_begin >= rows.lane_end) continue;
      AttentionTileStep<uint16_t> step;
      step.lane_begin = rows.lane_begin;
      step.lane_end = rows.lane_end;
      step.qt = qt.data();
      step.qt_stride = qt_stride;
      step.q = q.data();
      step.q_token_stride = n_heads * d_head;
      step.qa = qb.data();
      step.n_tokens = n_tokens;
      step.n_heads = n_heads;
      step.d_head = d_head;
      step.k_rows = rows.k.data();
      step.v_rows = rows.v.data();
      step.token_lane_begin = lanes.begin[s].data();
      step.token_lane_end = lanes.end[s].data();
      step.scale = scale;
      step.softcap = softcap;
      step.acc = st.acc.data();
      step.max = st.max.data();
      step.sum = st.sum.data();
      step.work = work.data();
      if (amx)
        attention_tile_step_amx(step);
      else
        attention_tile_step_scalar(step);
      last = step;
    }
    if (amx) attention_tile_finish_amx(last);  // acc back in row order
    return st;
  };
  const State want = run(false), got = run(true);
  for (int64_t row = 0; row < n_rows; ++row) {
    const int64_t i = row / n_heads;
    bool any = false;
    for (int s = 0; s < 2; ++s) any = any || lanes.begin[s][i] < lanes.end[s][i];
    if (!any) {  // untouched
      ASSERT_EQ(got.max[row], -INFINITY) << row;
      ASSERT_EQ(got.sum[row], 0.0f) << row;
      for (int64_t d = 0; d < d_head; ++d) ASSERT_EQ(got.acc[row * d_head + d], 0.0f) << row;
      continue;
    }
    const double eps = score_eps(q.data() + row * d_head, k_wide.data(), kKeys, row_stride, d_head, scale);
    double v_max = 0;
    for (float x : v_wide) v_max = std::max(v_max, double{std::fabs(x)});
    const double tol = output_tolerance(eps, v_max);
    ASSERT_NEAR(got.max[row], want.max[row], 2 * eps + 1e-6) << "row " << row;
    for (int64_t d = 0; d < d_head; ++d) {
      const double a = got.acc[row * d_head + d] / got.sum[row], b = want.acc[row * d_head + d] / want.sum[row];
      ASSERT_NEAR(a, b, tol) << "row " << row << " d " << d;
    }
  }
}

TEST(AttentionAmx, StepMatchesTheScalarStepWithinItsRounding) {
  SKIP_WITHOUT_AMX_BF16();
  uint32_t seed = 11;
  for (int64_t n_tokens : {1, 3, 16})
    for (int64_t n_heads : {1, 2, 5, 7})
      for (int64_t d_head : {64, 128, 256})
        for (float softcap : {0.0f, 3.0f}) check_step(n_tokens, n_heads, d_head, softcap, ++seed);
}

TEST(AttentionAmx, QueriesSplitIntoBf16HiAndLoPairs) {
  SKIP_WITHOUT_AMX_BF16();  // attention_amx_queries is AVX-512 code
  const int64_t n_tokens = 3, n_heads = 2, d_head = 64, rows_pad = 16, n_rows = n_tokens * n_heads;
  const auto q = random_floats(n_rows * d_head, 5);
  std::vector<uint16_t> qb(2 * rows_pad * d_head, 0xffff);
  attention_amx_queries(q.data(), n_heads * d_head, n_tokens, n_heads, d_head, 0.125f, qb.data());
  for (int64_t row = 0; row < rows_pad; ++row)
    for (int64_t d = 0; d < d_head; ++d) {
      const size_t at = static_cast<size_t>((d / 2 * rows_pad + row) * 2 + d % 2);
      if (row >= n_rows) {
        ASSERT_EQ(qb[at], 0) << "padding row " << row;
        ASSERT_EQ(qb[rows_pad * d_head + at], 0) << "padding row " << row;
        continue;
      }
      const float x = q[row * d_head + d] * 0.125f, hi = bf16_to_fp32(qb[at]);
      const float lo = bf16_to_fp32(qb[rows_pad * d_head + at]);
      ASSERT_EQ(qb[at], fp32_to_bf16(x)) << row << ", " << d;
      ASSERT_LE(std::fabs(lo), std::ldexp(std::fabs(x), -8)) << row << ", " << d;
      ASSERT_LE(std::fabs(x - (hi + lo)), std::ldexp(std::fabs(x), -16)) << row << ", " << d;
    }
}

struct Case {
  int64_t n_head, n_kv_head, d_head, n_kv, n_q, window;
  float softcap;
  int64_t block_size = 16;
};

// A prefill chunk on Isa::kAmxInt8 against each token alone (bit for bit), against the
// float64 reference within the split-bf16 bound, and against the AVX-512 f32 step.
void check_prefill(const Case& c, int n_threads) {
  SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv_head " << c.n_kv_head << " d_head " << c.d_head
                                    << " n_kv " << c.n_kv << " n_q " << c.n_q << " window " << c.window << " softcap "
                                    << c.softcap << " block " << c.block_size << " threads " << n_threads);
  const PagedKvShape shape{c.n_head, c.n_kv_head, c.d_head, c.block_size, c.n_kv, c.n_q, c.window};
  const PagedKv s = make_paged_kv(shape, 21, [](float x) { return fp16_to_fp32(fp32_to_fp16(x)); });
  std::vector<uint16_t> k_pool, v_pool;
  for (float x : s.k_pool) k_pool.push_back(fp32_to_fp16(x));
  for (float x : s.v_pool) v_pool.push_back(fp32_to_fp16(x));
  const PagedKvLayer<uint16_t> kv{k_pool.data(), v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(c.d_head)), c.softcap, c.window};
  std::vector<float> want(s.q.size());
  attention_reference(s.q.data(), s.q_pos.data(), c.n_q, c.n_head, s.k.data(), s.v.data(), c.n_kv, c.n_kv_head,
                      c.d_head, params, want.data());
  ThreadPool pool(n_threads);
  Scratch scratch(n_threads, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  scratch.reserve_shared(size_t{1} << 20);
  std::vector<float> together(s.q.size(), -1.0f), alone(s.q.size(), -2.0f);
  const AttentionSequence all{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, together.data()};
  attention_isa(kv, std::span<const AttentionSequence>(&all, 1), c.n_head, params, pool, scratch, Isa::kAmxInt8);
  const int64_t per_token = c.n_head * c.d_head;
  for (int64_t t = 0; t < c.n_q; ++t) {
    const AttentionSequence one{s.q.data() + t * per_token, s.q_pos.data() + t, 1, s.table, c.n_kv,
                                alone.data() + t * per_token};
    attention_isa(kv, std::span<const AttentionSequence>(&one, 1), c.n_head, params, pool, scratch, Isa::kAmxInt8);
  }
  const int64_t n_rep = c.n_head / c.n_kv_head, row = c.n_kv_head * c.d_head;
  double v_max = 0;
  for (float x : s.v) v_max = std::max(v_max, double{std::fabs(x)});
  for (int64_t t = 0; t < c.n_q; ++t)
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t g = h / n_rep;
      const double eps = score_eps(s.q.data() + (t * c.n_head + h) * c.d_head, s.k.data() + g * c.d_head,
                                   s.q_pos[t] + 1, row, c.d_head, params.scale);
      const double tol = output_tolerance(eps, v_max);
      for (int64_t d = 0; d < c.d_head; ++d) {
        const size_t e = static_cast<size_t>((t * c.n_head + h) * c.d_head + d);
        ASSERT_EQ(std::bit_cast<uint32_t>(together[e]), std::bit_cast<uint32_t>(alone[e]))
            << "token " << t << " head " << h << " d " << d;
        ASSERT_NEAR(together[e], want[e], tol) << "token " << t << " head " << h << " d " << d;
      }
    }
}

TEST(AttentionAmx, PrefillEqualsEachTokenAloneAndTheReference) {
  SKIP_WITHOUT_AMX_BF16();
  for (int64_t d_head : {64, 128, 256})
    for (int64_t ratio : {1, 3, 7}) check_prefill({2 * ratio, 2, d_head, 83, 37, 0, 0.0f}, 2);
}

TEST(AttentionAmx, SlidingWindowsSoftcapBlocksAndChunkBoundaries) {
  SKIP_WITHOUT_AMX_BF16();
  for (const Case& c : {Case{14, 2, 64, 613, 45, 0, 0.0f}, Case{4, 1, 256, 530, 29, 257, 0.0f},
                        Case{4, 1, 128, 300, 33, 64, 30.0f}, Case{6, 2, 64, 270, 20, 17, 5.0f},
                        Case{3, 1, 128, 100, 100, 0, 0.0f}, Case{7, 1, 64, 41, 41, 5, 0.0f},
                        Case{4, 2, 64, 99, 30, 0, 0.0f, 24}, Case{2, 1, 64, 50, 50, 0, 0.0f, 8}})
    check_prefill(c, 3);
}

TEST(AttentionAmx, DecodeSplitAcrossThreadsEqualsOneThread) {
  SKIP_WITHOUT_AMX_BF16();
  // One token at the end of a long context: its 256-key chunks go to several threads (the
  // split path) or all to one; the merge order is fixed, so the bits agree.
  const Case c{14, 2, 64, 1500, 1, 0, 0.0f};
  const PagedKvShape shape{c.n_head, c.n_kv_head, c.d_head, c.block_size, c.n_kv, c.n_q, c.window};
  const PagedKv s = make_paged_kv(shape, 8, [](float x) { return fp16_to_fp32(fp32_to_fp16(x)); });
  std::vector<uint16_t> k_pool, v_pool;
  for (float x : s.k_pool) k_pool.push_back(fp32_to_fp16(x));
  for (float x : s.v_pool) v_pool.push_back(fp32_to_fp16(x));
  const PagedKvLayer<uint16_t> kv{k_pool.data(), v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
  const AttentionParams params{0.125f, 0.0f, 0};
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 4}) {
    ThreadPool pool(threads);
    Scratch scratch(threads, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
    scratch.reserve_shared(size_t{1} << 20);
    std::vector<float> out(s.q.size(), -1.0f);
    const AttentionSequence seq{s.q.data(), s.q_pos.data(), 1, s.table, c.n_kv, out.data()};
    attention_isa(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, params, pool, scratch, Isa::kAmxInt8);
    outs.push_back(out);
  }
  for (size_t e = 0; e < outs[0].size(); ++e)
    ASSERT_EQ(std::bit_cast<uint32_t>(outs[0][e]), std::bit_cast<uint32_t>(outs[1][e])) << e;
}

}  // namespace
}  // namespace ridge::kernels
