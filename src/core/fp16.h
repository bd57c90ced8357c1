// Bit-exact scalar conversions between float and the 16-bit float formats GGUF stores:
// IEEE half (f16, the scale type of every quant block) and bfloat16 (bf16).
//
//   uint16_t h = ridge::fp32_to_fp16(0.1f);   // 0x2e66, rounded to nearest even
//   float f = ridge::fp16_to_fp32(h);         // 0.0999755859375f
//
// Semantics follow numpy (the reference our tests compare against, through gguf-py):
// f16 -> f32 is an exact widening that keeps NaN payloads (a signalling NaN stays
// signalling); f32 -> f16 rounds to nearest even, keeps subnormals, overflows to inf,
// and keeps the top 10 payload bits of a NaN (1 if they are all zero). Hardware F16C
// agrees on every value except signalling NaNs, which it quiets; a fast path built on it
// must be tested on non-NaN inputs or treat NaN payloads as unspecified.
// bf16 follows ggml: round to nearest even, NaNs quieted (bit 6 set) before rounding.
#pragma once

#include <bit>
#include <cstdint>

namespace ridge {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)  // inf or NaN: widen the payload as it is
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)  // normal: rebias the exponent from 15 to 127
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalize into a float, which has the range to hold it exactly.
  uint32_t e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    const uint16_t payload = static_cast<uint16_t>((a >> 13) & 0x3ffu);
    return sign | 0x7c00u | (payload ? payload : 1u);
  }
  // 65520 (0x477ff000) is halfway between 65504, the largest half, and 2^16; ties go to
  // the even neighbour, which is inf.
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) {  // result is a normal half (|f| >= 2^-14)
    uint32_t r = a - 0x38000000u;      // rebias the exponent from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);    // round the 13 dropped bits to nearest even
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25 rounds to zero (2^-25 is a tie)
  // Subnormal half: the value in units of 2^-24 is mantissa * 2^(exponent - 126).
  const uint32_t exponent = a >> 23;
  const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t q = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the first normal
  return static_cast<uint16_t>(sign | q);
}

inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>((x >> 16) | 64u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace ridge
