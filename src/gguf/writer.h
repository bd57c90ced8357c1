// GGUF writer: builds a GGUF v3 file from metadata and tensors; the `gguf` Python
// package and our reader read it back.
//
//   gguf::Writer w;
//   w.set("general.architecture", gguf::Value{...});   // or the typed helpers below
//   w.set_string("general.name", "tiny");
//   w.add_tensor("token_embd.weight", DType::F32, {64, 512}, bytes);
//   w.write("out.gguf");                                 // throws ridge::Error on I/O errors
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ridge::gguf {

class Writer {
 public:
  explicit Writer(uint32_t alignment = kDefaultAlignment);

  // Replaces an existing key, keeps order. An array read from a File keeps viewing its
  // bytes: File::open's mapping stays alive with it, File::parse's bytes must outlive this.
  void set(std::string key, Value value);
  void set_string(std::string key, std::string value);
  void set_u32(std::string key, uint32_t value);
  void set_i32(std::string key, int32_t value);
  void set_u64(std::string key, uint64_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_string_array(std::string key, const std::vector<std::string>& values);
  void set_f32_array(std::string key, const std::vector<float>& values);
  void set_i32_array(std::string key, const std::vector<int32_t>& values);

  // dims innermost first, as in TensorInfo::ne. The bytes are copied; their size must
  // equal the size the type and dims imply (checked).
  void add_tensor(std::string name, DType dtype, std::vector<int64_t> dims,
                  std::span<const uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_;
  std::vector<KeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ridge::gguf
