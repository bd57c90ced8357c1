#include "quant/gptq.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/quant.h"
#include "core/quant_weighted.h"
#include "core/thread_pool.h"
#include "quant/block_grid.h"

namespace ridge::quant {

Hessian::Hessian(int64_t n) : n_(n), h_(static_cast<size_t>(n * n), 0.0f) {
  if (n <= 0) throw Error(str_cat("gptq: Hessian of ", n, " columns"));
}

void Hessian::add(const float* x, int64_t n_rows) {
  if (n_rows <= 0) return;
  // H (upper) += X^T X: X is [n_rows][n] row-major, i.e. X^T is n x n_rows column-major.
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(n_), static_cast<int>(n_rows), 1.0f, x,
              static_cast<int>(n_), 1.0f, h_.data(), static_cast<int>(n_));
  samples_ += n_rows;
}

namespace {

// The upper Cholesky factor U of H^-1 (H^-1 = U^T U), H dampened; row-major [n][n].
std::vector<double> inverse_cholesky_upper(std::vector<double> h, int64_t n, double damp) {
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h[static_cast<size_t>(i * n + i)];
  mean_diag /= static_cast<double>(n);
  for (int attempt = 0; attempt < 3; ++attempt, damp *= 10) {
    std::vector<double> a = h;
    for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i * n + i)] += damp * mean_diag;
    const int ni = static_cast<int>(n);
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', ni, a.data(), ni) != 0) continue;
    if (LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'L', ni, a.data(), ni) != 0) continue;
    for (int64_t i = 0; i < n; ++i)  // the inverse's lower triangle into the upper
      for (int64_t j = i + 1; j < n; ++j) a[static_cast<size_t>(i * n + j)] = a[static_cast<size_t>(j * n + i)];
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', ni, a.data(), ni) != 0) continue;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) a[static_cast<size_t>(i * n + j)] = 0.0;
    return a;
  }
  throw Error(str_cat("gptq: the Hessian of ", n, " columns is not positive definite even with dampening ", damp / 10,
                      " (too little calibration data?)"));
}

}  // namespace

void gptq_quantize(DType type, const float* w_in, int64_t n_rows, int64_t n_cols, const Hessian& hess,
                   const GptqOptions& o, uint8_t* out) {
  const BlockGrid* grid = block_grid(type);
  if (grid == nullptr) throw Error(str_cat("gptq: ", dtype_name(type), " has no block grid to round onto"));
  if (hess.n() != n_cols || n_cols % grid->block_size != 0)
    throw Error(str_cat("gptq: ", n_cols, " columns, a Hessian of ", hess.n(), ", blocks of ", grid->block_size));
  const int64_t bs = grid->block_size;
  const int64_t n_blocks = n_cols / bs;
  const size_t row_bytes = row_size(type, n_cols);

  // Processing order: the format's blocks, by decreasing importance with act_order.
  std::vector<int64_t> block_order(static_cast<size_t>(n_blocks));
  std::iota(block_order.begin(), block_order.end(), 0);
  if (o.act_order) {
    std::vector<double> importance(static_cast<size_t>(n_blocks), 0.0);
    for (int64_t c = 0; c < n_cols; ++c) importance[static_cast<size_t>(c / bs)] += hess.at(c, c);
    std::stable_sort(block_order.begin(), block_order.end(),
                     [&](int64_t a, int64_t b) { return importance[static_cast<size_t>(a)] > importance[static_cast<size_t>(b)]; });
  }
  std::vector<int64_t> column(static_cast<size_t>(n_cols));  // processing position -> original column
  for (int64_t p = 0; p < n_cols; ++p) column[static_cast<size_t>(p)] = block_order[static_cast<size_t>(p / bs)] * bs + p % bs;

  // W and H in processing order; dead columns (never active) fixed as GPTQ does.
  std::vector<float> w(static_cast<size_t>(n_rows * n_cols));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t p = 0; p < n_cols; ++p)
      w[static_cast<size_t>(r * n_cols + p)] = w_in[r * n_cols + column[static_cast<size_t>(p)]];
  std::vector<double> h(static_cast<size_t>(n_cols * n_cols));
  for (int64_t i = 0; i < n_cols; ++i)
    for (int64_t j = 0; j < n_cols; ++j)
      h[static_cast<size_t>(i * n_cols + j)] = hess.at(column[static_cast<size_t>(i)], column[static_cast<size_t>(j)]);
  // Each column's importance for the blocks' parameter fits: its diagonal of H.
  // A block with no active column (all zero) takes the reference fit.
  std::vector<float> importance;
  std::vector<char> weighted_block(static_cast<size_t>(n_blocks), 0);
  if (o.weighted_fit && quantizer_uses_importance(type)) {
    importance.resize(static_cast<size_t>(n_cols));
    for (int64_t i = 0; i < n_cols; ++i) {
      importance[static_cast<size_t>(i)] = static_cast<float>(h[static_cast<size_t>(i * n_cols + i)]);
      if (importance[static_cast<size_t>(i)] != 0.0f) weighted_block[static_cast<size_t>(i / bs)] = 1;
    }
  }
  for (int64_t i = 0; i < n_cols; ++i) {
    if (h[static_cast<size_t>(i * n_cols + i)] != 0.0) continue;
    h[static_cast<size_t>(i * n_cols + i)] = 1.0;
    for (int64_t r = 0; r < n_rows; ++r) w[static_cast<size_t>(r * n_cols + i)] = 0.0f;
  }
  const std::vector<double> u64 = inverse_cholesky_upper(std::move(h), n_cols, o.damp);
  std::vector<float> u(u64.begin(), u64.end());
  h.clear();

  const int64_t block_cols = std::max<int64_t>((o.block_columns + bs - 1) / bs * bs, bs);
  std::vector<float> err(static_cast<size_t>(n_rows * block_cols));
  ThreadPool pool(0);
  for (int64_t i1 = 0; i1 < n_cols; i1 += block_cols) {
    const int64_t i2 = std::min(n_cols, i1 + block_cols), width = i2 - i1;
    pool.parallel_for(n_rows, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        float* wr = w.data() + r * n_cols;
        float* er = err.data() + r * block_cols;
        uint8_t* block = nullptr;
        for (int64_t p = i1; p < i2; ++p) {
          if (p % bs == 0) {  // a new block of the format: fit its parameters to the corrected values
            block = out + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(block_order[static_cast<size_t>(p / bs)]) * grid->block_bytes;
            quantize_row_weighted(type, wr + p, block, bs,
                                  weighted_block[static_cast<size_t>(p / bs)] ? importance.data() + p : nullptr);
          }
          float q;
          const int j = static_cast<int>(p % bs);
          grid->set_code(block, j, grid->nearest(block, j, wr[p], &q));
          const float e = (wr[p] - q) / u[static_cast<size_t>(p * n_cols + p)];
          er[p - i1] = e;
          const float* up = u.data() + p * n_cols;
          for (int64_t k = p + 1; k < i2; ++k) wr[k] -= e * up[k];
        }
      }
    });
    if (i2 < n_cols)  // W[:, i2:] -= Err[:, :width] * U[i1:i2, i2:]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n_rows), static_cast<int>(n_cols - i2),
                  static_cast<int>(width), -1.0f, err.data(), static_cast<int>(block_cols), u.data() + i1 * n_cols + i2,
                  static_cast<int>(n_cols), 1.0f, w.data() + i2, static_cast<int>(n_cols));
  }
}

double relative_output_error(const float* w, const float* q, int64_t n_rows, int64_t n_cols, const Hessian& h) {
  // trace(D H D^T) and trace(W H W^T), H symmetric: sum over rows of d^T H d.
  double err = 0, ref = 0;
  std::vector<float> hd(static_cast<size_t>(n_cols));
  std::vector<float> full(static_cast<size_t>(n_cols * n_cols));
  for (int64_t i = 0; i < n_cols; ++i)
    for (int64_t j = 0; j < n_cols; ++j) full[static_cast<size_t>(i * n_cols + j)] = h.at(i, j);
  std::vector<float> d(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < n_cols; ++c) d[static_cast<size_t>(c)] = w[r * n_cols + c] - q[r * n_cols + c];
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n_cols), static_cast<int>(n_cols), 1.0f, full.data(),
                static_cast<int>(n_cols), d.data(), 1, 0.0f, hd.data(), 1);
    err += cblas_sdot(static_cast<int>(n_cols), d.data(), 1, hd.data(), 1);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n_cols), static_cast<int>(n_cols), 1.0f, full.data(),
                static_cast<int>(n_cols), w + r * n_cols, 1, 0.0f, hd.data(), 1);
    ref += cblas_sdot(static_cast<int>(n_cols), w + r * n_cols, 1, hd.data(), 1);
  }
  return ref > 0 ? err / ref : 0.0;
}

}  // namespace ridge::quant
