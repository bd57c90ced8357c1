// NF4 and I8_ROWS (core/quant_bnb.h) for batches of tokens, on 16-row panels like the
// GGUF types' (avx512_panels.h), for avx512.cpp and the AMX kernels: internal to those
// files, after their target pragma, with internal linkage as avx512_panels.h.
//
// The row-major kernels of avx512_bnb.cpp sum every 4-row x 64-element product
// across lanes, which is cheap for one token and dominates a prompt (pp128 ran 5x
// slower than the model's GGUF weights). Here a panel holds, per 32-element group, 8
// vectors of 16 rows x 4 bytes (the weight + 128, unsigned for vpdpbusd) and the 16
// rows' float factor of the group; a token's group is 8 vpdpbusd against broadcast
// activation dwords, 128 * (the group's activation sum) comes off, then one fma with the
// rows in the lanes. That is the scalar references' sequence per row (reference_bnb.cpp):
//   NF4:     sum = fma(float(sumi), (absmax_b * (1 / 127)) * d_act[g], sum)
//   I8_ROWS: sum = fma(float(sumi), d_act[g], sum) (a factor of 1.0f is exact), then
//            sum * scale once at the end
// so the outputs are bit-identical to them.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>

#include "core/quant_bnb.h"
#include "kernels/gemm/avx512_panels.h"

namespace ridge::kernels {
namespace {

// The 16 rows' bytes of one format. Each provides:
//   void rows(const GemmArgs&, const uint8_t* const (&w)[16]);   // per-panel setup
//   void group_pair(int64_t k, lo, hi, bool with_hi)  // groups 2k (and 2k + 1) as w + 128
//   float factor(int r, int64_t g);                                // row r's factor of group g
//   __m512 row_scale();                                            // applied at the end
struct Nf4Panel {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_xor_si128(load128(nf4_values_i8().data()), _mm_set1_epi8(static_cast<char>(0x80))));  // w + 128
  const std::array<float, 256>& map = dynamic_map();
  Nf4Row row[kPanelRows];

  void rows(const GemmArgs& a, const uint8_t* const (&w)[kPanelRows]) {
    for (int r = 0; r < kPanelRows; ++r) row[r] = nf4_row(w[r], a.n_in);
  }
  // A 64-element block k: byte l holds element l (low nibble) and l + 32 (high).
  void group_pair(int64_t k, __m256i (&lo)[kPanelRows], __m256i (&hi)[kPanelRows], bool) const {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < kPanelRows; ++r) {
      const __m256i q = load256(row[r].qs + 32 * k);
      lo[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
      hi[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
    }
  }
  float factor(int r, int64_t g) const { return nf4_absmax(row[r], map, g / 2) * (1.0f / 127.0f); }
  __m512 row_scale() const { return _mm512_set1_ps(1.0f); }
};

struct I8RowsPanel {
  const int8_t* q[kPanelRows];
  float scale[kPanelRows];

  void rows(const GemmArgs&, const uint8_t* const (&w)[kPanelRows]) {
    for (int r = 0; r < kPanelRows; ++r) {
      std::memcpy(&scale[r], w[r], sizeof(float));
      q[r] = reinterpret_cast<const int8_t*>(w[r] + sizeof(float));
    }
  }
  // Groups 2k and, with_hi, 2k + 1 (a row of an odd number of groups ends on a lone one).
  void group_pair(int64_t k, __m256i (&lo)[kPanelRows], __m256i (&hi)[kPanelRows], bool with_hi) const {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int r = 0; r < kPanelRows; ++r) {
      lo[r] = _mm256_xor_si256(load256(q[r] + 64 * k), flip);
      hi[r] = with_hi ? _mm256_xor_si256(load256(q[r] + 64 * k + 32), flip) : lo[r];
    }
  }
  float factor(int, int64_t) const { return 1.0f; }
  __m512 row_scale() const { return _mm512_loadu_ps(scale); }
};

// Bytes of one group in a panel: 8 weight vectors, then the 16 rows' factors.
constexpr size_t kBnbGroupBytes = 8 * 64 + 64;

// Batches below this run the row-major kernels (gemm/avx512_bnb.cpp): packing a panel
// pays from a few tokens on.
constexpr int64_t kBnbPanelTokens = 4;

// Tokens t0..t0+T-1 over a packed panel of ng groups.
template <int T>
void bnb_panel_tokens(const GemmArgs& a, const uint8_t* panel, int64_t ng, __m512 row_scale, int64_t r0, int rows,
                      int64_t t0) {
  ActRow y[T];
  __m512 acc[T];
  for (int t = 0; t < T; ++t) {
    y[t] = act_row(a, t0 + t);
    acc[t] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < ng; ++g) {
    const uint8_t* blk = panel + g * kBnbGroupBytes;
    __m512i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_set1_epi32(y[t].sum[g]), 7));
    for (int k = 0; k < 8; ++k) {
      const __m512i wv = _mm512_load_si512(blk + 64 * k);
      for (int t = 0; t < T; ++t) s[t] = _mm512_dpbusd_epi32(s[t], wv, bcast32(y[t].q + 32 * g + 4 * k));
    }
    const __m512 f = _mm512_load_ps(blk + 8 * 64);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(f, _mm512_set1_ps(y[t].d[g])), acc[t]);
  }
  for (int t = 0; t < T; ++t) store_rows16(a.y + (t0 + t) * a.ldy + r0, _mm512_mul_ps(acc[t], row_scale), rows);
}

template <int T = 4>
void bnb_panel_tokens(const GemmArgs& a, const uint8_t* panel, int64_t ng, __m512 row_scale, int64_t r0, int rows,
                      int64_t t0, int tokens) {
  if constexpr (T > 1) {
    if (tokens < T) return bnb_panel_tokens<T - 1>(a, panel, ng, row_scale, r0, rows, t0, tokens);
  }
  bnb_panel_tokens<T>(a, panel, ng, row_scale, r0, rows, t0);
}

// Bytes of a packed panel of ng groups: the groups, then the 16 rows' final scales.
inline size_t bnb_panel_bytes(int64_t ng) { return static_cast<size_t>(ng) * kBnbGroupBytes + 64; }

// Packs rows r0..r0+rows-1 (missing rows repeat the last) of format F into a panel.
template <class F>
void bnb_pack_panel(const GemmArgs& a, int64_t r0, int rows, uint8_t* panel) {
  const int64_t ng = a.n_in / 32;
  F f;
  const uint8_t* w[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_stride;
  f.rows(a, w);
  for (int64_t k = 0; 2 * k < ng; ++k) {  // groups 2k and 2k + 1
    __m256i lo[kPanelRows], hi[kPanelRows];
    const bool pair = 2 * k + 1 < ng;
    f.group_pair(k, lo, hi, pair);
    for (int h = 0; h < (pair ? 2 : 1); ++h) {
      const int64_t g = 2 * k + h;
      uint8_t* blk = panel + g * kBnbGroupBytes;
      transpose16x8_store(h == 0 ? lo : hi, blk);
      auto* factors = reinterpret_cast<float*>(blk + 8 * 64);
      for (int r = 0; r < kPanelRows; ++r) factors[r] = f.factor(r, g);
    }
  }
  _mm512_store_ps(panel + ng * kBnbGroupBytes, f.row_scale());
}

template <class F>
void gemm_bnb_panels(const GemmArgs& a, int64_t n_rows, int64_t n_tokens) {
  const int64_t ng = a.n_in / 32;
  uint8_t* panel = panel_buffer(bnb_panel_bytes(ng));
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    bnb_pack_panel<F>(a, r0, rows, panel);
    const __m512 row_scale = _mm512_load_ps(panel + ng * kBnbGroupBytes);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4)
      bnb_panel_tokens(a, panel, ng, row_scale, r0, rows, t0, static_cast<int>(std::min<int64_t>(4, n_tokens - t0)));
  }
}

}  // namespace
}  // namespace ridge::kernels
