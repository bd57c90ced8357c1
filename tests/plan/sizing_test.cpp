#include "plan/sizing.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "gguf/gguf.h"
#include "plan/model_shape.h"

namespace ridge::plan {
namespace {

ModelShape preset(const char* id) {
  const ModelPreset* p = find_model_preset(id);
  EXPECT_NE(p, nullptr) << id;
  return shape_from_preset(*p);
}

Deployment deployment(const char* gpus, int64_t ctx, const char* weights, const char* kv) {
  Deployment d;
  if (gpus != nullptr) d.gpus = parse_gpus(gpus);
  d.ctx = ctx;
  d.weights = parse_weight_format(weights);
  d.kv = parse_kv_format(kv);
  return d;
}

// Parameter counts computed from each preset's config.json values, against the totals
// the published checkpoints hold (safetensors metadata). A typo in a preset shows here.
TEST(ModelPresets, ParameterCountsMatchThePublishedCheckpoints) {
  const std::pair<const char*, int64_t> published[] = {
      {"llama2-7b", 6'738'415'616},      {"llama2-13b", 13'015'864'320},    {"llama2-70b", 68'976'648'192},
      {"llama3-8b", 8'030'261'248},      {"llama3-70b", 70'553'706'496},    {"llama3.1-405b", 405'853'388'800},
      {"mistral-7b", 7'241'732'096},     {"mistral-7b-v0.3", 7'248'023'552},
      {"qwen2.5-0.5b", 494'032'768},     {"qwen2.5-1.5b", 1'543'714'304},   {"qwen2.5-3b", 3'085'938'688},
      {"qwen2.5-7b", 7'615'616'512},     {"qwen2.5-14b", 14'770'033'664},   {"qwen2.5-32b", 32'763'876'352},
      {"qwen2.5-72b", 72'706'203'648},   {"gemma3-270m", 268'098'176},      {"gemma3-1b", 999'885'952},
  };
  for (const auto& [id, params] : published) EXPECT_EQ(preset(id).n_params, params) << id;
  // Gemma 3 4B/12B/27B: the language model alone (the published totals add the vision tower).
  EXPECT_NEAR(preset("gemma3-4b").n_params / 1e9, 3.88, 0.01);
  EXPECT_NEAR(preset("gemma3-12b").n_params / 1e9, 11.77, 0.01);
  EXPECT_NEAR(preset("gemma3-27b").n_params / 1e9, 27.01, 0.01);
}

TEST(ModelPresets, LookupIgnoresCaseAndPunctuation) {
  EXPECT_EQ(find_model_preset("Llama-3.1-405B"), find_model_preset("llama3.1-405b"));
  EXPECT_NE(find_model_preset("QWEN2.5_7B"), nullptr);
  EXPECT_EQ(find_model_preset("llama4-8b"), nullptr);
}

TEST(ModelPresets, SlidingWindowPatterns) {
  const ModelShape g = preset("gemma3-27b");  // 62 layers: every 6th global
  EXPECT_EQ(g.layers_by_window(), (std::map<int32_t, int>{{0, 10}, {1024, 52}}));
  EXPECT_EQ(g.layer_window[5], 0);
  EXPECT_EQ(g.layer_window[6], 1024);
  EXPECT_EQ(preset("gemma3-270m").layers_by_window(), (std::map<int32_t, int>{{0, 3}, {512, 15}}));
  EXPECT_EQ(preset("mistral-7b").layers_by_window(), (std::map<int32_t, int>{{4096, 32}}));
  EXPECT_EQ(preset("llama3-8b").layers_by_window(), (std::map<int32_t, int>{{0, 32}}));
}

// The worked numbers of the issue.
TEST(Sizing, Llama2_7B_HalfAMebibytePerToken) {
  const SizeReport r = compute_size(preset("llama2-7b"), deployment(nullptr, 4096, "fp16", "fp16"));
  EXPECT_EQ(r.kv_bytes_per_token, 512 * 1024);                  // 2 x 32 x 32 x 128 x 2 B
  EXPECT_EQ(r.kv_bytes_per_conversation, 2.0 * 1024 * 1024 * 1024);  // 2 GiB at 4,096 tokens
  EXPECT_NEAR(r.weight_bytes, 13.48e9, 0.01e9);
}

TEST(Sizing, Llama3_8B_GqaIs128KiBPerToken) {
  const SizeReport r = compute_size(preset("llama3-8b"), deployment(nullptr, 8192, "bf16", "fp16"));
  EXPECT_EQ(r.kv_bytes_per_token, 128 * 1024);  // 2 x 32 x 8 x 128 x 2 B: 4x less than MHA
}

TEST(Sizing, Llama3_70B_OnTwo80GBGpus) {
  const SizeReport r = compute_size(preset("llama3-70b"), deployment("2x80GB", 8192, "bf16", "bf16"));
  EXPECT_NEAR(r.weight_bytes / 1e9, 141.1, 0.1);  // "about 140 GB"
  EXPECT_EQ(r.kv_bytes_per_token, 320 * 1024);
  EXPECT_EQ(r.kv_bytes_per_conversation, 320.0 * 1024 * 8192);  // 2.5 GiB
  EXPECT_EQ(r.total_bytes, 160e9);
  // (160 GB - 141.107 GB) / 2.684 GB = 7.04: only a handful.
  EXPECT_EQ(r.max_conversations, 7);

  // int8 weights + int8 KV: half the weights and half the KV per conversation.
  const SizeReport q = compute_size(preset("llama3-70b"), deployment("2x80GB", 8192, "int8", "int8"));
  EXPECT_NEAR(q.weight_bytes / 1e9, 70.55, 0.01);
  EXPECT_EQ(q.kv_bytes_per_token, 160 * 1024);
  EXPECT_EQ(q.max_conversations, 66);  // (160 - 70.554) GB / 1.342 GB = 66.6
}

TEST(Sizing, GqaVersusMhaByHand) {
  // Llama 2 70B (8 KV heads) against Llama 2 13B (40 KV heads, MHA): per layer and head
  // the same 2 x 128 x 2 B, so the ratio is layers x KV heads.
  const double l70 = compute_size(preset("llama2-70b"), deployment(nullptr, 1, "fp16", "fp16")).kv_bytes_per_token;
  const double l13 = compute_size(preset("llama2-13b"), deployment(nullptr, 1, "fp16", "fp16")).kv_bytes_per_token;
  EXPECT_EQ(l70, 2.0 * 80 * 8 * 128 * 2);   // 327,680
  EXPECT_EQ(l13, 2.0 * 40 * 40 * 128 * 2);  // 819,200
  EXPECT_LT(l70, l13);                      // the 70B model caches 2.5x less per token
}

TEST(Sizing, SlidingWindowLayersHoldOnlyTheirWindow) {
  const ModelShape g = preset("gemma3-27b");
  const SizeReport r = compute_size(g, deployment(nullptr, 32768, "bf16", "fp16"));
  const double per_layer_token = 2.0 * 16 * 128 * 2;  // 8,192 B
  EXPECT_EQ(r.kv_bytes_per_token, 62 * per_layer_token);
  EXPECT_EQ(r.kv_bytes_per_conversation, 10 * per_layer_token * 32768 + 52 * per_layer_token * 1024);
  // Below the window every layer holds the whole context.
  EXPECT_EQ(compute_size(g, deployment(nullptr, 512, "bf16", "fp16")).kv_bytes_per_conversation,
            62 * per_layer_token * 512);
  // Mistral 7B v0.1: every layer windowed, so 8k tokens cost what 4k do.
  const ModelShape m = preset("mistral-7b");
  EXPECT_EQ(compute_size(m, deployment(nullptr, 8192, "bf16", "fp16")).kv_bytes_per_conversation,
            compute_size(m, deployment(nullptr, 4096, "bf16", "fp16")).kv_bytes_per_conversation);
}

TEST(Sizing, KvAndWeightFormatsScaleBytes) {
  const ModelShape m = preset("llama3-8b");
  const double fp16 = compute_size(m, deployment(nullptr, 1, "bf16", "fp16")).kv_bytes_per_token;
  EXPECT_EQ(compute_size(m, deployment(nullptr, 1, "bf16", "int8")).kv_bytes_per_token, fp16 / 2);
  EXPECT_EQ(compute_size(m, deployment(nullptr, 1, "bf16", "fp32")).kv_bytes_per_token, fp16 * 2);
  EXPECT_EQ(compute_size(m, deployment(nullptr, 1, "int4", "fp16")).weight_bytes, m.n_params * 0.5);
  EXPECT_EQ(compute_size(m, deployment(nullptr, 1, "q8_0", "fp16")).weight_bytes, m.n_params * 34.0 / 32.0);
  EXPECT_EQ(compute_size(m, deployment(nullptr, 1, "Q4_K", "fp16")).weight_bytes, m.n_params * 144.0 / 256.0);
}

TEST(Sizing, ReserveAndWeightsThatDoNotFit) {
  Deployment d = deployment("2x80GB", 8192, "bf16", "bf16");
  d.reserve = parse_reserve("10%");  // 16 GB of the 18.9 GB left after the weights
  SizeReport r = compute_size(preset("llama3-70b"), d);
  EXPECT_EQ(r.reserve_bytes, 16e9);
  EXPECT_EQ(r.max_conversations, 1);  // (160 - 141.107 - 16) / 2.684 = 1.08

  r = compute_size(preset("llama3.1-405b"), deployment("1x80GB", 8192, "bf16", "bf16"));
  EXPECT_LT(r.free_bytes, 0);
  EXPECT_EQ(r.max_conversations, 0);
  EXPECT_NE(r.lines.back().result.find("0 conversations"), std::string::npos);
}

TEST(Sizing, ArithmeticLinesShowTheNumbers) {
  const SizeReport r = compute_size(preset("llama3-70b"), deployment("2x80GB", 8192, "bf16", "bf16"));
  std::string text;
  for (const ArithmeticLine& l : r.lines) text += l.label + " | " + l.formula + " = " + l.result + "\n";
  EXPECT_NE(text.find("70,553,706,496 params x 2 B (bf16)"), std::string::npos) << text;
  EXPECT_NE(text.find("2 (K,V) x 80 layers x 8 KV heads x 128 dims x 2 B"), std::string::npos) << text;
  EXPECT_NE(text.find("327,680 B = 320.00 KiB"), std::string::npos) << text;
  EXPECT_NE(text.find("141.11 GB (131.42 GiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("7 conversations of 8,192 tokens"), std::string::npos) << text;
}

TEST(Sizing, RejectsBadArguments) {
  const ModelShape m = preset("llama3-8b");
  EXPECT_THROW(compute_size(m, deployment(nullptr, 0, "bf16", "fp16")), Error);
  EXPECT_THROW(compute_size(m, deployment(nullptr, -5, "bf16", "fp16")), Error);
  EXPECT_THROW(compute_size(m, deployment(nullptr, 10, "file", "fp16")), Error);  // a preset has no file
  EXPECT_THROW(parse_weight_format("int3"), Error);
  EXPECT_THROW(parse_kv_format("q4_K"), Error);
  // ridge's quantized caches count their blocks' f16 scales: 34 and 18 bytes per 32 values.
  EXPECT_DOUBLE_EQ(parse_kv_format("q8_0").bytes_per_value, 34.0 / 32.0);
  EXPECT_DOUBLE_EQ(parse_kv_format("q4_0").bytes_per_value, 18.0 / 32.0);
}

// A real GGUF: hyper-parameters from metadata, weights counted from the tensor table.
TEST(Sizing, GgufModelCountsItsTensors) {
  const gguf::File f = gguf::File::open(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf");
  const ModelShape m = shape_from_gguf(f);
  EXPECT_EQ(m.n_layer, 5);
  EXPECT_EQ(m.n_kv_head, 4);
  EXPECT_EQ(m.d_head, 8);
  int64_t params = 0;
  double bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    params += t.n_elements();
    bytes += static_cast<double>(t.nbytes);
  }
  EXPECT_EQ(m.n_params, params);
  const SizeReport r = compute_size(m, deployment("1x1GB", 512, "file", "fp16"));
  EXPECT_EQ(r.weight_bytes, bytes);               // as stored: f32 here
  EXPECT_EQ(r.weight_bytes, 4.0 * m.n_params);
  EXPECT_EQ(r.kv_bytes_per_token, 2 * 5 * 4 * 8 * 2);  // 640 B
  EXPECT_EQ(compute_size(m, deployment(nullptr, 512, "fp16", "fp16")).weight_bytes, 2.0 * m.n_params);
}

TEST(Sizing, LoadModelShapePrefersPresetsThenFiles) {
  auto no_files = [](const std::string& name) -> std::string { throw Error("no such file: " + name); };
  EXPECT_EQ(load_model_shape("llama3-8b", no_files).n_params, 8'030'261'248);
  try {
    load_model_shape("llama9-1t", no_files);
    FAIL() << "an unknown model must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("llama9-1t"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gemma3-27b"), std::string::npos) << msg;  // lists the presets
  }
  auto fixture = [](const std::string&) { return std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf"; };
  EXPECT_EQ(load_model_shape("stories", fixture).n_layer, 5);
}

// Tensor parallelism: Llama 3 70B at q4_K over 4 ranks of 64 GB. The layer matrices and
// the output matrix split 4 ways, the embedding (128256 x 8192) and the norms stay whole;
// each rank holds 2 of the 8 KV heads.
TEST(Sizing, TensorParallelPerRank) {
  const ModelShape m = preset("llama3-70b");
  Deployment d = deployment("4x64GB", 8192, "q4_K", "fp16");
  d.tp = 4;
  const SizeReport r = compute_size(m, d);
  const double whole = (128256.0 * 8192 + 80.0 * 2 * 8192 + 8192) * 0.5625;
  EXPECT_DOUBLE_EQ(m.n_whole_params, 128256LL * 8192 + 80LL * 2 * 8192 + 8192);
  EXPECT_NEAR(r.rank_weight_bytes, (r.weight_bytes - whole) / 4 + whole, 1.0);
  EXPECT_DOUBLE_EQ(r.rank_kv_bytes_per_token, 327680.0 / 4);
  EXPECT_DOUBLE_EQ(r.rank_kv_bytes_per_conversation, r.kv_bytes_per_conversation / 4);
  EXPECT_EQ(r.max_conversations,
            static_cast<int64_t>((64e9 - r.rank_weight_bytes) / r.rank_kv_bytes_per_conversation));
  // Heads, or devices, that do not match the ranks are errors.
  d.tp = 3;
  EXPECT_THROW(compute_size(m, d), Error);  // 64 heads
  d.tp = 2;
  EXPECT_THROW(compute_size(m, d), Error);  // 4 devices for 2 ranks
}

}  // namespace
}  // namespace ridge::plan
