// Where a model argument points: a GGUF path as given, or the short name of a model that
// scripts/fetch-models keeps in the model cache. One place for every client (the ridge
// command, the Python package).
//
//   std::string path = resolve_model_path("gemma3-270m");
//   // ~/.cache/ridge/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf
#pragma once

#include <string>

namespace ridge {

// An existing file is used as is; otherwise the name is looked up in the model cache
// (RIDGE_MODEL_CACHE or ~/.cache/ridge/models). Throws ridge::Error listing the cached
// models and how to fetch one.
std::string resolve_model_path(const std::string& model);

}  // namespace ridge
