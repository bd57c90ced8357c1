// The perplexity and KL-divergence arithmetic without a model: windows, the uint16 log-prob
// rows of llama.cpp's base file, the statistics, and the file round trip.
#include "quant/perplexity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "core/error.h"

namespace ridge::quant {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, float spread = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = x[0];
  for (float v : x) m = std::max<double>(m, v);
  double z = 0;
  for (float v : x) z += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(z));
  return out;
}

TEST(Perplexity, WindowsAreLlamaPerplexitys) {
  const PerplexityWindows w = plan_windows(10000, 512, -1);
  EXPECT_EQ(w.n_chunk, 19);
  EXPECT_EQ(w.first, 256);
  EXPECT_EQ(w.scored_per_window(), 255);
  EXPECT_EQ(plan_windows(10000, 512, 4).n_chunk, 4);
  EXPECT_THROW(plan_windows(1000, 512, -1), Error);  // fewer than 2 * n_ctx tokens
  EXPECT_THROW(plan_windows(1000, 2, -1), Error);
}

TEST(Perplexity, NllAndItsStatistics) {
  const std::vector<float> logits = random_logits(300, 1);
  const std::vector<double> lp = log_softmax(logits);
  EXPECT_NEAR(token_nll(logits, 17), -lp[17], 1e-5);
  EXPECT_THROW(token_nll(logits, 300), Error);
  NllStats s;
  for (double v : {1.0, 2.0, 3.0, 4.0}) s.add(v);
  EXPECT_NEAR(s.perplexity(), std::exp(2.5), 1e-12);
  // var = 1.25 (population), / (count - 1) = 5/12
  EXPECT_NEAR(s.perplexity_error(), std::exp(2.5) * std::sqrt(1.25 / 3), 1e-12);
}

TEST(Perplexity, LogProbRowsHoldTheTopSixteenNatsToHalfAStep) {
  for (size_t n_vocab : {7u, 64u, 1001u}) {
    const std::vector<float> logits = random_logits(n_vocab, static_cast<uint32_t>(n_vocab), 6.0f);
    const std::vector<double> lp = log_softmax(logits);
    std::vector<uint16_t> row(log_prob_row_entries(static_cast<int32_t>(n_vocab)));
    EXPECT_EQ(row.size() % 2, 0u);
    const double nll = encode_log_probs(logits, 3, row);
    EXPECT_NEAR(nll, -lp[3], 1e-5);
    float scale;
    std::memcpy(&scale, row.data(), sizeof scale);
    const double top = *std::max_element(lp.begin(), lp.end());
    for (size_t i = 0; i < n_vocab; ++i) {
      const double want = std::max(lp[i], top - 16.0);
      EXPECT_NEAR(decoded_log_prob(row, static_cast<int32_t>(i)), want, 0.5 * scale + 2e-5) << n_vocab << " " << i;
    }
    // Against itself: no divergence, same top token, same NLL (of a token above the floor).
    const auto top_token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const TokenKld t = compare_with_base(logits, row, top_token);
    EXPECT_NEAR(t.kld, 0.0, 1e-4);
    EXPECT_TRUE(t.same_top);
    EXPECT_NEAR(t.nll, t.nll_base, 1e-3);
  }
}

TEST(Perplexity, KlDivergenceOfAShiftedDistribution) {
  const std::vector<float> base = random_logits(50, 9, 2.0f);
  std::vector<float> other = base;
  const auto top = std::max_element(base.begin(), base.end()) - base.begin();
  other[static_cast<size_t>(top)] -= 3.0f;  // the base's favourite loses mass
  std::vector<uint16_t> row(log_prob_row_entries(50));
  encode_log_probs(base, 5, row);
  const std::vector<double> p = log_softmax(base), q = log_softmax(other);
  double want = 0;
  for (size_t i = 0; i < 50; ++i) want += std::exp(p[i]) * (p[i] - q[i]);
  const TokenKld t = compare_with_base(other, row, 5);
  EXPECT_NEAR(t.kld, want, 1e-3);
  EXPECT_GT(t.kld, 0.01);
  EXPECT_NEAR(t.nll, -q[5], 1e-4);
  EXPECT_NEAR(t.nll_base, -p[5], 1e-3);

  KldStats s;
  for (int i = 0; i < 200; ++i) s.add(TokenKld{0.01 * (i % 10), 1.0 + 0.001 * i, 1.0, i % 4 != 0});
  EXPECT_NEAR(s.kld().mean, 0.045, 1e-12);
  EXPECT_NEAR(s.same_top().mean, 0.75, 1e-12);
  EXPECT_NEAR(s.kld_percentile(1.0), 0.09, 1e-12);
  EXPECT_NEAR(s.kld_percentile(0.0), 0.0, 1e-12);
  EXPECT_NEAR(s.kld_percentile(0.5), 0.045, 1e-12);  // between the 100th and 101st values
  EXPECT_GT(s.log_ppl_ratio().mean, 0.0);
}

TEST(Perplexity, BaseFileRoundTripsAndAFailedWriteLeavesNoFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "ridge-ppl-test.kld").string();
  std::filesystem::remove(path);
  const std::vector<int32_t> tokens(2 * 8, 3);
  std::vector<uint16_t> row(log_prob_row_entries(5));
  {
    LogitsFileWriter w(path, 8, 5, 2, tokens);
    w.write_row(0, 0, row);
  }  // not closed: abandoned
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
  {
    LogitsFileWriter w(path, 8, 5, 2, tokens);
    for (int32_t win = 1; win >= 0; --win) {  // any order
      for (int32_t i = 0; i < 3; ++i) {
        row[4] = static_cast<uint16_t>(100 * win + i);
        w.write_row(win, i, row);
      }
    }
    EXPECT_THROW(w.write_row(2, 0, row), Error);
    w.close();
  }
  LogitsFileReader r(path);
  EXPECT_EQ(r.n_ctx(), 8);
  EXPECT_EQ(r.n_vocab(), 5);
  EXPECT_EQ(r.n_chunk(), 2);
  EXPECT_EQ(r.tokens(), tokens);
  r.read_row(1, 2, row);
  EXPECT_EQ(row[4], 102);
  r.read_row(0, 1, row);
  EXPECT_EQ(row[4], 1);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ridge::quant
