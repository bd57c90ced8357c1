// Picks the next token from a row of logits: penalties, top-k, top-p, min-p, temperature,
// then a draw from a per-request seeded RNG (greedy when temperature <= 0); optionally
// the log-probabilities OpenAI reports.
//
//   SamplingParams params;
//   params.temperature = 0.8f; params.top_p = 0.95f; params.seed = 42; params.n_logprobs = 5;
//   Sampler sampler(params);                           // throws ridge::Error on bad params
//   int32_t token = sampler.sample(logits, history);   // logits: [n_vocab], penalised in place
//   float lp = sampler.chosen_logprob();               // and sampler.top_logprobs()
//
// The chain, in llama.cpp's default order:
//  1. penalties over the last repeat_last_n tokens of history (-1: all of it, 0: none):
//     for each distinct token t seen c times, l[t] /= repetition_penalty if l[t] > 0 else
//     l[t] *= repetition_penalty; then l[t] -= c * frequency_penalty + presence_penalty.
//  2. top-k: keep the k largest logits (0 = off).
//  3. top-p: softmax (temperature 1) over what is left; keep the shortest prefix, in
//     decreasing order, whose mass reaches top_p (the token that crosses it included).
//  4. min-p: keep tokens whose probability is at least min_p times the largest, i.e.
//     l >= l_max + log(min_p).
//  5. temperature: p ∝ exp((l - l_max) / temperature) over the kept tokens; draw one.
// Ties between equal logits go to the lower token id everywhere (greedy, top-k, top-p).
//
// Reproducibility: the RNG is xoshiro256** seeded through splitmix64 and a draw is
// (next() >> 11) * 2^-53, so a seed gives the same tokens on every platform (given the same
// logits and the same libm exp). Each non-greedy sample() consumes exactly one draw.
//
// Logprobs are of the distribution after penalties but before top-k/top-p/min-p and
// temperature: log_softmax of the penalised logits, as OpenAI reports them. Tokens whose
// logit is -inf (refused by a grammar) are never among the top_logprobs alternatives.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off; in [0, 1]
  float min_p = 0.0f;               // 0 = off; in [0, 1]
  float repetition_penalty = 1.0f;  // 1 = off; > 0
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int repeat_last_n = 64;           // history tokens the penalties look at; -1 = all, 0 = off
  uint64_t seed = 0;
  bool logprobs = false;            // report the chosen token's logprob
  int n_logprobs = 0;               // and that many most likely alternatives (implies logprobs)
};

// Throws ridge::Error naming the field if a parameter is out of range.
void validate(const SamplingParams& params);

// The seed of choice `index` of a request with seed `seed` (n completions of one prompt:
// the server's `n`, the Python package's SamplingParams.n): choice 0 keeps the seed, so a
// request with n = 1 reproduces the first choice of the same request with n > 1.
uint64_t choice_seed(uint64_t seed, int32_t index);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// Applies step 1 of the chain to logits in place. Throws ridge::Error on a history token
// outside 0 .. logits.size() - 1.
void apply_penalties(std::span<float> logits, std::span<const int32_t> history,
                     const SamplingParams& params);

// The probability with which Sampler::sample draws each token, computed plainly (copy,
// full sort, the chain as documented): the reference the sampler is tested against.
// [n_vocab]; zero for filtered tokens; one-hot at the argmax when temperature <= 0.
std::vector<double> filtered_distribution(std::span<const float> logits,
                                          const SamplingParams& params,
                                          std::span<const int32_t> history = {});

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Penalises logits in place, then picks a token. history: tokens of the sequence so far
  // (prompt and generated), oldest first. Scratch buffers are sized on the first call and
  // reused: later calls with the same vocabulary do not allocate.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  // After sample(), when params.logprobs or n_logprobs > 0: the chosen token's logprob and
  // the n_logprobs most likely tokens, most likely first.
  float chosen_logprob() const { return chosen_logprob_; }
  std::span<const TokenLogprob> top_logprobs() const { return top_logprobs_; }

  // Speculative decoding. The distribution sample() draws from, written densely into
  // probs ([n_vocab]; one-hot at the argmax when greedy), after penalising logits in place
  // as sample() does. Draws nothing.
  void distribution(std::span<float> logits, std::span<const int32_t> history, std::span<float> probs);
  // When logprobs are wanted: sets chosen_logprob() and top_logprobs() for a token chosen
  // from already penalised logits (as verification chooses them).
  void record_logprobs(std::span<const float> logits, int32_t chosen);

  // A uniform draw in [0, 1) from the sampler's stream (for speculative acceptance).
  double uniform();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  // Higher logit first, then lower id: a strict total order, so sorts are reproducible.
  static bool more_likely(const Candidate& a, const Candidate& b);
  uint64_t next_random();
  void ensure_scratch(size_t n_vocab);
  size_t select_top(std::span<const float> logits, size_t k);  // top k into candidates_, sorted
  size_t top_p_prefix(size_t n);  // returns how many sorted candidates top-p keeps
  // Steps 2-5 of the chain: candidates_[0, n) kept, weights_ their unnormalised
  // probabilities; returns n. Needs temperature > 0.
  size_t filter(std::span<const float> logits);
  void compute_logprobs(std::span<const float> logits, int32_t chosen);

  SamplingParams params_;
  uint64_t rng_state_[4] = {};
  std::vector<Candidate> candidates_;  // [n_vocab] scratch
  std::vector<double> weights_;        // [n_vocab] scratch
  std::vector<int32_t> counts_;        // [n_vocab] occurrences in the penalty window; kept all 0
  std::vector<TokenLogprob> top_logprobs_;
  float chosen_logprob_ = 0.0f;
};

}  // namespace ridge
