// The --weights flags that ridge run, serve, bench and perplexity share: bitsandbytes'
// NF4 and LLM.int8 formats applied at load (model.h WeightFormat), and --no-repack.
//
//   WeightFlags weights;
//   add_weight_flags(*cmd, weights);                 // --weights, --int8-threshold
//   Model::load(path, {.n_threads = 2, .weights = weights.format()});
#pragma once

#include <string>

#include "model/model.h"

namespace CLI {
class App;
}

namespace ridge::cli {

struct WeightFlags {
  std::string format = "as-stored";  // as-stored | nf4 | int8
  float int8_threshold = 6.0f;       // LLM.int8 outlier threshold (0: none)
  std::string matmul = "int8";       // int8 (8-bit activations) | float (kernels::MatmulMode)
  bool no_repack = false;            // keep the file's layouts zero-copy (kernels/gemm/repack.h)

  // Validated (throws ridge::Error naming the flag); also sets the process-wide outlier
  // threshold the int8 matmul reads, the matmul mode, and whether the load repacks.
  WeightFormat format_for_load() const;
};

void add_weight_flags(CLI::App& cmd, WeightFlags& flags);

}  // namespace ridge::cli
