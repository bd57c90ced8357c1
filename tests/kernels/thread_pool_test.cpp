// ThreadPool: every index covered exactly once, thread ids in range, exceptions reach the
// caller, nested calls do not deadlock, and many back-to-back jobs all complete.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <vector>

namespace ridge {
namespace {

enum class Mode { kStatic, kDynamic, kStealing };

void expect_each_index_once(ThreadPool& pool, int64_t n, Mode mode, int64_t grain = 1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> bad_thread{0};
  auto body = [&](int64_t begin, int64_t end, int thread) {
    if (thread < 0 || thread >= pool.n_threads()) bad_thread++;
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
  };
  if (mode == Mode::kDynamic)
    pool.parallel_for_dynamic(n, grain, body);
  else if (mode == Mode::kStealing)
    pool.parallel_for_stealing(n, grain, body);
  else
    pool.parallel_for(n, body);
  EXPECT_EQ(bad_thread.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, CoversEveryIndexOnceForAnySize) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 5, 6, 7, 8, 64, 1001}) {
      expect_each_index_once(pool, n, Mode::kStatic);
      expect_each_index_once(pool, n, Mode::kDynamic, 1);
      expect_each_index_once(pool, n, Mode::kDynamic, 7);
      expect_each_index_once(pool, n, Mode::kStealing, 1);
      expect_each_index_once(pool, n, Mode::kStealing, 7);
    }
  }
}

TEST(ThreadPool, DefaultUsesHardwareConcurrency) {
  ThreadPool pool;
  EXPECT_EQ(pool.n_threads(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ThreadPool, StaticChunksAreContiguousAndOrderedByThread) {
  ThreadPool pool(4);
  std::vector<std::pair<int64_t, int64_t>> chunk(4, {-1, -1});
  pool.parallel_for(10, [&](int64_t begin, int64_t end, int thread) { chunk[thread] = {begin, end}; });
  int64_t expected_begin = 0;
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(chunk[t].first, expected_begin) << "thread " << t;
    EXPECT_GE(chunk[t].second - chunk[t].first, 2);  // 10 over 4: sizes 2 or 3
    EXPECT_LE(chunk[t].second - chunk[t].first, 3);
    expected_begin = chunk[t].second;
  }
  EXPECT_EQ(expected_begin, 10);
}

TEST(ThreadPool, CallerIsThreadZeroAndWorkersAreDistinctThreads) {
  ThreadPool pool(3);
  std::vector<std::thread::id> ids(3);
  pool.parallel_for(3, [&](int64_t, int64_t, int thread) { ids[thread] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_NE(ids[2], ids[0]);
  EXPECT_NE(ids[1], ids[2]);
}

TEST(ThreadPool, OneDynamicChunkRunsOnTheCaller) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5}) {
    std::thread::id ran_on;
    int thread_index = -1, calls = 0;
    pool.parallel_for_dynamic(n, 5, [&](int64_t begin, int64_t end, int thread) {
      ran_on = std::this_thread::get_id();
      thread_index = thread;
      ++calls;
      EXPECT_EQ(begin, 0);
      EXPECT_EQ(end, n);
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(thread_index, 0);
    EXPECT_EQ(ran_on, std::this_thread::get_id());
  }
}

// Recorded calls of a stealing job: which thread ran which chunk, in call order.
struct StealingLog {
  std::mutex mutex;
  std::vector<std::vector<int64_t>> begins;  // per thread, in the order it ran them
  explicit StealingLog(int threads) : begins(static_cast<size_t>(threads)) {}
  void add(int thread, int64_t begin) {
    std::lock_guard<std::mutex> lock(mutex);
    begins[static_cast<size_t>(thread)].push_back(begin);
  }
};

TEST(ThreadPool, StealingThreadsWalkTheirOwnRangeForwardFirst) {
  // 4 threads, 40 indices in chunks of 2: thread t owns [10t, 10t + 10). Whatever it
  // takes from the others comes after its own chunks, from the far end of their ranges.
  ThreadPool pool(4);
  for (int job = 0; job < 200; ++job) {
    StealingLog log(4);
    pool.parallel_for_stealing(40, 2, [&](int64_t begin, int64_t end, int thread) {
      EXPECT_EQ(end - begin, 2);
      log.add(thread, begin);
    });
    for (int t = 0; t < 4; ++t) {
      const auto& own = log.begins[static_cast<size_t>(t)];
      size_t i = 0;
      for (; i < own.size() && own[i] / 10 == t; ++i) {
        if (i > 0) {
          EXPECT_EQ(own[i], own[i - 1] + 2) << "thread " << t << " skipped ahead in its own range";
        }
      }
      if (i > 0) {
        EXPECT_EQ(own[0], 10 * t) << "thread " << t << " did not start at its range's front";
      }
      for (; i < own.size(); ++i) EXPECT_NE(own[i] / 10, t) << "thread " << t << " went back to its own range";
    }
  }
}

TEST(ThreadPool, StealingTakesTheChunksOfASlowThread) {
  ThreadPool pool(2);
  StealingLog log(2);
  std::atomic<int> others_done{0};
  pool.parallel_for_stealing(20, 1, [&](int64_t begin, int64_t, int thread) {
    if (thread == 0 && begin == 0) {  // stalls until every other chunk ran (or 10 s)
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (others_done.load() < 19 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      others_done++;
    }
    log.add(thread, begin);
  });
  // Thread 0 owns 0..9 but sleeps in its first chunk; thread 1 takes the rest of them,
  // last first.
  EXPECT_EQ(log.begins[0], std::vector<int64_t>{0});
  ASSERT_EQ(log.begins[1].size(), 19u);
  EXPECT_EQ(log.begins[1][9], 10 + 9);
  EXPECT_EQ(log.begins[1][10], 9);
  EXPECT_EQ(log.begins[1].back(), 1);
}

TEST(ThreadPool, ManyBackToBackJobsComplete) {
  // Alternates spinning and sleeping workers: a zero spin budget forces the futex path.
  for (auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(50)}) {
    ThreadPool pool(3, spin);
    std::atomic<int64_t> total{0};
    for (int job = 0; job < 5000; ++job)
      pool.parallel_for(5, [&](int64_t begin, int64_t end, int) { total += end - begin; });
    EXPECT_EQ(total.load(), 5 * 5000);
  }
}

TEST(ThreadPool, ExceptionReachesCallerAndPoolStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(30,
                                 [&](int64_t begin, int64_t, int) {
                                   if (begin > 0) throw std::runtime_error("worker failed");
                                 }),
               std::runtime_error);
  expect_each_index_once(pool, 100, Mode::kStatic);
}

TEST(ThreadPool, NestedCallRunsInlineOnTheOuterThread) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::atomic<int> wrong_thread{0};
  pool.parallel_for(3, [&](int64_t, int64_t, int outer) {
    pool.parallel_for(10, [&](int64_t begin, int64_t end, int inner) {
      if (inner != outer) wrong_thread++;
      total += end - begin;
    });
  });
  EXPECT_EQ(total.load(), 30);
  EXPECT_EQ(wrong_thread.load(), 0);
}

TEST(ThreadPool, SeveralCallersShareOnePool) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job)
        pool.parallel_for(7, [&](int64_t begin, int64_t end, int) { total += end - begin; });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 3 * 500 * 7);
}

}  // namespace
}  // namespace ridge
