#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "octopt/threading.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace octopt {
namespace {

int env_threads(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  return (end && *end == '\0' && v > 0 && v < 4096) ? int(v) : 0;
}

int default_threads() {
  if (int n = env_threads("OCTOPT_NUM_THREADS")) return n;
  if (int n = env_threads("OMP_NUM_THREADS")) return n;
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

thread_local bool t_inside_region = false;

// Workers sleep on a condition variable between regions, so an idle pool costs no CPU and does
// not compete with torch's or NumPy's own threads.
class Pool {
 public:
  ~Pool() { stop_workers(); }

  void set_threads(int n) {
    std::lock_guard<std::mutex> region(region_mutex_);
    if (n == threads_) return;
    stop_workers();
    threads_ = n;
  }

  // No lock: the count is read from inside parallel regions too (where region_mutex_ is held).
  int threads() const { return threads_.load(); }

  void run(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    if (t_inside_region) {
      fn(0, n);
      return;
    }
    std::lock_guard<std::mutex> region(region_mutex_);
    // floor(n / grain) tasks at most, so that every task gets at least `grain` items; several tasks
    // per thread, taken dynamically, so that a thread descheduled by the OS (or busy with another
    // library's threads) does not hold the whole region back.
    const std::int64_t tasks = std::min<std::int64_t>(std::int64_t(threads_) * 8, std::max<std::int64_t>(1, n / grain));
    const std::int64_t parts = std::min<std::int64_t>(threads_, tasks);
    if (parts <= 1) {
      t_inside_region = true;
      try {
        fn(0, n);
      } catch (...) {
        t_inside_region = false;
        throw;
      }
      t_inside_region = false;
      return;
    }
    start_workers();
    {
      std::lock_guard<std::mutex> lk(mutex_);
      job_ = &fn;
      job_n_ = n;
      job_parts_ = parts;
      job_tasks_ = tasks;
      next_task_.store(0);
      pending_ = int(parts - 1);
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_part(0);
    std::unique_lock<std::mutex> lk(mutex_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_part(std::int64_t /*part*/) {
    t_inside_region = true;
    try {
      for (std::int64_t t = next_task_.fetch_add(1); t < job_tasks_; t = next_task_.fetch_add(1)) {
        const std::int64_t begin = job_n_ * t / job_tasks_;
        const std::int64_t end = job_n_ * (t + 1) / job_tasks_;
        if (begin < end) (*job_)(begin, end);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_inside_region = false;
  }

  // `seen` starts at the generation current when the worker is created: a worker (re)started
  // after earlier regions must wait for the next job, not run the finished one.
  void worker(int index, std::uint64_t seen) {
    for (;;) {
      std::int64_t parts;
      {
        std::unique_lock<std::mutex> lk(mutex_);
        wake_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        parts = job_parts_;
      }
      if (index < parts) {
        run_part(index);
        std::lock_guard<std::mutex> lk(mutex_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  void start_workers() {
    if (!workers_.empty()) return;
    stopping_ = false;
    const std::uint64_t current = generation_;  // only changed under region_mutex_, which the caller holds
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i, current] { worker(i, current); });
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex region_mutex_;  // one parallel region at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t job_n_ = 0, job_parts_ = 0, job_tasks_ = 0;
  std::atomic<std::int64_t> next_task_{0};
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::atomic<int> threads_{default_threads()};
};

Pool& pool() {
  // Intentionally leaked: worker threads must not be joined during static destruction, which
  // may run after the Python interpreter (or a host program) has torn down its own state.
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: argument 'n' must be >= 1, got " + std::to_string(n));
  pool().set_threads(n);
}

int get_num_threads() { return pool().threads(); }

void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  pool().run(n, grain, fn);
}

}  // namespace octopt
