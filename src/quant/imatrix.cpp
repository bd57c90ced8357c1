#include "quant/imatrix.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>

#include "core/error.h"
#include "core/part_file.h"
#include "gguf/writer.h"

namespace ridge::quant {
namespace {

constexpr std::string_view kSumsSuffix = ".in_sum2";
constexpr std::string_view kCountsSuffix = ".counts";

// Sums of squares of each site's input channels, per layer, in double.
class ImatrixObserver : public ForwardObserver {
 public:
  struct Site {
    std::vector<double> sum2;  // [n_in]
    int64_t count = 0;         // rows summed
  };

  explicit ImatrixObserver(int32_t n_layer) : sites_(static_cast<size_t>(n_layer)) {}

  void on_matmul_input(int32_t il, MatmulSite site, const float* x, int32_t n_tokens, int32_t n_in) override {
    Site& s = sites_[static_cast<size_t>(il)][static_cast<size_t>(site)];
    if (s.sum2.empty()) s.sum2.assign(static_cast<size_t>(n_in), 0.0);
    if (static_cast<int32_t>(s.sum2.size()) != n_in)
      throw Error(str_cat("imatrix: layer ", il, " ", matmul_site_name(site), " input of ", n_in, " channels, was ",
                          s.sum2.size()));
    for (int32_t t = 0; t < n_tokens; ++t) {
      const float* row = x + static_cast<size_t>(t) * static_cast<size_t>(n_in);
      for (int32_t j = 0; j < n_in; ++j) s.sum2[static_cast<size_t>(j)] += static_cast<double>(row[j]) * row[j];
    }
    s.count += n_tokens;
  }

  const Site& at(int32_t il, MatmulSite site) const {
    return sites_[static_cast<size_t>(il)][static_cast<size_t>(site)];
  }

 private:
  std::vector<std::array<Site, 4>> sites_;  // [n_layer][MatmulSite]
};

constexpr MatmulSite kSites[] = {MatmulSite::kQkv, MatmulSite::kAttnOutput, MatmulSite::kGateUp, MatmulSite::kDown};

void check_values(const std::string& path, const std::string& what, const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) || values[i] < 0)
      throw Error(str_cat(path, ": ", what, "[", i, "] is ", values[i], "; importance sums must be finite and >= 0"));
}

std::vector<float> f32_values(const std::string& path, const gguf::TensorInfo& t) {
  if (t.dtype != DType::F32)
    throw Error(str_cat(path, ": ", t.name, " is ", dtype_name(t.dtype), "; an imatrix holds f32 tensors"));
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  check_values(path, t.name, v);
  return v;
}

Imatrix read_gguf(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  Imatrix m;
  if (const gguf::Array* datasets = f.find_array("imatrix.datasets"))
    for (size_t i = 0; i < datasets->size(); ++i) m.datasets.emplace_back(datasets->string_at(i));
  m.chunk_count = static_cast<uint32_t>(f.get_u64("imatrix.chunk_count", 0));
  m.chunk_size = static_cast<uint32_t>(f.get_u64("imatrix.chunk_size", 0));
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;  // sums, counts
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string_view name = t.name;
    if (name.ends_with(kSumsSuffix))
      pairs[std::string(name.substr(0, name.size() - kSumsSuffix.size()))].first = &t;
    else if (name.ends_with(kCountsSuffix))
      pairs[std::string(name.substr(0, name.size() - kCountsSuffix.size()))].second = &t;
  }
  for (const auto& [name, pair] : pairs) {
    if (pair.first == nullptr || pair.second == nullptr)
      throw Error(str_cat(path, ": ", name, " has ", pair.first ? "in_sum2 but no counts" : "counts but no in_sum2"));
    ImatrixEntry& e = m.entries[name];
    e.in_sum2 = f32_values(path, *pair.first);
    e.counts = f32_values(path, *pair.second);
    if (e.counts.empty() || e.in_sum2.empty() || e.in_sum2.size() % e.counts.size() != 0)
      throw Error(str_cat(path, ": ", name, " has ", e.in_sum2.size(), " sums for ", e.counts.size(), " counts"));
  }
  if (m.entries.empty()) throw Error(str_cat(path, ": no imatrix entries (no NAME.in_sum2 / NAME.counts tensors)"));
  return m;
}

// llama.cpp's legacy format, little-endian: int32 n_entries; per entry int32 name length,
// the name, int32 ncall, int32 n_values, f32 values (mean square * ncall); then optionally
// int32 chunk count, int32 dataset name length and the name.
class LegacyReader {
 public:
  LegacyReader(const std::string& path, std::vector<char> bytes) : path_(path), bytes_(std::move(bytes)) {}
  size_t left() const { return bytes_.size() - pos_; }
  int32_t i32(const char* what) {
    int32_t v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  const char* take(size_t n, const char* what) {
    if (n > left())
      throw Error(str_cat(path_, ": truncated, or not an imatrix: ", what, " needs ", n, " bytes at offset ", pos_,
                          ", ", left(), " left"));
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  std::string path_;
  std::vector<char> bytes_;
  size_t pos_ = 0;
};

Imatrix read_legacy(const std::string& path, std::vector<char> bytes) {
  LegacyReader r(path, std::move(bytes));
  Imatrix m;
  const int32_t n_entries = r.i32("the entry count");
  if (n_entries < 1) throw Error(str_cat(path, ": not an imatrix (GGUF or legacy): ", n_entries, " entries"));
  for (int32_t i = 0; i < n_entries; ++i) {
    const int32_t len = r.i32("a name length");
    if (len < 1 || len > 4096)
      throw Error(str_cat(path, ": not an imatrix: entry ", i, " has a name of ", len, " bytes"));
    std::string name(r.take(static_cast<size_t>(len), "a name"), static_cast<size_t>(len));
    const int32_t ncall = r.i32("ncall");
    const int32_t n_values = r.i32("a value count");
    if (n_values < 1) throw Error(str_cat(path, ": ", name, " has ", n_values, " values"));
    // Taken before sizing anything: a count the file cannot hold is an error, not 8 GiB.
    const char* values = r.take(static_cast<size_t>(n_values) * sizeof(float), "values");
    ImatrixEntry& e = m.entries[name];
    e.in_sum2.resize(static_cast<size_t>(n_values));
    std::memcpy(e.in_sum2.data(), values, e.in_sum2.size() * sizeof(float));
    check_values(path, name, e.in_sum2);
    // llama-quantize divides by ncall, or takes the values as they are when it is 0.
    e.counts = {ncall > 0 ? static_cast<float>(ncall) : 1.0f};
  }
  if (r.left() >= sizeof(int32_t)) {
    m.chunk_count = static_cast<uint32_t>(std::max(r.i32("the chunk count"), 0));
    if (r.left() >= sizeof(int32_t)) {
      const int32_t len = r.i32("the dataset name length");
      const size_t n = static_cast<size_t>(std::max(len, 0));
      if (n > 0 && n <= r.left()) m.datasets.emplace_back(r.take(n, "the dataset name"), n);
    }
  }
  return m;
}

}  // namespace

Imatrix collect_imatrix(Model& model, const CalibrationSet& set,
                        const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config();
  if (c.n_expert > 0)
    throw Error(str_cat("imatrix: mixture-of-experts models (", c.n_expert,
                        " experts per layer) are not supported; ridge collects dense layers only"));
  ImatrixObserver observer(c.n_layer);
  const auto start = std::chrono::steady_clock::now();
  run_whole(model, set, observer, [&](size_t done) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[128];
    std::snprintf(line, sizeof line, "imatrix: window %zu/%zu, %.2f s per window\n", done, set.windows.size(),
                  seconds / static_cast<double>(done));
    progress(line);
  });
  Imatrix m;
  m.chunk_count = static_cast<uint32_t>(set.windows.size());
  m.chunk_size = static_cast<uint32_t>(set.n_ctx);
  for (int32_t il = 0; il < c.n_layer; ++il) {
    for (MatmulSite site : kSites) {
      const ImatrixObserver::Site& s = observer.at(il, site);
      const std::vector<std::string> names = site_matrix_names(model.file(), il, site);
      if (s.count == 0 || names.empty())
        throw Error(str_cat("imatrix: layer ", il, " ", matmul_site_name(site), ": ", s.count, " inputs seen, ",
                            names.size(), " matrices take them"));
      for (const std::string& name : names) {
        const gguf::TensorInfo* t = model.file().find_tensor(name);
        if (t->ne[0] != static_cast<int64_t>(s.sum2.size()))
          throw Error(str_cat("imatrix: ", name, " has rows of ", t->ne[0], ", its input ", s.sum2.size(),
                              " channels"));
        ImatrixEntry& e = m.entries[name];
        e.in_sum2.assign(s.sum2.begin(), s.sum2.end());
        e.counts = {static_cast<float>(s.count)};
      }
    }
  }
  return m;
}

void write_imatrix(const Imatrix& m, const std::string& path) {
  gguf::Writer w;
  w.set_string("general.type", "imatrix");
  w.set_string_array("imatrix.datasets", m.datasets);
  w.set_u32("imatrix.chunk_count", m.chunk_count);
  w.set_u32("imatrix.chunk_size", m.chunk_size);
  for (const auto& [name, e] : m.entries) {
    const int64_t n_mat = static_cast<int64_t>(e.counts.size());
    const int64_t n_in = static_cast<int64_t>(e.in_sum2.size()) / n_mat;
    // As ggml writes them: trailing dimensions of 1 dropped.
    const std::vector<int64_t> sums_dims = n_mat == 1 ? std::vector<int64_t>{n_in} : std::vector<int64_t>{n_in, n_mat};
    const std::vector<int64_t> counts_dims = n_mat == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, n_mat};
    auto bytes = [](const std::vector<float>& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
    };
    w.add_tensor(name + std::string(kSumsSuffix), DType::F32, sums_dims, bytes(e.in_sum2));
    w.add_tensor(name + std::string(kCountsSuffix), DType::F32, counts_dims, bytes(e.counts));
  }
  PartFile part(path);
  w.write(part.path());
  try {
    part.commit();
  } catch (const Error& e) {
    throw Error(str_cat("imatrix: ", e.what()));
  }
}

Imatrix read_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot open"));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint32_t magic = 0;
  if (bytes.size() >= sizeof magic) std::memcpy(&magic, bytes.data(), sizeof magic);
  if (magic == gguf::kMagic) return read_gguf(path);
  return read_legacy(path, std::move(bytes));
}

std::vector<float> importance_of(const ImatrixEntry& e) {
  const size_t n_mat = e.counts.size();
  const size_t n_in = e.in_sum2.size() / n_mat;
  std::vector<float> v(e.in_sum2.size(), 1.0f);
  for (size_t m = 0; m < n_mat; ++m) {
    if (e.counts[m] <= 0) continue;
    float* row = v.data() + m * n_in;
    for (size_t j = 0; j < n_in; ++j) row[j] = e.in_sum2[m * n_in + j] / e.counts[m];
    // The weighted fits are invariant under scaling the importance, but their sums of
    // importance * x^2 overflow to inf (and the tensor to NaN) for huge values: those are
    // brought down by a power of two, which changes no rounding.
    const float peak = *std::max_element(row, row + n_in);
    if (peak > 0x1p64f) {
      const float scale = std::ldexp(1.0f, -std::ilogb(peak) - 1);
      for (size_t j = 0; j < n_in; ++j) row[j] *= scale;
    }
  }
  return v;
}

ModelImportance::ModelImportance(const Imatrix& imatrix, const gguf::File& model) {
  for (const auto& [name, entry] : imatrix.entries) {
    const gguf::TensorInfo* t = model.find_tensor(name);
    if (t == nullptr) {
      unmatched_.push_back(name);
      continue;
    }
    const int64_t n_mat = t->ne[2];
    if (static_cast<int64_t>(entry.in_sum2.size()) != t->ne[0] * n_mat)
      throw Error(str_cat("imatrix: ", name, " has ", entry.in_sum2.size(), " importance values; the tensor ",
                          t->shape_string(), " needs ", t->ne[0] * n_mat, " (n_in ", t->ne[0],
                          n_mat > 1 ? str_cat(" times ", n_mat, " matrices") : std::string(), ")"));
    matrices_[name] = Matrix{importance_of(entry), n_mat};
  }
}

const ModelImportance::Matrix* ModelImportance::find(const std::string& tensor) const {
  const auto it = matrices_.find(tensor);
  return it == matrices_.end() ? nullptr : &it->second;
}

}  // namespace ridge::quant
