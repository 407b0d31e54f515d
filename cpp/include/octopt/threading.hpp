#pragma once
// octopt's own CPU thread pool. Threads: OCTOPT_NUM_THREADS, else OMP_NUM_THREADS, else the
// number of CPUs this process may run on. Parallel regions started from different threads run at
// the same time, sharing the workers; a region started from inside another runs serially on the
// calling thread. On POSIX a child process forked at any time (even while regions run in other
// threads of the parent) starts with a clean pool and restarts its workers on its first region.
#include <cstdint>
#include <functional>

namespace octopt {

void set_num_threads(int n);  // n >= 1; takes effect for the next parallel region
int get_num_threads();

// Calls fn(begin, end) over a partition of [0, n) into ranges of at least `grain` items each (a
// few per thread, taken dynamically). fn must not depend on how [0, n) is cut: octopt's kernels
// work per block or per fixed chunk, so results never depend on the thread count or schedule.
// Exceptions thrown by fn are rethrown on the calling thread.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn);

namespace detail {
// For tests of the pool: the most top-level parallel regions that ran at the same time since the
// last reset (reset=true restarts the count from the regions running now), and how many regions
// with workers were in flight in other threads when this process (or its parent) last forked.
int max_concurrent_regions(bool reset = false);
int regions_at_last_fork();
}  // namespace detail

}  // namespace octopt
