// Walsh-Hadamard rotation of attention vectors around a quantized KV cache (as QuaRot
// does, and llama.cpp for its quantized caches). A few channels of K (and of V) carry
// most of the magnitude in models such as Qwen2; a block of 32 quantized to its absmax
// then flattens every other channel of the block. An orthonormal rotation spreads that
// magnitude over all channels first. Scores are unchanged because q and k turn together
// (q.k = Hq.Hk); V is rotated before it is stored and the attention output turned back
// (sum p Hv = H sum p v, and H H = I).
//
//   const KvRotation r = kv_rotation(/*quantized_cache=*/true, d_head);   // {k: 64..256, v: 64}
//   hadamard_rotate(q, n * n_head * d_head, r.k);
#pragma once

#include <cstdint>

namespace ridge::kernels {

// Block sizes of the rotations, 0 for none: for a quantized cache whose head size is a
// multiple of 64, K (and q) in blocks of the largest power of two dividing d_head, V (and
// the output) in blocks of 64, as llama.cpp chooses them.
struct KvRotation {
  int64_t k = 0;
  int64_t v = 0;
};
KvRotation kv_rotation(bool quantized_cache, int64_t d_head);

// Replaces each consecutive `block` values of x[0, n) by H x / sqrt(block), H Sylvester's
// +-1 Hadamard matrix of that order (H[i][j] = (-1)^popcount(i & j)): an orthonormal,
// symmetric rotation, so applying it twice gives x back up to rounding. block is a power
// of two that divides n; 0 leaves x alone. O(n log block), in place.
void hadamard_rotate(float* x, int64_t n, int64_t block);

}  // namespace ridge::kernels
