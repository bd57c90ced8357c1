// `ridge inspect MODEL`: what a GGUF file holds — metadata, the tensor table, parameter
// count and bytes per parameter — and what ridge makes of it (the family, whether every
// tensor is accounted for, the RoPE scaling, or why it cannot run it), as text or, with
// --json, as one JSON object.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace ridge::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool all_values = false;  // print arrays in full
};

// What ridge makes of the file: its model family's reading of the metadata and tensors.
struct Verdict {
  bool runs = false;
  std::string family;  // the architecture as ridge runs it
  std::string rope;    // layout, base and scaling
  std::string error;   // why ridge cannot run the file
};

Verdict verdict(const gguf::File& f) {
  Verdict v;
  try {
    const ModelConfig c = ModelConfig::from_gguf(f);
    const ModelWeights w = ModelWeights::load(f, c);  // zero-copy views; refuses unused tensors
    v.runs = true;
    v.family = c.summary();
    v.rope = str_cat(c.rope_mode == kernels::RopeMode::Neox ? "neox" : "adjacent pairs", ", ", c.n_rot, " dims");
    // The global (full-attention) layers' RoPE: windowed layers may keep an unscaled one.
    const LayerConfig* g = &c.layers.front();
    for (const LayerConfig& l : c.layers)
      if (l.window == 0) g = &l;
    v.rope += str_cat(", base ", g->rope_base);
    if (g->yarn)
      v.rope += str_cat(", YaRN x", 1.0f / g->rope_scale, " (ramp over pairs ", g->yarn_low, "..", g->yarn_high,
                        ", attention factor ", g->rope_mscale, ")");
    else if (g->rope_scale != 1.0f)
      v.rope += str_cat(", linear scaling x", 1.0f / g->rope_scale);
    if (w.rope_freqs != nullptr) v.rope += ", llama3 frequency factors (rope_freqs.weight)";
    if (g->rope_scale == 1.0f && w.rope_freqs == nullptr) v.rope += ", no scaling";
  } catch (const Error& e) {
    v.error = e.what();
  }
  return v;
}

nlohmann::json value_to_json(const gguf::Value& v, size_t max_items) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::BOOL: return v.as_bool();
    case ValueType::STRING: {
      // Invalid UTF-8 in metadata must not abort the dump: replace, don't throw.
      nlohmann::json s = v.as_string();
      return nlohmann::json::parse(s.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: return v.as_f64();
    case ValueType::ARRAY: {
      const gguf::Array& a = v.as_array();
      nlohmann::json out = nlohmann::json::array();
      size_t n = std::min(a.size(), max_items);
      for (size_t i = 0; i < n; ++i) out.push_back(value_to_json(a.at(i), max_items));
      if (n < a.size()) {
        return nlohmann::json{{"type", std::string(gguf::value_type_name(a.elem_type()))},
                              {"length", a.size()},
                              {"head", out}};
      }
      return out;
    }
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64: return v.as_i64();
    default: return v.as_u64();
  }
}

struct Totals {
  uint64_t params = 0;
  uint64_t bytes = 0;
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // name -> (tensors, bytes)
};

Totals count(const gguf::File& f) {
  Totals t;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    t.params += static_cast<uint64_t>(ti.n_elements());
    t.bytes += ti.nbytes;
    auto& [n, bytes] = t.by_type[std::string(dtype_name(ti.dtype))];
    ++n;
    bytes += ti.nbytes;
  }
  return t;
}

void print_json(const gguf::File& f, const InspectOptions& opt) {
  size_t max_items = opt.all_values ? SIZE_MAX : 16;
  nlohmann::json meta = nlohmann::json::object();
  for (const gguf::KeyValue& kv : f.metadata()) meta[kv.key] = value_to_json(kv.value, max_items);
  nlohmann::json tensors = nlohmann::json::array();
  for (const gguf::TensorInfo& ti : f.tensors()) {
    nlohmann::json dims = nlohmann::json::array();
    for (int d = 0; d < ti.n_dims; ++d) dims.push_back(ti.ne[d]);
    tensors.push_back({{"name", ti.name}, {"type", std::string(dtype_name(ti.dtype))},
                       {"shape", dims}, {"offset", ti.offset}, {"bytes", ti.nbytes}});
  }
  Totals t = count(f);
  nlohmann::json by_type = nlohmann::json::object();
  for (const auto& [name, nb] : t.by_type) by_type[name] = {{"tensors", nb.first}, {"bytes", nb.second}};
  nlohmann::json out = {
      {"file", f.name()},
      {"file_size", f.file_size()},
      {"version", f.version()},
      {"alignment", f.alignment()},
      {"metadata", meta},
      {"tensors", tensors},
      {"n_tensors", f.tensors().size()},
      {"n_params", t.params},
      {"tensor_bytes", t.bytes},
      {"bytes_per_param", t.params ? static_cast<double>(t.bytes) / t.params : 0.0},
      {"types", by_type},
  };
  const Verdict v = verdict(f);
  out["ridge"] = v.runs ? nlohmann::json{{"runs", true}, {"model", v.family}, {"rope", v.rope},
                                         {"tensors", "all used"}}
                        : nlohmann::json{{"runs", false}, {"error", v.error}};
  std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void print_text(const gguf::File& f, const InspectOptions& opt) {
  size_t max_items = opt.all_values ? SIZE_MAX : 8;
  std::printf("file: %s\n", f.name().c_str());
  std::printf("gguf version %u, %zu bytes, alignment %u, %zu metadata keys, %zu tensors\n\n",
              f.version(), f.file_size(), f.alignment(), f.metadata().size(), f.tensors().size());
  std::printf("metadata:\n");
  for (const gguf::KeyValue& kv : f.metadata()) {
    std::string type(gguf::value_type_name(kv.value.type));
    if (kv.value.type == gguf::ValueType::ARRAY) {
      const gguf::Array& a = kv.value.as_array();
      type = str_cat("array[", gguf::value_type_name(a.elem_type()), "; ", a.size(), "]");
    }
    std::string value = kv.value.to_string(max_items);
    if (!opt.all_values && value.size() > 160) value = value.substr(0, 157) + "...";
    std::printf("  %-44s %-22s %s\n", kv.key.c_str(), type.c_str(), value.c_str());
  }
  if (!f.tensors().empty()) {
    std::printf("\ntensors:\n  %-40s %-8s %-22s %12s\n", "name", "type", "shape", "bytes");
    for (const gguf::TensorInfo& ti : f.tensors())
      std::printf("  %-40s %-8s %-22s %12zu\n", ti.name.c_str(), std::string(dtype_name(ti.dtype)).c_str(),
                  ti.shape_string().c_str(), ti.nbytes);
  }
  Totals t = count(f);
  std::printf("\nparameters: %llu (%.3f M)\n", static_cast<unsigned long long>(t.params), t.params / 1e6);
  std::printf("tensor data: %s", human_bytes(static_cast<double>(t.bytes)).c_str());
  if (t.params > 0)
    std::printf(", %.4f bytes/param (%.2f bits/weight)", static_cast<double>(t.bytes) / t.params,
                8.0 * t.bytes / t.params);
  std::printf("\n");
  for (const auto& [name, nb] : t.by_type)
    std::printf("  %-8s %4d tensors  %s\n", name.c_str(), nb.first, human_bytes(static_cast<double>(nb.second)).c_str());
  const Verdict v = verdict(f);
  if (v.runs)
    std::printf("\nridge: %s\n  every tensor is used\n  rope: %s\n", v.family.c_str(), v.rope.c_str());
  else
    std::printf("\nridge cannot run this file: %s\n", v.error.c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  cmd->add_option("model", opt->model, "GGUF file or cached model name")->required();
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--all", opt->all_values, "Print metadata arrays in full");
  cmd->callback([opt] {
    gguf::File f = gguf::File::open(resolve_model_path(opt->model));
    if (opt->json)
      print_json(f, *opt);
    else
      print_text(f, *opt);
  });
}

}  // namespace ridge::cli
