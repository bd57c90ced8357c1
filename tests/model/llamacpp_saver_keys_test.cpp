// Files llama.cpp writes itself: Phi-3 with separate q/k/v tensors (its model saver) must
// give the logits of the fused attn_qkv tensor, and an unknown architecture's error must name
// every family ridge runs. Small random-weight models in the converter's layout, written here
// with ridge's own writer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/writer.h"
#include "model/config.h"
#include "model/families.h"
#include "model/model.h"

namespace ridge {
namespace {

constexpr int32_t kEmbd = 16, kHead = 2, kKvHead = 1, kDHead = 8, kFf = 24, kLayers = 2, kVocab = 40;
constexpr int32_t kWindow = 4;  // Gemma's sliding window: shorter than the prompt below

struct Tensor {
  std::string name;
  std::vector<int64_t> dims;  // innermost first: [n_in, n_out] for a matrix
  std::vector<float> values;
};

// normal(0, 0.3) values, 1 + that for norm weights, seeded by the name: two files that
// share a tensor name share its values.
Tensor random_tensor(const std::string& name, std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  uint32_t seed = 2166136261u;
  for (char ch : name) seed = (seed ^ static_cast<uint8_t>(ch)) * 16777619u;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const bool norm = name.find("norm") != std::string::npos;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = (norm ? 1.0f : 0.0f) + normal(gen);
  return {name, std::move(dims), std::move(values)};
}

// The tensors llama.cpp's converter writes for the family, at the shapes above.
std::vector<Tensor> family_tensors(const std::string& arch) {
  const int64_t q = int64_t{kHead} * kDHead, kv = int64_t{kKvHead} * kDHead;
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  std::vector<Tensor> t;
  t.push_back(random_tensor("token_embd.weight", {kEmbd, kVocab}));
  t.push_back(random_tensor("output_norm.weight", {kEmbd}));
  if (arch == "phi3") t.push_back(random_tensor("output.weight", {kEmbd, kVocab}));
  for (int il = 0; il < kLayers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    t.push_back(random_tensor(p + "attn_norm.weight", {kEmbd}));
    if (arch == "phi3") {
      t.push_back(random_tensor(p + "attn_qkv.weight", {kEmbd, q + 2 * kv}));
    } else {
      t.push_back(random_tensor(p + "attn_q.weight", {kEmbd, q}));
      t.push_back(random_tensor(p + "attn_k.weight", {kEmbd, kv}));
      t.push_back(random_tensor(p + "attn_v.weight", {kEmbd, kv}));
    }
    if (arch == "qwen2") {
      t.push_back(random_tensor(p + "attn_q.bias", {q}));
      t.push_back(random_tensor(p + "attn_k.bias", {kv}));
      t.push_back(random_tensor(p + "attn_v.bias", {kv}));
    }
    if (arch == "qwen3" || arch == "gemma3") {
      t.push_back(random_tensor(p + "attn_q_norm.weight", {kDHead}));
      t.push_back(random_tensor(p + "attn_k_norm.weight", {kDHead}));
    }
    t.push_back(random_tensor(p + "attn_output.weight", {q, kEmbd}));
    if (gemma) t.push_back(random_tensor(p + "post_attention_norm.weight", {kEmbd}));
    t.push_back(random_tensor(p + "ffn_norm.weight", {kEmbd}));
    if (arch == "phi3") {
      t.push_back(random_tensor(p + "ffn_up.weight", {kEmbd, 2 * kFf}));  // gate rows, then up rows
    } else {
      t.push_back(random_tensor(p + "ffn_gate.weight", {kEmbd, kFf}));
      t.push_back(random_tensor(p + "ffn_up.weight", {kEmbd, kFf}));
    }
    t.push_back(random_tensor(p + "ffn_down.weight", {kFf, kEmbd}));
    if (gemma) t.push_back(random_tensor(p + "post_ffw_norm.weight", {kEmbd}));
  }
  return t;
}

// Phi-3's fused attn_qkv split into attn_q, attn_k and attn_v: the same rows, as llama.cpp's
// saver writes them.
std::vector<Tensor> split_qkv(const std::vector<Tensor>& fused) {
  const int64_t q = int64_t{kHead} * kDHead, kv = int64_t{kKvHead} * kDHead;
  std::vector<Tensor> out;
  for (const Tensor& t : fused) {
    const size_t at = t.name.find("attn_qkv.weight");
    if (at == std::string::npos) {
      out.push_back(t);
      continue;
    }
    const std::string p = t.name.substr(0, at);
    const auto rows = [&](const std::string& part, int64_t first, int64_t n) {
      const auto begin = t.values.begin() + first * kEmbd;
      out.push_back({p + part, {kEmbd, n}, std::vector<float>(begin, begin + n * kEmbd)});
    };
    rows("attn_q.weight", 0, q);
    rows("attn_k.weight", q, kv);
    rows("attn_v.weight", q + kv, kv);
  }
  return out;
}

using Extra = std::function<void(gguf::Writer&)>;

std::string write_model(const std::string& file_name, const std::string& arch, const std::vector<Tensor>& tensors,
                        const Extra& extra = {}) {
  gguf::Writer w;
  const std::string p = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_u32(p + "context_length", 64);
  w.set_u32(p + "embedding_length", kEmbd);
  w.set_u32(p + "block_count", kLayers);
  w.set_u32(p + "feed_forward_length", kFf);
  w.set_u32(p + "attention.head_count", kHead);
  w.set_u32(p + "attention.head_count_kv", kKvHead);
  w.set_u32(p + "attention.key_length", kDHead);
  w.set_u32(p + "attention.value_length", kDHead);
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (arch == "gemma2" || arch == "gemma3") w.set_u32(p + "attention.sliding_window", kWindow);
  if (extra) extra(w);
  for (const Tensor& t : tensors)
    w.add_tensor(t.name, DType::F32, t.dims,
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.values.data()),
                                          t.values.size() * sizeof(float)));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ridge-saver-keys-" + std::to_string(::getpid()) + "-" + file_name + ".gguf"))
                               .string();
  w.write(path);
  return path;
}

// Removes a test's file when the test is done with it (an open mapping keeps its pages).
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() { std::filesystem::remove(path); }
};

// Every row's logits for one prompt (longer than Gemma's window), in one batch.
std::vector<float> logits_of(const std::string& path) {
  const RemoveOnExit remove{path};
  std::unique_ptr<Model> model = Model::load(path, {.n_threads = 1, .max_batch_tokens = 16});
  KvCache cache{model->kv_cache_config(1 << 20, 1, 64)};
  const std::vector<int32_t> tokens = {1, 7, 33, 4, 19, 25, 2, 11};
  cache.add_sequence(0);
  EXPECT_TRUE(cache.reserve(0, static_cast<int32_t>(tokens.size())));
  Batch b;
  b.add_sequence(0, 0, tokens, LogitRows::kAll);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(model->config().n_vocab));
  model->forward(b, cache, logits.data());
  return logits;
}

std::vector<float> logits_of(const std::string& arch, const std::string& name, const Extra& extra = {}) {
  return logits_of(write_model(name, arch, family_tensors(arch), extra));
}

std::string load_error(const std::string& arch, const std::string& name, const Extra& extra) {
  try {
    logits_of(arch, name, extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// llama.cpp loads Phi-3's attention from attn_qkv or from attn_q/k/v; the same rows give
// the same logits.
TEST(LlamaCppSaverKeys, Phi3SeparateQkvComputesAsFused) {
  const std::vector<Tensor> fused = family_tensors("phi3");
  const std::vector<Tensor> separate = split_qkv(fused);
  ASSERT_EQ(separate.size(), fused.size() + 2 * kLayers);
  const std::vector<float> a = logits_of(write_model("phi3-fused", "phi3", fused));
  std::vector<float> b;
  ASSERT_NO_THROW(b = logits_of(write_model("phi3-separate", "phi3", separate)));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "logit " << i;
  // A half-fused layer is still a tensor too many or too few: named.
  std::vector<Tensor> both = separate;
  for (const Tensor& t : fused)
    if (t.name == "blk.0.attn_qkv.weight") both.push_back(t);  // beside blk.0.attn_q/k/v
  ASSERT_EQ(both.size(), separate.size() + 1);
  try {
    logits_of(write_model("phi3-both", "phi3", both));
    ADD_FAILURE() << "attn_qkv beside attn_q/k/v was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q"), std::string::npos) << e.what();
  }
}

// The message is built from the families table, so it names every family ridge runs.
TEST(LlamaCppSaverKeys, UnknownArchitectureNamesEveryFamily) {
  const std::string error = load_error("qwen35", "unknown", {});
  EXPECT_NE(error.find("architecture 'qwen35' is not supported"), std::string::npos) << error;
  ASSERT_EQ(families().size(), 9u);
  for (const FamilyTraits& f : families())
    EXPECT_NE(error.find(std::string(f.arch)), std::string::npos) << f.arch << " missing from: " << error;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "phi3", "gemma2", "gemma3"})
    EXPECT_NE(error.find(arch), std::string::npos) << arch << " missing from: " << error;
  EXPECT_EQ(ModelConfig::supported_architectures().size(), families().size());
}

}  // namespace
}  // namespace ridge
