#include "kernels/gemm/gemm.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/gemm/amx.h"
#include "kernels/gemm/repack.h"

namespace ridge::kernels {

namespace {

// Rows dequantized together for the F32 entry: a panel of its blocked GEMM (16 rows), so
// a chunk of tokens is fetched once per panel.
constexpr int64_t kRowTile = 16;

std::atomic<MatmulMode> g_matmul_mode{MatmulMode::kQuantized};
std::atomic<float> g_int8_outlier_threshold{6.0f};

// I8_ROWS outliers: one bit per column of each token row, set where |x| > threshold.
int64_t outlier_mask_words(int64_t n_in) { return (n_in + 63) / 64; }

size_t round_up_64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Below this many activation elements, quantizing on one thread beats waking the pool.
constexpr int64_t kParallelQuantizeElements = 32768;

}  // namespace

WeightMatrix weight_matrix(DType dtype, int64_t n_in, int64_t n_out, const void* data) {
  const TypeTraits& traits = type_traits(dtype);
  if (traits.block_size == 0 || n_in % traits.block_size != 0)
    throw Error(str_cat("weight_matrix: ", n_in, " columns of type ", dtype_name(dtype),
                        " do not fill whole blocks"));
  WeightMatrix w{dtype, n_in, n_out, static_cast<const uint8_t*>(data), row_size(dtype, n_in)};
  check_weight_matrix(w, "weight_matrix");
  return w;
}

void check_weight_matrix(const WeightMatrix& w, std::string_view name) {
  const TypeTraits& traits = type_traits(w.dtype);
  if (traits.block_size == 0)
    throw Error(str_cat(name, ": unknown weight type id ", static_cast<uint32_t>(w.dtype)));
  if (w.dtype != DType::F32 && traits.to_float == nullptr && !is_repacked_type(w.dtype))
    throw Error(str_cat(name, ": weight type ", traits.name, " is not supported by ridge yet (it cannot "
                        "dequantize it); use a GGUF of the model in another type, or re-quantize the F16/BF16 "
                        "file (ridge quantize, or llama-quantize to a K-quant)"));
  if (w.n_in <= 0 || w.n_out <= 0 || w.n_in % traits.block_size != 0)
    throw Error(str_cat(name, ": bad weight shape [", w.n_out, " x ", w.n_in, "] for type ",
                        traits.name, " (block size ", traits.block_size, ")"));
  if (w.row_bytes < row_size(w.dtype, w.n_in))
    throw Error(str_cat(name, ": row stride ", w.row_bytes, " bytes is shorter than a ",
                        traits.name, " row of ", w.n_in, " elements"));
  if (w.data == nullptr) throw Error(str_cat(name, ": weight data is null"));
}

void set_int8_outlier_threshold(float threshold) { g_int8_outlier_threshold.store(threshold); }
float int8_outlier_threshold() { return g_int8_outlier_threshold.load(); }

void set_matmul_mode(MatmulMode mode) { g_matmul_mode.store(mode, std::memory_order_relaxed); }
MatmulMode matmul_mode() { return g_matmul_mode.load(std::memory_order_relaxed); }

size_t matmul_scratch_floats(const WeightMatrix& w) {
  // Rows to dequantize: for types without an integer kernel, and for MatmulMode::kFloat.
  return w.dtype == DType::F32 ? 0 : static_cast<size_t>(kRowTile * w.n_in);
}

size_t matmul_shared_bytes(const WeightMatrix& w, int64_t max_tokens) {
  // The most any ISA's entry needs: tests run several ISAs on one scratch.
  size_t most = 0;
  for (Isa isa : kAllIsas) {
    const GemmKernel* kernel = gemm_kernel(w.dtype, isa);
    if (kernel == nullptr || kernel->act == ActFormat::kF32 || max_tokens <= 0) continue;
    size_t bytes = static_cast<size_t>(max_tokens) * act_row_bytes(kernel->act, w.n_in);
    if (kernel->act == ActFormat::kQ8_0 && max_tokens > 1)  // the transposed scales of a batch
      bytes += 2 * q8_0_scales_t_floats(w.n_in, max_tokens) * sizeof(float);
    if (w.dtype == DType::I8_ROWS)  // the outlier masks
      bytes += static_cast<size_t>(max_tokens * outlier_mask_words(w.n_in)) * sizeof(uint64_t);
    if (kernel->isa == Isa::kAmxInt8) {  // the activation tiles, 64-byte aligned, and one tile's B
      bytes = round_up_64(bytes) + static_cast<size_t>(max_tokens / 16) * amx_act_tile_bytes(kernel->act, w.n_in);
      if (max_tokens >= 16) bytes = round_up_64(bytes) + amx_rows_b_bytes(kernel->act, w.n_in);
    }
    most = std::max(most, bytes);
  }
  return most;
}

bool matmul_quantizes_activations(DType weight, Isa isa) {
  if (matmul_mode() == MatmulMode::kFloat) return false;
  const GemmKernel* kernel = gemm_kernel(weight, isa);
  return kernel != nullptr && kernel->act != ActFormat::kF32;
}

std::string matmul_kernel_name(DType weight, Isa isa) {
  if (const GemmKernel* kernel = gemm_kernel(weight, isa)) return isa_name(kernel->isa);
  // The F32 entry on dequantized rows.
  return str_cat("f32 ", isa_name(gemm_kernel(DType::F32, isa)->isa), " (rows dequantized)");
}

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool& pool,
            Scratch& scratch) {
  matmul_isa(w, x, y, n_tokens, pool, scratch, best_isa());
}

namespace {

// Sets the mask bits of the columns of x with |x| > threshold; returns x itself when
// there are none, or else a copy in `copy` with those columns zeroed.
const float* without_outliers(const float* x, int64_t n_in, float threshold, uint64_t* mask, float* copy) {
  float amax = 0;
  for (int64_t i = 0; i < n_in; ++i) amax = std::max(amax, std::fabs(x[i]));
  std::fill(mask, mask + outlier_mask_words(n_in), 0);
  if (!(amax > threshold)) return x;
  for (int64_t i = 0; i < n_in; ++i) {
    const bool outlier = std::fabs(x[i]) > threshold;
    mask[i / 64] |= static_cast<uint64_t>(outlier) << (i % 64);
    copy[i] = outlier ? 0.0f : x[i];
  }
  return copy;
}

// y[t][r0 + r] += x[t][i] * W[r0 + r][i] in f32 for each outlier column i of token t, in
// column order (I8_ROWS rows: float scale, int8 q[n_in]).
void add_outliers(const WeightMatrix& w, int64_t r0, int64_t rows, const float* x, int64_t n_tokens,
                  const uint64_t* masks, float* y) {
  const int64_t words = outlier_mask_words(w.n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint64_t* mask = masks + t * words;
    for (int64_t k = 0; k < words; ++k)
      for (uint64_t bits = mask[k]; bits != 0; bits &= bits - 1) {
        const int64_t i = k * 64 + std::countr_zero(bits);
        const float xi = x[t * w.n_in + i];
        for (int64_t r = r0; r < r0 + rows; ++r) {
          const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_bytes;
          float scale;
          std::memcpy(&scale, row, sizeof scale);
          y[t * w.n_out + r] += scale * static_cast<float>(static_cast<int8_t>(row[sizeof scale + i])) * xi;
        }
      }
  }
}

// The quantized-GEMM path for matrices that share x and one activation format: x
// quantized once, then one parallel region over all their 16-row tiles in order. With
// `glu`, the input is glu(x, up) (matmul_glu), formed a token row at a time in the
// thread's scratch just before it is quantized.
void gemm_group(std::span<const WeightMatrix* const> ws, std::span<const GemmKernel* const> kernels,
                const float* x, std::span<float* const> ys, int64_t n_tokens, ThreadPool& pool, Scratch& scratch,
                GluFn glu = nullptr, const float* up = nullptr) {
  const GemmKernel* kernel = kernels[0];
  const int64_t n_in = ws[0]->n_in;
  // Quantize every token row once; all threads then read them.
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = static_cast<size_t>(n_in) * sizeof(float);
  float* scales_t = nullptr;
  const uint8_t* amx_tiles = nullptr;
  const uint8_t* amx_rows_b = nullptr;
  const float threshold = int8_outlier_threshold();
  uint64_t* masks = nullptr;  // I8_ROWS with outlier decomposition
  const int64_t mask_words = outlier_mask_words(n_in);
  if (kernel->act != ActFormat::kF32) {
    act_stride = act_row_bytes(kernel->act, n_in);
    uint8_t* dst = scratch.shared_data();
    if (ws[0]->dtype == DType::I8_ROWS && threshold > 0) {
      size_t offset = static_cast<size_t>(n_tokens) * act_stride;
      if (n_tokens > 1) offset += 2 * q8_0_scales_t_floats(n_in, n_tokens) * sizeof(float);
      masks = reinterpret_cast<uint64_t*>(dst + offset);
    }
    auto quantize = [&](int64_t begin, int64_t end, int thread) {
      for (int64_t t = begin; t < end; ++t) {
        const float* row = x + t * n_in;
        if (glu != nullptr) {
          float* gated = scratch.thread_data(thread);
          glu(row, up + t * n_in, gated, n_in);
          row = gated;
        }
        if (masks != nullptr) row = without_outliers(row, n_in, threshold, masks + t * mask_words, scratch.thread_data(thread));
        kernel->quantize(row, dst + t * act_stride, n_in);
      }
    };
    if (n_tokens * n_in >= kParallelQuantizeElements || glu != nullptr) pool.parallel_for(n_tokens, quantize);
    else quantize(0, n_tokens, 0);
    act = dst;
    size_t used = static_cast<size_t>(n_tokens) * act_stride;
    if (kernel->act == ActFormat::kQ8_0 && n_tokens > 1) {
      scales_t = reinterpret_cast<float*>(dst + used);
      transpose_q8_0_scales(dst, act_stride, n_in, n_tokens, scales_t);
      used += 2 * q8_0_scales_t_floats(n_in, n_tokens) * sizeof(float);
    }
    if (masks != nullptr) used += static_cast<size_t>(n_tokens * mask_words) * sizeof(uint64_t);
    // The AMX kernels read the tokens laid out per 16-token tile (after the outlier
    // masks, for I8_ROWS): done here once for all threads, not by every thread's share
    // of the rows.
    const bool amx = std::any_of(kernels.begin(), kernels.end(), [](const GemmKernel* k) { return k->isa == Isa::kAmxInt8; });
    if (amx && n_tokens >= 16) {
      uint8_t* tiles = dst + round_up_64(used);
      pool.parallel_for(n_tokens / 16, [&](int64_t begin, int64_t end, int) {
        amx_build_act_tiles(kernel->act, dst, act_stride, n_in, begin, end, tiles);
      });
      amx_tiles = tiles;
      if (n_tokens < 32) {  // one token tile: the rows kernels' B operand too
        uint8_t* b = tiles + round_up_64(amx_act_tile_bytes(kernel->act, n_in));
        amx_build_rows_b(kernel->act, tiles, n_in, b);
        amx_rows_b = b;
      }
    }
  }
  // Each thread streams its own contiguous share of the rows in order (one forward
  // stream: the kernels' prefetch of the next rows always lands on rows this thread
  // reads next), in chunks of whole 16-row tiles so a thread slowed by another process
  // has its last chunks taken by the others. Measured against dynamic chunks of an
  // eighth of the rows each (every chunk start a cold read, half the prefetches
  // landing on the other core): decode +6-27% at 2 threads on the three models.
  // Several matrices are one sequence of tiles, each matrix's starting on a whole tile.
  constexpr int64_t kTile = 16;
  static_assert(kTile % kRepackRows == 0, "a tile starts on a repacked group");
  constexpr size_t kMaxGroup = 4;
  int64_t tile_begin[kMaxGroup + 1] = {0};
  for (size_t i = 0; i < ws.size(); ++i) tile_begin[i + 1] = tile_begin[i] + (ws[i]->n_out + kTile - 1) / kTile;
  const int64_t n_tiles = tile_begin[ws.size()];
  const int64_t tiles_per_chunk = std::max<int64_t>(1, n_tiles / (8 * pool.n_threads()));
  const int32_t* sums_t =
      scales_t ? reinterpret_cast<const int32_t*>(scales_t + q8_0_scales_t_floats(n_in, n_tokens)) : nullptr;
  pool.parallel_for_stealing(n_tiles, tiles_per_chunk, [&](int64_t begin, int64_t end, int) {
    for (size_t i = 0; i < ws.size() && begin < end; ++i) {
      if (begin >= tile_begin[i + 1]) continue;
      const int64_t stop = std::min(end, tile_begin[i + 1]);
      const WeightMatrix& w = *ws[i];
      const int64_t r0 = (begin - tile_begin[i]) * kTile;
      const int64_t rows = std::min((stop - tile_begin[i]) * kTile, w.n_out) - r0;
      const GemmArgs args{n_in,       w.data + static_cast<size_t>(r0) * w.row_bytes,
                          w.row_bytes, act,
                          act_stride, ys[i] + r0,
                          w.n_out,    scales_t,
                          sums_t,     q8_0_scales_t_stride(n_tokens),
                          amx_tiles,  amx_rows_b};
      kernels[i]->gemm(args, rows, n_tokens);
      if (masks != nullptr) add_outliers(w, r0, rows, x, n_tokens, masks, ys[i]);
      begin = stop;
    }
  });
}

}  // namespace

void matmul_group(std::span<const WeightMatrix* const> ws, const float* x, std::span<float* const> ys,
                  int64_t n_tokens, ThreadPool& pool, Scratch& scratch) {
  if (ws.size() != ys.size() || ws.empty() || ws.size() > 4)
    throw Error(str_cat("matmul_group: ", ws.size(), " matrices and ", ys.size(), " outputs (1 to 4 of each)"));
  const Isa isa = best_isa();
  const GemmKernel* kernels[4] = {};
  bool together = matmul_mode() != MatmulMode::kFloat;
  for (size_t i = 0; i < ws.size(); ++i) {
    check_weight_matrix(*ws[i], "matmul_group");
    if (ws[i]->n_in != ws[0]->n_in)
      throw Error(str_cat("matmul_group: matrix ", i, " has ", ws[i]->n_in, " columns, matrix 0 has ", ws[0]->n_in));
    kernels[i] = gemm_kernel(ws[i]->dtype, isa);
    together = together && kernels[i] != nullptr && kernels[i]->act == kernels[0]->act &&
               (ws[i]->dtype == DType::I8_ROWS) == (ws[0]->dtype == DType::I8_ROWS);  // outliers: all or none
  }
  if (!together || n_tokens <= 0) {  // different activation formats, or float paths: one by one
    for (size_t i = 0; i < ws.size(); ++i) matmul_isa(*ws[i], x, ys[i], n_tokens, pool, scratch, isa);
    return;
  }
  for (const WeightMatrix* w : ws) {
    scratch.require(pool.n_threads(), matmul_scratch_floats(*w), "matmul_group");
    scratch.require_shared(matmul_shared_bytes(*w, n_tokens), "matmul_group");
  }
  gemm_group(ws, std::span<const GemmKernel* const>(kernels, ws.size()), x, ys, n_tokens, pool, scratch);
}

void matmul_isa(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool& pool,
                Scratch& scratch, Isa isa) {
  check_weight_matrix(w, "matmul");
  scratch.require(pool.n_threads(), matmul_scratch_floats(w), "matmul");
  scratch.require_shared(matmul_shared_bytes(w, n_tokens), "matmul");
  require_isa(isa, "matmul");
  if (n_tokens <= 0) return;
  const int64_t n_in = w.n_in;
  const int64_t n_out = w.n_out;

  // MatmulMode::kFloat runs every type but F32 on its rows dequantized.
  const bool dequantize = matmul_mode() == MatmulMode::kFloat && w.dtype != DType::F32;
  if (const GemmKernel* kernel = dequantize ? nullptr : gemm_kernel(w.dtype, isa)) {
    const WeightMatrix* ws[1] = {&w};
    float* ys[1] = {y};
    gemm_group(ws, std::span<const GemmKernel* const>(&kernel, 1), x, ys, n_tokens, pool, scratch);
    return;
  }

  // Types without a kernel of their own, and all but F32 in MatmulMode::kFloat: panels of
  // rows dequantized into per-thread scratch by the trait table's to_float, then the F32
  // entry on them.
  const GemmKernel* f32 = gemm_kernel(DType::F32, isa);
  const ToFloatFn to_float = type_traits(w.dtype).to_float;
  const size_t f32_stride = static_cast<size_t>(n_in) * sizeof(float);
  pool.parallel_for(n_out, [&](int64_t begin, int64_t end, int thread) {
    float* buffer = scratch.thread_data(thread);
    for (int64_t o0 = begin; o0 < end; o0 += kRowTile) {
      const int64_t tile = std::min(kRowTile, end - o0);
      for (int64_t r = 0; r < tile; ++r) {
        if (to_float == nullptr) repacked_row_to_float(w, o0 + r, buffer + r * n_in);  // checked: a repacked type
        else to_float(w.data + static_cast<size_t>(o0 + r) * w.row_bytes, buffer + r * n_in, n_in);
      }
      const GemmArgs args{n_in, reinterpret_cast<const uint8_t*>(buffer), f32_stride,
                          reinterpret_cast<const uint8_t*>(x), f32_stride, y + o0, n_out};
      f32->gemm(args, tile, n_tokens);
    }
  });
}

void matmul_glu(const WeightMatrix& w, GluFn glu, float* gate, const float* up, float* y, int64_t n_tokens,
                ThreadPool& pool, Scratch& scratch) {
  check_weight_matrix(w, "matmul_glu");
  scratch.require(pool.n_threads(), matmul_scratch_floats(w), "matmul_glu");
  scratch.require_shared(matmul_shared_bytes(w, n_tokens), "matmul_glu");
  if (n_tokens <= 0) return;
  const int64_t n_in = w.n_in;
  const GemmKernel* kernel = matmul_mode() == MatmulMode::kFloat ? nullptr : gemm_kernel(w.dtype, best_isa());
  // Fused where the kernel quantizes its input, each row once, and nothing reads the float
  // input afterwards (LLM.int8's outlier columns do). The gated row goes to the thread's
  // scratch: kRowTile rows of n_in floats for every quantized type (matmul_scratch_floats).
  const bool fused = kernel != nullptr && kernel->act != ActFormat::kF32 &&
                     !(w.dtype == DType::I8_ROWS && int8_outlier_threshold() > 0);
  if (!fused) {
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1, int) {
      glu(gate + t0 * n_in, up + t0 * n_in, gate + t0 * n_in, (t1 - t0) * n_in);
    });
    matmul(w, gate, y, n_tokens, pool, scratch);
    return;
  }
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  gemm_group(ws, std::span<const GemmKernel* const>(&kernel, 1), gate, ys, n_tokens, pool, scratch, glu, up);
}

void matmul_reference(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens) {
  check_weight_matrix(w, "matmul_reference");
  const ToFloatFn to_float = type_traits(w.dtype).to_float;
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o) {
    // The trait table's scalar dequantizer for every type, independent of matmul's paths.
    const uint8_t* bytes = w.data + static_cast<size_t>(o) * w.row_bytes;
    if (w.dtype == DType::F32)
      std::memcpy(row.data(), bytes, static_cast<size_t>(w.n_in) * sizeof(float));
    else if (is_repacked_type(w.dtype))
      repacked_row_to_float(w, o, row.data());
    else
      to_float(bytes, row.data(), w.n_in);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0;
      for (int64_t i = 0; i < w.n_in; ++i)
        sum += static_cast<double>(row[i]) * static_cast<double>(x[t * w.n_in + i]);
      y[t * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace ridge::kernels
