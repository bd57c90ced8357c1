// GGUF reader: parses and validates a GGUF (v2 or v3) file and exposes its metadata and
// tensors; tensor data and metadata arrays are zero-copy views into a read-only mmap of
// the file.
//
//   gguf::File f = gguf::File::open("model.gguf");        // throws ridge::Error on bad input
//   std::string arch = f.get_string("general.architecture");
//   const gguf::TensorInfo* t = f.find_tensor("token_embd.weight");
//   // t->data points into the mapping; t->dtype, t->ne[0..n_dims) give the layout.
//
// Nothing in the file is trusted: every count, length, offset and extent is checked
// against the file size before use, and every rejection names the byte offset or tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace ridge::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
// Arrays may nest (arrays of arrays); deeper nesting than this is rejected as hostile.
constexpr int kMaxArrayDepth = 8;
// Arrays stay in the file's encoding, but each string or nested-array element still costs
// an 8-byte index entry (a nested array also a short-lived object while it is checked), so
// the total over all arrays is capped. The largest real vocabularies (262k tokens:
// tokens, scores, types, merges) use about 1.3M.
constexpr uint64_t kMaxMetadataElements = uint64_t{1} << 23;

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType type);

struct Value;
class Reader;  // gguf.cpp's parser, which fills in Arrays

// A metadata array: size() elements of one type, kept as GGUF encodes them (little-endian,
// unaligned, strings length-prefixed) and decoded on access, so a 262k-token vocabulary
// costs an 8-byte index entry per string rather than an object per element. An array the
// reader returns views the file (and keeps an opened file's mapping alive); one built in
// memory owns its bytes. Copies share the bytes.
//
//   const gguf::Array& tokens = f.get_array("tokenizer.ggml.tokens");
//   std::string_view text = tokens.string_at(5);          // STRING arrays: a view, no copy
//   double score = f.get_array("tokenizer.ggml.scores").at(5).as_f64();
class Array {
 public:
  Array() = default;  // empty, of uint8
  // Encodes `items`; throws ridge::Error when an item's type is not `elem_type`, a value
  // does not fit it, or nesting would pass kMaxArrayDepth.
  Array(ValueType elem_type, const std::vector<Value>& items);

  ValueType elem_type() const { return elem_type_; }
  size_t size() const;
  bool empty() const { return bytes_.empty(); }
  // Element i (i < size()) as a Value: numbers widened as in Value, strings copied,
  // nested arrays as Arrays sharing these bytes.
  Value at(size_t i) const;
  // Element i of a STRING array as a view into the bytes; throws ridge::Error naming
  // the element type for any other array.
  std::string_view string_at(size_t i) const;
  // The elements as the file encodes them (no element type or count), for the writer.
  std::span<const uint8_t> encoded() const { return bytes_; }

  // Same element type and the same elements (NaN != NaN as for doubles).
  bool operator==(const Array& other) const;

 private:
  friend class Reader;

  ValueType elem_type_ = ValueType::UINT8;
  int depth_ = 1;  // levels of nesting, this one included
  std::span<const uint8_t> bytes_;
  // STRING and ARRAY only: element i is bytes_[starts_[i], starts_[i + 1]); size() + 1
  // entries. Fixed-size elements are found by multiplying. (No size_ member: it is
  // implied, and one makes GCC 12 warn falsely wherever a Value is moved.)
  std::vector<uint64_t> starts_;
  // Keeps bytes_ alive: the file's mapping, or the bytes of an array built in memory.
  // Null for arrays of File::parse, whose caller keeps the bytes alive.
  std::shared_ptr<const void> owner_;
};

// One metadata value. Integers keep their declared type in `type`; the payload holds
// them widened (signed in int64_t, unsigned in uint64_t).
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  bool is_integer() const;
  bool is_number() const;  // integer or float
  // Checked accessors: throw ridge::Error naming the actual type on mismatch or when the
  // value does not fit (a negative int as unsigned, 2^40 as uint32).
  uint64_t as_u64() const;
  int64_t as_i64() const;
  double as_f64() const;  // any number
  bool as_bool() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  // Human-readable rendering; arrays longer than max_items are elided with "...".
  std::string to_string(size_t max_items = 8) const;

  // Same declared type and same payload (deep for arrays; NaN != NaN as for doubles).
  bool operator==(const Value&) const = default;
};

// Appends v's GGUF encoding (its payload, without the type tag) to `out`. Throws
// ridge::Error when the payload does not match v.type or does not fit it.
void append_encoded(const Value& v, std::vector<uint8_t>& out);

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;                   // relative to the start of the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;         // view into the mapping (or the parsed buffer)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[2048, 32000]"
};

class File {
 public:
  // Maps and parses a file. Throws ridge::Error("<path>: <problem> at offset N") on any
  // malformed input.
  static File open(const std::string& path);
  // Parses bytes that the caller keeps alive (fuzzing, tests). `name` prefixes errors.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t file_size() const { return bytes_.size(); }
  const std::string& name() const { return name_; }

  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;  // null if absent
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. Without a default they throw ridge::Error naming the key when it is
  // absent; with one they return it when absent. A present key of the wrong type throws.
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view fallback) const;
  uint64_t get_u64(std::string_view key) const;
  uint64_t get_u64(std::string_view key, uint64_t fallback) const;
  int64_t get_i64(std::string_view key) const;
  int64_t get_i64(std::string_view key, int64_t fallback) const;
  double get_f64(std::string_view key) const;
  double get_f64(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key) const;
  bool get_bool(std::string_view key, bool fallback) const;
  const Array& get_array(std::string_view key) const;
  const Array* find_array(std::string_view key) const;  // null if absent; throws if not an array

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // null if absent
  const TensorInfo& tensor(std::string_view name) const;       // throws if absent
  // Drops a tensor's resident pages when the file is mapped (MappedFile::drop_pages);
  // nothing for caller-owned bytes.
  void drop_pages(const TensorInfo& t) const;

 private:
  File() = default;
  void parse_all();

  std::shared_ptr<MappedFile> mapping_;  // null when parsing caller-owned bytes
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ridge::gguf
