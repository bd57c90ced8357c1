// What the model's weight matmuls run and how much arithmetic they are: the start-up
// line's kernels and the compute roofline's operation counts (`ridge bench`).
#include <cstdio>
#include <map>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/gemm/gemm.h"
#include "model/model.h"

namespace ridge {

namespace {

// Calls f(matrix, multiply-adds per token) for each layer matrix a one-token step runs.
template <class F>
void for_each_layer_matrix(const ModelWeights& weights, const ModelConfig& config, F f) {
  for (const LayerWeights& l : weights.layers) {
    for (const kernels::WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.gate_inp,
                                           &l.ssm_qkv, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha, &l.ssm_out})
      if (w->data != nullptr) f(*w, 1.0);
    // Of the experts, a token runs the n_expert_used its router picks: their share.
    const double active = l.experts.empty() ? 0.0 : double(config.n_expert_used) / double(l.experts.size());
    for (const ExpertWeights& e : l.experts)
      for (const kernels::WeightMatrix* w : {&e.w_gate, &e.w_up, &e.w_down}) f(*w, active);
  }
}

void add(Model::MatmulMacs& macs, const kernels::WeightMatrix& w, double share) {
  const double n = static_cast<double>(w.n_in) * static_cast<double>(w.n_out) * share;
  (kernels::matmul_quantizes_activations(w.dtype, kernels::best_isa()) ? macs.int8 : macs.f32) += n;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Model::matmul_kernels() const {
  std::map<std::string, DType> types;
  auto note = [&](const kernels::WeightMatrix& w, double) { types.emplace(std::string(dtype_name(w.dtype)), w.dtype); };
  for_each_layer_matrix(weights_, config_, note);
  note(weights_.output, 1.0);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, type] : types) out.emplace_back(name, kernels::matmul_kernel_name(type, kernels::best_isa()));
  return out;
}

std::string Model::kernel_summary() const {
  std::string line;
  for (const auto& [type, kernel] : matmul_kernels()) line += str_cat(line.empty() ? "" : ", ", type, " ", kernel);
  if (repacked_matrices_ > 0) {  // kernels/gemm/repack.h; --no-repack keeps the file's layouts
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f", repack_seconds_);
    line += str_cat(" (", repacked_matrices_, " matrices repacked at load in ", seconds, " s)");
  }
  if (kernels::best_isa() != kernels::cpu_best_isa())
    line += str_cat(" (RIDGE_ISA=", kernels::isa_name(kernels::best_isa()), "; this CPU: ",
                    kernels::isa_name(kernels::cpu_best_isa()), ")");
  // A CPU with tiles the kernels cannot use (the OS or the process permission refused
  // them) says why, instead of quietly running a lower ISA.
  const CpuFeatures& f = cpu_features();
  if (f.amx_tile && f.amx_int8 && !kernels::amx_usable()) line += str_cat(" (", kernels::amx_status(), ")");
  return line;
}

Model::MatmulMacs Model::layer_macs_per_token() const {
  MatmulMacs macs;
  for_each_layer_matrix(weights_, config_, [&](const kernels::WeightMatrix& w, double share) { add(macs, w, share); });
  return macs;
}

Model::MatmulMacs Model::output_macs_per_row() const {
  MatmulMacs macs;
  add(macs, weights_.output, 1.0);
  return macs;
}

}  // namespace ridge
