// GPTQ over a whole model, layer by layer as the paper does it: each layer's Hessians come
// from the calibration windows' residual streams entering it, which earlier layers already
// computed with their quantized weights; its matrices are quantized (quant/gptq.h) and the
// model switched to them before the streams advance. Matrices whose recipe type has no
// block grid (F16, BF16, F32) are left to the ordinary path.
//
//   QuantizedMatrices q = gptq_model(model, file, target, set, {}, progress);
//   q.at("blk.0.attn_q.weight").bytes   // ordinary blocks of q.at(...).type
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/recipe.h"

namespace ridge::quant {

struct QuantizedMatrix {
  DType type = DType::F32;
  std::vector<uint8_t> bytes;  // [n_out][row_size(type, n_in)]
};
using QuantizedMatrices = std::map<std::string, QuantizedMatrix>;

// model: loaded from file (the weights GPTQ starts from, typically F16); its layer
// matrices are replaced by their quantized versions as it goes. start: f32 weights to
// begin from instead of the file's where given (AWQ's scaled matrices; the model must
// already compute with them).
QuantizedMatrices gptq_model(Model& model, const gguf::File& file, const QuantTarget& target,
                             const CalibrationSet& set, const GptqOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             const std::map<std::string, std::vector<float>>* start = nullptr);

// Dequantizes one tensor of the file to f32 rows.
std::vector<float> tensor_as_f32(const gguf::TensorInfo& tensor);

}  // namespace ridge::quant
