// Kernel throughput: weight matmul in bytes of weights per second (decode: one token;
// a small batch shows the weight reuse), and paged attention over a 4k-token context.
//
//   build-*/bench/kernels_benchmark --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"

namespace ridge::kernels {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Enough copies of one matrix to exceed the last-level cache, used in turn, so the
// figure is the DRAM stream rate a real model's weights see.
constexpr size_t kStreamBytes = size_t{128} << 20;
constexpr int64_t kMatIn = 4096, kMatOut = 4096;

void BM_Matmul(benchmark::State& state, DType type, int n_threads) {
  const int64_t n_tokens = state.range(0);
  const TypeTraits& traits = type_traits(type);
  if (type != DType::F32 && (traits.from_float == nullptr || traits.to_float == nullptr)) {
    state.SkipWithError("no quantizer for this type");
    return;
  }
  const size_t bytes = row_size(type, kMatIn) * kMatOut;
  const auto values = random_floats(static_cast<size_t>(kMatIn * kMatOut), 1);
  std::vector<uint8_t> one(bytes);
  for (int64_t o = 0; o < kMatOut; ++o) {
    uint8_t* row = one.data() + o * row_size(type, kMatIn);
    if (type == DType::F32)
      std::memcpy(row, values.data() + o * kMatIn, kMatIn * sizeof(float));
    else
      traits.from_float(values.data() + o * kMatIn, row, kMatIn);
  }
  const size_t copies = std::max<size_t>(1, (kStreamBytes + bytes - 1) / bytes);
  std::vector<uint8_t> all(bytes * copies);
  for (size_t c = 0; c < copies; ++c) std::memcpy(all.data() + c * bytes, one.data(), bytes);

  ThreadPool pool(n_threads);
  const WeightMatrix w0 = weight_matrix(type, kMatIn, kMatOut, all.data());
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(w0));
  const auto x = random_floats(static_cast<size_t>(n_tokens * kMatIn), 2);
  std::vector<float> y(static_cast<size_t>(n_tokens * kMatOut));
  size_t next = 0;
  for (auto _ : state) {
    const WeightMatrix w = weight_matrix(type, kMatIn, kMatOut, all.data() + next * bytes);
    matmul(w, x.data(), y.data(), n_tokens, pool, scratch);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens),
                                                  benchmark::Counter::kIsRate);
}

void register_matmul() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q6_K, DType::Q4_K}) {
    for (int threads : {1, hw}) {
      if (threads == 1 && hw == 1 && type != DType::F32) continue;
      const std::string name = std::string("Matmul/") + std::string(dtype_name(type)) + "/threads:" +
                               std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, type, threads)
          ->Arg(1)
          ->Arg(8)
          ->ArgName("n_tokens")
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      if (threads == hw) break;
    }
  }
}

// Decode-time attention: one new token at position n_ctx - 1 over n_ctx cached tokens.
void BM_Attention(benchmark::State& state, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  const int64_t n_ctx = state.range(0), block_size = 16;
  const int64_t n_q = state.range(1);
  const int64_t n_blocks = n_ctx / block_size;
  const int64_t row = n_kv_head * d_head;
  const auto k = random_floats(static_cast<size_t>(n_blocks * block_size * row), 1);
  const auto v = random_floats(k.size(), 2);
  const auto q = random_floats(static_cast<size_t>(n_q * n_head * d_head), 3);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(4));
  std::vector<int32_t> pos(static_cast<size_t>(n_q));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(n_ctx - n_q));
  std::vector<float> out(q.size());
  ThreadPool pool;
  Scratch scratch(pool.n_threads(), attention_scratch_floats(n_head, n_kv_head, d_head, block_size));
  const PagedKvLayer<float> kv{k.data(), v.data(), n_blocks, block_size, n_kv_head, d_head};
  const AttentionSequence seq{q.data(), pos.data(), n_q, table, n_ctx, out.data()};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(d_head)), 0.0f, 0};
  for (auto _ : state) {
    attention(kv, std::span<const AttentionSequence>(&seq, 1), n_head, params, pool, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V bytes a decode token reads (each once per GQA group).
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * k.size() * sizeof(float)));
}

BENCHMARK_CAPTURE(BM_Attention, qwen2_0_5b_heads14_kv2_d64, 14, 2, 64)
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Attention, gemma3_270m_heads4_kv1_d256, 4, 1, 256)
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

const int kRegistered = (register_matmul(), 0);

}  // namespace
}  // namespace ridge::kernels

BENCHMARK_MAIN();
