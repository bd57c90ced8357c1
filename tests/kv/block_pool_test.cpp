#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ridge {
namespace {

TEST(BlockPool, AllocatesInIdOrderThenReportsNone) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), BlockPool::kNoBlock);
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_EQ(pool.n_used(), 4);
}

TEST(BlockPool, FreedBlocksQueueBehindBlocksFreedEarlier) {
  BlockPool pool(5);
  for (int i = 0; i < 3; ++i) pool.allocate();  // 0, 1, 2
  pool.release(1);
  pool.release(0);
  EXPECT_EQ(pool.n_free(), 4);
  // 3 and 4 have been free since the start; then 1 and 0 in the order they were freed.
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 4);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), BlockPool::kNoBlock);
  // The ring wraps: free and take again many times without losing or duplicating blocks.
  for (int round = 0; round < 20; ++round) {
    pool.release(2);
    EXPECT_EQ(pool.allocate(), 2);
  }
  EXPECT_EQ(pool.n_used(), 5);
}

TEST(BlockPool, SharedBlockStaysUsedUntilItsLastOwnerReleasesIt) {
  BlockPool pool(2);
  const int32_t b = pool.allocate();
  EXPECT_EQ(pool.ref_count(b), 1);
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(BlockPool, MisuseThrows) {
  EXPECT_THROW(BlockPool(0), Error);
  BlockPool pool(3);
  const int32_t b = pool.allocate();
  pool.release(b);
  EXPECT_THROW(pool.release(b), Error);  // double free
  EXPECT_THROW(pool.retain(b), Error);   // retain of a free block
  EXPECT_THROW(pool.release(-1), Error);
  EXPECT_THROW(pool.release(3), Error);
  EXPECT_THROW(pool.ref_count(7), Error);
  EXPECT_EQ(pool.n_free(), 3);  // the failed calls changed nothing
}

}  // namespace
}  // namespace ridge
