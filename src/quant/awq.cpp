#include "quant/awq.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "quant/gptq_model.h"
#include "quant/quantize.h"

namespace ridge::quant {
namespace {

// Per layer and site: mean |x| per input channel, and the first tokens' rows.
class AwqObserver : public ForwardObserver {
 public:
  struct Site {
    int32_t n_in = 0;
    int64_t count = 0;
    std::vector<double> abs_sum;  // [n_in]
    std::vector<double> sq_sum;   // [n_in]
    std::vector<float> sample;    // [<= sample_tokens][n_in]
  };

  // stride: every stride-th token goes to the sample, so it spans the calibration set.
  AwqObserver(int32_t n_layer, int32_t sample_tokens, int64_t stride)
      : sites_(static_cast<size_t>(n_layer)), sample_tokens_(sample_tokens), stride_(std::max<int64_t>(stride, 1)) {}

  void on_matmul_input(int32_t il, MatmulSite site, const float* x, int32_t n, int32_t n_in) override {
    Site& s = sites_[static_cast<size_t>(il)][static_cast<size_t>(site)];
    if (s.n_in == 0) {
      s.n_in = n_in;
      s.abs_sum.assign(static_cast<size_t>(n_in), 0.0);
      s.sq_sum.assign(static_cast<size_t>(n_in), 0.0);
    }
    for (int32_t t = 0; t < n; ++t) {
      const float* row = x + static_cast<size_t>(t) * n_in;
      for (int32_t j = 0; j < n_in; ++j) {
        s.abs_sum[static_cast<size_t>(j)] += std::fabs(row[j]);
        s.sq_sum[static_cast<size_t>(j)] += static_cast<double>(row[j]) * row[j];
      }
      if ((s.count + t) % stride_ == 0 && static_cast<int64_t>(s.sample.size()) / n_in < sample_tokens_)
        s.sample.insert(s.sample.end(), row, row + n_in);
    }
    s.count += n;
  }
  const Site& at(int32_t il, MatmulSite site) const { return sites_[static_cast<size_t>(il)][static_cast<size_t>(site)]; }

 private:
  std::vector<std::array<Site, 4>> sites_;
  int32_t sample_tokens_;
  int64_t stride_;
};

struct Matrix {
  std::string name;
  DType type;
  std::vector<float>* w;  // [rows][cols]
  int64_t rows, cols;
};

// The importance of the scaled columns: mean x_j^2 / s_j^2 (the inputs are divided by s).
std::vector<float> scaled_importance(const AwqObserver::Site& site, const std::vector<float>& s) {
  std::vector<float> imp(static_cast<size_t>(site.n_in));
  for (size_t j = 0; j < imp.size(); ++j)
    imp[j] = static_cast<float>(site.sq_sum[j] / static_cast<double>(site.count) / (static_cast<double>(s[j]) * s[j]));
  return imp;
}

// sum ||X W^T - X Weff^T||^2 over the group for scales s, with each matrix rounded onto
// its type: weighted by `importance` (the scaled columns'), or to nearest where it is null.
double group_error(const std::vector<Matrix>& group, const std::vector<float>& s, const AwqObserver::Site& site,
                   int64_t tokens, const std::vector<std::vector<float>>& reference, const float* importance) {
  const std::vector<float>& x = site.sample;
  double err = 0;
  for (size_t m = 0; m < group.size(); ++m) {
    const Matrix& g = group[m];
    std::vector<float> scaled(static_cast<size_t>(g.rows * g.cols));
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c)
        scaled[static_cast<size_t>(r * g.cols + c)] = (*g.w)[static_cast<size_t>(r * g.cols + c)] * s[static_cast<size_t>(c)];
    std::vector<uint8_t> q(row_size(g.type, g.cols) * static_cast<size_t>(g.rows));
    if (importance != nullptr)
      quantize_rows_weighted(g.type, scaled.data(), g.rows, g.cols, importance, 1, q.data(), 0);
    else
      quantize_rows_reference(g.type, scaled.data(), g.rows, g.cols, q.data(), 0);
    for (int64_t r = 0; r < g.rows; ++r) {
      float* row = scaled.data() + r * g.cols;
      dequantize_row(g.type, q.data() + static_cast<size_t>(r) * row_size(g.type, g.cols), row, g.cols);
      for (int64_t c = 0; c < g.cols; ++c) row[c] /= s[static_cast<size_t>(c)];
    }
    std::vector<float> y(static_cast<size_t>(tokens * g.rows));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(g.rows),
                static_cast<int>(g.cols), 1.0f, x.data(), static_cast<int>(g.cols), scaled.data(), static_cast<int>(g.cols),
                0.0f, y.data(), static_cast<int>(g.rows));
    for (size_t i = 0; i < y.size(); ++i) {
      const double d = static_cast<double>(y[i]) - reference[m][i];
      err += d * d;
    }
  }
  return err;
}

// Per column, the mean over the group's rows of |w| / (its block's absmax), blocks of 32
// values along the row (AutoAWQ's w_mean for duo scaling, with GGUF's block length).
std::vector<float> weight_column_means(const std::vector<Matrix>& group, int64_t n_in) {
  constexpr int64_t kBlock = 32;
  std::vector<double> sum(static_cast<size_t>(n_in), 0.0);
  int64_t n_rows = 0;
  for (const Matrix& g : group) {
    for (int64_t r = 0; r < g.rows; ++r) {
      const float* row = g.w->data() + r * g.cols;
      for (int64_t b0 = 0; b0 < g.cols; b0 += kBlock) {
        const int64_t b1 = std::min(g.cols, b0 + kBlock);
        float amax = 0;
        for (int64_t c = b0; c < b1; ++c) amax = std::max(amax, std::fabs(row[c]));
        for (int64_t c = b0; c < b1; ++c) sum[static_cast<size_t>(c)] += std::fabs(row[c]) / (amax + 1e-6f);
      }
    }
    n_rows += g.rows;
  }
  std::vector<float> mean(sum.size());
  for (size_t j = 0; j < sum.size(); ++j) mean[j] = static_cast<float>(sum[j] / static_cast<double>(n_rows));
  return mean;
}

// Channels that must share one scale: the attention output's inputs read through one KV
// head (n_rep query heads of d_head channels each), whose V row alone can take 1/s.
struct Tie {
  int64_t n_rep = 1, d_head = 0;
};

// Each channel's value replaced by the mean over the channels tied to it.
void tie_channels(std::vector<float>& v, const Tie& tie) {
  if (tie.n_rep <= 1) return;
  const int64_t group = tie.n_rep * tie.d_head;
  for (int64_t g0 = 0; g0 < static_cast<int64_t>(v.size()); g0 += group)
    for (int64_t d = 0; d < tie.d_head; ++d) {
      double sum = 0;
      for (int64_t h = 0; h < tie.n_rep; ++h) sum += v[static_cast<size_t>(g0 + h * tie.d_head + d)];
      for (int64_t h = 0; h < tie.n_rep; ++h)
        v[static_cast<size_t>(g0 + h * tie.d_head + d)] = static_cast<float>(sum / static_cast<double>(tie.n_rep));
    }
}

// The alpha (and its scales) with the least output error on the sample.
float search_scales(const std::vector<Matrix>& group, const AwqObserver::Site& site, const Tie& tie, int32_t grid,
                    float fixed_alpha, bool weighted_fit, bool duo_scaling, std::vector<float>& best_s,
                    double* err_plain, double* err_best, bool* unscaled) {
  const int64_t tokens = static_cast<int64_t>(site.sample.size()) / site.n_in;
  std::vector<std::vector<float>> reference;
  for (const Matrix& g : group) {
    reference.emplace_back(static_cast<size_t>(tokens * g.rows));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(g.rows),
                static_cast<int>(g.cols), 1.0f, site.sample.data(), static_cast<int>(g.cols), g.w->data(),
                static_cast<int>(g.cols), 0.0f, reference.back().data(), static_cast<int>(g.rows));
  }
  std::vector<float> mean(static_cast<size_t>(site.n_in));
  for (int32_t j = 0; j < site.n_in; ++j)
    mean[static_cast<size_t>(j)] = static_cast<float>(std::max(site.abs_sum[static_cast<size_t>(j)] / static_cast<double>(site.count), 1e-5));
  std::vector<float> w_mean = duo_scaling ? weight_column_means(group, site.n_in) : std::vector<float>{};
  tie_channels(mean, tie);
  tie_channels(w_mean, tie);
  float best_alpha = 0;
  *err_best = INFINITY;
  std::vector<float> s(static_cast<size_t>(site.n_in));
  // With duo scaling, candidate `grid` is s = 1 (plain rounding), which alpha = 0 is not.
  const int32_t n_candidates = fixed_alpha >= 0 ? 1 : grid + (duo_scaling ? 1 : 0);
  for (int32_t k = 0; k < n_candidates; ++k) {
    const float alpha = fixed_alpha >= 0 ? fixed_alpha : static_cast<float>(k) / static_cast<float>(grid);
    const bool plain = duo_scaling && k == grid;
    float lo = INFINITY, hi = 0;
    for (size_t j = 0; j < s.size(); ++j) {
      if (plain)
        s[j] = 1.0f;
      else if (duo_scaling)
        s[j] = std::max(std::pow(mean[j], alpha) / (std::pow(w_mean[j], 1.0f - alpha) + 1e-4f), 1e-4f);
      else
        s[j] = std::pow(mean[j], alpha);
      lo = std::min(lo, s[j]);
      hi = std::max(hi, s[j]);
    }
    const float norm = 1.0f / std::sqrt(lo * hi);
    for (float& v : s) v *= norm;
    const std::vector<float> importance = weighted_fit ? scaled_importance(site, s) : std::vector<float>{};
    const double err = group_error(group, s, site, tokens, reference, weighted_fit ? importance.data() : nullptr);
    if (duo_scaling ? plain : k == 0) *err_plain = err;
    if (err < *err_best) {
      *err_best = err;
      best_alpha = plain ? 0.0f : alpha;
      *unscaled = plain || (!duo_scaling && alpha == 0.0f);
      best_s = s;
    }
  }
  return best_alpha;
}

}  // namespace

AwqResult awq_model(Model& model, const gguf::File& file, const QuantTarget& target, const CalibrationSet& set,
                    const AwqOptions& o, const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config();
  auto observer = std::make_unique<AwqObserver>(c.n_layer, o.sample_tokens, set.n_tokens() / std::max(o.sample_tokens, 1));
  run_whole(model, set, *observer);
  const RecipeState state = recipe_state(file);
  AwqResult result;
  auto f32 = [&](const std::string& name) -> std::vector<float>& {
    auto it = result.tensors.find(name);
    if (it != result.tensors.end()) return it->second;
    const gguf::TensorInfo* t = file.find_tensor(name);
    if (t == nullptr) throw Error(str_cat("awq: ", name, " is missing"));
    return result.tensors[name] = tensor_as_f32(*t);
  };
  auto matrix = [&](int32_t il, const char* kind) {
    const std::string name = str_cat("blk.", il, ".", kind, ".weight");
    std::vector<float>& w = f32(name);
    const gguf::TensorInfo& t = *file.find_tensor(name);
    const TensorChoice choice = choose_tensor_type(target, state, t);
    return Matrix{name, choice.quantized ? choice.type : DType::F32, &w, t.n_elements() / t.ne[0], t.ne[0]};
  };
  for (int32_t il = 0; il < c.n_layer; ++il) {
    struct Group {
      MatmulSite site;
      std::vector<const char*> matrices;
    };
    std::vector<Group> groups = {{MatmulSite::kQkv, {"attn_q", "attn_k", "attn_v"}},
                                 {MatmulSite::kGateUp, {"ffn_gate", "ffn_up"}},
                                 {MatmulSite::kDown, {"ffn_down"}}};
    // The attention output's input channels take their 1/s from V's rows (and bias); with
    // GQA the n_rep heads that read one KV head share their scales (AutoAWQ skips GQA).
    if (file.find_tensor(str_cat("blk.", il, ".attn_v.weight")) != nullptr)
      groups.push_back({MatmulSite::kAttnOutput, {"attn_output"}});
    for (const Group& g : groups) {
      const AwqObserver::Site& site = observer->at(il, g.site);
      if (site.count == 0) throw Error(str_cat("awq: no inputs observed at layer ", il, " ", matmul_site_name(g.site)));
      std::vector<Matrix> mats;
      for (const char* kind : g.matrices) mats.push_back(matrix(il, kind));
      std::vector<float> s;
      double err_plain = 0, err_best = 0;
      bool unscaled = false;
      Tie tie;
      if (g.site == MatmulSite::kAttnOutput) tie = {c.n_head / c.n_kv_head, site.n_in / c.n_head};
      const float alpha = search_scales(mats, site, tie, o.grid, o.fixed_alpha, o.weighted_fit, o.duo_scaling, s,
                                        &err_plain, &err_best, &unscaled);
      if (o.weighted_fit) {
        const std::vector<float> importance = scaled_importance(site, s);
        for (const Matrix& m : mats) result.importance[m.name] = importance;
      }

      // Fold: the group's columns times s, the operation before it divided by s.
      for (Matrix& m : mats)
        for (int64_t r = 0; r < m.rows; ++r)
          for (int64_t col = 0; col < m.cols; ++col) (*m.w)[static_cast<size_t>(r * m.cols + col)] *= s[static_cast<size_t>(col)];
      if (g.site == MatmulSite::kQkv || g.site == MatmulSite::kGateUp) {
        std::vector<float>& norm = f32(str_cat("blk.", il, g.site == MatmulSite::kQkv ? ".attn_norm" : ".ffn_norm", ".weight"));
        for (size_t j = 0; j < norm.size(); ++j) norm[j] /= s[j];
      } else if (g.site == MatmulSite::kDown) {  // rows of the matrix that produces the input
        const Matrix up = matrix(il, "ffn_up");
        for (int64_t r = 0; r < up.rows; ++r)
          for (int64_t col = 0; col < up.cols; ++col) (*up.w)[static_cast<size_t>(r * up.cols + col)] /= s[static_cast<size_t>(r)];
      } else {  // V row r feeds input channel r % d_head of each of its KV head's n_rep query heads
        const Matrix v = matrix(il, "attn_v");
        const std::string bias_name = str_cat("blk.", il, ".attn_v.bias");
        std::vector<float>* bias = file.find_tensor(bias_name) != nullptr ? &f32(bias_name) : nullptr;
        for (int64_t r = 0; r < v.rows; ++r) {
          const float sr = s[static_cast<size_t>((r / tie.d_head) * tie.n_rep * tie.d_head + r % tie.d_head)];
          for (int64_t col = 0; col < v.cols; ++col) (*v.w)[static_cast<size_t>(r * v.cols + col)] /= sr;
          if (bias != nullptr) (*bias)[static_cast<size_t>(r)] /= sr;
        }
      }
      char line[256];
      if (unscaled)
        std::snprintf(line, sizeof line, "awq: blk.%d %-11s s = 1     : sample output error %.4g (kept unscaled)\n", il,
                      matmul_site_name(g.site), err_best);
      else
        std::snprintf(line, sizeof line, "awq: blk.%d %-11s alpha %.2f: sample output error %.4g -> %.4g\n", il,
                      matmul_site_name(g.site), alpha, err_plain, err_best);
      progress(line);
    }
  }
  return result;
}

}  // namespace ridge::quant
