// The generated Unicode tables behind ridge::unicode (internal to the tokenizer room).
// unicode_data.cpp is written by scripts/gen-unicode-data; read them through unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge::unicode::detail {

// Code points first + i*step (i < count) lowercase to themselves plus delta.
struct LowercaseRun {
  uint32_t first;
  uint16_t count;
  uint16_t step;
  int32_t delta;
};

extern const uint32_t kCategoryRunStarts[];
extern const uint8_t kCategoryRunValues[];
extern const size_t kCategoryRunCount;
extern const uint8_t kAsciiCategories[128];
extern const LowercaseRun kLowercaseRuns[];
extern const size_t kLowercaseRunCount;
extern const uint32_t kWhitespace[];
extern const size_t kWhitespaceCount;

}  // namespace ridge::unicode::detail
