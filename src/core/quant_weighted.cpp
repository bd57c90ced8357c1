// The weighted quantizers' dispatch and the two searches only they use. The quantizers
// themselves sit beside their references (core/quant_legacy.cpp, core/quant_k_quantize.cpp),
// sharing the block layout code. Float expressions keep ggml's operand order (see
// core/quant_k_search.cpp): the codes chosen, and so the bytes, depend on the last bit.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include "core/quant_weighted.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/quant.h"
#include "core/quant_k_search.h"

namespace ridge {
namespace {

using WeightedQuantizeFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);

struct WeightedQuantizer {
  DType type;
  WeightedQuantizeFn quantize;
};

constexpr WeightedQuantizer kWeightedQuantizers[] = {
    {DType::Q4_0, quantize_row_q4_0_weighted}, {DType::Q4_1, quantize_row_q4_1_weighted},
    {DType::Q5_0, quantize_row_q5_0_weighted}, {DType::Q5_1, quantize_row_q5_1_weighted},
    {DType::Q4_K, quantize_row_q4_k_weighted}, {DType::Q5_K, quantize_row_q5_k_weighted},
    {DType::Q6_K, quantize_row_q6_k_weighted},
};

// ggml's quantizers of these types take no importance (quantize_q8_0 ignores it).
constexpr DType kUnweightedInGgml[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q8_1, DType::Q8_K};

const WeightedQuantizer* weighted_quantizer(DType type) {
  for (const WeightedQuantizer& q : kWeightedQuantizers)
    if (q.type == type) return &q;
  return nullptr;
}

int clamp_code(int l, int lo, int hi) { return std::max(lo, std::min(hi, l)); }

}  // namespace

bool quantizer_uses_importance(DType type) { return weighted_quantizer(type) != nullptr; }

void quantize_row_weighted(DType type, const float* src, void* dst, int64_t n, const float* importance) {
  const WeightedQuantizer* q = weighted_quantizer(type);
  const bool unweighted_in_ggml = std::ranges::find(kUnweightedInGgml, type) != std::end(kUnweightedInGgml);
  if (importance == nullptr || unweighted_in_ggml) {
    quantize_row(type, src, dst, n);
    return;
  }
  if (q == nullptr)
    throw Error(str_cat("quantize_row_weighted: ridge has no importance-weighted ", dtype_name(type), " quantizer"));
  const int64_t block = type_traits(type).block_size;
  if (n < 0 || n % block != 0)
    throw Error(str_cat("quantize_row_weighted: ", n, " elements is not a whole number of ", dtype_name(type),
                        " blocks of ", block));
  q->quantize(src, dst, n, importance);
}

namespace quant_k {

float fit_symmetric_scale_weighted(int n, int nmax, const float* x, const float* weights, int8_t* codes) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(codes, codes + n, int8_t{0});
    return 0.0f;
  }
  // sum w x l and sum w l^2 for inverse scale iscale; codes written only when `store`.
  auto fit = [&](float iscale, bool store, float* sum_xl, float* sum_ll) {
    *sum_xl = 0;
    *sum_ll = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) codes[i] = static_cast<int8_t>(l + nmax);
      *sum_xl += weights[i] * x[i] * static_cast<float>(l);
      *sum_ll += weights[i] * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float sum_xl, sum_ll;
  fit(static_cast<float>(-nmax) / max, true, &sum_xl, &sum_ll);
  float scale = sum_ll != 0.0f ? sum_xl / sum_ll : 0.0f;
  float best = scale * sum_xl;  // the fit's gain: sum_xl^2 / sum_ll
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    fit(iscale, false, &sum_xl, &sum_ll);
    if (sum_ll > 0 && sum_xl * sum_xl > best * sum_ll) {
      fit(iscale, true, &sum_xl, &sum_ll);
      scale = sum_xl / sum_ll;
      best = scale * sum_xl;
    }
  }
  return scale;
}

float fit_positive_scale(int n, int nmax, const float* x, const float* weights, uint8_t* codes) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::fill(codes, codes + n, uint8_t{0});
    return 0.0f;
  }
  // The first trial's codes are unclamped uint8s as in ggml (a negative x, which scales
  // and mins never are, would wrap); later trials clamp at nmax.
  auto squared_error = [&](float iscale, bool first) {
    const float scale = 1 / iscale;
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      const float code = first ? static_cast<float>(static_cast<uint8_t>(l)) : static_cast<float>(std::min(nmax, l));
      const float diff = x[i] - scale * code;
      error += weights[i] * diff * diff;
    }
    return error;
  };
  float iscale = static_cast<float>(nmax) / max;
  float best_error = squared_error(iscale, true);
  for (int step = -4; step <= 4; ++step) {
    if (step == 0) continue;
    const float trial = (0.1f * static_cast<float>(step) + static_cast<float>(nmax)) / max;
    const float error = squared_error(trial, false);
    if (error < best_error) {
      best_error = error;
      iscale = trial;
    }
  }
  float sum_xl = 0;
  float sum_ll = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    codes[i] = static_cast<uint8_t>(l);
    sum_xl += weights[i] * x[i] * static_cast<float>(l);
    sum_ll += weights[i] * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one code to its best value given the others' fit, keep the
  // move if the fit's gain sum_xl^2 / sum_ll grows.
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      const float old_l = static_cast<float>(codes[i]);
      float slx = sum_xl - w * x[i] * old_l;
      float sl2 = sum_ll - w * old_l * old_l;
      if (!(slx > 0 && sl2 > 0)) continue;
      const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (new_l == codes[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      if (slx * slx * sum_ll > sum_xl * sum_xl * sl2) {
        codes[i] = static_cast<uint8_t>(new_l);
        sum_xl = slx;
        sum_ll = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  return sum_ll > 0.0f ? sum_xl / sum_ll : 0.0f;
}

}  // namespace quant_k
}  // namespace ridge
