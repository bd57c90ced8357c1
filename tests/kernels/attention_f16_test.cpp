// Paged attention over an f16 KV cache: against the float64 reference computed on the
// f16-rounded K/V (so only the kernel's own f32 arithmetic differs), and against the f32
// path on the same widened values, which it must match bit for bit (the f16 loops only
// change how a row is loaded). Scalar and AVX2, lengths that are not multiples of the
// block size, sliding windows with recycled blocks, GQA ratios, tiles of query tokens.
// Also the f32 -> f16 row store the forward pass writes the cache with.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/attention/attention.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::random_floats;

constexpr uint16_t kHalfNaN = 0x7e00;

struct Case {
  int64_t n_head = 4, n_kv_head = 2, d_head = 16, block_size = 16;
  int64_t n_kv = 37;  // tokens in the cache, the new ones included
  int64_t n_q = 1;    // new tokens: positions n_kv - n_q .. n_kv - 1
  int64_t window = 0;
  float softcap = 0.0f;
};

// One sequence's K/V, rounded to f16, in the shared shuffled block pool (test_util.h),
// twice: as halves (the f16 cache) and as their exact float values (an f32 cache of the
// same numbers). Slots the kernel must not read are NaN in both.
struct PagedF16 : testing::PagedKv {
  std::vector<uint16_t> k_half, v_half;  // k_pool, v_pool as halves: [n_blocks][block_size][n_kv_head][d_head]
};

PagedF16 make_sequence(const Case& c, uint32_t seed) {
  PagedF16 s;
  static_cast<testing::PagedKv&>(s) =
      testing::make_paged_kv({c.n_head, c.n_kv_head, c.d_head, c.block_size, c.n_kv, c.n_q, c.window}, seed,
                             [](float x) { return fp16_to_fp32(fp32_to_fp16(x)); });
  for (float x : s.k_pool) s.k_half.push_back(std::isnan(x) ? kHalfNaN : fp32_to_fp16(x));
  for (float x : s.v_pool) s.v_half.push_back(std::isnan(x) ? kHalfNaN : fp32_to_fp16(x));
  return s;
}

AttentionParams params_of(const Case& c) {
  return AttentionParams{1.0f / std::sqrt(static_cast<float>(c.d_head)), c.softcap, c.window};
}

std::vector<Isa> isas() {
  std::vector<Isa> v = {Isa::kScalar};
  if (cpu_supports(Isa::kAvx2)) v.push_back(Isa::kAvx2);
  return v;
}

// For each ISA: the f16 kernel against the float64 reference (tight: the inputs are
// the same numbers) and bit for bit against the f32 kernel on the widened pools.
void check_case(const Case& c, int n_threads = 2, uint32_t seed = 100) {
  SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv_head " << c.n_kv_head << " d_head "
                                    << c.d_head << " block " << c.block_size << " n_kv " << c.n_kv << " n_q "
                                    << c.n_q << " window " << c.window << " softcap " << c.softcap);
  const PagedF16 s = make_sequence(c, seed);
  const PagedKvLayer<uint16_t> half{s.k_half.data(), s.v_half.data(), s.n_blocks, c.block_size, c.n_kv_head,
                                    c.d_head};
  const PagedKvLayer<float> wide{s.k_pool.data(), s.v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
  std::vector<float> want(s.q.size());
  attention_reference(s.q.data(), s.q_pos.data(), c.n_q, c.n_head, s.k.data(), s.v.data(), c.n_kv, c.n_kv_head,
                      c.d_head, params_of(c), want.data());
  ThreadPool pool(n_threads);
  Scratch scratch(pool.n_threads(), attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  scratch.reserve_shared(size_t{1} << 20);
  std::vector<std::vector<float>> by_isa;
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> got(s.q.size(), -1.0f), f32(s.q.size(), -2.0f);
    const AttentionSequence seq{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, got.data()};
    attention_isa(half, std::span<const AttentionSequence>(&seq, 1), c.n_head, params_of(c), pool, scratch, isa);
    AttentionSequence seq32 = seq;
    seq32.out = f32.data();
    attention_isa(wide, std::span<const AttentionSequence>(&seq32, 1), c.n_head, params_of(c), pool, scratch, isa);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(close(got[i], want[i], 1e-6, 2e-5)) << "element " << i << ": " << got[i] << " vs " << want[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(f32[i])) << "element " << i;
    }
    by_isa.push_back(std::move(got));
  }
  // AVX2 against the scalar path: both near the reference, so near each other.
  if (by_isa.size() == 2) {
    for (size_t i = 0; i < by_isa[0].size(); ++i)
      ASSERT_TRUE(close(by_isa[1][i], by_isa[0][i], 1e-6, 2e-5)) << "avx2 vs scalar, element " << i;
  }
}

TEST(AttentionF16, CausalAcrossBlockBoundaries) {
  for (int64_t n_kv : {1, 2, 15, 16, 17, 31, 33, 49, 100, 300}) {
    Case c;
    c.n_kv = n_kv;
    check_case(c);
  }
}

TEST(AttentionF16, GqaRatiosAndHeadSizes) {
  for (int64_t ratio : {1, 2, 3, 4, 7}) {
    for (int64_t d_head : {7, 16, 64, 72, 256}) {
      Case c;
      c.n_kv_head = 2;
      c.n_head = 2 * ratio;
      c.d_head = d_head;
      c.n_kv = 53;
      c.n_q = 3;
      check_case(c);
    }
  }
}

TEST(AttentionF16, SlidingWindowsWithRecycledBlocks) {
  for (int64_t window : {1, 5, 16, 17, 40, 200}) {
    for (int64_t n_q : {1, 9, 20}) {
      Case c;
      c.n_kv = 81;
      c.n_q = n_q;
      c.window = window;
      check_case(c, 3);
    }
  }
}

TEST(AttentionF16, PrefillTilesLongContextsAndSoftcap) {
  Case prefill;  // a whole prompt: tiles of query tokens
  prefill.n_kv = 70;
  prefill.n_q = 70;
  check_case(prefill, 2);
  Case chunk = prefill;  // a chunk continuing a cached prefix, over 256-key chunks
  chunk.n_kv = 613;
  chunk.n_q = 37;
  chunk.window = 300;
  check_case(chunk, 2);
  Case decode;  // one token, long context: key chunks split over threads
  decode.n_head = 4;
  decode.n_kv_head = 1;
  decode.d_head = 64;
  decode.n_kv = 1100;
  check_case(decode, 3);
  Case gemma;  // Gemma 3 270M's shape, soft-capped scores
  gemma.n_head = 4;
  gemma.n_kv_head = 1;
  gemma.d_head = 256;
  gemma.n_kv = 130;
  gemma.n_q = 5;
  gemma.window = 64;
  gemma.softcap = 5.0f;
  check_case(gemma);
  Case odd;  // odd block size, head size and heads
  odd.block_size = 5;
  odd.d_head = 7;
  odd.n_head = 6;
  odd.n_kv_head = 3;
  odd.n_kv = 130;
  odd.n_q = 5;
  odd.window = 11;
  check_case(odd);
}

TEST(AttentionF16, RejectsARecycledBlockInsideTheWindow) {
  Case c;
  c.n_kv = 40;
  c.n_q = 2;
  c.window = 8;
  const PagedF16 s = make_sequence(c, 300);
  const PagedKvLayer<uint16_t> kv{s.k_half.data(), s.v_half.data(), s.n_blocks, c.block_size, c.n_kv_head,
                                  c.d_head};
  std::vector<float> out(s.q.size());
  ThreadPool pool(2);
  Scratch scratch(2, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  const AttentionSequence seq{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, out.data()};
  AttentionParams no_window = params_of(c);
  no_window.window = 0;
  EXPECT_NO_THROW(attention(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, params_of(c), pool, scratch));
  EXPECT_THROW(attention(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, no_window, pool, scratch), Error);
}

// The inner loops on their own: f16 rows against the f32 loops on the widened rows (bit
// for bit, per ISA), with strides and head counts the GQA groups use.
TEST(AttentionF16InnerLoops, MatchTheF32LoopsOnWidenedRows) {
  for (Isa isa : isas()) {
    for (int64_t n_rep : {1, 2, 3, 5, 7}) {
      for (int64_t d_head : {8, 20, 64, 136}) {
        const int64_t count = 13, row_stride = d_head + 5, stride = 16;
        const auto q = random_floats(n_rep * d_head, 1);
        std::vector<uint16_t> k_half;
        std::vector<float> k_wide;
        for (float x : random_floats(count * row_stride, 2)) {
          k_half.push_back(fp32_to_fp16(x));
          k_wide.push_back(fp16_to_fp32(k_half.back()));
        }
        std::vector<float> s16(n_rep * stride, 0.0f), s32(s16.size(), 0.0f);
        auto acc16 = random_floats(n_rep * d_head, 3);
        auto acc32 = acc16;
        if (isa == Isa::kAvx2) {
          attention_scores_avx2(q.data(), n_rep, d_head, k_half.data(), row_stride, count, 0.3f, s16.data(), stride);
          attention_scores_avx2(q.data(), n_rep, d_head, k_wide.data(), row_stride, count, 0.3f, s32.data(), stride);
          attention_accumulate_avx2(s32.data(), stride, n_rep, k_half.data(), row_stride, count, d_head, acc16.data(),
                                    d_head);
          attention_accumulate_avx2(s32.data(), stride, n_rep, k_wide.data(), row_stride, count, d_head, acc32.data(),
                                    d_head);
        } else {
          attention_scores_scalar(q.data(), n_rep, d_head, k_half.data(), row_stride, count, 0.3f, s16.data(), stride);
          attention_scores_scalar(q.data(), n_rep, d_head, k_wide.data(), row_stride, count, 0.3f, s32.data(), stride);
          attention_accumulate_scalar(s32.data(), stride, n_rep, k_half.data(), row_stride, count, d_head,
                                      acc16.data(), d_head);
          attention_accumulate_scalar(s32.data(), stride, n_rep, k_wide.data(), row_stride, count, d_head,
                                      acc32.data(), d_head);
        }
        EXPECT_EQ(s16, s32) << "scores, n_rep " << n_rep << " d_head " << d_head;
        EXPECT_EQ(acc16, acc32) << "accumulate, n_rep " << n_rep << " d_head " << d_head;
      }
    }
  }
}

// The row store: F16C's conversion rounds as the scalar reference does (nearest even,
// subnormals, overflow to inf) on every non-NaN input, tails included.
TEST(AttentionF16, RowStoreRoundsToNearestEven) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 0.1f, -2.5f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f,
                          INFINITY, -INFINITY, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 6.09e-5f, 1e-10f};
  x.push_back(1.0f + 0x1p-11f);          // a tie: rounds down to even 1.0
  x.push_back(1.0f + 3 * 0x1p-11f);      // a tie: rounds up to even
  x.push_back(std::bit_cast<float>(0x33000000u));  // 2^-25, the tie with zero
  // Random mantissa bits at exponents from below the smallest subnormal half to past
  // the largest half.
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7fffffu), exponent(127 - 27, 127 + 17), sign(0, 1);
  while (x.size() < 4099) x.push_back(std::bit_cast<float>(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng)));
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = fp32_to_fp16(x[i]);
  std::vector<uint16_t> scalar(x.size(), 1), best(x.size(), 2);
  kv_row_to_f16_scalar(x.data(), scalar.data(), static_cast<int64_t>(x.size()));
  kv_row_to_f16(x.data(), best.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(scalar, want);
  EXPECT_EQ(best, want);
  if (cpu_supports(Isa::kAvx2)) {
    std::vector<uint16_t> fast(x.size(), 3);
    kv_row_to_f16_avx2(x.data(), fast.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(fast[i], want[i]) << "x = " << x[i];
  }
}

}  // namespace
}  // namespace ridge::kernels
