// Test helpers for the tokenizer suites: the shared fixture vocabularies (GGUF, the Llama 3
// tiktoken file, Qwen2's vocab.json + merges.txt), llama.cpp's .inp/.out test vectors, and
// the real model vocabularies fetched by scripts/fetch-models when they are present.
//
//   const Tokenizer& tok = fixture_tokenizer("gpt-2");      // built once per process
//   std::vector<VectorCase> cases = read_test_vectors("gpt-2");
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ridge::test {

inline std::string fixtures_dir() {
  const char* env = std::getenv("RIDGE_FIXTURES");
  return env != nullptr ? env : RIDGE_FIXTURES;
}
inline std::string vocab_dir() { return fixtures_dir() + "/vocab"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat("cannot open ", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// First `max_bytes` of wiki.test.raw, cut back to a line end so no character is split.
inline std::string wiki_text(size_t max_bytes) {
  std::string text = read_file(fixtures_dir() + "/text/wiki.test.raw");
  if (text.size() > max_bytes) {
    text.resize(max_bytes);
    text.resize(text.rfind('\n') + 1);
  }
  return text;
}

struct VectorCase {
  std::string input;
  std::vector<int32_t> expected;
};

// llama.cpp tests/test-tokenizer-0 format: cases separated by "\n__ggml_vocab_test__\n"
// in .inp, one line of space-separated ids per case in .out.
inline std::vector<VectorCase> read_test_vectors(const std::string& name) {
  const std::string base = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  const std::string inp = read_file(base + ".inp");
  const std::string out = read_file(base + ".out");
  static const std::string kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<VectorCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t end = inp.find(kSeparator, pos);
    if (end == std::string::npos) end = inp.size();
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + kSeparator.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; std::getline(lines, line); ++i) {
    if (i >= cases.size()) throw Error(str_cat(base, ".out has more lines than cases"));
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].expected.push_back(id);
  }
  return cases;
}

// Llama 3 from its tiktoken file: ids are ranks, merges are derived the way Hugging Face's
// converter does (every split of a token into two tokens, ordered by the token's rank,
// then by the ranks of the halves), specials at 128000..128255.
inline Vocab load_llama3_tiktoken() {
  const std::string data = read_file(vocab_dir() + "/llama3-tokenizer.tiktoken");
  auto b64 = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<std::string> raw;
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    std::string bytes;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < space; ++i) {
      const int v = b64(line[i]);
      if (v < 0) continue;  // '=' padding
      acc = (acc << 6) | static_cast<uint32_t>(v);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes.push_back(static_cast<char>((acc >> bits) & 0xFF));
      }
    }
    const auto rank = static_cast<size_t>(std::stoul(line.substr(space + 1)));
    if (rank != raw.size()) throw Error("llama3-tokenizer.tiktoken: ranks are not 0, 1, 2, ...");
    raw.push_back(std::move(bytes));
  }
  std::unordered_map<std::string, int32_t> rank_of;
  for (size_t i = 0; i < raw.size(); ++i) rank_of.emplace(raw[i], static_cast<int32_t>(i));
  auto mapped = [](const std::string& bytes) {
    std::string s;
    for (char c : bytes) s += unicode::byte_to_unicode(static_cast<uint8_t>(c));
    return s;
  };

  VocabSpec spec;
  spec.origin = "llama3-tokenizer.tiktoken";
  spec.type = VocabType::kBytePairEncoding;
  spec.pre = "llama-bpe";
  for (const std::string& bytes : raw) spec.tokens.push_back(mapped(bytes));
  for (const std::string& bytes : raw) {
    if (bytes.size() < 2) continue;
    std::vector<std::pair<int32_t, int32_t>> splits;
    for (size_t k = 1; k < bytes.size(); ++k) {
      auto l = rank_of.find(bytes.substr(0, k));
      auto r = rank_of.find(bytes.substr(k));
      if (l != rank_of.end() && r != rank_of.end()) splits.emplace_back(l->second, r->second);
    }
    std::sort(splits.begin(), splits.end());
    for (const auto& [l, r] : splits) spec.merges.push_back(spec.tokens[l] + " " + spec.tokens[r]);
  }
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  const std::map<int, std::string> named = {{0, "<|begin_of_text|>"}, {1, "<|end_of_text|>"},
                                            {6, "<|start_header_id|>"}, {7, "<|end_header_id|>"},
                                            {9, "<|eot_id|>"}};
  for (int i = 0, reserved = 0; i < 256; ++i) {
    auto it = named.find(i);
    spec.tokens.push_back(it != named.end()
                              ? it->second
                              : str_cat("<|reserved_special_token_", reserved++, "|>"));
    spec.types.push_back(TokenType::kControl);
  }
  spec.bos_id = 128000;
  spec.eos_id = 128001;
  return Vocab::from_spec(std::move(spec));
}

// Qwen2 from Hugging Face's vocab.json and merges.txt, with its three special tokens.
inline Vocab load_qwen2_hf() {
  const std::string dir = vocab_dir() + "/qwen2";
  const nlohmann::json vocab = nlohmann::json::parse(read_file(dir + "/vocab.json"));
  VocabSpec spec;
  spec.origin = "qwen2/vocab.json";
  spec.type = VocabType::kBytePairEncoding;
  spec.pre = "qwen2";
  spec.tokens.resize(vocab.size());
  for (const auto& [text, id] : vocab.items()) spec.tokens.at(id.get<size_t>()) = text;
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    spec.tokens.push_back(special);
    spec.types.push_back(TokenType::kControl);
  }
  std::istringstream merges(read_file(dir + "/merges.txt"));
  std::string line;
  while (std::getline(merges, line)) {
    if (!line.empty() && line.rfind("#version", 0) != 0) spec.merges.push_back(line);
  }
  spec.bos_id = 151643;
  spec.eos_id = 151643;
  spec.add_bos = false;
  return Vocab::from_spec(std::move(spec));
}

// Tokenizers for the fixture vocabularies by name: "llama-spm", "gpt-2", ... (GGUF files),
// "llama-bpe" (tiktoken), "qwen2" (HF files). Built once per process.
inline const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[name];
  if (!slot) {
    if (name == "llama-bpe") {
      slot = std::make_unique<Tokenizer>(load_llama3_tiktoken());
    } else if (name == "qwen2") {
      slot = std::make_unique<Tokenizer>(load_qwen2_hf());
    } else {
      const gguf::File file = gguf::File::open(vocab_dir() + "/ggml-vocab-" + name + ".gguf");
      slot = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
    }
  }
  return *slot;
}

// A model GGUF from scripts/fetch-models' cache ($RIDGE_MODEL_CACHE or ~/.cache/ridge/models,
// laid out <cache>/<name>/<file>.gguf), or "" when it has not been fetched.
inline std::string cached_model_path(const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("RIDGE_MODEL_CACHE")) roots.emplace_back(env);
  if (const char* home = std::getenv("HOME")) roots.emplace_back(fs::path(home) / ".cache/ridge/models");
  for (const fs::path& root : roots) {
    std::error_code ec;
    if (fs::is_regular_file(root / (name + ".gguf"), ec)) return (root / (name + ".gguf")).string();
    if (!fs::is_directory(root / name, ec)) continue;
    for (const auto& entry : fs::directory_iterator(root / name, ec)) {
      if (entry.path().extension() == ".gguf" && entry.is_regular_file(ec)) return entry.path().string();
    }
  }
  return "";
}

// Tokenizer of a fetched model, built once per process; null when the model is absent.
inline const Tokenizer* model_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::unique_ptr<Tokenizer> tok;
    const std::string path = cached_model_path(name);
    if (!path.empty()) tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(gguf::File::open(path)));
    it = cache.emplace(name, std::move(tok)).first;
  }
  return it->second.get();
}

// Printable form of a test string for failure messages.
inline std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out.push_back(' ');
    out += std::to_string(id);
  }
  return out;
}

}  // namespace ridge::test
