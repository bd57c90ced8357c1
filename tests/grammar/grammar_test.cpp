// The GBNF parser and the matcher's automaton: what parses, what is refused (with the line
// and column), and which texts a grammar accepts, byte by byte.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ridge::grammar {
namespace {

// Whether the grammar accepts text exactly (a complete sentence), and whether as a prefix.
struct Match {
  bool complete;
  bool prefix;
};

Match match(const std::string& gbnf, const std::string& text) {
  Automaton a(std::make_shared<const Grammar>(parse_gbnf(gbnf)));
  const int32_t s = a.step(a.start(), text);
  if (s == Automaton::kDead) return {false, false};
  return {a.complete(s), true};
}

bool accepts(const std::string& gbnf, const std::string& text) { return match(gbnf, text).complete; }

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, LiteralsAlternationAndGroups) {
  const std::string g = R"(root ::= "yes" | "no" ("!" | "?"))";
  EXPECT_TRUE(accepts(g, "yes"));
  EXPECT_TRUE(accepts(g, "no!"));
  EXPECT_TRUE(accepts(g, "no?"));
  EXPECT_FALSE(accepts(g, "no"));
  EXPECT_TRUE(match(g, "no").prefix);
  EXPECT_FALSE(match(g, "yes!").prefix);
  EXPECT_FALSE(match(g, "maybe").prefix);
}

TEST(Gbnf, EscapesInLiterals) {
  const std::string g = R"(root ::= "a\n\t\"\\\x41\u00e9")";
  EXPECT_TRUE(accepts(g, "a\n\t\"\\A\xC3\xA9"));
  EXPECT_FALSE(accepts(g, "a\n\t\"\\A"));
}

TEST(Gbnf, CharacterClassesAsciiAndUnicode) {
  const std::string g = R"(root ::= [a-c0-9_] [^"\\] [α-ω])";
  EXPECT_TRUE(accepts(g, "b\"" "\xCE\xB2") == false);  // '"' is excluded by the negated class
  EXPECT_TRUE(accepts(g, "bxβ"));
  EXPECT_TRUE(accepts(g, "_€ω"));   // a three-byte character in the negated class
  EXPECT_TRUE(accepts(g, "9😀α"));  // and a four-byte one
  EXPECT_FALSE(accepts(g, "dxβ"));
  EXPECT_FALSE(accepts(g, "axa"));  // 'a' is not in α-ω
  // A multi-byte character is matched byte by byte: its first byte alone is a prefix.
  EXPECT_TRUE(match(g, "ax\xCE").prefix);
  EXPECT_FALSE(match(g, "ax\xCE\x41").prefix);
}

TEST(Gbnf, AnyCharacterMatchesOneCodePoint) {
  EXPECT_TRUE(accepts(R"(root ::= . ".")", "é."));
  EXPECT_FALSE(accepts(R"(root ::= . ".")", "ab."));
}

TEST(Gbnf, Repetitions) {
  EXPECT_TRUE(accepts(R"(root ::= "a"*)", ""));
  EXPECT_TRUE(accepts(R"(root ::= "a"*)", "aaaa"));
  EXPECT_FALSE(accepts(R"(root ::= "a"+)", ""));
  EXPECT_TRUE(accepts(R"(root ::= "a"+ "b"?)", "aab"));
  EXPECT_TRUE(accepts(R"(root ::= "ab"{2})", "abab"));
  EXPECT_FALSE(accepts(R"(root ::= "ab"{2})", "ab"));
  EXPECT_FALSE(match(R"(root ::= "ab"{2})", "ababa").prefix);
  const std::string g = R"(root ::= [0-9]{2,4})";
  EXPECT_FALSE(accepts(g, "1"));
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_TRUE(accepts(g, "1234"));
  EXPECT_FALSE(match(g, "12345").prefix);
  EXPECT_TRUE(accepts(R"(root ::= "x"{2,})", "xxxxxxx"));
  EXPECT_FALSE(accepts(R"(root ::= "x"{2,})", "x"));
}

TEST(Gbnf, RulesCommentsAndMultiLineGroups) {
  const std::string g = R"(# a list of numbers
root ::= "[" ws ( num ( "," ws num )* )? "]"   # comment after a rule
num  ::= "-"? [0-9]+
ws   ::= [ \t\n]*
list ::= (
  "unused" |
  "rule"
)
)";
  EXPECT_TRUE(accepts(g, "[]"));
  EXPECT_TRUE(accepts(g, "[1, -22,\n 3]"));
  EXPECT_FALSE(accepts(g, "[1,,2]"));
}

TEST(Gbnf, RecursionThroughOtherRules) {
  const std::string g = R"(root ::= value
value ::= "[" ( value ( "," value )* )? "]" | "x")";
  EXPECT_TRUE(accepts(g, "[[x,[]],x]"));
  EXPECT_FALSE(accepts(g, "[[x]"));
  EXPECT_TRUE(match(g, "[[x]").prefix);
}

TEST(GbnfErrors, NameTheLineAndColumn) {
  EXPECT_NE(error_of("root ::= \"a\"\nfoo ::= bar").find("line 2, column 9: rule 'bar' is used but never defined"),
            std::string::npos)
      << error_of("root ::= \"a\"\nfoo ::= bar");
  EXPECT_NE(error_of("root ::= \"abc").find("line 1, column 14: unterminated string literal"), std::string::npos)
      << error_of("root ::= \"abc");
  EXPECT_NE(error_of("root = \"a\"").find("line 1, column 6: expected '::='"), std::string::npos);
  EXPECT_NE(error_of("root ::= ( \"a\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= * \"a\"").find("has nothing before it to repeat"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("maximum is below the minimum"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape '\\q'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" ) \"b\"").find("expected the end of rule 'root'"), std::string::npos);
}

TEST(GbnfErrors, LeftRecursionIsRefusedNamingTheCycle) {
  const std::string e = error_of("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]");
  EXPECT_NE(e.find("rule 'expr' is left-recursive (expr -> expr"), std::string::npos) << e;
  // Through a nullable prefix too.
  EXPECT_NE(error_of("root ::= a\na ::= b a \"x\" | \"y\"\nb ::= \"z\"?").find("left-recursive"), std::string::npos);
}

TEST(GbnfErrors, AGrammarTooAmbiguousToMatchIsAnErrorNotAStall) {
  // After n characters, 2^n ways to close them: distinct stacks, refused past a bound.
  Automaton a(std::make_shared<const Grammar>(parse_gbnf("root ::= [a-z] root \"y\" | [a-z] root \"z\" | \"\"")));
  try {
    a.step(a.start(), std::string(20, 'q'));
    ADD_FAILURE() << "no error";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

// Hostile grammars arrive in requests: none may recurse once per level of the input and
// overflow the server thread's stack.
TEST(GbnfErrors, DeeplyNestedGroupsAreRefusedNotACrash) {
  const int n = 100000;
  const std::string e = error_of("root ::= " + std::string(n, '(') + "\"a\"" + std::string(n, ')'));
  EXPECT_NE(e.find("groups nested deeper than 100 levels"), std::string::npos) << e;
  EXPECT_TRUE(accepts("root ::= " + std::string(50, '(') + "\"a\"" + std::string(50, ')'), "a"));
}

TEST(Gbnf, ALongChainOfRulesMatchesWithoutRecursingPerRule) {
  const int n = 100000;  // root ::= r0, r0 ::= r1, ... r(n) ::= "b": n levels of expansion
  std::ostringstream chain;
  chain << "root ::= r0\n";
  for (int i = 0; i < n; ++i) chain << 'r' << i << " ::= r" << i + 1 << '\n';
  std::ostringstream g, cyclic;
  g << chain.str() << 'r' << n << " ::= \"b\"\n";
  EXPECT_TRUE(accepts(g.str(), "b"));
  EXPECT_FALSE(accepts(g.str(), "c"));
  // The left-recursion check walks the same chain; closing it into a cycle is still found.
  cyclic << chain.str() << 'r' << n << " ::= r0 \"b\"\n";
  EXPECT_NE(error_of(cyclic.str()).find("left-recursive"), std::string::npos);
}

TEST(Gbnf, LiteralHelperRoundTrips) {
  const std::string text = "a\"b\\c\nd\x01" "é";
  EXPECT_TRUE(accepts("root ::= " + gbnf_literal(text), text));
}

}  // namespace
}  // namespace ridge::grammar
