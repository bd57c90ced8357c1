#include "kernels/rope.h"

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

// theta_i = pos * inv_freq[i]: the angles of one position, rounded to float.
void token_angles(int32_t pos, const double* inv_freq, int64_t n_pairs, float* cos_theta, float* sin_theta) {
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double theta = pos * inv_freq[i];
    cos_theta[i] = static_cast<float>(std::cos(theta));
    sin_theta[i] = static_cast<float>(std::sin(theta));
  }
}

void inverse_frequencies(const RopeParams& params, double* inv_freq) {
  for (int64_t i = 0; i < params.n_rot / 2; ++i)
    inv_freq[i] = params.freq_scale *
                  std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.n_rot);
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
    token_angles(pos[t], inv_freq, n_pairs, cos_theta, sin_theta);
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
    token_angles(pos[t], inv_freq, n_pairs, row, row + n_pairs);
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
        const double theta = static_cast<double>(pos[t]) * params.freq_scale *
                             std::pow(static_cast<double>(params.freq_base),
                                      -2.0 * static_cast<double>(i) / static_cast<double>(params.n_rot));
        int64_t a = 0, b = 0;
        pair_index(params.mode, params.n_rot, i, &a, &b);
        const double x0 = head[a], x1 = head[b];
        head[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
        head[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
      }
    }
  }
}

}  // namespace ridge::kernels
