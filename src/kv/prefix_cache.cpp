#include "kv/prefix_cache.h"

#include <algorithm>
#include <cassert>

#include "core/error.h"

namespace ridge {
namespace {

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  return mix(h ^ tokens.size());
}

void extend_block_hashes(std::span<const int32_t> tokens, int32_t block_size,
                         std::vector<BlockHash>& hashes) {
  assert(block_size > 0);
  const size_t n_full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = hashes.size(); i < n_full; ++i) {
    const BlockHash parent = i == 0 ? kRootHash : hashes[i - 1];
    hashes.push_back(hash_block(parent, tokens.subspan(i * static_cast<size_t>(block_size),
                                                       static_cast<size_t>(block_size))));
  }
}

PrefixCache::PrefixCache(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
  if (n_blocks < 1) throw Error(str_cat("prefix cache: n_blocks must be positive, got ", n_blocks));
  if (block_size < 1) throw Error(str_cat("prefix cache: block_size must be positive, got ", block_size));
  const auto n = static_cast<size_t>(n_blocks);
  hash_.assign(n, 0);
  parent_.assign(n, 0);
  held_.assign(n, 0);
  tokens_.assign(n * static_cast<size_t>(block_size), 0);
  size_t capacity = 1;
  while (capacity < 2 * n) capacity *= 2;
  slots_.assign(capacity, kNoBlock);
  mask_ = capacity - 1;
}

size_t PrefixCache::find_slot(BlockHash hash) const {
  for (size_t i = home(hash);; i = (i + 1) & mask_) {
    const int32_t b = slots_[i];
    if (b == kNoBlock) return slots_.size();
    if (hash_[static_cast<size_t>(b)] == hash) return i;
  }
}

int32_t PrefixCache::find(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const {
  const size_t i = find_slot(hash);
  if (i == slots_.size()) return kNoBlock;
  const int32_t b = slots_[i];
  const auto stored = std::span<const int32_t>(tokens_).subspan(
      static_cast<size_t>(b) * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
  if (parent_[static_cast<size_t>(b)] != parent || tokens.size() != stored.size() ||
      !std::equal(tokens.begin(), tokens.end(), stored.begin())) {
    return kNoBlock;  // a hash collision: treat as a miss
  }
  return b;
}

bool PrefixCache::insert(int32_t block, BlockHash hash, BlockHash parent,
                         std::span<const int32_t> tokens) {
  if (block < 0 || block >= n_blocks()) {
    throw Error(str_cat("prefix cache: insert of block ", block, ", outside 0..", n_blocks() - 1));
  }
  if (tokens.size() != static_cast<size_t>(block_size_)) {
    throw Error(str_cat("prefix cache: insert of block ", block, " with ", tokens.size(),
                        " tokens, expected a full block of ", block_size_));
  }
  const auto b = static_cast<size_t>(block);
  if (held_[b] || find_slot(hash) != slots_.size()) return false;
  size_t i = home(hash);
  while (slots_[i] != kNoBlock) i = (i + 1) & mask_;
  slots_[i] = block;
  hash_[b] = hash;
  parent_[b] = parent;
  held_[b] = 1;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(block_size_)));
  ++size_;
  return true;
}

void PrefixCache::erase(int32_t block) {
  if (!holds(block)) return;
  size_t hole = find_slot(hash_[static_cast<size_t>(block)]);
  assert(hole != slots_.size() && slots_[hole] == block);
  held_[static_cast<size_t>(block)] = 0;
  --size_;
  // Backward-shift deletion: move later entries of the probe run into the hole when their
  // home slot does not lie (cyclically) between the hole and where they are.
  for (size_t i = (hole + 1) & mask_;; i = (i + 1) & mask_) {
    const int32_t b = slots_[i];
    if (b == kNoBlock) break;
    const size_t h = home(hash_[static_cast<size_t>(b)]);
    const bool stays = hole <= i ? (hole < h && h <= i) : (hole < h || h <= i);
    if (stays) continue;
    slots_[hole] = b;
    hole = i;
  }
  slots_[hole] = kNoBlock;
}

bool PrefixCache::holds(int32_t block) const {
  return block >= 0 && block < n_blocks() && held_[static_cast<size_t>(block)] != 0;
}

}  // namespace ridge
