#include "kv/block_pool.h"

#include "core/error.h"

namespace ridge {

BlockPool::BlockPool(int32_t n_blocks) {
  if (n_blocks < 1) {
    throw Error(str_cat("kv block pool: n_blocks must be at least 1, got ", n_blocks));
  }
  ref_count_.assign(static_cast<size_t>(n_blocks), 0);
  free_ring_.resize(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) free_ring_[static_cast<size_t>(i)] = i;
  n_free_ = n_blocks;
}

int32_t BlockPool::allocate() {
  if (n_free_ == 0) return kNoBlock;
  const int32_t block = free_ring_[static_cast<size_t>(free_head_)];
  free_head_ = (free_head_ + 1) % n_blocks();
  --n_free_;
  ref_count_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::check_used(int32_t block, const char* what) const {
  if (block < 0 || block >= n_blocks()) {
    throw Error(str_cat("kv block pool: ", what, " of block ", block, ", outside 0..",
                        n_blocks() - 1));
  }
  if (ref_count_[static_cast<size_t>(block)] == 0) {
    throw Error(str_cat("kv block pool: ", what, " of block ", block, ", which is free"));
  }
}

void BlockPool::retain(int32_t block) {
  check_used(block, "retain");
  ++ref_count_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  check_used(block, "release");
  if (--ref_count_[static_cast<size_t>(block)] > 0) return;
  // The ring has room: at most n_blocks blocks are ever free.
  const int32_t tail = (free_head_ + n_free_) % n_blocks();
  free_ring_[static_cast<size_t>(tail)] = block;
  ++n_free_;
}

int32_t BlockPool::ref_count(int32_t block) const {
  if (block < 0 || block >= n_blocks()) {
    throw Error(str_cat("kv block pool: ref_count of block ", block, ", outside 0..",
                        n_blocks() - 1));
  }
  return ref_count_[static_cast<size_t>(block)];
}

}  // namespace ridge
