// Test helper for tests/python/test_gptq.py: GPTQ-quantizes a matrix from raw float32
// files, so a numpy GPTQ can be compared with ridge's.
//
//   gptq_tool q4_0 ROWS COLS N w.f32 x.f32 out.bin   # w [ROWS][COLS], x [N][COLS] -> blocks
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "quant/gptq.h"

namespace {

std::vector<float> read_floats(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(count);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) throw ridge::Error(ridge::str_cat("gptq_tool: cannot read ", count, " floats from '", path, "'"));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 8 && argc != 9) throw ridge::Error("usage: gptq_tool TYPE ROWS COLS N w.f32 x.f32 out.bin [reference-fit]");
    const auto type = ridge::dtype_from_name(argv[1]);
    if (!type) throw ridge::Error(ridge::str_cat("gptq_tool: unknown type ", argv[1]));
    const int64_t rows = std::stoll(argv[2]), cols = std::stoll(argv[3]), n = std::stoll(argv[4]);
    const std::vector<float> w = read_floats(argv[5], static_cast<size_t>(rows * cols));
    const std::vector<float> x = read_floats(argv[6], static_cast<size_t>(n * cols));
    ridge::quant::Hessian h(cols);
    h.add(x.data(), n);
    std::vector<uint8_t> out(ridge::row_size(*type, cols) * static_cast<size_t>(rows));
    ridge::quant::GptqOptions options;
    options.weighted_fit = argc != 9 || std::string(argv[8]) != "reference-fit";
    ridge::quant::gptq_quantize(*type, w.data(), rows, cols, h, options, out.data());
    std::ofstream o(argv[7], std::ios::binary);
    o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    return o ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
