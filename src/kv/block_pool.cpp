#include "kv/block_pool.h"

#include "core/error.h"

namespace ridge {

BlockPool::BlockPool(int32_t n_blocks) {
  if (n_blocks < 1) {
    throw Error(str_cat("kv block pool: n_blocks must be at least 1, got ", n_blocks));
  }
  ref_count_.assign(static_cast<size_t>(n_blocks), 0);
  next_.resize(static_cast<size_t>(n_blocks));
  prev_.resize(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) {
    next_[static_cast<size_t>(i)] = i + 1 < n_blocks ? i + 1 : kNoBlock;
    prev_[static_cast<size_t>(i)] = i - 1;  // -1 == kNoBlock for block 0
  }
  free_head_ = 0;
  free_tail_ = n_blocks - 1;
  n_free_ = n_blocks;
}

void BlockPool::unlink(int32_t block) {
  const auto b = static_cast<size_t>(block);
  const int32_t prev = prev_[b];
  const int32_t next = next_[b];
  if (prev == kNoBlock) free_head_ = next; else next_[static_cast<size_t>(prev)] = next;
  if (next == kNoBlock) free_tail_ = prev; else prev_[static_cast<size_t>(next)] = prev;
  next_[b] = prev_[b] = kNoBlock;
  --n_free_;
  ref_count_[b] = 1;
}

int32_t BlockPool::allocate() {
  if (n_free_ == 0) return kNoBlock;
  const int32_t block = free_head_;
  unlink(block);
  return block;
}

void BlockPool::take(int32_t block) {
  if (block < 0 || block >= n_blocks()) {
    throw Error(str_cat("kv block pool: take of block ", block, ", outside 0..", n_blocks() - 1));
  }
  if (ref_count_[static_cast<size_t>(block)] != 0) {
    throw Error(str_cat("kv block pool: take of block ", block, ", which is in use"));
  }
  unlink(block);
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
  const auto b = static_cast<size_t>(block);
  prev_[b] = free_tail_;
  next_[b] = kNoBlock;
  if (free_tail_ == kNoBlock) free_head_ = block; else next_[static_cast<size_t>(free_tail_)] = block;
  free_tail_ = block;
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
