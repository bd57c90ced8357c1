#include "cli/kv_flags.h"

#include <CLI/CLI.hpp>
#include <optional>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace ridge::cli {

DType KvFlags::dtype() const {
  const std::optional<DType> t = dtype_from_name(type);
  if (t && is_kv_dtype(*t)) return *t;
  throw Error(str_cat("--kv-type: unknown KV cache type '", type, "' (use ", kv_dtype_names(), ")"));
}

void add_kv_flags(CLI::App& cmd, KvFlags& flags) {
  cmd.add_option("--kv-type", flags.type,
                 str_cat("Element type of the KV cache: ", kv_dtype_names(), " (f16 halves f32's bytes per token; q8_0 and q4_0 "
                         "cut them to 53% and 28% of f16's)"))
      ->capture_default_str();
}

}  // namespace ridge::cli
