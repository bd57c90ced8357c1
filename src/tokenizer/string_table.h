// Internal to the tokenizer room: many short strings (token texts, merges, BPE pieces) in
// one buffer, each named by an int32 id in insertion order, with an open-addressing index
// from text to id. Replaces vector<string> + unordered_map<string, int32_t>, which cost
// 80+ bytes and one or two allocations per string; here a string costs its bytes, a
// 4-byte offset and, when indexed, under three 8-byte index slots.
//
//   StringTable t;
//   int32_t a = t.intern("hello");   // 0: added and indexed
//   int32_t b = t.append("hello");   // 1: stored, not findable
//   t.find("hello");                 // 0; t[1] == "hello"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ridge::tokenizer_detail {

class StringTable {
 public:
  static constexpr int32_t kAbsent = -1;

  int32_t size() const { return static_cast<int32_t>(offsets_.size() - 1); }
  std::string_view operator[](int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(bytes_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
  }

  // Stores text under the next id and returns it; find() does not see it until index(id).
  // Throws ridge::Error past 4 GiB of text or 2^31 strings.
  int32_t append(std::string_view text);
  // Makes id findable by its text; false (and nothing changes) when an id indexed earlier
  // has the same text, which stays the one find() returns.
  bool index(int32_t id);
  int32_t find(std::string_view text) const;  // kAbsent when no indexed id has this text
  int32_t intern(std::string_view text);      // find(), else append() and index()

  // Room for n_strings more strings of n_bytes in all, and an index that takes
  // n_indexed entries without growing.
  void reserve(size_t n_strings, size_t n_bytes, size_t n_indexed);
  void shrink_to_fit();
  size_t memory_bytes() const;  // heap held, for tests and reports

 private:
  struct Slot {
    int32_t id = kAbsent;
    uint32_t tag = 0;  // hash bits: the low ones pick the home slot, all are compared first
  };
  static uint32_t hash(std::string_view text);
  // The slot holding text, or the empty slot where it would go.
  size_t probe(std::string_view text, uint32_t tag) const;
  void grow_index(size_t min_entries);

  // Every string, back to back. A vector, not a std::string: moving the table then never
  // copies the bytes (no small-string buffer), so views it handed out stay valid.
  std::vector<char> bytes_;
  std::vector<uint32_t> offsets_{0};   // string i is bytes_[offsets_[i], offsets_[i + 1])
  std::vector<Slot> slots_;            // linear probing; size 0 or a power of two
  size_t n_indexed_ = 0;
};

}  // namespace ridge::tokenizer_detail
