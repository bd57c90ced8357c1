#include "quant/quantize.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/part_file.h"
#include "core/quant.h"
#include "core/quant_weighted.h"
#include "core/thread_pool.h"
#include "gguf/writer.h"

namespace ridge::quant {
namespace {

std::string shape(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += str_cat(d ? ", " : "", t.ne[d]);
  return s + "]";
}

}  // namespace

void quantize_rows_reference(DType type, const float* rows, int64_t n_rows, int64_t n_cols, uint8_t* out,
                             int threads) {
  const size_t out_row = row_size(type, n_cols);
  ThreadPool pool(threads);
  pool.parallel_for_dynamic(n_rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      quantize_row(type, rows + r * n_cols, out + static_cast<size_t>(r) * out_row, n_cols);
  });
}

void quantize_rows_weighted(DType type, const float* rows, int64_t n_rows, int64_t n_cols, const float* importance,
                            int64_t n_mat, uint8_t* out, int threads) {
  if (n_mat < 1 || n_rows % n_mat != 0)
    throw Error(str_cat("quantize: ", n_rows, " rows are not ", n_mat, " matrices of equal size"));
  const int64_t rows_per_mat = n_rows / n_mat;
  const size_t out_row = row_size(type, n_cols);
  ThreadPool pool(threads);
  pool.parallel_for_dynamic(n_rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      quantize_row_weighted(type, rows + r * n_cols, out + static_cast<size_t>(r) * out_row, n_cols,
                            importance + (r / rows_per_mat) * n_cols);
  });
}

QuantizeReport quantize_model(const QuantizeOptions& o, const std::function<void(const std::string&)>& progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(o.output, ec) && fs::equivalent(o.input, o.output, ec))
    throw Error(str_cat("quantize: ", o.output, " is the input file; refusing to overwrite it"));
  const gguf::File in = gguf::File::open(o.input);
  RecipeState state = recipe_state(in);
  state.imatrix = o.imatrix;
  QuantizeReport report;

  gguf::Writer out(static_cast<uint32_t>(in.get_u64("general.alignment", gguf::kDefaultAlignment)));
  for (const gguf::KeyValue& kv : in.metadata()) {
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version") continue;
    out.set(kv.key, kv.value);
  }
  out.set_u32("general.file_type", o.target.file_type);
  out.set_u32("general.quantization_version", 2);
  for (const gguf::KeyValue& kv : o.extra_metadata) out.set(kv.key, kv.value);

  ThreadPool pool(o.threads);
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  const int32_t n = static_cast<int32_t>(in.tensors().size());
  for (int32_t i = 0; i < n; ++i) {
    const gguf::TensorInfo& t = in.tensors()[static_cast<size_t>(i)];
    const TensorChoice choice = choose_tensor_type(o.target, state, t);
    const std::vector<int64_t> dims(t.ne, t.ne + t.n_dims);
    report.input_bytes += t.nbytes;
    ++report.n_tensors;
    if (!choice.fallback_note.empty()) report.fallbacks.push_back(choice.fallback_note);
    const std::vector<float>* override_values = nullptr;
    if (o.overrides != nullptr) {
      const auto it = o.overrides->find(t.name);
      if (it != o.overrides->end()) {
        if (static_cast<int64_t>(it->second.size()) != t.n_elements())
          throw Error(str_cat("quantize: ", t.name, ": ", it->second.size(), " values replace ", t.n_elements()));
        override_values = &it->second;
      }
    }
    if (override_values != nullptr && !choice.quantized) {  // a norm or bias: in its own type
      bytes.resize(t.nbytes);
      const int64_t n_cols = t.ne[0];
      for (int64_t r = 0; r < t.n_elements() / n_cols; ++r)
        quantize_row(t.dtype, override_values->data() + r * n_cols, bytes.data() + static_cast<size_t>(r) * row_size(t.dtype, n_cols), n_cols);
      out.add_tensor(t.name, t.dtype, dims, bytes);
      report.output_bytes += t.nbytes;
      progress(str_cat("[", i + 1, "/", n, "] ", t.name, " ", shape(t), " ", dtype_name(t.dtype), " (rescaled)\n"));
      continue;
    }
    if (override_values == nullptr && (!choice.quantized || choice.type == t.dtype)) {
      out.add_tensor(t.name, t.dtype, dims, std::span<const uint8_t>(t.data, t.nbytes));
      report.output_bytes += t.nbytes;
      progress(str_cat("[", i + 1, "/", n, "] ", t.name, " ", shape(t), " ", dtype_name(t.dtype), " (kept)\n"));
      continue;
    }
    if (override_values == nullptr && type_traits(t.dtype).to_float == nullptr)
      throw Error(str_cat("quantize: ", t.name, " is ", dtype_name(t.dtype), ", which ridge cannot dequantize"));
    const int64_t n_cols = t.ne[0];
    const int64_t n_rows = t.n_elements() / n_cols;
    f32.resize(static_cast<size_t>(t.n_elements()));
    if (override_values != nullptr) {
      std::copy(override_values->begin(), override_values->end(), f32.begin());
    } else {
      const size_t in_row = row_size(t.dtype, n_cols);
      pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
        for (int64_t r = begin; r < end; ++r)
          dequantize_row(t.dtype, t.data + static_cast<size_t>(r) * in_row, f32.data() + r * n_cols, n_cols);
      });
    }
    const size_t out_bytes = row_size(choice.type, n_cols) * static_cast<size_t>(n_rows);
    bytes.resize(out_bytes);
    if (o.quantizer)
      o.quantizer(t.name, choice.type, f32.data(), n_rows, n_cols, bytes.data());
    else
      quantize_rows_reference(choice.type, f32.data(), n_rows, n_cols, bytes.data(), o.threads);
    out.add_tensor(t.name, choice.type, dims, bytes);
    report.output_bytes += out_bytes;
    ++report.n_quantized;
    progress(str_cat("[", i + 1, "/", n, "] ", t.name, " ", shape(t), " ", dtype_name(t.dtype), " -> ",
                     dtype_name(choice.type), choice.fallback_note.empty() ? "" : " (fallback)", "\n"));
  }

  PartFile part(o.output);
  out.write(part.path());
  try {
    part.commit();
  } catch (const Error& e) {
    throw Error(str_cat("quantize: ", e.what()));
  }
  return report;
}

}  // namespace ridge::quant
