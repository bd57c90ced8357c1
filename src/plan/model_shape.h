// What capacity planning needs to know about a model: parameter count, layers, KV heads,
// head size and each layer's attention window; from a GGUF file or from a built-in preset
// of a published model (its config.json values).
//
//   const ModelPreset* p = find_model_preset("llama3-70b");   // null if unknown
//   ModelShape m = shape_from_preset(*p);                     // m.n_params == 70,553,706,496
//   ModelShape g = shape_from_gguf(gguf::File::open(path));   // counts the file's tensors
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::gguf {
class File;
}

namespace ridge::plan {

struct ModelShape {
  std::string id;       // preset id, or the GGUF file name
  std::string display;  // "Llama 3 70B"
  std::string source;   // "preset: meta-llama/Meta-Llama-3-70B config.json" or the file path
  std::string note;     // caveats worth printing (vision tower not counted, ...)
  int64_t n_params = 0;
  // Of those, what tensor parallelism keeps whole on every rank: the token embedding and
  // the norms (the layer matrices, their biases and an untied output matrix are split).
  int64_t n_whole_params = 0;
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_kv_head = 0;
  int32_t d_head = 0;
  int32_t n_ff = 0;
  int32_t n_vocab = 0;
  std::vector<int32_t> layer_window;  // [attention layers] sliding window in tokens; 0 = global
  // Hybrid models: the recurrent layers (no K/V), and the f32 state one sequence keeps in
  // them (the engine's KvCache::state_bytes_per_sequence, before its cache-line padding).
  int32_t n_recurrent_layers = 0;
  double state_bytes_per_sequence = 0.0;
  // GGUF only: the weights as stored, and their types ("q4_K 61%, q6_K 39%" by bytes).
  double file_weight_bytes = 0.0;
  double file_whole_bytes = 0.0;  // of those, the tensors of n_whole_params
  std::string file_weight_types;

  // Layers per window size (0 = global), e.g. {0: 10, 1024: 52}.
  std::map<int32_t, int> layers_by_window() const;
  // "80 layers, 64 heads (8 KV) x 128, 70.55 B params"
  std::string summary() const;
};

// A published model, as its Hugging Face config.json describes it. Parameter counts are
// computed from these (see count_params) and tested against the published totals.
struct ModelPreset {
  std::string_view id;       // "llama3-70b"
  std::string_view display;  // "Llama 3 70B"
  std::string_view repo;     // "meta-llama/Meta-Llama-3-70B"
  int32_t n_embd, n_layer, n_head, n_kv_head, d_head, n_ff, n_vocab;
  bool tied_embeddings;    // output head shares the token embedding
  bool qkv_bias;           // Qwen2: biases on q, k, v
  bool qk_norm;            // Gemma 3: RMS norm weights on each q and k head
  int norms_per_layer;     // RMS norm weight vectors per layer (2, or 4 with sandwich norms)
  int32_t window;          // sliding window in tokens; 0 = none
  int global_every;        // with a window: layer il is global iff il % global_every ==
                           // global_every - 1; 0 = every layer uses the window
  std::string_view note;
};

const std::vector<ModelPreset>& model_presets();
// Case-insensitive; '-', '_', '.' and spaces are ignored ("Llama-3.1-405B" finds llama3.1-405b).
const ModelPreset* find_model_preset(std::string_view id);
// Ids of all presets, comma-separated, for error messages.
std::string model_preset_ids();

// Embeddings (+ untied output head) + per layer (q, k, v, o projections, biases, gated MLP,
// norms) + final norm.
int64_t count_params(const ModelPreset& preset);
ModelShape shape_from_preset(const ModelPreset& preset);
// Reads hyper-parameters with ModelConfig::from_gguf and counts the tensors. Throws
// ridge::Error for architectures ModelConfig does not support.
ModelShape shape_from_gguf(const gguf::File& file);

// A model argument: a preset id, else a GGUF file that resolve_path finds (the CLI passes
// its model-cache lookup). Throws ridge::Error listing the presets when neither matches.
ModelShape load_model_shape(const std::string& model,
                            const std::function<std::string(const std::string&)>& resolve_path);

}  // namespace ridge::plan
