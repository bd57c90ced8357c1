// StringTable: ids in insertion order, first indexed id wins, growth keeps every entry
// findable, and the memory it holds stays near the bytes it stores.
#include "tokenizer/string_table.h"

#include <gtest/gtest.h>

#include <string>
#include <unordered_map>

namespace ridge::tokenizer_detail {
namespace {

TEST(StringTable, AppendGivesIdsInOrderAndIndexMakesThemFindable) {
  StringTable t;
  EXPECT_EQ(t.size(), 0);
  EXPECT_EQ(t.find("a"), StringTable::kAbsent);  // no index yet
  EXPECT_EQ(t.append("a"), 0);
  EXPECT_EQ(t.append(""), 1);
  EXPECT_EQ(t.append("bc"), 2);
  EXPECT_EQ(t.size(), 3);
  EXPECT_EQ(t[0], "a");
  EXPECT_EQ(t[1], "");
  EXPECT_EQ(t[2], "bc");
  EXPECT_EQ(t.find("bc"), StringTable::kAbsent);  // stored, not indexed
  EXPECT_TRUE(t.index(2));
  EXPECT_EQ(t.find("bc"), 2);
  EXPECT_EQ(t.find("b"), StringTable::kAbsent);
  EXPECT_EQ(t.find("bcd"), StringTable::kAbsent);
}

TEST(StringTable, RepeatedTextKeepsTheFirstIndexedId) {
  StringTable t;
  const int32_t first = t.append("same");
  const int32_t second = t.append("same");
  EXPECT_TRUE(t.index(first));
  EXPECT_FALSE(t.index(second));
  EXPECT_EQ(t.find("same"), first);
  EXPECT_EQ(t[second], "same");  // still stored under its own id
  EXPECT_EQ(t.intern("same"), first);
  EXPECT_EQ(t.intern("new"), 2);
  EXPECT_EQ(t.size(), 3);
}

TEST(StringTable, EmbeddedZerosAndLongTextsCompareByAllBytes) {
  StringTable t;
  const std::string with_zero("a\0b", 3);
  const std::string long_a(100, 'x');
  std::string long_b = long_a;
  long_b.back() = 'y';
  EXPECT_EQ(t.intern(with_zero), 0);
  EXPECT_EQ(t.intern(std::string("a\0c", 3)), 1);
  EXPECT_EQ(t.intern(long_a), 2);
  EXPECT_EQ(t.intern(long_b), 3);
  EXPECT_EQ(t.find(with_zero), 0);
  EXPECT_EQ(t.find("a"), StringTable::kAbsent);
  EXPECT_EQ(t.find(long_b), 3);
}

TEST(StringTable, GrowingTheIndexKeepsEveryEntry) {
  StringTable t;
  std::unordered_map<std::string, int32_t> expected;
  for (int i = 0; i < 50000; ++i) {
    const std::string s = std::to_string(i * 7919 % 100003);
    const int32_t id = t.intern(s);
    expected.emplace(s, id);  // keeps the first id, as the table must
    ASSERT_EQ(t.find(s), expected.at(s));
  }
  EXPECT_EQ(t.size(), static_cast<int32_t>(expected.size()));
  for (const auto& [s, id] : expected) ASSERT_EQ(t.find(s), id) << s;
  EXPECT_EQ(t.find("100003"), StringTable::kAbsent);
}

TEST(StringTable, ViewsStayValidWhenTheTableMoves) {
  StringTable t;
  t.intern("ab");  // short enough for a std::string's inline buffer
  const std::string_view view = t[0];
  const StringTable moved = std::move(t);
  EXPECT_EQ(view.data(), moved[0].data());
  EXPECT_EQ(moved.find("ab"), 0);
}

TEST(StringTable, ReservedTableHoldsAboutItsBytes) {
  constexpr int kStrings = 100000;
  StringTable t;
  t.reserve(kStrings, kStrings * 6, kStrings);
  for (int i = 0; i < kStrings; ++i) t.intern(std::to_string(100000 + i));  // 6 bytes each
  // Its bytes, a 4-byte offset and under 8/3 index slots of 8 bytes per string (at most
  // 3/4 full, rounded up to a power of two): under 32 bytes, where vector<string> +
  // unordered_map<string, int32_t> take over 100.
  EXPECT_LE(t.memory_bytes(), static_cast<size_t>(kStrings) * 32);
  t.shrink_to_fit();
  EXPECT_EQ(t.find("100000"), 0);
  EXPECT_EQ(t.find("199999"), kStrings - 1);
}

}  // namespace
}  // namespace ridge::tokenizer_detail
