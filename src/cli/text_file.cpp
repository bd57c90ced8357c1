#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace ridge::cli {

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(str_cat(path, ": is a directory, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot open (", std::strerror(errno), ")"));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw Error(str_cat(path, ": read failed"));
  return text;
}

}  // namespace ridge::cli
