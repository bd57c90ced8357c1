// `ridge run -m MODEL -p PROMPT -n N`: generates text and streams it to stdout; with
// --chat, an interactive conversation using the model's chat template. Only generated
// text goes to stdout (the prompt too with --echo); the KV cache size and the prompt and
// generation speeds go to stderr, like llama.cpp prints them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/generator.h"
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
  int32_t n_ctx = 0;
  int32_t batch = 512;
  double kv_budget_mib = 0;
  int64_t seed = -1;
  bool chat = false;
  bool echo = false;
  SamplingParams sampling;
};

void print_stats(const GenerationStats& s) {
  auto rate = [](int32_t n, double sec) { return sec > 0 ? n / sec : 0.0; };
  std::fprintf(stderr, "\nprompt eval: %5d tokens in %8.3f s (%8.2f tokens/s)\n", s.n_prompt, s.prompt_seconds,
               rate(s.n_prompt, s.prompt_seconds));
  std::fprintf(stderr, "generation:  %5d tokens in %8.3f s (%8.2f tokens/s)\n", s.n_generated, s.generate_seconds,
               rate(s.n_generated, s.generate_seconds));
}

bool write_stdout(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot open"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void check_text(const std::string& text, const char* what) {
  if (!unicode::is_valid_utf8(text)) throw Error(str_cat(what, " is not valid UTF-8"));
}

void run_once(Generator& gen, const Tokenizer& tok, const RunOptions& opt) {
  std::string prompt = opt.prompt_file.empty() ? opt.prompt : read_file(opt.prompt_file);
  if (prompt.empty()) throw Error("the prompt is empty: give -p TEXT or -f FILE");
  check_text(prompt, "the prompt");
  std::vector<int32_t> ids = tok.encode(prompt);
  if (opt.echo) write_stdout(prompt);
  GenerationStats s = gen.generate(ids, opt.n_predict, opt.sampling, write_stdout);
  write_stdout("\n");
  print_stats(s);
}

void run_chat(Generator& gen, const Tokenizer& tok, const ChatTemplate& tmpl, const RunOptions& opt) {
  std::vector<ChatMessage> messages;
  if (!opt.system.empty()) messages.push_back({"system", opt.system});
  std::fprintf(stderr, "chat (%s template); an empty line or Ctrl-D ends it\n",
               std::string(chat_format_name(tmpl.format)).c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    check_text(line, "the message");
    messages.push_back({"user", line});
    std::vector<int32_t> ids = tok.encode(apply_chat_template(tmpl, messages, true));
    // Feed only what the cache lacks; if the rendering diverged from what was generated
    // (re-tokenization), start the conversation over in the cache.
    std::vector<int32_t> known = gen.history();
    known.insert(known.end(), gen.pending().begin(), gen.pending().end());
    size_t common = 0;
    while (common < known.size() && common < ids.size() && known[common] == ids[common]) ++common;
    if (common < known.size() || common == ids.size()) {
      gen.reset();
      common = 0;
    }
    std::string reply;
    GenerationStats s = gen.generate(std::span(ids).subspan(common), opt.n_predict, opt.sampling,
                                     [&](std::string_view text) {
                                       reply += text;
                                       return write_stdout(text);
                                     });
    write_stdout("\n");
    print_stats(s);
    messages.push_back({"assistant", reply});
  }
}

void run(RunOptions opt) {
  if (opt.n_predict < 0) throw Error(str_cat("-n must be >= 0, got ", opt.n_predict));
  if (opt.kv_budget_mib < 0) throw Error("--kv-budget must be positive");
  opt.sampling.seed = opt.seed >= 0 ? static_cast<uint64_t>(opt.seed) : std::random_device{}();
  validate(opt.sampling);

  std::string path = resolve_model_path(opt.model);
  auto model = Model::load(path, {.n_threads = opt.threads, .max_batch_tokens = opt.batch});
  Tokenizer tok = Tokenizer::from_gguf(model->file());
  std::fprintf(stderr, "model: %s (%s)\n", path.c_str(), model->config().summary().c_str());
  GeneratorOptions gen_opt;
  gen_opt.n_ctx = opt.n_ctx;
  gen_opt.kv_budget_bytes = static_cast<size_t>(opt.kv_budget_mib * 1024 * 1024);
  Generator gen(*model, tok, gen_opt);
  std::fprintf(stderr, "%s; context %d tokens; %d threads\n", gen.cache().summary().c_str(), gen.n_ctx(),
               model->pool().n_threads());
  if (opt.chat)
    run_chat(gen, tok, detect_chat_template(model->file()), opt);
  else
    run_once(gen, tok, opt);
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
  cmd->add_option("-n,--n-predict", opt->n_predict, "Tokens to generate")->capture_default_str();
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
  cmd->callback([opt] { run(*opt); });
}

}  // namespace ridge::cli
