// The code-point regex engine: each supported feature, ECMAScript match order, the
// llama.cpp compatibility option, and rejection of what it does not support.
#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace ridge {
namespace {

// Byte length of the match of pattern at the start of text, or -1.
long prefix(std::string_view pattern, std::string_view text, RegexOptions options = {}) {
  const auto n = Regex(pattern, options).match_prefix(text);
  return n ? static_cast<long>(*n) : -1;
}

std::vector<std::string_view> all(std::string_view pattern, std::string_view text) {
  return Regex(pattern).find_all(text);
}

using Views = std::vector<std::string_view>;

TEST(Regex, LiteralsAndConcatenation) {
  EXPECT_EQ(prefix("abc", "abcd"), 3);
  EXPECT_EQ(prefix("abc", "abx"), -1);
  EXPECT_EQ(prefix("", "abc"), 0);
  EXPECT_EQ(prefix("\xC3\xA9t\xC3\xA9", "\xC3\xA9t\xC3\xA9!"), 5);  // été, byte length
  EXPECT_EQ(prefix("\xF0\x9F\x98\x80+", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80x"), 8);
}

TEST(Regex, AlternationIsLeftmostFirstNotLongest) {
  EXPECT_EQ(prefix("a|ab", "ab"), 1);
  EXPECT_EQ(prefix("ab|a", "ab"), 2);
  EXPECT_EQ(prefix("x|y|z", "z"), 1);
  EXPECT_EQ(prefix("(?:a|ab)c", "abc"), 3);  // backtracks into the second alternative
}

TEST(Regex, GreedyAndLazyQuantifiers) {
  EXPECT_EQ(prefix("a?", "aa"), 1);
  EXPECT_EQ(prefix("a*", "aaab"), 3);
  EXPECT_EQ(prefix("a+", "b"), -1);
  EXPECT_EQ(prefix("a{2}", "aaa"), 2);
  EXPECT_EQ(prefix("a{2}", "a"), -1);
  EXPECT_EQ(prefix("a{2,}", "aaaa"), 4);
  EXPECT_EQ(prefix("a{1,3}", "aaaaa"), 3);
  EXPECT_EQ(prefix("a{0,2}b", "aab"), 3);
  EXPECT_EQ(prefix("a+?", "aaa"), 1);
  EXPECT_EQ(prefix("a*?b", "aab"), 3);
  EXPECT_EQ(prefix("a{2,4}?", "aaaa"), 2);
  EXPECT_EQ(prefix("(?:ab)+", "ababa"), 4);
  EXPECT_EQ(prefix("(?:ab){2}", "ababab"), 4);
  EXPECT_EQ(prefix("a{,2}", "a{,2}"), 5);  // not a quantifier: literal braces
}

TEST(Regex, BacktracksIntoGreedyRuns) {
  EXPECT_EQ(prefix("a*ab", "aaab"), 4);
  EXPECT_EQ(prefix("\\s*[\\r\\n]+", "  \n \n  x"), 5);  // ends after the last newline
  EXPECT_EQ(prefix("(?:a|b)*b", "abab"), 4);
  EXPECT_EQ(prefix("\\p{L}+\\d", "abc1"), 4);
}

TEST(Regex, ClassesRangesAndNegation) {
  EXPECT_EQ(prefix("[a-c]+", "abcd"), 3);
  EXPECT_EQ(prefix("[^a-c]+", "xyza"), 3);
  EXPECT_EQ(prefix("[-a]+", "-a-b"), 3);        // '-' first is literal
  EXPECT_EQ(prefix("[a-]+", "a--b"), 3);        // and last
  EXPECT_EQ(prefix("[\\]\\[\\\\]+", "[]\\x"), 3);
  EXPECT_EQ(prefix("[\\-.]+", "-.-x"), 3);
  EXPECT_EQ(prefix("[!-/:-@]+", "!/:@A"), 4);
  EXPECT_EQ(prefix("[\\x41-\\x43]+", "ABCD"), 3);
  EXPECT_EQ(prefix("[\xE4\xB8\x80-\xE9\xBE\xA5]+", "\xE4\xB8\xAD\xE6\x96\x87x"), 6);  // [一-龥]
  EXPECT_EQ(prefix("[^\xE4\xB8\x80-\xE9\xBE\xA5]", "\xE4\xB8\xAD"), -1);
  EXPECT_EQ(prefix("[\\u00e0-\\u00ff]", "\xC3\xA9"), 2);
  EXPECT_EQ(prefix("[\\s\\d]+", " 1\t2x"), 4);
  EXPECT_EQ(prefix("[^\\s\\p{L}\\p{N}]+", "!?\xE2\x82\xAC" "a"), 5);  // !?€ then a letter
  EXPECT_EQ(prefix("[\\S]+", "ab c"), 2);
  EXPECT_EQ(prefix("[\\W]+", "!\xC3\xA9" "a"), 3);  // \W includes every non-ASCII code point
  EXPECT_EQ(prefix("[\\P{L}]+", "12a"), 2);
}

TEST(Regex, ClassRangeOutOfOrderIsAnError) { EXPECT_THROW(Regex("[b-a]"), Error); }

TEST(Regex, ShorthandEscapes) {
  EXPECT_EQ(prefix("\\s+", " \t\n\v\f\r\xC2\xA0\xE3\x80\x80x"), 11);  // incl. NBSP, U+3000
  EXPECT_EQ(prefix("\\s", "\xE2\x80\x8B"), -1);   // U+200B is not whitespace
  EXPECT_EQ(prefix("\\S+", "ab c"), 2);
  EXPECT_EQ(prefix("\\d+", "0123456789a"), 10);
  EXPECT_EQ(prefix("\\d", "\xD9\xA3"), -1);        // \d is ASCII, as in ECMAScript
  EXPECT_EQ(prefix("\\D+", "ab1"), 2);
  EXPECT_EQ(prefix("\\w+", "a_Z9-"), 4);
  EXPECT_EQ(prefix("\\w", "\xC3\xA9"), -1);
  EXPECT_EQ(prefix("\\W+", "-\xC3\xA9" "a"), 3);
  EXPECT_EQ(prefix("\\r\\n\\t\\f\\v\\0", std::string_view("\r\n\t\f\v\0", 6)), 6);
  EXPECT_EQ(prefix("\\x41\\u00e9\\u{1F600}", "A\xC3\xA9\xF0\x9F\x98\x80"), 7);
  EXPECT_EQ(prefix("\\$\\.\\+\\*\\?\\(\\)\\[\\]\\{\\}\\|\\^\\\\\\/\\-", "$.+*?()[]{}|^\\/-"), 16);
}

TEST(Regex, UnicodeCategories) {
  EXPECT_EQ(prefix("\\p{L}+", "Stra\xC3\x9F" "e1"), 7);
  EXPECT_EQ(prefix("\\p{Lu}+", "ABc"), 2);
  EXPECT_EQ(prefix("\\p{Ll}+", "abC"), 2);
  EXPECT_EQ(prefix("\\p{Lt}", "\xC7\x85"), 2);           // ǅ
  EXPECT_EQ(prefix("\\p{Lm}", "\xCA\xB0"), 2);           // ʰ
  EXPECT_EQ(prefix("\\p{Lo}", "\xE4\xB8\xAD"), 3);       // 中
  EXPECT_EQ(prefix("\\p{M}", "\xCC\x81"), 2);            // combining acute
  EXPECT_EQ(prefix("\\p{Mn}", "\xCC\x81"), 2);
  EXPECT_EQ(prefix("\\p{N}+", "1\xC2\xBD\xE2\x85\xAB" "x"), 6);  // 1 ½ Ⅻ
  EXPECT_EQ(prefix("\\p{Nd}+", "1\xC2\xBD"), 1);
  EXPECT_EQ(prefix("\\p{P}+", "!,\xE3\x80\x82+"), 5);    // !,。 then +
  EXPECT_EQ(prefix("\\p{S}+", "+$~\xE2\x82\xAC\xF0\x9F\x98\x80!"), 10);
  EXPECT_EQ(prefix("\\p{Sc}", "$"), 1);
  EXPECT_EQ(prefix("\\p{Z}", " "), 1);
  EXPECT_EQ(prefix("\\p{Zs}", "\xE3\x80\x80"), 3);
  EXPECT_EQ(prefix("\\p{C}", "\x01"), 1);
  EXPECT_EQ(prefix("\\p{Cn}", "\xCD\xB8"), 2);           // U+0378 unassigned
  EXPECT_EQ(prefix("\\P{L}+", "12a"), 2);
  EXPECT_EQ(prefix("\\P{N}", "1"), -1);
  EXPECT_THROW(Regex("\\p{Xx}"), Error);
  EXPECT_THROW(Regex("\\p{Han}"), Error);
}

TEST(Regex, DotMatchesAllButLineTerminators) {
  EXPECT_EQ(prefix(".+", "a\xC3\xA9\xF0\x9F\x98\x80\nb"), 7);
  EXPECT_EQ(prefix(".", "\r"), -1);
  EXPECT_EQ(prefix(".", "\xE2\x80\xA8"), -1);  // U+2028
}

TEST(Regex, GroupsDoNotCapture) {
  EXPECT_EQ(prefix("(ab)+c", "ababc"), 5);
  EXPECT_EQ(prefix("(IMGIMG)((A|B|C){1,4})Z", "IMGIMGABCZ"), 10);
  EXPECT_EQ(prefix("(?:a(?:b|c))+", "abacad"), 4);
}

TEST(Regex, Lookahead) {
  EXPECT_EQ(prefix("a(?=b)", "ab"), 1);
  EXPECT_EQ(prefix("a(?=b)", "ac"), -1);
  EXPECT_EQ(prefix("a(?!b)", "ac"), 1);
  EXPECT_EQ(prefix("a(?!b)", "ab"), -1);
  // The trailing-space rule: keep the last space for the word after it.
  EXPECT_EQ(prefix("\\s+(?!\\S)", "   x"), 2);
  EXPECT_EQ(prefix("\\s+(?!\\S)", "   "), 3);
  EXPECT_EQ(prefix("\\s+(?!\\S)", " x"), -1);
  // Lookahead inside a repeated group (the GPT-4o pattern's shape).
  EXPECT_EQ(prefix("((?=[\\p{L}])([^a-z]))+", "AB\xC3\xA9" "c"), 4);
  // Atomic: the lookahead's first match decides, it is not re-entered.
  EXPECT_EQ(prefix("(?=(a+))a*b", "aaab"), 4);
}

TEST(Regex, AnchorsAndWordBoundaries) {
  EXPECT_EQ(prefix("^a", "a"), 1);
  EXPECT_EQ(prefix("a$", "a"), 1);
  EXPECT_EQ(prefix("a$", "ab"), -1);
  EXPECT_EQ(prefix("\\s+$", "  "), 2);
  EXPECT_EQ(prefix("\\s+$", "  \n"), 3);
  EXPECT_EQ(prefix("\\s+$", "  x"), -1);
  EXPECT_EQ(all("\\b\\w", "ab cd"), (Views{"a", "c"}));
  EXPECT_EQ(all("\\B\\w", "ab cd"), (Views{"b", "d"}));
  EXPECT_EQ(all("\\d{1,3}(?=(?:\\d{3})*\\b)", "1234567 89"), (Views{"1", "234", "567", "89"}));
  EXPECT_EQ(all("\\d{1,3}(?=(?:\\d{3})*\\b)", "1234567x"), (Views{}));  // x is a word char
  EXPECT_EQ(all("\\d{1,3}(?=(?:\\d{3})*\\b)", "1234\xC3\xA9"), (Views{"1", "234"}));  // é is not
}

TEST(Regex, MatchAtRespectsTheVisibleRange) {
  const Regex re("\\s+$");
  const DecodedText text("a  b");
  EXPECT_EQ(re.match_at(text, 0, 4, 1), std::nullopt);
  EXPECT_EQ(re.match_at(text, 0, 3, 1), std::optional<size_t>(3));  // the range ends at 3
  const Regex start("^b");
  EXPECT_EQ(start.match_at(text, 3, 4, 3), std::optional<size_t>(4));
  EXPECT_EQ(start.match_at(text, 0, 4, 3), std::nullopt);
}

TEST(Regex, FindAllFollowsRegexIteratorForEmptyMatches) {
  const Regex re("a*");
  const DecodedText text("baaa");
  std::vector<Regex::Match> found;
  re.find_all(text, 0, text.size(), found);
  ASSERT_EQ(found.size(), 3u);  // as Python's finditer: (0,0) (1,4) (4,4)
  EXPECT_EQ(found[0].begin, 0u);
  EXPECT_EQ(found[0].end, 0u);
  EXPECT_EQ(found[1].begin, 1u);
  EXPECT_EQ(found[1].end, 4u);
  EXPECT_EQ(found[2].begin, 4u);
  EXPECT_EQ(found[2].end, 4u);

  const Regex groups("(?=(\\d{3})+(?!\\d))");
  const DecodedText digits("1234567");
  found.clear();
  groups.find_all(digits, 0, digits.size(), found);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].begin, 1u);
  EXPECT_EQ(found[1].begin, 4u);
}

TEST(Regex, FindAllGpt2Pattern) {
  EXPECT_EQ(all("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                "Hello world, it's 2024!  Ok"),
            (Views{"Hello", " world", ",", " it", "'s", " 2024", "!", " ", " Ok"}));
}

TEST(Regex, LlamaCppCompatibilityOption) {
  const RegexOptions llama{.llama_cpp = true};
  // \p{Lu} etc. all mean \p{L} there.
  EXPECT_EQ(prefix("\\p{Lu}+", "ABc"), 2);
  EXPECT_EQ(prefix("\\p{Lu}+", "ABc", llama), 3);
  EXPECT_EQ(prefix("[\\p{Ll}]+", "abC\xC3\x89", llama), 5);
  // Its ASCII symbol list lacks '~'.
  EXPECT_EQ(prefix("\\p{S}", "~"), 1);
  EXPECT_EQ(prefix("\\p{S}", "~", llama), -1);
  EXPECT_EQ(prefix("\\p{S}", "+", llama), 1);
  EXPECT_EQ(prefix("[^\\p{S}]", "~", llama), 1);
  // Non-ASCII whitespace is seen as U+000B: still \s, but no longer itself.
  EXPECT_EQ(prefix("\\u3000", "\xE3\x80\x80"), 3);
  EXPECT_EQ(prefix("\\u3000", "\xE3\x80\x80", llama), -1);
  EXPECT_EQ(prefix("\\v", "\xE3\x80\x80", llama), 3);
  EXPECT_EQ(prefix("\\s", "\xC2\xA0", llama), 2);
  EXPECT_EQ(prefix("[\xE0\xA0\x80-\xE4\xB8\x80]", "\xE2\x80\xA8"), 3);         // U+2028 in U+0800..U+4E00
  EXPECT_EQ(prefix("[\xE0\xA0\x80-\xE4\xB8\x80]", "\xE2\x80\xA8", llama), -1);
}

TEST(Regex, RejectsWhatItDoesNotSupport) {
  for (const char* bad : {"(", ")", "a)", "[a", "a{3,2}", "*a", "a**", "a+*", "(?<=a)b", "(?<n>a)",
                          "(?i:a)", "\\q", "\\p{L", "\\pL", "(?:a*)*", "(?:)+", "a++", "(?=a)*",
                          "a{1001}", "\xFF"}) {
    EXPECT_THROW(Regex{bad}, Error) << bad;
  }
  try {
    Regex("ab(c");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ab(c"), std::string::npos) << e.what();
  }
}

TEST(Regex, LongRunsAreLinear) {
  // 200k letters: one kRepeatClass scan, no per-character backtracking frames.
  const std::string word(200000, 'a');
  EXPECT_EQ(prefix("\\p{L}+\\s*", word), 200000);
  const std::string spaces = std::string(100000, ' ') + "x";
  EXPECT_EQ(prefix("\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", spaces), 99999);
}

}  // namespace
}  // namespace ridge
