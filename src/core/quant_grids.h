// The lattices and sign table of the IQ2/IQ3/IQ1 quant types, as GGUF defines them: a
// code indexes a row of 8 (IQ3: 4) values that a block scale then multiplies. Generated
// from gguf-py by scripts/gen-iq-grids into core/quant_grids.cpp.
//
//   const uint8_t* magnitudes = kIq2xxsGrid[code];   // 8 values in {8, 25, 43}
//   bool negative = kIq2Signs[sign_index] & (1 << j);  // value j of those 8
#pragma once

#include <cstdint>

namespace ridge {

extern const uint8_t kIq2xxsGrid[256][8];
extern const uint8_t kIq2xsGrid[512][8];
extern const uint8_t kIq2sGrid[1024][8];
extern const uint8_t kIq3xxsGrid[256][4];
extern const uint8_t kIq3sGrid[512][4];
extern const int8_t kIq1sGrid[2048][8];  // IQ1_S and IQ1_M
// IQ2_XXS, IQ2_XS and IQ3_XXS store 7 sign bits per 8 values; the eighth makes the
// number of minus signs even. Entry i is i with that bit added as bit 7.
extern const uint8_t kIq2Signs[128];

}  // namespace ridge
