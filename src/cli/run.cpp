// `ridge run -m MODEL -p PROMPT -n N`: generates text and streams it to stdout; with
// --chat, an interactive conversation using the model's chat template. Only generated
// text goes to stdout (the prompt too with --echo); the KV cache size and the prompt and
// generation speeds go to stderr, like llama.cpp prints them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/speculative_flags.h"
#include "cli/kv_flags.h"
#include "cli/tp_flags.h"
#include "cli/weight_flags.h"
#include "core/error.h"
#include "dist/mpi.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/unicode.h"

namespace ridge::cli {
namespace {

struct RunOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  int32_t n_predict = 128;
  int threads = 0;
  int tp = 1;  // tensor-parallel ranks
  int32_t n_ctx = 0;
  int32_t batch = 512;
  double kv_budget_mib = 0;
  int64_t seed = -1;
  bool chat = false;
  bool echo = false;
  SamplingParams sampling;
  SpeculativeFlags spec;
  WeightFlags weights;
  KvFlags kv;
};

// What one request took, as the client sees it: the prompt until the first token, then
// the rest of the tokens.
struct RunStats {
  int32_t n_prompt = 0;
  int32_t n_cached = 0;  // prompt tokens the prefix cache served (a chat's earlier turns)
  int32_t n_generated = 0;
  double prompt_seconds = 0;    // submit to first token
  double generate_seconds = 0;  // first token to last
  int32_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0, spec_rejected = 0;
};

void print_stats(const RunStats& s) {
  auto rate = [](int32_t n, double sec) { return sec > 0 ? n / sec : 0.0; };
  const int32_t n_computed = s.n_prompt - s.n_cached;
  std::fprintf(stderr, "\nprompt eval: %5d tokens in %8.3f s (%8.2f tokens/s)", n_computed, s.prompt_seconds,
               rate(n_computed, s.prompt_seconds));
  if (s.n_cached > 0) std::fprintf(stderr, "; %d more from the prefix cache", s.n_cached);
  const int32_t n_after_first = std::max(s.n_generated - 1, 0);
  std::fprintf(stderr, "\ngeneration:  %5d tokens in %8.3f s (%8.2f tokens/s)\n", s.n_generated, s.generate_seconds,
               rate(n_after_first, s.generate_seconds));
  if (s.spec_steps > 0) {
    // alpha: each verification is trials up to its first rejection. Tokens per target pass
    // over the verifying passes: accepted + one each; the formula at the mean draft length.
    const double alpha = static_cast<double>(s.spec_accepted) / std::max(s.spec_accepted + s.spec_rejected, 1);
    const double gamma = static_cast<double>(s.spec_drafted) / s.spec_steps;
    const double formula = alpha >= 1.0 ? gamma + 1.0 : (1.0 - std::pow(alpha, gamma + 1.0)) / (1.0 - alpha);
    std::fprintf(stderr,
                 "speculative: %d drafted, %d accepted (%.1f%%), alpha %.3f; %.2f tokens per verifying step over %d "
                 "steps (formula at gamma %.2f: %.2f)\n",
                 s.spec_drafted, s.spec_accepted, 100.0 * s.spec_accepted / std::max(s.spec_drafted, 1), alpha,
                 static_cast<double>(s.spec_accepted + s.spec_steps) / s.spec_steps, s.spec_steps, gamma, formula);
  }
}

bool write_stdout(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

void check_text(const std::string& text, const char* what) {
  if (!unicode::is_valid_utf8(text)) throw Error(str_cat(what, " is not valid UTF-8"));
}

// Runs one request on the engine, streaming its text through on_text.
RunStats generate(Engine& engine, std::vector<int32_t> prompt, const RunOptions& opt,
                  const std::function<void(std::string_view)>& on_text) {
  using Clock = std::chrono::steady_clock;
  RequestParams params;
  params.prompt = std::move(prompt);
  params.max_tokens = opt.n_predict < 0 ? 0 : opt.n_predict;  // 0: up to the context
  // -n past the context stops where the context is full, as llama.cpp's CLI does (the
  // server answers 400 instead: a client asked for what cannot fit).
  const EngineLimits& limits = engine.limits();
  const int64_t room = int64_t{limits.max_request_tokens} - static_cast<int64_t>(params.prompt.size());
  if (params.max_tokens > room && room > 0) {
    std::fprintf(stderr, "run: -n %d is past %s (%d tokens, %zu of them the prompt): generating at most %lld\n",
                 params.max_tokens,
                 limits.max_request_tokens < limits.n_ctx ? "what the KV cache holds for one request" : "the context",
                 limits.max_request_tokens, params.prompt.size(), static_cast<long long>(room));
    params.max_tokens = static_cast<int32_t>(room);
  }
  params.sampling = opt.sampling;
  RunStats stats;
  stats.n_prompt = static_cast<int32_t>(params.prompt.size());
  const Clock::time_point start = Clock::now();
  Clock::time_point first;
  std::shared_ptr<RequestStream> stream = engine.submit(std::move(params));
  bool cancelled = false;
  for (StreamEvent ev;;) {
    // Ctrl-C ends the request; its end (and the text so far) still comes through here.
    if (interrupted() && !cancelled) {
      stream->cancel();
      cancelled = true;
    }
    bool timed_out = false;
    if (!stream->next_for(ev, std::chrono::milliseconds(100), timed_out)) {
      if (timed_out) continue;
      break;
    }
    if (stats.n_generated == 0 && ev.completion_tokens > 0) first = Clock::now();
    on_text(ev.text);
    stats.n_generated = ev.completion_tokens;
    stats.n_cached = ev.cached_prompt_tokens;
    stats.spec_steps = ev.spec_steps;
    stats.spec_drafted = ev.spec_drafted;
    stats.spec_accepted = ev.spec_accepted;
    stats.spec_rejected = ev.spec_rejected;
    if (ev.finished && ev.finish_reason == FinishReason::kError) throw Error(str_cat("generation failed: ", ev.error));
  }
  const Clock::time_point end = Clock::now();
  if (stats.n_generated > 0) {
    stats.prompt_seconds = std::chrono::duration<double>(first - start).count();
    stats.generate_seconds = std::chrono::duration<double>(end - first).count();
  }
  return stats;
}

void run_once(Engine& engine, const Tokenizer& tok, const RunOptions& opt) {
  std::string prompt = opt.prompt_file.empty() ? opt.prompt : read_text_file(opt.prompt_file);
  if (prompt.empty()) throw Error("the prompt is empty: give -p TEXT or -f FILE");
  check_text(prompt, "the prompt");
  std::vector<int32_t> ids = tok.encode(prompt);
  if (opt.echo) write_stdout(prompt);
  RunStats s = generate(engine, std::move(ids), opt, write_stdout);
  write_stdout("\n");
  print_stats(s);
  if (interrupted()) throw Interrupted("run");
}

// Each turn is one request holding the whole conversation; the prefix cache still holds
// the earlier turns' blocks (freed blocks keep their K/V until the pool needs them), so
// only the new message and the last partial block are computed.
void run_chat(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, const RunOptions& opt) {
  if (tmpl.parse_error) throw *tmpl.parse_error;
  std::vector<ChatMessage> messages;
  if (!opt.system.empty()) messages.push_back({"system", opt.system});
  std::fprintf(stderr, "chat (%s template); an empty line or Ctrl-D ends it\n",
               std::string(chat_template_name(tmpl)).c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    if (interrupted()) throw Interrupted("run");  // Ctrl-C typed at the prompt ends the chat here
    check_text(line, "the message");
    messages.push_back({"user", line});
    std::vector<int32_t> ids = tok.encode(apply_chat_template(tmpl, messages, true), /*add_special=*/true,
                                          /*parse_special=*/true);
    std::string reply;
    RunStats s = generate(engine, std::move(ids), opt, [&](std::string_view text) {
      reply += text;
      write_stdout(text);
    });
    write_stdout("\n");
    print_stats(s);
    if (interrupted()) throw Interrupted("run");
    messages.push_back({"assistant", reply});
  }
}

void run(RunOptions opt) {
  if (opt.n_predict < -1 || opt.n_predict == 0)
    throw Error(str_cat("-n must be >= 1, or -1 for up to the context; got ", opt.n_predict));
  if (opt.kv_budget_mib < 0) throw Error("--kv-budget must be positive");
  opt.sampling.seed = opt.seed >= 0 ? static_cast<uint64_t>(opt.seed) : std::random_device{}();
  validate(opt.sampling);

  std::string path = resolve_model_path(opt.model);
  std::unique_ptr<Communicator> comm = dist::start_mpi(opt.tp);
  auto model = load_model_on_rank(path,
                                  {.n_threads = opt.threads,
                                   .max_batch_tokens = opt.batch,
                                   .weights = opt.weights.format_for_load(),
                                   .n_ctx = opt.n_ctx},
                                  comm.get());
  if (!model) return;
  Tokenizer tok = Tokenizer::from_gguf(model->file());
  std::fprintf(stderr, "model: %s (%s)\n", path.c_str(), model->config().summary().c_str());
  std::fprintf(stderr, "kernels: %s\n", model->kernel_summary().c_str());
  EngineOptions engine_options;
  engine_options.parallel = 1;
  engine_options.max_batch_tokens = opt.batch;
  engine_options.n_ctx = opt.n_ctx;
  engine_options.kv_budget_bytes = static_cast<size_t>(opt.kv_budget_mib * 1024 * 1024);
  engine_options.kv_type = opt.kv.dtype();
  engine_options.speculative = opt.spec.options();
  std::unique_ptr<Model> draft = opt.spec.load_draft(*model);
  if (draft) std::fprintf(stderr, "draft: %s\n", draft->config().summary().c_str());
  Engine engine(*model, tok, engine_options, draft.get());
  std::fprintf(stderr, "%s; context %d tokens; %d threads\n", engine.kv_summary().c_str(),
               engine.limits().max_request_tokens, model->pool().n_threads());
  if (const std::string w = engine.context_warning(); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  catch_interrupts();
  engine.start();
  try {
    if (opt.chat)
      run_chat(engine, tok, detect_chat_template(model->file()), opt);
    else
      run_once(engine, tok, opt);
  } catch (const EngineError& e) {
    throw Error(e.what());
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  opt->sampling.temperature = 0.8f;
  opt->sampling.top_k = 40;
  opt->sampling.top_p = 0.95f;
  opt->sampling.min_p = 0.05f;
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, or chat");
  cmd->add_option("-m,--model", opt->model, "GGUF file or cached model name")->required();
  cmd->add_option("-p,--prompt", opt->prompt, "Prompt text");
  cmd->add_option("-f,--file", opt->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", opt->n_predict, "Tokens to generate (-1: up to the context)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", opt->n_ctx, "Context size in tokens (0: model's, capped at 8192)");
  cmd->add_option("-b,--batch-size", opt->batch, "Most tokens per forward step (prefill chunk)")->capture_default_str();
  cmd->add_option("--kv-budget", opt->kv_budget_mib, "KV cache memory in MiB (0: enough for the context)");
  cmd->add_option("-s,--seed", opt->seed, "RNG seed (-1: random)")->capture_default_str();
  cmd->add_option("--temp", opt->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", opt->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", opt->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", opt->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", opt->sampling.repetition_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", opt->sampling.repeat_last_n, "Tokens the penalties look back over")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", opt->sampling.presence_penalty, "Presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", opt->sampling.frequency_penalty, "Frequency penalty")->capture_default_str();
  cmd->add_flag("--chat", opt->chat, "Interactive chat with the model's chat template");
  cmd->add_option("--system", opt->system, "System message for --chat");
  cmd->add_flag("--echo", opt->echo, "Print the prompt before the generated text");
  add_speculative_flags(*cmd, opt->spec);
  add_weight_flags(*cmd, opt->weights);
  add_kv_flags(*cmd, opt->kv);
  add_tp_flag(*cmd, opt->tp);
  cmd->callback([opt] { run(*opt); });
}

}  // namespace ridge::cli
