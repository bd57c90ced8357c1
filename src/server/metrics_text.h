// /metrics in the Prometheus text exposition format (version 0.0.4): engine gauges and
// counters, the prefix-cache hit rate, and the latency histograms, each with HELP/TYPE.
//
//   std::string body = render_metrics(engine.metrics(), http_counts);
//   res.set_content(body, kPrometheusContentType);
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/engine.h"

namespace ridge::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// http_responses: responses sent so far by HTTP status code (ridge_http_responses_total).
std::string render_metrics(const EngineMetrics& metrics, const std::map<int, uint64_t>& http_responses);

}  // namespace ridge::server
