// n-gram prompt lookup: which earlier occurrence is found and what it proposes.
#include "engine/ngram.h"

#include <gtest/gtest.h>

#include <vector>

namespace ridge {
namespace {

std::vector<int32_t> propose(const std::vector<int32_t>& tokens, int32_t n_max, NgramOptions o = {},
                             int32_t* matched = nullptr) {
  std::vector<int32_t> out = {99};  // cleared by the call
  const int32_t m = ngram_propose(tokens, o, n_max, out);
  if (matched != nullptr) *matched = m;
  return out;
}

TEST(Ngram, ProposesWhatFollowedTheLongestMatchingSuffix) {
  // Suffix "3 4" occurs at 2..3 (followed by 5 6 7) and "4" alone at 8 (followed by 9):
  // the longer match wins.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 0, 4, 9, 8, 3, 4};
  int32_t matched = 0;
  EXPECT_EQ(propose(t, 3, {.min_ngram = 1, .max_ngram = 8}, &matched), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(matched, 2);
  EXPECT_EQ(propose(t, 10), (std::vector<int32_t>{5, 6, 7, 0, 4, 9, 8, 3, 4}));  // up to the end
}

TEST(Ngram, TiesGoToTheMostRecentOccurrence) {
  const std::vector<int32_t> t = {7, 8, 1, 7, 8, 2, 7, 8};
  EXPECT_EQ(propose(t, 2), (std::vector<int32_t>{2, 7}));
}

TEST(Ngram, LongerMatchesBeatRecentOnesUpToMaxNgram) {
  // "1 2 3" at the start; "2 3" more recently. With max_ngram 2 both are length 2 and the
  // recent one wins; with 3 the older, longer one does.
  const std::vector<int32_t> t = {1, 2, 3, 10, 0, 2, 3, 20, 1, 2, 3};
  EXPECT_EQ(propose(t, 1, {.min_ngram = 2, .max_ngram = 2}), (std::vector<int32_t>{20}));
  EXPECT_EQ(propose(t, 1, {.min_ngram = 2, .max_ngram = 3}), (std::vector<int32_t>{10}));
}

TEST(Ngram, NothingBelowMinNgramOrWithoutHistory) {
  int32_t matched = -1;
  EXPECT_TRUE(propose({5, 6, 1, 2, 6}, 4, {.min_ngram = 2, .max_ngram = 8}, &matched).empty());
  EXPECT_EQ(matched, 0);
  EXPECT_EQ(propose({5, 6, 1, 2, 6}, 4, {.min_ngram = 1, .max_ngram = 8}), (std::vector<int32_t>{1, 2, 6}));
  EXPECT_TRUE(propose({5}, 4).empty());
  EXPECT_TRUE(propose({}, 4).empty());
  EXPECT_TRUE(propose({1, 2, 1, 2}, 0).empty());
}

TEST(Ngram, PeriodicTextProposesItsContinuation) {
  // "a b a b a b": the suffix "b a b" last occurred ending at 3; what followed continues
  // the period even into the suffix itself.
  const std::vector<int32_t> t = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(propose(t, 4), (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace ridge
