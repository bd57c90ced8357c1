#include "kernels/ops/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ridge::kernels {

namespace {

void check_params(const RopeParams& p, int64_t d_head) {
  if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > d_head || p.n_rot > kMaxRopeDims)
    throw Error(str_cat("rope: n_rot ", p.n_rot, " must be even, positive and <= d_head (", d_head,
                        ") and <= ", kMaxRopeDims));
}

// Index pair that pair i rotates, in each layout.
inline void pair_index(RopeMode mode, int64_t n_rot, int64_t i, int64_t* a, int64_t* b) {
  if (mode == RopeMode::Norm) {
    *a = 2 * i;
    *b = 2 * i + 1;
  } else {
    *a = i;
    *b = i + n_rot / 2;
  }
}

// theta_i = pos * inv_freq[i]: the angles of one position, times mscale, rounded to float.
void token_angles(int32_t pos, const double* inv_freq, int64_t n_pairs, double mscale, float* cos_theta,
                  float* sin_theta) {
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double theta = pos * inv_freq[i];
    cos_theta[i] = static_cast<float>(mscale * std::cos(theta));
    sin_theta[i] = static_cast<float>(mscale * std::sin(theta));
  }
}

// The factor on pair i's unscaled frequency: freq_scale, or YaRN's mix of it and 1.
double frequency_factor(const RopeParams& p, int64_t i) {
  if (!p.yarn) return p.freq_scale;
  const double span = std::max(0.001, static_cast<double>(p.yarn_high) - p.yarn_low);
  const double r = 1.0 - std::clamp((static_cast<double>(i) - p.yarn_low) / span, 0.0, 1.0);
  return p.freq_scale * (1.0 - r) + r;
}

void inverse_frequencies(const RopeParams& params, double* inv_freq) {
  for (int64_t i = 0; i < params.n_rot / 2; ++i) {
    inv_freq[i] = frequency_factor(params, i) *
                  std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.n_rot);
    if (params.freq_factors != nullptr) inv_freq[i] /= static_cast<double>(params.freq_factors[i]);
  }
}

// Rotates the n_head heads of one token by the given angles.
void rotate_token(float* x, int64_t n_head, int64_t d_head, RopeMode mode, int64_t n_pairs, const float* cos_theta,
                  const float* sin_theta) {
  for (int64_t h = 0; h < n_head; ++h) {
    float* head = x + h * d_head;
    // The two layouts are separate loops so each is a plain stride the compiler vectorizes.
    if (mode == RopeMode::Norm) {
      for (int64_t i = 0; i < n_pairs; ++i) {
        const float x0 = head[2 * i], x1 = head[2 * i + 1];
        head[2 * i] = x0 * cos_theta[i] - x1 * sin_theta[i];
        head[2 * i + 1] = x0 * sin_theta[i] + x1 * cos_theta[i];
      }
    } else {
      float* lo = head;
      float* hi = head + n_pairs;
      for (int64_t i = 0; i < n_pairs; ++i) {
        const float x0 = lo[i], x1 = hi[i];
        lo[i] = x0 * cos_theta[i] - x1 * sin_theta[i];
        hi[i] = x0 * sin_theta[i] + x1 * cos_theta[i];
      }
    }
  }
}

}  // namespace

void yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                    float dims[2]) {
  // The pair index whose wavelength 2*pi*base^(2i/n_rot) fits n_rotations times in n_ctx_orig.
  auto corr_dim = [&](double n_rotations) {
    return static_cast<double>(n_rot) * std::log(static_cast<double>(n_ctx_orig) / (n_rotations * 2.0 * M_PI)) /
           (2.0 * std::log(static_cast<double>(freq_base)));
  };
  dims[0] = static_cast<float>(std::max(0.0, std::floor(corr_dim(beta_fast))));
  dims[1] = static_cast<float>(std::min(static_cast<double>(n_rot - 1), std::ceil(corr_dim(beta_slow))));
}

void rope(float* x, const int32_t* pos, int64_t n_tokens, int64_t n_head, int64_t d_head,
          const RopeParams& params, int64_t token_stride) {
  check_params(params, d_head);
  if (token_stride == 0) token_stride = n_head * d_head;
  const int64_t n_pairs = params.n_rot / 2;
  double inv_freq[kMaxRopeDims / 2];
  inverse_frequencies(params, inv_freq);
  float cos_theta[kMaxRopeDims / 2];
  float sin_theta[kMaxRopeDims / 2];
  for (int64_t t = 0; t < n_tokens; ++t) {
    token_angles(pos[t], inv_freq, n_pairs, params.mscale, cos_theta, sin_theta);
    rotate_token(x + t * token_stride, n_head, d_head, params.mode, n_pairs, cos_theta, sin_theta);
  }
}

size_t rope_table_floats(int64_t n_tokens, const RopeParams& params) {
  return static_cast<size_t>(n_tokens * params.n_rot);
}

void rope_table(const int32_t* pos, int64_t n_tokens, const RopeParams& params, float* table) {
  check_params(params, params.n_rot);
  const int64_t n_pairs = params.n_rot / 2;
  double inv_freq[kMaxRopeDims / 2];
  inverse_frequencies(params, inv_freq);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = table + t * params.n_rot;
    token_angles(pos[t], inv_freq, n_pairs, params.mscale, row, row + n_pairs);
  }
}

void rope_apply(float* x, const float* table, int64_t n_tokens, int64_t n_head, int64_t d_head,
                const RopeParams& params, int64_t token_stride) {
  check_params(params, d_head);
  if (token_stride == 0) token_stride = n_head * d_head;
  const int64_t n_pairs = params.n_rot / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = table + t * params.n_rot;
    rotate_token(x + t * token_stride, n_head, d_head, params.mode, n_pairs, row, row + n_pairs);
  }
}

void rope_reference(float* x, const int32_t* pos, int64_t n_tokens, int64_t n_head, int64_t d_head,
                    const RopeParams& params, int64_t token_stride) {
  check_params(params, d_head);
  if (token_stride == 0) token_stride = n_head * d_head;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      float* head = x + t * token_stride + h * d_head;
      for (int64_t i = 0; i < params.n_rot / 2; ++i) {
        const double extrapolated = static_cast<double>(pos[t]) *
                                    std::pow(static_cast<double>(params.freq_base),
                                             -2.0 * static_cast<double>(i) / static_cast<double>(params.n_rot));
        double theta = extrapolated * params.freq_scale;
        if (params.yarn) {  // the ramp, written out as the paper's mix of the two angles
          const double low = params.yarn_low, high = params.yarn_high;
          const double ramp = 1.0 - std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / std::max(0.001, high - low)));
          theta = theta * (1.0 - ramp) + extrapolated * ramp;
        }
        if (params.freq_factors != nullptr) theta /= static_cast<double>(params.freq_factors[i]);
        int64_t a = 0, b = 0;
        pair_index(params.mode, params.n_rot, i, &a, &b);
        const double x0 = head[a], x1 = head[b], m = params.mscale;
        head[a] = static_cast<float>(m * (x0 * std::cos(theta) - x1 * std::sin(theta)));
        head[b] = static_cast<float>(m * (x0 * std::sin(theta) + x1 * std::cos(theta)));
      }
    }
  }
}

}  // namespace ridge::kernels
