// Perplexity and KL divergence the way llama.cpp's llama-perplexity computes them, so its
// scripts and its base-logits files work with ridge's: the text's tokens cut into
// windows of n_ctx, BOS in place of each window's first token where the vocabulary adds
// one, only the second half of each window scored (every scored token has at least
// n_ctx / 2 tokens of context).
//
//   const PerplexityWindows w = plan_windows(tokens.size(), 512, -1);   // throws if too short
//   NllStats s;  s.add(token_nll(logits_row, next_token));  ...  s.perplexity(), s.perplexity_error()
//   LogitsFileWriter base("base.kld", w.n_ctx, n_vocab, w.n_chunk, tokens);
//   base.write_row(quantized);   // encode_log_probs(logits_row, quantized) per scored token
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "core/part_file.h"

namespace ridge::quant {

struct PerplexityWindows {
  int32_t n_ctx = 0;    // tokens per window
  int32_t n_chunk = 0;  // windows: tokens [i * n_ctx, (i + 1) * n_ctx)
  int32_t first = 0;    // first scored position of a window, n_ctx / 2
  int32_t scored_per_window() const { return n_ctx - 1 - first; }  // positions first .. n_ctx - 2
};

// n_chunk = min(n_tokens / n_ctx, max_chunks) (max_chunks < 0: all). Throws ridge::Error
// when the text has fewer than 2 * n_ctx tokens, or n_ctx < 4.
PerplexityWindows plan_windows(size_t n_tokens, int32_t n_ctx, int32_t max_chunks);
// The windows a --kl-divergence-base file was written for (it holds exactly their tokens,
// one window's worth when written with --chunks 1): n_chunk of them, at most max_chunks.
PerplexityWindows base_windows(int32_t n_ctx, int32_t n_chunk, int32_t max_chunks);

// -log p(token) under softmax(logits), in double.
double token_nll(std::span<const float> logits, int32_t token);

// Running mean of negative log-likelihoods: perplexity exp(mean) and its uncertainty
// exp(mean) * sqrt(var / (count - 1)), as llama-perplexity prints them.
struct NllStats {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  void add(double nll) {
    sum += nll;
    sum2 += nll * nll;
    ++count;
  }
  void add(const NllStats& o) {
    sum += o.sum;
    sum2 += o.sum2;
    count += o.count;
  }
  double perplexity() const;
  double perplexity_error() const;  // 0 with fewer than 2 values
};

// llama.cpp's base-logits row: log-probabilities quantized to uint16 between
// min_log_prob (at most 16 below the top) and 0, stored as two floats (scale,
// min_log_prob) in the first 4 entries, then one entry per token, padded to an even count.
size_t log_prob_row_entries(int32_t n_vocab);  // 2 * ((n_vocab + 1) / 2) + 4
// Writes the row for these logits ([n_vocab]); returns -log p(token).
double encode_log_probs(std::span<const float> logits, int32_t token, std::span<uint16_t> row);
// The log-probability a row stores for a token.
float decoded_log_prob(std::span<const uint16_t> row, int32_t token);

// One token's comparison of a model (logits) with the base (a stored row).
struct TokenKld {
  double kld = 0;         // sum over tokens with base log-prob > -16 of p_base (log p_base - log p)
  double nll = 0;         // -log p(token), this model
  double nll_base = 0;    // -log p(token), base
  bool same_top = false;  // both put their highest probability on the same token
};
TokenKld compare_with_base(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token);

// The statistics llama-perplexity --kl-divergence prints.
class KldStats {
 public:
  void add(const TokenKld& t);
  int64_t count() const { return static_cast<int64_t>(kld_.size()); }

  struct MeanError {
    double mean = 0, error = 0;
  };
  MeanError ppl() const;             // exp(mean nll), error as perplexity_error
  MeanError ppl_base() const;
  double log_ppl_correlation() const;
  MeanError log_ppl_ratio() const;   // mean ln(PPL / PPL_base), with the covariance
  MeanError kld() const;
  double kld_percentile(double fraction) const;  // linear interpolation of the sorted values
  MeanError delta_p() const;         // p(token) - p_base(token)
  double delta_p_percentile(double fraction) const;
  MeanError delta_p_rms() const;
  MeanError same_top() const;        // fraction of tokens with the same top token

 private:
  NllStats nll_, nll_base_;
  double sum_nll_nll_base_ = 0;
  double kld_sum_ = 0, kld_sum2_ = 0;
  double dp_sum_ = 0, dp_sum2_ = 0, dp_sum4_ = 0;
  int64_t same_top_ = 0;
  std::vector<double> kld_, delta_p_;
  mutable bool sorted_ = true;
  mutable std::vector<double> kld_sorted_, delta_p_sorted_;
};

// The base-logits file (llama-perplexity --kl-divergence-base): "_logits_", int32 n_ctx,
// int32 n_vocab, int32 n_chunk, the n_chunk * n_ctx evaluated tokens (int32), then for
// each window its scored positions' rows in order. Rows are written and read by (window,
// index) at their place in the file, so windows computed side by side need no buffering.
uint64_t log_prob_row_offset(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, int32_t window, int32_t index);

// Writes to a PartFile beside PATH and renames it to PATH at close(): a run that fails
// leaves no partial file (the destructor removes it unless close() succeeded).
class LogitsFileWriter {
 public:
  // Throws ridge::Error naming the path when it cannot be written.
  LogitsFileWriter(const std::string& path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                   std::span<const int32_t> tokens);
  LogitsFileWriter(const LogitsFileWriter&) = delete;
  LogitsFileWriter& operator=(const LogitsFileWriter&) = delete;
  // index: the scored position minus n_ctx / 2.
  void write_row(int32_t window, int32_t index, std::span<const uint16_t> row);
  void close();  // flushes and renames; throws on a write error

 private:
  std::string path_;
  PartFile part_;  // declared before out_, so out_ is closed before the file is removed
  std::ofstream out_;
  int32_t n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0;
};

class LogitsFileReader {
 public:
  // Reads and checks the header and tokens; throws ridge::Error naming the path and what is
  // wrong (not a logits file, truncated, impossible sizes).
  explicit LogitsFileReader(const std::string& path);
  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_chunk() const { return n_chunk_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // [n_chunk * n_ctx]
  // The row of a window's scored position (index: position - n_ctx / 2).
  void read_row(int32_t window, int32_t index, std::span<uint16_t> row);

 private:
  std::string path_;
  std::ifstream in_;
  int32_t n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0;
  std::vector<int32_t> tokens_;
};

}  // namespace ridge::quant
