// The CPU thread pool: coverage of [0, n), exceptions, nesting, thread-count settings.
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "octopt/threading.hpp"

using namespace octopt;

namespace {

// Runs body on another thread; a deadlock ends the whole program with a failure instead of hanging it.
template <class F>
void with_deadline(const char* what, F body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
    octopt_test::abort_run(__FILE__, __LINE__, std::string("deadlock: ") + what);
  done.get();
}

struct Restore {
  int saved = get_num_threads();
  ~Restore() { set_num_threads(saved); }
};

struct Ranges {
  std::mutex mutex;
  std::vector<std::pair<std::int64_t, std::int64_t>> list;
  void add(std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lk(mutex);
    list.emplace_back(b, e);
  }
};

// parallel_for(n, grain) calls fn on non-empty, disjoint ranges covering [0, n), at most
// get_num_threads() of them, each of at least `grain` items (one range when n < grain).
void check_cover(std::int64_t n, std::int64_t grain) {
  const std::string at =
      "n " + std::to_string(n) + ", grain " + std::to_string(grain) + ", threads " + std::to_string(get_num_threads());
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  Ranges ranges;
  parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    ranges.add(b, e);
    for (std::int64_t i = b; i < e; ++i) hits[std::size_t(i)].fetch_add(1);
  });
  bool once = true;
  for (auto& h : hits) once = once && h.load() == 1;
  CHECK_AT(once, at);
  // a few ranges per thread (taken dynamically), never more than 8 per thread
  CHECK_AT(ranges.list.size() <= 8 * std::size_t(std::max(get_num_threads(), 1)), at);
  if (n == 0) CHECK_EQ_AT(ranges.list.size(), std::size_t(0), at);
  for (const auto& [b, e] : ranges.list) {
    CHECK_AT(b < e, at);
    CHECK_AT(e - b >= std::min(grain, n), at + ", range [" + std::to_string(b) + ", " + std::to_string(e) + ")");
  }
}

struct CustomError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

OCTOPT_TEST(parallel_for_covers_every_index_once) {
  Restore restore;
  with_deadline("coverage", [] {
    for (int threads : {1, 2, 3, 5}) {
      set_num_threads(threads);
      for (std::int64_t n : {0, 1, 2, 3, 5, 7, 16, 100, 1000, 4097, 100003})
        for (std::int64_t grain : {std::int64_t(1), std::int64_t(2), std::int64_t(3), std::int64_t(7), std::int64_t(64),
                                   std::int64_t(1000), n, n + 1})
          check_cover(n, grain);
      check_cover(10, 0);  // a grain below 1 counts as 1
      check_cover(10, -5);
    }
  });
}

OCTOPT_TEST(thread_count_setting) {
  Restore restore;
  CHECK(get_num_threads() >= 1);
  set_num_threads(3);
  CHECK_EQ(get_num_threads(), 3);
  set_num_threads(1);
  CHECK_EQ(get_num_threads(), 1);
  CHECK_THROWS(set_num_threads(0), std::invalid_argument, {"set_num_threads", "'n'", "0"});
  CHECK_THROWS(set_num_threads(-2), std::invalid_argument, {"set_num_threads", "'n'", "-2"});
  CHECK_EQ(get_num_threads(), 1);
}

OCTOPT_TEST(exceptions_reach_the_caller) {
  Restore restore;
  with_deadline("exceptions", [] {
    for (int threads : {1, 2, 4}) {
      set_num_threads(threads);
      const std::string at = "threads " + std::to_string(threads);
      // thrown by the range that holds index 0 (the caller's own), by the last range, by all ranges
      CHECK_THROWS(parallel_for(1000, 1,
                                [](std::int64_t b, std::int64_t) {
                                  if (b == 0) throw CustomError("first range failed");
                                }),
                   CustomError, {"first range failed"});
      CHECK_THROWS(parallel_for(1000, 1,
                                [](std::int64_t, std::int64_t e) {
                                  if (e == 1000) throw CustomError("last range failed");
                                }),
                   CustomError, {"last range failed"});
      CHECK_THROWS(parallel_for(1000, 1, [](std::int64_t, std::int64_t) { throw std::out_of_range("every range"); }),
                   std::out_of_range, {"every range"});
      // and the pool still works afterwards
      check_cover(1000, 1);
    }
  });
}

OCTOPT_TEST(nested_regions_run_serially_on_the_calling_thread) {
  Restore restore;
  with_deadline("nested parallel_for", [] {
    for (int threads : {1, 2, 4}) {
      set_num_threads(threads);
      std::vector<std::atomic<int>> hits(8 * 100);
      std::atomic<int> inner_calls{0}, foreign_thread{0}, bad_ranges{0};
      parallel_for(8, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t o = b; o < e; ++o) {
          const auto me = std::this_thread::get_id();
          parallel_for(100, 1, [&](std::int64_t ib, std::int64_t ie) {
            inner_calls.fetch_add(1);
            if (std::this_thread::get_id() != me) foreign_thread.fetch_add(1);
            if (ib != 0 || ie != 100) bad_ranges.fetch_add(1);
            for (std::int64_t i = ib; i < ie; ++i) hits[std::size_t(o * 100 + i)].fetch_add(1);
          });
        }
      });
      bool once = true;
      for (auto& h : hits) once = once && h.load() == 1;
      CHECK(once);
      CHECK_EQ(inner_calls.load(), 8);
      CHECK_EQ(foreign_thread.load(), 0);
      CHECK_EQ(bad_ranges.load(), 0);
      // an exception inside a nested region propagates out of both
      CHECK_THROWS(parallel_for(4, 1,
                                [](std::int64_t, std::int64_t) {
                                  parallel_for(10, 1, [](std::int64_t, std::int64_t) { throw CustomError("inner"); });
                                }),
                   CustomError, {"inner"});
      check_cover(1000, 1);
    }
  });
}

OCTOPT_TEST(thread_count_is_readable_inside_a_region) {
  Restore restore;
  set_num_threads(2);
  with_deadline("get_num_threads inside parallel_for", [] {
    std::atomic<int> seen{0};
    parallel_for(100, 1, [&](std::int64_t, std::int64_t) { seen.store(get_num_threads()); });
    CHECK_EQ(seen.load(), 2);
  });
}

OCTOPT_TEST(concurrent_callers_each_get_their_own_region) {
  Restore restore;
  set_num_threads(2);
  with_deadline("concurrent callers", [] {
    std::atomic<int> failures{0};
    auto caller = [&] {
      for (int k = 0; k < 200; ++k) {
        const std::int64_t n = 1000 + k;
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        parallel_for(n, 16, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[std::size_t(i)].fetch_add(1);
        });
        for (auto& h : hits)
          if (h.load() != 1) failures.fetch_add(1);
      }
    };
    std::thread t1(caller), t2(caller);
    caller();
    t1.join();
    t2.join();
    CHECK_EQ(failures.load(), 0);
  });
}
