// Scale searches of the K-quant reference quantizers. Every float expression keeps the
// operand order of ggml's reference (ggml-quants.c), since the chosen codes, and so the
// bytes written, depend on the last bit of these sums.
#include "core/quant_exact_fp.h"  // first: no FMA contraction in this file

#include "core/quant_k_search.h"

#include <algorithm>
#include <cmath>

namespace ridge::quant_k {
namespace {

// The value of largest magnitude with its sign (first on ties) and that magnitude.
void signed_max(int n, const float* x, float* value, float* magnitude) {
  *value = 0;
  *magnitude = 0;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > *magnitude) {
      *magnitude = a;
      *value = x[i];
    }
  }
}

int clamp_code(int l, int lo, int hi) { return std::max(lo, std::min(hi, l)); }

// Weighted (by x^2) least-squares terms of x ~ s * l: sum w x l and sum w l^2.
struct FitSums {
  float sum_xl = 0;
  float sum_ll = 0;
};

}  // namespace

float fit_symmetric_scale(int n, int nmax, const float* x, int8_t* codes) {
  float max = 0;
  float amax = 0;
  signed_max(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(codes, codes + n, int8_t{0});
    return 0.0f;
  }
  // The sums for inverse scale iscale; codes are written only when `store`.
  auto fit = [&](float iscale, bool store) {
    FitSums s;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) codes[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      s.sum_xl += w * x[i] * static_cast<float>(l);
      s.sum_ll += w * static_cast<float>(l) * static_cast<float>(l);
    }
    return s;
  };
  FitSums s = fit(static_cast<float>(-nmax) / max, true);
  float scale = s.sum_ll != 0.0f ? s.sum_xl / s.sum_ll : 0.0f;
  float best = scale * s.sum_xl;  // the fit's gain: sum_xl^2 / sum_ll
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    s = fit(iscale, false);
    if (s.sum_ll > 0 && s.sum_xl * s.sum_xl > best * s.sum_ll) {
      fit(iscale, true);
      scale = s.sum_xl / s.sum_ll;
      best = scale * s.sum_xl;
    }
  }
  return scale;
}

float fit_symmetric_scale_q3(int n, int nmax, const float* x, int8_t* codes) {
  float max = 0;
  float amax = 0;
  signed_max(n, x, &max, &amax);
  if (amax < kGroupMaxEps) {
    std::fill(codes, codes + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sum_xl = 0;
  float sum_ll = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_code(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    codes[i] = static_cast<int8_t>(l);  // signed while refining
    const float w = x[i] * x[i];
    sum_xl += w * x[i] * static_cast<float>(l);
    sum_ll += w * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one code to its best value given the others' fit, keep the
  // move if the fit's gain sum_xl^2 / sum_ll grows.
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float old_l = static_cast<float>(codes[i]);
      float slx = sum_xl - w * x[i] * old_l;
      if (slx <= 0) continue;
      float sl2 = sum_ll - w * old_l * old_l;
      const int new_l = clamp_code(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == codes[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      if (sl2 > 0 && slx * slx * sum_ll > sum_xl * sum_xl * sl2) {
        codes[i] = static_cast<int8_t>(new_l);
        sum_xl = slx;
        sum_ll = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) codes[i] = static_cast<int8_t>(codes[i] + nmax);
  return sum_ll > 0.0f ? sum_xl / sum_ll : 0.0f;
}

float fit_scale_and_min(int n, int nmax, const float* x, const float* weights,
                        uint8_t* codes, float* neg_min, uint8_t* scratch, float rmin,
                        float rdelta, int nstep, bool use_abs_error) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever pulls values down
  if (max == min) {
    std::fill(codes, codes + n, uint8_t{0});
    *neg_min = -min;
    return 0.0f;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* l) {
    float error = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * static_cast<float>(l[i]) + offset - x[i];
      diff = use_abs_error ? std::fabs(diff) : diff * diff;
      error += weights[i] * diff;
    }
    return error;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i)
    codes[i] = static_cast<uint8_t>(clamp_code(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = error_of(scale, min, codes);
  if (nstep < 1) {
    *neg_min = -min;
    return scale;
  }
  // Each trial rounds against the best offset so far, then solves the weighted least
  // squares for scale and offset, with the offset held at or below zero.
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0;
    float sum_l2 = 0;
    float sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_code(nearest_int(iscale * (x[i] - min)), 0, nmax);
      scratch[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float error = error_of(this_scale, this_min, scratch);
    if (error < best_error) {
      std::copy(scratch, scratch + n, codes);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

}  // namespace ridge::quant_k
