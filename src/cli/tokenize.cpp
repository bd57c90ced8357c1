// `ridge tokenize -m MODEL [-f FILE | TEXT]`: token ids of a text, space-separated on one
// line (or, with --pieces, one "id -> 'piece'" line per token). Works on vocab-only GGUFs.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool pieces = false;
  bool no_add_special = false;
  bool no_parse_special = false;
};

// Shows a piece with control characters escaped, so each token stays on one line.
std::string printable(std::string_view piece) {
  std::string out;
  for (unsigned char ch : piece) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (ch < 0x20 || ch == 0x7f) out += str_cat("\\x", "0123456789abcdef"[ch >> 4], "0123456789abcdef"[ch & 15]);
    else out += static_cast<char>(ch);
  }
  return out;
}

void run(const TokenizeOptions& opt) {
  if (!opt.file.empty() && !opt.text.empty()) throw Error("give either TEXT or -f FILE, not both");
  std::string text = opt.file.empty() ? opt.text : read_text_file(opt.file);
  gguf::File f = gguf::File::open(resolve_model_path(opt.model));
  Tokenizer tok = Tokenizer::from_gguf(f);
  std::vector<int32_t> ids = tok.encode(text, !opt.no_add_special, !opt.no_parse_special);
  if (opt.pieces) {
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, printable(tok.token_to_piece(id, true)).c_str());
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", opt->model, "GGUF file (a vocab-only one is fine) or cached model name")->required();
  cmd->add_option("text", opt->text, "Text to tokenize");
  cmd->add_option("-f,--file", opt->file, "Read the text from a file");
  cmd->add_flag("--pieces", opt->pieces, "Show each token's text too, one token per line");
  cmd->add_flag("--no-add-special", opt->no_add_special, "Do not add BOS/EOS");
  cmd->add_flag("--no-parse-special", opt->no_parse_special, "Treat special-token text as plain text");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace ridge::cli
