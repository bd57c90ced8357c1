#include "gguf/writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"

namespace ridge::gguf {

namespace {

constexpr std::string_view kAlignmentKey = "general.alignment";

// Appends little-endian encodings to a byte buffer (the host is little-endian; gguf.cpp
// asserts it).
class Sink {
 public:
  explicit Sink(std::vector<uint8_t>& out) : out_(out) {}

  template <class T>
  void put(T v) {
    put_bytes(&v, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  // resize + memcpy rather than vector::insert, which GCC 12 at -O3 flags with a false
  // -Wstringop-overflow.
  void put_bytes(const void* data, size_t n) {
    if (n == 0) return;
    size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, data, n);
  }
  void pad_to(uint64_t alignment) {
    out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0);
  }

  // Encodes one value of its declared type; append_encoded refuses a payload that does not
  // match or fit it, which the file would otherwise silently carry as a different value.
  void put_value(const Value& v, std::string_view key) {
    try {
      append_encoded(v, out_);
    } catch (const Error& e) {
      throw Error(str_cat("gguf writer: key '", key, "': ", e.what()));
    }
  }

 private:
  std::vector<uint8_t>& out_;
};

void check_alignment(uint64_t alignment) {
  if (alignment == 0 || alignment > UINT32_MAX || !std::has_single_bit(alignment))
    throw Error(str_cat("gguf writer: alignment ", alignment, " is not a power of two"));
}

uint64_t align_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

Writer::Writer(uint32_t alignment) : alignment_(alignment) {
  check_alignment(alignment);
  if (alignment != kDefaultAlignment) set_u32(std::string(kAlignmentKey), alignment);
}

void Writer::set(std::string key, Value value) {
  if (key.empty()) throw Error("gguf writer: empty metadata key");
  if (key == kAlignmentKey) {
    if (value.type != ValueType::UINT32)
      throw Error(str_cat("gguf writer: general.alignment must be uint32, not ",
                          value_type_name(value.type)));
    uint64_t a = value.as_u64();
    check_alignment(a);
    if (!tensors_.empty() && a != alignment_)
      throw Error("gguf writer: general.alignment must be set before adding tensors");
    alignment_ = static_cast<uint32_t>(a);
  }
  for (KeyValue& kv : metadata_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  metadata_.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::set_string(std::string key, std::string value) {
  set(std::move(key), Value{ValueType::STRING, std::move(value)});
}
void Writer::set_u32(std::string key, uint32_t value) {
  set(std::move(key), Value{ValueType::UINT32, uint64_t{value}});
}
void Writer::set_i32(std::string key, int32_t value) {
  set(std::move(key), Value{ValueType::INT32, int64_t{value}});
}
void Writer::set_u64(std::string key, uint64_t value) {
  set(std::move(key), Value{ValueType::UINT64, value});
}
void Writer::set_f32(std::string key, float value) {
  set(std::move(key), Value{ValueType::FLOAT32, double{value}});
}
void Writer::set_bool(std::string key, bool value) {
  set(std::move(key), Value{ValueType::BOOL, value});
}

namespace {

// An array of `type` from plain values, each widened as Value holds it.
template <class T, class Widened>
Value array_of(ValueType type, const std::vector<T>& values) {
  std::vector<Value> items(values.size(), Value{type, Widened{}});
  for (size_t i = 0; i < values.size(); ++i) items[i].data = Widened(values[i]);
  return Value{ValueType::ARRAY, Array(type, items)};
}

}  // namespace

void Writer::set_string_array(std::string key, const std::vector<std::string>& values) {
  set(std::move(key), array_of<std::string, std::string>(ValueType::STRING, values));
}
void Writer::set_f32_array(std::string key, const std::vector<float>& values) {
  set(std::move(key), array_of<float, double>(ValueType::FLOAT32, values));
}
void Writer::set_i32_array(std::string key, const std::vector<int32_t>& values) {
  set(std::move(key), array_of<int32_t, int64_t>(ValueType::INT32, values));
}

void Writer::add_tensor(std::string name, DType dtype, std::vector<int64_t> dims,
                        std::span<const uint8_t> data) {
  if (name.empty()) throw Error("gguf writer: empty tensor name");
  for (const PendingTensor& t : tensors_)
    if (t.name == name) throw Error(str_cat("gguf writer: duplicate tensor '", name, "'"));
  if (!is_known_dtype(static_cast<uint32_t>(dtype)))
    throw Error(str_cat("gguf writer: tensor '", name, "': unknown type ",
                        static_cast<uint32_t>(dtype)));
  if (dims.empty() || dims.size() > static_cast<size_t>(kMaxDims))
    throw Error(str_cat("gguf writer: tensor '", name, "': ", dims.size(),
                        " dimensions (1..", kMaxDims, " allowed)"));
  uint64_t n_elements = 1;
  for (int64_t d : dims) {
    if (d <= 0) throw Error(str_cat("gguf writer: tensor '", name, "': dimension ", d));
    if (__builtin_mul_overflow(n_elements, static_cast<uint64_t>(d), &n_elements))
      throw Error(str_cat("gguf writer: tensor '", name, "': element count overflows"));
  }
  const TypeTraits& traits = type_traits(dtype);
  if (dims[0] % traits.block_size != 0)
    throw Error(str_cat("gguf writer: tensor '", name, "': ne[0] = ", dims[0],
                        " is not a multiple of the ", traits.name, " block size ",
                        traits.block_size));
  uint64_t expected = n_elements / traits.block_size * traits.type_size;
  if (data.size() != expected)
    throw Error(str_cat("gguf writer: tensor '", name, "': got ", data.size(), " bytes, ",
                        traits.name, " ", dims.size(), "-d shape needs ", expected));
  tensors_.push_back(PendingTensor{std::move(name), dtype, std::move(dims),
                                   std::vector<uint8_t>(data.begin(), data.end())});
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  Sink sink(out);
  sink.put<uint32_t>(kMagic);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(metadata_.size());
  for (const KeyValue& kv : metadata_) {
    sink.put_string(kv.key);
    sink.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    sink.put_value(kv.value, kv.key);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
    sink.put<uint32_t>(static_cast<uint32_t>(t.dtype));
    sink.put<uint64_t>(offset);
    offset = align_up(offset + t.data.size(), alignment_);
  }
  sink.pad_to(alignment_);
  for (const PendingTensor& t : tensors_) {
    sink.put_bytes(t.data.data(), t.data.size());
    sink.pad_to(alignment_);
  }
  return out;
}

void Writer::write(const std::string& path) const {
  std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw Error(str_cat(path, ": cannot create: ", std::strerror(errno)));
  size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  int write_errno = errno;
  if (std::fclose(f) != 0 || written != bytes.size())
    throw Error(str_cat(path, ": write failed after ", written, " of ", bytes.size(),
                        " bytes: ", std::strerror(write_errno)));
}

}  // namespace ridge::gguf
