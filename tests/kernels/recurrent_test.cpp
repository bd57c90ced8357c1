// kernels/recurrent/ against its scalar references: every fast path this CPU runs, on odd
// sizes (key heads tiled over more value heads, d_k below a vector, tails), one token and
// several; and the properties the model code leans on, exactly: states_after is the state
// after each token, a state carried across calls equals one call over all the tokens, and
// splitting the heads over a pool changes no bit.
#include "kernels/recurrent/recurrent.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/isa.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::random_floats;
using testing::supported_isas;

std::vector<Isa> fast_isas() {
  std::vector<Isa> v;
  for (Isa isa : supported_isas())
    if (isa != Isa::kScalar) v.push_back(isa);
  return v;
}

// got vs want elementwise, |got - want| <= abs + rel |want|; names the first mismatch.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want,
                                     double abs = 1e-5, double rel = 1e-4) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!close(got[i], want[i], abs, rel) || std::isnan(got[i]) != std::isnan(want[i]))
      return ::testing::AssertionFailure() << "at " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

std::vector<float> uniform_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- gated delta rule ----

struct DeltaCase {
  DeltaNetShape shape{};
  int64_t n_tokens = 0;
  int64_t qk_stride = 0, v_stride = 0;
  std::vector<float> state, q, k, v, g, beta;  // state [n_heads][d_v][d_k]; the rest as recurrent.h
};

DeltaCase delta_case(int64_t n_heads, int64_t n_k_heads, int64_t d_k, int64_t d_v, int64_t n_tokens, uint32_t seed) {
  DeltaCase c;
  c.shape = {n_heads, n_k_heads, d_k, d_v, 1.0f / std::sqrt(float(d_k))};
  c.n_tokens = n_tokens;
  c.qk_stride = n_k_heads * d_k + 3;  // rows wider than the heads, as slices of the fused projection
  c.v_stride = n_heads * d_v + 5;
  c.state = random_floats(n_heads * d_v * d_k, seed, 0.3f);
  c.q = random_floats(n_tokens * c.qk_stride, seed + 1);
  c.k = random_floats(n_tokens * c.qk_stride, seed + 2);
  // q and k L2-normalised per head, as the model passes them; the padding stays random.
  l2_norm_heads(c.q.data(), n_tokens, c.qk_stride, n_k_heads, d_k, 1e-6f);
  l2_norm_heads(c.k.data(), n_tokens, c.qk_stride, n_k_heads, d_k, 1e-6f);
  c.v = random_floats(n_tokens * c.v_stride, seed + 3);
  c.g = uniform_floats(n_tokens * n_heads, seed + 4, -2.0f, 0.0f);
  c.beta = uniform_floats(n_tokens * n_heads, seed + 5, 0.0f, 1.0f);
  return c;
}

struct DeltaResult {
  std::vector<float> state, out, states_after;
};

// Tokens [t0, t0 + n) of c from `state` (c.state when empty).
DeltaResult run_delta(const DeltaCase& c, Isa isa, ThreadPool* pool = nullptr, int64_t t0 = 0, int64_t n = -1,
                      const std::vector<float>& state = {}) {
  if (n < 0) n = c.n_tokens - t0;
  const DeltaNetShape& s = c.shape;
  DeltaResult r{state.empty() ? c.state : state, std::vector<float>(n * s.n_heads * s.d_v),
                std::vector<float>(n * s.n_heads * s.d_v * s.d_k)};
  gated_delta_rule_isa(r.state.data(), c.q.data() + t0 * c.qk_stride, c.k.data() + t0 * c.qk_stride, c.qk_stride,
                       c.v.data() + t0 * c.v_stride, c.v_stride, c.g.data() + t0 * s.n_heads,
                       c.beta.data() + t0 * s.n_heads, r.out.data(), n, s, r.states_after.data(), pool, isa);
  return r;
}

struct DeltaSize {
  int64_t n_heads, n_k_heads, d_k, d_v;
};
constexpr DeltaSize kDeltaSizes[] = {{4, 2, 128, 128}, {6, 3, 48, 16}, {3, 1, 16, 48}, {2, 2, 20, 7}};

TEST(GatedDeltaRule, FastPathsMatchTheReference) {
  for (const DeltaSize& z : kDeltaSizes)
    for (int64_t n_tokens : {1, 7, 40})  // 40: past one block of tokens (32)
      for (bool grouped : {false, true}) {  // Qwen 3.5's tiled key heads, Qwen3-Next's grouped ones
        DeltaCase c = delta_case(z.n_heads, z.n_k_heads, z.d_k, z.d_v, n_tokens, 11);
        c.shape.grouped = grouped;
        const DeltaResult want = run_delta(c, Isa::kScalar);
        gated_delta_rule_reference(std::vector<float>(c.state).data(), c.q.data(), c.k.data(), c.qk_stride, c.v.data(),
                                   c.v_stride, c.g.data(), c.beta.data(), std::vector<float>(want.out.size()).data(),
                                   n_tokens, c.shape, nullptr, nullptr);  // states_after and the pool may be null
        for (Isa isa : fast_isas()) {
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " d_k " << z.d_k << " d_v " << z.d_v << " heads "
                                            << z.n_heads << "/" << z.n_k_heads << " tokens " << n_tokens
                                            << (grouped ? " grouped" : " tiled"));
          const DeltaResult got = run_delta(c, isa);
          EXPECT_TRUE(all_close(got.out, want.out));
          EXPECT_TRUE(all_close(got.state, want.state));
          EXPECT_TRUE(all_close(got.states_after, want.states_after));
        }
      }
}

TEST(GatedDeltaRule, DecodeChangesTheStateAndTheOutputDependsOnIt) {
  // Guards the comparisons above against a kernel that does nothing on both sides.
  const DeltaCase c = delta_case(2, 1, 16, 8, 1, 3);
  for (Isa isa : supported_isas()) {
    const DeltaResult r = run_delta(c, isa);
    EXPECT_NE(r.state, c.state) << isa_name(isa);
    double norm = 0;
    for (float o : r.out) norm += std::fabs(o);
    EXPECT_GT(norm, 1e-3) << isa_name(isa);
  }
}

TEST(GatedDeltaRule, TiledKeyHeadsAndOneHandComputedStep) {
  // Four value heads over two key heads, d_k 2, d_v 1, from S = 0: u = beta v, S' = k u,
  // o = scale u (k . q). Value head h reads key head h % 2 (tiled, not h / 2): heads 0 and 2
  // see k . q = 0.6, heads 1 and 3 see 0.
  const DeltaNetShape s{4, 2, 2, 1, 0.5f};
  const std::vector<float> q = {1, 0, 0, 1}, k = {0.6f, 0.8f, 1, 0}, v = {2, -1, 1, 3}, g = {-1, -1, -1, -1},
                           beta = {0.5f, 1, 1, 1};
  for (Isa isa : supported_isas()) {
    std::vector<float> state(8, 0.0f), out(4);
    gated_delta_rule_isa(state.data(), q.data(), k.data(), 4, v.data(), 4, g.data(), beta.data(), out.data(), 1, s,
                         nullptr, nullptr, isa);
    EXPECT_TRUE(all_close(state, {0.6f, 0.8f, -1, 0, 0.6f, 0.8f, 3, 0})) << isa_name(isa);
    EXPECT_TRUE(all_close(out, {0.3f, 0, 0.3f, 0})) << isa_name(isa);
  }
  // Grouped (Qwen3-Next): heads 0 and 1 read key head 0 (k . q = 0.6), heads 2 and 3 key head 1 (0).
  DeltaNetShape grouped = s;
  grouped.grouped = true;
  for (Isa isa : supported_isas()) {
    std::vector<float> state(8, 0.0f), out(4);
    gated_delta_rule_isa(state.data(), q.data(), k.data(), 4, v.data(), 4, g.data(), beta.data(), out.data(), 1,
                         grouped, nullptr, nullptr, isa);
    EXPECT_TRUE(all_close(state, {0.6f, 0.8f, -0.6f, -0.8f, 1, 0, 3, 0})) << isa_name(isa);
    EXPECT_TRUE(all_close(out, {0.3f, -0.3f, 0, 0})) << isa_name(isa);
  }
}

TEST(GatedDeltaRule, StatesAfterEqualTokenByTokenAndCallsChain) {
  const DeltaCase c = delta_case(6, 3, 48, 16, 7, 21);
  const DeltaNetShape& s = c.shape;
  const int64_t head_all = s.n_heads * s.d_v * s.d_k;
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const DeltaResult all = run_delta(c, isa);
    std::vector<float> state = c.state;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const DeltaResult one = run_delta(c, isa, nullptr, t, 1, state);
      state = one.state;
      EXPECT_EQ(state, std::vector<float>(all.states_after.begin() + t * head_all,
                                          all.states_after.begin() + (t + 1) * head_all)) << t;
      EXPECT_EQ(one.out, std::vector<float>(all.out.begin() + t * s.n_heads * s.d_v,
                                            all.out.begin() + (t + 1) * s.n_heads * s.d_v)) << t;
    }
    EXPECT_EQ(state, all.state);
    // 3 tokens then 4 from the carried state: the same as 7 at once.
    const DeltaResult first = run_delta(c, isa, nullptr, 0, 3);
    const DeltaResult second = run_delta(c, isa, nullptr, 3, 4, first.state);
    EXPECT_EQ(second.state, all.state);
    EXPECT_EQ(std::vector<float>(all.out.begin() + 3 * s.n_heads * s.d_v, all.out.end()), second.out);
  }
}

TEST(GatedDeltaRule, PoolChangesNoBit) {
  ThreadPool pool(3);
  for (int64_t n_tokens : {1, 7}) {
    const DeltaCase c = delta_case(5, 5, 128, 64, n_tokens, 31);
    for (Isa isa : supported_isas()) {
      const DeltaResult alone = run_delta(c, isa), split = run_delta(c, isa, &pool);
      EXPECT_EQ(alone.state, split.state) << isa_name(isa);
      EXPECT_EQ(alone.out, split.out) << isa_name(isa);
      EXPECT_EQ(alone.states_after, split.states_after) << isa_name(isa);
    }
  }
}

// ---- Mamba2 scan ----

struct SsmCase {
  SsmShape shape{};
  int64_t n_tokens = 0;
  int64_t x_stride = 0, dt_stride = 0, bc_stride = 0;
  std::vector<float> state, x, dt, A, B, C;
};

SsmCase ssm_case(int64_t n_heads, int64_t head_dim, int64_t d_state, int64_t n_groups, int64_t n_tokens,
                 uint32_t seed) {
  SsmCase c;
  c.shape = {n_heads, head_dim, d_state, n_groups};
  c.n_tokens = n_tokens;
  c.x_stride = n_heads * head_dim + 2;
  c.dt_stride = n_heads + 1;
  c.bc_stride = n_groups * d_state + 4;
  c.state = random_floats(n_heads * head_dim * d_state, seed, 0.5f);
  c.x = random_floats(n_tokens * c.x_stride, seed + 1);
  c.dt = random_floats(n_tokens * c.dt_stride, seed + 2, 1.5f);
  c.dt[0] = 25.0f;  // past softplus's cut-off
  c.A = uniform_floats(n_heads, seed + 3, -4.0f, -0.05f);
  c.B = random_floats(n_tokens * c.bc_stride, seed + 4);
  c.C = random_floats(n_tokens * c.bc_stride, seed + 5);
  return c;
}

struct SsmResult {
  std::vector<float> state, y, states_after;
};

SsmResult run_ssm(const SsmCase& c, Isa isa, ThreadPool* pool = nullptr, int64_t t0 = 0, int64_t n = -1,
                  const std::vector<float>& state = {}) {
  if (n < 0) n = c.n_tokens - t0;
  const SsmShape& s = c.shape;
  SsmResult r{state.empty() ? c.state : state, std::vector<float>(n * s.n_heads * s.head_dim),
              std::vector<float>(n * s.n_heads * s.head_dim * s.d_state)};
  ssm_scan_isa(r.state.data(), c.x.data() + t0 * c.x_stride, c.x_stride, c.dt.data() + t0 * c.dt_stride, c.dt_stride,
               c.A.data(), c.B.data() + t0 * c.bc_stride, c.C.data() + t0 * c.bc_stride, c.bc_stride, r.y.data(), n, s,
               r.states_after.data(), pool, isa);
  return r;
}

struct SsmSize {
  int64_t n_heads, head_dim, d_state, n_groups;
};
constexpr SsmSize kSsmSizes[] = {{4, 16, 128, 2}, {6, 5, 16, 1}, {3, 8, 48, 3}, {2, 3, 21, 1}};

TEST(SsmScan, FastPathsMatchTheReference) {
  for (const SsmSize& z : kSsmSizes)
    for (int64_t n_tokens : {1, 7, 40}) {
      const SsmCase c = ssm_case(z.n_heads, z.head_dim, z.d_state, z.n_groups, n_tokens, 41);
      const SsmResult want = run_ssm(c, Isa::kScalar);
      for (Isa isa : fast_isas()) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " d_state " << z.d_state << " head_dim " << z.head_dim
                                          << " groups " << z.n_groups << " tokens " << n_tokens);
        const SsmResult got = run_ssm(c, isa);
        EXPECT_TRUE(all_close(got.y, want.y));
        EXPECT_TRUE(all_close(got.state, want.state));
        EXPECT_TRUE(all_close(got.states_after, want.states_after));
      }
    }
}

TEST(SsmScan, OneHandComputedStepWithGroups) {
  // Two heads in one group each, head_dim 1, d_state 2, from state [1, 1]:
  // delta = softplus(0) = ln 2, h = exp(delta A) + delta x B, y = h . C.
  const SsmShape s{2, 1, 2, 2};
  const std::vector<float> x = {1, 2}, dt = {0, 0}, A = {-1, -2}, B = {1, 0, 0, 1}, C = {1, 1, 2, 0};
  const float d = std::log(2.0f);
  for (Isa isa : supported_isas()) {
    std::vector<float> state(4, 1.0f), y(2);
    ssm_scan_isa(state.data(), x.data(), 2, dt.data(), 2, A.data(), B.data(), C.data(), 2, y.data(), 1, s, nullptr,
                 nullptr, isa);
    const float e0 = std::exp(-d), e1 = std::exp(-2 * d);
    EXPECT_TRUE(all_close(state, {e0 + d, e0, e1, e1 + 2 * d})) << isa_name(isa);
    EXPECT_TRUE(all_close(y, {2 * e0 + d, 2 * e1})) << isa_name(isa);
  }
}

TEST(SsmScan, StatesAfterEqualTokenByTokenAndCallsChain) {
  const SsmCase c = ssm_case(6, 5, 16, 3, 7, 51);
  const SsmShape& s = c.shape;
  const int64_t all_heads = s.n_heads * s.head_dim * s.d_state, y_row = s.n_heads * s.head_dim;
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const SsmResult all = run_ssm(c, isa);
    std::vector<float> state = c.state;
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const SsmResult one = run_ssm(c, isa, nullptr, t, 1, state);
      state = one.state;
      EXPECT_EQ(state, std::vector<float>(all.states_after.begin() + t * all_heads,
                                          all.states_after.begin() + (t + 1) * all_heads)) << t;
      EXPECT_EQ(one.y, std::vector<float>(all.y.begin() + t * y_row, all.y.begin() + (t + 1) * y_row)) << t;
    }
    EXPECT_EQ(state, all.state);
    const SsmResult first = run_ssm(c, isa, nullptr, 0, 2);
    const SsmResult second = run_ssm(c, isa, nullptr, 2, 5, first.state);
    EXPECT_EQ(second.state, all.state);
  }
}

TEST(SsmScan, PoolChangesNoBit) {
  ThreadPool pool(3);
  const SsmCase c = ssm_case(8, 16, 128, 2, 7, 61);
  for (Isa isa : supported_isas()) {
    const SsmResult alone = run_ssm(c, isa), split = run_ssm(c, isa, &pool);
    EXPECT_EQ(alone.state, split.state) << isa_name(isa);
    EXPECT_EQ(alone.y, split.y) << isa_name(isa);
    EXPECT_EQ(alone.states_after, split.states_after) << isa_name(isa);
  }
}

// ---- causal conv1d ----

struct ConvResult {
  std::vector<float> state, y;
};

ConvResult run_conv(const std::vector<float>& state, const std::vector<float>& x, int64_t x_stride,
                    const std::vector<float>& w, const float* bias, int64_t n_tokens, int64_t channels, int d_conv,
                    bool silu, Isa isa) {
  ConvResult r{state, std::vector<float>(n_tokens * channels)};
  causal_conv1d_isa(r.state.data(), x.data(), x_stride, w.data(), bias, r.y.data(), n_tokens, channels, d_conv, silu,
                    isa);
  return r;
}

TEST(CausalConv1d, FastPathsMatchTheReference) {
  for (int64_t channels : {37, 69, 256})
    for (int d_conv : {4, 3, 2})
      for (int64_t n_tokens : {1, 2, 7}) {  // 2: fewer than d_conv - 1 for d_conv 4
        const int64_t x_stride = channels * 3 + 1;  // the conv input is a slice of a wider row
        const auto state = random_floats((d_conv - 1) * channels, 71);
        const auto x = random_floats(n_tokens * x_stride, 72);
        const auto w = random_floats(channels * d_conv, 73, 0.5f);
        const auto bias = random_floats(channels, 74);
        for (bool silu : {true, false})
          for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
            const ConvResult want = run_conv(state, x, x_stride, w, b, n_tokens, channels, d_conv, silu, Isa::kScalar);
            for (Isa isa : fast_isas()) {
              SCOPED_TRACE(::testing::Message() << isa_name(isa) << " channels " << channels << " d_conv " << d_conv
                                                << " tokens " << n_tokens << " silu " << silu << " bias " << (b != nullptr));
              const ConvResult got = run_conv(state, x, x_stride, w, b, n_tokens, channels, d_conv, silu, isa);
              EXPECT_TRUE(all_close(got.y, want.y));
              EXPECT_EQ(got.state, want.state);  // copies, exact
            }
          }
      }
}

TEST(CausalConv1d, HandComputedWindowAndShortState) {
  // One channel, taps [1, 10, 100, 1000] (the last on the newest input), state [1, 2, 3]:
  // token 4 sees [1, 2, 3, 4]; the state becomes [2, 3, 4], then token 5 sees [2, 3, 4, 5].
  const std::vector<float> w = {1, 10, 100, 1000}, x = {4, 5};
  for (Isa isa : supported_isas()) {
    ConvResult r = run_conv({1, 2, 3}, x, 1, w, nullptr, 1, 1, 4, false, isa);
    EXPECT_EQ(r.y, std::vector<float>({4321})) << isa_name(isa);
    EXPECT_EQ(r.state, std::vector<float>({2, 3, 4})) << isa_name(isa);
    r = run_conv(r.state, {5}, 1, w, nullptr, 1, 1, 4, false, isa);
    EXPECT_EQ(r.y, std::vector<float>({5432})) << isa_name(isa);
    EXPECT_EQ(r.state, std::vector<float>({3, 4, 5})) << isa_name(isa);
  }
}

TEST(CausalConv1d, CallsChainThroughTheState) {
  const int64_t channels = 45, n_tokens = 7;
  const int d_conv = 4;
  const auto state = random_floats((d_conv - 1) * channels, 81);
  const auto x = random_floats(n_tokens * channels, 82);
  const auto w = random_floats(channels * d_conv, 83);
  const auto bias = random_floats(channels, 84);
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const ConvResult all = run_conv(state, x, channels, w, bias.data(), n_tokens, channels, d_conv, true, isa);
    // 1 + 1 token (each fewer than d_conv - 1, so the state shifts partly), then 5.
    std::vector<float> s = state, y;
    int64_t t0 = 0;
    for (int64_t n : {1, 1, 5}) {
      const std::vector<float> xs(x.begin() + t0 * channels, x.begin() + (t0 + n) * channels);
      const ConvResult part = run_conv(s, xs, channels, w, bias.data(), n, channels, d_conv, true, isa);
      s = part.state;
      y.insert(y.end(), part.y.begin(), part.y.end());
      t0 += n;
    }
    EXPECT_EQ(s, all.state);
    EXPECT_EQ(y, all.y);
    EXPECT_EQ(s, std::vector<float>(x.end() - (d_conv - 1) * channels, x.end()));
  }
}

// ---- norms ----

TEST(RecurrentNorms, L2NormHeadsIsUnitPerHeadAndEpsFloorsIt) {
  const int64_t n_rows = 3, n_heads = 4, d = 24, stride = n_heads * d + 7;
  auto x = random_floats(n_rows * stride, 91, 3.0f);
  const auto before = x;
  for (int64_t i = 0; i < d; ++i) x[stride + d + i] = 1e-9f;  // row 1, head 1: below eps
  const auto tiny = x;
  l2_norm_heads(x.data(), n_rows, stride, n_heads, d, 1e-6f);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* head = x.data() + r * stride + h * d;
      const float* src = tiny.data() + r * stride + h * d;
      if (r == 1 && h == 1) {
        for (int64_t i = 0; i < d; ++i) EXPECT_FLOAT_EQ(head[i], src[i] / 1e-6f);
        continue;
      }
      double norm = 0, src_norm = 0;
      for (int64_t i = 0; i < d; ++i) norm += double(head[i]) * head[i], src_norm += double(src[i]) * src[i];
      EXPECT_NEAR(norm, 1.0, 1e-5);
      for (int64_t i = 0; i < d; ++i) EXPECT_TRUE(close(head[i], src[i] / std::sqrt(src_norm)));
    }
    for (int64_t i = n_heads * d; i < stride; ++i) EXPECT_EQ(x[r * stride + i], before[r * stride + i]);  // padding
  }
}

TEST(RecurrentNorms, RmsNormGatedBothOrdersInPlace) {
  const int64_t n_rows = 3, n = 96, group = 32, w_len = 32;
  const float eps = 1e-6f;
  const auto x = random_floats(n_rows * n, 101, 2.0f);
  const auto z = random_floats(n_rows * n, 102, 2.0f);
  const auto w = random_floats(n, 103);  // the first w_len for gate-last, all n for gate-first
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  for (bool gate_first : {false, true}) {
    const int64_t wl = gate_first ? n : w_len;
    std::vector<float> y = x;
    rms_norm_gated(y.data(), z.data(), w.data(), wl, y.data(), n_rows, n, group, eps, gate_first);  // in place
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t g0 = 0; g0 < n; g0 += group) {
        double ss = 0;
        for (int64_t i = 0; i < group; ++i) {
          const double v = gate_first ? x[r * n + g0 + i] * silu(z[r * n + g0 + i]) : x[r * n + g0 + i];
          ss += v * v;
        }
        const double inv = 1 / std::sqrt(ss / group + eps);
        for (int64_t i = 0; i < group; ++i) {
          const int64_t c = r * n + g0 + i;
          const double want = gate_first ? x[c] * silu(z[c]) * inv * w[(g0 + i) % wl]
                                         : x[c] * inv * w[(g0 + i) % wl] * silu(z[c]);
          ASSERT_TRUE(close(y[c], want)) << gate_first << " " << c << ": " << y[c] << " vs " << want;
        }
      }
  }
}

}  // namespace
}  // namespace ridge::kernels
