// A read-only memory map of a whole file: the zero-copy base under GGUF tensors.
//
//   MappedFile f("model.gguf");
//   std::span<const uint8_t> bytes = f.bytes();
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ridge {

class MappedFile {
 public:
  // Throws ridge::Error naming the path and the OS error if the file cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Lets the OS drop the resident pages wholly inside [p, p + n) (a tensor converted at
  // load and never read again); a later read would fault them back in from the file.
  // Ranges outside the map are ignored.
  void drop_pages(const uint8_t* p, size_t n) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ridge
