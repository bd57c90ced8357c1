// `ridge quantize IN.gguf OUT.gguf TYPE [--method rtn] [--imatrix FILE]`: a model in
// another GGUF type, with llama-quantize's per-tensor choices (quant/recipe.h) and its
// metadata; the output is a standard GGUF that llama.cpp loads. With --imatrix (ridge's or
// llama-imatrix's, GGUF or legacy .dat) the types whose ggml quantizer takes importance
// weigh each column by it, as llama-quantize --imatrix does. Progress on stderr; the input
// is never overwritten and a failed run leaves no output file.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "core/error.h"
#include "core/quant_weighted.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/awq.h"
#include "quant/calibration.h"
#include "quant/gptq_model.h"
#include "quant/imatrix.h"
#include "quant/quantize.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

struct QuantizeCliOptions {
  std::string input, output, type;
  std::string method = "rtn";
  bool allow_requantize = false;
  int threads = 0;
  std::string calib;
  int32_t calib_windows = 16;
  int32_t calib_ctx = 512;
  int64_t calib_skip_tokens = 0;
  double damp = 0.01;
  bool act_order = false;
  float awq_alpha = -1.0f;
  int32_t awq_sample_tokens = 256;
  bool awq_weighted_fit = false;
  std::string awq_scales = "duo";
  int32_t awq_grid = quant::AwqOptions{}.grid;
  std::string imatrix;
  std::string token_embedding_type, output_tensor_type;
  bool reference_fit = false;
};

gguf::KeyValue string_kv(std::string key, std::string value) {
  return {std::move(key), gguf::Value{gguf::ValueType::STRING, std::move(value)}};
}

gguf::KeyValue u32_kv(std::string key, uint64_t value) {
  return {std::move(key), gguf::Value{gguf::ValueType::UINT32, value}};
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// --imatrix: read and checked against the model before any work; o.quantizer then weighs
// each matrix by its entry. GPTQ already weighs columns by its Hessian, whose diagonal is
// the importance matrix; AWQ rescales the columns the importance describes, so the two do
// not combine.
void use_imatrix(const QuantizeCliOptions& opt, quant::QuantizeOptions& o) {
  if (opt.method == "awq")
    throw Error("--imatrix does not combine with --method awq (AWQ rescales the columns the importance describes)");
  const quant::Imatrix im = quant::read_imatrix(opt.imatrix);
  auto importance = std::make_shared<const quant::ModelImportance>(im, gguf::File::open(o.input));
  const std::string source =
      str_cat(im.chunk_count, " chunks", im.chunk_size > 0 ? str_cat(" of ", im.chunk_size, " tokens") : "",
              im.datasets.empty() ? "" : " of " + im.datasets.front());
  std::fprintf(stderr, "quantize: imatrix %s: %zu entries for this model from %s\n", opt.imatrix.c_str(),
               importance->size(), source.c_str());
  if (!importance->unmatched().empty())
    std::fprintf(stderr, "quantize: note: %zu imatrix entries name no tensor of the model (first: %s)\n",
                 importance->unmatched().size(), importance->unmatched().front().c_str());
  if (!quantizer_uses_importance(o.target.base))
    std::fprintf(stderr, "quantize: note: %s quantizes without importance (as llama-quantize): the imatrix changes "
                         "nothing\n",
                 o.target.name.c_str());
  if (opt.method != "rtn") {
    std::fprintf(stderr, "quantize: note: --imatrix ignored: GPTQ weighs columns by its Hessian, whose diagonal is "
                         "the importance\n");
    return;
  }
  o.extra_metadata.push_back(string_kv("quantize.imatrix.file", opt.imatrix));
  if (!im.datasets.empty()) o.extra_metadata.push_back(string_kv("quantize.imatrix.dataset", im.datasets.front()));
  o.extra_metadata.push_back(u32_kv("quantize.imatrix.entries_count", importance->size()));
  if (im.chunk_count > 0) o.extra_metadata.push_back(u32_kv("quantize.imatrix.chunks_count", im.chunk_count));
  o.imatrix = true;
  o.quantizer = [importance, threads = opt.threads](const std::string& name, DType type, const float* rows,
                                                    int64_t n_rows, int64_t n_cols, uint8_t* out) {
    const quant::ModelImportance::Matrix* m = importance->find(name);
    if (m == nullptr) {
      if (quantizer_uses_importance(type))
        std::fprintf(stderr, "quantize: note: no imatrix entry for %s; quantized without importance\n", name.c_str());
      quant::quantize_rows_reference(type, rows, n_rows, n_cols, out, threads);
      return;
    }
    quant::quantize_rows_weighted(type, rows, n_rows, n_cols, m->values.data(), m->n_mat, out, threads);
  };
}

// llama-quantize's rule: weights that are quantized already lose quality a second time
// when quantized again, so that takes --allow-requantize. Dequantizing (to F32, F16 or
// BF16, as for a perplexity baseline) loses nothing more and needs no flag.
void check_requantize(const std::string& input, const quant::QuantTarget& target, bool allow) {
  const bool float_target = target.base == DType::F32 || target.base == DType::F16 || target.base == DType::BF16;
  if (allow || float_target) return;
  const gguf::File file = gguf::File::open(input);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.n_dims < 2 || t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16) continue;
    throw Error(str_cat("quantize: ", input, " is quantized already (", t.name, " is ", dtype_name(t.dtype),
                        "): quantizing it again to ", target.name, " loses quality twice. Quantize from its F16, BF16 "
                        "or F32 original, or pass --allow-requantize"));
  }
}

void quantize(const QuantizeCliOptions& opt) {
  quant::QuantizeOptions o;
  o.input = resolve_model_path(opt.input);
  o.output = opt.output;
  o.target = quant::parse_quant_target(opt.type);
  if (!opt.token_embedding_type.empty())
    o.target.token_embedding_type = quant::parse_tensor_type(opt.token_embedding_type, "--token-embedding-type");
  if (!opt.output_tensor_type.empty())
    o.target.output_tensor_type = quant::parse_tensor_type(opt.output_tensor_type, "--output-tensor-type");
  o.threads = opt.threads;
  check_requantize(o.input, o.target, opt.allow_requantize);
  if (opt.method != "rtn" && opt.method != "gptq" && opt.method != "awq" && opt.method != "awq-gptq")
    throw Error(str_cat("--method must be rtn, gptq, awq or awq-gptq, got '", opt.method, "'"));
  if (opt.awq_scales != "duo" && opt.awq_scales != "activation")
    throw Error(str_cat("--awq-scales must be duo or activation, got '", opt.awq_scales, "'"));
  const bool scales_given = opt.awq_scales != "duo", grid_given = opt.awq_grid != quant::AwqOptions{}.grid;
  if ((scales_given || grid_given) && opt.method != "awq" && opt.method != "awq-gptq")
    throw Error(str_cat(scales_given ? "--awq-scales" : "--awq-grid", " applies to --method awq and awq-gptq, not ",
                        opt.method));
  if (opt.awq_weighted_fit && opt.method != "awq" && opt.method != "awq-gptq")
    throw Error(str_cat("--awq-weighted-fit applies to --method awq and awq-gptq, not ", opt.method));
  o.extra_metadata.push_back(string_kv("quantize.method", opt.method));
  std::fprintf(stderr, "quantize: %s -> %s as %s (%s)\n", o.input.c_str(), o.output.c_str(), o.target.name.c_str(),
               opt.method.c_str());
  // Ctrl-C stops at the next tensor (or calibration step): the output is written only once
  // everything is quantized, so nothing is left behind.
  catch_interrupts();
  auto progress = [](const std::string& line) {
    std::fputs(line.c_str(), stderr);
    if (interrupted()) throw Interrupted("quantize");
  };

  if (!opt.imatrix.empty()) use_imatrix(opt, o);

  // Calibrated methods: the model runs over the calibration text. AWQ rescales matrices
  // and norms (o.overrides); GPTQ quantizes the layer matrices itself (o.quantizer).
  std::unique_ptr<Model> model;
  quant::AwqResult awq;
  quant::QuantizedMatrices gptq;
  if (opt.method != "rtn") {
    if (opt.calib.empty()) throw Error(str_cat("--method ", opt.method, " needs calibration text: --calib FILE"));
    if (opt.awq_grid < 1) throw Error(str_cat("--awq-grid must be >= 1, got ", opt.awq_grid));
    if (opt.awq_sample_tokens < 1)
      throw Error(str_cat("--awq-sample-tokens must be >= 1, got ", opt.awq_sample_tokens));
    if (opt.calib_windows < 1 || opt.calib_ctx < 16)
      throw Error(str_cat("--calib-windows must be >= 1 and --calib-ctx >= 16, got ", opt.calib_windows, " and ",
                          opt.calib_ctx));
    model = Model::load(o.input, {.n_threads = opt.threads, .max_batch_tokens = opt.calib_ctx});
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    const quant::CalibrationSet set =
        quant::calibration_windows(tok, read_text_file(opt.calib), opt.calib_ctx, opt.calib_windows,
                                   opt.calib_skip_tokens);
    std::fprintf(stderr, "quantize: calibrating on %zu windows of %d tokens of %s (from token %lld)\n",
                 set.windows.size(), set.n_ctx, opt.calib.c_str(), static_cast<long long>(opt.calib_skip_tokens));
    const std::string calibration = str_cat(opt.calib, ": ", set.windows.size(), " windows of ", set.n_ctx,
                                            " tokens from token ", opt.calib_skip_tokens);
    o.extra_metadata.push_back(string_kv("quantize.calibration", calibration));
    if (opt.method == "awq" || opt.method == "awq-gptq") {
      quant::AwqOptions a;
      a.fixed_alpha = opt.awq_alpha;
      a.sample_tokens = opt.awq_sample_tokens;
      a.weighted_fit = opt.awq_weighted_fit;
      a.duo_scaling = opt.awq_scales == "duo";
      a.grid = opt.awq_grid;
      awq = quant::awq_model(*model, model->file(), o.target, set, a, progress);
      o.overrides = &awq.tensors;
      if (a.weighted_fit && opt.method == "awq")  // awq-gptq: GPTQ quantizes (below)
        o.quantizer = [&](const std::string& name, DType type, const float* rows, int64_t n_rows, int64_t n_cols,
                          uint8_t* out) {
          const auto it = awq.importance.find(name);
          if (it == awq.importance.end()) quant::quantize_rows_reference(type, rows, n_rows, n_cols, out, opt.threads);
          else quant::quantize_rows_weighted(type, rows, n_rows, n_cols, it->second.data(), 1, out, opt.threads);
        };
    }
    if (opt.method == "gptq" || opt.method == "awq-gptq") {
      for (const auto& [name, values] : awq.tensors) {  // GPTQ runs on the rescaled model
        const gguf::TensorInfo* t = model->file().find_tensor(name);
        if (t->n_dims == 1)
          model->replace_vector(name, values.data());
        else
          model->replace_matrix(name, DType::F32, reinterpret_cast<const uint8_t*>(values.data()));
      }
      quant::GptqOptions g;
      g.damp = opt.damp;
      g.act_order = opt.act_order;
      g.weighted_fit = !opt.reference_fit;
      gptq = quant::gptq_model(*model, model->file(), o.target, set, g, progress, &awq.tensors);
      o.quantizer = [&](const std::string& name, DType type, const float* rows, int64_t n_rows, int64_t n_cols,
                        uint8_t* out) {
        const auto it = gptq.find(name);
        if (it != gptq.end() && it->second.type == type) {
          std::copy(it->second.bytes.begin(), it->second.bytes.end(), out);
          return;
        }
        quant::quantize_rows_reference(type, rows, n_rows, n_cols, out, opt.threads);
      };
    }
  }
  const quant::QuantizeReport r = quant::quantize_model(o, progress);
  for (const std::string& note : r.fallbacks) std::fprintf(stderr, "fallback: %s\n", note.c_str());
  std::fprintf(stderr, "quantize: %d tensors (%d quantized), %s -> %s of tensor data\n", r.n_tensors, r.n_quantized,
               mib(r.input_bytes).c_str(), mib(r.output_bytes).c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto opt = std::make_shared<QuantizeCliOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "Write a model in another GGUF type (as llama-quantize)");
  cmd->add_option("input", opt->input, "GGUF to read (a file, or a cached model name)")->required();
  cmd->add_option("output", opt->output, "GGUF to write")->required();
  cmd->add_option("type", opt->type, "Target: " + quant::quant_target_names())->required();
  cmd->add_option("--method", opt->method,
                  "rtn (round to nearest), gptq, awq (AWQ scales, then round to nearest) or awq-gptq; all but rtn "
                  "need --calib")
      ->capture_default_str();
  cmd->add_option("--calib", opt->calib, "Calibration text (gptq, awq)");
  cmd->add_option("--calib-windows", opt->calib_windows, "Calibration windows")->capture_default_str();
  cmd->add_option("--calib-ctx", opt->calib_ctx, "Tokens per calibration window")->capture_default_str();
  cmd->add_option("--calib-skip-tokens", opt->calib_skip_tokens,
                  "Start calibrating this many tokens into the text (keep evaluation text out)")
      ->capture_default_str();
  cmd->add_option("--damp", opt->damp, "GPTQ dampening: fraction of the Hessian's mean diagonal")->capture_default_str();
  cmd->add_flag("--act-order", opt->act_order, "GPTQ: quantize blocks in order of decreasing importance");
  cmd->add_flag("--gptq-reference-fit", opt->reference_fit,
               "GPTQ: fit each block's scales by the format's round-to-nearest rule, not weighted by the Hessian's "
               "diagonal");
  cmd->add_option("--awq-alpha", opt->awq_alpha, "AWQ: this alpha everywhere instead of the search (-1: search)")
      ->capture_default_str();
  cmd->add_option("--awq-sample-tokens", opt->awq_sample_tokens,
                  "AWQ: calibration tokens each group's output error is measured on")
      ->capture_default_str();
  cmd->add_flag("--awq-weighted-fit", opt->awq_weighted_fit,
               "AWQ: round the scaled matrices with the format's importance-weighted search (their inputs' mean "
               "square), in the search and in the output (awq-gptq: in the search; GPTQ's own fit is weighted)");
  cmd->add_option("--awq-scales", opt->awq_scales,
                  "AWQ: duo, mean|x|^alpha / mean|w|^(1 - alpha) with each weight over its block's absmax "
                  "(AutoAWQ's default); or activation, mean|x|^alpha")
      ->capture_default_str();
  cmd->add_option("--awq-grid", opt->awq_grid, "AWQ: alphas searched, 0, 1/N, ..., (N - 1)/N")->capture_default_str();
  cmd->add_option("--imatrix", opt->imatrix,
                  "Importance matrix (ridge imatrix or llama-imatrix: GGUF or legacy .dat) to weigh the "
                  "quantizers of Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K by");
  cmd->add_option("--token-embedding-type", opt->token_embedding_type,
                  "Type of token_embd.weight instead of the target's (as llama-quantize)");
  cmd->add_option("--output-tensor-type", opt->output_tensor_type,
                  "Type of output.weight instead of the target's (as llama-quantize)");
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--allow-requantize", opt->allow_requantize,
                "Quantize an input whose weights are quantized already (loses quality twice)");
  cmd->callback([opt] { quantize(*opt); });
}

}  // namespace ridge::cli
