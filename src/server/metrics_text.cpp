#include "server/metrics_text.h"

#include <cstdio>

#include "core/error.h"

namespace ridge::server {
namespace {

// Counters print as integers, other values as the shortest text that reads back exactly.
std::string number(double x) {
  char buf[32];
  if (x == static_cast<double>(static_cast<long long>(x)) && x > -1e15 && x < 1e15) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x));
    return buf;
  }
  double back = 0;
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::sscanf(buf, "%lf", &back) == 1 && back == x) break;
  }
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

template <class T>
void metric(std::string& out, const char* name, const char* type, const char* help, T value) {
  header(out, name, type, help);
  out += str_cat(name, " ", number(static_cast<double>(value)), "\n");
}

void histogram(std::string& out, const char* name, const char* help, const std::vector<double>& bounds,
               const std::vector<uint64_t>& counts, double sum, uint64_t count) {
  header(out, name, "histogram", help);
  for (size_t i = 0; i < bounds.size() && i < counts.size(); ++i)
    out += str_cat(name, "_bucket{le=\"", number(bounds[i]), "\"} ", counts[i], "\n");
  out += str_cat(name, "_bucket{le=\"+Inf\"} ", count, "\n");
  out += str_cat(name, "_sum ", number(sum), "\n");
  out += str_cat(name, "_count ", count, "\n");
}

}  // namespace

std::string render_metrics(const EngineMetrics& m, const std::map<int, uint64_t>& http_responses) {
  std::string out;
  metric(out, "ridge_requests_running", "gauge", "Requests with a sequence in the running batch.", m.requests_running);
  metric(out, "ridge_requests_waiting", "gauge", "Requests queued for admission (including preempted ones).",
         m.requests_waiting);
  metric(out, "ridge_kv_blocks_total", "gauge", "KV cache blocks in all pools.", m.kv_blocks_total);
  metric(out, "ridge_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", m.kv_blocks_used);
  metric(out, "ridge_kv_blocks_free", "gauge", "KV cache blocks not held by any sequence (cached ones included).",
         m.kv_blocks_total - m.kv_blocks_used);
  metric(out, "ridge_kv_blocks_cached", "gauge", "Free KV blocks still holding reusable prefix content.",
         m.kv_blocks_cached);
  metric(out, "ridge_prefix_cache_queries_total", "counter", "Prompt blocks looked up in the prefix cache.",
         m.prefix_cache_queries);
  metric(out, "ridge_prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.",
         m.prefix_cache_hits);
  double rate = m.prefix_cache_queries == 0
                    ? 0.0
                    : static_cast<double>(m.prefix_cache_hits) / static_cast<double>(m.prefix_cache_queries);
  metric(out, "ridge_prefix_cache_hit_rate", "gauge", "Prefix cache hits / queries since start.", rate);
  metric(out, "ridge_prefix_state_checkpoints_total", "counter",
         "Recurrent states saved at block boundaries for prefix reuse (hybrid models).", m.prefix_state_checkpoints);
  metric(out, "ridge_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", m.prompt_tokens_total);
  metric(out, "ridge_generation_tokens_total", "counter", "Tokens generated.", m.generation_tokens_total);
  metric(out, "ridge_requests_finished_total", "counter", "Requests finished (any reason).",
         m.requests_finished_total);
  metric(out, "ridge_preemptions_total", "counter", "Sequences preempted (blocks freed, recomputed later).",
         m.preemptions_total);
  histogram(out, "ridge_time_to_first_token_seconds", "Time from submission to the first generated token.",
            m.latency_buckets, m.ttft_counts, m.ttft_sum, m.ttft_count);
  histogram(out, "ridge_inter_token_latency_seconds",
            "Time between consecutive events of a request (one step; with speculative decoding it may carry "
            "several tokens).",
            m.latency_buckets, m.itl_counts, m.itl_sum, m.itl_count);
  if (m.spec_method != SpecMethod::kNone) {  // vLLM's spec_decode counters, by proposer
    const std::string label = str_cat("{proposer=\"", spec_method_name(m.spec_method), "\"} ");
    auto counter = [&](const char* name, const char* help, uint64_t value) {
      header(out, name, "counter", help);
      out += str_cat(name, label, value, "\n");
    };
    if (m.spec_method == SpecMethod::kDraftModel)
      metric(out, "ridge_draft_kv_blocks_used", "gauge", "The draft model's KV cache blocks held by sequences.",
             m.draft_kv_blocks_used);
    counter("ridge_spec_decode_num_drafts_total", "Verification steps of a non-empty draft.", m.spec_drafts_total);
    counter("ridge_spec_decode_num_draft_tokens_total", "Tokens drafted and verified.", m.spec_draft_tokens_total);
    counter("ridge_spec_decode_num_accepted_tokens_total", "Drafted tokens the target accepted.",
            m.spec_accepted_tokens_total);
  }
  header(out, "ridge_http_responses_total", "counter", "HTTP responses sent, by status code.");
  for (const auto& [status, count] : http_responses)
    out += str_cat("ridge_http_responses_total{code=\"", status, "\"} ", count, "\n");
  return out;
}

}  // namespace ridge::server
