// A fixed set of KV blocks with a free queue and per-block reference counts: the
// allocator under the paged KV cache. It knows nothing about tokens or layers.
//
//   BlockPool pool(4);
//   int32_t b = pool.allocate();   // 0 (then 1, 2, 3; -1 when none is free)
//   pool.retain(b);                // a second owner (prefix sharing): ref_count 2
//   pool.release(b);               // ref_count 1
//   pool.release(b);               // free again; handed out after the other free blocks
//   pool.take(b);                  // a free block wanted back (a prefix-cache hit): ref 1
//
// The free queue is least-recently-freed first. With prefix caching, free blocks still
// hold reusable K/V ("cached free"), so the queue order is the LRU eviction order, and
// take() pulls a block out of the middle of it; a doubly linked list makes both O(1).
#pragma once

#include <cstdint>
#include <vector>

namespace ridge {

class BlockPool {
 public:
  static constexpr int32_t kNoBlock = -1;

  // Throws ridge::Error if n_blocks < 1.
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free_; }

  // Takes the free block that has been free longest (a FIFO queue; at start 0, 1, 2, ...)
  // and gives it ref_count 1. Returns kNoBlock when none is free. FIFO rather than LIFO so
  // that, once blocks are kept for prefix reuse, the least recently freed goes first.
  int32_t allocate();
  // The block allocate() would hand out next (kNoBlock when none is free).
  int32_t next_free() const { return free_head_; }
  // Takes this particular free block out of the free queue and gives it ref_count 1.
  // Throws ridge::Error if the block is used or unknown.
  void take(int32_t block);
  // Adds an owner to a used block. Throws ridge::Error on a free or unknown block.
  void retain(int32_t block);
  // Drops an owner; the block joins the back of the free queue when none is left.
  // Throws ridge::Error on a free or unknown block (a double free is a bug upstream).
  void release(int32_t block);
  int32_t ref_count(int32_t block) const;
  bool is_free(int32_t block) const { return ref_count(block) == 0; }

 private:
  void check_used(int32_t block, const char* what) const;
  void unlink(int32_t block);

  std::vector<int32_t> ref_count_;  // [n_blocks]; 0 = free
  std::vector<int32_t> next_;       // [n_blocks]; free queue links (kNoBlock ends it)
  std::vector<int32_t> prev_;       // [n_blocks]
  int32_t free_head_ = kNoBlock;    // longest free: handed out next
  int32_t free_tail_ = kNoBlock;    // most recently freed
  int32_t n_free_ = 0;
};

}  // namespace ridge
