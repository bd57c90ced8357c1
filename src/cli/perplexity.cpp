// `ridge perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [-b 2048] [-t T]`: perplexity
// as llama-perplexity computes it (quant/perplexity.h), printed the same way so its
// scripts read ridge's: "[1]5.4321,[2]..." as windows finish, then
// "Final estimate: PPL = X +/- Y". With --kl-divergence-base FILE the base model's log-
// probabilities are saved in llama.cpp's format; with --kl-divergence too, FILE is read
// (its tokens are evaluated, -f is not needed) and this model's KL divergence from the
// base, perplexity ratio, Δp and same-top-token rate are printed as llama.cpp prints them.
//
// Every window is one scoring request to the engine (RequestParams::score): -b / -c
// windows run side by side, each the second half of its positions scored.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/kv_flags.h"
#include "cli/tp_flags.h"
#include "cli/weight_flags.h"
#include "core/error.h"
#include "dist/mpi.h"
#include "engine/engine.h"
#include "quant/perplexity.h"
#include "quant/window_scoring.h"

namespace ridge::cli {
namespace {

using quant::KldStats;
using quant::NllStats;
using quant::PerplexityWindows;
using quant::TokenKld;

struct PerplexityOptions {
  std::string model;
  std::string text_file;
  int32_t n_ctx = 512;
  int32_t chunks = -1;
  int32_t batch = 2048;
  int threads = 0;
  int tp = 1;  // tensor-parallel ranks
  std::string kld_base;
  bool kld = false;
  WeightFlags weights;
  KvFlags kv;
};

void print_kld_header() {
  std::printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS"
              "            Same top p\n");
}

void print_kld_line(int32_t chunk, const KldStats& s) {
  const auto ppl = s.ppl(), ratio = s.log_ppl_ratio(), kld = s.kld(), rms = s.delta_p_rms(), top = s.same_top();
  std::printf("%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n",
              chunk, ppl.mean, ppl.error, ratio.mean, ratio.error, kld.mean, kld.error, 100 * rms.mean, 100 * rms.error,
              100 * top.mean, 100 * top.error);
}

void print_kld_summary(const KldStats& s) {
  if (s.count() < 100) return;  // as llama-perplexity: no statistics on so few values
  const auto ppl = s.ppl(), base = s.ppl_base(), ratio = s.log_ppl_ratio(), kld = s.kld(), dp = s.delta_p();
  const auto rms = s.delta_p_rms(), top = s.same_top();
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl.mean, ppl.error);
  std::printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", base.mean, base.error);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100 * s.log_ppl_correlation());
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio.mean, ratio.error);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", std::exp(ratio.mean),
              std::exp(ratio.mean) * ratio.error);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6lf ± %10.6lf\n", kld.mean, kld.error);
  std::printf("Maximum KLD: %10.6f\n", s.kld_percentile(1.0));
  for (double f : {0.999, 0.99, 0.95, 0.90})
    std::printf("%4.1f%%   KLD: %10.6f\n", 100 * f, s.kld_percentile(f));
  std::printf("Median  KLD: %10.6f\n", s.kld_percentile(0.5));
  for (double f : {0.10, 0.05, 0.01, 0.001}) std::printf("%4.1f%%   KLD: %10.6f\n", 100 * f, s.kld_percentile(f));
  std::printf("Minimum KLD: %10.6f\n", s.kld_percentile(0.0));
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100 * dp.mean, 100 * dp.error);
  std::printf("Maximum Δp: %6.3lf%%\n", 100 * s.delta_p_percentile(1.0));
  for (double f : {0.999, 0.99, 0.95, 0.90, 0.75})
    std::printf("%4.1f%%   Δp: %6.3lf%%\n", 100 * f, 100 * s.delta_p_percentile(f));
  std::printf("Median  Δp: %6.3lf%%\n", 100 * s.delta_p_percentile(0.5));
  for (double f : {0.25, 0.10, 0.05, 0.01, 0.001})
    std::printf("%4.1f%%   Δp: %6.3lf%%\n", 100 * f, 100 * s.delta_p_percentile(f));
  std::printf("Minimum Δp: %6.3lf%%\n", 100 * s.delta_p_percentile(0.0));
  std::printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100 * rms.mean, 100 * rms.error);
  std::printf("Same top p: %6.3lf ± %5.3lf %%\n", 100 * top.mean, 100 * top.error);
}

void perplexity(const PerplexityOptions& opt) {
  using Clock = std::chrono::steady_clock;
  if (opt.batch < 1) throw Error(str_cat("-b must be >= 1, got ", opt.batch));
  if (opt.chunks == 0 || opt.chunks < -1) throw Error(str_cat("--chunks must be >= 1, got ", opt.chunks));
  if (opt.kld && opt.kld_base.empty()) throw Error("--kl-divergence needs the base file: --kl-divergence-base FILE");
  const std::string path = resolve_model_path(opt.model);

  // The tokens and windows: from the text, or (KL divergence) from the base file.
  std::optional<quant::LogitsFileReader> base;
  std::vector<int32_t> text_tokens;
  std::unique_ptr<Communicator> comm = dist::start_mpi(opt.tp);  // outlives the model
  std::unique_ptr<Model> model;
  int32_t n_ctx = opt.n_ctx;
  if (opt.kld) {
    base.emplace(opt.kld_base);
    n_ctx = base->n_ctx();
  }
  // Windows side by side: as many as a batch of -b tokens holds (llama-perplexity's n_seq);
  // a batch smaller than a window computes it in chunks.
  const int32_t n_seq = std::max(1, opt.batch / std::max(n_ctx, 1));
  const int32_t step_tokens = opt.batch >= n_ctx ? n_seq * n_ctx : opt.batch;
  model = load_model_on_rank(path,
                             {.n_threads = opt.threads,
                              .max_batch_tokens = std::max(step_tokens, 1),
                              .weights = opt.weights.format_for_load(),
                              .n_ctx = n_ctx},
                             comm.get());
  if (!model) return;
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  const int32_t n_vocab = model->config().n_vocab;
  if (opt.kld) {
    if (base->n_vocab() != n_vocab)
      throw Error(str_cat(opt.kld_base, ": its logits are over ", base->n_vocab(), " tokens, this model's over ",
                          n_vocab, " (a different vocabulary)"));
    text_tokens = base->tokens();
  } else {
    if (opt.text_file.empty()) throw Error("give the text to evaluate: -f FILE");
    text_tokens = quant::perplexity_tokens(tok, read_text_file(opt.text_file));
  }
  const PerplexityWindows w = opt.kld ? quant::base_windows(n_ctx, base->n_chunk(), opt.chunks)
                                      : quant::plan_windows(text_tokens.size(), n_ctx, opt.chunks);
  std::fprintf(stderr, "model: %s (%s)\n", path.c_str(), model->config().summary().c_str());

  std::optional<quant::LogitsFileWriter> writer;
  if (!opt.kld && !opt.kld_base.empty()) {
    if (std::filesystem::exists(opt.kld_base) && std::filesystem::equivalent(opt.kld_base, path))
      throw Error(str_cat(opt.kld_base, ": is the model file"));
    writer.emplace(opt.kld_base, w.n_ctx, n_vocab, w.n_chunk,
                   std::span<const int32_t>(text_tokens).first(static_cast<size_t>(w.n_chunk) * w.n_ctx));
  }

  // Per window, written by the engine thread (score rows), read by this one once the
  // window's request has finished: --kl-divergence's per-token comparisons, and a row of
  // scratch for the base file's rows.
  std::vector<std::vector<TokenKld>> klds(static_cast<size_t>(w.n_chunk));
  std::vector<std::vector<uint16_t>> rows(static_cast<size_t>(w.n_chunk));
  quant::LogitsFileWriter* out = writer ? &*writer : nullptr;
  quant::LogitsFileReader* in = base ? &*base : nullptr;
  quant::WindowScoring::ScoreRow score_row;  // default: -log p(next) alone
  if (in != nullptr || out != nullptr) {
    for (auto& row : rows) row.resize(quant::log_prob_row_entries(n_vocab));
    score_row = [&klds, &rows, in, out](int32_t i, int32_t index, std::span<const float> logits, int32_t next) {
      std::vector<uint16_t>& row = rows[static_cast<size_t>(i)];
      if (in != nullptr) {
        in->read_row(i, index, row);
        const TokenKld t = quant::compare_with_base(logits, row, next);
        klds[static_cast<size_t>(i)].push_back(t);
        return t.nll;
      }
      const double nll = quant::encode_log_probs(logits, next, row);
      out->write_row(i, index, row);
      return nll;
    };
  }
  // Declared before the engine, so the engine (and any request still running when an
  // error unwinds) is gone before what the requests point into.
  quant::WindowScoring scoring(text_tokens, w, tok, score_row);

  EngineOptions eo;
  eo.parallel = n_seq;
  eo.max_batch_tokens = step_tokens;
  eo.n_ctx = w.n_ctx;
  eo.max_queue = w.n_chunk;
  eo.prefix_cache = false;
  eo.kv_type = opt.kv.dtype();
  Engine engine(*model, tok, eo);
  engine.start();
  std::fprintf(stderr, "%s\n", engine.kv_summary().c_str());
  if (const std::string w = engine.context_warning(); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  std::fprintf(stderr, "perplexity: %d windows of %d tokens, %d side by side, %d tokens per step, %d threads%s\n",
               w.n_chunk, w.n_ctx, eo.parallel, eo.max_batch_tokens, model->pool().n_threads(),
               opt.kld ? ", KL divergence against the base" : writer ? ", saving the base logits" : "");

  const Clock::time_point start = Clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(scoring.requests());
  NllStats total;
  KldStats kld;
  if (opt.kld) print_kld_header();
  for (int32_t i = 0; i < w.n_chunk; ++i) {
    StreamEvent ev;
    while (streams[static_cast<size_t>(i)]->next(ev)) {
    }
    if (ev.finish_reason == FinishReason::kError) throw Error(str_cat("window ", i + 1, ": ", ev.error));
    total.add(scoring.window_nll(i));
    if (opt.kld) {
      for (const TokenKld& t : klds[static_cast<size_t>(i)]) kld.add(t);
      print_kld_line(i + 1, kld);
    } else {
      std::printf("[%d]%.4lf,", i + 1, total.perplexity());
    }
    std::fflush(stdout);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "\rperplexity: window %d/%d, %.1f tokens/s, %.0f s left   ", i + 1, w.n_chunk,
                 (i + 1) * static_cast<double>(w.n_ctx) / seconds, seconds / (i + 1) * (w.n_chunk - i - 1));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "\nperplexity: %d tokens in %.2f s (%.1f tokens/s)\n", w.n_chunk * w.n_ctx, seconds,
               w.n_chunk * w.n_ctx / seconds);
  if (writer) writer->close();
  if (opt.kld) {
    print_kld_summary(kld);
    return;
  }
  std::printf("\nFinal estimate: PPL = %.4lf +/- %.5lf\n", total.perplexity(), total.perplexity_error());
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto opt = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity and KL divergence over a text, as llama-perplexity");
  cmd->add_option("-m,--model", opt->model, "GGUF file or cached model name")->required();
  cmd->add_option("-f,--file", opt->text_file, "Text to evaluate (e.g. wiki.test.raw)");
  cmd->add_option("-c,--ctx-size", opt->n_ctx, "Tokens per window; the second half of each is scored")
      ->capture_default_str();
  cmd->add_option("--chunks", opt->chunks, "Windows to evaluate (-1: all)")->capture_default_str();
  cmd->add_option("-b,--batch-size", opt->batch, "Tokens per step: -b / -c windows run side by side")
      ->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  add_weight_flags(*cmd, opt->weights);
  add_kv_flags(*cmd, opt->kv);
  add_tp_flag(*cmd, opt->tp);
  cmd->add_option("--kl-divergence-base", opt->kld_base,
                  "Save the log-probabilities here (llama.cpp's format); with --kl-divergence, read them");
  cmd->add_flag("--kl-divergence", opt->kld, "KL divergence against --kl-divergence-base");
  cmd->callback([opt] { perplexity(*opt); });
}

}  // namespace ridge::cli
