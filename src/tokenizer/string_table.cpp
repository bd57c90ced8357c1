#include "tokenizer/string_table.h"

#include <cstring>
#include <limits>

#include "core/error.h"

namespace ridge::tokenizer_detail {

// Eight bytes at a time, then splitmix64's finalizer: token texts average a few bytes,
// so this is a handful of multiplies where std::hash runs a general-purpose loop.
uint32_t StringTable::hash(std::string_view text) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ text.size();
  const char* p = text.data();
  size_t left = text.size();
  for (; left >= 8; p += 8, left -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    h = (h ^ word) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  if (left > 0) {
    uint64_t word = 0;
    std::memcpy(&word, p, left);
    h = (h ^ word) * 0xFF51AFD7ED558CCDull;
  }
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return static_cast<uint32_t>(h);
}

int32_t StringTable::append(std::string_view text) {
  if (bytes_.size() + text.size() > std::numeric_limits<uint32_t>::max() ||
      offsets_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error("tokenizer: vocabulary strings exceed 4 GiB or 2^31 entries");
  }
  bytes_.insert(bytes_.end(), text.begin(), text.end());
  offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  return size() - 1;
}

size_t StringTable::probe(std::string_view text, uint32_t tag) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = tag & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id == kAbsent || (slot.tag == tag && (*this)[slot.id] == text)) return i;
  }
}

bool StringTable::index(int32_t id) {
  // At most 3/4 full, so a probe that misses stops after a few slots.
  if ((n_indexed_ + 1) * 4 > slots_.size() * 3) grow_index(n_indexed_ + 1);
  const std::string_view text = (*this)[id];
  const uint32_t tag = hash(text);
  Slot& slot = slots_[probe(text, tag)];
  if (slot.id != kAbsent) return false;
  slot = {id, tag};
  ++n_indexed_;
  return true;
}

int32_t StringTable::find(std::string_view text) const {
  if (slots_.empty()) return kAbsent;
  return slots_[probe(text, hash(text))].id;
}

int32_t StringTable::intern(std::string_view text) {
  if (const int32_t id = find(text); id != kAbsent) return id;
  const int32_t id = append(text);
  index(id);
  return id;
}

void StringTable::reserve(size_t n_strings, size_t n_bytes, size_t n_indexed) {
  bytes_.reserve(bytes_.size() + n_bytes);
  offsets_.reserve(offsets_.size() + n_strings);
  if (n_indexed > 0) grow_index(n_indexed_ + n_indexed);
}

void StringTable::shrink_to_fit() {
  bytes_.shrink_to_fit();
  offsets_.shrink_to_fit();
}

void StringTable::grow_index(size_t min_entries) {
  size_t n_slots = 16;
  while (n_slots * 3 < min_entries * 4) n_slots *= 2;
  if (n_slots <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(n_slots, Slot{});
  const size_t mask = n_slots - 1;
  for (const Slot& slot : old) {
    if (slot.id == kAbsent) continue;
    size_t i = slot.tag & mask;  // the tag is the hash, so no text is read again
    while (slots_[i].id != kAbsent) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

size_t StringTable::memory_bytes() const {
  return bytes_.capacity() + offsets_.capacity() * sizeof(uint32_t) +
         slots_.capacity() * sizeof(Slot);
}

}  // namespace ridge::tokenizer_detail
