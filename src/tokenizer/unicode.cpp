#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_data.h"

namespace ridge::unicode {
namespace {

using detail::kCategoryRunCount;
using detail::kCategoryRunStarts;
using detail::kCategoryRunValues;

Category category_from_table(uint32_t cp) {
  const uint32_t* end = kCategoryRunStarts + kCategoryRunCount;
  const uint32_t* it = std::upper_bound(kCategoryRunStarts, end, cp);
  return static_cast<Category>(kCategoryRunValues[(it - kCategoryRunStarts) - 1]);
}

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

uint32_t decode_utf8(std::string_view text, size_t& pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  // Lead byte gives the length and the smallest value that length may encode (to reject
  // overlong forms); C0, C1 and F5..FF can never start a valid sequence.
  size_t len = 0;
  uint32_t cp = 0;
  uint32_t min_value = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min_value = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min_value = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min_value = 0x10000;
  } else {
    pos += 1;
    return kInvalid;
  }
  if (n - pos < len) {
    pos += 1;
    return kInvalid;
  }
  for (size_t i = 1; i < len; ++i) {
    if (!is_continuation(s[pos + i])) {
      pos += 1;
      return kInvalid;
    }
    cp = (cp << 6) | (s[pos + i] & 0x3F);
  }
  if (cp < min_value || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
    pos += 1;
    return kInvalid;
  }
  pos += len;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kInvalid;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(uint32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cp = decode_utf8(text, pos);
    // A genuine U+FFFD takes three bytes; a decoding failure advances by one.
    if (cp == kInvalid && pos - start == 1) return false;
  }
  return true;
}

Category category(uint32_t cp) {
  // ASCII is most of the text we see: a flat table, constant-initialized like all the
  // generated data, so this is safe to call from other files' static initializers.
  if (cp < 128) return static_cast<Category>(detail::kAsciiCategories[cp]);
  if (cp > kMaxCodePoint) return Category::Cn;
  return category_from_table(cp);
}

std::string_view category_name(Category c) {
  static constexpr std::string_view kNames[kCategoryCount] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  return kNames[static_cast<size_t>(c)];
}

bool is_letter(uint32_t cp) { return category_bit(category(cp)) & kLetterMask; }
bool is_number(uint32_t cp) { return category_bit(category(cp)) & kNumberMask; }
bool is_punctuation(uint32_t cp) { return category_bit(category(cp)) & kPunctuationMask; }
bool is_symbol(uint32_t cp) { return category_bit(category(cp)) & kSymbolMask; }
bool is_mark(uint32_t cp) { return category_bit(category(cp)) & kMarkMask; }

bool is_whitespace(uint32_t cp) {
  if (cp < 128) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  const uint32_t* end = detail::kWhitespace + detail::kWhitespaceCount;
  return std::binary_search(detail::kWhitespace, end, cp);
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const auto* runs = detail::kLowercaseRuns;
  const auto* end = runs + detail::kLowercaseRunCount;
  // The last run whose first code point is <= cp is the only one that can contain it.
  const auto* it = std::upper_bound(runs, end, cp, [](uint32_t value, const detail::LowercaseRun& run) {
    return value < run.first;
  });
  if (it == runs) return cp;
  const detail::LowercaseRun& run = *(it - 1);
  const uint32_t offset = cp - run.first;
  if (offset % run.step != 0 || offset / run.step >= run.count) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + run.delta);
}

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte becomes a visible, non-space character.
struct ByteMap {
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 256 + 68> from_code_point;  // -1 where no byte maps
  ByteMap() {
    from_code_point.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      to_utf8[b] = encode_utf8(cp);
      from_code_point[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_utf8[byte]; }

int unicode_to_byte(uint32_t cp) {
  const auto& table = byte_map().from_code_point;
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace ridge::unicode
