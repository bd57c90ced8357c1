// Writes a small GGUF file with every metadata value type (nested arrays included) and a
// few tensors of different types, for tests that read it back with the `gguf` Python
// package (tests/python/test_gguf_writer.py holds the same expected values).
//
//   gguf_write_sample out.gguf
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/writer.h"

namespace {

using ridge::DType;
using ridge::gguf::Array;
using ridge::gguf::Value;
using ridge::gguf::ValueType;

Value array_of(ValueType elem, std::vector<Value> items) {
  return Value{ValueType::ARRAY, Array(elem, items)};
}

template <class T>
std::span<const uint8_t> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_write_sample OUT.gguf\n");
    return 2;
  }
  try {
    ridge::gguf::Writer w(64);
    w.set_string("general.architecture", "sample");
    w.set("v.u8", Value{ValueType::UINT8, uint64_t{200}});
    w.set("v.i8", Value{ValueType::INT8, int64_t{-100}});
    w.set("v.u16", Value{ValueType::UINT16, uint64_t{60000}});
    w.set("v.i16", Value{ValueType::INT16, int64_t{-30000}});
    w.set_u32("v.u32", 4000000000u);
    w.set_i32("v.i32", -2000000000);
    w.set_f32("v.f32", 0.1f);
    w.set_bool("v.bool", true);
    w.set_string("v.str", "h\xc3\xa9llo \xe2\x96\x81world");  // héllo ▁world
    w.set_u64("v.u64", 18000000000000000000ull);
    w.set("v.i64", Value{ValueType::INT64, int64_t{-9000000000000000000}});
    w.set("v.f64", Value{ValueType::FLOAT64, 3.141592653589793});
    w.set_i32_array("a.i32", {1, -2, 3});
    w.set_f32_array("a.f32", {0.5f, -1.25f});
    w.set_string_array("a.str", {"alpha", "", "gamma"});
    w.set("a.bool", array_of(ValueType::BOOL, {Value{ValueType::BOOL, false},
                                               Value{ValueType::BOOL, true}}));
    w.set("a.u8", array_of(ValueType::UINT8, {Value{ValueType::UINT8, uint64_t{0}},
                                              Value{ValueType::UINT8, uint64_t{255}}}));
    w.set("a.nested",
          array_of(ValueType::ARRAY,
                   {array_of(ValueType::INT32, {Value{ValueType::INT32, int64_t{1}},
                                                Value{ValueType::INT32, int64_t{2}}}),
                    array_of(ValueType::INT32, {Value{ValueType::INT32, int64_t{3}}})}));
    w.set("a.nested_str",
          array_of(ValueType::ARRAY,
                   {array_of(ValueType::STRING, {Value{ValueType::STRING, std::string("x")}}),
                    array_of(ValueType::STRING, {Value{ValueType::STRING, std::string("y")},
                                                 Value{ValueType::STRING, std::string("z")}})}));

    // f32 [4, 3]: value i * 0.5 - 1 at flat index i.
    std::vector<float> f32(12);
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.5f - 1.0f;
    w.add_tensor("t.f32", DType::F32, {4, 3}, bytes_of(f32));
    // f16 [32, 2]: value i / 8.
    std::vector<uint16_t> f16(64);
    for (size_t i = 0; i < f16.size(); ++i) f16[i] = ridge::fp32_to_fp16(static_cast<float>(i) / 8);
    w.add_tensor("t.f16", DType::F16, {32, 2}, bytes_of(f16));
    // q8_0 [64, 1]: two blocks; block b has scale 0.5 * (b + 1), quant j is j - 16.
    std::vector<uint8_t> q8;
    for (int b = 0; b < 2; ++b) {
      uint16_t d = ridge::fp32_to_fp16(0.5f * static_cast<float>(b + 1));
      q8.push_back(static_cast<uint8_t>(d & 0xff));
      q8.push_back(static_cast<uint8_t>(d >> 8));
      for (int j = 0; j < 32; ++j) q8.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
    }
    w.add_tensor("t.q8_0", DType::Q8_0, {64, 1}, q8);
    // i32 [5]: value 7 * i - 10.
    std::vector<int32_t> i32(5);
    for (size_t i = 0; i < i32.size(); ++i) i32[i] = 7 * static_cast<int32_t>(i) - 10;
    w.add_tensor("t.i32", DType::I32, {5}, bytes_of(i32));

    w.write(argv[1]);
  } catch (const ridge::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
