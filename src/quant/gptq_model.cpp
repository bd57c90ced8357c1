#include "quant/gptq_model.h"

#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/quant.h"
#include "quant/block_grid.h"

namespace ridge::quant {
namespace {

constexpr const char* kMatrices[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

MatmulSite site_of(const std::string& matrix) {
  if (matrix == "attn_output") return MatmulSite::kAttnOutput;
  if (matrix == "ffn_gate" || matrix == "ffn_up") return MatmulSite::kGateUp;
  if (matrix == "ffn_down") return MatmulSite::kDown;
  return MatmulSite::kQkv;
}

// X^T X of each site's inputs at one layer.
class HessianObserver : public ForwardObserver {
 public:
  explicit HessianObserver(int32_t layer) : layer_(layer) {}
  void on_matmul_input(int32_t il, MatmulSite site, const float* input, int32_t n_tokens, int32_t n_in) override {
    if (il != layer_) return;
    std::unique_ptr<Hessian>& h = hessians_[static_cast<int>(site)];
    if (!h) h = std::make_unique<Hessian>(n_in);
    h->add(input, n_tokens);
  }
  const Hessian* at(MatmulSite site) const { return hessians_[static_cast<int>(site)].get(); }

 private:
  int32_t layer_;
  std::unique_ptr<Hessian> hessians_[4];
};

std::vector<float> dequantized(DType type, const uint8_t* bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(type, bytes + static_cast<size_t>(r) * row_size(type, cols), out.data() + r * cols, cols);
  return out;
}

}  // namespace

std::vector<float> tensor_as_f32(const gguf::TensorInfo& t) {
  const int64_t cols = t.ne[0], rows = t.n_elements() / t.ne[0];
  return dequantized(t.dtype, t.data, rows, cols);
}

QuantizedMatrices gptq_model(Model& model, const gguf::File& file, const QuantTarget& target,
                             const CalibrationSet& set, const GptqOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             const std::map<std::string, std::vector<float>>* start) {
  const RecipeState state = recipe_state(file);
  QuantizedMatrices out;
  LayerwiseRunner runner(model, set);
  const int32_t n_layer = model.config().n_layer;
  for (int32_t il = 0; il < n_layer; ++il) {
    HessianObserver hessians(il);
    runner.run_layer(il, &hessians, /*advance=*/false);
    for (const char* matrix : kMatrices) {
      const std::string name = str_cat("blk.", il, ".", matrix, ".weight");
      const gguf::TensorInfo* t = file.find_tensor(name);
      if (t == nullptr) throw Error(str_cat("gptq: ", name, " is missing"));
      const TensorChoice choice = choose_tensor_type(target, state, *t);
      if (!choice.quantized || block_grid(choice.type) == nullptr) continue;
      const Hessian* h = hessians.at(site_of(matrix));
      if (h == nullptr) throw Error(str_cat("gptq: no inputs observed for ", name));
      const int64_t cols = t->ne[0], rows = t->n_elements() / cols;
      std::vector<float> w;
      if (start != nullptr && start->count(name) > 0)
        w = start->at(name);
      else
        w = tensor_as_f32(*t);
      QuantizedMatrix& q = out[name];
      q.type = choice.type;
      q.bytes.resize(row_size(choice.type, cols) * static_cast<size_t>(rows));
      gptq_quantize(choice.type, w.data(), rows, cols, *h, options, q.bytes.data());
      model.replace_matrix(name, q.type, q.bytes.data());
      // How much GPTQ gained, on a sample of rows (the full trace would cost rows * cols^2).
      const int64_t sample = std::min<int64_t>(rows, 16);
      std::vector<uint8_t> rtn(row_size(choice.type, cols) * static_cast<size_t>(sample));
      for (int64_t r = 0; r < sample; ++r)
        quantize_row(choice.type, w.data() + r * cols, rtn.data() + static_cast<size_t>(r) * row_size(choice.type, cols), cols);
      const double e_gptq = relative_output_error(w.data(), dequantized(q.type, q.bytes.data(), sample, cols).data(),
                                                  sample, cols, *h);
      const double e_rtn = relative_output_error(w.data(), dequantized(q.type, rtn.data(), sample, cols).data(), sample,
                                                 cols, *h);
      char line[256];
      std::snprintf(line, sizeof line, "gptq: %-26s %-5s output error %.3g (round to nearest %.3g)\n", name.c_str(),
                    std::string(dtype_name(q.type)).c_str(), e_gptq, e_rtn);
      progress(line);
    }
    runner.run_layer(il, nullptr, /*advance=*/true);
  }
  return out;
}

}  // namespace ridge::quant
