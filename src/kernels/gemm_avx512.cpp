// AVX-512 VNNI quantized GEMM: weight rows in vector lanes, so no horizontal sums in
// batches.
//
// The AVX2 tiles put one weight row against several tokens and reduce each block dot
// across lanes. Here a batch of tokens (prefill, or at least K::kPanelTokens sequences)
// first packs a panel of 16 weight rows: every block unpacked to bytes and transposed so
// that one 64-byte vector holds 4 consecutive elements of each of the 16 rows. One
// vpdpbusd against 4 broadcast activation bytes then advances 16 row dots at once, and
// the float scales apply to 16 rows per instruction. The panel is packed once per call
// and reused by every token (4 at a time, so each packed vector loaded serves 4).
// Batches of up to 16 tokens (batched decode) pack one block of the 16 rows at a time
// instead and run all their tokens over it, so packing never waits for memory alone.
// The GGUF bytes stay as they are (zero-copy); the panel is per-thread scratch that fits
// in L2.
//
// Decode and small batches keep the row-major weights and put 8 rows in the lanes of
// the per-block results (a lane-sum tree per token and block).
//
// Both compute, for every (row, token) pair, exactly the scalar references' sequence
// (gemm.cpp): the exact integer dot of each block, then one fma per block in block order
// (two for Q4_K/Q5_K and Q4_1/Q5_1: scales, then mins). So results are bit-identical to
// the scalar reference, and a token's output does not depend on its batch.
//
// Unsigned weights go into vpdpbusd as they are; the offset (q - 2^kShift) comes off
// through the activations' block sums. Q8_0 weights become unsigned by flipping the sign
// bit (w + 128), kShift 7.
//
// The K-quant families live in gemm_avx512_kquants.h, included below in this file's
// translation unit.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <initializer_list>
#include <thread>
#include <utility>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "core/quant_bnb.h"
#include "kernels/gemm.h"
#include "kernels/prefetch.h"
#include "kernels/amx_tiles.h"
#include "kernels/gemm_amx.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bitalg")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_*() placeholders as
// "may be used uninitialized"; the values are always overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/gemm_q8_tiles.h"

namespace ridge::kernels {

namespace {

// Batches of at least K::kPanelTokens tokens pack 16-row panels; fewer use the
// row-major tiles, which decode the weights again for every 4 tokens (from L1) but
// pack nothing. Measured at 2 threads, sequences in one decode step (t/s, tiles vs
// packed blocks): K-quants (qwen2.5-coder-1.5b) 121 vs 129 at 4; Q4_0/Q5_0 with Q8_0
// (qwen2.5-coder-0.5b) 344 vs 328 at 4, so those pack from 8; Q8_0 (gemma3-270m)
// 505 vs 566 at 4.
constexpr int kPanelRows = 16;  // rows per panel: one zmm of int32 / float lanes
constexpr int kDecodeRows = 8;  // rows per row-major tile: one ymm of lanes

// ---- shared helpers ----------------------------------------------------------------

inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// Transposes 16 rows of 8 dwords (32 bytes each) into 8 vectors of 16 dwords: out[k]
// lane r = dword k of row r.
inline void transpose16x8(const __m256i (&rows)[16], __m512i (&out)[8]) {
  __m512i v[8];
  for (int i = 0; i < 8; ++i)  // low half row i, high half row i + 8
    v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[i]), rows[i + 8], 1);
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // t[0] = r0d0 r1d0 r0d1 r1d1 | r0d4 r1d4 r0d5 r1d5 (per 128-bit lane: dwords 0,1 / 4,5)
  for (int i = 0; i < 2; ++i) {
    const int a = 4 * i;
    u[a + 0] = _mm512_unpacklo_epi64(t[a], t[a + 2]);      // d0 (lane0), d4 (lane1) of rows 4i..4i+3
    u[a + 1] = _mm512_unpackhi_epi64(t[a], t[a + 2]);      // d1, d5
    u[a + 2] = _mm512_unpacklo_epi64(t[a + 1], t[a + 3]);  // d2, d6
    u[a + 3] = _mm512_unpackhi_epi64(t[a + 1], t[a + 3]);  // d3, d7
  }
  // u[j] (rows 0..3) and u[4 + j] (rows 4..7): 128-bit lanes [dj, dj+4, dj (rows+8), dj+4 (rows+8)].
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm512_permutex2var_epi64(u[j], lo, u[4 + j]);
    out[j + 4] = _mm512_permutex2var_epi64(u[j], hi, u[4 + j]);
  }
}

// transpose16x8, stored to dst[k * 64 bytes].
inline void transpose16x8_store(const __m256i (&rows)[16], uint8_t* dst) {
  __m512i out[8];
  transpose16x8(rows, out);
  for (int k = 0; k < 8; ++k) _mm512_store_si512(dst + 64 * k, out[k]);
}

// Loads 32 bytes at byte offset `off` of 16 rows and transposes them (transpose16x8).
inline void load_transposed(const uint8_t* const* rows, size_t off, __m512i (&out)[8]) {
  __m256i v[16];
  for (int r = 0; r < 16; ++r) v[r] = load256(rows[r] + off);
  transpose16x8(v, out);
}

// Transposes a 16 x 16 float matrix in place: v[j] lane i = old v[i] lane j.
inline void transpose16x16_ps(__m512 (&v)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // rows i, i + 1 interleaved per 128-bit lane
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // 4 rows' element k in each 128-bit lane
    u[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // u[4 q + k] lane 4 l + m = row 4 q + m, element 4 l + k: gather the 128-bit lanes.
  for (int k = 0; k < 4; ++k) {
    const __m512 a = _mm512_shuffle_f32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));       // l = 0, 2 of rows 0-7
    const __m512 b = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(2, 0, 2, 0));  // of rows 8-15
    const __m512 c = _mm512_shuffle_f32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));       // l = 1, 3
    const __m512 d = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(3, 1, 3, 1));
    v[k] = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));       // element k: l = 0
    v[8 + k] = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));   // l = 2
    v[4 + k] = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0));   // l = 1
    v[12 + k] = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1));  // l = 3
  }
}

// Transposes a 16 x 16 byte matrix in place: x[j] byte r = old x[r] byte j. Four rounds of
// interleaving rows i and i + 8 (the perfect shuffle) transpose any 2^k x 2^k matrix.
inline void transpose16x16_bytes(__m128i (&x)[16]) {
  for (int round = 0; round < 4; ++round) {
    __m128i y[16];
    for (int i = 0; i < 8; ++i) {
      y[2 * i] = _mm_unpacklo_epi8(x[i], x[i + 8]);
      y[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + 8]);
    }
    for (int i = 0; i < 16; ++i) x[i] = y[i];
  }
}


// A per-thread buffer, grown (never shrunk) to the largest request seen; steady-state
// steps allocate nothing. Each kSlot is a buffer of its own; `what` names it in errors.
template <int kSlot>
uint8_t* thread_buffer(size_t bytes, const char* what) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<uint8_t, Free> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!buffer) throw Error(str_cat("gemm: cannot allocate ", rounded, " bytes of ", what));
    capacity = rounded;
  }
  return buffer.get();
}

uint8_t* panel_buffer(size_t bytes) { return thread_buffer<0>(bytes, "weight panels"); }

// The row-major tiles read 8 rows side by side: 8 short streams the hardware prefetcher
// does not pick up (one row is often only a few cache lines). The 8 rows after them are
// one contiguous range, so each block step prefetches its share of that range: memory
// is requested in order, one tile ahead. Prefetching past the matrix is harmless.
// Packing a panel (16 rows) does the same for the next panel.
//
// The next tile goes into L1 only while it and the tile being read fit together in a
// 32 KiB L1d (Zen 4's; 48 KiB on Zen 5 and recent Xeons). Long rows make large tiles (8
// rows of Qwen2.5 1.5B's ffn_down, 8960 inputs, are 59 KiB of Q6_K): fetched into L1 they
// evict the current tile's lines before those are read, and on Zen 4 such matrices
// streamed at half the rate of the AVX2 kernels, which read one row at a time. Those
// tiles are fetched into L2 and read from there (docs/notes/zen4.md).
constexpr size_t kL1PrefetchTileBytes = 16 * 1024;

template <int kRows = kDecodeRows>
inline bool next_tile_into_l1(const GemmArgs& a) { return kRows * a.w_stride <= kL1PrefetchTileBytes; }

// Lines [begin, end) of the next kRows rows' block step b (of kRows x block_bytes),
// into L1 or L2.
template <int kRows = kDecodeRows>
inline void prefetch_next_lines(const GemmArgs& a, int64_t r0, int64_t b, size_t block_bytes, bool into_l1,
                                size_t begin, size_t end) {
  const char* next = reinterpret_cast<const char*>(a.w + (r0 + kRows) * a.w_stride + b * kRows * block_bytes);
  if (into_l1) {
    for (size_t i = begin; i < end; ++i) prefetch_l1(next + 64 * i);
  } else {
    for (size_t i = begin; i < end; ++i) prefetch_l2(next + 64 * i);
  }
}

// Lines of a block step of kRows rows.
template <int kRows = kDecodeRows>
constexpr size_t step_lines(size_t block_bytes) {
  return (kRows * block_bytes + 63) / 64;
}

// prefetch_ahead with the cache level decided by the caller: the decode tiles decide it
// once per tile (next_tile_into_l1), as their block steps are short and Gemma 3's output
// matrix alone makes 650k of them a token. The tile after the next one goes into L2 as
// well: one tile ahead is too close to keep memory busy. On the Intel Xeon (family 6
// model 167) decode read weights at 69-73% of the read bandwidth with the next tile
// alone and at 88-92% with both (qwen2.5-coder-1.5b tg64 18.3-18.7 -> 23.3-23.5 t/s;
// docs/notes/kernels.md, "Decode: the tile after next into L2"); three or four tiles
// ahead read the same.
template <int kRows = kDecodeRows>
inline void prefetch_next_tile(const GemmArgs& a, int64_t r0, int64_t b, size_t block_bytes, bool into_l1) {
  const size_t lines = step_lines<kRows>(block_bytes);
  prefetch_next_lines<kRows>(a, r0, b, block_bytes, into_l1, 0, lines);
  prefetch_next_lines<kRows>(a, r0 + kRows, b, block_bytes, false, 0, lines);
}

template <int kRows = kDecodeRows>
inline void prefetch_ahead(const GemmArgs& a, int64_t r0, int64_t b, size_t block_bytes) {
  prefetch_next_tile<kRows>(a, r0, b, block_bytes, next_tile_into_l1<kRows>(a));
}

// Stores lanes 0..rows-1 of a 16-float vector to y[0..rows-1].
inline void store_rows16(float* y, __m512 v, int rows) {
  _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << rows) - 1), v);
}
inline void store_rows8(float* y, __m256 v, int rows) {
  _mm256_mask_storeu_ps(y, static_cast<__mmask8>((1u << rows) - 1), v);
}

// ---- 32-element block types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) against Q8_0 activations -

// Weight blocks as 32 unsigned bytes q, value q - 2^kShift.
struct U8Q8_0 {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr int64_t kPanelTokens = 4;
  static constexpr int kShift = 7;
  static constexpr bool kTransposedDecode = false, kMin = false;
  static __m256i load(const uint8_t* b) { return _mm256_xor_si256(load256(b + 2), _mm256_set1_epi8(-128)); }
};
// The 32 nibbles of 16 bytes: element l low nibble, l + 16 high nibble.
inline __m256i nibbles32(const uint8_t* p) {
  const __m256i both = _mm256_broadcastsi128_si256(load128(p));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}
struct U8Q4_0 {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static constexpr int64_t kPanelTokens = 8;
  static constexpr int kShift = 3;  // q - 8
  static constexpr bool kTransposedDecode = true, kHasQh = false, kMin = false;
  static constexpr int kHead = 2, kQsOffset = 2;  // header bytes (d), where qs starts
  static __m256i load(const uint8_t* b) { return nibbles32(b + 2); }
};
struct U8Q5_0 {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static constexpr int64_t kPanelTokens = 8;
  static constexpr int kShift = 4;  // q - 16
  static constexpr bool kTransposedDecode = true, kHasQh = true, kMin = false;
  static constexpr int kHead = 2, kQsOffset = 6;
  static __m256i load(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, sizeof(qh));
    const __m256i lo = nibbles32(b + 6);
    return _mm256_mask_add_epi8(lo, static_cast<__mmask32>(qh), lo, _mm256_set1_epi8(16));  // fifth bit
  }
};
// Q4_1/Q5_1 (kMin): value d * q + m, q unsigned as it is (no offset); the f16 min after
// the scale, m * sum(y) one more fma per block from the activations' block sums.
struct U8Q4_1 {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr int64_t kPanelTokens = 8;
  static constexpr int kShift = 0;
  static constexpr bool kTransposedDecode = true, kHasQh = false, kMin = true;
  static constexpr int kHead = 4, kQsOffset = 4;  // d, m
  static __m256i load(const uint8_t* b) { return nibbles32(b + 4); }
};
struct U8Q5_1 {
  static constexpr size_t kBytes = sizeof(BlockQ5_1);
  static constexpr int64_t kPanelTokens = 8;
  static constexpr int kShift = 0;
  static constexpr bool kTransposedDecode = true, kHasQh = true, kMin = true;
  static constexpr int kHead = 4, kQsOffset = 8;
  static __m256i load(const uint8_t* b) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, sizeof(qh));
    const __m256i lo = nibbles32(b + 8);
    return _mm256_mask_add_epi8(lo, static_cast<__mmask32>(qh), lo, _mm256_set1_epi8(16));
  }
};

// The f16 scale at byte offset `off` of 8 rows, as floats.
inline __m256 f16_rows8(const uint8_t* const* w, size_t off) {
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<short>(f16_bits(w[0] + off)), static_cast<short>(f16_bits(w[1] + off)),
      static_cast<short>(f16_bits(w[2] + off)), static_cast<short>(f16_bits(w[3] + off)),
      static_cast<short>(f16_bits(w[4] + off)), static_cast<short>(f16_bits(w[5] + off)),
      static_cast<short>(f16_bits(w[6] + off)), static_cast<short>(f16_bits(w[7] + off))));
}

// scales_mins_k4 from one 16-byte load without leaving the vector unit: `packed` must
// have 4 readable bytes after the 12 (a K-quant block's qh or qs follow them).
inline __m128i scales_mins_k4_vec(const uint8_t* packed) {
  const __m128i u = load128(packed);                                             // u0 u1 u2 -
  const __m128i a = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));               // u0 u2 u1 u2
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                     _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));  // - u0 - u1
  return _mm_or_si128(low, high);  // s_lo s_hi m_lo m_hi
}

// scales_mins_k4_vec of four blocks' packed scales, one per 128-bit lane.
inline __m512i scales_mins_k4_x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  __m512i u = _mm512_castsi128_si512(load128(p0));
  u = _mm512_inserti32x4(u, load128(p1), 1);
  u = _mm512_inserti32x4(u, load128(p2), 2);
  u = _mm512_inserti32x4(u, load128(p3), 3);
  const __m512i a = _mm512_shuffle_epi32(u, _MM_PERM_CBCA);  // u0 u2 u1 u2 per lane
  const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0, 0, 4))),
                                       _mm512_broadcast_i32x4(_mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)));
  const __m512i high = _mm512_and_si512(_mm512_srli_epi32(_mm512_shuffle_epi32(u, _MM_PERM_BBAA), 2),
                                        _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
  return _mm512_or_si512(low, high);  // per lane: s_lo s_hi m_lo m_hi
}

// Activation row views for Q8_0: q bytes, float scales, int32 block sums.
struct ActRow {
  const int8_t* q;
  const float* d;
  const int32_t* sum;
};
inline ActRow act_row(const GemmArgs& a, int64_t t) {
  const uint8_t* row = a.act + t * a.act_stride;
  const auto* d = reinterpret_cast<const float*>(row + a.n_in);
  return {reinterpret_cast<const int8_t*>(row), d, reinterpret_cast<const int32_t*>(d + a.n_in / 32)};
}

template <class U8>
struct Q8Family {
  static constexpr int kRowTile = U8::kTransposedDecode ? 16 : kDecodeRows;
  static constexpr int64_t kPanelTokens = U8::kPanelTokens;

  // A block dot's starting value: minus the offset 2^kShift * sum(y), or 0 for kMin
  // (whose min term is a float fma of its own).
  static __m512i start_sum(int32_t sum) {
    if constexpr (U8::kMin) return _mm512_setzero_si512();
    else return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_set1_epi32(sum), U8::kShift));
  }

  template <int T>
  static void tile(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    if constexpr (U8::kTransposedDecode) rows16<T>(a, r0, rows, t0);
    else rows8<T>(a, r0, rows, t0);
  }

  // Q4_0/Q5_0/Q4_1/Q5_1 decode, 16 rows at once without a panel: each row's block is
  // loaded from just after its f16 scale (and min), so the qh and qs bytes start on
  // dwords, and the 16 rows are transposed as they are stored: the fifth bits and the
  // nibbles are unpacked for 16 rows per instruction and no lane sums are needed. The load runs on to the next
  // block's scale (and min), which come out of the same transpose for the next step.
  template <int T>
  static void rows16(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    const int64_t nb = a.n_in / 32;
    const uint8_t* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    ActRow y[T];
    for (int t = 0; t < T; ++t) y[t] = act_row(a, t0 + t);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    constexpr int kAfterD = static_cast<int>(U8::kBytes) - U8::kHead;  // qh and qs bytes: 20 or 16
    static_assert(kAfterD % 4 == 0, "the next block's scale must start a dword");
    // Only bytes of this row are read (the masked-off bytes cannot fault): the block and
    // the next block's header, or the block alone for the last one.
    const __mmask32 with_next_d = static_cast<__mmask32>((1ull << (kAfterD + U8::kHead)) - 1);
    const __mmask32 block_only = static_cast<__mmask32>((1ull << kAfterD) - 1);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const auto rows16_f16 = [&](size_t off) {
      return _mm512_insertf32x8(_mm512_castps256_ps512(f16_rows8(w, off)), f16_rows8(w + 8, off), 1);
    };
    __m512 dw = rows16_f16(0);
    [[maybe_unused]] __m512 dm;  // kMin: the 16 rows' mins
    if constexpr (U8::kMin) dm = rows16_f16(2);
    const bool into_l1 = next_tile_into_l1<kPanelRows>(a);
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_next_tile<kPanelRows>(a, r0, b, U8::kBytes, into_l1);
      const __mmask32 mask = b + 1 < nb ? with_next_d : block_only;
      __m256i v[kPanelRows];
      for (int r = 0; r < kPanelRows; ++r) v[r] = _mm256_maskz_loadu_epi8(mask, w[r] + b * U8::kBytes + U8::kHead);
      __m512i d4[8];  // d4[k] lane r: bytes 4k + kHead .. 4k + kHead + 3 of row r's block
      transpose16x8(v, d4);
      __m512i q[8];  // q[i]: elements 4i .. 4i + 3
      constexpr int k0 = (U8::kQsOffset - U8::kHead) / 4;
      for (int m = 0; m < 4; ++m) {
        q[m] = _mm512_and_si512(d4[k0 + m], low4);
        q[m + 4] = _mm512_and_si512(_mm512_srli_epi16(d4[k0 + m], 4), low4);
      }
      if constexpr (U8::kHasQh) {
        const __m512i qh = d4[0];  // bit e: element e's fifth bit
        for (int i = 0; i < 8; ++i) {
          // Byte j of each 64-bit lane (two rows) takes bit 4i + j % 4 of its row's qh.
          const __m512i pick =
              _mm512_set1_epi64(static_cast<long long>(uint64_t(4 * i) * 0x0101010101010101ull + 0x2322212003020100ull));
          const __mmask64 bit = _mm512_bitshuffle_epi64_mask(qh, pick);
          q[i] = _mm512_mask_add_epi8(q[i], bit, q[i], _mm512_set1_epi8(16));
        }
      }
      for (int t = 0; t < T; ++t) {
        __m512i s = start_sum(y[t].sum[b]);
        for (int i = 0; i < 8; ++i) s = _mm512_dpbusd_epi32(s, q[i], bcast32(y[t].q + 32 * b + 4 * i));
        const __m512 dy = _mm512_set1_ps(y[t].d[b]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dy), acc[t]);
        if constexpr (U8::kMin)
          acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(y[t].sum[b])), _mm512_mul_ps(dm, dy), acc[t]);
      }
      const __m512i head = d4[kAfterD / 4];  // the next block's scale (and min above it)
      dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
      if constexpr (U8::kMin) dm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
    }
    for (int t = 0; t < T; ++t) store_rows16(a.y + (t0 + t) * a.ldy + r0, acc[t], rows);
  }

  // Row-major tile: rows r0..r0+rows-1 (rows <= 8; missing rows repeat the last and
  // are not stored) against T tokens.
  template <int T>
  static void rows8(const GemmArgs& a, int64_t r0, int rows, int64_t t0) {
    static_assert(!U8::kMin, "rows8 has no min term");
    const int64_t nb = a.n_in / 32;
    const uint8_t* w[kDecodeRows];
    for (int r = 0; r < kDecodeRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    ActRow y[T];
    for (int t = 0; t < T; ++t) y[t] = act_row(a, t0 + t);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    const bool into_l1 = next_tile_into_l1(a);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t off = b * U8::kBytes;
      __m256i wq[kDecodeRows];
      for (int r = 0; r < kDecodeRows; ++r) wq[r] = U8::load(w[r] + off);
      prefetch_next_tile(a, r0, b, U8::kBytes, into_l1);
      const __m256 dw = f16_rows8(w, off);
      for (int t = 0; t < T; ++t) {
        const __m256i yq = load256(y[t].q + 32 * b);
        __m256i p[kDecodeRows];
        for (int r = 0; r < kDecodeRows; ++r) p[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq[r], yq);
        const __m256i s =
            _mm256_sub_epi32(sum_lanes8(p), _mm256_slli_epi32(_mm256_set1_epi32(y[t].sum[b]), U8::kShift));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(y[t].d[b])), acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) store_rows8(a.y + (t0 + t) * a.ldy + r0, acc[t], rows);
  }

  // Panel: per block, 8 vectors of 16 rows x 4 bytes, then the 16 f16 scales as floats
  // (and, kMin, the 16 mins).
  static constexpr size_t kBlockBytes = U8::kBytes, kBlockElements = 32, kPanelBlock = 8 * 64 + (U8::kMin ? 128 : 64);
  using Act = ActRow;
  static Act act(const GemmArgs& a, int64_t t) { return act_row(a, t); }

  static void pack_block(const uint8_t* const (&w)[kPanelRows], int64_t b, uint8_t* dst) {
    __m256i q[16];
    for (int r = 0; r < kPanelRows; ++r) q[r] = U8::load(w[r] + b * U8::kBytes);
    transpose16x8_store(q, dst);
    _mm256_store_ps(reinterpret_cast<float*>(dst + 8 * 64), f16_rows8(w, b * U8::kBytes));
    _mm256_store_ps(reinterpret_cast<float*>(dst + 8 * 64 + 32), f16_rows8(w + 8, b * U8::kBytes));
    if constexpr (U8::kMin) {
      _mm256_store_ps(reinterpret_cast<float*>(dst + 9 * 64), f16_rows8(w, b * U8::kBytes + 2));
      _mm256_store_ps(reinterpret_cast<float*>(dst + 9 * 64 + 32), f16_rows8(w + 8, b * U8::kBytes + 2));
    }
  }

  // acc[t] (16 rows) += block b of the packed block `blk` against token t's activations.
  template <int T>
  static void block_dots(const uint8_t* blk, const Act (&y)[T], int64_t b, __m512 (&acc)[T]) {
    __m512i s[T];
    for (int t = 0; t < T; ++t) s[t] = start_sum(y[t].sum[b]);
    for (int g = 0; g < 8; ++g) {
      const __m512i wv = _mm512_load_si512(blk + 64 * g);
      for (int t = 0; t < T; ++t) s[t] = _mm512_dpbusd_epi32(s[t], wv, bcast32(y[t].q + 32 * b + 4 * g));
    }
    const __m512 dw = _mm512_load_ps(blk + 8 * 64);
    for (int t = 0; t < T; ++t) {
      const __m512 dy = _mm512_set1_ps(y[t].d[b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(dw, dy), acc[t]);
      if constexpr (U8::kMin)
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(static_cast<float>(y[t].sum[b])),
                                 _mm512_mul_ps(_mm512_load_ps(blk + 9 * 64), dy), acc[t]);
    }
  }

};

#include "kernels/gemm_avx512_kquants.h"  // the K-quant families
#include "kernels/gemm_avx512_bnb_panels.h"  // NF4 and I8_ROWS panels

// ---- drivers -------------------------------------------------------------------------

template <class K, int T = 4>
inline void tile_tokens(const GemmArgs& a, int64_t r0, int rows, int64_t t0, int tokens) {
  if constexpr (T > 1) {
    if (tokens < T) return tile_tokens<K, T - 1>(a, r0, rows, t0, tokens);
  }
  K::template tile<T>(a, r0, rows, t0);
}

// Packs rows r0..r0+rows-1 (rows <= 16; missing rows repeat the last) into a panel,
// block by block, prefetching the next 16 rows (see prefetch_ahead).
template <class K>
void pack_panel(const GemmArgs& a, int64_t r0, int rows, uint8_t* panel) {
  const int64_t nb = a.n_in / static_cast<int64_t>(K::kBlockElements);
  const uint8_t* w[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead<kPanelRows>(a, r0, b, K::kBlockBytes);
    K::pack_block(w, b, panel + b * K::kPanelBlock);
  }
}

// 16 rows x T tokens over all blocks of a packed panel.
template <class K, int T>
void panel_tokens(const GemmArgs& a, const uint8_t* panel, int64_t r0, int rows, int64_t t0) {
  const int64_t nb = a.n_in / static_cast<int64_t>(K::kBlockElements);
  typename K::Act y[T];
  for (int t = 0; t < T; ++t) y[t] = K::act(a, t0 + t);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) K::template block_dots<T>(panel + b * K::kPanelBlock, y, b, acc);
  for (int t = 0; t < T; ++t) store_rows16(a.y + (t0 + t) * a.ldy + r0, acc[t], rows);
}

template <class K, int T = 4>
inline void panel_tokens(const GemmArgs& a, const uint8_t* panel, int64_t r0, int rows, int64_t t0, int tokens) {
  if constexpr (T > 1) {
    if (tokens < T) return panel_tokens<K, T - 1>(a, panel, r0, rows, t0, tokens);
  }
  panel_tokens<K, T>(a, panel, r0, rows, t0);
}

// Block b of a packed block against tokens t0..t0+T-1, their accumulators in memory.
template <class K, int T>
void block_tokens(const GemmArgs& a, const uint8_t* blk, int64_t b, int64_t t0, __m512* acc_mem) {
  typename K::Act y[T];
  __m512 acc[T];
  for (int t = 0; t < T; ++t) {
    y[t] = K::act(a, t0 + t);
    acc[t] = _mm512_load_ps(reinterpret_cast<const float*>(acc_mem + t));
  }
  K::template block_dots<T>(blk, y, b, acc);
  for (int t = 0; t < T; ++t) _mm512_store_ps(reinterpret_cast<float*>(acc_mem + t), acc[t]);
}

template <class K, int T = 4>
inline void block_tokens(const GemmArgs& a, const uint8_t* blk, int64_t b, int64_t t0, int tokens, __m512* acc) {
  if constexpr (T > 1) {
    if (tokens < T) return block_tokens<K, T - 1>(a, blk, b, t0, tokens, acc);
  }
  block_tokens<K, T>(a, blk, b, t0, acc);
}

// Batches of up to this many tokens pack one block of 16 rows at a time and use it for
// every token at once, instead of packing a whole panel and then running the tokens
// over it: the packed block stays in L1, and the next rows' reads (prefetched during
// the dots) overlap the dot products instead of stalling the packing.
constexpr int64_t kBlockwiseTokens = 16;

template <class K>
void gemm_blockwise(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  const int64_t nb = a.n_in / static_cast<int64_t>(K::kBlockElements);
  alignas(64) uint8_t blk[K::kPanelBlock];
  __m512 acc[kBlockwiseTokens];
  // The next rows' block step is prefetched in parts, one before the packing and one
  // before each 4 tokens' dots, so the prefetches do not queue behind each other for the
  // few line-fill buffers at once. Part p is lines [bound[p], bound[p + 1]), worked out
  // once here rather than with two divisions per part and block.
  const int64_t parts = 1 + (n_tokens + 3) / 4;
  const size_t lines = step_lines<kPanelRows>(K::kBlockBytes);
  size_t bound[kBlockwiseTokens / 4 + 2];
  for (int64_t p = 0; p <= parts; ++p) bound[p] = lines * static_cast<size_t>(p) / static_cast<size_t>(parts);
  const bool into_l1 = next_tile_into_l1<kPanelRows>(a);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    const uint8_t* w[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_next_lines<kPanelRows>(a, r0, b, K::kBlockBytes, into_l1, bound[0], bound[1]);
      K::pack_block(w, b, blk);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
        const int64_t part = 1 + t0 / 4;
        prefetch_next_lines<kPanelRows>(a, r0, b, K::kBlockBytes, into_l1, bound[part], bound[part + 1]);
        block_tokens<K>(a, blk, b, t0, static_cast<int>(std::min<int64_t>(4, n_tokens - t0)), acc + t0);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) store_rows16(a.y + t * a.ldy + r0, acc[t], rows);
  }
}

template <class K>
void gemm(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens < K::kPanelTokens) {
    constexpr int kTile = 4;  // tokens per pass; the row tile stays in L1 between passes
    for (int64_t r0 = 0; r0 < n_rows; r0 += K::kRowTile) {
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
        const int tokens = static_cast<int>(std::min<int64_t>(kTile, n_tokens - t0));
        tile_tokens<K>(a, r0, static_cast<int>(std::min<int64_t>(K::kRowTile, n_rows - r0)), t0, tokens);
      }
    }
    return;
  }
  if (n_tokens <= kBlockwiseTokens) return gemm_blockwise<K>(a, n_rows, n_tokens);
  const int64_t nb = a.n_in / static_cast<int64_t>(K::kBlockElements);
  uint8_t* panel = panel_buffer(static_cast<size_t>(nb) * K::kPanelBlock);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    pack_panel<K>(a, r0, rows, panel);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4)
      panel_tokens<K>(a, panel, r0, rows, t0, static_cast<int>(std::min<int64_t>(4, n_tokens - t0)));
  }
}

#include "kernels/gemm_amx_tiles.h"  // the AMX-INT8 kernels, on the panels above

}  // namespace

void gemm_q8_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q8_0>>(a, n_rows, n_tokens); }
void gemm_q4_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q4_0>>(a, n_rows, n_tokens); }
void gemm_q5_0_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q5_0>>(a, n_rows, n_tokens); }
void gemm_q4_1_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q4_1>>(a, n_rows, n_tokens); }
void gemm_q5_1_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q8Family<U8Q5_1>>(a, n_rows, n_tokens); }
void gemm_q4_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<QK4<false>>(a, n_rows, n_tokens); }
void gemm_q5_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<QK4<true>>(a, n_rows, n_tokens); }
void gemm_q6_k_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { gemm<Q6K>(a, n_rows, n_tokens); }
void gemm_nf4_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens < kBnbPanelTokens) return gemm_nf4_avx512_rows(a, n_rows, n_tokens);
  gemm_bnb_panels<Nf4Panel>(a, n_rows, n_tokens);
}
void gemm_i8_rows_avx512(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (n_tokens < kBnbPanelTokens) return gemm_i8_rows_avx512_rows(a, n_rows, n_tokens);
  gemm_bnb_panels<I8RowsPanel>(a, n_rows, n_tokens);
}

namespace {

template <GemmFn kFn>
void amx_entry(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  if (!amx_usable()) throw Error(str_cat("gemm: an AMX kernel was called but ", amx_status()));
  kFn(a, n_rows, n_tokens);
}

}  // namespace

void gemm_q8_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q8_0>>>(a, n_rows, n_tokens);
}
void gemm_q4_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q4_0>>>(a, n_rows, n_tokens);
}
void gemm_q5_0_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q5_0>>>(a, n_rows, n_tokens);
}
void gemm_q4_1_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q4_1>>>(a, n_rows, n_tokens);
}
void gemm_q5_1_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxQ8Source<U8Q5_1>>>(a, n_rows, n_tokens);
}
void gemm_nf4_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxBnbSource<Nf4Panel, gemm_nf4_avx512>>>(a, n_rows, n_tokens);
}
void gemm_i8_rows_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  amx_entry<gemm_amx_q8<AmxBnbSource<I8RowsPanel, gemm_i8_rows_avx512>>>(a, n_rows, n_tokens);
}
void gemm_q4_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<QK4<false>>>(a, n_rows, n_tokens); }
void gemm_q5_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<QK4<true>>>(a, n_rows, n_tokens); }
void gemm_q6_k_amx(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) { amx_entry<gemm_amx_k<Q6K>>(a, n_rows, n_tokens); }

size_t amx_act_tile_bytes(ActFormat format, int64_t n_in) {
  if (format == ActFormat::kQ8_0) return static_cast<size_t>(n_in / 32) * kQ8ActTile;
  if (format == ActFormat::kQ8_K) return static_cast<size_t>(n_in / kQK_K) * kKActTile;
  throw Error("amx_act_tile_bytes: the AMX kernels take Q8_0 or Q8_K activations");
}

void amx_build_act_tiles(ActFormat format, const uint8_t* act, size_t act_stride, int64_t n_in, int64_t begin,
                         int64_t end, uint8_t* tiles) {
  if (format == ActFormat::kQ8_0) return build_q8_act_tiles(act, act_stride, n_in, begin, end, tiles);
  if (format == ActFormat::kQ8_K) return build_k_act_tiles(act, act_stride, n_in, begin, end, tiles);
  throw Error("amx_build_act_tiles: the AMX kernels take Q8_0 or Q8_K activations");
}

size_t amx_rows_b_bytes(ActFormat format, int64_t n_in) {
  if (format != ActFormat::kQ8_0 && format != ActFormat::kQ8_K)
    throw Error("amx_rows_b_bytes: the AMX kernels take Q8_0 or Q8_K activations");
  return rows_b_bytes(format, n_in);
}

void amx_build_rows_b(ActFormat format, const uint8_t* tiles, int64_t n_in, uint8_t* out) {
  if (format == ActFormat::kQ8_0) return build_q8_rows_b(tiles, n_in / 32, out);
  if (format == ActFormat::kQ8_K) return build_k_rows_b(tiles, n_in / kQK_K, out);
  throw Error("amx_build_rows_b: the AMX kernels take Q8_0 or Q8_K activations");
}

double amx_int8_peak_ops_per_s(int threads, double seconds) {
  if (!amx_usable() || threads < 1) return 0;
  std::vector<std::pair<double, double>> runs(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&runs, i, seconds] { runs[i] = amx_probe_thread(seconds); });
  for (auto& thread : pool) thread.join();
  double ops = 0;
  for (const auto& [macs, elapsed] : runs) ops += 2 * macs / elapsed;
  return ops;
}

}  // namespace ridge::kernels
