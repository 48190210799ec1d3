// ThreadPool: both schedules run every task exactly once, for any task count and pool size, and
// Schedule::kRanges gives each thread its own contiguous range first and lets the others take
// what a slow thread has not started.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// Two threads: the caller owns [0, n/2), the worker [n/2, n). Whatever the timing, each thread
// runs its own range from the front in ascending order and takes the other's from the back in
// descending order, so the tasks each thread ran are two consecutive runs.
TEST(ThreadPool, RangesAreRunFromTheFrontAndTakenFromTheBack) {
  ThreadPool pool(2);
  const int64_t n = 1000;
  for (int round = 0; round < 20; ++round) {
    std::mutex mu;
    std::vector<int64_t> caller, worker;
    const auto me = std::this_thread::get_id();
    pool.parallel_for(
        n,
        [&](int64_t t) {
          std::lock_guard<std::mutex> lock(mu);
          (std::this_thread::get_id() == me ? caller : worker).push_back(t);
        },
        Schedule::kRanges);
    ASSERT_EQ(int64_t(caller.size() + worker.size()), n);
    auto check = [&](const std::vector<int64_t>& ran, int64_t own0, int64_t own1, int64_t other1, const char* who) {
      int64_t next_own = own0, next_other = other1 - 1;
      for (int64_t t : ran) {
        if (t >= own0 && t < own1) {
          ASSERT_EQ(t, next_own++) << who << " round " << round;
        } else {
          ASSERT_EQ(t, next_other--) << who << " round " << round;
        }
      }
    };
    check(caller, 0, n / 2, n, "caller");
    check(worker, n / 2, n, n / 2, "worker");
  }
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

// The switch is read once per process, so each case runs in a fresh one (the threadsafe style
// re-executes this binary for the statement).
TEST(ThreadPoolDeathTest, AScheduleSwitchOfAnotherValueIsNamedAndIgnored) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("WEFT_POOL_SCHEDULE", "sharde", 1);
        ThreadPool pool(2);
        expect_each_task_once(pool, 100, Schedule::kRanges);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "WEFT_POOL_SCHEDULE=sharde is not 'shared' or 'ranges'; ignored");
  EXPECT_EXIT(
      {
        setenv("WEFT_POOL_SCHEDULE", "shared", 1);
        ThreadPool pool(2);
        std::fprintf(stderr, "quiet\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "^quiet\n$");
}

}  // namespace
}  // namespace weft
