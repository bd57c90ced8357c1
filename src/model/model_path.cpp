// The model cache, as scripts/fetch-models lays it out.
#include "model/model_path.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

namespace ridge {
namespace fs = std::filesystem;

static fs::path model_cache_dir() {
  if (const char* dir = std::getenv("RIDGE_MODEL_CACHE"); dir != nullptr && *dir != '\0')
    return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / ".cache" / "ridge" / "models";
}

std::string resolve_model_path(const std::string& model) {
  std::error_code ec;
  if (fs::is_regular_file(model, ec)) return model;
  fs::path cache = model_cache_dir();
  if (fs::is_regular_file(cache / (model + ".gguf"), ec)) return (cache / (model + ".gguf")).string();
  // scripts/fetch-models keeps each model in <cache>/<name>/<original file name>.gguf.
  if (fs::is_directory(cache / model, ec)) {
    for (const auto& entry : fs::directory_iterator(cache / model, ec))
      if (entry.path().extension() == ".gguf") return entry.path().string();
  }

  // A path (not a cached model's name) is a file or nothing: no cache hints for a typo'd path.
  const bool path_like = model.find('/') != std::string::npos || fs::path(model).extension() == ".gguf";
  if (path_like) {
    if (fs::is_directory(model, ec)) throw Error(str_cat("model '", model, "': is a directory, not a GGUF file"));
    throw Error(str_cat("model '", model, "': no such file"));
  }
  std::string known;
  if (fs::is_directory(cache, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(cache, ec))
      if (entry.path().extension() == ".gguf")
        known += (known.empty() ? "" : ", ") + entry.path().parent_path().filename().string();
  }
  throw Error(str_cat("model '", model, "': no such file, and not in the model cache ", cache.string(),
                      known.empty() ? std::string(" (empty)") : str_cat(" (cached: ", known, ")"),
                      "; if it is one `scripts/fetch-models --list` lists, fetch it with: scripts/fetch-models ",
                      model));
}

}  // namespace ridge
