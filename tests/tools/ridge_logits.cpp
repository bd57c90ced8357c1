// Test tool: runs token ids through ridge's forward pass and writes the logits of chosen
// rows (float32, row-major) to a file, and optionally continues greedily; the Python
// reference tests compare both with the float64 numpy reference.
//
//   ridge_logits MODEL --tokens 2,818,5279 --rows 0,2 --out logits.f32 [--greedy 32] [--batch 64] [--exact 1]
//
// --exact 1 runs every matmul on dequantized weights in f32 (MatmulMode::kFloat) instead
// of the default 8-bit activation kernels, for comparisons that should agree to rounding.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/gemm/gemm.h"
#include "model/model.h"

namespace {

std::vector<int32_t> parse_list(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<int32_t>(std::stol(item)));
  return out;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ridge_logits MODEL --tokens IDS [--rows IDS|all|last] [--out FILE] "
                         "[--greedy N] [--batch B] [--threads T]\n");
    return 2;
  }
  std::string model_path = argv[1], rows_arg = "last", out_path;
  std::vector<int32_t> tokens;
  int greedy = 0, batch = 512, threads = 0;
  bool exact = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tokens") tokens = parse_list(value);
    else if (flag == "--rows") rows_arg = value;
    else if (flag == "--out") out_path = value;
    else if (flag == "--greedy") greedy = std::atoi(value.c_str());
    else if (flag == "--batch") batch = std::atoi(value.c_str());
    else if (flag == "--threads") threads = std::atoi(value.c_str());
    else if (flag == "--exact") exact = value == "1";
    else throw ridge::Error("unknown flag " + flag);
  }
  if (tokens.empty()) throw ridge::Error("--tokens is empty");
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> rows;
  if (rows_arg == "all") {
    for (int32_t i = 0; i < n; ++i) rows.push_back(i);
  } else if (rows_arg == "last") {
    rows.push_back(n - 1);
  } else {
    rows = parse_list(rows_arg);
  }

  if (exact) ridge::kernels::set_matmul_mode(ridge::kernels::MatmulMode::kFloat);
  auto model = ridge::Model::load(model_path, {.n_threads = threads, .max_batch_tokens = batch});
  const int32_t n_vocab = model->config().n_vocab;
  ridge::KvCache cache(model->kv_cache_config(size_t{1} << 30, 1, n + greedy + 16));
  cache.add_sequence(0);

  // Prefill in chunks of `batch`, keeping the logits of the requested rows.
  std::vector<float> wanted(rows.size() * n_vocab), chunk_logits(static_cast<size_t>(batch) * n_vocab);
  std::vector<float> last(n_vocab);
  for (int32_t start = 0; start < n; start += batch) {
    const int32_t len = std::min(batch, n - start);
    if (!cache.reserve(0, len)) throw ridge::Error("KV cache too small");
    ridge::Batch b;
    b.add_sequence(0, start, std::span(tokens).subspan(start, len), ridge::LogitRows::kAll);
    model->forward(b, cache, chunk_logits.data());
    for (size_t r = 0; r < rows.size(); ++r)
      if (rows[r] >= start && rows[r] < start + len)
        std::memcpy(wanted.data() + r * n_vocab, chunk_logits.data() + static_cast<size_t>(rows[r] - start) * n_vocab,
                    sizeof(float) * n_vocab);
    std::memcpy(last.data(), chunk_logits.data() + static_cast<size_t>(len - 1) * n_vocab, sizeof(float) * n_vocab);
  }
  if (!out_path.empty()) {
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(wanted.data()), static_cast<std::streamsize>(wanted.size() * sizeof(float)));
  }
  // Greedy continuation, one token per step through the cache.
  std::string ids;
  for (int i = 0; i < greedy; ++i) {
    int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    if (i) ids += ' ';  // not `" " + std::to_string(...)`: GCC 12 warns falsely (-Wrestrict) on it
    ids += std::to_string(next);
    if (i + 1 == greedy) break;
    if (!cache.reserve(0, 1)) throw ridge::Error("KV cache too small");
    ridge::Batch b;
    b.add_sequence(0, cache.n_tokens(0), std::span(&next, 1), ridge::LogitRows::kLast);
    model->forward(b, cache, last.data());
  }
  if (greedy > 0) std::printf("%s\n", ids.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ridge_logits: %s\n", e.what());
    return 1;
  }
}
