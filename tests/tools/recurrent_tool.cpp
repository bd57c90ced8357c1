// Test helper for tests/python/test_recurrent_reference.py: runs one kernels/recurrent/
// kernel under a named ISA on float32 inputs from a file (dense rows, concatenated in the
// order below) and writes its float32 outputs, concatenated, for the float64 references.
//
//   recurrent_tool delta ISA in.f32 out.f32 n_heads n_k_heads d_k d_v n_tokens
//       in: state, q, k [n_tokens][n_k_heads*d_k], v [n_tokens][n_heads*d_v], g, beta
//       out: out, state, states_after            (q_scale = 1/sqrt(d_k))
//   recurrent_tool ssm ISA in.f32 out.f32 n_heads head_dim d_state n_groups n_tokens
//       in: state, x, dt [n_tokens][n_heads], A, B, C [n_tokens][n_groups*d_state]
//       out: y, state, states_after
//   recurrent_tool conv ISA in.f32 out.f32 channels d_conv n_tokens silu has_bias
//       in: state, x, w, bias (when has_bias)    out: y, state
// Exits 2 when this CPU lacks the ISA, 1 on any other error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/isa.h"
#include "kernels/recurrent/recurrent.h"

namespace {

using ridge::Error;
using ridge::str_cat;
namespace k = ridge::kernels;

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat("recurrent_tool: cannot open '", path, "'"));
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.size() % sizeof(float) != 0) throw Error(str_cat("recurrent_tool: ", path, " is not float32 data"));
  std::vector<float> v(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(v.data()));
  return v;
}

// Hands out consecutive arrays of the input, checking that they use it exactly.
class Inputs {
 public:
  explicit Inputs(std::vector<float> data) : data_(std::move(data)) {}
  std::vector<float> take(int64_t n) {
    if (at_ + n > static_cast<int64_t>(data_.size()))
      throw Error(str_cat("recurrent_tool: the input has ", data_.size(), " floats, too few for its shape"));
    std::vector<float> v(data_.begin() + at_, data_.begin() + at_ + n);
    at_ += n;
    return v;
  }
  void check_used() const {
    if (at_ != static_cast<int64_t>(data_.size()))
      throw Error(str_cat("recurrent_tool: the input has ", data_.size(), " floats, the shape uses ", at_));
  }

 private:
  std::vector<float> data_;
  int64_t at_ = 0;
};

void write_floats(const std::string& path, const std::vector<std::vector<float>>& arrays) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& a : arrays) out.write(reinterpret_cast<const char*>(a.data()), std::streamsize(a.size() * sizeof(float)));
  if (!out) throw Error(str_cat("recurrent_tool: cannot write '", path, "'"));
}

int run(int argc, char** argv) {
  if (argc < 5) throw Error("usage: recurrent_tool delta|ssm|conv ISA in.f32 out.f32 SHAPE...");
  const std::string kernel = argv[1];
  const auto isa = k::isa_from_name(argv[2]);
  if (!isa) throw Error(str_cat("recurrent_tool: unknown ISA '", argv[2], "'"));
  if (!k::cpu_supports(*isa)) {
    std::fprintf(stderr, "recurrent_tool: this CPU has no %s\n", argv[2]);
    return 2;
  }
  std::vector<int64_t> dims;
  for (int i = 5; i < argc; ++i) dims.push_back(std::stoll(argv[i]));
  Inputs in(read_floats(argv[3]));
  auto need = [&](size_t n) {
    if (dims.size() != n) throw Error(str_cat("recurrent_tool: ", kernel, " takes ", n, " shape numbers"));
  };
  if (kernel == "delta") {
    need(5);
    const k::DeltaNetShape s{dims[0], dims[1], dims[2], dims[3], 1.0f / std::sqrt(float(dims[2]))};
    const int64_t n_tokens = dims[4];
    auto state = in.take(s.n_heads * s.d_v * s.d_k);
    const auto q = in.take(n_tokens * s.n_k_heads * s.d_k), kk = in.take(n_tokens * s.n_k_heads * s.d_k);
    const auto v = in.take(n_tokens * s.n_heads * s.d_v);
    const auto g = in.take(n_tokens * s.n_heads), beta = in.take(n_tokens * s.n_heads);
    in.check_used();
    std::vector<float> out(n_tokens * s.n_heads * s.d_v), after(n_tokens * s.n_heads * s.d_v * s.d_k);
    k::gated_delta_rule_isa(state.data(), q.data(), kk.data(), s.n_k_heads * s.d_k, v.data(), s.n_heads * s.d_v,
                            g.data(), beta.data(), out.data(), n_tokens, s, after.data(), nullptr, *isa);
    write_floats(argv[4], {out, state, after});
  } else if (kernel == "ssm") {
    need(5);
    const k::SsmShape s{dims[0], dims[1], dims[2], dims[3]};
    const int64_t n_tokens = dims[4];
    auto state = in.take(s.n_heads * s.head_dim * s.d_state);
    const auto x = in.take(n_tokens * s.n_heads * s.head_dim), dt = in.take(n_tokens * s.n_heads);
    const auto A = in.take(s.n_heads);
    const auto B = in.take(n_tokens * s.n_groups * s.d_state), C = in.take(n_tokens * s.n_groups * s.d_state);
    in.check_used();
    std::vector<float> y(n_tokens * s.n_heads * s.head_dim), after(n_tokens * s.n_heads * s.head_dim * s.d_state);
    k::ssm_scan_isa(state.data(), x.data(), s.n_heads * s.head_dim, dt.data(), s.n_heads, A.data(), B.data(), C.data(),
                    s.n_groups * s.d_state, y.data(), n_tokens, s, after.data(), nullptr, *isa);
    write_floats(argv[4], {y, state, after});
  } else if (kernel == "conv") {
    need(5);
    const int64_t channels = dims[0], n_tokens = dims[2];
    const int d_conv = static_cast<int>(dims[1]);
    auto state = in.take((d_conv - 1) * channels);
    const auto x = in.take(n_tokens * channels), w = in.take(channels * d_conv);
    const auto bias = dims[4] != 0 ? in.take(channels) : std::vector<float>();
    in.check_used();
    std::vector<float> y(n_tokens * channels);
    k::causal_conv1d_isa(state.data(), x.data(), channels, w.data(), bias.empty() ? nullptr : bias.data(), y.data(),
                         n_tokens, channels, d_conv, dims[3] != 0, *isa);
    write_floats(argv[4], {y, state});
  } else {
    throw Error(str_cat("recurrent_tool: unknown kernel '", kernel, "' (delta, ssm or conv)"));
  }
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
