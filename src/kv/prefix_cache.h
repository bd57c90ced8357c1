// Content-addressed index of full KV blocks, for reusing the K/V of a prompt prefix that
// an earlier request already computed. A block is named by a hash chain: the hash of its
// tokens and its parent block's hash, so one hash stands for the whole prefix up to and
// including that block. One PrefixCache indexes one block pool (one KV layer group).
//
//   std::vector<BlockHash> hashes;
//   extend_block_hashes(tokens, /*block_size=*/16, hashes);  // one hash per full block
//   PrefixCache index(/*n_blocks=*/1024, /*block_size=*/16);
//   index.insert(/*block=*/7, hashes[0], kRootHash, first_16_tokens);  // block 7 now holds them
//   int32_t b = index.find(hashes[0], kRootHash, first_16_tokens);     // 7 (or -1: a miss)
//   index.erase(7);                                                     // 7 is being overwritten
//
// A hit compares the stored parent hash and tokens too, not just the 64-bit hash, so two
// different blocks can only be confused if their parents' whole-prefix hashes collide.
// The index never allocates after construction: an open-addressing table with linear
// probing and backward-shift deletion, at most half full since a block holds one hash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

using BlockHash = uint64_t;

// The parent hash of a sequence's first block.
inline constexpr BlockHash kRootHash = 0x6a09e667f3bcc908ULL;

// Hash of one full block of tokens that follows the block whose hash is parent.
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);

// Appends to hashes the chain hashes of the full blocks of tokens it does not cover yet
// (hashes[i] names tokens [0, (i + 1) * block_size)). Tokens past the last full block
// are not hashed. Does not allocate when hashes has the capacity.
void extend_block_hashes(std::span<const int32_t> tokens, int32_t block_size,
                         std::vector<BlockHash>& hashes);

class PrefixCache {
 public:
  static constexpr int32_t kNoBlock = -1;

  // Throws ridge::Error if n_blocks < 1 or block_size < 1.
  PrefixCache(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return static_cast<int32_t>(hash_.size()); }
  int32_t size() const { return size_; }  // blocks holding a hash

  // The block that holds this block of tokens after this parent, or kNoBlock.
  int32_t find(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const;
  // Records that block now holds tokens (block_size of them) after parent, named hash.
  // Returns false, changing nothing, when another block already holds hash (two sequences
  // computed the same prefix at once: the first one stays the shared copy) or the block
  // already holds a hash. Throws ridge::Error on an unknown block or a wrong token count.
  bool insert(int32_t block, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens);
  // Forgets what block holds (its K/V is about to be overwritten); no-op if nothing.
  void erase(int32_t block);
  bool holds(int32_t block) const;

 private:
  size_t home(BlockHash hash) const { return static_cast<size_t>(hash) & mask_; }
  size_t find_slot(BlockHash hash) const;  // slot holding hash, or slots_.size()

  int32_t block_size_ = 0;
  std::vector<BlockHash> hash_;      // [n_blocks] what each block holds (if held_)
  std::vector<BlockHash> parent_;    // [n_blocks]
  std::vector<uint8_t> held_;        // [n_blocks] 1: the block holds a hash
  std::vector<int32_t> tokens_;      // [n_blocks][block_size]
  std::vector<int32_t> slots_;       // [power of two >= 2 * n_blocks] block id or kNoBlock
  size_t mask_ = 0;
  int32_t size_ = 0;
};

}  // namespace ridge
