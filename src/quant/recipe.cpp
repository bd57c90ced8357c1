#include "quant/recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"

namespace ridge::quant {
namespace {

struct TargetRow {
  const char* name;
  DType base;
  bool k_mix, pure;
  uint32_t file_type;
};

// llama_ftype numbers for general.file_type.
constexpr TargetRow kTargets[] = {
    {"F32", DType::F32, false, false, 0},     {"F16", DType::F16, false, false, 1},
    {"BF16", DType::BF16, false, false, 32},  {"Q8_0", DType::Q8_0, false, false, 7},
    {"Q4_0", DType::Q4_0, false, false, 2},   {"Q4_1", DType::Q4_1, false, false, 3},
    {"Q5_0", DType::Q5_0, false, false, 8},   {"Q5_1", DType::Q5_1, false, false, 9},
    {"Q4_K", DType::Q4_K, false, true, 14},   {"Q5_K", DType::Q5_K, false, true, 16},
    {"Q6_K", DType::Q6_K, false, false, 18},  {"Q4_K_M", DType::Q4_K, true, false, 15},
    {"Q5_K_M", DType::Q5_K, true, false, 17},
};

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

// llama-quantize's use_more_bits: the first and last eighth of the layers, and every third
// in between.
bool use_more_bits(int32_t i, int32_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

int32_t layer_of(std::string_view name) {
  int layer = -1;
  if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

}  // namespace

QuantTarget parse_quant_target(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const TargetRow& r : kTargets)
    if (upper == r.name) return QuantTarget{r.name, r.base, r.k_mix, r.pure, r.file_type, std::nullopt, std::nullopt};
  throw Error(str_cat("quantize: unknown type '", name, "'; one of ", quant_target_names()));
}

DType parse_tensor_type(std::string_view name, std::string_view what) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const TargetRow& r : kTargets)
    if (upper == r.name && !r.k_mix) return r.base;
  throw Error(str_cat(what, ": '", name, "' is not a tensor type; one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                                        "Q4_K, Q5_K, Q6_K"));
}

std::string quant_target_names() {
  std::string out;
  for (const TargetRow& r : kTargets) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

RecipeState recipe_state(const gguf::File& file) {
  RecipeState s;
  bool has_output = false;
  for (const gguf::TensorInfo& t : file.tensors()) {
    s.n_layer = std::max(s.n_layer, layer_of(t.name) + 1);
    if (t.name.find("attn_v.weight") != std::string::npos) ++s.n_attention_wv;
    if (t.name == "output.weight") has_output = true;
  }
  s.tied_embeddings = !has_output;
  return s;
}

bool is_quantizable(const gguf::TensorInfo& t) {
  // As llama-quantize: not the norms, the routers, nor a recurrent layer's conv taps
  // (ssm_conv1d: a few values per channel, read as f32).
  return t.n_dims >= 2 && ends_with(t.name, "weight") && t.name.find("_norm.weight") == std::string::npos &&
         t.name.find("ffn_gate_inp.weight") == std::string::npos && t.name.find("ssm_conv1d") == std::string::npos;
}

TensorChoice choose_tensor_type(const QuantTarget& target, const RecipeState& state, const gguf::TensorInfo& t) {
  TensorChoice c;
  if (!is_quantizable(t)) {
    c.type = t.dtype;
    return c;
  }
  c.quantized = true;
  DType type = target.base;
  const std::string& name = t.name;
  const int32_t layer = layer_of(name);
  const bool is_attn_v = name.find("attn_v.weight") != std::string::npos;
  if (is_quantized(type) && !target.pure) {
    const bool is_output = name == "output.weight" || (state.tied_embeddings && name == "token_embd.weight");
    if (is_output) {
      type = t.ne[0] % 256 != 0 ? DType::Q8_0 : type != DType::Q8_0 ? DType::Q6_K : type;
    } else if (target.k_mix) {
      // llama-quantize counts attn_v matrices in layer order (its tensor map sorts blk.N
      // numerically): the count is the layer.
      if (is_attn_v && layer >= 0 && use_more_bits(layer, state.n_attention_wv)) type = DType::Q6_K;
      if (name.find("ffn_down.weight") != std::string::npos && layer >= 0 && use_more_bits(layer, state.n_layer))
        type = DType::Q6_K;
      if (name.find("attn_qkv.weight") != std::string::npos)
        type = target.base == DType::Q4_K ? DType::Q5_K : DType::Q6_K;
    } else if ((type == DType::Q4_0 || type == DType::Q5_0) && state.imatrix &&
               name.find("ffn_down") != std::string::npos && layer >= 0 && layer < state.n_layer / 8) {
      type = type == DType::Q4_0 ? DType::Q4_1 : DType::Q5_1;
    }
  }
  if (target.token_embedding_type && name == "token_embd.weight") type = *target.token_embedding_type;
  if (target.output_tensor_type && name == "output.weight") type = *target.output_tensor_type;
  // Shapes the type's blocks do not divide.
  const int64_t block = type_traits(type).block_size;
  if (is_quantized(type) && t.ne[0] % block != 0) {
    const DType wanted = type;
    switch (type) {
      case DType::Q4_K: type = DType::Q5_0; break;
      case DType::Q5_K: type = DType::Q5_1; break;
      case DType::Q6_K: type = DType::Q8_0; break;
      default: break;
    }
    if (t.ne[0] % type_traits(type).block_size != 0) type = DType::F16;
    c.fallback_note = str_cat(name, ": rows of ", t.ne[0], " are not a multiple of ", block, " (", dtype_name(wanted),
                              "): ", dtype_name(type), " instead");
  }
  c.type = type;
  return c;
}

}  // namespace ridge::quant
