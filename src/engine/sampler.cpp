#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace ridge {
namespace {

// Penalties with a caller-owned counts array that is all zeros on entry and on exit, so
// that the sampler can reuse it without clearing n_vocab entries per call.
void penalise(std::span<float> logits, std::span<const int32_t> history,
              const SamplingParams& p, std::span<int32_t> counts) {
  if (p.repeat_last_n == 0 || history.empty()) return;
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
      p.frequency_penalty == 0.0f) {
    return;
  }
  const size_t n_window = p.repeat_last_n < 0
                              ? history.size()
                              : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
  const std::span<const int32_t> window = history.last(n_window);
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < window.size(); ++i) {
    if (window[i] < 0 || window[i] >= n_vocab) {
      throw Error(str_cat("sampler: history token ", window[i], " at position ",
                          history.size() - window.size() + i, " is outside the vocabulary 0..",
                          n_vocab - 1));
    }
  }
  for (int32_t t : window) ++counts[static_cast<size_t>(t)];
  for (int32_t t : window) {
    const int32_t c = counts[static_cast<size_t>(t)];
    if (c == 0) continue;  // already penalised
    counts[static_cast<size_t>(t)] = 0;
    float& l = logits[static_cast<size_t>(t)];
    l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
  }
}

// The largest value. Eight independent lanes break the dependency chain (and let the
// compiler use vector max) over a vocabulary of 10^5 logits.
float max_of(std::span<const float> x) {
  float lane[8];
  std::fill(lane, lane + 8, x[0]);
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    for (size_t j = 0; j < 8; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  }
  for (; i < x.size(); ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
  return *std::max_element(lane, lane + 8);
}

// The first (lowest id) position of the largest logit.
int32_t argmax(std::span<const float> logits) {
  const float largest = max_of(logits);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == largest) return static_cast<int32_t>(i);
  }
  return 0;  // only when logits[0] is NaN
}

float min_p_threshold(float max_logit, float min_p) { return max_logit + std::log(min_p); }

// The reference's weight, in double; the sampler computes the same in float.
double temperature_weight(float logit, float max_logit, float temperature) {
  return std::exp((static_cast<double>(logit) - max_logit) / temperature);
}

// exp(logit - max_logit) in float: the sampler evaluates it for up to the whole vocabulary,
// and single precision (relative error ~1e-7) is far below anything a draw can resolve.
float shifted_exp(float logit, float max_logit) { return std::exp(logit - max_logit); }

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t choice_seed(uint64_t seed, int32_t index) {
  if (index == 0) return seed;
  // splitmix64 of (seed, index): distinct, well-mixed streams for the other choices.
  uint64_t z = seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void validate(const SamplingParams& p) {
  if (std::isnan(p.temperature)) throw Error("sampling: temperature is NaN");
  if (p.top_k < 0) throw Error(str_cat("sampling: top_k must be >= 0, got ", p.top_k));
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) {
    throw Error(str_cat("sampling: top_p must be in [0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    throw Error(str_cat("sampling: min_p must be in [0, 1], got ", p.min_p));
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    throw Error(str_cat("sampling: repetition_penalty must be positive, got ",
                        p.repetition_penalty));
  }
  if (!std::isfinite(p.presence_penalty)) {
    throw Error(str_cat("sampling: presence_penalty must be finite, got ", p.presence_penalty));
  }
  if (!std::isfinite(p.frequency_penalty)) {
    throw Error(str_cat("sampling: frequency_penalty must be finite, got ",
                        p.frequency_penalty));
  }
  if (p.repeat_last_n < -1) {
    throw Error(str_cat("sampling: repeat_last_n must be >= -1, got ", p.repeat_last_n));
  }
  if (p.n_logprobs < 0) {
    throw Error(str_cat("sampling: n_logprobs must be >= 0, got ", p.n_logprobs));
  }
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                     const SamplingParams& params) {
  std::vector<int32_t> counts(logits.size(), 0);
  penalise(logits, history, params, counts);
}

std::vector<double> filtered_distribution(std::span<const float> logits_in,
                                          const SamplingParams& p,
                                          std::span<const int32_t> history) {
  validate(p);
  if (logits_in.empty()) throw Error("sampler: empty logits");
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  apply_penalties(logits, history, p);
  std::vector<double> probs(logits.size(), 0.0);
  if (p.temperature <= 0.0f) {
    probs[static_cast<size_t>(argmax(logits))] = 1.0;
    return probs;
  }
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  auto logit = [&](size_t rank) { return logits[static_cast<size_t>(order[rank])]; };
  const float max_logit = logit(0);
  size_t n = order.size();
  if (p.top_k > 0) n = std::min(n, static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (size_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(logit(i)) - max_logit);
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(logit(i)) - max_logit);
      if (cum >= p.top_p * z) {
        n = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const float threshold = min_p_threshold(max_logit, p.min_p);
    size_t kept = 1;  // the most likely token always passes
    while (kept < n && logit(kept) >= threshold) ++kept;
    n = kept;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double w = temperature_weight(logit(i), max_logit, p.temperature);
    probs[static_cast<size_t>(order[i])] = w;
    total += w;
  }
  for (size_t i = 0; i < n; ++i) probs[static_cast<size_t>(order[i])] /= total;
  return probs;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  validate(params_);
  uint64_t seed = params_.seed;
  for (uint64_t& s : rng_state_) s = splitmix64(seed);
  top_logprobs_.reserve(static_cast<size_t>(params_.n_logprobs));
}

uint64_t Sampler::next_random() {
  // xoshiro256** (Blackman and Vigna).
  uint64_t* s = rng_state_;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

bool Sampler::more_likely(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

double Sampler::uniform() { return static_cast<double>(next_random() >> 11) * 0x1.0p-53; }

void Sampler::ensure_scratch(size_t n_vocab) {
  if (candidates_.size() == n_vocab) return;
  candidates_.resize(n_vocab);
  weights_.resize(n_vocab);
  counts_.assign(n_vocab, 0);
}

// Sorts as much of candidates_[0, n) as top-p needs, most likely first, and returns how
// many it keeps. Distributions are usually peaked, so it sorts a short prefix and widens
// it only while the prefix's mass falls short; a flat one ends in a full sort.
size_t Sampler::top_p_prefix(size_t n) {
  float max_logit = candidates_[0].logit;
  for (size_t i = 1; i < n; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
  double z = 0.0;
  for (size_t i = 0; i < n; ++i) z += shifted_exp(candidates_[i].logit, max_logit);
  const double target = params_.top_p * z;
  // [0, sorted) holds the `sorted` most likely candidates in order; everything after is
  // less likely, so widening only needs to sort the next stretch of the rest.
  double cum = 0.0;
  size_t sorted = 0;
  size_t m = std::min<size_t>(n, 64);
  for (;;) {
    const auto begin = candidates_.begin();
    std::partial_sort(begin + static_cast<ptrdiff_t>(sorted), begin + static_cast<ptrdiff_t>(m),
                      begin + static_cast<ptrdiff_t>(n), more_likely);
    for (; sorted < m; ++sorted) {
      cum += shifted_exp(candidates_[sorted].logit, max_logit);
      if (cum >= target) return sorted + 1;
    }
    if (m == n) return n;
    m = std::min(n, m * 4);
  }
}

size_t Sampler::filter(std::span<const float> logits) {
  // Every step leaves candidates_[0, n) in a platform-independent order: id order, or
  // sorted by more_likely (a strict total order), so a draw over them is reproducible.
  size_t n = logits.size();
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = select_top(logits, static_cast<size_t>(params_.top_k));
    sorted = true;
  } else {
    for (size_t i = 0; i < n; ++i) candidates_[i] = Candidate{logits[i], static_cast<int32_t>(i)};
  }
  if (params_.top_p < 1.0f) {
    n = top_p_prefix(n);
    sorted = true;
  }
  float max_logit = candidates_[0].logit;
  if (!sorted) {
    for (size_t i = 1; i < n; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
  }
  if (params_.min_p > 0.0f) {
    const float threshold = min_p_threshold(max_logit, params_.min_p);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (candidates_[i].logit >= threshold) candidates_[kept++] = candidates_[i];
    }
    n = kept;  // >= 1: the largest logit passes
  }
  // p ∝ exp((l - l_max) / temperature), as exp((l - l_max) * (1 / temperature)).
  const float inverse_temperature = 1.0f / params_.temperature;
  for (size_t i = 0; i < n; ++i) {
    weights_[i] = std::exp((candidates_[i].logit - max_logit) * inverse_temperature);
  }
  return n;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  if (logits.empty()) throw Error("sampler: empty logits");
  ensure_scratch(logits.size());
  penalise(logits, history, params_, counts_);

  int32_t chosen = 0;
  if (params_.temperature <= 0.0f) {
    chosen = argmax(logits);
  } else {
    const size_t n = filter(logits);
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += weights_[i];
    const double target = uniform() * total;
    double cum = 0.0;
    size_t pick = 0;
    for (size_t i = 0; i < n; ++i) {
      if (weights_[i] > 0.0) pick = i;  // if rounding leaves target past the last sum
      cum += weights_[i];
      if (target < cum) break;
    }
    chosen = candidates_[pick].id;
  }
  if (params_.logprobs || params_.n_logprobs > 0) compute_logprobs(logits, chosen);
  return chosen;
}

void Sampler::distribution(std::span<float> logits, std::span<const int32_t> history,
                           std::span<float> probs) {
  if (logits.empty()) throw Error("sampler: empty logits");
  if (probs.size() != logits.size()) {
    throw Error(str_cat("sampler: distribution: ", probs.size(), " probabilities for ", logits.size(), " logits"));
  }
  ensure_scratch(logits.size());
  penalise(logits, history, params_, counts_);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (params_.temperature <= 0.0f) {
    probs[static_cast<size_t>(argmax(logits))] = 1.0f;
    return;
  }
  const size_t n = filter(logits);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += weights_[i];
  for (size_t i = 0; i < n; ++i) {
    probs[static_cast<size_t>(candidates_[i].id)] = static_cast<float>(weights_[i] / total);
  }
}

void Sampler::record_logprobs(std::span<const float> logits, int32_t chosen) {
  if (!(params_.logprobs || params_.n_logprobs > 0)) return;
  ensure_scratch(logits.size());
  compute_logprobs(logits, chosen);
}

// Keeps the k most likely logits in candidates_[0, k), sorted. One pass with a bounded
// heap whose front is the least likely kept: in a long vocabulary almost every logit is
// rejected by one comparison, where nth_element would move them all.
size_t Sampler::select_top(std::span<const float> logits, size_t k) {
  const auto begin = candidates_.begin();
  const auto end = begin + static_cast<ptrdiff_t>(k);
  for (size_t i = 0; i < k; ++i) candidates_[i] = Candidate{logits[i], static_cast<int32_t>(i)};
  std::make_heap(begin, end, more_likely);
  for (size_t i = k; i < logits.size(); ++i) {
    // Ids arrive in increasing order, so an equal logit loses to the kept one.
    if (!(logits[i] > candidates_[0].logit)) continue;
    std::pop_heap(begin, end, more_likely);
    candidates_[k - 1] = Candidate{logits[i], static_cast<int32_t>(i)};
    std::push_heap(begin, end, more_likely);
  }
  std::sort_heap(begin, end, more_likely);
  return k;
}

void Sampler::compute_logprobs(std::span<const float> logits, int32_t chosen) {
  const float max_logit = max_of(logits);
  double sum = 0.0;
  for (float l : logits) sum += shifted_exp(l, max_logit);
  const double log_z = max_logit + std::log(sum);
  chosen_logprob_ = static_cast<float>(logits[static_cast<size_t>(chosen)] - log_z);

  const size_t n_top = std::min(logits.size(), static_cast<size_t>(params_.n_logprobs));
  top_logprobs_.resize(n_top);  // within the capacity reserved at construction
  if (n_top == 0) return;
  select_top(logits, n_top);
  size_t kept = 0;
  for (size_t i = 0; i < n_top; ++i) {
    // A token a grammar refused (logit -inf) cannot come out: it is no alternative.
    if (std::isinf(candidates_[i].logit) && candidates_[i].logit < 0) continue;
    top_logprobs_[kept++] = TokenLogprob{candidates_[i].id, static_cast<float>(candidates_[i].logit - log_z)};
  }
  top_logprobs_.resize(kept);
}

}  // namespace ridge
