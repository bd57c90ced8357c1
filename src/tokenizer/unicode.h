// Unicode facts the tokenizers need: strict UTF-8 decoding and encoding, general categories
// (from generated tables, see scripts/gen-unicode-data), lowercase, and GPT-2's byte mapping.
//
//   size_t pos = 0;
//   uint32_t cp = ridge::unicode::decode_utf8("é!", pos);   // cp == 0xE9, pos == 2
//   bool letter = ridge::unicode::is_letter(cp);              // true
//   const std::string& g = ridge::unicode::byte_to_unicode(' ');  // "Ġ" (U+0120)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ridge::unicode {

constexpr uint32_t kInvalid = 0xFFFD;  // what malformed UTF-8 decodes to
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Decodes one code point at pos and advances pos. An invalid, overlong, surrogate,
// out-of-range or truncated sequence yields kInvalid and advances by exactly 1 byte, so every
// byte of malformed input becomes one kInvalid. Precondition: pos < text.size().
uint32_t decode_utf8(std::string_view text, size_t& pos);
// UTF-8 of cp; a surrogate or a value above kMaxCodePoint encodes kInvalid instead.
std::string encode_utf8(uint32_t cp);
void append_utf8(std::string& out, uint32_t cp);
bool is_valid_utf8(std::string_view text);

// General_Category values, in the order of the generated tables.
enum class Category : uint8_t {
  Lu, Ll, Lt, Lm, Lo,      // letters
  Mn, Mc, Me,              // marks
  Nd, Nl, No,              // numbers
  Pc, Pd, Ps, Pe, Pi, Pf, Po,  // punctuation
  Sm, Sc, Sk, So,          // symbols
  Zs, Zl, Zp,              // separators
  Cc, Cf, Cs, Co, Cn,      // other (Cn: unassigned, and anything above kMaxCodePoint)
};
constexpr int kCategoryCount = 30;

Category category(uint32_t cp);
std::string_view category_name(Category c);  // "Lu", "Nd", ...

// Bit masks over Category values, for testing several categories at once.
constexpr uint32_t category_bit(Category c) { return 1u << static_cast<unsigned>(c); }
constexpr uint32_t kLetterMask = 0x1Fu;             // Lu Ll Lt Lm Lo
constexpr uint32_t kMarkMask = 0x7u << 5;           // Mn Mc Me
constexpr uint32_t kNumberMask = 0x7u << 8;         // Nd Nl No
constexpr uint32_t kPunctuationMask = 0x7Fu << 11;  // Pc .. Po
constexpr uint32_t kSymbolMask = 0xFu << 18;        // Sm Sc Sk So
constexpr uint32_t kSeparatorMask = 0x7u << 22;     // Zs Zl Zp
constexpr uint32_t kOtherMask = 0x1Fu << 25;        // Cc Cf Cs Co Cn

bool is_letter(uint32_t cp);       // \p{L}
bool is_number(uint32_t cp);       // \p{N}
bool is_punctuation(uint32_t cp);  // \p{P}
bool is_symbol(uint32_t cp);       // \p{S}
bool is_mark(uint32_t cp);         // \p{M}
// White_Space: \s as PCRE, Python's regex module and llama.cpp treat it (tab, LF, VT, FF, CR,
// space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_whitespace(uint32_t cp);

// Simple lowercase mapping (the first code point of Python's str.lower()); cp if none.
uint32_t to_lower(uint32_t cp);

// GPT-2 byte-level mapping: each byte <-> one printable code point (e.g. ' ' <-> U+0120 'Ġ').
const std::string& byte_to_unicode(uint8_t byte);  // UTF-8 of the mapped code point
int unicode_to_byte(uint32_t cp);                  // -1 if cp is not a mapped byte

}  // namespace ridge::unicode
