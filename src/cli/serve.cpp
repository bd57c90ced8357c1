// `ridge serve -m MODEL --port 8080`: the OpenAI-compatible HTTP server (src/server) over
// the continuous-batching engine. Logs go to stderr; Ctrl-C or SIGTERM stops it cleanly
// (requests in flight end, the engine loop joins).
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/speculative_flags.h"
#include "cli/kv_flags.h"
#include "cli/tp_flags.h"
#include "cli/weight_flags.h"
#include "core/error.h"
#include "dist/mpi.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"

namespace ridge::cli {
namespace {

// Ctrl-C and SIGTERM: the handler only writes the signal's number to a pipe, which a
// waiter thread reads to stop the server. (A handler, not sigwait with the signals
// blocked: libraries start threads of their own before main, OpenBLAS its pool, and a
// signal delivered to one of those would take its default action and kill the process
// in the middle of every response.)
int g_stop_pipe[2] = {-1, -1};

void on_stop_signal(int sig) {
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_stop_pipe[1], &byte, 1);
}

void install_stop_handlers() {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) throw Error(str_cat("serve: pipe failed: ", std::strerror(errno)));
  handle_stop_signals(on_stop_signal);
}

// Blocks until a stop signal (its number) or wake_stop_waiter (0).
int wait_for_stop_signal() {
  unsigned char byte = 0;
  while (::read(g_stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

void wake_stop_waiter() {
  const unsigned char zero = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_stop_pipe[1], &zero, 1);
}

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t parallel = 8;
  int32_t max_batch_tokens = 256;
  double kv_budget_mib = 0;
  int32_t n_ctx = 0;
  int threads = 0;
  int tp = 1;  // tensor-parallel ranks
  std::string api_key;
  int32_t max_queue = 64;
  size_t max_body_bytes = 8u << 20;
  int32_t max_prompt_tokens = 0;
  std::string alias;
  int32_t max_connections = 512;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double idle_timeout_s = 5;
  std::vector<std::string> cors_origins;
  bool no_prefix_cache = false;
  int32_t state_checkpoints = -1;  // hybrids: -1 auto (parallel + 1)
  SpeculativeFlags spec;
  WeightFlags weights;
  KvFlags kv;
};

// The name clients use for the model: --alias, else the model argument without its
// directory and .gguf ("gemma3-270m", "stories260K").
std::string model_name(const ServeOptions& opt) {
  if (!opt.alias.empty()) return opt.alias;
  std::filesystem::path p(opt.model);
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

void serve(const ServeOptions& opt) {
  if (opt.parallel < 1) throw Error(str_cat("--parallel must be >= 1, got ", opt.parallel));
  if (opt.max_batch_tokens < 1) throw Error(str_cat("--max-batch-tokens must be >= 1, got ", opt.max_batch_tokens));
  if (opt.kv_budget_mib < 0) throw Error("--kv-budget must be positive");
  if (opt.max_queue < 0) throw Error(str_cat("--max-queue must be >= 0, got ", opt.max_queue));
  if (opt.max_connections < 1) throw Error(str_cat("--max-connections must be >= 1, got ", opt.max_connections));
  for (double t : {opt.header_timeout_s, opt.body_timeout_s, opt.idle_timeout_s})
    if (!(t > 0 && t <= 3600)) throw Error(str_cat("--header/--body/--idle-timeout must be in (0, 3600] seconds, got ", t));
  if (opt.port < 0 || opt.port > 65535) throw Error(str_cat("--port must be in 0..65535, got ", opt.port));

  // A client that disconnects must not kill the process with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);

  std::string path = resolve_model_path(opt.model);
  std::unique_ptr<Communicator> comm = dist::start_mpi(opt.tp);
  auto model = load_model_on_rank(path,
                                  {.n_threads = opt.threads,
                                   .max_batch_tokens = opt.max_batch_tokens,
                                   .weights = opt.weights.format_for_load(),
                                   .n_ctx = opt.n_ctx},
                                  comm.get());
  if (!model) return;
  // Only here, on the serving rank: a tensor-parallel worker ends on mpirun's SIGTERM as
  // any process does, and Ctrl-C while loading just ends the process.
  install_stop_handlers();
  Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  std::optional<ChatTemplate> chat_template;
  try {
    chat_template = detect_chat_template(model->file());
    if (chat_template->parse_error)
      std::fprintf(stderr, "serve: the model's chat template does not parse (%s); /v1/chat/completions will answer 500\n",
                   chat_template->parse_error->what());
  } catch (const Error& e) {
    std::fprintf(stderr, "serve: no chat template (%s); /v1/chat/completions will answer 400\n", e.what());
  }

  EngineOptions engine_options;
  engine_options.parallel = opt.parallel;
  engine_options.max_batch_tokens = opt.max_batch_tokens;
  engine_options.kv_budget_bytes = static_cast<size_t>(opt.kv_budget_mib * 1024 * 1024);
  engine_options.n_ctx = opt.n_ctx;
  engine_options.max_queue = opt.max_queue;
  engine_options.prefix_cache = !opt.no_prefix_cache;
  engine_options.state_checkpoints = opt.state_checkpoints;
  engine_options.kv_type = opt.kv.dtype();
  engine_options.speculative = opt.spec.options();
  std::unique_ptr<Model> draft = opt.spec.load_draft(*model);
  Engine engine(*model, tokenizer, engine_options, draft.get());

  server::ServerOptions server_options;
  server_options.host = opt.host;
  server_options.port = opt.port;
  server_options.model_name = model_name(opt);
  server_options.api_key = opt.api_key;
  server_options.max_body_bytes = opt.max_body_bytes;
  server_options.max_prompt_tokens = opt.max_prompt_tokens;
  // Every running or queued request holds an HTTP thread while it streams; a few more
  // keep /health and /metrics answering (and refuse the rest with 429) at full load.
  server_options.n_http_threads = opt.parallel + opt.max_queue + 8;
  server_options.max_connections = opt.max_connections;
  server_options.header_timeout_ms = static_cast<int32_t>(opt.header_timeout_s * 1000);
  server_options.body_timeout_ms = static_cast<int32_t>(opt.body_timeout_s * 1000);
  server_options.idle_timeout_ms = static_cast<int32_t>(opt.idle_timeout_s * 1000);
  server_options.cors_origins = opt.cors_origins;
  server::Server server(engine, chat_template, server_options);
  int port = server.bind();

  engine.start();
  EngineMetrics m = engine.metrics();
  std::fprintf(stderr, "model: %s (%s)\n", path.c_str(), model->config().summary().c_str());
  std::fprintf(stderr, "kernels: %s\n", model->kernel_summary().c_str());
  std::fprintf(stderr, "engine: %d parallel, context %d (%d per request), %d KV blocks, %d tokens per step, %d threads%s",
               opt.parallel, engine.limits().n_ctx, engine.limits().max_request_tokens, m.kv_blocks_total,
               opt.max_batch_tokens, model->pool().n_threads(), opt.no_prefix_cache ? ", prefix cache off" : "");
  if (engine_options.speculative.method != SpecMethod::kNone)
    std::fprintf(stderr, ", speculative %s (up to %d drafted)", spec_method_name(engine_options.speculative.method),
                 engine_options.speculative.draft_max);
  std::fprintf(stderr, "\n%s\n%s\n", engine.kv_summary().c_str(), engine.kv_budget_by_type().c_str());
  if (const std::string w = engine.context_warning(); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  std::fprintf(stderr, "serve: model '%s'%s; listening on http://%s:%d\n", server_options.model_name.c_str(),
               opt.api_key.empty() ? "" : " (API key required)", opt.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> signalled = false;
  std::thread signal_waiter([&] {
    const int sig = wait_for_stop_signal();
    if (sig == 0) return;
    signalled = true;
    std::fprintf(stderr, "serve: signal %d, stopping\n", sig);
    // The engine first: it ends every unfinished request (their clients get an error
    // event), so the HTTP threads streaming them return and the server can join them.
    engine.stop();
    server.stop();
  });
  server.run();
  // run() also returns if listening fails; wake the waiter so it can be joined.
  if (!signalled) wake_stop_waiter();
  signal_waiter.join();
  engine.stop();
  std::fprintf(stderr, "serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto opt = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a chat page");
  cmd->add_option("-m,--model", opt->model, "GGUF file or cached model name")->required();
  cmd->add_option("--host", opt->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", opt->port, "Port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--parallel", opt->parallel, "Most requests generating at once")->capture_default_str();
  cmd->add_option("--max-batch-tokens", opt->max_batch_tokens, "Token budget of one engine step")
      ->capture_default_str();
  cmd->add_option("--kv-budget", opt->kv_budget_mib, "KV cache memory in MiB (0: enough for --parallel contexts)");
  cmd->add_option("-c,--ctx-size", opt->n_ctx, "Context per request in tokens (0: model's, capped at 8192)");
  cmd->add_option("-t,--threads", opt->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--api-key", opt->api_key, "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize");
  cmd->add_option("--max-queue", opt->max_queue, "Waiting requests beyond this get 429")->capture_default_str();
  cmd->add_option("--max-body-bytes", opt->max_body_bytes, "Larger request bodies get 413")->capture_default_str();
  cmd->add_option("--max-prompt-tokens", opt->max_prompt_tokens, "Longer prompts get 400 (0: context only)")
      ->capture_default_str();
  cmd->add_option("--max-connections", opt->max_connections,
                  "Open connections at once, idle or not; more get 503")
      ->capture_default_str();
  cmd->add_option("--header-timeout", opt->header_timeout_s, "Seconds a request's headers may take in all (408 after)")
      ->capture_default_str();
  cmd->add_option("--body-timeout", opt->body_timeout_s, "Seconds a request's body may take in all (408 after)")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", opt->idle_timeout_s, "Seconds a keep-alive connection may wait for its next request")
      ->capture_default_str();
  cmd->add_option("--cors-origin", opt->cors_origins,
                  "Origin a browser page may call the API from (repeatable; '*' for any). Default: none");
  cmd->add_option("--alias", opt->alias, "Model id clients use (default: the model file's name)");
  cmd->add_flag("--no-prefix-cache", opt->no_prefix_cache, "Do not reuse KV blocks of shared prompt prefixes");
  cmd->add_option("--state-checkpoints", opt->state_checkpoints,
                  "Hybrid models: recurrent states kept at block boundaries for prefix reuse (-1: parallel + 1; "
                  "0: no prefix reuse)")
      ->capture_default_str();
  add_speculative_flags(*cmd, opt->spec);
  add_weight_flags(*cmd, opt->weights);
  add_kv_flags(*cmd, opt->kv);
  add_tp_flag(*cmd, opt->tp);
  cmd->callback([opt] { serve(*opt); });
}

}  // namespace ridge::cli
