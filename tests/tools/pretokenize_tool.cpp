// Test helper: splits texts with a named pre-tokenizer so Python can compare the pieces with
// its own reference (tests/python/test_pretokenizer_regex.py).
//
//   pretokenize_tool --list                 # every known tokenizer.ggml.pre name, one a line
//   pretokenize_tool NAME --patterns        # its regexes, hex-encoded UTF-8, one a line
//   pretokenize_tool NAME [--no-fast-paths] < records
// Records on stdin are "<byte count>\n<bytes>" one after another; for each the tool prints one
// line with the byte lengths of the pieces, separated by spaces.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace {

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--list") {
    for (const std::string& name : ridge::PreTokenizer::known_names()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (args.empty() || args.size() > 2) {
    std::fprintf(stderr, "usage: pretokenize_tool --list | NAME [--patterns | --no-fast-paths] < records\n");
    return 2;
  }
  ridge::PreTokenizer pre = ridge::PreTokenizer::for_name(args[0]);
  const std::string option = args.size() == 2 ? args[1] : "";
  if (option == "--patterns") {
    for (const std::string& pattern : pre.patterns()) {
      for (unsigned char c : pattern) std::printf("%02x", c);
      std::printf("\n");
    }
    return 0;
  }
  if (option == "--no-fast-paths") {
    pre = ridge::PreTokenizer::from_patterns(pre.name(), pre.patterns(), false);
  } else if (!option.empty()) {
    throw ridge::Error("pretokenize_tool: unknown option " + option);
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  std::string out;
  while (pos < input.size()) {
    const size_t newline = input.find('\n', pos);
    if (newline == std::string::npos) throw ridge::Error("pretokenize_tool: record header without newline");
    const size_t length = std::stoul(input.substr(pos, newline - pos));
    if (newline + 1 + length > input.size()) throw ridge::Error("pretokenize_tool: record runs past the input");
    const std::string_view text(input.data() + newline + 1, length);
    bool first = true;
    for (std::string_view piece : pre.split(text)) {
      if (!first) out += ' ';
      out += std::to_string(piece.size());
      first = false;
    }
    out += '\n';
    pos = newline + 1 + length;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
