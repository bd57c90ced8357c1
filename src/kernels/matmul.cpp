#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/dot.h"

namespace ridge::kernels {

namespace {

// Rows dequantized together, so each token's x row is fetched once per tile instead of
// once per weight row when n_tokens is large.
constexpr int64_t kRowTile = 4;

const float* dequantized_row(const WeightMatrix& w, ToFloatFn to_float, int64_t o, float* buffer) {
  const uint8_t* row = w.data + static_cast<size_t>(o) * w.row_bytes;
  if (w.dtype == DType::F32) return reinterpret_cast<const float*>(row);
  if (w.dtype == DType::F16) {
    f16_to_f32(reinterpret_cast<const uint16_t*>(row), buffer, w.n_in);
  } else {
    to_float(row, buffer, w.n_in);
  }
  return buffer;
}

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
  if (w.dtype != DType::F32 && traits.to_float == nullptr)
    throw Error(str_cat(name, ": matmul cannot dequantize weight type ", traits.name));
  if (w.n_in <= 0 || w.n_out <= 0 || w.n_in % traits.block_size != 0)
    throw Error(str_cat(name, ": bad weight shape [", w.n_out, " x ", w.n_in, "] for type ",
                        traits.name, " (block size ", traits.block_size, ")"));
  if (w.row_bytes < row_size(w.dtype, w.n_in))
    throw Error(str_cat(name, ": row stride ", w.row_bytes, " bytes is shorter than a ",
                        traits.name, " row of ", w.n_in, " elements"));
  if (w.data == nullptr) throw Error(str_cat(name, ": weight data is null"));
}

size_t matmul_scratch_floats(const WeightMatrix& w) {
  return w.dtype == DType::F32 ? 0 : static_cast<size_t>(kRowTile * w.n_in);
}

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool& pool,
            Scratch& scratch) {
  check_weight_matrix(w, "matmul");
  scratch.require(pool.n_threads(), matmul_scratch_floats(w), "matmul");
  if (n_tokens <= 0) return;
  const ToFloatFn to_float = type_traits(w.dtype).to_float;
  const int64_t n_in = w.n_in;
  const int64_t n_out = w.n_out;

  pool.parallel_for(n_out, [&](int64_t begin, int64_t end, int thread) {
    float* buffer = scratch.thread_data(thread);
    const float* rows[kRowTile];
    for (int64_t o0 = begin; o0 < end; o0 += kRowTile) {
      const int64_t tile = std::min(kRowTile, end - o0);
      for (int64_t r = 0; r < tile; ++r)
        rows[r] = dequantized_row(w, to_float, o0 + r, buffer + r * n_in);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n_in;
        float* yt = y + t * n_out + o0;
        for (int64_t r = 0; r < tile; ++r) yt[r] = dot_f32(rows[r], xt, n_in);
      }
    }
  });
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
