#pragma once
// octopt's own CPU thread pool. Threads: OCTOPT_NUM_THREADS, else OMP_NUM_THREADS, else the
// number of CPUs this process may run on. One parallel region runs at a time; a region started
// from inside another runs serially on the calling thread.
#include <cstdint>
#include <functional>

namespace octopt {

void set_num_threads(int n);  // n >= 1; takes effect for the next parallel region
int get_num_threads();

// Calls fn(begin, end) over a static partition of [0, n) into at most get_num_threads() ranges
// of at least `grain` items each. Exceptions thrown by fn are rethrown on the calling thread.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace octopt
