// `ridge bench -m MODEL -p 512 -n 128 -t 1,2 -r 5`: prompt processing (pp) and token
// generation (tg) speed as llama-bench measures them, plus what decode is bound by: the
// bytes each generated token reads (weights + KV), the machine's measured read bandwidth,
// and the fraction of that roofline reached. `--batch 1,2,4,8` adds decode with several
// sequences in one step (aggregate tokens/s); `--json` prints llama-bench's JSON fields.
// Prefill and batched decode are bound by arithmetic instead: for those rows, the fraction
// of the compute roofline reached, against the int8 and f32 peaks a built-in probe
// measures for the ISA the kernels run (plan/probe.h). The kernels each weight type runs
// head the table.
//
// Like llama-bench: random tokens; every repetition starts from an empty KV cache; pp
// feeds n_prompt tokens in chunks of n_batch with logits for each chunk's last token; tg
// feeds n_gen single tokens (positions 0..n_gen-1) with logits for each; one warm-up run
// before the timed ones. Unlike llama-bench, every test is a request to the same Engine
// that `ridge run` and `ridge serve` use, so a figure here includes what users pay for:
// scheduling, sampling (greedy: an argmax over the vocabulary per token), streaming.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/speculative_flags.h"
#include "cli/kv_flags.h"
#include "cli/tp_flags.h"
#include "cli/weight_flags.h"
#include "core/error.h"
#include "dist/mpi.h"
#include "engine/engine.h"
#include "model/model.h"
#include "plan/probe.h"

namespace ridge::cli {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<int> n_prompt{512};
  std::vector<int> depth{0};  // tests run after this many tokens of context (llama-bench -d)
  std::vector<int> n_gen{128};
  std::vector<int> threads;       // empty: all cores
  int tp = 1;                     // tensor-parallel ranks
  std::vector<int> batch;         // decode sequences per step for the batched sweep
  int reps = 5;
  int n_batch = 512;
  bool json = false;
  bool no_bandwidth = false;
  bool no_kv_cache = false;  // tg recomputes every position each step (the cache's worth)
  std::string prompt_file;   // tg continues this text (greedy) instead of one random token
  SpeculativeFlags spec;     // tg also runs with speculative decoding, beside plain
  WeightFlags weights;
  KvFlags kv;
};

// What speculative decoding did over one test's timed runs.
struct SpecCounts {
  int64_t steps = 0, drafted = 0, accepted = 0, rejected = 0;
  void add(const StreamEvent& final_event) {
    steps += final_event.spec_steps;
    drafted += final_event.spec_drafted;
    accepted += final_event.spec_accepted;
    rejected += final_event.spec_rejected;
  }
  // Each verification is trials up to the first rejection: the per-token acceptance rate.
  double alpha() const { return accepted + rejected > 0 ? double(accepted) / double(accepted + rejected) : 0; }
  double mean_draft() const { return steps > 0 ? double(drafted) / double(steps) : 0; }
  double tokens_per_step() const { return steps > 0 ? double(accepted + steps) / double(steps) : 0; }
};

struct Result {
  std::string test;         // "pp512", "tg128", "tg128 x8"
  int n_prompt = 0, n_gen = 0, n_seq = 1, threads = 0, depth = 0;
  std::vector<double> samples_ns;
  std::vector<double> step_ns;  // tg: median latency of each decode step, by position
  double tokens = 0;        // tokens per sample
  double bytes_per_token = 0, bandwidth_gbs = 0;  // tg only
  plan::ComputeWork work_per_token;  // pp and batched tg: the weight matmuls' ops
  plan::ComputePeak peak;
  std::string spec_method;  // tg with speculative decoding: "ngram", "draft"
  SpecCounts spec;
  double plain_ts = 0;      // the same test without speculation, this run

  double mean_ts() const {
    double s = 0;
    for (double ns : samples_ns) s += tokens / (ns * 1e-9);
    return s / samples_ns.size();
  }
  double sd_ts() const {
    if (samples_ns.size() < 2) return 0;
    const double m = mean_ts();
    double s = 0;
    for (double ns : samples_ns) s += std::pow(tokens / (ns * 1e-9) - m, 2);
    return std::sqrt(s / (samples_ns.size() - 1));
  }
  double roofline_pct() const {
    return bandwidth_gbs > 0 ? 100.0 * mean_ts() * bytes_per_token / (bandwidth_gbs * 1e9) : 0;
  }
  double compute_pct() const { return plan::compute_roofline_pct(work_per_token, mean_ts(), peak); }
  bool has_compute() const { return work_per_token.int8_ops + work_per_token.f32_ops > 0; }
};

// What a file is, for the table and the JSON.
struct ModelFacts {
  std::string filename, type;
  uint64_t size = 0, n_params = 0;
  double weight_bytes_per_step = 0;  // every matrix once, and one embedding row
  std::vector<std::pair<std::string, std::string>> kernels;  // weight type, what runs it
  std::string kernel_summary;
  Model::MatmulMacs layer_macs, output_macs;  // per token; per row of logits
};

// Ops (2 x multiply-adds) per token of the weight matmuls when each token's layers run
// and one row of logits comes for every `tokens_per_logit_row` tokens: a prompt's last
// token only (pp), every token (tg). Attention's products are left out (model.h).
plan::ComputeWork matmul_work_per_token(const ModelFacts& m, double tokens_per_logit_row) {
  return {2 * (m.layer_macs.int8 + m.output_macs.int8 / tokens_per_logit_row),
          2 * (m.layer_macs.f32 + m.output_macs.f32 / tokens_per_logit_row)};
}

std::string file_type_name(uint64_t ftype) {
  switch (ftype) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return str_cat("ftype ", ftype);
  }
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0fM", n / 1e6);
  return buf;
}

ModelFacts model_facts(const std::string& path, const Model& model) {
  const gguf::File& f = model.file();
  ModelFacts m;
  m.filename = path;
  for (const gguf::TensorInfo& t : f.tensors()) {
    m.size += t.nbytes;
    m.n_params += static_cast<uint64_t>(t.n_elements());
  }
  m.weight_bytes_per_step = model.weight_bytes_per_step();
  m.kernels = model.matmul_kernels();
  m.kernel_summary = model.kernel_summary();
  m.layer_macs = model.layer_macs_per_token();
  m.output_macs = model.output_macs_per_row();
  const std::string label = f.get_string("general.size_label", human_count(static_cast<double>(m.n_params)));
  m.type = str_cat(model.config().arch, " ", label, " ", file_type_name(f.get_u64("general.file_type", 0)));
  if (model.weight_format() != WeightFormat::kAsStored) {  // the bytes in memory, not the file's
    m.type += str_cat(" as ", weight_format_name(model.weight_format()));
    m.size = static_cast<uint64_t>(static_cast<double>(m.size) + model.converted_bytes_delta());
  }
  return m;
}

// K and V bytes one token at position pos reads in every attention layer (its visible keys),
// from a cache of kv_type; a hybrid's recurrent layer reads its f32 state instead, whatever
// the position.
double kv_bytes_read(const ModelConfig& c, DType kv_type, int64_t pos) {
  double bytes = 0;
  for (size_t il = 0; il < c.layers.size(); ++il) {
    const LayerConfig& l = c.layers[il];
    if (l.kind != LayerKind::kAttention) {
      bytes += sizeof(float) * static_cast<double>(c.state_floats(static_cast<int32_t>(il)));
      continue;
    }
    const int64_t visible = l.window > 0 ? std::min<int64_t>(l.window, pos + 1) : pos + 1;
    bytes += 2.0 * static_cast<double>(row_size(kv_type, c.n_kv_head * c.d_head)) * static_cast<double>(visible);
  }
  return bytes;
}

// Drives the engine as llama-bench drives llama.cpp: random tokens, an empty cache per
// repetition (no prefix cache), greedy sampling, end-of-generation ignored. With a prompt
// (--prompt-file) tg continues it instead, timed from its first generated token. With
// speculative flags a second engine on the same model speculates, for tg beside plain.
ModelOptions runner_model_options(int threads, int n_batch, int max_seqs, const BenchOptions& opt, Communicator* comm) {
  return {.n_threads = threads, .max_batch_tokens = std::max(n_batch, max_seqs),
          .weights = opt.weights.format_for_load(), .comm = comm};
}

class Runner {
 public:
  Runner(const std::string& path, int threads, int n_batch, int max_seqs, int max_context, int max_depth,
         const BenchOptions& opt, Communicator* comm)
      : model_(Model::load(path, runner_model_options(threads, n_batch, max_seqs, opt, comm))) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
    if (!opt.prompt_file.empty()) {
      prompt_ = tokenizer_->encode(read_text_file(opt.prompt_file));
      if (prompt_.empty()) throw Error(str_cat(opt.prompt_file, ": the prompt is empty"));
    }
    EngineOptions o;
    o.parallel = max_seqs;
    o.max_batch_tokens = std::max(n_batch, max_seqs);
    // pp: the prompt and its sampled token; tg at depth: the context, one token more.
    o.n_ctx = max_depth + max_context + 2 + static_cast<int>(prompt_.size());
    o.max_queue = std::max(max_seqs, 64);
    // At a depth, several sequences' contexts are prefilled before their timed steps and
    // found again in the prefix cache (generate).
    o.prefix_cache = max_depth > 0 && max_seqs > 1;
    o.kv_type = opt.kv.dtype();
    // At a depth, room for every sequence's whole context: the engine's default budget
    // stops at 1 GiB, and sequences it cannot hold would wait, or be preempted, inside the
    // timing. A hybrid's recurrent state (slots and prefix checkpoints) comes on top.
    if (max_depth > 0) {
      const EngineSizing sizing = size_engine(*model_, o);
      o.kv_budget_bytes = sizing.kv_bytes_all_contexts + kv_state_bytes(sizing.kv);
    }
    engine_ = std::make_unique<Engine>(*model_, *tokenizer_, o);
    engine_->start();
    if (max_depth > 0) {  // pp at depth: the context prefilled once, then found in the prefix cache
      EngineOptions d = o;
      d.parallel = 1;
      d.prefix_cache = true;
      depth_engine_ = std::make_unique<Engine>(*model_, *tokenizer_, d);
      depth_engine_->start();
    }
    o.speculative = opt.spec.options();
    if (o.speculative.method != SpecMethod::kNone) {
      draft_ = opt.spec.load_draft(*model_);
      spec_engine_ = std::make_unique<Engine>(*model_, *tokenizer_, o, draft_.get());
      spec_engine_->start();
    }
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, model_->config().n_vocab - 1);
    // The context, then fresh prompts for each repetition at depth.
    suffix_start_ = max_depth + max_context + max_seqs + 16;
    tokens_.resize(static_cast<size_t>(suffix_start_) + static_cast<size_t>(opt.reps + 2) * max_context);
    for (int32_t& t : tokens_) t = token(rng);
  }

  Model& model() { return *model_; }
  bool has_prompt() const { return !prompt_.empty(); }
  bool speculates() const { return spec_engine_ != nullptr; }

  // Seconds to compute n_prompt tokens of one fresh sequence (chunks of n_batch per step)
  // and sample its first token. At a depth, the sequence starts with that many tokens of
  // context already in the cache (a prefix-cache hit; prefilled by the first call) and
  // call `rep` brings its own fresh n_prompt tokens.
  double prompt(int n_prompt, int depth = 0, int rep = 0) {
    if (depth == 0) {
      const auto start = Clock::now();
      run(*engine_, {request(0, n_prompt, 1)}, nullptr, nullptr);
      return seconds_since(start);
    }
    RequestParams p = request(0, depth, 1);
    const auto suffix = tokens_.begin() + suffix_start_ + static_cast<std::ptrdiff_t>(rep) * n_prompt;
    p.prompt.insert(p.prompt.end(), suffix, suffix + n_prompt);
    const auto start = Clock::now();
    run(*depth_engine_, {std::move(p)}, nullptr, nullptr);
    return seconds_since(start);
  }
  void prefill_depth(int depth) { run(*depth_engine_, {request(0, depth, 1)}, nullptr, nullptr); }

  // Seconds for n_gen decode steps of n_seq sequences started together from one token
  // each (or from the prompt: then from the first generated token on, n_gen - 1 steps);
  // each step's seconds (as the first sequence sees them) go to step_seconds when given.
  // Without the cache (use_cache false), step i computes positions 0..i afresh, as a
  // model with no KV cache must: a request of i + 1 prompt tokens and one sampled token.
  // At a depth, each sequence first prefills that many tokens of its own context
  // (untimed: the timing starts at its first token, and n_gen steps follow).
  double generate(int n_gen, int n_seq, bool use_cache, std::vector<double>* step_seconds = nullptr,
                  bool speculative = false, SpecCounts* spec = nullptr, int depth = 0) {
    auto start = Clock::now();
    if (!use_cache) {
      for (int step = 0; step < n_gen; ++step) {
        const auto step_start = Clock::now();
        run(*engine_, {request(0, step + 1, 1)}, nullptr, nullptr);
        if (step_seconds != nullptr) step_seconds->push_back(seconds_since(step_start));
      }
      return seconds_since(start);
    }
    Engine& engine = speculative ? *spec_engine_ : *engine_;
    std::vector<RequestParams> requests;
    if (depth > 0 && n_seq > 1) {
      // Each context first, untimed. Otherwise the first sequence would decode while the
      // others still prefill, and its steps would carry their prompt chunks (tg32 x4 @
      // d4096 read 8.5 t/s; it decodes at about 78).
      for (int s = 0; s < n_seq; ++s) requests.push_back(request(s, depth, 1));
      run(engine, std::move(requests), nullptr, nullptr);
      requests = {};
    }
    for (int s = 0; s < n_seq; ++s) requests.push_back(request(s, depth > 0 ? depth : 1, depth > 0 ? n_gen + 1 : n_gen));
    std::vector<double> steps;
    const Clock::time_point first = run(engine, std::move(requests), step_seconds ? &steps : nullptr, spec);
    if (step_seconds != nullptr)  // at a depth, the first token came with the untimed prefill
      step_seconds->insert(step_seconds->end(), steps.begin() + (depth > 0 && !steps.empty() ? 1 : 0), steps.end());
    if (has_prompt() || depth > 0) start = first;
    return seconds_since(start);
  }

 private:
  using Clock = std::chrono::steady_clock;

  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  RequestParams request(int first_token, int n_prompt, int n_gen) const {
    RequestParams p;
    if (has_prompt() && n_gen > 1) {
      p.prompt = prompt_;
    } else {
      p.prompt.assign(tokens_.begin() + first_token, tokens_.begin() + first_token + n_prompt);
    }
    p.max_tokens = n_gen;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    return p;
  }

  // Runs the requests together to the end; the first one's token arrival times give the
  // step latencies (a step that brings several tokens counts once per token, each with
  // its share). Returns when the first token arrived.
  Clock::time_point run(Engine& engine, std::vector<RequestParams> requests, std::vector<double>* step_seconds,
                        SpecCounts* spec) {
    std::vector<std::shared_ptr<RequestStream>> streams = engine.submit(std::move(requests));
    auto last = Clock::now();
    Clock::time_point first{};
    for (size_t i = 0; i < streams.size(); ++i) {
      for (StreamEvent ev; streams[i]->next(ev);) {
        if (ev.finished && ev.finish_reason != FinishReason::kLength)
          throw Error(str_cat("bench: a request ended with '", finish_reason_name(ev.finish_reason), "' ", ev.error));
        if (ev.finished && spec != nullptr) spec->add(ev);
        if (i != 0 || ev.tokens.empty()) continue;
        const auto now = Clock::now();
        if (first == Clock::time_point{}) first = now;
        if (step_seconds != nullptr)
          for (size_t t = 0; t < ev.tokens.size(); ++t)
            step_seconds->push_back(std::chrono::duration<double>(now - last).count() / ev.tokens.size());
        last = now;
      }
    }
    return first;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Engine> spec_engine_;
  std::unique_ptr<Engine> depth_engine_;  // prefix cache on: pp at depth
  std::vector<int32_t> tokens_;
  int suffix_start_ = 0;
  std::vector<int32_t> prompt_;
};

std::string format_size(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(uint64_t{1} << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / double(1 << 20));
  return buf;
}

void print_header(const ModelFacts& m) {
  std::printf("kernels: %s\n\n", m.kernel_summary.c_str());
  std::printf("| %-28s | %10s | %8s | %7s | %10s | %16s | %10s | %8s | %8s | %8s |\n", "model", "size", "params",
              "threads", "test", "t/s", "MB/token", "GB/s", "roofline", "compute");
  std::printf("| %s | %s: | %s: | %s: | %s: | %s: | %s: | %s: | %s: | %s: |\n", std::string(28, '-').c_str(),
              std::string(9, '-').c_str(), std::string(7, '-').c_str(), std::string(6, '-').c_str(),
              std::string(9, '-').c_str(), std::string(15, '-').c_str(), std::string(9, '-').c_str(),
              std::string(7, '-').c_str(), std::string(7, '-').c_str(), std::string(7, '-').c_str());
}

// The peaks behind the compute column, one line per thread count, under the table.
void print_peak(const plan::ComputePeak& p) {
  std::printf("compute peak, %d threads: int8 %.2f TOPS (%s, %s), f32 %.2f TFLOP/s (%s)\n", p.threads,
              p.int8_ops_per_s / 1e12, p.int8_method.empty() ? "none" : p.int8_method.c_str(),
              p.int8_isa.c_str(), p.f32_flops_per_s / 1e12,
              p.f32_method.empty() ? "none" : p.f32_method.c_str());
}

void print_row(const ModelFacts& m, const Result& r) {
  char ts[48];
  std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.mean_ts(), r.sd_ts());
  char mb[16] = "-", bw[16] = "-", roof[16] = "-", compute[16] = "-";
  if (r.has_compute() && r.compute_pct() > 0) std::snprintf(compute, sizeof compute, "%.0f%%", r.compute_pct());
  if (r.bytes_per_token > 0) {
    std::snprintf(mb, sizeof mb, "%.1f", r.bytes_per_token / 1e6);
    if (r.bandwidth_gbs > 0) {
      std::snprintf(bw, sizeof bw, "%.1f", r.bandwidth_gbs);
      std::snprintf(roof, sizeof roof, "%.0f%%", r.roofline_pct());
    }
  }
  char params[32];
  if (m.n_params >= 1e9) std::snprintf(params, sizeof params, "%.2f B", m.n_params / 1e9);
  else std::snprintf(params, sizeof params, "%.2f M", m.n_params / 1e6);
  // printf pads by bytes: "±" is two bytes in one column, so its field is a byte wider.
  std::printf("| %-28s | %10s | %8s | %7d | %10s | %17s | %10s | %8s | %8s | %8s |\n", m.type.c_str(),
              format_size(m.size).c_str(), params, r.threads, r.test.c_str(), ts, mb, bw, roof, compute);
  std::fflush(stdout);
}

nlohmann::json to_json(const ModelFacts& m, const Result& r, int n_batch) {
  std::vector<int64_t> ns;
  std::vector<double> ts;
  double mean_ns = 0;
  for (double s : r.samples_ns) {
    ns.push_back(static_cast<int64_t>(s));
    ts.push_back(r.tokens / (s * 1e-9));
    mean_ns += s / r.samples_ns.size();
  }
  double sd_ns = 0;
  for (double s : r.samples_ns) sd_ns += (s - mean_ns) * (s - mean_ns);
  sd_ns = r.samples_ns.size() > 1 ? std::sqrt(sd_ns / (r.samples_ns.size() - 1)) : 0;
  nlohmann::json j = {{"model_filename", m.filename},
                      {"model_type", m.type},
                      {"model_size", m.size},
                      {"model_n_params", m.n_params},
                      {"n_prompt", r.n_prompt},
                      {"n_depth", r.depth},
                      {"n_gen", r.n_gen},
                      {"n_batch", n_batch},
                      {"n_seq", r.n_seq},
                      {"n_threads", r.threads},
                      {"test", r.test},
                      {"avg_ts", r.mean_ts()},
                      {"stddev_ts", r.sd_ts()},
                      {"samples_ts", ts},
                      {"samples_ns", ns},
                      {"avg_ns", static_cast<int64_t>(mean_ns)},
                      {"stddev_ns", static_cast<int64_t>(sd_ns)}};
  if (!r.step_ns.empty()) j["step_ns"] = r.step_ns;
  if (!r.spec_method.empty()) {
    j["spec_method"] = r.spec_method;
    j["spec_verify_steps"] = r.spec.steps;
    j["spec_draft_tokens"] = r.spec.drafted;
    j["spec_accepted_tokens"] = r.spec.accepted;
    j["spec_rejected_steps"] = r.spec.rejected;
    j["spec_alpha"] = r.spec.alpha();
    j["spec_mean_draft"] = r.spec.mean_draft();
    j["spec_tokens_per_step"] = r.spec.tokens_per_step();
    j["spec_plain_ts"] = r.plain_ts;
    j["spec_speedup"] = r.plain_ts > 0 ? r.mean_ts() / r.plain_ts : 0.0;
  }
  j["isa"] = r.peak.isa;
  j["kernels"] = nlohmann::json::object();
  for (const auto& [type, kernel] : m.kernels) j["kernels"][type] = kernel;
  if (r.has_compute()) {
    j["int8_ops_per_token"] = r.work_per_token.int8_ops;
    j["f32_ops_per_token"] = r.work_per_token.f32_ops;
    j["int8_peak_ops_per_s"] = r.peak.int8_ops_per_s;
    j["int8_peak_isa"] = r.peak.int8_isa;
    j["f32_peak_flops_per_s"] = r.peak.f32_flops_per_s;
    if (r.compute_pct() > 0) j["compute_pct"] = r.compute_pct();  // none without a peak (scalar)
  }
  if (r.bytes_per_token > 0) {
    j["bytes_per_token"] = r.bytes_per_token;
    j["bandwidth_gbs"] = r.bandwidth_gbs;
    j["roofline_pct"] = r.roofline_pct();
  }
  return j;
}

void check_positive(const std::vector<int>& values, const char* flag, bool allow_zero) {
  for (int v : values)
    if (v < 0 || (v == 0 && !allow_zero)) throw Error(str_cat(flag, " values must be ", allow_zero ? ">= 0" : "> 0", ", got ", v));
}

void bench(BenchOptions opt) {
  if (opt.reps < 1) throw Error(str_cat("-r must be >= 1, got ", opt.reps));
  if (opt.n_batch < 1) throw Error(str_cat("-b must be >= 1, got ", opt.n_batch));
  check_positive(opt.n_prompt, "-p", true);
  check_positive(opt.n_gen, "-n", true);
  check_positive(opt.depth, "-d", true);
  if (opt.depth.empty()) opt.depth = {0};
  const bool deep = *std::max_element(opt.depth.begin(), opt.depth.end()) > 0;
  if (deep && (opt.no_kv_cache || !opt.prompt_file.empty()))
    throw Error("-d puts a context in the cache first; it does not combine with --no-kv-cache or --prompt-file");
  check_positive(opt.threads, "-t", false);
  check_positive(opt.batch, "--batch", false);
  if (opt.no_kv_cache && !opt.batch.empty()) throw Error("--no-kv-cache measures one sequence; drop --batch");
  const SpecMethod spec_method = opt.spec.options().method;  // validates the flags
  const std::string kv_type(dtype_name(opt.kv.dtype()));     // validates --kv-type
  if (opt.no_kv_cache && (spec_method != SpecMethod::kNone || !opt.prompt_file.empty()))
    throw Error("--no-kv-cache recomputes from random tokens; drop --spec, --draft and --prompt-file");
  if (opt.threads.empty()) opt.threads = {static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  const std::string path = resolve_model_path(opt.model);

  const int max_prompt = opt.n_prompt.empty() ? 0 : *std::max_element(opt.n_prompt.begin(), opt.n_prompt.end());
  const int max_gen = opt.n_gen.empty() ? 0 : *std::max_element(opt.n_gen.begin(), opt.n_gen.end());
  const int max_seqs = opt.batch.empty() ? 1 : std::max(1, *std::max_element(opt.batch.begin(), opt.batch.end()));
  const int max_context = std::max({max_prompt, max_gen, 1});
  const int max_depth = *std::max_element(opt.depth.begin(), opt.depth.end());

  std::vector<Result> results;
  std::vector<plan::ComputePeak> peaks;  // one per thread count
  std::vector<std::string> tp_lines;      // all-reduce bytes measured, under --tp
  ModelFacts facts;
  bool header = false;
  std::unique_ptr<Communicator> comm = dist::start_mpi(opt.tp);
  for (int threads : opt.threads) {
    if (comm != nullptr && comm->rank() != 0) {  // serve rank 0's steps until its runner is done
      load_model_on_rank(path, runner_model_options(threads, opt.n_batch, max_seqs, opt, comm.get()), comm.get());
      continue;
    }
    Runner runner(path, threads, opt.n_batch, max_seqs, max_context, max_depth, opt, comm.get());
    if (!header) {
      facts = model_facts(path, runner.model());
      if (!opt.json) print_header(facts);
      header = true;
    }
    // Other processes only ever slow the probe down, so the best of a probe before and
    // one after the tests is the figure (see the tg rows below, which take it after).
    auto probe = [&] { return opt.no_bandwidth ? 0.0 : plan::measure_read_bandwidth_gbs(threads, size_t{512} << 20, 5); };
    double bandwidth = probe();
    // The compute peak likewise: the best of before and after, for every row that has one.
    auto compute_probe = [&] { return plan::measure_compute_peak(threads); };
    plan::ComputePeak peak = compute_probe();
    const ModelConfig& c = runner.model().config();
    std::vector<Result> done;  // printed after the second probes
    auto finish = [&](Result r) { done.push_back(std::move(r)); };
    for (int depth : opt.depth)
      for (int n_prompt : opt.n_prompt) {
        if (n_prompt == 0) continue;
        Result r;
        r.test = depth > 0 ? str_cat("pp", n_prompt, " @ d", depth) : str_cat("pp", n_prompt);
        r.n_prompt = n_prompt;
        r.depth = depth;
        r.threads = threads;
        r.tokens = n_prompt;
        r.work_per_token = matmul_work_per_token(facts, n_prompt);  // logits for the last token
        if (depth > 0) runner.prefill_depth(depth);
        const uint64_t reduced = comm != nullptr ? comm->all_reduce_bytes() : 0;
        runner.prompt(n_prompt, depth, opt.reps);  // warm-up, with the last fresh prompt
        for (int i = 0; i < opt.reps; ++i) r.samples_ns.push_back(runner.prompt(n_prompt, depth, i) * 1e9);
        if (comm != nullptr) {  // every prompt token went through every layer once
          const double per_token = double(comm->all_reduce_bytes() - reduced) / (double(n_prompt) * (opt.reps + 1));
          tp_lines.push_back(str_cat("tensor parallel, ", comm->size(), " ranks, ", r.test, ": all-reduce ",
                                     per_token, " bytes per token per rank (formula 2 x ", c.n_layer, " layers x ",
                                     c.n_embd, " x 4 bytes = ", 2.0 * c.n_layer * c.n_embd * 4, ")"));
        }
        finish(std::move(r));
      }
    std::vector<Result> generated;  // printed after the second bandwidth probe
    std::vector<int> seq_counts = {1};
    for (int b : opt.batch)
      if (b != 1) seq_counts.push_back(b);
    for (int depth : opt.depth)
    for (int n_gen : opt.n_gen) {
      if (n_gen == 0) continue;
      double kv = 0;
      for (int p = 0; p < n_gen; ++p) kv += kv_bytes_read(c, opt.kv.dtype(), depth + p) / n_gen;
      for (int n_seq : seq_counts) {
        for (bool speculative : {false, true}) {
          if (speculative && !runner.speculates()) continue;
          Result r;
          r.test = n_seq == 1 ? str_cat("tg", n_gen) : str_cat("tg", n_gen, " x", n_seq);
          if (depth > 0) r.test += str_cat(" @ d", depth);
          r.depth = depth;
          if (opt.no_kv_cache) r.test += " nocache";
          if (speculative) {
            r.spec_method = spec_method_name(opt.spec.options().method);
            r.test += str_cat(" ", r.spec_method);
          }
          r.n_gen = n_gen;
          r.n_seq = n_seq;
          r.threads = threads;
          // From a prompt the first token comes with the prefill, which is not timed.
          r.tokens = static_cast<double>(runner.has_prompt() && depth == 0 ? n_gen - 1 : n_gen) * n_seq;
          // Without the cache a step reads the weights once but computes every position:
          // it is no longer a bytes-per-token problem, so no roofline figure; nor with
          // speculation, which reads the weights once for several tokens.
          if (!opt.no_kv_cache && !speculative && !runner.has_prompt())
            r.bytes_per_token = facts.weight_bytes_per_step / n_seq + kv;
          // Batched decode is bound by arithmetic as n_seq grows (every token its logits);
          // without the cache a step computes every position, with speculation several.
          if (n_seq > 1 && !opt.no_kv_cache && !speculative) r.work_per_token = matmul_work_per_token(facts, 1);
          runner.generate(std::min(n_gen, 16), n_seq, !opt.no_kv_cache, nullptr, speculative, nullptr, depth);  // warm-up
          const uint64_t experts_before = runner.model().expert_bytes_read();
          std::vector<std::vector<double>> steps(opt.reps);
          for (int i = 0; i < opt.reps; ++i)
            r.samples_ns.push_back(
                runner.generate(n_gen, n_seq, !opt.no_kv_cache, &steps[i], speculative, &r.spec, depth) * 1e9);
          if (r.bytes_per_token > 0 && c.n_expert > 0) {
            // Mixture of experts: the experts the routers picked, as read (a batch's tokens
            // that share an expert share its bytes), beside the dense weights.
            const double experts = static_cast<double>(runner.model().expert_bytes_read() - experts_before);
            r.bytes_per_token = (facts.weight_bytes_per_step - runner.model().active_expert_bytes_per_step()) / n_seq +
                                experts / (opt.reps * r.tokens) + kv;
          }
          for (int p = 0; p < n_gen; ++p) {
            std::vector<double> at(opt.reps);
            for (int i = 0; i < opt.reps; ++i) at[i] = steps[i][p] * 1e9;
            std::nth_element(at.begin(), at.begin() + at.size() / 2, at.end());
            r.step_ns.push_back(at[at.size() / 2]);
          }
          if (speculative) r.plain_ts = generated.back().mean_ts();  // plain ran just before
          generated.push_back(std::move(r));
        }
      }
    }
    if (!generated.empty()) bandwidth = std::max(bandwidth, probe());
    const plan::ComputePeak after = compute_probe();
    peak.int8_ops_per_s = std::max(peak.int8_ops_per_s, after.int8_ops_per_s);
    peak.f32_flops_per_s = std::max(peak.f32_flops_per_s, after.f32_flops_per_s);
    peaks.push_back(peak);
    for (Result& r : generated) r.bandwidth_gbs = bandwidth;
    done.insert(done.end(), std::make_move_iterator(generated.begin()), std::make_move_iterator(generated.end()));
    for (Result& r : done) {
      r.peak = peak;
      if (!opt.json) print_row(facts, r);
      results.push_back(std::move(r));
    }
  }
  if (!opt.json) {
    std::printf("\n");
    for (const plan::ComputePeak& p : peaks) print_peak(p);
    for (const std::string& line : tp_lines) std::printf("%s\n", line.c_str());
  }
  if (!opt.json) {
    for (const Result& r : results) {
      if (r.spec_method.empty()) continue;
      const double g = r.spec.mean_draft(), a = r.spec.alpha();
      std::printf("\n%s: %.2fx plain (%.2f vs %.2f t/s); %lld of %lld drafted tokens accepted, alpha %.3f; "
                  "%.2f drafted and %.2f tokens per verifying step (formula (1 - a^(g+1)) / (1 - a): %.2f)\n",
                  r.test.c_str(), r.plain_ts > 0 ? r.mean_ts() / r.plain_ts : 0.0, r.mean_ts(), r.plain_ts,
                  static_cast<long long>(r.spec.accepted), static_cast<long long>(r.spec.drafted), a, g,
                  r.spec.tokens_per_step(), a >= 1.0 ? g + 1.0 : (1.0 - std::pow(a, g + 1.0)) / (1.0 - a));
    }
  }
  if (opt.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const Result& r : results) {
      all.push_back(to_json(facts, r, opt.n_batch));
      all.back()["type_k"] = all.back()["type_v"] = kv_type;  // llama-bench's names
    }
    std::printf("%s\n", all.dump(2).c_str());
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt and generation speed (like llama-bench) and the roofline");
  cmd->add_option("-m,--model", opt->model, "GGUF file or cached model name")->required();
  cmd->add_option("-d,--n-depth", opt->depth,
                  "Run every test after this many tokens of context are in the cache (comma-separated, llama-bench's -d)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-p,--n-prompt", opt->n_prompt, "Prompt lengths to test (comma-separated; 0: none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", opt->n_gen, "Generation lengths to test (comma-separated; 0: none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Thread counts (comma-separated; default: all cores)")->delimiter(',');
  cmd->add_option("-r,--repetitions", opt->reps, "Timed repetitions of each test")->capture_default_str();
  cmd->add_option("-b,--batch-size", opt->n_batch, "Most prompt tokens per forward step")->capture_default_str();
  cmd->add_option("--batch", opt->batch, "Decode with this many sequences per step too (comma-separated)")
      ->delimiter(',');
  cmd->add_flag("--json", opt->json, "Print a JSON list of results with llama-bench's field names");
  cmd->add_flag("--no-bandwidth", opt->no_bandwidth, "Skip the read-bandwidth probe (no roofline figures)");
  cmd->add_flag("--no-kv-cache", opt->no_kv_cache,
                "Generation recomputes every position each step, as without a KV cache (JSON step_ns shows "
                "per-position latency)");
  cmd->add_option("-f,--prompt-file", opt->prompt_file,
                  "tg continues this text (greedy), timed from its first generated token, instead of one random "
                  "token");
  add_speculative_flags(*cmd, opt->spec);
  add_weight_flags(*cmd, opt->weights);
  add_kv_flags(*cmd, opt->kv);
  add_tp_flag(*cmd, opt->tp);
  cmd->callback([opt] { bench(*opt); });
}

}  // namespace ridge::cli
