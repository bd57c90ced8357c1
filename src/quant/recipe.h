// Which GGUF type each tensor of a model gets when quantizing to a target, with the same
// choices as llama-quantize (llama.cpp src/llama-quant.cpp, read 2026-12): only 2-D
// weight matrices are quantized (norms, biases, 1-D tensors keep their type); the output
// matrix (or a tied embedding) gets Q6_K under every quantized target; Q4_K_M and Q5_K_M
// give attn_v and ffn_down of "more bits" layers Q6_K and a fused attn_qkv one size up;
// a row length the type's blocks do not divide falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, then F16), and says so. With an importance matrix, Q4_0 and Q5_0 give the
// first eighth of the layers' ffn_down Q4_1 / Q5_1 (llama-quantize's guard against those
// layers going wrong; without one it keeps them, so a plain quantization is unchanged).
//
//   const QuantTarget t = parse_quant_target("Q4_K_M");     // throws for unknown names
//   const RecipeState state = recipe_state(file);           // layers, attn_v count, tied?
//   const TensorChoice c = choose_tensor_type(t, state, info);  // c.type, c.fallback_note
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "gguf/gguf.h"

namespace ridge::quant {

struct QuantTarget {
  std::string name;        // as given, upper case: "Q4_K_M"
  DType base = DType::F16; // the type most matrices get
  bool k_mix = false;      // Q4_K_M / Q5_K_M: llama-quantize's per-layer choices
  bool pure = false;       // Q4_K / Q5_K: every matrix the base type (llama-quantize --pure)
  uint32_t file_type = 1;  // general.file_type (llama_ftype)
  // llama-quantize's --token-embedding-type / --output-tensor-type: the type of
  // token_embd.weight / output.weight whatever the target gives them (still subject to the
  // shape fallbacks). Must be a type quantize writes (parse_tensor_type).
  std::optional<DType> token_embedding_type, output_tensor_type;
};

// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M (any case).
QuantTarget parse_quant_target(std::string_view name);
std::string quant_target_names();  // for messages: "F32, F16, ..."
// One tensor type (not a mix): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K (any case); throws naming `what` (the flag) for anything else.
DType parse_tensor_type(std::string_view name, std::string_view what);

// What the choices depend on beyond one tensor.
struct RecipeState {
  int32_t n_layer = 0;         // blocks (blk.N) in the file
  int32_t n_attention_wv = 0;  // attn_v matrices
  bool tied_embeddings = false;
  bool imatrix = false;        // the matrices are weighed by an importance matrix
};
RecipeState recipe_state(const gguf::File& file);

struct TensorChoice {
  DType type = DType::F32;
  bool quantized = false;     // false: copied as stored
  std::string fallback_note;  // non-empty when the shape forced another type
};

// Whether llama-quantize would quantize this tensor at all (2-D+ "...weight", not a norm).
bool is_quantizable(const gguf::TensorInfo& tensor);
// The type of one tensor.
TensorChoice choose_tensor_type(const QuantTarget& target, const RecipeState& state, const gguf::TensorInfo& tensor);

}  // namespace ridge::quant
