// Quant block layouts, byte for byte as GGUF/ggml store them (ggml-common.h), so a
// tensor's bytes in a mapped GGUF file can be read as an array of these structs.
//
//   auto* blocks = static_cast<const ridge::BlockQ4_K*>(tensor_data);  // n/256 blocks
//   float d = ridge::fp16_to_fp32(blocks[0].d);
//
// Scales marked f16 hold IEEE half bits (see core/fp16.h). All structs are POD with only
// uint8/int8/uint16 members (and a float in Q8_K) in an order that leaves no padding.
#pragma once

#include <cstdint>

namespace ridge {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;         // elements in a K-quant super-block
constexpr int kKScaleBytes = 12;   // packed 6-bit scales and mins of Q4_K and Q5_K

// x = d * (q - 8), q in 0..15. Element j in the low nibble of qs[j], element j+16 in the
// high nibble.
struct BlockQ4_0 {
  uint16_t d;                 // f16 scale
  uint8_t qs[kQK4_0 / 2];
};

// x = d * q + m, q in 0..15, nibbles packed as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;                 // f16 scale
  uint16_t m;                 // f16 minimum (offset)
  uint8_t qs[kQK4_1 / 2];
};

// x = d * (q - 16), q in 0..31: low 4 bits as in Q4_0, bit 4 of element j is bit j of qh
// (read as a little-endian uint32).
struct BlockQ5_0 {
  uint16_t d;                 // f16 scale
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};

// x = d * q + m, q in 0..31, bits packed as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;                 // f16 scale
  uint16_t m;                 // f16 minimum
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};

// x = d * q, q in -127..127.
struct BlockQ8_0 {
  uint16_t d;                 // f16 scale
  int8_t qs[kQK8_0];
};

// Q8_0 plus s = d * sum(qs): the activation format for Q4_1/Q5_1 dot products.
struct BlockQ8_1 {
  uint16_t d;                 // f16 scale
  uint16_t s;                 // f16 d * sum(qs)
  int8_t qs[kQK8_1];
};

// 16 groups of 16: x = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q in 0..3.
// qs byte 32*h + l holds, in bit pairs 0,2,4,6, elements 128*h + l + {0, 32, 64, 96}.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // 4-bit scale (low) and 4-bit min (high) per group
  uint8_t qs[kQK_K / 4];
  uint16_t d;                  // f16 scale of the scales
  uint16_t dmin;               // f16 scale of the mins
};

// 16 groups of 16: x = d * (s[g] - 32) * (q - 4 * !high_bit), low 2 bits packed as in
// Q2_K; the high bit of element e is bit e/32 of hmask[e % 32]; s[g] is 6 bits, low
// nibbles in scales[0..7] (groups g and g+8), high bit pairs in scales[8..11].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;                  // f16 scale of the scales
};

// 8 groups of 32: x = d * sc[g] * q - dmin * m[g], q in 0..15; sc, m are 6 bits packed in
// `scales` (see unpack_scale_min_k4). qs byte 32*h + l: element 64*h + l in the low
// nibble, element 64*h + l + 32 in the high nibble.
struct BlockQ4_K {
  uint16_t d;                  // f16 scale of the scales
  uint16_t dmin;               // f16 scale of the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};

// Q4_K plus a fifth bit: element 64*h + l (+32) takes bit 2h (2h+1) of qh[l].
struct BlockQ5_K {
  uint16_t d;                  // f16 scale of the scales
  uint16_t dmin;               // f16 scale of the mins
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// 16 groups of 16: x = d * scales[g] * (q - 32), q in 0..63. In each half h (128
// elements) and lane l < 32, ql[64h + l] holds elements +0 (low) and +64 (high nibble),
// ql[64h + l + 32] elements +32 and +96, qh[32h + l] their top bit pairs at 0,2,4,6.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;                  // f16 scale of the scales
};

// x = d * q; the activation format for K-quant dot products, with per-16 sums of q.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

constexpr int kQK4_NL = 32;
constexpr int kQKMxfp4 = 32;

// x = d * kIq4nlValues[q], q in 0..15 (a non-uniform 4-bit codebook), nibbles packed as
// in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;                 // f16 scale
  uint8_t qs[kQK4_NL / 2];
};

// 8 groups of 32: x = d * (s[g] - 32) * kIq4nlValues[q]; s[g] is 6 bits, its low nibble
// in scales_l[g/2] (nibble g%2), its top bit pair at bits 2g of scales_h. Group g's codes
// are qs[16g..16g+15]: element 32g + j in the low nibble, 32g + 16 + j in the high one.
struct BlockIQ4_XS {
  uint16_t d;                  // f16 scale of the scales
  uint16_t scales_h;           // little-endian
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};

// OCP microscaling FP4: x = 2^(e - 127) * e2m1(q), q a 4-bit E2M1 float; nibbles packed
// as in Q4_0. (The table holds doubled E2M1 values and the scale is halved to match.)
struct BlockMXFP4 {
  uint8_t e;                   // E8M0 shared exponent
  uint8_t qs[kQKMxfp4 / 2];
};

// Ternary, x = d * (t - 1) with t in 0..2. Bytes hold 5 (qs) or 4 (qh) trits as a base-3
// fraction of 256: trit k of byte b is ((uint8_t)(b * 3^k) * 3) >> 8. qs[0..31] give
// elements 32k + m (k < 5), qs[32..47] elements 160 + 16k + m, qh[0..3] 240 + 4k + m.
struct BlockTQ1_0 {
  uint8_t qs[(kQK_K - 4 * kQK_K / 64) / 5];
  uint8_t qh[kQK_K / 64];
  uint16_t d;                  // f16 scale
};

// Ternary, x = d * (t - 1): element 128h + 32k + m is bit pair k of qs[32h + m].
struct BlockTQ2_0 {
  uint8_t qs[kQK_K / 4];
  uint16_t d;                  // f16 scale
};

// The IQ grid types (core/quant_grids.h holds their grids): each code picks a row of 8
// (IQ3: 4) magnitudes from a lattice, then a sign bit and a group scale apply to each
// value. Multi-byte codes are little-endian.

// 8 groups of 32, each two little-endian uint32 at qs[8g]: the first holds four 8-bit
// kIq2xxsGrid rows (8 values each), the second four 7-bit kIq2Signs indices (bits 7k)
// and a 4-bit scale s (top bits): x = d * (0.5 + s) / 4 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;                  // f16 scale of the scales
  uint8_t qs[kQK_K / 4];
};

// 32 little-endian uint16 codes of 8 values: a 9-bit kIq2xsGrid row and a 7-bit
// kIq2Signs index (top bits). Codes 2k, 2k+1 share the 4-bit scale s in nibble k % 2 of
// scales[k / 2]: x = d * (0.5 + s) / 4 * grid * sign.
struct BlockIQ2_XS {
  uint16_t d;                  // f16 scale of the scales
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};

// As IQ2_XS, with 10-bit kIq2sGrid rows (low 8 bits in qs[i], top 2 at bits 2(i%4) of
// qh[i/4]) and one explicit sign byte per 8 values (bit j: value j is negative).
struct BlockIQ2_S {
  uint16_t d;                  // f16 scale of the scales
  uint8_t qs[kQK_K / 8];
  uint8_t signs[kQK_K / 8];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};

// 64 8-bit kIq3xxsGrid rows of 4 values; then per group g of 32 a little-endian uint32
// holding four 7-bit kIq2Signs indices (one per 8 values) and a 4-bit scale s on top:
// x = d * (0.5 + s) / 2 * grid * sign.
struct BlockIQ3_XXS {
  uint16_t d;                  // f16 scale of the scales
  uint8_t qs[kQK_K / 4];
  uint8_t scales_signs[kQK_K / 8];
};

// 64 9-bit kIq3sGrid rows of 4 values (low 8 bits in qs[i], bit 8 at bit i%8 of qh[i/8]),
// one sign bit per value (bit e%8 of signs[e/8]), 4-bit scales s per group g of 32 in
// nibble g%2 of scales[g/2]: x = d * (1 + 2s) * grid * sign.
struct BlockIQ3_S {
  uint16_t d;                  // f16 scale of the scales
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};

// 32 11-bit kIq1sGrid rows of 8 values in {-1, 0, 1}: low 8 bits in qs[i], top 3 at bits
// 3(i%4) of qh[i/4]. qh[g] also carries group g's 3-bit scale s (bits 12..14) and the sign
// of its shift (bit 15): x = d * (2s + 1) * (grid + (bit 15 ? -1 : 1) * kIq1Delta).
struct BlockIQ1_S {
  uint16_t d;                  // f16 scale
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};

// As IQ1_S, but code i's top 3 bits and shift sign (bit 3) are nibble i%2 of qh[i/2], and
// codes 2k, 2k+1 share a 3-bit scale: field k (bits 3(k%4)) of the little-endian uint16
// scales[2(k/4)]. The f16 d is the top nibbles of those four uint16, lowest first.
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};

constexpr int kQKNvfp4 = 64;
constexpr int kQKNvfp4Sub = 16;  // elements under one scale

// NVIDIA FP4: 4 sub-blocks of 16 E2M1 values, each under an unsigned E4M3 scale (bias 7,
// bit 7 ignored; 0x7F, E4M3's NaN, reads as zero). Sub-block s's codes are qs[8s..8s+7]:
// element 16s + j in the low nibble, 16s + 8 + j in the high one.
struct BlockNVFP4 {
  uint8_t d[kQKNvfp4 / kQKNvfp4Sub];  // UE4M3 scales
  uint8_t qs[kQKNvfp4 / 2];
};

// IQ1_S/IQ1_M shift every grid value by plus or minus this before scaling.
inline constexpr float kIq1Delta = 0.125f;

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockTQ1_0) == 54);
static_assert(sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockNVFP4) == 36);

// IQ4_NL's codebook (also IQ4_XS's): 16 int8 levels, denser near zero.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 (FP4) values times two, indexed by the 4-bit code: sign in bit 3.
inline constexpr int8_t kMxfp4DoubledValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The 6-bit scale and min of group g (0..7) of a Q4_K/Q5_K block: groups 0..3 sit in the
// low 6 bits of bytes g and g+4; groups 4..7 keep their low nibbles in byte g+4 and their
// top two bits in the spare top bits of bytes g-4 (scale) and g (min).
inline void unpack_scale_min_k4(int g, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (g < 4) {
    *scale = scales[g] & 63;
    *min = scales[g + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[g + 4] & 0xf) | ((scales[g - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[g + 4] >> 4) | ((scales[g] >> 6) << 4));
  }
}

}  // namespace ridge
