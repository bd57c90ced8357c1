// Deployment sizing, the arithmetic behind `ridge size`: weight memory, KV-cache bytes per
// token and per conversation (sliding-window layers hold at most their window), and how
// many conversations fit in the GPUs' memory once the weights are loaded.
//
//   Deployment d;
//   d.gpus = parse_gpus("2x80GB"); d.ctx = 8192;
//   d.weights = parse_weight_format("bf16"); d.kv = parse_kv_format("bf16");
//   SizeReport r = compute_size(shape_from_preset(*find_model_preset("llama3-70b")), d);
//   r.kv_bytes_per_token == 327680;  r.max_conversations == 7;  r.lines: the steps, in words
//
// KV bytes per token = 2 (K and V) x n_layer x n_kv_head x d_head x bytes per value. The
// cache is assumed split evenly over the GPUs (tensor parallel); what else the GPUs hold
// (activations, CUDA context, fragmentation) is the --reserve the user states, none by default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/model_shape.h"
#include "plan/units.h"

namespace ridge::plan {

// How weights or KV values are stored: bytes per value, or "as stored in the GGUF".
struct NumberFormat {
  std::string name;             // "bf16", "int8", "q4_K", "file"
  double bytes_per_value = 0.0;
  bool from_file = false;       // weights only: the GGUF's own tensor bytes
  std::string detail;           // "2 B", "1 B, scales not counted", "144 B per 256 values"
};

// bf16 | fp16 | fp32 | int8 | int4 | file, or any GGUF tensor type name (q8_0, q4_K, ...).
NumberFormat parse_weight_format(std::string_view text);
// fp16 | bf16 | int8 | fp32.
NumberFormat parse_kv_format(std::string_view text);

struct Deployment {
  std::optional<GpuSpec> gpus;  // none: report weights and KV only
  int64_t ctx = 4096;           // tokens per conversation
  NumberFormat weights;
  NumberFormat kv;
  Reserve reserve;
  // Tensor-parallel ranks (ridge's --tp): each holds 1/tp of the layer matrices and of the
  // KV heads (a KV head repeated when there are fewer than ranks) and of the output
  // matrix, plus the embedding and norms whole. With GPUs (or hosts) their count must equal tp, and
  // each one's memory holds one rank.
  int tp = 1;
};

// One step of the arithmetic, printed as "label  formula  = result".
struct ArithmeticLine {
  std::string label;
  std::string formula;
  std::string result;
};

struct SizeReport {
  double weight_bytes = 0.0;
  double weight_bytes_per_param = 0.0;
  double kv_bytes_per_token = 0.0;         // every layer, before any window cap
  double kv_bytes_per_conversation = 0.0;  // ctx tokens, window layers capped, plus the
                                           // recurrent state of a hybrid model
  double state_bytes_per_sequence = 0.0;   // hybrid models: the recurrent layers' state
  // Only with GPUs:
  double total_bytes = 0.0;
  double reserve_bytes = 0.0;
  double free_bytes = 0.0;                 // total - weights - reserve; may be negative
  int64_t max_conversations = 0;
  // Tensor parallelism (tp > 1), per rank:
  double rank_weight_bytes = 0.0;
  double rank_kv_bytes_per_token = 0.0;
  double rank_kv_bytes_per_conversation = 0.0;
  std::vector<ArithmeticLine> lines;
};

// KV bytes one conversation of ctx tokens holds: per attention layer 2 x n_kv_head x d_head
// x bytes_per_value x min(ctx, window) (window 0 = ctx).
double kv_bytes_for_context(const ModelShape& model, double kv_bytes_per_value, int64_t ctx);

// Weight bytes under a format (file: the GGUF's tensor bytes). Throws ridge::Error for
// "file" on a model with no file.
double weight_bytes(const ModelShape& model, const NumberFormat& weights);

// Throws ridge::Error for ctx < 1, "file" weights of a preset, or a tp the model's heads
// do not split into (as ridge --tp refuses it), or GPUs not one per rank.
SizeReport compute_size(const ModelShape& model, const Deployment& deployment);

}  // namespace ridge::plan
