#include "quant/block_grid.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace ridge::quant {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_fp32(h);
}

// A nibble of qs: element j of a 32-element block is the low nibble of byte j (j < 16) or
// the high nibble of byte j - 16.
int32_t get_nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4; }
void set_nibble(uint8_t* qs, int j, int32_t code) {
  if (j < 16)
    qs[j] = static_cast<uint8_t>((qs[j] & 0xf0) | code);
  else
    qs[j - 16] = static_cast<uint8_t>((qs[j - 16] & 0x0f) | (code << 4));
}
// The fifth bit of a Q5_0/Q5_1 element: bit j of the 32-bit qh.
int32_t get_bit5(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }
void set_bit5(uint8_t* qh, int j, int32_t bit) {
  qh[j / 8] = static_cast<uint8_t>((qh[j / 8] & ~(1 << (j % 8))) | (bit << (j % 8)));
}

// --- legacy 32-element formats (layouts in core/quant_blocks.h)
float q4_0_value(const uint8_t* b, int, int32_t c) { return static_cast<float>(c - 8) * half(b); }
int32_t q4_0_get(const uint8_t* b, int j) { return get_nibble(b + 2, j); }
void q4_0_set(uint8_t* b, int j, int32_t c) { set_nibble(b + 2, j, c); }

float q4_1_value(const uint8_t* b, int, int32_t c) { return static_cast<float>(c) * half(b) + half(b + 2); }
int32_t q4_1_get(const uint8_t* b, int j) { return get_nibble(b + 4, j); }
void q4_1_set(uint8_t* b, int j, int32_t c) { set_nibble(b + 4, j, c); }

float q5_0_value(const uint8_t* b, int, int32_t c) { return static_cast<float>(c - 16) * half(b); }
int32_t q5_0_get(const uint8_t* b, int j) { return get_nibble(b + 6, j) | (get_bit5(b + 2, j) << 4); }
void q5_0_set(uint8_t* b, int j, int32_t c) {
  set_nibble(b + 6, j, c & 0xf);
  set_bit5(b + 2, j, c >> 4);
}

float q5_1_value(const uint8_t* b, int, int32_t c) { return static_cast<float>(c) * half(b) + half(b + 2); }
int32_t q5_1_get(const uint8_t* b, int j) { return get_nibble(b + 8, j) | (get_bit5(b + 4, j) << 4); }
void q5_1_set(uint8_t* b, int j, int32_t c) {
  set_nibble(b + 8, j, c & 0xf);
  set_bit5(b + 4, j, c >> 4);
}

float q8_0_value(const uint8_t* b, int, int32_t c) { return static_cast<float>(c) * half(b); }
int32_t q8_0_get(const uint8_t* b, int j) { return static_cast<int8_t>(b[2 + j]); }
void q8_0_set(uint8_t* b, int j, int32_t c) { b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(c)); }

// --- K-quants: group g = j / 32 has its own scale and min.
const BlockQ4_K& as_q4k(const uint8_t* b) { return *reinterpret_cast<const BlockQ4_K*>(b); }
const BlockQ5_K& as_q5k(const uint8_t* b) { return *reinterpret_cast<const BlockQ5_K*>(b); }

// Element j of Q4_K/Q5_K: nibble (g % 2) of qs[32 * (g / 2) + j % 32].
int32_t k_nibble(const uint8_t* qs, int j) { return (qs[32 * (j / 64) + j % 32] >> (4 * ((j / 32) % 2))) & 0xf; }
void set_k_nibble(uint8_t* qs, int j, int32_t c) {
  uint8_t& byte = qs[32 * (j / 64) + j % 32];
  const int shift = 4 * ((j / 32) % 2);
  byte = static_cast<uint8_t>((byte & ~(0xf << shift)) | (c << shift));
}

template <class Block>
float k_value(const Block& block, int j, int32_t c) {
  uint8_t scale, min;
  unpack_scale_min_k4(j / 32, block.scales, &scale, &min);
  const float dl = fp16_to_fp32(block.d) * static_cast<float>(scale);
  const float ml = fp16_to_fp32(block.dmin) * static_cast<float>(min);
  return dl * static_cast<float>(c) - ml;
}

float q4_k_value(const uint8_t* b, int j, int32_t c) { return k_value(as_q4k(b), j, c); }
int32_t q4_k_get(const uint8_t* b, int j) { return k_nibble(as_q4k(b).qs, j); }
void q4_k_set(uint8_t* b, int j, int32_t c) { set_k_nibble(reinterpret_cast<BlockQ4_K*>(b)->qs, j, c); }

float q5_k_value(const uint8_t* b, int j, int32_t c) { return k_value(as_q5k(b), j, c); }
int32_t q5_k_get(const uint8_t* b, int j) {
  const BlockQ5_K& block = as_q5k(b);
  return k_nibble(block.qs, j) | (((block.qh[j % 32] >> (j / 32)) & 1) << 4);
}
void q5_k_set(uint8_t* b, int j, int32_t c) {
  BlockQ5_K& block = *reinterpret_cast<BlockQ5_K*>(b);
  set_k_nibble(block.qs, j, c & 0xf);
  uint8_t& bits = block.qh[j % 32];
  bits = static_cast<uint8_t>((bits & ~(1 << (j / 32))) | ((c >> 4) << (j / 32)));
}

// Q6_K element 128h + 32k + l: nibble k/2 of ql[64h + l + 32(k % 2)], bit pair k of qh[32h + l].
float q6_k_value(const uint8_t* b, int j, int32_t c) {
  const BlockQ6_K& block = *reinterpret_cast<const BlockQ6_K*>(b);
  return fp16_to_fp32(block.d) * static_cast<float>(block.scales[j / 16]) * static_cast<float>(c - 32);
}
int32_t q6_k_get(const uint8_t* b, int j) {
  const BlockQ6_K& block = *reinterpret_cast<const BlockQ6_K*>(b);
  const int h = j / 128, k = (j % 128) / 32, l = j % 32;
  const int low = (block.ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xf;
  const int high = (block.qh[32 * h + l] >> (2 * k)) & 3;
  return low | (high << 4);
}
void q6_k_set(uint8_t* b, int j, int32_t c) {
  BlockQ6_K& block = *reinterpret_cast<BlockQ6_K*>(b);
  const int h = j / 128, k = (j % 128) / 32, l = j % 32;
  uint8_t& low = block.ql[64 * h + l + 32 * (k % 2)];
  const int shift = 4 * (k / 2);
  low = static_cast<uint8_t>((low & ~(0xf << shift)) | ((c & 0xf) << shift));
  uint8_t& high = block.qh[32 * h + l];
  high = static_cast<uint8_t>((high & ~(3 << (2 * k))) | (((c >> 4) & 3) << (2 * k)));
}

const BlockGrid kGrids[] = {
    {DType::Q4_0, 32, sizeof(BlockQ4_0), 0, 15, q4_0_value, q4_0_get, q4_0_set},
    {DType::Q4_1, 32, sizeof(BlockQ4_1), 0, 15, q4_1_value, q4_1_get, q4_1_set},
    {DType::Q5_0, 32, sizeof(BlockQ5_0), 0, 31, q5_0_value, q5_0_get, q5_0_set},
    {DType::Q5_1, 32, sizeof(BlockQ5_1), 0, 31, q5_1_value, q5_1_get, q5_1_set},
    {DType::Q8_0, 32, sizeof(BlockQ8_0), -128, 127, q8_0_value, q8_0_get, q8_0_set},
    {DType::Q4_K, 256, sizeof(BlockQ4_K), 0, 15, q4_k_value, q4_k_get, q4_k_set},
    {DType::Q5_K, 256, sizeof(BlockQ5_K), 0, 31, q5_k_value, q5_k_get, q5_k_set},
    {DType::Q6_K, 256, sizeof(BlockQ6_K), 0, 63, q6_k_value, q6_k_get, q6_k_set},
};

}  // namespace

int32_t BlockGrid::nearest(const uint8_t* block, int j, float x, float* value_out) const {
  // The grid is affine in the code: locate x from two points, then settle among neighbours
  // with the exact values (rounding makes the affine guess off by one at most).
  const float v0 = value(block, j, code_min), v1 = value(block, j, code_min + 1);
  const float step = v1 - v0;
  int32_t guess = step != 0.0f ? code_min + static_cast<int32_t>(std::lround((x - v0) / step)) : code_min;
  guess = guess < code_min ? code_min : guess > code_max ? code_max : guess;
  int32_t best = guess;
  float best_value = value(block, j, guess);
  for (int32_t c = guess - 1; c <= guess + 1; ++c) {
    if (c < code_min || c > code_max || c == guess) continue;
    const float v = value(block, j, c);
    if (std::fabs(v - x) < std::fabs(best_value - x) || (std::fabs(v - x) == std::fabs(best_value - x) && c < best)) {
      best = c;
      best_value = v;
    }
  }
  *value_out = best_value;
  return best;
}

const BlockGrid* block_grid(DType type) {
  for (const BlockGrid& g : kGrids)
    if (g.type == type) return &g;
  return nullptr;
}

}  // namespace ridge::quant
