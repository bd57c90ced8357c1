// Calibration data for the quantization methods that look at activations (imatrix, GPTQ,
// AWQ): text cut into windows of tokens, run through the model either whole (imatrix) or
// one layer at a time over stored residual streams (GPTQ, AWQ: quantize a layer, then feed
// the next layer what the quantized one outputs), with a ForwardObserver watching the
// inputs of the weight matmuls.
//
//   const CalibrationSet set = calibration_windows(tok, text, 512, 16, /*skip_tokens=*/150000);
//   LayerwiseRunner runner(model, set);
//   runner.run_layer(0, &observer, /*advance=*/false);   // statistics of layer 0's inputs
//   ... quantize layer 0, model.replace_matrix(...) ...
//   runner.run_layer(0, nullptr, /*advance=*/true);      // streams now enter layer 1
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge::quant {

struct CalibrationSet {
  int32_t n_ctx = 0;
  std::vector<std::vector<int32_t>> windows;  // each n_ctx tokens, BOS first where the vocab adds one
  int64_t n_tokens() const { return static_cast<int64_t>(windows.size()) * n_ctx; }
};

// Windows of n_ctx tokens of the text from token skip_tokens on (so calibration can use a
// part of a file that evaluation does not), at most max_windows. Throws ridge::Error when
// not even one window fits.
CalibrationSet calibration_windows(const Tokenizer& tokenizer, const std::string& text, int32_t n_ctx,
                                   int32_t max_windows, int64_t skip_tokens);

// Every window through the whole model (a fresh sequence each) with the observer set;
// on_window (if set) hears how many windows are done after each.
void run_whole(Model& model, const CalibrationSet& set, ForwardObserver& observer,
               const std::function<void(size_t done)>& on_window = nullptr);

// The file's layer matrices (tensor names) that take a site's input in layer il: of
// attn_q, attn_k, attn_v and a fused attn_qkv (kQkv); attn_output; ffn_gate and ffn_up,
// fused or not (kGateUp); ffn_down: those present.
std::vector<std::string> site_matrix_names(const gguf::File& file, int32_t il, MatmulSite site);

// The windows' residual streams, advanced one layer at a time with the model's current
// weights.
class LayerwiseRunner {
 public:
  LayerwiseRunner(Model& model, const CalibrationSet& set);
  // Runs layer il over every window with the observer set (null: none); with advance the
  // stored streams become the layer's output.
  void run_layer(int il, ForwardObserver* observer, bool advance);
  int next_layer() const { return next_layer_; }

 private:
  Model& model_;
  const CalibrationSet& set_;
  std::unique_ptr<KvCache> cache_;
  Batch batch_;
  std::vector<std::vector<float>> streams_;  // [window][n_ctx][n_embd]
  std::vector<float> scratch_;               // [n_ctx][n_embd]
  int next_layer_ = 0;
};

}  // namespace ridge::quant
