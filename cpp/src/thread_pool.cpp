#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "octopt/threading.hpp"

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define OCTOPT_HAVE_FORK 1
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

struct InsideRegion {
  InsideRegion() { t_inside_region = true; }
  ~InsideRegion() { t_inside_region = false; }
};

using RangeFn = std::function<void(std::int64_t, std::int64_t)>;

// One parallel region in flight. It lives on its caller's stack; the caller runs its tasks too, so
// a region finishes even when every worker is busy with other regions (no waiting on each other).
struct Job {
  Job(const RangeFn& f, std::int64_t n_, std::int64_t tasks_, int max_helpers_)
      : fn(f), n(n_), tasks(tasks_), max_helpers(max_helpers_) {}
  bool has_tasks() const { return next_task.load(std::memory_order_relaxed) < tasks; }

  const RangeFn& fn;
  const std::int64_t n, tasks;
  const int max_helpers;  // workers that may run its tasks at once
  std::atomic<std::int64_t> next_task{0};
  int helpers = 0;                       // workers inside it now (Pool::mutex_)
  std::exception_ptr error;              // the first exception thrown (Pool::mutex_)
  std::condition_variable helpers_done;  // helpers reached 0 after the caller ran out of tasks
};

// Workers sleep on a condition variable between regions, so an idle pool costs no CPU and does
// not compete with torch's or NumPy's own threads; only for kSpinMicros after a region they poll
// for the next one first, since waking a sleeping thread took 0.2-0.3 ms on a virtual machine (a
// 0.6 ms region on two threads ran in 0.55 ms instead of 0.32 without the poll).
constexpr int kSpinMicros = 100;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
//
// Locks, always taken in this order: resize_mutex_ (starting and stopping workers, short except
// while joining workers that finish their current region) before mutex_ (the list of regions and
// their bookkeeping, never held while fn runs).
class Pool {
 public:
  Pool() { jobs_.reserve(16); }
  ~Pool() { stop_workers(); }

  void set_threads(int n) {
    threads_.store(n);
    // A worker cannot join itself: from inside a region the next region resizes the pool instead.
    if (t_inside_region) return;
    std::lock_guard<std::mutex> resize(resize_mutex_);
    if (!workers_.empty() && workers_.size() != std::size_t(n - 1)) stop_workers();
  }

  int threads() const { return threads_.load(); }

  void run(std::int64_t n, std::int64_t grain, const RangeFn& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    if (t_inside_region) {
      fn(0, n);
      return;
    }
    RegionCount count(*this);
    const int threads = threads_.load();
    // floor(n / grain) tasks at most, so that every task gets at least `grain` items; several tasks
    // per thread, taken dynamically, so that a thread descheduled by the OS (or busy with another
    // library's threads, or another region) does not hold the whole region back.
    const std::int64_t tasks = std::min<std::int64_t>(std::int64_t(threads) * 8, std::max<std::int64_t>(1, n / grain));
    const std::int64_t parts = std::min<std::int64_t>(threads, tasks);
    if (parts <= 1) {
      InsideRegion inside;
      fn(0, n);
      return;
    }
    ensure_workers(threads);
    Job job(fn, n, tasks, int(parts - 1));
    {
      std::lock_guard<std::mutex> lk(mutex_);
      jobs_.push_back(&job);
      posted_.fetch_add(1, std::memory_order_release);
    }
    for (std::int64_t i = 1; i < parts; ++i) wake_.notify_one();
    run_tasks(job);
    std::unique_lock<std::mutex> lk(mutex_);
    // (not found only in a child forked from inside fn, which dropped the parent's regions)
    const auto it = std::find(jobs_.begin(), jobs_.end(), &job);
    if (it != jobs_.end()) jobs_.erase(it);
    job.helpers_done.wait(lk, [&] { return job.helpers == 0; });
    if (job.error) std::rethrow_exception(job.error);
  }

  int max_concurrent_regions(bool reset) {
    if (reset) max_regions_.store(active_regions_.load());
    return max_regions_.load();
  }
  int regions_at_last_fork() const { return regions_at_fork_; }

#if defined(OCTOPT_HAVE_FORK)
  // fork() copies only the calling thread. Holding both locks across it means the child never sees
  // them held by a thread it does not have, and the region list is not half-updated.
  void before_fork() {
    resize_mutex_.lock();
    mutex_.lock();
    regions_at_fork_ = int(jobs_.size());
  }
  void after_fork_parent() {
    mutex_.unlock();
    resize_mutex_.unlock();
  }
  void after_fork_child() {
    // Fresh objects, not unlock(): the parent's waiting workers are recorded inside the condition
    // variable, and destroying or signalling it would wait for threads the child does not have.
    new (&resize_mutex_) std::mutex();
    new (&mutex_) std::mutex();
    new (&wake_) std::condition_variable();
    // The parent's threads cannot be joined or detached here; their handles are kept (never
    // destroyed, which would terminate) and new workers start with the child's first region.
    for (auto& t : workers_) lost_workers_.push_back(std::move(t));
    workers_.clear();
    // Regions of the parent's other threads: their callers do not exist in the child. (A child
    // forked from inside fn must not wait for helpers it does not have; it does not get the
    // ranges they were running either, so forking from inside a region is not supported.)
    for (Job* j : jobs_) j->helpers = 0;
    jobs_.clear();
    stopping_ = false;
    active_regions_.store(0);
  }
#endif

 private:
  struct RegionCount {
    explicit RegionCount(Pool& p) : pool(p) {
      const int now = pool.active_regions_.fetch_add(1) + 1;
      int seen = pool.max_regions_.load();
      while (now > seen && !pool.max_regions_.compare_exchange_weak(seen, now)) {
      }
    }
    ~RegionCount() { pool.active_regions_.fetch_sub(1); }
    Pool& pool;
  };

  void run_tasks(Job& job) {
    InsideRegion inside;
    try {
      for (std::int64_t t = job.next_task.fetch_add(1); t < job.tasks; t = job.next_task.fetch_add(1)) {
        const std::int64_t begin = job.n * t / job.tasks;
        const std::int64_t end = job.n * (t + 1) / job.tasks;
        if (begin < end) job.fn(begin, end);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mutex_);
      if (!job.error) job.error = std::current_exception();
    }
  }

  // The region with tasks left and the fewest helpers (the oldest on a tie): concurrent regions
  // share the workers instead of the first one taking them all.
  Job* pick() const {
    Job* best = nullptr;
    for (Job* j : jobs_)
      if (j->helpers < j->max_helpers && j->has_tasks() && (!best || j->helpers < best->helpers)) best = j;
    return best;
  }

  void worker() {
    std::unique_lock<std::mutex> lk(mutex_);
    for (;;) {
      Job* job = nullptr;
      if (!stopping_ && !(job = pick())) {
        const std::uint64_t seen = posted_.load(std::memory_order_acquire);
        lk.unlock();
        poll_for_region(seen);
        lk.lock();
      }
      wake_.wait(lk, [&] { return stopping_ || (job = pick()) != nullptr; });
      if (stopping_) return;
      ++job->helpers;
      lk.unlock();
      run_tasks(*job);
      lk.lock();
      // Notified under the lock: once it sees 0 the caller may return and destroy the job.
      if (--job->helpers == 0) job->helpers_done.notify_one();
    }
  }

  // Returns when a region was posted after `seen` (or stop_workers ran), or after kSpinMicros.
  void poll_for_region(std::uint64_t seen) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (unsigned i = 1; posted_.load(std::memory_order_acquire) == seen; ++i) {
      cpu_relax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return;
    }
  }

  void ensure_workers(int threads) {
    const std::size_t want = std::size_t(threads - 1);
    std::lock_guard<std::mutex> resize(resize_mutex_);
    if (workers_.size() == want) return;
    stop_workers();
    for (std::size_t i = 0; i < want; ++i) workers_.emplace_back([this] { worker(); });
  }

  // Workers inside a region finish their share of it first; its caller runs whatever is left.
  void stop_workers() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stopping_ = true;
      posted_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    std::lock_guard<std::mutex> lk(mutex_);
    stopping_ = false;
  }

  std::mutex resize_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;       // resize_mutex_
  std::vector<std::thread> lost_workers_;  // handles of a parent's workers, in a forked child
  std::vector<Job*> jobs_;                 // regions with workers, in start order (mutex_)
  bool stopping_ = false;                  // mutex_
  std::atomic<std::uint64_t> posted_{0};   // regions posted and stops, for the workers' poll
  std::atomic<int> threads_{default_threads()};
  std::atomic<int> active_regions_{0}, max_regions_{0};
  int regions_at_fork_ = 0;
};

#if defined(OCTOPT_HAVE_FORK)
Pool& pool();
void before_fork() { pool().before_fork(); }
void after_fork_parent() { pool().after_fork_parent(); }
void after_fork_child() { pool().after_fork_child(); }
#endif

Pool& pool() {
  // Intentionally leaked: worker threads must not be joined during static destruction, which
  // may run after the Python interpreter (or a host program) has torn down its own state.
  static Pool* p = [] {
    Pool* q = new Pool();
#if defined(OCTOPT_HAVE_FORK)
    if (int rc = pthread_atfork(&before_fork, &after_fork_parent, &after_fork_child))
      throw std::runtime_error("octopt thread pool: pthread_atfork failed with error " + std::to_string(rc));
#endif
    return q;
  }();
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

namespace detail {
int max_concurrent_regions(bool reset) { return pool().max_concurrent_regions(reset); }
int regions_at_last_fork() { return pool().regions_at_last_fork(); }
}  // namespace detail

}  // namespace octopt
