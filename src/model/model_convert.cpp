// WeightFormat::kNf4 / kInt8: the layer matrices converted at load (model.h); and the
// layer matrices repacked for the decode kernels (kernels/gemm/repack.h).
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_bnb.h"
#include "model/model.h"

namespace ridge {

WeightFormat parse_weight_format(std::string_view name) {
  if (name == "as-stored") return WeightFormat::kAsStored;
  if (name == "nf4") return WeightFormat::kNf4;
  if (name == "int8") return WeightFormat::kInt8;
  throw Error(str_cat("unknown weight format '", name, "' (expected as-stored, nf4 or int8)"));
}

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kAsStored: return "as-stored";
    case WeightFormat::kNf4: return "nf4";
    case WeightFormat::kInt8: return "int8";
  }
  return "unknown";
}

void Model::convert_layer_matrices(DType dtype) {
  const auto quantize_row = dtype == DType::NF4 ? quantize_row_nf4 : quantize_row_i8_rows;
  const int64_t block = type_traits(dtype).block_size;
  static constexpr const char* kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    LayerWeights& l = weights_.layers[il];
    // The layer's small vectors are copied too: a forward pass that read them in the file
    // would map back their neighbours, the dropped matrices (the kernel maps whole folios
    // around a faulting page, up to 2 MiB).
    const int64_t q_dim = int64_t{config_.n_head} * config_.d_head, kv_dim = int64_t{config_.n_kv_head} * config_.d_head;
    const int64_t qk_norm = config_.qk_norm ? config_.d_head : 0;
    const std::pair<const float**, int64_t> vectors[] = {
        {&l.attn_norm, config_.n_embd}, {&l.bq, q_dim}, {&l.bk, kv_dim}, {&l.bv, kv_dim},
        {&l.q_norm, qk_norm > 0 ? qk_norm : q_dim}, {&l.k_norm, qk_norm > 0 ? qk_norm : kv_dim},
        {&l.post_attn_norm, config_.n_embd}, {&l.ffn_norm, config_.n_embd}, {&l.post_ffn_norm, config_.n_embd},
        // hybrids: the DeltaNet layer's conv taps, dt, A and norm; a shared expert's gate
        {&l.ssm_conv, (2 * int64_t{config_.ssm_groups} * config_.ssm_state + config_.ssm_inner) * config_.ssm_conv_kernel},
        {&l.ssm_dt, config_.ssm_heads}, {&l.ssm_a, config_.ssm_heads},
        {&l.ssm_norm, config_.ssm_heads > 0 ? config_.ssm_inner / config_.ssm_heads : 0},
        {&l.shared_gate, config_.n_embd}};
    for (const auto& [vector, n] : vectors)
      if (*vector != nullptr) *vector = converted_vectors_.emplace_back(*vector, *vector + n).data();
    std::vector<std::pair<kernels::WeightMatrix*, std::string>> matrices;
    kernels::WeightMatrix* dense[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down};
    for (size_t m = 0; m < std::size(dense); ++m)
      if (dense[m]->data != nullptr) matrices.emplace_back(dense[m], str_cat("blk.", il, ".", kNames[m], ".weight"));
    // A hybrid's recurrent-layer matrices (the file's names; a split fused tensor keeps its own).
    const std::pair<kernels::WeightMatrix*, const char*> recurrent[] = {
        {&l.ssm_qkv, "attn_qkv"}, {&l.ssm_z, "attn_gate"}, {&l.ssm_beta, "ssm_beta"}, {&l.ssm_alpha, "ssm_alpha"},
        {&l.ssm_ba, "ssm_ba"},    {&l.ssm_in, "ssm_in"},    {&l.ssm_out, "ssm_out"}};
    for (const auto& [matrix, stem] : recurrent)
      if (matrix->data != nullptr) matrices.emplace_back(matrix, str_cat("blk.", il, ".", stem, ".weight"));
    if (config_.n_ff_shared > 0) {
      matrices.emplace_back(&l.shared.w_gate, str_cat("blk.", il, ".ffn_gate_shexp.weight"));
      matrices.emplace_back(&l.shared.w_up, str_cat("blk.", il, ".ffn_up_shexp.weight"));
      matrices.emplace_back(&l.shared.w_down, str_cat("blk.", il, ".ffn_down_shexp.weight"));
    }
    for (size_t e = 0; e < l.experts.size(); ++e) {  // the router stays as stored
      ExpertWeights& x = l.experts[e];
      matrices.emplace_back(&x.w_gate, str_cat("blk.", il, ".ffn_gate_exps.weight[", e, "]"));
      matrices.emplace_back(&x.w_up, str_cat("blk.", il, ".ffn_up_exps.weight[", e, "]"));
      matrices.emplace_back(&x.w_down, str_cat("blk.", il, ".ffn_down_exps.weight[", e, "]"));
    }
    for (auto& [matrix, name] : matrices) {
      kernels::WeightMatrix& w = *matrix;
      if (w.n_in % block != 0)
        throw Error(str_cat(file_.name(), ": ", name, " has ", w.n_in, " columns, not a multiple of ",
                            dtype_name(dtype), "'s block of ", block, "; cannot load it as ", dtype_name(dtype)));
      const size_t out_row = row_size(dtype, w.n_in);
      std::vector<uint8_t>& bytes = converted_.emplace_back(out_row * static_cast<size_t>(w.n_out));
      const ToFloatFn to_float = type_traits(w.dtype).to_float;
      pool_.parallel_for(w.n_out, [&](int64_t begin, int64_t end, int) {
        std::vector<float> values(static_cast<size_t>(w.n_in));  // at load: allocation is fine
        for (int64_t o = begin; o < end; ++o) {
          const uint8_t* src = w.data + static_cast<size_t>(o) * w.row_bytes;
          if (w.dtype == DType::F32)
            std::memcpy(values.data(), src, values.size() * sizeof(float));
          else
            to_float(src, values.data(), w.n_in);
          quantize_row(values.data(), bytes.data() + static_cast<size_t>(o) * out_row, w.n_in);
        }
      });
      converted_bytes_delta_ += static_cast<double>(bytes.size()) - static_cast<double>(w.row_bytes * w.n_out);
      if (const gguf::TensorInfo* t = file_.find_tensor(name)) file_.drop_pages(*t);  // not fused, not experts
      w = kernels::weight_matrix(dtype, w.n_in, w.n_out, bytes.data());
    }
  }
}

void Model::repack_layer_matrices() {
  const auto start = std::chrono::steady_clock::now();
  const kernels::Isa isa = kernels::best_isa();
  static constexpr const char* kNames[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
  struct Job {
    kernels::WeightMatrix* w;
    DType to;
    size_t offset;    // into the one buffer, 64-byte aligned
    std::string name;  // the file's tensor when the matrix is a whole one ("" for a part of a fused one)
  };
  std::vector<Job> jobs;
  size_t total = 0;
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    LayerWeights& l = weights_.layers[il];
    // The router and the experts stay as stored: the expert path runs slices of rows.
    kernels::WeightMatrix* dense[] = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down,
                                      &l.ssm_qkv, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha, &l.ssm_out};
    for (size_t m = 0; m < std::size(dense); ++m) {
      kernels::WeightMatrix& w = *dense[m];
      if (w.data == nullptr || w.row_bytes != row_size(w.dtype, w.n_in)) continue;  // TP column slices: strided
      const std::optional<DType> to = kernels::repack_target(w.dtype, isa);
      if (!to) continue;
      std::string name;
      if (m < std::size(kNames))
        if (const gguf::TensorInfo* t = file_.find_tensor(str_cat("blk.", il, ".", kNames[m], ".weight"));
            t != nullptr && t->data == w.data && t->nbytes == w.row_bytes * static_cast<size_t>(w.n_out))
          name = t->name;
      jobs.push_back({&w, *to, total, std::move(name)});
      total += (kernels::repacked_bytes(*to, w.n_in, w.n_out) + 63) / 64 * 64;
    }
  }
  if (jobs.empty()) return;
  // One buffer for all (huge pages are 2 MiB: one allocation per matrix would round each up).
  repacked_ = kernels::allocate_repacked(total);
  for (const Job& job : jobs) {
    *job.w = kernels::repack(*job.w, job.to, repacked_.get() + job.offset, &pool_);
    // The file's pages of a whole tensor repacked are let go (not those of a part of a
    // fused one, whose other parts may still read them).
    if (!job.name.empty()) file_.drop_pages(*file_.find_tensor(job.name));
  }
  repacked_matrices_ = static_cast<int64_t>(jobs.size());
  repack_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ridge
