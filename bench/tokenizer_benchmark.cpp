// Tokenizer throughput: encode 1 MiB of wiki.test.raw with each vocabulary (bytes/s), and
// the time to build a Tokenizer from GGUF metadata. Real model vocabularies (Gemma 3,
// Qwen2.5) are used when scripts/fetch-models has fetched them.
//
//   build/bench/tokenizer_benchmark --benchmark_filter=Encode
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr size_t kTextBytes = 1 << 20;

const std::string& wiki_text() {
  static const std::string text = [] {
    std::ifstream in(std::string(RIDGE_FIXTURES) + "/text/wiki.test.raw", std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    std::string t = s.str();
    if (t.size() > kTextBytes) t.resize(kTextBytes);
    return t;
  }();
  return text;
}

// Fixture vocab GGUF, or a fetched model under $RIDGE_MODEL_CACHE / ~/.cache/ridge/models.
std::string vocab_path(const std::string& name) {
  namespace fs = std::filesystem;
  const std::string fixture = std::string(RIDGE_FIXTURES) + "/vocab/ggml-vocab-" + name + ".gguf";
  if (fs::exists(fixture)) return fixture;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("RIDGE_MODEL_CACHE")) roots.emplace_back(env);
  if (const char* home = std::getenv("HOME")) roots.emplace_back(fs::path(home) / ".cache/ridge/models");
  for (const fs::path& root : roots) {
    std::error_code ec;
    if (!fs::is_directory(root / name, ec)) continue;
    for (const auto& entry : fs::directory_iterator(root / name, ec)) {
      if (entry.path().extension() == ".gguf") return entry.path().string();
    }
  }
  return "";
}

const ridge::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ridge::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::unique_ptr<ridge::Tokenizer> tok;
    if (const std::string path = vocab_path(name); !path.empty()) {
      tok = std::make_unique<ridge::Tokenizer>(
          ridge::Tokenizer::from_gguf(ridge::gguf::File::open(path)));
    }
    it = cache.emplace(name, std::move(tok)).first;
  }
  return it->second.get();
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const ridge::Tokenizer* tok = tokenizer(name);
  if (tok == nullptr) {
    state.SkipWithError((name + " not available (scripts/fetch-models --path " + name + ")").c_str());
    return;
  }
  const std::string& text = wiki_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tok->encode(text, false, true);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const ridge::Tokenizer* tok = tokenizer(name);
  if (tok == nullptr) {
    state.SkipWithError((name + " not available").c_str());
    return;
  }
  const std::vector<int32_t> ids = tok->encode(wiki_text(), false, true);
  for (auto _ : state) {
    const std::string text = tok->decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * wiki_text().size()));
}

void BM_Load(benchmark::State& state, const std::string& name) {
  const std::string path = vocab_path(name);
  if (path.empty()) {
    state.SkipWithError((name + " not available").c_str());
    return;
  }
  const ridge::gguf::File file = ridge::gguf::File::open(path);
  for (auto _ : state) {
    ridge::Tokenizer tok = ridge::Tokenizer::from_gguf(file);
    benchmark::DoNotOptimize(&tok);
  }
}

void register_all() {
  for (const char* name : {"gpt-2", "llama-spm", "qwen2.5-coder-0.5b", "gemma3-270m"}) {
    benchmark::RegisterBenchmark((std::string("Encode/") + name).c_str(), BM_Encode, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("Decode/") + name).c_str(), BM_Decode, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("LoadVocab/") + name).c_str(), BM_Load, name)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
