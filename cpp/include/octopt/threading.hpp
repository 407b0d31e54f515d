#pragma once
// octopt's own CPU thread pool. Threads: OCTOPT_NUM_THREADS, else OMP_NUM_THREADS, else the
// number of CPUs this process may run on. One parallel region runs at a time; a region started
// from inside another runs serially on the calling thread.
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

}  // namespace octopt
