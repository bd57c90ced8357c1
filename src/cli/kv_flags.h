// The --kv-type flag that ridge run, serve, bench and perplexity share: the element type
// of the KV cache (engine.h EngineOptions::kv_type), f16 unless told otherwise.
//
//   KvFlags kv;
//   add_kv_flags(*cmd, kv);                      // --kv-type f32|f16|bf16|q8_0|q4_0
//   engine_options.kv_type = kv.dtype();         // throws ridge::Error naming the flag
#pragma once

#include <string>

#include "core/dtype.h"

namespace CLI {
class App;
}

namespace ridge::cli {

struct KvFlags {
  std::string type = "f16";

  DType dtype() const;  // validated: one of the cache's types (kv/kv_cache.h kKvDtypes)
};

void add_kv_flags(CLI::App& cmd, KvFlags& flags);

}  // namespace ridge::cli
