#include "cli/weight_flags.h"

#include <CLI/CLI.hpp>
#include <cmath>

#include "core/error.h"
#include "kernels/gemm/gemm.h"

namespace ridge::cli {

WeightFormat WeightFlags::format_for_load() const {
  if (!std::isfinite(int8_threshold) || int8_threshold < 0)
    throw Error(str_cat("--int8-threshold must be a finite number >= 0, got ", int8_threshold));
  kernels::set_int8_outlier_threshold(int8_threshold);
  if (matmul != "int8" && matmul != "float")
    throw Error(str_cat("--matmul '", matmul, "': expected int8 or float"));
  kernels::set_matmul_mode(matmul == "float" ? kernels::MatmulMode::kFloat : kernels::MatmulMode::kQuantized);
  kernels::set_weight_repack(!no_repack);
  try {
    return parse_weight_format(format);
  } catch (const Error& e) {
    throw Error(str_cat("--weights: ", e.what()));
  }
}

void add_weight_flags(CLI::App& cmd, WeightFlags& flags) {
  cmd.add_option("--weights", flags.format,
                 "Layer weights as stored, or converted at load: nf4 (NormalFloat4, blocks of 64, "
                 "double-quantized scales) or int8 (LLM.int8: row-wise int8 with outlier columns in f32)")
      ->capture_default_str();
  cmd.add_option("--int8-threshold", flags.int8_threshold,
                 "With --weights int8: activations above this magnitude are outliers computed in f32 (0: none)")
      ->capture_default_str();
  cmd.add_option("--matmul", flags.matmul,
                 "How weight matmuls multiply: int8 (activations quantized to 8 bits, the fast path) or float "
                 "(weight rows dequantized, f32 activations: several times slower, for comparisons; a change in "
                 "the last bits of an input cannot flip an activation's rounding)")
      ->capture_default_str();
  cmd.add_flag("--no-repack", flags.no_repack,
               "Run the layer matrices from the file's mapped bytes as they are (zero-copy), instead of repacking "
               "the types the CPU's decode kernels read faster in another layout (Q4_K on AVX-512 VNNI) into "
               "memory the model owns at load");
}

}  // namespace ridge::cli
