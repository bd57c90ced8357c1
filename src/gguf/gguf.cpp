#include "gguf/gguf.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace ridge::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// Value

namespace {

bool is_unsigned_type(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}
bool is_float_type(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

[[noreturn]] void throw_type(const Value& v, std::string_view wanted) {
  throw Error(str_cat("metadata value is ", value_type_name(v.type), " (", v.to_string(4),
                      "), expected ", wanted));
}

void append_quoted(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

bool Value::is_integer() const { return is_unsigned_type(type) || is_signed_type(type); }
bool Value::is_number() const { return is_integer() || is_float_type(type); }

uint64_t Value::as_u64() const {
  if (const auto* u = std::get_if<uint64_t>(&data); u && is_unsigned_type(type)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data); i && is_signed_type(type)) {
    if (*i < 0) throw Error(str_cat("metadata value ", *i, " is negative, expected unsigned"));
    return static_cast<uint64_t>(*i);
  }
  throw_type(*this, "an integer");
}

int64_t Value::as_i64() const {
  if (const auto* i = std::get_if<int64_t>(&data); i && is_signed_type(type)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data); u && is_unsigned_type(type)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(str_cat("metadata value ", *u, " does not fit in int64"));
    return static_cast<int64_t>(*u);
  }
  throw_type(*this, "an integer");
}

double Value::as_f64() const {
  if (const auto* d = std::get_if<double>(&data); d && is_float_type(type)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data); u && is_unsigned_type(type))
    return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data); i && is_signed_type(type))
    return static_cast<double>(*i);
  throw_type(*this, "a number");
}

bool Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data); b && type == ValueType::BOOL) return *b;
  throw_type(*this, "bool");
}

const std::string& Value::as_string() const {
  if (const auto* s = std::get_if<std::string>(&data); s && type == ValueType::STRING) return *s;
  throw_type(*this, "string");
}

const Array& Value::as_array() const {
  if (const auto* a = std::get_if<Array>(&data); a && type == ValueType::ARRAY) return *a;
  throw_type(*this, "array");
}

std::string Value::to_string(size_t max_items) const {
  std::string out;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t>) {
          out = std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          std::ostringstream s;
          s.precision(type == ValueType::FLOAT32 ? 9 : 17);
          s << x;
          out = s.str();
        } else if constexpr (std::is_same_v<T, bool>) {
          out = x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_quoted(out, x);
        } else {
          out = "[";
          size_t shown = std::min(max_items, x.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i > 0) out += ", ";
            out += x.at(i).to_string(max_items);
          }
          if (shown < x.size())
            out += str_cat(shown > 0 ? ", " : "", "... (", x.size(), " items)");
          out += "]";
        }
      },
      data);
  return out;
}

std::string TensorInfo::shape_string() const {
  std::string out = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ne[i]);
  }
  return out + "]";
}

// ---------------------------------------------------------------------------------------
// Encoding and decoding values

namespace {

// Smallest encoded size of one value of each type; bounds every count read from the file
// so a hostile count cannot make us reserve more than the file could hold. For numbers
// and bools it is the exact size.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;      // length prefix
    case ValueType::ARRAY: return 4 + 8;   // element type + count
  }
  return 1;
}

bool has_fixed_size(ValueType t) { return t != ValueType::STRING && t != ValueType::ARRAY; }

// GGUF data is unaligned little-endian; memcpy is the portable unaligned load.
template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A number or bool whose min_encoded_size(type) bytes start at p.
Value decode_fixed(ValueType type, const uint8_t* p) {
  switch (type) {
    case ValueType::UINT8: return {type, uint64_t{load<uint8_t>(p)}};
    case ValueType::INT8: return {type, int64_t{load<int8_t>(p)}};
    case ValueType::UINT16: return {type, uint64_t{load<uint16_t>(p)}};
    case ValueType::INT16: return {type, int64_t{load<int16_t>(p)}};
    case ValueType::UINT32: return {type, uint64_t{load<uint32_t>(p)}};
    case ValueType::INT32: return {type, int64_t{load<int32_t>(p)}};
    case ValueType::UINT64: return {type, load<uint64_t>(p)};
    case ValueType::INT64: return {type, load<int64_t>(p)};
    case ValueType::FLOAT32: return {type, double{load<float>(p)}};
    case ValueType::FLOAT64: return {type, load<double>(p)};
    case ValueType::BOOL: return {type, p[0] != 0};
    case ValueType::STRING: case ValueType::ARRAY: break;
  }
  assert(false && "decode_fixed: not a fixed-size type");
  return {};
}

// resize + memcpy rather than vector::insert, which GCC 12 at -O3 flags with a false
// -Wstringop-overflow.
void append_bytes(std::vector<uint8_t>& out, const void* data, size_t n) {
  if (n == 0) return;
  size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, data, n);
}

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  append_bytes(out, &v, sizeof(T));
}

}  // namespace

void append_encoded(const Value& v, std::vector<uint8_t>& out) {
  auto range = [&](auto lo, auto hi, auto x) {
    if (x < lo || x > hi)
      throw Error(str_cat("value ", x, " out of range for ", value_type_name(v.type)));
  };
  switch (v.type) {
    case ValueType::UINT8: {
      uint64_t x = v.as_u64();
      range(uint64_t{0}, uint64_t{UINT8_MAX}, x);
      append<uint8_t>(out, static_cast<uint8_t>(x));
      return;
    }
    case ValueType::UINT16: {
      uint64_t x = v.as_u64();
      range(uint64_t{0}, uint64_t{UINT16_MAX}, x);
      append<uint16_t>(out, static_cast<uint16_t>(x));
      return;
    }
    case ValueType::UINT32: {
      uint64_t x = v.as_u64();
      range(uint64_t{0}, uint64_t{UINT32_MAX}, x);
      append<uint32_t>(out, static_cast<uint32_t>(x));
      return;
    }
    case ValueType::UINT64: append<uint64_t>(out, v.as_u64()); return;
    case ValueType::INT8: {
      int64_t x = v.as_i64();
      range(int64_t{INT8_MIN}, int64_t{INT8_MAX}, x);
      append<int8_t>(out, static_cast<int8_t>(x));
      return;
    }
    case ValueType::INT16: {
      int64_t x = v.as_i64();
      range(int64_t{INT16_MIN}, int64_t{INT16_MAX}, x);
      append<int16_t>(out, static_cast<int16_t>(x));
      return;
    }
    case ValueType::INT32: {
      int64_t x = v.as_i64();
      range(int64_t{INT32_MIN}, int64_t{INT32_MAX}, x);
      append<int32_t>(out, static_cast<int32_t>(x));
      return;
    }
    case ValueType::INT64: append<int64_t>(out, v.as_i64()); return;
    case ValueType::FLOAT32: append<float>(out, static_cast<float>(v.as_f64())); return;
    case ValueType::FLOAT64: append<double>(out, v.as_f64()); return;
    case ValueType::BOOL: append<uint8_t>(out, v.as_bool() ? 1 : 0); return;
    case ValueType::STRING: {
      const std::string& s = v.as_string();
      append<uint64_t>(out, s.size());
      append_bytes(out, s.data(), s.size());
      return;
    }
    case ValueType::ARRAY: {
      const Array& a = v.as_array();
      append<uint32_t>(out, static_cast<uint32_t>(a.elem_type()));
      append<uint64_t>(out, a.size());
      append_bytes(out, a.encoded().data(), a.encoded().size());
      return;
    }
  }
  throw Error(str_cat("invalid value type ", static_cast<uint32_t>(v.type)));
}

// ---------------------------------------------------------------------------------------
// Parsing

namespace {

constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;           // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name len, name, n_dims, type, offset

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

// A cursor over untrusted bytes; every read checks the remaining length first. Arrays it
// reads view the bytes and share `owner`, which keeps them alive (null: the caller does).
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& name,
         std::shared_ptr<const void> owner)
      : bytes_(bytes), name_(name), owner_(std::move(owner)) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(uint64_t offset, std::string_view problem) const {
    throw Error(str_cat(name_, ": ", problem, " at offset ", offset));
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(pos_, str_cat("truncated ", what, " (needs ", n, " bytes, ", remaining(),
                         " left in a file of ", bytes_.size(), ")"));
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v = load<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string_view(std::string_view what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail(at, str_cat(what, ": string length ", len, " past end of file (", remaining(),
                       " bytes left)"));
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  std::string read_string(std::string_view what) { return std::string(read_string_view(what)); }

  ValueType read_type(std::string_view what) {
    uint64_t at = pos_;
    uint32_t id = read<uint32_t>(what);
    if (id > static_cast<uint32_t>(ValueType::FLOAT64))
      fail(at, str_cat(what, ": unknown value type ", id));
    return static_cast<ValueType>(id);
  }

  // Checks a bool byte (pos_ must have one) and steps over it.
  void skip_bool(std::string_view what) {
    uint8_t b = bytes_[pos_];
    if (b > 1) fail(pos_, str_cat(what, ": bool value ", int{b}, " is not 0 or 1"));
    ++pos_;
  }

  Value read_value(ValueType type, int depth, std::string_view what) {
    switch (type) {
      case ValueType::STRING: return Value{type, read_string(what)};
      case ValueType::ARRAY: return Value{type, read_array(depth + 1, what)};
      default: {
        need(min_encoded_size(type), what);
        Value v = decode_fixed(type, bytes_.data() + pos_);
        if (type == ValueType::BOOL) {
          skip_bool(what);
        } else {
          pos_ += min_encoded_size(type);
        }
        return v;
      }
    }
  }

  // Validates an array and indexes its elements; nothing is copied. Vocabularies (arrays
  // of 100k+ strings) are the hot path.
  Array read_array(int depth, std::string_view what) {
    uint64_t at = pos_;
    if (depth > kMaxArrayDepth)
      fail(at, str_cat(what, ": array nesting too deep (limit ", kMaxArrayDepth, ")"));
    Array a;
    a.elem_type_ = read_type(what);
    uint64_t count_at = pos_;
    uint64_t count = read<uint64_t>(what);
    uint64_t min_size = min_encoded_size(a.elem_type_);
    if (count > remaining() / min_size)
      fail(count_at, str_cat(what, ": array length ", count, " of ",
                             value_type_name(a.elem_type_), " past end of file (",
                             remaining(), " bytes left)"));
    n_elements_ += count;
    if (n_elements_ > kMaxMetadataElements)
      fail(count_at, str_cat(what, ": array length ", count, " brings the metadata past ",
                             kMaxMetadataElements, " array elements"));
    const uint64_t begin = pos_;
    if (a.elem_type_ == ValueType::STRING || a.elem_type_ == ValueType::ARRAY) {
      a.starts_.reserve(count + 1);  // bounded by the file size, checked above
      for (uint64_t i = 0; i < count; ++i) {
        a.starts_.push_back(pos_ - begin);
        if (a.elem_type_ == ValueType::STRING) {
          read_string_view(what);
        } else {
          a.depth_ = std::max(a.depth_, 1 + read_array(depth + 1, what).depth_);
        }
      }
      a.starts_.push_back(pos_ - begin);
    } else if (a.elem_type_ == ValueType::BOOL) {
      for (uint64_t i = 0; i < count; ++i) skip_bool(what);
    } else {
      pos_ += count * min_size;  // in bounds: checked against remaining() above
    }
    a.bytes_ = bytes_.subspan(begin, pos_ - begin);
    a.owner_ = owner_;
    return a;
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& name_;
  std::shared_ptr<const void> owner_;
  uint64_t pos_ = 0;
  uint64_t n_elements_ = 0;  // array elements read so far, all arrays together
};

// ---------------------------------------------------------------------------------------
// Array

Array::Array(ValueType elem_type, const std::vector<Value>& items) {
  if (static_cast<uint32_t>(elem_type) > static_cast<uint32_t>(ValueType::FLOAT64))
    throw Error(str_cat("invalid array element type ", static_cast<uint32_t>(elem_type)));
  const bool indexed = !has_fixed_size(elem_type);
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> starts;
  int depth = 1;
  for (const Value& item : items) {
    if (item.type != elem_type)
      throw Error(str_cat("array of ", value_type_name(elem_type), " holds a ",
                          value_type_name(item.type)));
    if (indexed) starts.push_back(bytes.size());
    if (item.type == ValueType::ARRAY) depth = std::max(depth, 1 + item.as_array().depth_);
    append_encoded(item, bytes);
  }
  if (indexed) starts.push_back(bytes.size());
  if (depth > kMaxArrayDepth)
    throw Error(str_cat("arrays nested deeper than ", kMaxArrayDepth));
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  elem_type_ = elem_type;
  depth_ = depth;
  bytes_ = *owned;
  starts_ = std::move(starts);
  owner_ = std::move(owned);
}

size_t Array::size() const {
  return has_fixed_size(elem_type_) ? bytes_.size() / min_encoded_size(elem_type_)
                                    : starts_.size() - 1;
}

Value Array::at(size_t i) const {
  assert(i < size());
  switch (elem_type_) {
    case ValueType::STRING: return Value{elem_type_, std::string(string_at(i))};
    case ValueType::ARRAY: {
      // The bytes were validated when read or written; decoding them again cannot fail.
      static const std::string kName = "nested array";
      Reader r(bytes_.subspan(starts_[i], starts_[i + 1] - starts_[i]), kName, owner_);
      return Value{elem_type_, r.read_array(1, kName)};
    }
    default: return decode_fixed(elem_type_, bytes_.data() + i * min_encoded_size(elem_type_));
  }
}

std::string_view Array::string_at(size_t i) const {
  assert(i < size());
  if (elem_type_ != ValueType::STRING) throw_type(at(i), "string");
  const uint64_t begin = starts_[i] + sizeof(uint64_t);  // after the length prefix
  return {reinterpret_cast<const char*>(bytes_.data() + begin), starts_[i + 1] - begin};
}

bool Array::operator==(const Array& other) const {
  if (elem_type_ != other.elem_type_ || size() != other.size()) return false;
  for (size_t i = 0; i < size(); ++i) {
    bool same = elem_type_ == ValueType::STRING ? string_at(i) == other.string_at(i)
                                                : at(i) == other.at(i);
    if (!same) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// File

File File::open(const std::string& path) {
  File f;
  f.mapping_ = std::make_shared<MappedFile>(path);
  f.bytes_ = f.mapping_->bytes();
  f.name_ = path;
  f.parse_all();
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  File f;
  f.bytes_ = bytes;
  f.name_ = std::move(name);
  f.parse_all();
  return f;
}

void File::parse_all() {
  Reader r(bytes_, name_, mapping_);

  // Header: magic, version, tensor count, kv count.
  uint32_t magic = r.read<uint32_t>("header magic");
  if (magic != kMagic) {
    char shown[5] = {};
    std::memcpy(shown, &magic, 4);
    for (char& c : shown)
      if (c != 0 && (c < 0x20 || c > 0x7e)) c = '?';
    r.fail(0, str_cat("bad magic 0x", std::hex, magic, std::dec, " (\"", shown,
                      "\"), not a GGUF file"));
  }
  version_ = r.read<uint32_t>("header version");
  if (version_ == 1)
    r.fail(4, "unsupported version 1 (GGUF v1 used 32-bit counts; convert the file to v3)");
  if (version_ != 2 && version_ != 3) {
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
      r.fail(4, "unsupported big-endian GGUF (version field is byte-swapped)");
    r.fail(4, str_cat("unsupported version ", version_, " (supported: 2, 3)"));
  }
  uint64_t n_tensors = r.read<uint64_t>("header tensor count");
  uint64_t n_kv = r.read<uint64_t>("header kv count");
  // Each kv and each tensor info occupies a minimum number of bytes, so the counts are
  // bounded by what is left of the file; this is checked before anything is reserved.
  if (n_kv > r.remaining() / kMinKvBytes)
    r.fail(16, str_cat("kv count ", n_kv, " impossible for a file of ", bytes_.size(),
                       " bytes"));
  if (n_tensors > (r.remaining() - n_kv * kMinKvBytes) / kMinTensorInfoBytes)
    r.fail(8, str_cat("tensor count ", n_tensors, " impossible for a file of ",
                      bytes_.size(), " bytes"));

  // Metadata.
  metadata_.reserve(n_kv);
  metadata_index_.reserve(n_kv);
  uint64_t alignment_at = 0;
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = r.pos();
    std::string key = r.read_string("key of kv " + std::to_string(i));
    if (key.empty()) r.fail(at, str_cat("empty key in kv ", i));
    std::string what = "value of '" + key + "'";
    ValueType type = r.read_type(what);
    Value value = r.read_value(type, 0, what);
    if (!metadata_index_.emplace(key, metadata_.size()).second)
      r.fail(at, str_cat("duplicate key '", key, "'"));
    if (key == "general.alignment") alignment_at = at;
    metadata_.push_back(KeyValue{std::move(key), std::move(value)});
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      r.fail(alignment_at, str_cat("general.alignment has type ", value_type_name(a->type),
                                   ", expected uint32"));
    uint64_t value = a->as_u64();
    if (value == 0 || !std::has_single_bit(value))
      r.fail(alignment_at, str_cat("general.alignment ", value, " is not a power of two"));
    alignment_ = static_cast<uint32_t>(value);
  }

  // Tensor infos.
  tensors_.reserve(n_tensors);
  tensor_index_.reserve(n_tensors);
  std::vector<uint64_t> info_offsets;
  info_offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    uint64_t at = r.pos();
    info_offsets.push_back(at);
    TensorInfo t;
    t.name = r.read_string("name of tensor " + std::to_string(i));
    if (t.name.empty()) r.fail(at, str_cat("empty name for tensor ", i));
    std::string what = "tensor '" + t.name + "'";
    uint64_t dims_at = r.pos();
    uint32_t n_dims = r.read<uint32_t>(what);
    if (n_dims > static_cast<uint32_t>(kMaxDims))
      r.fail(dims_at, str_cat(what, ": n_dims ", n_dims, " exceeds ", kMaxDims));
    t.n_dims = static_cast<int>(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim_at = r.pos();
      int64_t ne = r.read<int64_t>(what);
      if (ne <= 0) r.fail(dim_at, str_cat(what, ": dimension ", d, " is ", ne, ", must be > 0"));
      if (mul_overflows(n_elements, static_cast<uint64_t>(ne), &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        r.fail(dim_at, str_cat(what, ": element count overflows"));
      t.ne[d] = ne;
    }
    uint64_t type_at = r.pos();
    uint32_t type_id = r.read<uint32_t>(what);
    if (!is_known_dtype(type_id))
      r.fail(type_at, str_cat(what, ": tensor type ", unknown_dtype_explanation(type_id)));
    t.dtype = static_cast<DType>(type_id);
    const TypeTraits& traits = type_traits(t.dtype);
    if (t.ne[0] % traits.block_size != 0)
      r.fail(dims_at, str_cat(what, ": ne[0] = ", t.ne[0], " is not a multiple of the ",
                              traits.name, " block size ", traits.block_size));
    uint64_t row_bytes = static_cast<uint64_t>(t.ne[0] / traits.block_size) * traits.type_size;
    uint64_t nbytes = 0;
    if (mul_overflows(row_bytes, n_elements / static_cast<uint64_t>(t.ne[0]), &nbytes))
      r.fail(dims_at, str_cat(what, ": byte size overflows"));
    t.nbytes = nbytes;
    uint64_t offset_at = r.pos();
    t.offset = r.read<uint64_t>(what);
    if (t.offset % alignment_ != 0)
      r.fail(offset_at, str_cat(what, ": data offset ", t.offset, " not aligned to ",
                                alignment_));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      r.fail(at, str_cat("duplicate tensor name '", t.name, "'"));
    tensors_.push_back(std::move(t));
  }

  // Data section: starts at the first aligned offset after the infos. A file without
  // tensors may end before it (nothing follows the infos then).
  uint64_t end_of_infos = r.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes_.size())
    r.fail(end_of_infos, str_cat("truncated: data section would start at ", data_offset_,
                                 " but the file is ", bytes_.size(), " bytes"));
  uint64_t data_bytes = data_offset_ <= bytes_.size() ? bytes_.size() - data_offset_ : 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorInfo& t = tensors_[i];
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset)
      r.fail(info_offsets[i],
             str_cat("tensor '", t.name, "': data [", data_offset_ + t.offset, ", +", t.nbytes,
                     ") extends past end of file (", bytes_.size(), " bytes)"));
    t.data = bytes_.data() + data_offset_ + t.offset;
  }

  // Overlap: sort tensor indices by offset and compare neighbours.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = tensors_[order[k - 1]];
    const TensorInfo& cur = tensors_[order[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      r.fail(info_offsets[order[k]],
             str_cat("tensor '", cur.name, "': data overlaps tensor '", prev.name, "'"));
  }
}

// ---------------------------------------------------------------------------------------
// Lookups

const Value* File::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

namespace {

template <class T, class Get>
T get_checked(const File& f, std::string_view key, Get get) {
  const Value* v = f.find(key);
  if (v == nullptr) throw Error(str_cat(f.name(), ": missing metadata key '", key, "'"));
  try {
    return get(*v);
  } catch (const Error& e) {
    throw Error(str_cat(f.name(), ": key '", key, "': ", e.what()));
  }
}

template <class T, class Get>
T get_or(const File& f, std::string_view key, T fallback, Get get) {
  if (f.find(key) == nullptr) return fallback;
  return get_checked<T>(f, key, get);
}

}  // namespace

std::string File::get_string(std::string_view key) const {
  return get_checked<std::string>(*this, key, [](const Value& v) { return v.as_string(); });
}
std::string File::get_string(std::string_view key, std::string_view fallback) const {
  return get_or<std::string>(*this, key, std::string(fallback),
                             [](const Value& v) { return v.as_string(); });
}
uint64_t File::get_u64(std::string_view key) const {
  return get_checked<uint64_t>(*this, key, [](const Value& v) { return v.as_u64(); });
}
uint64_t File::get_u64(std::string_view key, uint64_t fallback) const {
  return get_or<uint64_t>(*this, key, fallback, [](const Value& v) { return v.as_u64(); });
}
int64_t File::get_i64(std::string_view key) const {
  return get_checked<int64_t>(*this, key, [](const Value& v) { return v.as_i64(); });
}
int64_t File::get_i64(std::string_view key, int64_t fallback) const {
  return get_or<int64_t>(*this, key, fallback, [](const Value& v) { return v.as_i64(); });
}
double File::get_f64(std::string_view key) const {
  return get_checked<double>(*this, key, [](const Value& v) { return v.as_f64(); });
}
double File::get_f64(std::string_view key, double fallback) const {
  return get_or<double>(*this, key, fallback, [](const Value& v) { return v.as_f64(); });
}
bool File::get_bool(std::string_view key) const {
  return get_checked<bool>(*this, key, [](const Value& v) { return v.as_bool(); });
}
bool File::get_bool(std::string_view key, bool fallback) const {
  return get_or<bool>(*this, key, fallback, [](const Value& v) { return v.as_bool(); });
}

const Array& File::get_array(std::string_view key) const {
  const Array* a = find_array(key);
  if (a == nullptr) throw Error(str_cat(name_, ": missing metadata key '", key, "'"));
  return *a;
}

const Array* File::find_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  return &get_checked<const Array&>(*this, key,
                                    [](const Value& x) -> const Array& { return x.as_array(); });
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) throw Error(str_cat(name_, ": no tensor named '", name, "'"));
  return *t;
}

void File::drop_pages(const TensorInfo& t) const {
  if (mapping_ != nullptr) mapping_->drop_pages(t.data, t.nbytes);
}

}  // namespace ridge::gguf
