// Files llama.cpp writes itself: its model saver writes every hyper-parameter key, neutral
// values included, and Phi-3 with separate q/k/v tensors. On small random-weight models in
// the converter's layout (written here with ridge's own writer), each neutral key must give
// the very logits of the file without it, a non-neutral one must still be used or refused by
// name, separate q/k/v the logits of the fused tensor, and an unknown architecture's error
// must name every family ridge runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
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

struct NeutralCase {
  std::string arch;
  std::string name;  // what the file adds, for the failure message and the file name
  Extra extra;
};

// Each key at the value llama.cpp's saver writes for a model that does not use it.
std::vector<NeutralCase> neutral_cases() {
  return {
      {"llama", "pooling_i32_minus_1", [](gguf::Writer& w) { w.set_i32("llama.pooling_type", -1); }},
      {"llama", "pooling_u32_minus_1", [](gguf::Writer& w) { w.set_u32("llama.pooling_type", UINT32_MAX); }},
      {"llama", "rope_linear_factor_0",
       [](gguf::Writer& w) {
         w.set_string("llama.rope.scaling.type", "linear");
         w.set_f32("llama.rope.scaling.factor", 0.0f);
       }},
      {"llama", "rope_yarn_factor_0",
       [](gguf::Writer& w) {
         w.set_string("llama.rope.scaling.type", "yarn");
         w.set_f32("llama.rope.scaling.factor", 0.0f);
       }},
      {"llama", "expert_shared_count_0", [](gguf::Writer& w) { w.set_u32("llama.expert_shared_count", 0); }},
      {"llama", "no_experts",
       [](gguf::Writer& w) {
         w.set_u32("llama.expert_count", 0);
         w.set_u32("llama.expert_used_count", 0);
         w.set_u32("llama.expert_feed_forward_length", 0);
       }},
      // Every computation key as llama.cpp's saver writes it for a dense Llama.
      {"llama", "saver_keys",
       [](gguf::Writer& w) {
         for (const char* key : {"expert_count", "expert_used_count", "expert_shared_count", "expert_gating_func",
                                 "attention.q_lora_rank", "attention.kv_lora_rank", "attention.sliding_window"})
           w.set_u32(std::string("llama.") + key, 0);
         for (const char* key : {"expert_weights_scale", "logit_scale", "attention.scale", "embedding_scale",
                                 "residual_scale", "rope.scaling.yarn_log_multiplier", "attn_logit_softcapping",
                                 "final_logit_softcapping"})
           w.set_f32(std::string("llama.") + key, 0.0f);
         w.set_bool("llama.expert_weights_norm", false);
         w.set_f32("llama.rope.scaling.attn_factor", 1.0f);
         w.set_i32("llama.pooling_type", -1);
         w.set_string("llama.rope.scaling.type", "linear");
         w.set_f32("llama.rope.scaling.factor", 0.0f);
       }},
      {"llama", "factors_of_1",
       [](gguf::Writer& w) {
         for (const char* key : {"expert_weights_scale", "logit_scale", "embedding_scale", "residual_scale"})
           w.set_f32(std::string("llama.") + key, 1.0f);
       }},
      {"qwen3", "qwen3_saver_keys",
       [](gguf::Writer& w) {
         w.set_u32("qwen3.attention.sliding_window", 0);
         w.set_u32("qwen3.expert_count", 0);
         w.set_u32("qwen3.expert_shared_count", 0);
         w.set_f32("qwen3.attention.scale", 0.0f);
       }},
      {"qwen2", "qwen2_expert_shared_count_0", [](gguf::Writer& w) { w.set_u32("qwen2.expert_shared_count", 0); }},
      {"phi3", "phi3_saver_keys",
       [](gguf::Writer& w) {
         w.set_u32("phi3.expert_shared_count", 0);
         w.set_i32("phi3.pooling_type", -1);
       }},
      // Gemma: the scale the family implies, d_head^-0.5 at these sizes.
      {"gemma3", "gemma3_attention_scale",
       [](gguf::Writer& w) { w.set_f32("gemma3.attention.scale", 1.0f / std::sqrt(static_cast<float>(kDHead))); }},
      {"gemma2", "gemma2_attention_scale",
       [](gguf::Writer& w) { w.set_f32("gemma2.attention.scale", 1.0f / std::sqrt(static_cast<float>(kDHead))); }},
      {"gemma3", "gemma3_attention_scale_0", [](gguf::Writer& w) { w.set_f32("gemma3.attention.scale", 0.0f); }},
  };
}

TEST(LlamaCppSaverKeys, NeutralValuesComputeAsNoKey) {
  for (const NeutralCase& c : neutral_cases()) {
    SCOPED_TRACE(c.arch + " " + c.name);
    const std::vector<float> without = logits_of(c.arch, c.arch + "-plain");
    try {
      EXPECT_EQ(logits_of(c.arch, c.name, c.extra), without);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(LlamaCppSaverKeys, UnspecifiedPoolingIsNoKeyAndTheOthersAreRead) {
  const auto pooling_of = [](const Extra& extra) {
    const std::vector<Tensor> tensors = family_tensors("llama");
    const std::string path = write_model("pooling", "llama", tensors, extra);
    const RemoveOnExit remove{path};
    return ModelConfig::from_gguf(gguf::File::open(path)).pooling;
  };
  EXPECT_EQ(pooling_of({}), Pooling::kMean);
  EXPECT_EQ(pooling_of([](gguf::Writer& w) { w.set_i32("llama.pooling_type", -1); }), Pooling::kMean);
  EXPECT_EQ(pooling_of([](gguf::Writer& w) { w.set_u32("llama.pooling_type", UINT32_MAX); }), Pooling::kMean);
  EXPECT_EQ(pooling_of([](gguf::Writer& w) { w.set_u32("llama.pooling_type", 0); }), Pooling::kNone);
  EXPECT_EQ(pooling_of([](gguf::Writer& w) { w.set_u32("llama.pooling_type", 2); }), Pooling::kCls);
  try {
    pooling_of([](gguf::Writer& w) { w.set_u32("llama.pooling_type", 7); });
    ADD_FAILURE() << "pooling_type 7 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.pooling_type 7 is not one of"), std::string::npos) << e.what();
  }
}

// A value that changes the computation: used where ridge implements it, else refused with
// the key's name.
TEST(LlamaCppSaverKeys, NonNeutralValuesAreUsedOrRefusedByName) {
  const std::vector<float> plain = logits_of("llama", "llama-plain");
  const std::vector<float> scaled = logits_of("llama", "rope_linear_4", [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", 4.0f);
  });
  EXPECT_NE(scaled, plain) << "a linear factor of 4 must change the logits past position 0";
  // With no type key llama.cpp's loader takes linear, and the older rope.scale_linear when
  // rope.scaling.factor is absent.
  EXPECT_EQ(logits_of("llama", "factor_4_no_type", [](gguf::Writer& w) { w.set_f32("llama.rope.scaling.factor", 4.0f); }),
            scaled);
  EXPECT_EQ(logits_of("llama", "scale_linear_4", [](gguf::Writer& w) { w.set_f32("llama.rope.scale_linear", 4.0f); }),
            scaled);
  EXPECT_EQ(logits_of("llama", "type_none", [](gguf::Writer& w) {
              w.set_string("llama.rope.scaling.type", "none");
              w.set_f32("llama.rope.scaling.factor", 4.0f);
            }),
            plain);

  struct Refused {
    std::string arch, name, phrase;
    Extra extra;
  };
  const std::vector<Refused> refused = {
      {"llama", "shared_1", "llama.expert_shared_count is set, and ridge's llama model does not implement it",
       [](gguf::Writer& w) { w.set_u32("llama.expert_shared_count", 1); }},
      {"llama", "logit_scale_2", "llama.logit_scale is set",
       [](gguf::Writer& w) { w.set_f32("llama.logit_scale", 2.0f); }},
      {"llama", "attention_scale", "llama.attention.scale is set",
       [](gguf::Writer& w) { w.set_f32("llama.attention.scale", 0.125f); }},
      {"llama", "softcap_50", "llama.attn_logit_softcapping is set",
       [](gguf::Writer& w) { w.set_f32("llama.attn_logit_softcapping", 50.0f); }},
      {"qwen3", "window_4", "qwen3.attention.sliding_window is set",
       [](gguf::Writer& w) { w.set_u32("qwen3.attention.sliding_window", 4); }},
      {"gemma3", "scale_half", "gemma3.attention.scale is 0.5, and ridge's gemma3 model computes with 0.353553",
       [](gguf::Writer& w) { w.set_f32("gemma3.attention.scale", 0.5f); }},
      {"gemma2", "scale_quarter", "gemma2.attention.scale is 0.25",
       [](gguf::Writer& w) { w.set_f32("gemma2.attention.scale", 0.25f); }},
      {"llama", "rope_negative", "llama.rope.scaling.factor must be > 0",
       [](gguf::Writer& w) {
         w.set_string("llama.rope.scaling.type", "linear");
         w.set_f32("llama.rope.scaling.factor", -2.0f);
       }},
  };
  for (const Refused& r : refused) {
    const std::string error = load_error(r.arch, r.name, r.extra);
    EXPECT_NE(error.find(r.phrase), std::string::npos) << r.arch << " " << r.name << ": " << error;
  }
}

// Gemma's 27B sizes scale q.k by (n_embd / n_head)^-0.5 (llama.cpp, after gemma_pytorch's
// query_pre_attn_scalar), not d_head^-0.5; the saver's attention.scale holds that value.
TEST(LlamaCppSaverKeys, Gemma27BScaleIsTheOneLlamaCppImplies) {
  for (const auto& [arch, n_layer] : {std::pair<std::string, int>{"gemma2", 46}, {"gemma3", 62}}) {
    SCOPED_TRACE(arch);
    const auto config_of = [&](std::optional<float> scale) {
      gguf::Writer w;
      const std::string p = arch + ".";
      w.set_string("general.architecture", arch);
      w.set_u32(p + "embedding_length", 64);
      w.set_u32(p + "block_count", static_cast<uint32_t>(n_layer));
      w.set_u32(p + "feed_forward_length", 128);
      w.set_u32(p + "attention.head_count", 2);
      w.set_u32(p + "attention.key_length", 16);  // d_head 16, n_embd / n_head 32
      w.set_u32(p + "attention.value_length", 16);
      w.set_u32(p + "attention.sliding_window", 8);
      if (scale) w.set_f32(p + "attention.scale", *scale);
      const std::vector<float> values(64 * 8, 0.5f);
      const auto bytes = [&](size_t n) {
        return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), n * sizeof(float));
      };
      w.add_tensor("token_embd.weight", DType::F32, {64, 8}, bytes(64 * 8));
      for (int il = 0; il < n_layer; ++il)
        w.add_tensor("blk." + std::to_string(il) + ".attn_norm.weight", DType::F32, {64}, bytes(64));
      const std::vector<uint8_t> file = w.to_bytes();
      return ModelConfig::from_gguf(gguf::File::parse(file, "g27.gguf"));
    };
    EXPECT_FLOAT_EQ(config_of(std::nullopt).attn_scale, 1.0f / std::sqrt(32.0f));
    EXPECT_FLOAT_EQ(config_of(1.0f / std::sqrt(32.0f)).attn_scale, 1.0f / std::sqrt(32.0f));
    try {
      config_of(0.25f);  // d_head^-0.5: the rule of the other sizes
      ADD_FAILURE() << "the other sizes' scale was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(arch + ".attention.scale is 0.25"), std::string::npos) << e.what();
    }
  }
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
  const std::string error = load_error("nemotron_h", "unknown", {});
  EXPECT_NE(error.find("architecture 'nemotron_h' is not supported"), std::string::npos) << error;
  ASSERT_EQ(families().size(), 12u);
  for (const FamilyTraits& f : families())
    EXPECT_NE(error.find(std::string(f.arch)), std::string::npos) << f.arch << " missing from: " << error;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "phi3", "gemma2", "gemma3", "qwen35",
                           "qwen35moe", "qwen3next"})
    EXPECT_NE(error.find(arch), std::string::npos) << arch << " missing from: " << error;
  EXPECT_EQ(ModelConfig::supported_architectures().size(), families().size());
}

}  // namespace
}  // namespace ridge
