// Test helper for tests/python/test_quant_reference.py: converts a raw file of blocks to
// float32 or back with ridge's reference conversions, so Python can compare with gguf-py.
//
//   quant_tool dequantize q4_K blocks.bin out.f32   # raw blocks -> little-endian float32
//   quant_tool quantize   q8_0 in.f32 blocks.bin    # float32 -> raw blocks
// The runtime-only formats (nf4, i8_rows: core/quant_bnb.h) convert exactly one row.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ridge::Error(ridge::str_cat("quant_tool: cannot open '", path, "'"));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw ridge::Error(ridge::str_cat("quant_tool: cannot write '", path, "'"));
}

int run(const std::string& mode, const std::string& type_name, const std::string& in_path,
        const std::string& out_path) {
  auto type = ridge::dtype_from_name(type_name);
  if (type_name == "nf4") type = ridge::DType::NF4;
  if (type_name == "i8_rows") type = ridge::DType::I8_ROWS;
  if (!type) throw ridge::Error(ridge::str_cat("quant_tool: unknown type '", type_name, "'"));
  const ridge::TypeTraits& traits = ridge::type_traits(*type);
  const std::vector<char> input = read_file(in_path);
  if (mode == "dequantize") {
    if (input.size() < traits.row_header || (input.size() - traits.row_header) % traits.type_size != 0)
      throw ridge::Error(ridge::str_cat("quant_tool: ", in_path, " has ", input.size(),
                                        " bytes, not whole ", traits.name, " blocks"));
    const int64_t n = static_cast<int64_t>((input.size() - traits.row_header) / traits.type_size) * traits.block_size;
    std::vector<float> out(static_cast<size_t>(n));
    ridge::dequantize_row(*type, input.data(), out.data(), n);
    write_file(out_path, out.data(), out.size() * sizeof(float));
  } else if (mode == "quantize") {
    if (input.size() % sizeof(float) != 0)
      throw ridge::Error(ridge::str_cat("quant_tool: ", in_path, " is not float32 data"));
    const int64_t n = static_cast<int64_t>(input.size() / sizeof(float));
    std::vector<float> values(static_cast<size_t>(n));
    std::copy(input.begin(), input.end(), reinterpret_cast<char*>(values.data()));
    if (n % traits.block_size != 0)
      throw ridge::Error(ridge::str_cat("quant_tool: ", n, " values do not fill whole ", traits.name, " blocks"));
    std::vector<uint8_t> out(ridge::row_size(*type, n));
    ridge::quantize_row(*type, values.data(), out.data(), n);
    write_file(out_path, out.data(), out.size());
  } else {
    throw ridge::Error(ridge::str_cat("quant_tool: unknown mode '", mode, "'"));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s dequantize|quantize TYPE INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], argv[2], argv[3], argv[4]);
  } catch (const ridge::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
