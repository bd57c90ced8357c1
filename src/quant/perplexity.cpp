#include "quant/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ridge::quant {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr float kLogProbFloor = 16.0f;  // log-probs more than this below the top are not stored

// max and log(sum exp(l - max)) of a row; the sum in double, as llama-perplexity does.
struct LogSumExp {
  float max = 0;
  float log_sum = 0;
  int32_t argmax = 0;
};

LogSumExp log_sum_exp(std::span<const float> logits) {
  LogSumExp r;
  r.max = logits[0];
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > r.max) {
      r.max = logits[i];
      r.argmax = static_cast<int32_t>(i);
    }
  }
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - r.max);
  r.log_sum = static_cast<float>(std::log(sum));
  return r;
}

void check_token(std::span<const float> logits, int32_t token) {
  if (logits.empty() || token < 0 || static_cast<size_t>(token) >= logits.size())
    throw Error(str_cat("perplexity: token ", token, " outside a row of ", logits.size(), " logits"));
}

float row_float(std::span<const uint16_t> row, int index) {
  float f;
  std::memcpy(&f, row.data() + 2 * index, sizeof f);
  return f;
}

struct MeanErr {
  double mean, error;
};

// llama-perplexity's mean and uncertainty of a sum of values and of their squares.
MeanErr mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0, 0};
  const double mean = sum / static_cast<double>(count);
  const double var = sum2 / static_cast<double>(count) - mean * mean;
  return {mean, var > 0 && count > 10 ? std::sqrt(var / static_cast<double>(count - 1)) : 0.0};
}

double covariance(double sum_a, double sum_b, double sum_ab, int64_t count) {
  if (count < 10) return 0;
  const double n = static_cast<double>(count);
  return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(p);
  const double t = p - static_cast<double>(i);
  return (1 - t) * sorted[i] + t * sorted[std::min(i + 1, sorted.size() - 1)];
}

}  // namespace

PerplexityWindows plan_windows(size_t n_tokens, int32_t n_ctx, int32_t max_chunks) {
  if (n_ctx < 4) throw Error(str_cat("perplexity: the context must be at least 4 tokens, got ", n_ctx));
  if (n_tokens < 2 * static_cast<size_t>(n_ctx))
    throw Error(str_cat("perplexity: the text tokenizes to ", n_tokens, " tokens; a context of ", n_ctx, " needs at least ",
                        2 * static_cast<int64_t>(n_ctx)));
  PerplexityWindows w;
  w.n_ctx = n_ctx;
  w.n_chunk = static_cast<int32_t>(n_tokens / static_cast<size_t>(n_ctx));
  if (max_chunks >= 0) w.n_chunk = std::min(w.n_chunk, max_chunks);
  if (w.n_chunk < 1) throw Error("perplexity: --chunks must be at least 1");
  w.first = n_ctx / 2;
  return w;
}

PerplexityWindows base_windows(int32_t n_ctx, int32_t n_chunk, int32_t max_chunks) {
  if (n_ctx < 4) throw Error(str_cat("perplexity: the context must be at least 4 tokens, got ", n_ctx));
  if (n_chunk < 1) throw Error("perplexity: the base file holds no windows");
  PerplexityWindows w;
  w.n_ctx = n_ctx;
  w.n_chunk = max_chunks >= 0 ? std::min(n_chunk, max_chunks) : n_chunk;
  if (w.n_chunk < 1) throw Error("perplexity: --chunks must be at least 1");
  w.first = n_ctx / 2;
  return w;
}

double token_nll(std::span<const float> logits, int32_t token) {
  check_token(logits, token);
  const LogSumExp l = log_sum_exp(logits);
  return static_cast<double>(l.max) + l.log_sum - logits[static_cast<size_t>(token)];
}

double NllStats::perplexity() const { return count > 0 ? std::exp(sum / static_cast<double>(count)) : 0.0; }

double NllStats::perplexity_error() const {
  if (count < 2) return 0;
  const double mean = sum / static_cast<double>(count);
  const double var = sum2 / static_cast<double>(count) - mean * mean;
  return var > 0 ? std::sqrt(var / static_cast<double>(count - 1)) * perplexity() : 0.0;
}

size_t log_prob_row_entries(int32_t n_vocab) { return 2 * ((static_cast<size_t>(n_vocab) + 1) / 2) + 4; }

double encode_log_probs(std::span<const float> logits, int32_t token, std::span<uint16_t> row) {
  check_token(logits, token);
  if (row.size() != log_prob_row_entries(static_cast<int32_t>(logits.size())))
    throw Error(str_cat("perplexity: a log-prob row for ", logits.size(), " tokens has ",
                        log_prob_row_entries(static_cast<int32_t>(logits.size())), " entries, not ", row.size()));
  const LogSumExp l = log_sum_exp(logits);
  float lowest = *std::min_element(logits.begin(), logits.end());
  lowest = std::max(lowest, l.max - kLogProbFloor);
  const float min_log_prob = lowest - l.max - l.log_sum;
  const float scale = (l.max - lowest) / 65535.0f;
  std::memcpy(row.data(), &scale, sizeof scale);
  std::memcpy(row.data() + 2, &min_log_prob, sizeof min_log_prob);
  std::fill(row.begin() + 4, row.end(), uint16_t{0});
  if (scale != 0.0f) {
    const float inverse = 1.0f / scale;
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] > lowest) row[4 + i] = static_cast<uint16_t>(std::lrintf(inverse * (logits[i] - lowest)));
  }
  return static_cast<double>(l.max + l.log_sum - logits[static_cast<size_t>(token)]);
}

float decoded_log_prob(std::span<const uint16_t> row, int32_t token) {
  return row_float(row, 0) * row[4 + static_cast<size_t>(token)] + row_float(row, 1);
}

TokenKld compare_with_base(std::span<const float> logits, std::span<const uint16_t> base_row, int32_t token) {
  check_token(logits, token);
  if (base_row.size() != log_prob_row_entries(static_cast<int32_t>(logits.size())))
    throw Error(str_cat("kl-divergence: a base row has ", base_row.size(), " entries; ", logits.size(),
                        " logits need ", log_prob_row_entries(static_cast<int32_t>(logits.size()))));
  const LogSumExp l = log_sum_exp(logits);
  const float log_z = l.max + l.log_sum;
  const float scale = row_float(base_row, 0), min_log_prob = row_float(base_row, 1);
  TokenKld t;
  t.nll = static_cast<double>(log_z - logits[static_cast<size_t>(token)]);
  t.nll_base = -static_cast<double>(scale * base_row[4 + static_cast<size_t>(token)] + min_log_prob);
  double sum = 0;
  int32_t base_argmax = 0;
  float base_max = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float log_p_base = scale * base_row[4 + i] + min_log_prob;
    if (i == 0 || log_p_base > base_max) {
      base_max = log_p_base;
      base_argmax = static_cast<int32_t>(i);
    }
    if (log_p_base > -kLogProbFloor) sum += std::exp(log_p_base) * (log_p_base - logits[i] + log_z);
  }
  t.kld = sum;
  t.same_top = base_argmax == l.argmax;
  return t;
}

void KldStats::add(const TokenKld& t) {
  nll_.add(t.nll);
  nll_base_.add(t.nll_base);
  sum_nll_nll_base_ += t.nll * t.nll_base;
  kld_sum_ += t.kld;
  kld_sum2_ += t.kld * t.kld;
  const double dp = std::exp(-t.nll) - std::exp(-t.nll_base);
  dp_sum_ += dp;
  dp_sum2_ += dp * dp;
  dp_sum4_ += dp * dp * dp * dp;
  same_top_ += t.same_top ? 1 : 0;
  kld_.push_back(t.kld);
  delta_p_.push_back(dp);
  sorted_ = false;
}

KldStats::MeanError KldStats::ppl() const {
  const MeanErr m = mean_and_uncertainty(nll_.sum, nll_.sum2, nll_.count);
  return {std::exp(m.mean), std::exp(m.mean) * m.error};
}

KldStats::MeanError KldStats::ppl_base() const {
  const MeanErr m = mean_and_uncertainty(nll_base_.sum, nll_base_.sum2, nll_base_.count);
  return {std::exp(m.mean), std::exp(m.mean) * m.error};
}

double KldStats::log_ppl_correlation() const {
  const MeanErr a = mean_and_uncertainty(nll_.sum, nll_.sum2, nll_.count);
  const MeanErr b = mean_and_uncertainty(nll_base_.sum, nll_base_.sum2, nll_base_.count);
  const double cov = covariance(nll_.sum, nll_base_.sum, sum_nll_nll_base_, nll_.count);
  return a.error > 0 && b.error > 0 ? cov / (a.error * b.error) : 0.0;
}

KldStats::MeanError KldStats::log_ppl_ratio() const {
  const MeanErr a = mean_and_uncertainty(nll_.sum, nll_.sum2, nll_.count);
  const MeanErr b = mean_and_uncertainty(nll_base_.sum, nll_base_.sum2, nll_base_.count);
  const double cov = covariance(nll_.sum, nll_base_.sum, sum_nll_nll_base_, nll_.count);
  return {a.mean - b.mean, std::sqrt(std::max(0.0, a.error * a.error + b.error * b.error - 2 * cov))};
}

KldStats::MeanError KldStats::kld() const {
  const MeanErr m = mean_and_uncertainty(kld_sum_, kld_sum2_, count());
  return {m.mean, m.error};
}

KldStats::MeanError KldStats::delta_p() const {
  const MeanErr m = mean_and_uncertainty(dp_sum_, dp_sum2_, count());
  return {m.mean, m.error};
}

KldStats::MeanError KldStats::delta_p_rms() const {
  const MeanErr mse = mean_and_uncertainty(dp_sum2_, dp_sum4_, count());
  const double rms = std::sqrt(mse.mean);
  return {rms, rms > 0 ? 0.5 / rms * mse.error : 0.0};
}

KldStats::MeanError KldStats::same_top() const {
  if (count() < 2) return {count() == 1 ? static_cast<double>(same_top_) : 0.0, 0.0};
  const double p = static_cast<double>(same_top_) / static_cast<double>(count());
  return {p, std::sqrt(p * (1 - p) / static_cast<double>(count() - 1))};
}

double KldStats::kld_percentile(double fraction) const {
  if (!sorted_) {
    kld_sorted_ = kld_;
    delta_p_sorted_ = delta_p_;
    std::sort(kld_sorted_.begin(), kld_sorted_.end());
    std::sort(delta_p_sorted_.begin(), delta_p_sorted_.end());
    sorted_ = true;
  }
  return percentile(kld_sorted_, fraction);
}

double KldStats::delta_p_percentile(double fraction) const {
  kld_percentile(0);  // sorts both
  return percentile(delta_p_sorted_, fraction);
}

uint64_t log_prob_row_offset(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, int32_t window, int32_t index) {
  const uint64_t per_window = static_cast<uint64_t>(n_ctx - 1 - n_ctx / 2);
  return 20 + static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(n_chunk) * 4 +
         (static_cast<uint64_t>(window) * per_window + static_cast<uint64_t>(index)) * log_prob_row_entries(n_vocab) * 2;
}

LogitsFileWriter::LogitsFileWriter(const std::string& path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                                   std::span<const int32_t> tokens)
    : path_(path),
      part_(path),
      out_(part_.path(), std::ios::binary | std::ios::trunc),
      n_ctx_(n_ctx),
      n_vocab_(n_vocab),
      n_chunk_(n_chunk) {
  if (!out_) throw Error(str_cat(part_.path(), ": cannot open for writing"));
  if (tokens.size() != static_cast<size_t>(n_chunk) * static_cast<size_t>(n_ctx))
    throw Error(str_cat(path, ": ", tokens.size(), " tokens for ", n_chunk, " windows of ", n_ctx));
  out_.write(kMagic, sizeof kMagic);
  for (int32_t v : {n_ctx, n_vocab, n_chunk}) out_.write(reinterpret_cast<const char*>(&v), sizeof v);
  out_.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(int32_t)));
  if (!out_) throw Error(str_cat(path, ": write failed"));
}

void LogitsFileWriter::write_row(int32_t window, int32_t index, std::span<const uint16_t> row) {
  if (window < 0 || window >= n_chunk_ || index < 0 || index >= n_ctx_ - 1 - n_ctx_ / 2 ||
      row.size() != log_prob_row_entries(n_vocab_))
    throw Error(str_cat(path_, ": no row ", index, " of window ", window, " with ", row.size(), " entries"));
  out_.seekp(static_cast<std::streamoff>(log_prob_row_offset(n_ctx_, n_vocab_, n_chunk_, window, index)));
  out_.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(uint16_t)));
  if (!out_) throw Error(str_cat(path_, ": write failed (disk full?)"));
}

void LogitsFileWriter::close() {
  out_.flush();
  if (!out_) throw Error(str_cat(part_.path(), ": write failed (disk full?)"));
  out_.close();
  part_.commit();
}

LogitsFileReader::LogitsFileReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) throw Error(str_cat(path, ": cannot open"));
  char magic[sizeof kMagic];
  in_.read(magic, sizeof magic);
  if (!in_ || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw Error(str_cat(path, ": not a base-logits file (no \"_logits_\" at offset 0)"));
  int32_t header[3];
  in_.read(reinterpret_cast<char*>(header), sizeof header);
  if (!in_) throw Error(str_cat(path, ": truncated in the header at offset 8"));
  n_ctx_ = header[0];
  n_vocab_ = header[1];
  n_chunk_ = header[2];
  if (n_ctx_ < 4 || n_ctx_ > (1 << 24) || n_vocab_ < 2 || n_vocab_ > (1 << 24) || n_chunk_ < 1 || n_chunk_ > (1 << 24))
    throw Error(str_cat(path, ": impossible header (n_ctx ", n_ctx_, ", n_vocab ", n_vocab_, ", n_chunk ", n_chunk_,
                        ")"));
  // The rows that must follow: checked against the file size before allocating.
  in_.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in_.tellg());
  const uint64_t n_tokens = static_cast<uint64_t>(n_ctx_) * static_cast<uint64_t>(n_chunk_);
  const uint64_t rows = static_cast<uint64_t>(n_chunk_) * static_cast<uint64_t>(n_ctx_ - 1 - n_ctx_ / 2);
  const uint64_t want = 20 + n_tokens * 4 + rows * log_prob_row_entries(n_vocab_) * 2;
  if (size < want)
    throw Error(str_cat(path, ": truncated: ", size, " bytes, the header promises ", want, " (", n_chunk_,
                        " windows of ", n_ctx_, " tokens over ", n_vocab_, " tokens)"));
  in_.seekg(20);
  tokens_.resize(n_tokens);
  in_.read(reinterpret_cast<char*>(tokens_.data()), static_cast<std::streamsize>(n_tokens * 4));
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] < 0 || tokens_[i] >= n_vocab_)
      throw Error(str_cat(path, ": token ", i, " is ", tokens_[i], ", outside the vocabulary of ", n_vocab_));
}

void LogitsFileReader::read_row(int32_t window, int32_t index, std::span<uint16_t> row) {
  if (row.size() != log_prob_row_entries(n_vocab_))
    throw Error(str_cat(path_, ": a row holds ", log_prob_row_entries(n_vocab_), " entries, not ", row.size()));
  if (window < 0 || window >= n_chunk_ || index < 0 || index >= n_ctx_ - 1 - n_ctx_ / 2)
    throw Error(str_cat(path_, ": no row ", index, " of window ", window));
  const auto at = static_cast<int64_t>(log_prob_row_offset(n_ctx_, n_vocab_, n_chunk_, window, index));
  in_.seekg(at);
  in_.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(uint16_t)));
  if (!in_) throw Error(str_cat(path_, ": truncated in the row at offset ", at));
}

}  // namespace ridge::quant
