// The GGUF writer: what it writes reads back equal through our reader (every value type,
// nested arrays, several tensor types, alignment), and it refuses inconsistent input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace ridge::gguf {
namespace {

const std::string kFixtures = RIDGE_FIXTURES;

template <class T>
std::span<const uint8_t> as_bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

Value u(ValueType t, uint64_t x) { return Value{t, x}; }
Value s(ValueType t, int64_t x) { return Value{t, x}; }
Value str(std::string x) { return Value{ValueType::STRING, std::move(x)}; }
Value arr(ValueType elem, std::vector<Value> items) {
  return Value{ValueType::ARRAY, Array(elem, items)};
}

// Deep equality, including declared types of array elements.
void expect_same(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  if (a.type == ValueType::ARRAY) {
    const Array& x = a.as_array();
    const Array& y = b.as_array();
    ASSERT_EQ(x.elem_type(), y.elem_type()) << where;
    ASSERT_EQ(x.size(), y.size()) << where;
    for (size_t i = 0; i < x.size(); ++i)
      expect_same(x.at(i), y.at(i), where + "[" + std::to_string(i) + "]");
  } else if (a.type == ValueType::FLOAT32 || a.type == ValueType::FLOAT64) {
    double x = a.as_f64(), y = b.as_f64();
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(y)) << where;
    } else {
      EXPECT_EQ(x, y) << where;
    }
  } else {
    EXPECT_EQ(a.data, b.data) << where;
  }
}

std::vector<KeyValue> every_value_type() {
  return {
      {"u8", u(ValueType::UINT8, 255)},
      {"i8", s(ValueType::INT8, -128)},
      {"u16", u(ValueType::UINT16, 65535)},
      {"i16", s(ValueType::INT16, -32768)},
      {"u32", u(ValueType::UINT32, 4294967295u)},
      {"i32", s(ValueType::INT32, -2147483647 - 1)},
      {"u64", u(ValueType::UINT64, ~uint64_t{0})},
      {"i64", s(ValueType::INT64, INT64_MIN)},
      {"f32", Value{ValueType::FLOAT32, double{0.1f}}},
      {"f64", Value{ValueType::FLOAT64, 0.1}},
      {"f32_nan", Value{ValueType::FLOAT32, std::nan("")}},
      {"bool_t", Value{ValueType::BOOL, true}},
      {"bool_f", Value{ValueType::BOOL, false}},
      {"str", str("héllo\nworld")},
      {"str_empty", str("")},
      {"arr_empty", arr(ValueType::INT32, {})},
      {"arr_str", arr(ValueType::STRING, {str("a"), str(""), str("ccc")})},
      {"arr_bool", arr(ValueType::BOOL, {Value{ValueType::BOOL, true},
                                         Value{ValueType::BOOL, false}})},
      {"arr_nested",
       arr(ValueType::ARRAY,
           {arr(ValueType::UINT16, {u(ValueType::UINT16, 1), u(ValueType::UINT16, 2)}),
            arr(ValueType::UINT16, {}),
            arr(ValueType::UINT16, {u(ValueType::UINT16, 3)})})},
      {"arr_nested3", arr(ValueType::ARRAY,
                          {arr(ValueType::ARRAY, {arr(ValueType::STRING, {str("deep")})})})},
  };
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorType) {
  Writer w(64);
  for (const KeyValue& kv : every_value_type()) w.set(kv.key, kv.value);
  w.set_string_array("names", {"x", "y"});
  w.set_f32_array("floats", {1.5f, -2.0f});
  w.set_i32_array("ints", {-1, 7});
  w.set_bool("flag", true);
  w.set_u64("big", uint64_t{1} << 40);
  w.set_i32("neg", -9);
  w.set_f32("half", 0.5f);

  std::vector<float> f32(3 * 5);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.25f;
  std::vector<uint16_t> f16(32 * 2, 0x3c00);  // 1.0 in half precision
  std::vector<uint8_t> q8(34 * 4);              // 4 Q8_0 blocks: 128 elements
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> q4k(144 * 2);            // 2 Q4_K blocks: 512 elements
  for (size_t i = 0; i < q4k.size(); ++i) q4k[i] = static_cast<uint8_t>(255 - i);
  w.add_tensor("f32", DType::F32, {3, 5}, as_bytes_of(f32));
  w.add_tensor("f16", DType::F16, {32, 2}, as_bytes_of(f16));
  w.add_tensor("q8", DType::Q8_0, {64, 1, 2}, q8);
  w.add_tensor("q4k", DType::Q4_K, {256, 2, 1, 1}, q4k);

  std::vector<uint8_t> bytes = w.to_bytes();
  File f = File::parse(bytes, "roundtrip");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_u64("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  for (const KeyValue& kv : every_value_type()) {
    const Value* v = f.find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    expect_same(kv.value, *v, kv.key);
  }
  EXPECT_EQ(f.get_array("names").string_at(1), "y");
  EXPECT_EQ(f.get_array("floats").at(0).as_f64(), 1.5);
  EXPECT_EQ(f.get_array("ints").at(0).as_i64(), -1);
  EXPECT_EQ(f.get_u64("big"), uint64_t{1} << 40);
  EXPECT_EQ(f.get_i64("neg"), -9);
  // Keys keep insertion order.
  EXPECT_EQ(f.metadata()[0].key, "general.alignment");
  EXPECT_EQ(f.metadata()[1].key, "u8");

  ASSERT_EQ(f.tensors().size(), 4u);
  struct Expect {
    const char* name;
    DType dtype;
    const char* shape;
    std::span<const uint8_t> bytes;
  };
  const Expect expects[] = {{"f32", DType::F32, "[3, 5]", as_bytes_of(f32)},
                            {"f16", DType::F16, "[32, 2]", as_bytes_of(f16)},
                            {"q8", DType::Q8_0, "[64, 1, 2]", q8},
                            {"q4k", DType::Q4_K, "[256, 2, 1, 1]", q4k}};
  for (const Expect& e : expects) {
    const TensorInfo& t = f.tensor(e.name);
    EXPECT_EQ(t.dtype, e.dtype) << e.name;
    EXPECT_EQ(t.shape_string(), e.shape) << e.name;
    EXPECT_EQ(t.offset % 64, 0u) << e.name;
    ASSERT_EQ(t.nbytes, e.bytes.size()) << e.name;
    EXPECT_EQ(std::memcmp(t.data, e.bytes.data(), t.nbytes), 0) << e.name;
  }
}

TEST(GgufWriter, SetReplacesKeyInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "now a string");
  std::vector<uint8_t> bytes = w.to_bytes();
  File f = File::parse(bytes);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(f.get_string("a"), "now a string");
}

// Reading a real model, writing everything back and reading again changes nothing.
TEST(GgufWriter, RewritesStoriesModelLosslessly) {
  File original = File::open(kFixtures + "/models/stories260K.gguf");
  Writer w(original.alignment());
  for (const KeyValue& kv : original.metadata()) w.set(kv.key, kv.value);
  for (const TensorInfo& t : original.tensors())
    w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 {t.data, t.nbytes});
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("ridge_gguf_rewrite_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  File copy = File::open(path.string());
  std::filesystem::remove(path);

  ASSERT_EQ(copy.metadata().size(), original.metadata().size());
  for (size_t i = 0; i < copy.metadata().size(); ++i) {
    EXPECT_EQ(copy.metadata()[i].key, original.metadata()[i].key);
    expect_same(original.metadata()[i].value, copy.metadata()[i].value,
                original.metadata()[i].key);
  }
  ASSERT_EQ(copy.tensors().size(), original.tensors().size());
  for (const TensorInfo& t : original.tensors()) {
    const TensorInfo& c = copy.tensor(t.name);
    EXPECT_EQ(c.shape_string(), t.shape_string());
    EXPECT_EQ(c.offset, t.offset);  // same order and alignment: same layout
    ASSERT_EQ(c.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(c.data, t.data, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(copy.file_size(), original.file_size());
}

TEST(GgufWriter, RejectsInconsistentInput) {
  Writer w;
  std::vector<float> four(4);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {5}, as_bytes_of(four)), Error);  // size
  EXPECT_THROW(w.add_tensor("t", DType::Q8_0, {4}, as_bytes_of(four)), Error);  // block
  EXPECT_THROW(w.add_tensor("t", DType::F32, {4, 0}, as_bytes_of(four)), Error);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1, 1, 1, 1, 4}, as_bytes_of(four)), Error);
  EXPECT_THROW(w.add_tensor("", DType::F32, {4}, as_bytes_of(four)), Error);
  EXPECT_THROW(w.add_tensor("t", static_cast<DType>(4), {4}, as_bytes_of(four)), Error);
  w.add_tensor("t", DType::F32, {4}, as_bytes_of(four));
  EXPECT_THROW(w.add_tensor("t", DType::F32, {2, 2}, as_bytes_of(four)), Error);  // dup

  EXPECT_THROW(Writer(24), Error);
  EXPECT_THROW(w.set("", u(ValueType::UINT8, 1)), Error);
  EXPECT_THROW(w.set_u64("general.alignment", 64), Error);  // must be uint32
  EXPECT_THROW(w.set_u32("general.alignment", 64), Error);  // tensors already laid out

  Writer bad_values;
  bad_values.set("u8", u(ValueType::UINT8, 256));
  EXPECT_THROW(bad_values.to_bytes(), Error);
  // Arrays are encoded when built, so a bad element is refused there.
  EXPECT_THROW(arr(ValueType::INT32, {s(ValueType::INT32, 1), str("x")}), Error);
  EXPECT_THROW(arr(ValueType::UINT8, {u(ValueType::UINT8, 256)}), Error);
  Value deep = arr(ValueType::UINT8, {});
  for (int depth = 1; depth < kMaxArrayDepth; ++depth) deep = arr(ValueType::ARRAY, {deep});
  EXPECT_THROW(arr(ValueType::ARRAY, {deep}), Error);
  Writer wrong_payload;
  wrong_payload.set("s", Value{ValueType::STRING, uint64_t{3}});
  EXPECT_THROW(wrong_payload.to_bytes(), Error);

  EXPECT_THROW(w.write("/nonexistent/dir/out.gguf"), Error);
}

}  // namespace
}  // namespace ridge::gguf
