// UTF-8 decoding/encoding, the generated category and case tables, and GPT-2's byte mapping.
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ridge::unicode {
namespace {

// Decodes all of s, recording (code point, bytes consumed) pairs.
std::vector<std::pair<uint32_t, size_t>> decode_all(std::string_view s) {
  std::vector<std::pair<uint32_t, size_t>> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const uint32_t cp = decode_utf8(s, pos);
    out.emplace_back(cp, pos - start);
  }
  return out;
}

using Decoded = std::vector<std::pair<uint32_t, size_t>>;

TEST(Utf8, DecodesOneToFourByteSequences) {
  EXPECT_EQ(decode_all("A"), (Decoded{{'A', 1}}));
  EXPECT_EQ(decode_all("\xC3\xA9"), (Decoded{{0xE9, 2}}));                // é
  EXPECT_EQ(decode_all("\xE2\x82\xAC"), (Decoded{{0x20AC, 3}}));          // €
  EXPECT_EQ(decode_all("\xF0\x9F\x98\x80"), (Decoded{{0x1F600, 4}}));     // 😀
  EXPECT_EQ(decode_all("\xF4\x8F\xBF\xBF"), (Decoded{{0x10FFFF, 4}}));    // last code point
  EXPECT_EQ(decode_all(std::string_view("\0", 1)), (Decoded{{0, 1}}));
  EXPECT_EQ(decode_all("a\xC3\xA9\xF0\x9F\x98\x80z"),
            (Decoded{{'a', 1}, {0xE9, 2}, {0x1F600, 4}, {'z', 1}}));
}

TEST(Utf8, MalformedBytesEachBecomeOneReplacement) {
  // A stray continuation byte and bytes that can never start a sequence.
  EXPECT_EQ(decode_all("\x80"), (Decoded{{kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xFF\xFE"), (Decoded{{kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xF5\x80\x80\x80").size(), 4u);
  // Overlong encodings of '/', U+0000 and U+07FF, U+FFFF.
  EXPECT_EQ(decode_all("\xC0\xAF"), (Decoded{{kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xC1\xBF"), (Decoded{{kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xE0\x9F\xBF"), (Decoded{{kInvalid, 1}, {kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xF0\x8F\xBF\xBF").size(), 4u);
  // UTF-16 surrogates and values past U+10FFFF are not code points UTF-8 may carry.
  EXPECT_EQ(decode_all("\xED\xA0\x80"), (Decoded{{kInvalid, 1}, {kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xF4\x90\x80\x80").size(), 4u);
  // Truncated sequences: the good bytes after them still decode.
  EXPECT_EQ(decode_all("\xE2\x82"), (Decoded{{kInvalid, 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xE2(\xA1"), (Decoded{{kInvalid, 1}, {'(', 1}, {kInvalid, 1}}));
  EXPECT_EQ(decode_all("\xF0\x9F\x98z"), (Decoded{{kInvalid, 1}, {kInvalid, 1}, {kInvalid, 1}, {'z', 1}}));
}

TEST(Utf8, ValidityCheck) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  EXPECT_TRUE(is_valid_utf8("\xEF\xBF\xBD"));  // a real U+FFFD is fine
  EXPECT_FALSE(is_valid_utf8("ok\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));      // overlong NUL
  EXPECT_FALSE(is_valid_utf8("\xED\xBF\xBF"));  // surrogate
  EXPECT_FALSE(is_valid_utf8("\xE4\xB8"));      // truncated
}

TEST(Utf8, EncodeRoundTripsEveryCodePoint) {
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = encode_utf8(cp);
    const size_t expected_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), expected_len) << cp;
    size_t pos = 0;
    ASSERT_EQ(decode_utf8(s, pos), cp);
    ASSERT_EQ(pos, s.size());
  }
  EXPECT_EQ(encode_utf8(0xD800), "\xEF\xBF\xBD");
  EXPECT_EQ(encode_utf8(0x110000), "\xEF\xBF\xBD");
  std::string out = "x";
  append_utf8(out, 0x4E2D);
  EXPECT_EQ(out, "x\xE4\xB8\xAD");
}

TEST(Categories, SpotChecksAcrossAllThirtyCategories) {
  const std::vector<std::pair<uint32_t, Category>> cases = {
      {'A', Category::Lu},     {'z', Category::Ll},      {0x01C5, Category::Lt},  {0x02B0, Category::Lm},
      {0x4E2D, Category::Lo},  {0x0301, Category::Mn},   {0x0903, Category::Mc},  {0x20DD, Category::Me},
      {'7', Category::Nd},     {0x216B, Category::Nl},   {0x00BD, Category::No},  {'_', Category::Pc},
      {'-', Category::Pd},     {'(', Category::Ps},      {')', Category::Pe},     {0x00AB, Category::Pi},
      {0x00BB, Category::Pf},  {'!', Category::Po},      {'+', Category::Sm},     {'$', Category::Sc},
      {'^', Category::Sk},     {0x00A9, Category::So},   {' ', Category::Zs},     {0x2028, Category::Zl},
      {0x2029, Category::Zp},  {'\n', Category::Cc},     {0x200B, Category::Cf},  {0xD800, Category::Cs},
      {0xE000, Category::Co},  {0x0378, Category::Cn},
      // Four-byte code points, and the ends of the table.
      {0x1F600, Category::So}, {0x10400, Category::Lu},  {0x1D7CE, Category::Nd}, {0x20000, Category::Lo},
      {0xE0001, Category::Cf}, {0x10FFFD, Category::Co}, {0x10FFFF, Category::Cn}, {0x110000, Category::Cn},
      {'~', Category::Sm},     {0x7F, Category::Cc},     {0x00A0, Category::Zs},
  };
  for (const auto& [cp, cat] : cases) {
    EXPECT_EQ(category_name(category(cp)), category_name(cat)) << std::hex << "U+" << cp;
  }
}

TEST(Categories, AreUnicode15_1sAsLlamaCppsAre) {
  // Code points Unicode 15.0 and 15.1 assigned (Debian's Python knows only 14): letters and
  // digits that \p{L} and \p{N} split on, as llama.cpp's tables (15.1) do.
  EXPECT_EQ(category_name(category(0x31350)), category_name(Category::Lo));  // CJK Extension H
  EXPECT_EQ(category_name(category(0x2EBF0)), category_name(Category::Lo));  // CJK Extension I (15.1)
  EXPECT_EQ(category_name(category(0x11F50)), category_name(Category::Nd));  // Kawi digit zero
  EXPECT_EQ(category_name(category(0x1E4F0)), category_name(Category::Nd));  // Nag Mundari digit zero
  EXPECT_EQ(category_name(category(0x1F6DC)), category_name(Category::So));  // wireless symbol
}

TEST(Categories, GroupPredicates) {
  EXPECT_TRUE(is_letter('q'));
  EXPECT_TRUE(is_letter(0x00E9));
  EXPECT_TRUE(is_letter(0x10400));
  EXPECT_FALSE(is_letter('1'));
  EXPECT_TRUE(is_number('1'));
  EXPECT_TRUE(is_number(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(is_number(0x00BD));
  EXPECT_FALSE(is_number('x'));
  EXPECT_TRUE(is_punctuation('.'));
  EXPECT_TRUE(is_punctuation(0x3001));  // ideographic comma
  EXPECT_FALSE(is_punctuation('+'));
  EXPECT_TRUE(is_symbol('+'));
  EXPECT_TRUE(is_symbol(0x20AC));
  EXPECT_TRUE(is_symbol(0x1F600));
  EXPECT_FALSE(is_symbol('.'));
  EXPECT_TRUE(is_mark(0x0301));
  EXPECT_FALSE(is_mark('e'));
}

TEST(Whitespace, IsExactlyWhiteSpaceProperty) {
  const std::set<uint32_t> expected = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                       0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                       0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                       0x2029, 0x202F, 0x205F, 0x3000};
  std::set<uint32_t> found;
  for (uint32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
    if (is_whitespace(cp)) found.insert(cp);
  }
  EXPECT_EQ(found, expected);
  EXPECT_FALSE(is_whitespace(0x1C));   // Python's str.isspace() says yes; \s does not
  EXPECT_FALSE(is_whitespace(0x200B)); // zero width space is a format character
}

TEST(Lowercase, SimpleMappings) {
  EXPECT_EQ(to_lower('A'), uint32_t{'a'});
  EXPECT_EQ(to_lower('a'), uint32_t{'a'});
  EXPECT_EQ(to_lower('1'), uint32_t{'1'});
  EXPECT_EQ(to_lower(0x00C9), 0x00E9u);   // É
  EXPECT_EQ(to_lower(0x0100), 0x0101u);   // Ā, in a run with step 2
  EXPECT_EQ(to_lower(0x0101), 0x0101u);
  EXPECT_EQ(to_lower(0x012E), 0x012Fu);
  EXPECT_EQ(to_lower(0x0130), uint32_t{'i'});  // İ: first code point of "i̇"
  EXPECT_EQ(to_lower(0x03A3), 0x03C3u);   // Σ
  EXPECT_EQ(to_lower(0x0416), 0x0436u);   // Ж
  EXPECT_EQ(to_lower(0x2126), 0x03C9u);   // OHM SIGN
  EXPECT_EQ(to_lower(0x212A), uint32_t{'k'});  // KELVIN SIGN
  EXPECT_EQ(to_lower(0x10400), 0x10428u); // Deseret
  EXPECT_EQ(to_lower(0x00DF), 0x00DFu);   // ß has no single lowercase change
  EXPECT_EQ(to_lower(0x110000), 0x110000u);
}

TEST(ByteMapping, MatchesGpt2BytesToUnicode) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");    // U+0120 Ġ
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");   // U+010A Ċ
  EXPECT_EQ(byte_to_unicode(0x00), "\xC4\x80");   // U+0100
  EXPECT_EQ(byte_to_unicode('!'), "!");
  EXPECT_EQ(byte_to_unicode('~'), "~");
  EXPECT_EQ(byte_to_unicode(0x7F), "\xC4\xA1");   // U+0121
  EXPECT_EQ(byte_to_unicode(0xA1), "\xC2\xA1");   // ¡ maps to itself
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");   // soft hyphen -> U+0143, the last one
  EXPECT_EQ(byte_to_unicode(0xFF), "\xC3\xBF");   // ÿ

  std::set<std::string> images;
  for (int b = 0; b < 256; ++b) {
    const std::string& s = byte_to_unicode(static_cast<uint8_t>(b));
    size_t pos = 0;
    const uint32_t cp = decode_utf8(s, pos);
    EXPECT_EQ(pos, s.size());
    EXPECT_EQ(unicode_to_byte(cp), b);
    EXPECT_FALSE(is_whitespace(cp)) << b;
    images.insert(s);
  }
  EXPECT_EQ(images.size(), 256u);
  EXPECT_EQ(unicode_to_byte(' '), -1);
  EXPECT_EQ(unicode_to_byte(0x144), -1);
  EXPECT_EQ(unicode_to_byte(0x4E2D), -1);
}

}  // namespace
}  // namespace ridge::unicode
