// Paged flash attention against the dense full-softmax reference: causal and sliding
// windows, block boundaries, GQA ratios, prefill chunks continuing a cached prefix,
// recycled blocks, soft-capping, several sequences per call, and rejected bad input.
#include "kernels/attention/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace ridge::kernels {
namespace {

using testing::close;
using testing::random_floats;


struct Case {
  int64_t n_head = 4, n_kv_head = 2, d_head = 16, block_size = 16;
  int64_t n_kv = 37;  // tokens in the cache, the new ones included
  int64_t n_q = 1;    // new tokens: positions n_kv - n_q .. n_kv - 1
  int64_t window = 0;
  float softcap = 0.0f;
  float scale = 0.0f;  // 0: 1/sqrt(d_head)
  bool recycle = true;  // give blocks wholly outside every window the id -1
};

// A sequence's dense K/V scattered into a shuffled block pool (testing::make_paged_kv,
// with exact f32 values and 3 spare blocks).
using PagedSequence = testing::PagedKv;

PagedSequence make_sequence(const Case& c, uint32_t seed) {
  const testing::PagedKvShape shape{c.n_head, c.n_kv_head, c.d_head, c.block_size, c.n_kv,
                                    c.n_q,    c.window,    3,        c.recycle};
  return testing::make_paged_kv(shape, seed, [](float x) { return x; });
}

AttentionParams params_of(const Case& c) {
  return AttentionParams{c.scale > 0 ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.d_head)), c.softcap, c.window};
}

// Runs the paged kernel for one case and compares every output element to the reference.
void check_case(const Case& c, int n_threads = 2, uint32_t seed = 100) {
  SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv_head " << c.n_kv_head << " d_head "
                                    << c.d_head << " block " << c.block_size << " n_kv " << c.n_kv << " n_q "
                                    << c.n_q << " window " << c.window << " softcap " << c.softcap);
  const PagedSequence s = make_sequence(c, seed);
  const PagedKvLayer<float> kv{s.k_pool.data(), s.v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
  std::vector<float> got(s.q.size(), -1.0f), want(s.q.size());
  const AttentionSequence seq{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, got.data()};
  ThreadPool pool(n_threads);
  Scratch scratch(pool.n_threads(), attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  attention(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, params_of(c), pool, scratch);
  attention_reference(s.q.data(), s.q_pos.data(), c.n_q, c.n_head, s.k.data(), s.v.data(), c.n_kv, c.n_kv_head,
                      c.d_head, params_of(c), want.data());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(close(got[i], want[i])) << "element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(Attention, CausalAcrossBlockBoundaries) {
  for (int64_t n_kv : {1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 100}) {
    Case c;
    c.n_kv = n_kv;
    check_case(c);
  }
}

TEST(Attention, GqaRatios) {
  for (int64_t ratio : {1, 2, 4, 8}) {
    Case c;
    c.n_kv_head = 2;
    c.n_head = 2 * ratio;
    c.n_kv = 53;
    c.n_q = 3;
    check_case(c);
  }
}

TEST(Attention, PrefillChunkContinuingCachedPrefix) {
  for (int64_t n_q : {2, 7, 16, 17, 40}) {
    Case c;
    c.n_kv = 57;
    c.n_q = n_q;
    check_case(c, 3);
  }
  Case whole;  // a full prefill: every cached token is new
  whole.n_kv = 33;
  whole.n_q = 33;
  check_case(whole, 3);
}

TEST(Attention, SlidingWindowsWithRecycledBlocks) {
  for (int64_t window : {1, 2, 5, 15, 16, 17, 32, 40, 200}) {
    for (int64_t n_q : {1, 9}) {
      Case c;
      c.n_kv = 81;
      c.n_q = n_q;
      c.window = window;
      check_case(c);
    }
  }
}

TEST(Attention, SoftcapAndLargeScores) {
  for (float softcap : {0.0f, 50.0f, 5.0f}) {
    Case c;
    c.n_kv = 70;
    c.n_q = 4;
    c.softcap = softcap;
    c.scale = 1.0f;  // scores of tens: exercises the running-max rescaling
    check_case(c);
  }
}

TEST(Attention, ModelShapes) {
  Case qwen;  // Qwen2.5 0.5B: 14 heads over 2 KV heads of 64
  qwen.n_head = 14;
  qwen.n_kv_head = 2;
  qwen.d_head = 64;
  qwen.n_kv = 130;
  qwen.n_q = 5;
  check_case(qwen);
  Case gemma = qwen;  // Gemma 3 270M: 4 heads over 1 KV head of 256, local window
  gemma.n_head = 4;
  gemma.n_kv_head = 1;
  gemma.d_head = 256;
  gemma.window = 64;
  gemma.scale = 1.0f / 16.0f;
  check_case(gemma);
  Case odd = qwen;  // odd head size and block size
  odd.d_head = 7;
  odd.block_size = 5;
  odd.n_head = 6;
  odd.n_kv_head = 3;
  odd.window = 11;
  check_case(odd);
}

TEST(Attention, SequencesInOneCallMatchSeparateCalls) {
  // Three sequences sharing one pool layout shape; each gets its own pool here, so run
  // them through a shared pool by concatenating the block pools.
  const std::vector<Case> cases = [] {
    Case a, b, c;
    a.n_kv = 20;
    a.n_q = 1;
    b.n_kv = 50;
    b.n_q = 6;
    c.n_kv = 33;
    c.n_q = 33;
    return std::vector<Case>{a, b, c};
  }();
  const Case& shape = cases[0];
  const int64_t block_floats = shape.block_size * shape.n_kv_head * shape.d_head;
  std::vector<PagedSequence> seqs;
  std::vector<float> k_pool, v_pool;
  for (size_t i = 0; i < cases.size(); ++i) {
    PagedSequence s = make_sequence(cases[i], 200 + static_cast<uint32_t>(i));
    const int32_t offset = static_cast<int32_t>(k_pool.size() / block_floats);
    for (int32_t& id : s.table) id += offset;
    k_pool.insert(k_pool.end(), s.k_pool.begin(), s.k_pool.end());
    v_pool.insert(v_pool.end(), s.v_pool.begin(), s.v_pool.end());
    seqs.push_back(std::move(s));
  }
  const PagedKvLayer<float> kv{k_pool.data(), v_pool.data(), static_cast<int64_t>(k_pool.size() / block_floats),
                               shape.block_size, shape.n_kv_head, shape.d_head};
  std::vector<std::vector<float>> together(cases.size()), alone(cases.size());
  std::vector<AttentionSequence> batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    together[i].assign(seqs[i].q.size(), 0.0f);
    alone[i].assign(seqs[i].q.size(), 0.0f);
    batch.push_back({seqs[i].q.data(), seqs[i].q_pos.data(), cases[i].n_q, seqs[i].table, cases[i].n_kv,
                     together[i].data()});
  }
  ThreadPool pool(3);
  Scratch scratch(3, attention_scratch_floats(shape.n_head, shape.n_kv_head, shape.d_head, shape.block_size));
  attention(kv, std::span<const AttentionSequence>(batch), shape.n_head, params_of(shape), pool, scratch);
  for (size_t i = 0; i < cases.size(); ++i) {
    AttentionSequence one = batch[i];
    one.out = alone[i].data();
    attention(kv, std::span<const AttentionSequence>(&one, 1), shape.n_head, params_of(shape), pool, scratch);
    EXPECT_EQ(together[i], alone[i]) << "sequence " << i;
    std::vector<float> want(seqs[i].q.size());
    attention_reference(seqs[i].q.data(), seqs[i].q_pos.data(), cases[i].n_q, shape.n_head, seqs[i].k.data(),
                        seqs[i].v.data(), cases[i].n_kv, shape.n_kv_head, shape.d_head, params_of(shape), want.data());
    for (size_t e = 0; e < want.size(); ++e) ASSERT_TRUE(close(together[i][e], want[e])) << "sequence " << i;
  }
}

TEST(Attention, RejectsBadInput) {
  Case c;
  c.n_kv = 40;
  c.n_q = 2;
  c.window = 8;
  PagedSequence s = make_sequence(c, 300);
  const PagedKvLayer<float> kv{s.k_pool.data(), s.v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
  std::vector<float> out(s.q.size());
  ThreadPool pool(2);
  Scratch scratch(2, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
  auto run = [&](const AttentionSequence& seq, const AttentionParams& p) {
    attention(kv, std::span<const AttentionSequence>(&seq, 1), c.n_head, p, pool, scratch);
  };
  const AttentionSequence good{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, out.data()};
  EXPECT_NO_THROW(run(good, params_of(c)));
  // Without the window, the recycled first block is visible: an error, not garbage.
  AttentionParams no_window = params_of(c);
  no_window.window = 0;
  EXPECT_THROW(run(good, no_window), Error);
  // Position outside the cache.
  std::vector<int32_t> bad_pos = {38, 40};
  EXPECT_THROW(run({s.q.data(), bad_pos.data(), 2, s.table, c.n_kv, out.data()}, params_of(c)), Error);
  // Block table too short for n_kv.
  EXPECT_THROW(run({s.q.data(), s.q_pos.data(), 2, std::span<const int32_t>(s.table).first(2), c.n_kv, out.data()},
                   params_of(c)),
               Error);
  // Block id beyond the pool.
  std::vector<int32_t> bad_table = s.table;
  bad_table.back() = static_cast<int32_t>(s.n_blocks);
  EXPECT_THROW(run({s.q.data(), s.q_pos.data(), 2, bad_table, c.n_kv, out.data()}, params_of(c)), Error);
  // Heads that do not split into KV groups, and a scratch that is too small.
  EXPECT_THROW(attention(kv, std::span<const AttentionSequence>(&good, 1), 3, params_of(c), pool, scratch), Error);
  Scratch tiny(2, 4);
  EXPECT_THROW(attention(kv, std::span<const AttentionSequence>(&good, 1), c.n_head, params_of(c), pool, tiny), Error);
}

}  // namespace
}  // namespace ridge::kernels

namespace ridge::kernels {
namespace {

// The vectorized exp of the softmax against std::exp over the range scores take.
TEST(AttentionInnerLoops, ExpSumMatchesStdExp) {
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no avx2";
  std::vector<float> x;
  for (float v = -86.0f; v <= 0.0f; v += 0.0137f) x.push_back(v);
  x.push_back(0.0f);
  std::vector<float> fast = x, slow = x;
  const float fast_sum = attention_exp_sum_avx2(fast.data(), static_cast<int64_t>(fast.size()), 0.0f);
  const float slow_sum = attention_exp_sum_scalar(slow.data(), static_cast<int64_t>(slow.size()), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(fast[i], slow[i], 3e-7f * slow[i] + 1e-37f) << "exp(" << x[i] << ")";
  EXPECT_NEAR(fast_sum, slow_sum, 1e-5f * slow_sum);
}

// Every shape of the scalar and AVX2 loops, odd head counts and d_head not a multiple of 8.
TEST(AttentionInnerLoops, Avx2MatchesScalar) {
  if (!cpu_supports(Isa::kAvx2)) GTEST_SKIP() << "skipped: no avx2";
  for (int64_t n_rep : {1, 2, 3, 5, 7}) {
    for (int64_t d_head : {8, 20, 64, 136}) {
      const int64_t count = 13, row_stride = d_head + 5, stride = 16;
      const auto q = testing::random_floats(n_rep * d_head, 1);
      const auto k = testing::random_floats(count * row_stride, 2);
      std::vector<float> fast(n_rep * stride, 0.0f), slow(fast.size(), 0.0f);
      attention_scores_avx2(q.data(), n_rep, d_head, k.data(), row_stride, count, 0.3f, fast.data(), stride);
      attention_scores_scalar(q.data(), n_rep, d_head, k.data(), row_stride, count, 0.3f, slow.data(), stride);
      for (size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], slow[i], 1e-5f + 1e-5f * std::fabs(slow[i]));
      std::vector<float> acc_fast = testing::random_floats(n_rep * d_head, 3), acc_slow = acc_fast;
      attention_accumulate_avx2(fast.data(), stride, n_rep, k.data(), row_stride, count, d_head, acc_fast.data(), d_head);
      attention_accumulate_scalar(fast.data(), stride, n_rep, k.data(), row_stride, count, d_head, acc_slow.data(),
                                  d_head);
      for (size_t i = 0; i < acc_fast.size(); ++i)
        ASSERT_NEAR(acc_fast[i], acc_slow[i], 1e-4f + 1e-5f * std::fabs(acc_slow[i]));
    }
  }
}

// A decode token is split over threads (few items): its group's query heads cut into
// parts, and for long contexts its key chunks spread too. The same token among enough
// others is not split. Both must give the same bits, and match the reference.
TEST(Attention, SplitAcrossThreadsEqualsUnsplit) {
  struct Split {
    int64_t n_head, n_kv;
    int threads;
  };
  // Long contexts: key chunks only. Short ones (one chunk): head parts, 1, 1, 2 heads on
  // 3 threads. In between: parts whose chunks are split too. One head: nothing to cut.
  for (const Split& split : {Split{4, 1100, 3}, Split{3, 300, 2}, Split{4, 100, 2}, Split{4, 100, 3},
                             Split{2, 300, 4}, Split{4, 300, 3}, Split{1, 100, 3}}) {
    Case c;
    c.n_head = split.n_head;
    c.n_kv_head = 1;
    c.d_head = 64;
    c.n_kv = split.n_kv;
    c.n_q = 1;
    SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv " << c.n_kv << " threads " << split.threads);
    PagedSequence s = make_sequence(c, 77);
    const PagedKvLayer<float> kv{s.k_pool.data(), s.v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
    for (Isa isa : testing::loop_isas()) {
      ThreadPool pool(split.threads);
      Scratch scratch(split.threads, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
      scratch.reserve_shared(size_t{1} << 20);
      std::vector<float> alone(s.q.size()), crowd(s.q.size() * 4);
      const AttentionSequence one{s.q.data(), s.q_pos.data(), 1, s.table, c.n_kv, alone.data()};
      attention_isa(kv, std::span<const AttentionSequence>(&one, 1), c.n_head, params_of(c), pool, scratch, isa);
      // Four copies of the token: four items, no split.
      std::vector<AttentionSequence> many;
      for (int i = 0; i < 4; ++i)
        many.push_back({s.q.data(), s.q_pos.data(), 1, s.table, c.n_kv, crowd.data() + i * s.q.size()});
      attention_isa(kv, std::span<const AttentionSequence>(many), c.n_head, params_of(c), pool, scratch, isa);
      for (int i = 0; i < 4; ++i)
        for (size_t e = 0; e < alone.size(); ++e) ASSERT_EQ(alone[e], crowd[i * s.q.size() + e]) << "copy " << i;
      std::vector<float> want(s.q.size());
      attention_reference(s.q.data(), s.q_pos.data(), 1, c.n_head, s.k.data(), s.v.data(), c.n_kv, c.n_kv_head,
                          c.d_head, params_of(c), want.data());
      for (size_t e = 0; e < want.size(); ++e) ASSERT_TRUE(close(alone[e], want[e])) << e;
    }
  }
}

// Several query tokens of one sequence (a prefill chunk, a speculative step's drafts) go
// through tiles that read each K/V block once for all of them. Every token must get the
// bits it gets alone (speculative decoding's greedy output depends on it), across block
// and 256-key chunk boundaries, windows, softcap and GQA ratios.
TEST(Attention, TilesOfQueryTokensEqualEachTokenAlone) {
  struct Tiled {
    int64_t n_head, n_kv_head, n_kv, n_q, window;
    float softcap;
    int threads;
  };
  for (const Tiled& t : {Tiled{4, 2, 37, 9, 0, 0.0f, 2}, Tiled{8, 2, 300, 9, 0, 0.0f, 2},
                         Tiled{4, 1, 600, 33, 0, 0.0f, 3}, Tiled{4, 4, 270, 20, 100, 0.0f, 2},
                         Tiled{6, 2, 530, 17, 257, 30.0f, 2}, Tiled{2, 2, 16, 16, 0, 0.0f, 1},
                         Tiled{4, 1, 2048, 5, 512, 0.0f, 2}}) {
    Case c;
    c.n_head = t.n_head;
    c.n_kv_head = t.n_kv_head;
    c.d_head = 32;
    c.n_kv = t.n_kv;
    c.n_q = t.n_q;
    c.window = t.window;
    c.softcap = t.softcap;
    SCOPED_TRACE(::testing::Message() << "n_head " << c.n_head << " n_kv_head " << c.n_kv_head << " n_kv " << c.n_kv
                                      << " n_q " << c.n_q << " window " << c.window << " threads " << t.threads);
    const PagedSequence s = make_sequence(c, 31);
    const PagedKvLayer<float> kv{s.k_pool.data(), s.v_pool.data(), s.n_blocks, c.block_size, c.n_kv_head, c.d_head};
    for (Isa isa : testing::loop_isas()) {
      ThreadPool pool(t.threads);
      Scratch scratch(t.threads, attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, c.block_size));
      scratch.reserve_shared(size_t{1} << 20);
      std::vector<float> together(s.q.size(), -1.0f), alone(s.q.size(), -2.0f);
      const AttentionSequence all{s.q.data(), s.q_pos.data(), c.n_q, s.table, c.n_kv, together.data()};
      attention_isa(kv, std::span<const AttentionSequence>(&all, 1), c.n_head, params_of(c), pool, scratch, isa);
      const int64_t per_token = c.n_head * c.d_head;
      for (int64_t q = 0; q < c.n_q; ++q) {
        const AttentionSequence one{s.q.data() + q * per_token, s.q_pos.data() + q, 1, s.table, c.n_kv,
                                    alone.data() + q * per_token};
        attention_isa(kv, std::span<const AttentionSequence>(&one, 1), c.n_head, params_of(c), pool, scratch, isa);
      }
      for (size_t e = 0; e < together.size(); ++e)
        ASSERT_EQ(together[e], alone[e]) << "token " << e / per_token << ", element " << e % per_token;
      std::vector<float> want(s.q.size());
      attention_reference(s.q.data(), s.q_pos.data(), c.n_q, c.n_head, s.k.data(), s.v.data(), c.n_kv, c.n_kv_head,
                          c.d_head, params_of(c), want.data());
      for (size_t e = 0; e < want.size(); ++e) ASSERT_TRUE(close(together[e], want[e])) << e;
    }
  }
}

}  // namespace
}  // namespace ridge::kernels
