// The recipe's per-tensor choices that depend on more than the target's name: the ones an
// importance matrix switches on (llama-quantize's has_imatrix rules), and the user's
// --token-embedding-type / --output-tensor-type. The plain choices are
// checked against a real model in tests/python/test_quantize.py.
#include "quant/recipe.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ridge::quant {
namespace {

gguf::TensorInfo matrix(const std::string& name, int64_t n_in, int64_t n_out) {
  gguf::TensorInfo t;
  t.name = name;
  t.dtype = DType::F16;
  t.n_dims = 2;
  t.ne[0] = n_in;
  t.ne[1] = n_out;
  return t;
}

RecipeState state_of(int32_t n_layer, bool imatrix) {
  RecipeState s;
  s.n_layer = n_layer;
  s.n_attention_wv = n_layer;
  s.imatrix = imatrix;
  return s;
}

DType type_of(const char* target, const RecipeState& state, const std::string& name) {
  return choose_tensor_type(parse_quant_target(target), state, matrix(name, 4864, 896)).type;
}

TEST(Recipe, ImatrixGivesTheFirstEighthOfFfnDownOneTypeUp) {
  // 24 layers: blk.0 .. blk.2 are the first eighth.
  const RecipeState weighted = state_of(24, true);
  for (int il = 0; il < 24; ++il) {
    const std::string down = "blk." + std::to_string(il) + ".ffn_down.weight";
    EXPECT_EQ(type_of("Q4_0", weighted, down), il < 3 ? DType::Q4_1 : DType::Q4_0) << down;
    EXPECT_EQ(type_of("Q5_0", weighted, down), il < 3 ? DType::Q5_1 : DType::Q5_0) << down;
  }
  // Only ffn_down, and the output keeps its own rule.
  EXPECT_EQ(type_of("Q4_0", weighted, "blk.0.ffn_up.weight"), DType::Q4_0);
  EXPECT_EQ(type_of("Q4_0", weighted, "blk.0.attn_v.weight"), DType::Q4_0);
  EXPECT_EQ(type_of("Q4_0", weighted, "output.weight"), DType::Q6_K);
}

TEST(Recipe, WithoutAnImatrixOrForOtherTargetsNothingChanges) {
  const RecipeState plain = state_of(24, false), weighted = state_of(24, true);
  EXPECT_EQ(type_of("Q4_0", plain, "blk.0.ffn_down.weight"), DType::Q4_0);
  EXPECT_EQ(type_of("Q5_0", plain, "blk.1.ffn_down.weight"), DType::Q5_0);
  EXPECT_EQ(type_of("Q8_0", weighted, "blk.0.ffn_down.weight"), DType::Q8_0);
  EXPECT_EQ(type_of("Q4_1", weighted, "blk.0.ffn_down.weight"), DType::Q4_1);
  // Q4_K_M's own ffn_down rule (more bits in the first layers) is unchanged by it.
  EXPECT_EQ(type_of("Q4_K_M", weighted, "blk.0.ffn_down.weight"), type_of("Q4_K_M", plain, "blk.0.ffn_down.weight"));
  // Fewer than 8 layers: no layer is in the first eighth.
  EXPECT_EQ(type_of("Q4_0", state_of(7, true), "blk.0.ffn_down.weight"), DType::Q4_0);
}

TEST(Recipe, RecurrentConvTapsAndRoutersStayAsStored) {
  // llama-quantize leaves a hybrid's ssm_conv1d (and every router) in the file's type.
  gguf::TensorInfo conv = matrix("blk.0.ssm_conv1d.weight", 4, 6144);
  conv.dtype = DType::F32;
  const TensorChoice c = choose_tensor_type(parse_quant_target("Q4_K_M"), state_of(24, false), conv);
  EXPECT_FALSE(c.quantized);
  EXPECT_EQ(c.type, DType::F32);
  EXPECT_TRUE(c.fallback_note.empty());
  EXPECT_EQ(type_of("Q4_K_M", state_of(24, false), "blk.0.ffn_gate_inp.weight"), DType::F16);
  EXPECT_EQ(type_of("Q4_K_M", state_of(24, false), "blk.0.ssm_out.weight"), DType::Q4_K);
}

TEST(Recipe, TokenEmbeddingAndOutputTypesOverrideTheTarget) {
  QuantTarget t = parse_quant_target("Q4_0");
  t.token_embedding_type = parse_tensor_type("q8_0", "--token-embedding-type");
  t.output_tensor_type = DType::F16;
  const RecipeState s = state_of(24, false);
  EXPECT_EQ(choose_tensor_type(t, s, matrix("token_embd.weight", 896, 1000)).type, DType::Q8_0);
  EXPECT_EQ(choose_tensor_type(t, s, matrix("output.weight", 896, 1000)).type, DType::F16);
  EXPECT_EQ(choose_tensor_type(t, s, matrix("blk.0.ffn_up.weight", 896, 1000)).type, DType::Q4_0);
  // Without them the target's rules stand: Q4_0's token embedding is Q4_0, its output Q6_K.
  const QuantTarget plain = parse_quant_target("Q4_0");
  EXPECT_EQ(choose_tensor_type(plain, s, matrix("token_embd.weight", 1024, 1000)).type, DType::Q4_0);
  EXPECT_EQ(choose_tensor_type(plain, s, matrix("output.weight", 1024, 1000)).type, DType::Q6_K);
  // The shape fallbacks still apply: rows of 896 cannot be Q6_K's 256-value blocks.
  t.token_embedding_type = DType::Q6_K;
  const TensorChoice c = choose_tensor_type(t, s, matrix("token_embd.weight", 896, 1000));
  EXPECT_EQ(c.type, DType::Q8_0);
  EXPECT_NE(c.fallback_note.find("token_embd.weight"), std::string::npos);
}

TEST(Recipe, TensorTypeFlagsTakeOneTypeNotAMix) {
  EXPECT_EQ(parse_tensor_type("Q6_K", "--output-tensor-type"), DType::Q6_K);
  EXPECT_EQ(parse_tensor_type("bf16", "--output-tensor-type"), DType::BF16);
  for (const char* bad : {"Q4_K_M", "Q3_K", ""}) {
    try {
      parse_tensor_type(bad, "--token-embedding-type");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--token-embedding-type"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ridge::quant
