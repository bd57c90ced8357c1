#include "engine/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sampler.h"

namespace ridge {
namespace {

// The residual weight max(0, p - q), in double so that float rows do not round to 0 early.
template <class T>
double residual(T p, T q) {
  return std::max(0.0, static_cast<double>(p) - static_cast<double>(q));
}

// Draws from norm(max(0, p - q)) without materializing it: one pass for the sum, one to
// find the token. Falls back to p when the residual is all zero (see the header).
template <class T>
int32_t draw_residual(std::span<const T> p, std::span<const T> q, double u) {
  double total = 0.0;
  for (size_t j = 0; j < p.size(); ++j) total += residual(p[j], q[j]);
  if (!(total > 0.0)) return sample_categorical(p, u);
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_positive = -1;
  for (size_t j = 0; j < p.size(); ++j) {
    const double r = residual(p[j], q[j]);
    if (r <= 0.0) continue;
    cumulative += r;
    last_positive = static_cast<int32_t>(j);
    if (cumulative > target) return last_positive;
  }
  return last_positive;  // u * total rounded above the final cumulative sum
}

}  // namespace

template <class T>
int32_t sample_categorical(std::span<const T> weights, double u) {
  double total = 0.0;
  for (T w : weights) total += static_cast<double>(w);
  if (!(total > 0.0))
    throw Error(str_cat("sample_categorical: the ", weights.size(), " weights sum to ", total,
                        "; need a positive total"));
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_positive = -1;
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!(weights[j] > 0)) continue;
    cumulative += static_cast<double>(weights[j]);
    last_positive = static_cast<int32_t>(j);
    if (cumulative > target) return last_positive;
  }
  return last_positive;
}

template <class T>
SpeculativeStep verify_draft(std::span<const T> target_probs, std::span<const T> draft_probs,
                             std::span<const int32_t> drafted,
                             const std::function<double()>& uniform) {
  const size_t gamma = drafted.size();
  if (target_probs.empty() || target_probs.size() % (gamma + 1) != 0)
    throw Error(str_cat("verify_draft: target distributions hold ", target_probs.size(),
                        " values, not (gamma + 1) * n_vocab with gamma = ", gamma));
  const size_t n_vocab = target_probs.size() / (gamma + 1);
  if (draft_probs.size() != gamma * n_vocab)
    throw Error(str_cat("verify_draft: draft distributions hold ", draft_probs.size(),
                        " values; expected gamma * n_vocab = ", gamma, " * ", n_vocab));

  SpeculativeStep step;
  for (size_t i = 0; i < gamma; ++i) {
    std::span<const T> p = target_probs.subspan(i * n_vocab, n_vocab);
    std::span<const T> q = draft_probs.subspan(i * n_vocab, n_vocab);
    const int32_t x = drafted[i];
    if (x < 0 || static_cast<size_t>(x) >= n_vocab)
      throw Error(str_cat("verify_draft: drafted token ", x, " at position ", i,
                          " is outside the vocabulary of ", n_vocab));
    if (!(q[x] > 0))
      throw Error(str_cat("verify_draft: drafted token ", x, " at position ", i,
                          " has draft probability ", q[x],
                          "; drafted tokens must be drawn from the draft distribution"));
    // u < p/q, written without the division; u in [0, 1), so p >= q always accepts and
    // p == 0 never does.
    const double u = uniform();
    if (u * static_cast<double>(q[x]) < static_cast<double>(p[x])) {
      ++step.n_accepted;
      continue;
    }
    step.next_token = draw_residual(p, q, uniform());
    return step;
  }
  step.next_token = sample_categorical(target_probs.subspan(gamma * n_vocab, n_vocab), uniform());
  return step;
}

template <class T>
SpeculativeStep verify_certain_draft(std::span<const T> target_probs, std::span<const int32_t> drafted,
                                     const std::function<double()>& uniform) {
  const size_t gamma = drafted.size();
  if (target_probs.empty() || target_probs.size() % (gamma + 1) != 0)
    throw Error(str_cat("verify_certain_draft: target distributions hold ", target_probs.size(),
                        " values, not (gamma + 1) * n_vocab with gamma = ", gamma));
  const size_t n_vocab = target_probs.size() / (gamma + 1);
  SpeculativeStep step;
  for (size_t i = 0; i < gamma; ++i) {
    std::span<const T> p = target_probs.subspan(i * n_vocab, n_vocab);
    const int32_t x = drafted[i];
    if (x < 0 || static_cast<size_t>(x) >= n_vocab)
      throw Error(str_cat("verify_certain_draft: drafted token ", x, " at position ", i,
                          " is outside the vocabulary of ", n_vocab));
    const double u = uniform();
    if (u < static_cast<double>(p[x])) {
      ++step.n_accepted;
      continue;
    }
    // The residual is p with x's weight taken out; all zero only if p was one-hot at x,
    // which u < 1 would have accepted.
    const double v = uniform();
    double total = 0.0;
    for (size_t j = 0; j < n_vocab; ++j) total += j == static_cast<size_t>(x) ? 0.0 : static_cast<double>(p[j]);
    if (!(total > 0.0)) {
      step.next_token = sample_categorical(p, v);
      return step;
    }
    const double target = v * total;
    double cumulative = 0.0;
    int32_t last_positive = -1;
    for (size_t j = 0; j < n_vocab; ++j) {
      if (j == static_cast<size_t>(x) || !(p[j] > 0)) continue;
      cumulative += static_cast<double>(p[j]);
      last_positive = static_cast<int32_t>(j);
      if (cumulative > target) break;
    }
    step.next_token = last_positive;
    return step;
  }
  step.next_token = sample_categorical(target_probs.subspan(gamma * n_vocab, n_vocab), uniform());
  return step;
}

template <class T>
SpeculativeStep verify_certain_draft(std::span<const T> target_probs, std::span<const int32_t> drafted,
                                     Sampler& sampler) {
  return verify_certain_draft<T>(target_probs, drafted,
                                 std::function<double()>([&sampler] { return sampler.uniform(); }));
}

template <class T>
SpeculativeStep verify_draft(std::span<const T> target_probs, std::span<const T> draft_probs,
                             std::span<const int32_t> drafted, Sampler& sampler) {
  return verify_draft<T>(target_probs, draft_probs, drafted,
                         std::function<double()>([&sampler] { return sampler.uniform(); }));
}

template int32_t sample_categorical<float>(std::span<const float>, double);
template int32_t sample_categorical<double>(std::span<const double>, double);
template SpeculativeStep verify_draft<float>(std::span<const float>, std::span<const float>,
                                             std::span<const int32_t>, const std::function<double()>&);
template SpeculativeStep verify_draft<double>(std::span<const double>, std::span<const double>,
                                              std::span<const int32_t>, const std::function<double()>&);
template SpeculativeStep verify_draft<float>(std::span<const float>, std::span<const float>,
                                             std::span<const int32_t>, Sampler&);
template SpeculativeStep verify_draft<double>(std::span<const double>, std::span<const double>,
                                              std::span<const int32_t>, Sampler&);
template SpeculativeStep verify_certain_draft<float>(std::span<const float>, std::span<const int32_t>,
                                                     const std::function<double()>&);
template SpeculativeStep verify_certain_draft<double>(std::span<const double>, std::span<const int32_t>,
                                                      const std::function<double()>&);
template SpeculativeStep verify_certain_draft<float>(std::span<const float>, std::span<const int32_t>, Sampler&);
template SpeculativeStep verify_certain_draft<double>(std::span<const double>, std::span<const int32_t>, Sampler&);

}  // namespace ridge
