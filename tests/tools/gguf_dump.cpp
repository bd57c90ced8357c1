// Prints a GGUF file's header, metadata and tensor table as JSON (arrays in full), for
// tests that compare our reader with the `gguf` Python package and for people curious
// about a file. On malformed input it prints the reader's error and exits 1.
//
//   gguf_dump model.gguf             # JSON on stdout
//   gguf_dump --time vocab.gguf      # also "parse_ms: ..." on stderr (best of 5 parses)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gguf/gguf.h"

namespace {

using nlohmann::ordered_json;
using ridge::gguf::Value;
using ridge::gguf::ValueType;

// Scalars as JSON scalars; an array as {"elem_type", "items"} so nested types survive.
ordered_json to_json(const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32:
    case ValueType::UINT64:
      return v.as_u64();
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return v.as_i64();
    case ValueType::FLOAT32: case ValueType::FLOAT64: return v.as_f64();
    case ValueType::BOOL: return v.as_bool();
    case ValueType::STRING: return v.as_string();
    case ValueType::ARRAY: {
      const ridge::gguf::Array& a = v.as_array();
      ordered_json items = ordered_json::array();
      for (size_t i = 0; i < a.size(); ++i) items.push_back(to_json(a.at(i)));
      return ordered_json{{"elem_type", ridge::gguf::value_type_name(a.elem_type())},
                          {"items", std::move(items)}};
    }
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  bool timed = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--time") {
      timed = true;
    } else if (path.empty()) {
      path = arg;
    } else {
      path.clear();
      break;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: gguf_dump [--time] FILE.gguf\n");
    return 2;
  }
  try {
    ridge::gguf::File f = ridge::gguf::File::open(path);
    if (timed) {
      double best_ms = 1e30;
      for (int i = 0; i < 5; ++i) {
        auto start = std::chrono::steady_clock::now();
        ridge::gguf::File again = ridge::gguf::File::open(path);
        std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
        best_ms = std::min(best_ms, took.count());
      }
      std::fprintf(stderr, "parse_ms: %.3f\n", best_ms);
    }
    ordered_json out;
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    out["file_size"] = f.file_size();
    ordered_json metadata = ordered_json::array();
    for (const ridge::gguf::KeyValue& kv : f.metadata())
      metadata.push_back({{"key", kv.key},
                          {"type", ridge::gguf::value_type_name(kv.value.type)},
                          {"value", to_json(kv.value)}});
    out["metadata"] = std::move(metadata);
    ordered_json tensors = ordered_json::array();
    for (const ridge::gguf::TensorInfo& t : f.tensors())
      tensors.push_back({{"name", t.name},
                         {"type", ridge::dtype_name(t.dtype)},
                         {"type_id", static_cast<uint32_t>(t.dtype)},
                         {"shape", std::vector<int64_t>(t.ne, t.ne + t.n_dims)},
                         {"offset", t.offset},
                         {"file_offset", f.data_offset() + t.offset},
                         {"nbytes", t.nbytes}});
    out["tensors"] = std::move(tensors);
    // Keys and strings in the wild are not always UTF-8; replace bad bytes rather than fail.
    std::cout << out.dump(1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  } catch (const ridge::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
