// Speculative decoding's exact accept/reject rule: given the target's and the draft's
// distributions at each drafted position, keeps a prefix of the drafted tokens and adds one
// token from the target, so that the output has exactly the target's distribution.
//
//   // target: [(gamma + 1) * n_vocab] rows p_1 .. p_{gamma+1}; draft: [gamma * n_vocab] rows
//   // q_1 .. q_gamma; drafted: [gamma] tokens, drafted[i] drawn from q_{i+1}.
//   SpeculativeStep step = verify_draft<float>(target, draft, drafted, sampler);
//   // keep drafted[0 .. step.n_accepted), then append step.next_token.
//
// The rule (Leviathan et al. 2023; Chen et al. 2023), for i = 1 .. gamma in order:
//   draw u ~ U[0, 1); accept x_i when u < p_i(x_i) / q_i(x_i);
//   at the first rejection, draw next_token from norm(max(0, p_i - q_i)) and stop;
// if all gamma are accepted, draw the bonus next_token from p_{gamma+1}.
// Greedy verification is the same rule with one-hot p and q: x_i is kept iff it is the
// target's argmax, and a rejection yields the target's argmax.
//
// Randomness: exactly one uniform draw per accept test plus one for next_token, from the
// caller's source (a Sampler, so a seeded request stays reproducible).
//
// Preconditions on the rows: non-negative, each summing to 1 up to rounding. Draws use each
// row's actual sum, so rounding never biases which token comes out. A drafted token with
// q_i(x_i) = 0 cannot have come from the draft; it is an error (ridge::Error), not a token
// to accept with an infinite ratio. If the residual max(0, p_i - q_i) is all zero (p_i == q_i
// up to rounding, where a rejection has probability ~1e-7), next_token is drawn from p_i.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace ridge {

class Sampler;

struct SpeculativeStep {
  int n_accepted = 0;      // drafted tokens kept, 0 .. gamma
  int32_t next_token = 0;  // resampled at the first rejection, or the bonus token
};

// Applies the rule. T is float or double. Throws ridge::Error on inconsistent sizes, a
// drafted token outside the vocabulary, or a drafted token the draft gave probability 0.
template <class T>
SpeculativeStep verify_draft(std::span<const T> target_probs,  // [(gamma + 1) * n_vocab]
                             std::span<const T> draft_probs,   // [gamma * n_vocab]
                             std::span<const int32_t> drafted,  // [gamma]
                             const std::function<double()>& uniform);

// The same, drawing from a Sampler's stream (Sampler::uniform).
template <class T>
SpeculativeStep verify_draft(std::span<const T> target_probs, std::span<const T> draft_probs,
                             std::span<const int32_t> drafted, Sampler& sampler);

// The rule for drafts a deterministic proposer made (n-gram lookup): q_i is one-hot at
// drafted[i], so x_i is accepted when u < p_i(x_i), and a rejection draws from
// norm(max(0, p_i - q_i)), which is p_i without x_i. Same draws, same result as
// verify_draft with one-hot draft rows, without materializing them.
template <class T>
SpeculativeStep verify_certain_draft(std::span<const T> target_probs,  // [(gamma + 1) * n_vocab]
                                     std::span<const int32_t> drafted,  // [gamma]
                                     const std::function<double()>& uniform);
template <class T>
SpeculativeStep verify_certain_draft(std::span<const T> target_probs, std::span<const int32_t> drafted,
                                     Sampler& sampler);

// Inverse-CDF draw from an unnormalized categorical: the first index whose cumulative
// weight exceeds u * sum(weights). u in [0, 1). Never returns an index of weight 0; throws
// ridge::Error if every weight is 0 (or the span is empty).
template <class T>
int32_t sample_categorical(std::span<const T> weights, double u);

}  // namespace ridge
