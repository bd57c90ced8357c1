// Kernel throughput. Decode GEMV (one token) in GB/s of weights streamed from DRAM, per
// weight type and thread count; GEMM at 64 tokens in GFLOP/s (2 * n_in * n_out * tokens
// per call); the scalar references for scale; the dequantizers (to_float) in elements/s;
// paged attention at a 4k-token context; and a decode step of the gated delta rule in GB/s
// of recurrent state.
// `ridge bench` (or `ridge roofline --device this`) measures the read bandwidth the Gemv
// figures approach.
//
//   build-*/bench/kernels_benchmark --benchmark_filter='Gemv'
//   build-*/bench/kernels_benchmark --benchmark_filter='Gemm/q4_K'
//   build-*/bench/kernels_benchmark --benchmark_filter='GatedDeltaDecode'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/attention/attention.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops_avx2.h"
#include "kernels/ops/ops_avx512.h"
#include "kernels/recurrent/recurrent.h"

namespace ridge::kernels {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// Enough copies of one matrix to exceed the last-level cache, used in turn, so the
// decode figure is the DRAM stream rate a real model's weights see.
constexpr size_t kStreamBytes = size_t{192} << 20;

struct MatrixSet {
  std::vector<uint8_t> all;
  size_t bytes = 0;
  size_t copies = 1;
};

MatrixSet make_matrices(DType type, int64_t n_in, int64_t n_out, bool stream) {
  MatrixSet m;
  m.bytes = row_size(type, n_in) * n_out;
  const auto values = random_floats(static_cast<size_t>(n_in * n_out), 1);
  std::vector<uint8_t> one(m.bytes);
  // A repacked layout (gemm/repack.h): its source type quantized, then repacked.
  const DType stored = type == DType::Q4_K_R16 ? DType::Q4_K : type;
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = one.data() + o * row_size(type, n_in);
    if (type == DType::F32)
      std::memcpy(row, values.data() + o * n_in, n_in * sizeof(float));
    else
      type_traits(stored).from_float(values.data() + o * n_in, row, n_in);
  }
  if (stored != type) {  // n_out a multiple of 16 here: the repacked bytes are as many
    AlignedVector<uint8_t> repacked(repacked_bytes(type, n_in, n_out));
    repack(weight_matrix(stored, n_in, n_out, one.data()), type, repacked.data());
    std::memcpy(one.data(), repacked.data(), m.bytes);
  }
  m.copies = stream ? std::max<size_t>(1, (kStreamBytes + m.bytes - 1) / m.bytes) : 1;
  m.all.resize(m.bytes * m.copies);
  for (size_t c = 0; c < m.copies; ++c) std::memcpy(m.all.data() + c * m.bytes, one.data(), m.bytes);
  return m;
}

// Decode: one token, weights streamed from DRAM.
void BM_Gemv(benchmark::State& state, DType type, int n_threads, Isa isa, int64_t n_in, int64_t n_out) {
  const int64_t n_tokens = state.range(0);
  const MatrixSet m = make_matrices(type, n_in, n_out, /*stream=*/true);
  ThreadPool pool(n_threads);
  const WeightMatrix w0 = weight_matrix(type, n_in, n_out, m.all.data());
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(w0));
  scratch.reserve_shared(matmul_shared_bytes(w0, n_tokens));
  const auto x = random_floats(static_cast<size_t>(n_in * n_tokens), 2);
  std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
  size_t next = 0;
  for (auto _ : state) {
    const WeightMatrix w = weight_matrix(type, n_in, n_out, m.all.data() + next * m.bytes);
    matmul_isa(w, x.data(), y.data(), n_tokens, pool, scratch, isa);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % m.copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * m.bytes));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n_tokens), benchmark::Counter::kIsRate);
}

// Decode against a matrix that stays in L2: the kernel's compute ceiling in GB/s. When
// Gemv (from DRAM) is close to this, the kernel, not memory, limits decode.
void BM_GemvL2(benchmark::State& state, DType type) {
  const int64_t n_in = 1024, n_out = 512;
  const MatrixSet m = make_matrices(type, n_in, n_out, /*stream=*/false);
  ThreadPool pool(1);
  const WeightMatrix w = weight_matrix(type, n_in, n_out, m.all.data());
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(w));
  scratch.reserve_shared(matmul_shared_bytes(w, 1));
  const auto x = random_floats(static_cast<size_t>(n_in), 2);
  std::vector<float> y(static_cast<size_t>(n_out));
  for (auto _ : state) {
    matmul(w, x.data(), y.data(), 1, pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * m.bytes));
}

// Prefill and batched decode: 16, 64 or 512 tokens against one matrix that stays in the last-level cache.
void BM_GemmShape(benchmark::State& state, DType type, int n_threads, int64_t n_in, int64_t n_out) {
  const int64_t n_tokens = state.range(0);
  const MatrixSet m = make_matrices(type, n_in, n_out, /*stream=*/false);
  ThreadPool pool(n_threads);
  const WeightMatrix w = weight_matrix(type, n_in, n_out, m.all.data());
  Scratch scratch(pool.n_threads(), matmul_scratch_floats(w));
  scratch.reserve_shared(matmul_shared_bytes(w, n_tokens));
  const auto x = random_floats(static_cast<size_t>(n_tokens * n_in), 2);
  AlignedVector<float> y(static_cast<size_t>(n_tokens * n_out));  // as the model's rows are
  for (auto _ : state) {
    matmul(w, x.data(), y.data(), n_tokens, pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * n_in * n_out * n_tokens,
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n_tokens), benchmark::Counter::kIsRate);
}
void BM_Gemm(benchmark::State& state, DType type, int n_threads) { BM_GemmShape(state, type, n_threads, 2048, 2048); }

// A type's to_float (the trait table's dequantizer, which --matmul float and types without
// a kernel run on every row of every step) over 256 rows of 4096 elements, one thread, in
// elements/s. The rows stay in L2, so this is the conversion's own rate.
void BM_Dequantize(benchmark::State& state, DType type) {
  const int64_t n_in = 4096, n_rows = 256;
  const MatrixSet m = make_matrices(type, n_in, n_rows, /*stream=*/false);
  const ToFloatFn to_float = type_traits(type).to_float;
  const size_t row_bytes = row_size(type, n_in);
  std::vector<float> out(static_cast<size_t>(n_in));
  for (auto _ : state) {
    for (int64_t r = 0; r < n_rows; ++r) {
      to_float(m.all.data() + static_cast<size_t>(r) * row_bytes, out.data(), n_in);
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n_in * n_rows,
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0,
                        DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_K_R16};

void register_matmul() {
  const int hw = hardware_threads();
  // Gemma 3 270M's tied output projection: 262144 short rows of 640 (Q8_0), 68% of the
  // bytes a decode step reads.
  for (int threads : {1, hw})
    benchmark::RegisterBenchmark(("Gemv/q8_0_640x262144/threads:" + std::to_string(threads)).c_str(), BM_Gemv,
                                 DType::Q8_0, threads, best_isa(), 640, 262144)
        ->Arg(1)
        ->Arg(4)
        ->Arg(8)
        ->Arg(16)
        ->ArgName("n_tokens")
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  for (DType type : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                     DType::Q5_K, DType::Q6_K})
    benchmark::RegisterBenchmark(("Dequantize/" + std::string(dtype_name(type))).c_str(), BM_Dequantize, type)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  // Qwen2.5-Coder 1.5B (Q4_K_M) decode: rows of 1536 inputs, six 256-element blocks.
  // ffn_gate/ffn_up (8960 rows, Q4_K) and the output projection (151936 rows, Q6_K, 18%
  // of the bytes a step reads): short rows, where a decode tile's row length, not the
  // square 4096x4096 case, decides how well the weights stream. 16 tokens: a batched
  // decode step of 16 sequences, its weights from DRAM as well.
  for (const auto& [type, n_out] : {std::pair{DType::Q4_K, int64_t{8960}}, std::pair{DType::Q4_K_R16, int64_t{8960}},
                                    std::pair{DType::Q6_K, int64_t{151936}}})
    for (int threads : {1, hw}) {
      benchmark::RegisterBenchmark(("Gemv/" + std::string(dtype_name(type)) + "_1536x" + std::to_string(n_out) +
                                    "/threads:" + std::to_string(threads))
                                       .c_str(),
                                   BM_Gemv, type, threads, best_isa(), 1536, n_out)
          ->Arg(1)
          ->Arg(16)
          ->ArgName("n_tokens")
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      if (hw == 1) break;
    }
  // Qwen2.5-Coder 0.5B's Q4_K matrices: ffn_down, long rows (4864 inputs, 19 blocks) and
  // 896 of them, as stored and repacked (gemm/repack.h), decode at 2 threads.
  for (DType type : {DType::Q4_K, DType::Q4_K_R16})
    benchmark::RegisterBenchmark(("Gemv/" + std::string(dtype_name(type)) + "_4864x896/threads:" + std::to_string(hw)).c_str(),
                                 BM_Gemv, type, hw, best_isa(), 4864, 896)
        ->Arg(1)
        ->ArgName("n_tokens")
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  const bool avx2 = best_isa() != Isa::kScalar;
  for (DType type : kTypes) {
    const std::string t(dtype_name(type));
    for (int threads : {1, hw}) {
      benchmark::RegisterBenchmark(("Gemv/" + t + "/threads:" + std::to_string(threads)).c_str(), BM_Gemv, type,
                                   threads, best_isa(), 4096, 4096)
          ->Arg(1)
          ->ArgName("n_tokens")
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      if (hw == 1) break;
    }
    if (avx2 && type != DType::F32)
      benchmark::RegisterBenchmark(("Gemv/" + t + "/scalar/threads:1").c_str(), BM_Gemv, type, 1, Isa::kScalar, 4096,
                                   4096)
          ->Arg(1)
          ->ArgName("n_tokens")
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    if (type != DType::F32)
      benchmark::RegisterBenchmark(("GemvL2/" + t).c_str(), BM_GemvL2, type)->UseRealTime()->Unit(benchmark::kMicrosecond);
    for (int threads : {1, hw}) {
      benchmark::RegisterBenchmark(("Gemm/" + t + "/threads:" + std::to_string(threads)).c_str(), BM_Gemm, type,
                                   threads)
          ->Arg(16)  // a batched decode step of 16 sequences
          ->Arg(64)
          ->Arg(512)  // a pp512 prompt in one step
          ->ArgName("n_tokens")
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      if (hw == 1) break;
    }
  }
  // A prompt step (512 tokens; 2048, perplexity's batch) through Qwen2.5-Coder 1.5B's FFN
  // (Q4_K_M): ffn_up/ffn_gate (1536 inputs, 8960 rows) and ffn_down (8960 inputs, 1536
  // rows; Q6_K in half the layers): the long rows of ffn_down hold few rows per L2-sized
  // chunk of packed panels, unlike the square case; the same ffn_down in Q8_0, as a Q8_0
  // model has it. And the same matrices at 16 tokens, a batched decode step, in cache.
  for (const auto& [type, n_in, n_out] : {std::tuple{DType::Q4_K, int64_t{1536}, int64_t{8960}},
                                          std::tuple{DType::Q4_K_R16, int64_t{1536}, int64_t{8960}},
                                          std::tuple{DType::Q4_K, int64_t{8960}, int64_t{1536}},
                                          std::tuple{DType::Q4_K_R16, int64_t{8960}, int64_t{1536}},
                                          std::tuple{DType::Q6_K, int64_t{8960}, int64_t{1536}},
                                          std::tuple{DType::Q8_0, int64_t{8960}, int64_t{1536}}})
    benchmark::RegisterBenchmark(("GemmShape/" + std::string(dtype_name(type)) + "_" + std::to_string(n_in) + "x" +
                                  std::to_string(n_out) + "/threads:1")
                                     .c_str(),
                                 BM_GemmShape, type, 1, n_in, n_out)
        ->Arg(16)
        ->Arg(512)
        ->Arg(2048)
        ->ArgName("n_tokens")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// Decode-time attention: n_q new tokens at the end of n_ctx cached tokens.
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
  scratch.reserve_shared(size_t{1} << 20);  // as a model's matmul scratch provides: room to split one token
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
    ->Args({512, 64})
    ->ArgNames({"n_ctx", "n_q"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Attention, gemma3_270m_heads4_kv1_d256, 4, 1, 256)
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// A paged cache of `values` random numbers in the encoding `Cache` (f16 bits, or Q8_0/Q4_0
// blocks of 32).
template <class Cache>
std::vector<Cache> random_cache(int64_t values, uint64_t seed) {
  const auto f = random_floats(static_cast<size_t>(values), seed);
  if constexpr (std::is_same_v<Cache, uint16_t>) {
    std::vector<uint16_t> out;
    for (float x : f) out.push_back(fp32_to_fp16(x));
    return out;
  } else {
    std::vector<Cache> out(static_cast<size_t>(values / 32));
    if constexpr (std::is_same_v<Cache, BlockQ8_0>) quantize_row_q8_0(f.data(), out.data(), values);
    else quantize_row_q4_0(f.data(), out.data(), values);
    return out;
  }
}

// Attention on one thread, per step family: prefill of n_q tokens after n_ctx - n_q
// cached ones (n_q = 512 at 4608 is `ridge bench -p 512 -d 4096`'s last chunk), or decode
// (n_q = 1). Process CPU time, so other work on the machine does not count.
template <class Cache>
void BM_Attention(benchmark::State& state, Isa isa, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  const int64_t n_ctx = state.range(0), n_q = state.range(1), block_size = 16;
  const int64_t n_blocks = n_ctx / block_size, values = n_blocks * block_size * n_kv_head * d_head;
  const auto k = random_cache<Cache>(values, 1), v = random_cache<Cache>(values, 2);
  const auto q = random_floats(static_cast<size_t>(n_q * n_head * d_head), 3);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> pos(static_cast<size_t>(n_q));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(n_ctx - n_q));
  std::vector<float> out(q.size());
  ThreadPool pool(1);
  Scratch scratch(pool.n_threads(), attention_scratch_floats(n_head, n_kv_head, d_head, block_size));
  scratch.reserve_shared(size_t{1} << 20);
  const PagedKvLayer<Cache> kv{k.data(), v.data(), n_blocks, block_size, n_kv_head, d_head};
  const AttentionSequence seq{q.data(), pos.data(), n_q, table, n_ctx, out.data()};
  const AttentionParams params{1.0f / std::sqrt(static_cast<float>(d_head)), 0.0f, 0};
  for (auto _ : state) {
    attention_isa(kv, std::span<const AttentionSequence>(&seq, 1), n_head, params, pool, scratch, isa);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_q), benchmark::Counter::kIsRate);
}

// An f16 cache: the AMX step (Isa::kAmxInt8 on an AMX-BF16 CPU) against the AVX-512 and
// AVX2 ones.
void BM_AttentionF16(benchmark::State& state, Isa isa, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  if (!cpu_supports(isa) || (isa == Isa::kAmxInt8 && !attention_tile_amx_usable(d_head))) {
    state.SkipWithError("this CPU lacks the ISA (or AMX-BF16)");
    return;
  }
  BM_Attention<uint16_t>(state, isa, n_head, n_kv_head, d_head);
}

BENCHMARK_CAPTURE(BM_AttentionF16, avx512_qwen2_0_5b, Isa::kAvx512Vnni, 14, 2, 64)
    ->Args({4608, 512})
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionF16, avx2_qwen2_0_5b, Isa::kAvx2, 14, 2, 64)
    ->Args({4608, 512})
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionF16, amx_qwen2_0_5b, Isa::kAmxInt8, 14, 2, 64)
    ->Args({4608, 512})
    ->Args({4096, 1})
    ->ArgNames({"n_ctx", "n_q"})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

// The same shapes over Q8_0 and Q4_0 caches: the AVX-512 VNNI and AVX2 tiled steps.
template <class Block>
void BM_AttentionQuant(benchmark::State& state, Isa isa, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  if (!cpu_supports(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  BM_Attention<Block>(state, isa, n_head, n_kv_head, d_head);
}

void BM_AttentionQ8_0(benchmark::State& state, Isa isa, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  BM_AttentionQuant<BlockQ8_0>(state, isa, n_head, n_kv_head, d_head);
}
void BM_AttentionQ4_0(benchmark::State& state, Isa isa, int64_t n_head, int64_t n_kv_head, int64_t d_head) {
  BM_AttentionQuant<BlockQ4_0>(state, isa, n_head, n_kv_head, d_head);
}

#define RIDGE_ATTENTION_QUANT_BENCH(fn, name, isa)              \
  BENCHMARK_CAPTURE(fn, name##_qwen2_0_5b, isa, 14, 2, 64)      \
      ->Args({4608, 512})                                        \
      ->Args({4096, 1})                                          \
      ->ArgNames({"n_ctx", "n_q"})                               \
      ->MeasureProcessCPUTime()                                  \
      ->Unit(benchmark::kMillisecond);
RIDGE_ATTENTION_QUANT_BENCH(BM_AttentionQ8_0, avx512, Isa::kAvx512Vnni)
RIDGE_ATTENTION_QUANT_BENCH(BM_AttentionQ8_0, avx2, Isa::kAvx2)
RIDGE_ATTENTION_QUANT_BENCH(BM_AttentionQ4_0, avx512, Isa::kAvx512Vnni)
RIDGE_ATTENTION_QUANT_BENCH(BM_AttentionQ4_0, avx2, Isa::kAvx2)
#undef RIDGE_ATTENTION_QUANT_BENCH

// The gated activation of a prompt's feed-forward layer: a row of Qwen2.5 1.5B's 8960
// gate and up values at a time, as matmul_glu forms it, per SIMD width (bit-identical
// outputs; skipped where the CPU lacks the width). Elements per second.
void BM_Swiglu(benchmark::State& state, Isa isa) {
  if (!cpu_supports(isa)) {
    state.SkipWithError("the CPU lacks this ISA");
    return;
  }
  const int64_t n = 8960;
  const auto gate = random_floats(static_cast<size_t>(n), 8), up = random_floats(static_cast<size_t>(n), 9);
  AlignedVector<float> y(static_cast<size_t>(n));
  const auto fn = isa_has_avx512(isa) ? swiglu_avx512 : swiglu_avx2;
  for (auto _ : state) {
    fn(gate.data(), up.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["elements/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n,
                                                    benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_Swiglu, avx512, Isa::kAvx512Vnni);
BENCHMARK_CAPTURE(BM_Swiglu, avx2, Isa::kAvx2);

// One decode step of Qwen3-Next's gated delta rule (32 value heads over 16 key heads,
// d_k = d_v = 128: a 2 MiB f32 state per layer), in GB/s of state read (it is written back
// too), wall time. Each iteration takes the next of n_layers states: 36 (72 MiB, one per
// linear-attention layer of the 80B model) brings them from DRAM as in a real step, 1 keeps
// the one state in cache, for the kernel's own ceiling. The scalar reference for scale.
// Skipped where the CPU lacks the ISA.
void BM_GatedDeltaDecode(benchmark::State& state, Isa isa, int n_threads, int64_t n_layers) {
  if (!cpu_supports(isa)) {
    state.SkipWithError("the CPU lacks this ISA");
    return;
  }
  const DeltaNetShape shape{32, 16, 128, 128, 1.0f / std::sqrt(128.0f)};
  const int64_t state_floats = shape.n_heads * shape.d_v * shape.d_k;
  AlignedVector<float> states(static_cast<size_t>(n_layers * state_floats));
  const auto init = random_floats(static_cast<size_t>(state_floats), 10);
  for (int64_t l = 0; l < n_layers; ++l) std::copy(init.begin(), init.end(), states.begin() + l * state_floats);
  auto q = random_floats(static_cast<size_t>(shape.n_k_heads * shape.d_k), 11);
  auto k = random_floats(q.size(), 12);
  l2_norm_heads(q.data(), 1, q.size(), shape.n_k_heads, shape.d_k, 1e-6f);
  l2_norm_heads(k.data(), 1, k.size(), shape.n_k_heads, shape.d_k, 1e-6f);
  const auto v = random_floats(static_cast<size_t>(shape.n_heads * shape.d_v), 13);
  const std::vector<float> g(static_cast<size_t>(shape.n_heads), -0.01f), beta(g.size(), 0.5f);
  std::vector<float> out(v.size());
  ThreadPool pool(n_threads);
  int64_t layer = 0;
  for (auto _ : state) {
    gated_delta_rule_isa(states.data() + layer * state_floats, q.data(), k.data(), q.size(), v.data(), v.size(),
                         g.data(), beta.data(), out.data(), 1, shape, nullptr, n_threads > 1 ? &pool : nullptr, isa);
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % n_layers;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * state_floats * sizeof(float)));
}
#define RIDGE_DELTA_BENCH(name, isa, n_threads, n_layers) \
  BENCHMARK_CAPTURE(BM_GatedDeltaDecode, name, isa, n_threads, n_layers)->UseRealTime();
RIDGE_DELTA_BENCH(qwen3next_dram_scalar_threads1, Isa::kScalar, 1, 36)
RIDGE_DELTA_BENCH(qwen3next_dram_avx2_threads1, Isa::kAvx2, 1, 36)
RIDGE_DELTA_BENCH(qwen3next_dram_avx2_threads2, Isa::kAvx2, 2, 36)
RIDGE_DELTA_BENCH(qwen3next_dram_avx512_threads1, Isa::kAvx512Vnni, 1, 36)
RIDGE_DELTA_BENCH(qwen3next_dram_avx512_threads2, Isa::kAvx512Vnni, 2, 36)
RIDGE_DELTA_BENCH(qwen3next_cached_avx2_threads1, Isa::kAvx2, 1, 1)
RIDGE_DELTA_BENCH(qwen3next_cached_avx512_threads1, Isa::kAvx512Vnni, 1, 1)
#undef RIDGE_DELTA_BENCH

const int kRegistered = (register_matmul(), 0);

}  // namespace
}  // namespace ridge::kernels

BENCHMARK_MAIN();
