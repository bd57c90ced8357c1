#include "core/part_file.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace ridge {

namespace {
std::atomic<unsigned> next_part{0};
}

PartFile::PartFile(std::string final_path)
    : final_path_(std::move(final_path)),
      part_path_(str_cat(final_path_, ".part.", ::getpid(), ".", next_part.fetch_add(1))) {}

PartFile::~PartFile() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove(part_path_, ec);
}

void PartFile::commit() {
  std::error_code ec;
  std::filesystem::rename(part_path_, final_path_, ec);
  if (ec) throw Error(str_cat("cannot rename ", part_path_, " to ", final_path_, " (", ec.message(), ")"));
  committed_ = true;
}

}  // namespace ridge
