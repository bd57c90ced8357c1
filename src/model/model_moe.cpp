// Mixture-of-experts layers (Mixtral, Qwen3-MoE, OLMoE, Qwen 3.5-MoE): each token's MLP
// output is the weighted sum of the experts its router ranks highest, plus, where the family
// has one, a shared expert scaled by its own sigmoid gate. On a memory-bound CPU the point is
// to read each expert's weights once per step: the batch's tokens are grouped by expert,
// and each chosen expert runs one matmul over all of its tokens.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "model/model.h"

namespace ridge {

// Router: softmax over all experts, the n_expert_used most probable (ties: lower index),
// their probabilities renormalised to sum 1 when the family does. Fills the per-expert
// token lists in expert order, each list in token order.
void Model::route_tokens(int il, int32_t n) {
  const ModelConfig& c = config_;
  kernels::matmul(weights_.layers[il].gate_inp, h_.data(), router_.data(), n, pool_, scratch_);
  const int32_t k = c.n_expert_used;
  // Each token's choices, once: [n][k] experts and weights; counts per expert.
  std::fill(expert_first_.begin(), expert_first_.end(), 0);
  int32_t chosen[256];
  float probs[256];
  double exps[256];
  for (int32_t t = 0; t < n; ++t) {
    const float* logits = router_.data() + static_cast<size_t>(t) * c.n_expert;
    const float max = *std::max_element(logits, logits + c.n_expert);
    double total = 0;
    for (int32_t e = 0; e < c.n_expert; ++e) total += exps[e] = std::exp(static_cast<double>(logits[e] - max));
    for (int32_t e = 0; e < c.n_expert; ++e) {
      probs[e] = static_cast<float>(exps[e] / total);
      chosen[e] = e;
    }
    std::partial_sort(chosen, chosen + k, chosen + c.n_expert, [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    double chosen_sum = 0;
    for (int32_t j = 0; j < k; ++j) chosen_sum += probs[chosen[j]];
    for (int32_t j = 0; j < k; ++j) {
      const int32_t e = chosen[j];
      token_experts_[t * k + j] = e;
      token_weights_[t * k + j] = c.expert_weights_norm ? static_cast<float>(probs[e] / chosen_sum) : probs[e];
      ++expert_first_[e + 1];
    }
  }
  // Counting sort into per-expert lists, tokens in order within each.
  for (int32_t e = 0; e < c.n_expert; ++e) expert_first_[e + 1] += expert_first_[e];
  std::vector<int32_t>& next = expert_last_;
  next.assign(expert_first_.begin(), expert_first_.end() - 1);
  for (int32_t i = 0; i < n * k; ++i) {
    const int32_t at = next[token_experts_[i]]++;
    expert_tokens_[at] = i / k;
    expert_weights_[at] = token_weights_[i];
  }
}

void Model::moe_layer(int il, int32_t n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[il];
  kernels::rms_norm(x_.data(), w.ffn_norm, h_.data(), n, c.n_embd, c.norm_eps);
  route_tokens(il, n);
  std::fill(moe_sum_.begin(), moe_sum_.begin() + static_cast<size_t>(n) * c.n_embd, 0.0f);
  const size_t row = static_cast<size_t>(c.n_embd);
  // Experts in order, so each token's sum runs in expert order whatever its batch.
  for (int32_t e = 0; e < c.n_expert; ++e) {
    const int32_t first = expert_first_[e], m = expert_first_[e + 1] - first;
    if (m == 0) continue;
    const ExpertWeights& x = w.experts[static_cast<size_t>(e)];
    expert_bytes_read_.fetch_add((x.w_gate.n_out + x.w_up.n_out) * x.w_gate.row_bytes + x.w_down.n_out * x.w_down.row_bytes,
                                 std::memory_order_relaxed);
    for (int32_t j = 0; j < m; ++j)
      std::memcpy(expert_in_.data() + j * row, h_.data() + expert_tokens_[first + j] * row, row * sizeof(float));
    const kernels::WeightMatrix* ws[] = {&x.w_gate, &x.w_up};
    float* ys[] = {gate_.data(), up_.data()};
    kernels::matmul_group(ws, expert_in_.data(), ys, m, pool_, scratch_);
    const int64_t n_ff = int64_t{m} * c.n_ff_expert;
    apply_scale(gate_.data(), n_ff, x.gate_scale);
    apply_scale(up_.data(), n_ff, x.up_scale);
    if (c.activation == Activation::kGelu)
      kernels::geglu(gate_.data(), up_.data(), gate_.data(), n_ff);
    else
      kernels::swiglu(gate_.data(), up_.data(), gate_.data(), n_ff);
    kernels::matmul(x.w_down, gate_.data(), expert_out_.data(), m, pool_, scratch_);
    for (int32_t j = 0; j < m; ++j) {
      const float weight = expert_weights_[first + j] * x.down_scale;
      const float* out = expert_out_.data() + j * row;
      float* sum = moe_sum_.data() + expert_tokens_[first + j] * row;
      for (size_t i = 0; i < row; ++i) sum[i] += weight * out[i];
    }
  }
  if (c.n_ff_shared > 0) {  // every token's shared expert, scaled by its own sigmoid gate
    const kernels::WeightMatrix* ws[] = {&w.shared.w_gate, &w.shared.w_up};
    float* ys[] = {gate_.data(), up_.data()};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(gate_.data(), int64_t{n} * c.n_ff_shared, w.shared.gate_scale);
    apply_scale(up_.data(), int64_t{n} * c.n_ff_shared, w.shared.up_scale);
    kernels::swiglu(gate_.data(), up_.data(), gate_.data(), int64_t{n} * c.n_ff_shared);
    kernels::matmul(w.shared.w_down, gate_.data(), expert_out_.data(), n, pool_, scratch_);
    apply_scale(expert_out_.data(), int64_t{n} * c.n_embd, w.shared.down_scale);
    for (int32_t t = 0; t < n; ++t) {
      const float* in = h_.data() + t * row;
      double dot = 0;
      for (size_t i = 0; i < row; ++i) dot += double{w.shared_gate[i]} * in[i];
      const auto scale = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
      const float* out = expert_out_.data() + t * row;
      float* sum = moe_sum_.data() + t * row;
      for (size_t i = 0; i < row; ++i) sum[i] += scale * out[i];
    }
  }
  kernels::add(x_.data(), moe_sum_.data(), x_.data(), int64_t{n} * c.n_embd);
}

}  // namespace ridge
