// Pre-tokenizer throughput in bytes of English text per second: 1 MiB of wiki.test.raw split
// by the hand-written GPT-2 / Llama 3 / Qwen 2 paths and by the regex engine (the same
// patterns with fast paths off, and pre-tokenizers that only have regexes).
//
//   build-*/bench/pretokenizer_benchmark --benchmark_filter=Split
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/pretokenizer.h"

namespace ridge {
namespace {

const std::string& one_mebibyte_of_english() {
  static const std::string text = [] {
    std::ifstream in(std::string(RIDGE_FIXTURES) + "/text/wiki.test.raw", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string wiki = ss.str();
    std::string out;
    while (!wiki.empty() && out.size() < (1u << 20)) out += wiki;
    out.resize(std::min<size_t>(out.size(), 1u << 20));
    return out;
  }();
  return text;
}

void BM_Split(benchmark::State& state, const char* name, bool fast_paths) {
  const std::string& text = one_mebibyte_of_english();
  if (text.empty()) {
    state.SkipWithError("fixtures/text/wiki.test.raw not found");
    return;
  }
  PreTokenizer pre = PreTokenizer::for_name(name);
  if (!fast_paths) pre = PreTokenizer::from_patterns(name, pre.patterns(), false);
  size_t pieces = 0;
  for (auto _ : state) {
    const auto split = pre.split(text);
    pieces = split.size();
    benchmark::DoNotOptimize(split.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["pieces"] = static_cast<double>(pieces);
}

BENCHMARK_CAPTURE(BM_Split, gpt2, "gpt-2", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, llama3, "llama-bpe", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, qwen2, "qwen2", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, gpt2_regex, "gpt-2", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, llama3_regex, "llama-bpe", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, qwen2_regex, "qwen2", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, gpt4o_regex, "gpt-4o", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, deepseek_v3_regex, "deepseek-v3", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Split, starcoder_mixed, "starcoder", true)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ridge

BENCHMARK_MAIN();
