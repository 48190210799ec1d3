// ThreadPool: both schedules run every task exactly once, for any task count and pool size, and
// Schedule::kRanges gives each thread its own contiguous range first and lets the others take
// what a slow thread has not started.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace weft {
namespace {

void expect_each_task_once(ThreadPool& pool, int64_t n, Schedule s) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
  for (auto& r : runs) r.store(0);
  pool.parallel_for(n, [&](int64_t t) { runs[size_t(t)].fetch_add(1); }, s);
  for (int64_t t = 0; t < n; ++t) ASSERT_EQ(runs[size_t(t)].load(), 1) << "task " << t << " of " << n;
}

TEST(ThreadPool, EveryTaskRunsOnceUnderBothSchedules) {
  for (int threads : {1, 2, 3, 5, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 8, 64, 1000, 4097}) {
      expect_each_task_once(pool, n, Schedule::kShared);
      expect_each_task_once(pool, n, Schedule::kRanges);
    }
  }
}

// With nothing slowing any thread, thread i runs its own range in ascending order first: the
// caller (thread 0) starts at task 0, and the tasks it runs before any stolen one are 0, 1, 2...
TEST(ThreadPool, RangesStartWithTheOwnContiguousRun) {
  ThreadPool pool(4);
  const int64_t n = 400;
  std::mutex mu;
  std::vector<int64_t> caller;
  const auto me = std::this_thread::get_id();
  pool.parallel_for(
      n,
      [&](int64_t t) {
        if (std::this_thread::get_id() != me) return;
        std::lock_guard<std::mutex> lock(mu);
        caller.push_back(t);
      },
      Schedule::kRanges);
  ASSERT_FALSE(caller.empty());
  // Its first tasks are its range's first tasks, in order (it may stop early: others steal).
  for (size_t i = 0; i < caller.size() && caller[i] < n / 4; ++i) EXPECT_EQ(caller[i], int64_t(i));
}

// A thread that is slow at its first task does not hold up its range: the others take the rest.
TEST(ThreadPool, RangesOfASlowThreadAreTakenByTheOthers) {
  ThreadPool pool(2);
  const int64_t n = 64;
  std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
  for (auto& r : runs) r.store(0);
  std::atomic<int64_t> by_caller{0};
  const auto me = std::this_thread::get_id();
  pool.parallel_for(
      n,
      [&](int64_t t) {
        runs[size_t(t)].fetch_add(1);
        if (std::this_thread::get_id() == me) {
          by_caller.fetch_add(1);
          if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      },
      Schedule::kRanges);
  for (int64_t t = 0; t < n; ++t) ASSERT_EQ(runs[size_t(t)].load(), 1) << t;
  // The caller's range is [0, 32); while it slept on task 0 the worker finished [32, 64) and
  // then took the caller's tasks from the far end.
  EXPECT_LT(by_caller.load(), n / 2);
}

// Loops back to back, alternating the schedules, neither lose nor repeat a task.
TEST(ThreadPool, ManySmallLoopsInARow) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 2000; ++i)
    pool.parallel_for(5, [&](int64_t t) { sum.fetch_add(t + 1); }, i % 2 ? Schedule::kRanges : Schedule::kShared);
  EXPECT_EQ(sum.load(), 2000 * 15);
}

}  // namespace
}  // namespace weft
