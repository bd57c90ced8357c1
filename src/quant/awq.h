// AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization"): a few input
// channels carry large activations, and their weights matter most. For each group of
// matrices that share an input X (q/k/v after attn_norm, gate/up after ffn_norm, down after
// the gated activation), every input channel j is scaled by s_j: by default AutoAWQ's
// s_j = mean|x_j|^alpha / mean(|w| / block absmax)_j^(1 - alpha), or the paper's
// s_j = mean|x_j|^alpha (duo_scaling false), normalized by sqrt(max s * min s). The
// matrices' columns are multiplied by s and the operation before them divides by s (the
// norm's weight, or up's rows for down), so the model computes the same function and the
// salient channels quantize with finer steps.
// alpha is searched on a grid of 20 per group, minimising ||X W^T - X (Q(W diag(s)) diag(1/s))^T||^2
// on a sample of calibration tokens spread over the set, with each matrix rounded to
// nearest in its recipe type; s = 1 (plain round to nearest) is a candidate.
// With weighted_fit each matrix is rounded by its format's importance-weighted search
// (core/quant_weighted.h, the scaled columns' mean x^2 as importance) both in the search
// and in the output (AwqResult::importance): AWQ followed by what an imatrix does. Before
// GPTQ (awq-gptq) it weighs the search only, where it judges each alpha by blocks fitted
// as GPTQ will fit them (by the same column importance, GPTQ's diag H).
// Measured on Qwen2.5-Coder 0.5B Q4_0 (docs/quantization.md): mean KLD -14% against round
// to nearest with duo scales and +1% with the paper's; -27% with duo scales and the
// weighted fit. On Qwen2.5-Coder 1.5B, where AWQ alone stays at -21%, awq-gptq with the
// weighted search gives -30% (GPTQ alone -25% to -27%; the search with round to nearest -24%).
// (AWQ's clipping search is not here: shrinking a GGUF block's range, scored by the same
// output error or by the block's X^T X, lowered that error and raised the model's KL
// divergence on Qwen2.5-Coder 0.5B Q4_0.)
//
// The attention output takes its 1/s from attn_v's rows (and bias). With GQA a V row feeds
// the same channel of n_rep query heads, so those channels share one scale (their mean
// statistics); AutoAWQ leaves this group out under GQA.
//
//   AwqResult r = awq_model(model, file, target, set, {}, progress);
//   r.tensors.at("blk.0.attn_q.weight")   // f32 [rows][cols], columns scaled
//   r.tensors.at("blk.0.attn_norm.weight")  // f32 [n_embd], divided by s
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/recipe.h"

namespace ridge::quant {

struct AwqOptions {
  int32_t grid = 20;            // alphas 0, 1/grid, ..., (grid - 1)/grid (AutoAWQ's 20)
  int32_t sample_tokens = 256;  // calibration tokens per group the error is measured on
  float fixed_alpha = -1.0f;    // >= 0: use this alpha everywhere instead of searching
  bool weighted_fit = false;    // round with the format's importance-weighted search (the
                                // scaled columns' mean x^2 as importance, as an imatrix
                                // weighs them) in the search and in AwqResult::importance,
                                // instead of its reference round to nearest
  bool duo_scaling = true;      // s = mean|x|^alpha / mean|w~|^(1 - alpha) (AutoAWQ's default),
                                // |w~| each weight over its block's absmax, averaged per column
                                // over the group's rows; s = 1 stays a candidate. false:
                                // s = mean|x|^alpha (the AWQ paper's)
};

struct AwqResult {
  std::map<std::string, std::vector<float>> tensors;  // every tensor AWQ changed, in f32
  // With weighted_fit: each scaled matrix's column importance (mean x^2 of its inputs,
  // divided by s^2 as the scaling moved them), for quantize_rows_weighted.
  std::map<std::string, std::vector<float>> importance;
};

// One whole-model pass over the calibration set (scaling keeps the function, so later
// layers see the same activations), then the search and the folding, layer by layer.
AwqResult awq_model(Model& model, const gguf::File& file, const QuantTarget& target, const CalibrationSet& set,
                    const AwqOptions& options, const std::function<void(const std::string&)>& progress);

}  // namespace ridge::quant
