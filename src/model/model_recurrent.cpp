// The hybrid models' recurrent token mixers. A gated-DeltaNet layer (Qwen3-Next, Qwen 3.5),
// as llama.cpp's qwen35 graph computes it (qwen3next: the projections split from fused rows,
// see qwen3next_projections, and value heads grouped by key head):
//   h = rms_norm(x) * attn_norm
//   [q k v] = attn_qkv h;  z = attn_gate h;  beta = sigmoid(ssm_beta h)
//   g = softplus(ssm_alpha h + ssm_dt) * ssm_a                    (ssm_a = -exp(A_log))
//   [q k v] = silu(causal_conv1d([q k v]))  over the sequence, carrying the conv tail
//   q, k L2-normalised per key head;  o = gated delta rule (state carried, q scaled 1/sqrt(d_k))
//   o = rms_norm(o per value head) * ssm_norm * silu(z);  x += ssm_out o
// Each sequence's DeltaNet state and conv tail live in the KV cache (KvCache::state), laid
// out as ModelConfig::state_floats counts them: the state, then the tail. A speculative
// verify chunk also leaves the state and the tail after each of its tokens in the cache's
// snapshots, so rejected drafts are rolled back without recomputing.
#include <cmath>
#include <cstring>

#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/recurrent/recurrent.h"
#include "model/model.h"

namespace ridge {

// Qwen3-Next's projections: attn_qkv and attn_gate (or the older ssm_in) and ssm_ba in one
// parallel region, then the per-key-head rows split into q | k | v, z, beta and alpha as the
// rest of the layer reads them (value heads kept in their grouped order).
void Model::qwen3next_projections(const LayerWeights& w, int32_t n) {
  const ModelConfig& c = config_;
  const int64_t dk = c.ssm_state, groups = c.ssm_groups, heads = c.ssm_heads;
  const int64_t key_dim = groups * dk, value_dim = c.ssm_inner, channels = 2 * key_dim + value_dim;
  const int64_t r = heads / groups, rv = value_dim / groups;  // value heads / channels per key head
  float* ba = ssm_fused_.data();
  float* in = ba + static_cast<size_t>(n) * 2 * heads;
  if (w.ssm_in.n_out > 0) {
    const kernels::WeightMatrix* ws[] = {&w.ssm_in, &w.ssm_ba};
    float* ys[] = {in, ba};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(in, n * (channels + value_dim), w.ssm_in_scale);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = in + t * (channels + value_dim);
      float* mix = ssm_mix_.data() + t * channels;
      float* z = ssm_z_.data() + t * value_dim;
      for (int64_t g = 0; g < groups; ++g) {
        const float* src = row + g * (2 * dk + 2 * rv);  // [q k v z] of key head g
        std::memcpy(mix + g * dk, src, sizeof(float) * static_cast<size_t>(dk));
        std::memcpy(mix + key_dim + g * dk, src + dk, sizeof(float) * static_cast<size_t>(dk));
        std::memcpy(mix + 2 * key_dim + g * rv, src + 2 * dk, sizeof(float) * static_cast<size_t>(rv));
        std::memcpy(z + g * rv, src + 2 * dk + rv, sizeof(float) * static_cast<size_t>(rv));
      }
    }
  } else {
    const kernels::WeightMatrix* ws[] = {&w.ssm_qkv, &w.ssm_z, &w.ssm_ba};
    float* ys[] = {ssm_mix_.data(), ssm_z_.data(), ba};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(ssm_mix_.data(), n * channels, w.scale.ssm_qkv);
    apply_scale(ssm_z_.data(), n * value_dim, w.scale.ssm_z);
  }
  apply_scale(ba, n * 2 * heads, w.ssm_ba_scale);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t j = 0; j < r; ++j) {
        ssm_beta_[static_cast<size_t>(t * heads + g * r + j)] = ba[t * 2 * heads + g * 2 * r + j];
        ssm_g_[static_cast<size_t>(t * heads + g * r + j)] = ba[t * 2 * heads + g * 2 * r + r + j];
      }
}

void Model::delta_net_layer(int il, const Batch& b, KvCache& cache, int32_t n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(il)];
  const int64_t d = c.n_embd;
  const int64_t key_dim = int64_t{c.ssm_groups} * c.ssm_state, value_dim = c.ssm_inner;
  const int64_t channels = 2 * key_dim + value_dim;
  const int64_t heads = c.ssm_heads, d_v = value_dim / heads;

  kernels::rms_norm(x_.data(), w.attn_norm, h_.data(), n, d, c.norm_eps);
  if (observer_ != nullptr) observer_->on_matmul_input(il, MatmulSite::kQkv, h_.data(), n, c.n_embd);
  if (c.ssm_grouped_heads) {
    qwen3next_projections(w, n);
  } else {  // one parallel region, h quantized once
    const kernels::WeightMatrix* ws[] = {&w.ssm_qkv, &w.ssm_z, &w.ssm_beta, &w.ssm_alpha};
    float* ys[] = {ssm_mix_.data(), ssm_z_.data(), ssm_beta_.data(), ssm_g_.data()};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(ssm_mix_.data(), n * channels, w.scale.ssm_qkv);
    apply_scale(ssm_z_.data(), n * value_dim, w.scale.ssm_z);
    apply_scale(ssm_beta_.data(), n * heads, w.scale.ssm_beta);
    apply_scale(ssm_g_.data(), n * heads, w.scale.ssm_alpha);
  }
  for (int64_t t = 0; t < n; ++t) {
    float* beta = ssm_beta_.data() + t * heads;
    float* g = ssm_g_.data() + t * heads;
    for (int64_t hd = 0; hd < heads; ++hd) {
      beta[hd] = 1.0f / (1.0f + std::exp(-beta[hd]));
      const float a = g[hd] + w.ssm_dt[hd];
      const float softplus = a > 20.0f ? a : std::log(1.0f + std::exp(a));  // ggml's softplus
      g[hd] = softplus * w.ssm_a[hd];
    }
  }

  const kernels::DeltaNetShape shape{heads, c.ssm_groups, c.ssm_state, d_v,
                                     1.0f / std::sqrt(static_cast<float>(c.ssm_state)), c.ssm_grouped_heads};
  const int64_t delta_floats = int64_t{c.ssm_inner} * c.ssm_state;
  const int64_t tail_rows = c.ssm_conv_kernel - 1;
  for (const BatchSequence& s : b.sequences) {
    float* delta = cache.state(il, s.seq);
    float* conv = delta + delta_floats;
    const int64_t r = s.first;
    const bool snapshots = snapshots_states(s, cache);
    if (snapshots) {  // the conv tail after token i: the last tail_rows of [old tail, x_0 .. x_i]
      for (int32_t i = 0; i < s.n_tokens; ++i) {
        float* tail = cache.state_snapshot_tail(il, s.seq, i);
        for (int64_t row = 0; row < tail_rows; ++row) {
          const int64_t j = i - (tail_rows - 1) + row;  // input index; < 0: still the old tail
          const float* src = j < 0 ? conv + (tail_rows + j) * channels : ssm_mix_.data() + (r + j) * channels;
          std::memcpy(tail + row * channels, src, sizeof(float) * static_cast<size_t>(channels));
        }
      }
    }
    kernels::causal_conv1d(conv, ssm_mix_.data() + r * channels, channels, w.ssm_conv, nullptr,
                           ssm_conv_.data() + r * channels, s.n_tokens, channels, c.ssm_conv_kernel, /*silu=*/true);
    float* qkv = ssm_conv_.data() + r * channels;
    kernels::l2_norm_heads(qkv, s.n_tokens, channels, 2 * c.ssm_groups, c.ssm_state, c.norm_eps);  // q and k heads
    kernels::gated_delta_rule(delta, qkv, qkv + key_dim, channels, qkv + 2 * key_dim, channels,
                              ssm_g_.data() + r * heads, ssm_beta_.data() + r * heads,
                              ssm_core_.data() + r * value_dim, s.n_tokens, shape,
                              snapshots ? cache.state_snapshot(il, s.seq, 0) : nullptr, &pool_);
  }
  kernels::rms_norm_gated(ssm_core_.data(), ssm_z_.data(), w.ssm_norm, d_v, ssm_core_.data(), n, value_dim, d_v,
                          c.norm_eps, /*gate_first=*/false);
  if (observer_ != nullptr)
    observer_->on_matmul_input(il, MatmulSite::kAttnOutput, ssm_core_.data(), n, static_cast<int32_t>(value_dim));
  kernels::matmul(w.ssm_out, ssm_core_.data(), h_.data(), n, pool_, scratch_);
  apply_scale(h_.data(), n * d, w.scale.ssm_out);
  residual(nullptr, n);
}

}  // namespace ridge
