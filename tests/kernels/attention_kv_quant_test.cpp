// Attention over bf16, Q8_0 and Q4_0 K/V caches. The bf16 per-row loops: the scalar ones
// against float64 on the widened cache, each AVX2 loop bit for bit against its scalar twin
// and against the f32 loops on the widened rows. The error the query's quantization adds
// to the Q8_0/Q4_0 step's scores. Then attention() as a whole per type: paged blocks,
// sliding windows, GQA, lengths off the block size.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/attention/attention.h"
#include "kernels/scratch.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::random_floats;

constexpr double kUnitRoundoff = 0x1p-24;  // float's

template <class T>
constexpr DType kDType = DType::F32;  // the cache types' below
template <>
constexpr DType kDType<Bf16> = DType::BF16;
template <>
constexpr DType kDType<BlockQ8_0> = DType::Q8_0;
template <>
constexpr DType kDType<BlockQ4_0> = DType::Q4_0;

// Values stored as T, and what they decode to.
template <class T>
struct Encoded {
  std::vector<T> units;
  std::vector<float> values;
};

template <class T>
Encoded<T> encode(const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  Encoded<T> e{std::vector<T>(static_cast<size_t>(n / kKvValuesPerUnit<T>)), std::vector<float>(x.size())};
  quantize_row(kDType<T>, x.data(), e.units.data(), n);
  dequantize_row(kDType<T>, e.units.data(), e.values.data(), n);
  return e;
}

// The query the kernels dot with K: as given for bf16, rounded through Q8_0 for Q8_0/Q4_0.
template <class T>
std::vector<float> query_seen(const std::vector<float>& q) {
  if constexpr (std::is_same_v<T, Bf16>) return q;
  return encode<BlockQ8_0>(q).values;
}

// One inner-loop call: n_rep query rows against count keys of a cache whose rows hold
// kHeads KV heads, of which the loops read head kHead (so strides and offsets count
// units of T); p holds the probabilities and acc the accumulators they add to.
constexpr int64_t kHeads = 3, kHead = 1, kStride = 24;  // kStride: of scores and p, >= count

template <class T>
struct LoopCase {
  int64_t n_rep, d_head, count;
  float scale;
  std::vector<float> q, p, acc;  // q, acc [n_rep][d_head]; p [n_rep][kStride]
  Encoded<T> k, v;               // [count][kHeads][d_head]

  int64_t row_stride() const { return kHeads * d_head / kKvValuesPerUnit<T>; }
  const T* k_head() const { return k.units.data() + kHead * d_head / kKvValuesPerUnit<T>; }
  const T* v_head() const { return v.units.data() + kHead * d_head / kKvValuesPerUnit<T>; }
  float k_at(int64_t j, int64_t d) const { return k.values[(j * kHeads + kHead) * d_head + d]; }
  float v_at(int64_t j, int64_t d) const { return v.values[(j * kHeads + kHead) * d_head + d]; }
};

template <class T>
LoopCase<T> make_case(int64_t n_rep, int64_t d_head, int64_t count, uint32_t seed) {
  const int64_t cache = count * kHeads * d_head;
  return LoopCase<T>{n_rep,
                     d_head,
                     count,
                     1.0f / std::sqrt(static_cast<float>(d_head)),
                     random_floats(n_rep * d_head, seed),
                     random_floats(n_rep * kStride, seed + 1, 0.5f),
                     random_floats(n_rep * d_head, seed + 2),
                     encode<T>(random_floats(cache, seed + 3)),
                     encode<T>(random_floats(cache, seed + 4))};
}

template <class T>
std::vector<float> scores_of(const LoopCase<T>& c, Isa isa) {
  std::vector<float> s(c.n_rep * kStride, -1.0f);
  if (isa_has_avx2(isa))
    attention_scores_avx2(c.q.data(), c.n_rep, c.d_head, c.k_head(), c.row_stride(), c.count, c.scale, s.data(),
                          kStride);
  else
    attention_scores_scalar(c.q.data(), c.n_rep, c.d_head, c.k_head(), c.row_stride(), c.count, c.scale, s.data(),
                            kStride);
  return s;
}

template <class T>
std::vector<float> accumulated_of(const LoopCase<T>& c, Isa isa) {
  std::vector<float> acc = c.acc;
  if (isa_has_avx2(isa))
    attention_accumulate_avx2(c.p.data(), kStride, c.n_rep, c.v_head(), c.row_stride(), c.count, c.d_head, acc.data(),
                              c.d_head);
  else
    attention_accumulate_scalar(c.p.data(), kStride, c.n_rep, c.v_head(), c.row_stride(), c.count, c.d_head,
                                acc.data(), c.d_head);
  return acc;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " vs " << want.size() << " floats";
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

template <class T>
class KvLoops : public ::testing::Test {};

struct TypeName {
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, Bf16>) return "Bf16";
    if constexpr (std::is_same_v<T, BlockQ8_0>) return "Q8_0";
    return "Q4_0";
  }
};

using KvTypes = ::testing::Types<Bf16, BlockQ8_0, BlockQ4_0>;
using LoopTypes = ::testing::Types<Bf16>;  // the one cache type left on the per-row loops
TYPED_TEST_SUITE(KvLoops, LoopTypes, TypeName);

// Each score within float rounding of the float64 dot of the query the loop sees with the
// widened key: at most d_head / 8 + 8 roundings (the lanes' FMAs, the lane sum, the tail,
// the scale) of the sum of |products|.
TYPED_TEST(KvLoops, ScalarScoresMatchFloat64) {
  for (int64_t d_head : {64, 128, 256}) {
    for (int64_t n_rep = 1; n_rep <= 7; ++n_rep) {
      const auto c = make_case<TypeParam>(n_rep, d_head, 13, static_cast<uint32_t>(10 * d_head + n_rep));
      const std::vector<float> q = query_seen<TypeParam>(c.q);
      const std::vector<float> got = scores_of(c, Isa::kScalar);
      for (int64_t r = 0; r < n_rep; ++r) {
        for (int64_t j = 0; j < c.count; ++j) {
          double dot = 0, magnitude = 0;
          for (int64_t d = 0; d < d_head; ++d) {
            dot += static_cast<double>(q[r * d_head + d]) * c.k_at(j, d);
            magnitude += std::fabs(static_cast<double>(q[r * d_head + d]) * c.k_at(j, d));
          }
          const double tolerance = (d_head / 8 + 8) * kUnitRoundoff * c.scale * magnitude;
          ASSERT_NEAR(got[r * kStride + j], dot * c.scale, tolerance)
              << "d_head " << d_head << " n_rep " << n_rep << " row " << r << " key " << j;
        }
      }
    }
  }
}

// Each accumulator within float rounding of acc + sum_j p_j v_j in float64: one rounding per
// key, the FMA's (decoding V is exact).
TYPED_TEST(KvLoops, ScalarAccumulateMatchesFloat64) {
  for (int64_t d_head : {64, 128, 256}) {
    for (int64_t n_rep = 1; n_rep <= 7; ++n_rep) {
      const auto c = make_case<TypeParam>(n_rep, d_head, 13, static_cast<uint32_t>(20 * d_head + n_rep));
      const std::vector<float> got = accumulated_of(c, Isa::kScalar);
      for (int64_t r = 0; r < n_rep; ++r) {
        for (int64_t d = 0; d < d_head; ++d) {
          double sum = c.acc[r * d_head + d], magnitude = std::fabs(sum);
          for (int64_t j = 0; j < c.count; ++j) {
            sum += static_cast<double>(c.p[r * kStride + j]) * c.v_at(j, d);
            magnitude += std::fabs(static_cast<double>(c.p[r * kStride + j]) * c.v_at(j, d));
          }
          ASSERT_NEAR(got[r * d_head + d], sum, (c.count + 2) * kUnitRoundoff * magnitude)
              << "d_head " << d_head << " n_rep " << n_rep << " row " << r << " element " << d;
        }
      }
    }
  }
}

// Extremes: a query row of equal magnitudes, one of halfway cases and large values, and
// a block of zeros.
template <class T>
void add_extremes(LoopCase<T>& c) {
  for (int64_t d = 0; d < c.d_head; ++d) {
    c.q[d] = d % 3 ? 1.5f : -1.5f;
    if (c.n_rep > 1) c.q[c.d_head + d] = d % 32 == 0 ? 127.0f : static_cast<float>(d % 64) - 31.5f;
    if (c.n_rep > 2 && d < 32) c.q[2 * c.d_head + d] = 0.0f;
  }
}

TYPED_TEST(KvLoops, Avx2MatchesScalarBitForBit) {
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no avx2";
  for (int64_t d_head : {8, 20, 32, 64, 72, 96, 128, 136, 256}) {  // tails past 32 and 8
    for (int64_t n_rep : {1, 2, 3, 4, 5, 6, 7, 16, 20}) {
      for (int64_t count : {1, 13, 16}) {
        SCOPED_TRACE(::testing::Message() << "d_head " << d_head << " n_rep " << n_rep << " count " << count);
        auto c = make_case<TypeParam>(n_rep, d_head, count, static_cast<uint32_t>(d_head * n_rep + count));
        EXPECT_TRUE(same_bits(scores_of(c, Isa::kAvx2), scores_of(c, Isa::kScalar))) << "scores";
        EXPECT_TRUE(same_bits(accumulated_of(c, Isa::kAvx2), accumulated_of(c, Isa::kScalar))) << "accumulate";
        add_extremes(c);
        EXPECT_TRUE(same_bits(scores_of(c, Isa::kAvx2), scores_of(c, Isa::kScalar))) << "scores, extremes";
        EXPECT_TRUE(same_bits(accumulated_of(c, Isa::kAvx2), accumulated_of(c, Isa::kScalar))) << "accum., extremes";
      }
    }
  }
}

// V is widened exactly and accumulated as the f32 AVX2 loop does, so bf16 gives that
// loop's bits on its widened rows; scores likewise (as the f16 loops do).
TYPED_TEST(KvLoops, Avx2MatchesTheF32LoopsOnDecodedRows) {
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no avx2";
  for (int64_t d_head : {8, 20, 32, 64, 72, 128, 136, 256}) {
    for (int64_t n_rep : {1, 3, 6}) {
      const auto c = make_case<TypeParam>(n_rep, d_head, 13, static_cast<uint32_t>(d_head + n_rep));
      const int64_t f32_stride = kHeads * d_head;
      std::vector<float> acc = c.acc;
      attention_accumulate_avx2(c.p.data(), kStride, n_rep, c.v.values.data() + kHead * d_head, f32_stride, c.count,
                                d_head, acc.data(), d_head);
      EXPECT_TRUE(same_bits(accumulated_of(c, Isa::kAvx2), acc)) << "d_head " << d_head << " n_rep " << n_rep;
      std::vector<float> scores(c.n_rep * kStride, -1.0f);
      attention_scores_avx2(c.q.data(), n_rep, d_head, c.k.values.data() + kHead * d_head, f32_stride, c.count,
                            c.scale, scores.data(), kStride);
      EXPECT_TRUE(same_bits(scores_of(c, Isa::kAvx2), scores)) << "scores, d_head " << d_head << " n_rep " << n_rep;
    }
  }
}

// The Q8_0/Q4_0 step's scores (kernels/attention/attention.h's definition, whose bits every ISA's step
// gives) of n_rep query rows against the case's keys, [n_rep][kStride]: token j of the
// step sees lane j alone, so the max of its row r is score (r, j).
template <class Block>
std::vector<float> step_scores(const LoopCase<Block>& c) {
  const int64_t n_blocks = c.d_head / kQK8_0, n_rows = c.count * c.n_rep;
  std::vector<BlockQ8_0> q8(static_cast<size_t>(n_rows * n_blocks));
  for (int64_t j = 0; j < c.count; ++j) quantize_row_q8_0(c.q.data(), q8.data() + j * c.n_rep * n_blocks, c.n_rep * c.d_head);
  std::vector<const Block*> k_rows(kAttentionStepKeys, nullptr), v_rows(kAttentionStepKeys, nullptr);
  std::vector<int> lane_begin(static_cast<size_t>(c.count)), lane_end(static_cast<size_t>(c.count));
  for (int64_t j = 0; j < c.count; ++j) {
    k_rows[j] = c.k_head() + j * c.row_stride();
    v_rows[j] = c.v_head() + j * c.row_stride();
    lane_begin[j] = static_cast<int>(j);
    lane_end[j] = static_cast<int>(j + 1);
  }
  std::vector<float> acc(n_rows * c.d_head, 0.0f), max(n_rows, -INFINITY), sum(n_rows, 0.0f);
  std::vector<float> work(attention_tile_work_floats(n_rows, c.d_head));
  AttentionTileStep<Block> st;
  st.q8 = q8.data();
  st.n_tokens = c.count;
  st.n_heads = c.n_rep;
  st.d_head = c.d_head;
  st.k_rows = k_rows.data();
  st.v_rows = v_rows.data();
  st.lane_begin = 0;
  st.lane_end = static_cast<int>(c.count);
  st.token_lane_begin = lane_begin.data();
  st.token_lane_end = lane_end.data();
  st.scale = c.scale;
  st.acc = acc.data();
  st.max = max.data();
  st.sum = sum.data();
  st.work = work.data();
  attention_tile_step_scalar(st);
  std::vector<float> s(c.n_rep * kStride, -1.0f);
  for (int64_t j = 0; j < c.count; ++j)
    for (int64_t r = 0; r < c.n_rep; ++r) s[r * kStride + j] = max[j * c.n_rep + r];
  return s;
}

// Scores over a quantized K against the float64 dot of the unrounded f32 query: within
// what the query's rounding allows. An element x of a block with scale d = amax / 127
// (stored as f16 d16) becomes q * d16 with |x - q * d| <= d / 2 (a hair more: x * (1 / d)
// is itself rounded) and |q| <= 127, so it moves by at most d / 2 + 127 |d - d16|, times
// |k| in the dot; float rounding adds two roundings per block (its scales' product, its
// FMA) and one for the scale, within the d_head / 8 + 8 allowed below.
template <class Block>
void check_query_quantization_error() {
  for (int64_t d_head : {64, 128, 256}) {
    SCOPED_TRACE(::testing::Message() << "d_head " << d_head);
    const int64_t n_rep = 5;
    const auto c = make_case<Block>(n_rep, d_head, 13, static_cast<uint32_t>(30 * d_head));
    std::vector<double> moved(c.q.size());  // per query element, the bound on its rounding error
    for (size_t b = 0; b < c.q.size(); b += kQK8_0) {
      float amax = 0;
      for (size_t i = b; i < b + kQK8_0; ++i) amax = std::max(amax, std::fabs(c.q[i]));
      const float d = amax / 127;
      const double bound = d * (0.5 + 1e-4) + 127 * std::fabs(d - fp16_to_fp32(fp32_to_fp16(d)));
      std::fill(moved.begin() + static_cast<int64_t>(b), moved.begin() + static_cast<int64_t>(b) + kQK8_0, bound);
    }
    const std::vector<float> got = step_scores(c);
    for (int64_t r = 0; r < n_rep; ++r) {
      for (int64_t j = 0; j < c.count; ++j) {
        double dot = 0, quantization = 0, magnitude = 0;
        for (int64_t d = 0; d < d_head; ++d) {
          const double x = c.q[r * d_head + d], k = c.k_at(j, d), e = moved[r * d_head + d];
          dot += x * k;
          quantization += e * std::fabs(k);
          magnitude += (std::fabs(x) + e) * std::fabs(k);
        }
        const double tolerance = c.scale * (quantization + (d_head / 8 + 8) * kUnitRoundoff * magnitude);
        ASSERT_NEAR(got[r * kStride + j], dot * c.scale, tolerance) << "row " << r << " key " << j;
      }
    }
  }
}

TEST(QuantizedKStep, QueryQuantizationErrorIsBounded) {
  check_query_quantization_error<BlockQ8_0>();
  check_query_quantization_error<BlockQ4_0>();
}

// --- attention() over a paged cache of each type, against the float64 reference on the
// decoded K/V and the query the kernel dots K with (Q8_0-rounded for Q8_0/Q4_0 K, which
// removes the query's quantization from the comparison; see QueryQuantizationErrorIsBounded
// for what it adds), so the tolerance is the f32 kernel's.

template <class T>
class KvAttention : public ::testing::Test {};
TYPED_TEST_SUITE(KvAttention, KvTypes, TypeName);

struct AttentionCase {
  int64_t n_head = 8, n_kv_head = 2, d_head = 64, block_size = 16;
  int64_t n_kv = 75;  // tokens in the cache, the new ones included
  int64_t n_q = 1;    // new tokens: positions n_kv - n_q .. n_kv - 1
  int64_t window = 0;
  float softcap = 0.0f;
};

// The sequence's rows scattered over a shuffled pool with spare blocks; every unit the
// kernel must not read (spare blocks, slots past n_kv, blocks recycled behind the window,
// which get id -1) has all bits set: a NaN bf16 or a NaN block scale, poisoning the output.
template <class T>
void check_attention(const AttentionCase& c, int n_threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv_head " << c.n_kv_head << " d_head "
                                    << c.d_head << " block " << c.block_size << " n_kv " << c.n_kv << " n_q "
                                    << c.n_q << " window " << c.window << " softcap " << c.softcap);
  const int64_t row = c.n_kv_head * c.d_head, row_units = row / kKvValuesPerUnit<T>;
  const std::vector<float> q = random_floats(c.n_q * c.n_head * c.d_head, seed);
  const Encoded<T> k = encode<T>(random_floats(c.n_kv * row, seed + 1));
  const Encoded<T> v = encode<T>(random_floats(c.n_kv * row, seed + 2));
  std::vector<int32_t> q_pos;
  for (int64_t t = 0; t < c.n_q; ++t) q_pos.push_back(static_cast<int32_t>(c.n_kv - c.n_q + t));

  const int64_t n_logical = (c.n_kv + c.block_size - 1) / c.block_size, n_blocks = n_logical + 2;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks)), table;
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  T poison;
  std::memset(&poison, 0xff, sizeof(poison));
  std::vector<T> k_pool(static_cast<size_t>(n_blocks * c.block_size * row_units), poison), v_pool = k_pool;
  const int64_t first_visible = c.window > 0 ? std::max<int64_t>(0, q_pos[0] - c.window + 1) : 0;
  for (int64_t b = 0; b < n_logical; ++b) {
    const bool recycled = (b + 1) * c.block_size <= first_visible;
    table.push_back(recycled ? -1 : ids[b]);
    for (int64_t slot = 0; !recycled && slot < c.block_size && b * c.block_size + slot < c.n_kv; ++slot) {
      const int64_t from = (b * c.block_size + slot) * row_units, to = (ids[b] * c.block_size + slot) * row_units;
      std::copy_n(k.units.begin() + from, row_units, k_pool.begin() + to);
      std::copy_n(v.units.begin() + from, row_units, v_pool.begin() + to);
    }
  }
  const PagedKvLayer<T> kv{k_pool.data(), v_pool.data(), n_blocks, c.block_size, c.n_kv_head, c.d_head};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(c.d_head)), c.softcap, c.window};
  std::vector<float> want(q.size());
  attention_reference(query_seen<T>(q).data(), q_pos.data(), c.n_q, c.n_head, k.values.data(), v.values.data(),
                      c.n_kv, c.n_kv_head, c.d_head, params, want.data());

  ThreadPool pool(n_threads);
  Scratch scratch(pool.n_threads(), attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  scratch.reserve_shared(size_t{1} << 20);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512Vnni}) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> got(q.size(), -1.0f), alone(q.size(), -2.0f);
    const AttentionSequence seq{q.data(), q_pos.data(), c.n_q, table, c.n_kv, got.data()};
    attention_isa(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, params, pool, scratch, isa);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(testing::close(got[i], want[i], 1e-6, 2e-5)) << "element " << i << ": " << got[i] << " vs "
                                                                << want[i];
    // Each token alone (decode's path) gives the bits it got in the batch (prefill's tiles).
    const int64_t per_token = c.n_head * c.d_head;
    for (int64_t t = 0; t < c.n_q; ++t) {
      const AttentionSequence one{q.data() + t * per_token, q_pos.data() + t, 1, table, c.n_kv,
                                  alone.data() + t * per_token};
      attention_isa(kv, std::span<const AttentionSequence>(&one, 1), c.n_head, params, pool, scratch, isa);
    }
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(alone[i])) << "element " << i;
  }
}

TYPED_TEST(KvAttention, DecodeAcrossBlockBoundaries) {
  for (int64_t n_kv : {1, 15, 17, 33, 75, 300}) {
    AttentionCase c;
    c.n_kv = n_kv;
    check_attention<TypeParam>(c, 2, 100);
  }
}

TYPED_TEST(KvAttention, GqaRatiosAndHeadSizes) {
  for (int64_t ratio : {1, 3, 4, 7}) {
    for (int64_t d_head : {32, 64, 128, 256}) {
      AttentionCase c;
      c.n_head = 2 * ratio;
      c.d_head = d_head;
      c.n_kv = 53;
      c.n_q = 3;
      check_attention<TypeParam>(c, 2, 200);
    }
  }
}

TYPED_TEST(KvAttention, SlidingWindowsPrefillAndLongContexts) {
  for (int64_t window : {1, 5, 16, 17, 40}) {
    for (int64_t n_q : {1, 9, 20}) {  // 9 and 20 tokens: tiles of query tokens
      AttentionCase c;
      c.n_kv = 81;
      c.n_q = n_q;
      c.window = window;
      check_attention<TypeParam>(c, 3, 300);
    }
  }
  AttentionCase chunk;  // a prefill chunk continuing a cached prefix, over 256-key chunks
  chunk.n_kv = 613;
  chunk.n_q = 37;
  chunk.window = 300;
  check_attention<TypeParam>(chunk, 2, 400);
  AttentionCase decode;  // one token, long context: key chunks split over threads
  decode.n_head = 4;
  decode.n_kv_head = 1;
  decode.d_head = 128;
  decode.n_kv = 1100;
  check_attention<TypeParam>(decode, 3, 500);
  AttentionCase gemma;  // Gemma 3's head size, soft-capped scores, an odd block size
  gemma.n_head = 4;
  gemma.n_kv_head = 1;
  gemma.d_head = 256;
  gemma.block_size = 5;
  gemma.n_kv = 130;
  gemma.n_q = 5;
  gemma.window = 64;
  gemma.softcap = 5.0f;
  check_attention<TypeParam>(gemma, 2, 600);
}

}  // namespace
}  // namespace ridge::kernels
