#pragma once
// A tiny test harness: OCTOPT_TEST registers a function, CHECK* count passes and report failures
// with file:line, run_all() runs every test (or those whose name contains a filter) and prints
// "N passed, N failed" over all checks.
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace octopt_test {

struct TestCase {
  const char* name;
  void (*fn)();
};

struct Stats {
  std::int64_t passed = 0, failed = 0;
  std::int64_t failed_in_test = 0;  // to cap the messages one test prints
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

inline Stats& stats() {
  static Stats s;
  return s;
}

struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};

constexpr std::int64_t kMaxMessagesPerTest = 20;

inline void fail(const char* file, int line, const std::string& what) {
  Stats& s = stats();
  ++s.failed;
  if (++s.failed_in_test <= kMaxMessagesPerTest) std::cout << file << ":" << line << ": FAILED: " << what << "\n";
  if (s.failed_in_test == kMaxMessagesPerTest)
    std::cout << "  (further failures of this test are counted, not shown)\n";
}

inline void pass() { ++stats().passed; }

// Floats print with their bit pattern, so that two values that print alike still differ visibly.
template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    os.precision(9);
    os << v << " (0x" << std::hex << u << ")";
  } else if constexpr (std::is_same_v<T, double>) {
    os.precision(17);
    os << v;
  } else if constexpr (std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::int8_t>) {
    os << int(v);
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(v);
  } else {
    os << v;
  }
  return os.str();
}

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Ends the program at once with the failure counted (for a deadlock: the stuck threads cannot be joined).
[[noreturn]] inline void abort_run(const char* file, int line, const std::string& what) {
  fail(file, line, what);
  std::cout << stats().passed << " passed, " << stats().failed << " failed" << std::endl;
  std::_Exit(1);
}

inline int run_all(const std::string& filter) {
  Stats& s = stats();
  int tests_run = 0;
  for (const TestCase& t : registry()) {
    if (!filter.empty() && std::string(t.name).find(filter) == std::string::npos) continue;
    ++tests_run;
    s.failed_in_test = 0;
    const std::int64_t before = s.passed;
    try {
      t.fn();
    } catch (const std::exception& e) {
      fail(t.name, 0, std::string("uncaught exception: ") + e.what());
    } catch (...) {
      fail(t.name, 0, "uncaught non-standard exception");
    }
    std::cout << (s.failed_in_test ? "[FAIL] " : "[ ok ] ") << t.name << " (" << (s.passed - before) << " passed, "
              << s.failed_in_test << " failed)\n";
  }
  if (tests_run == 0) fail("run_all", 0, "no test matches the filter '" + filter + "'");
  std::cout << tests_run << " tests\n" << s.passed << " passed, " << s.failed << " failed" << std::endl;
  return s.failed == 0 ? 0 : 1;
}

}  // namespace octopt_test

// Failure paths are compiled as cold out-of-line code: the checks in hot loops stay small.
#if defined(__GNUC__)
#define OCTOPT_TEST_COLD __attribute__((cold, noinline))
#else
#define OCTOPT_TEST_COLD
#endif

#define OCTOPT_TEST_CAT2(a, b) a##b
#define OCTOPT_TEST_CAT(a, b) OCTOPT_TEST_CAT2(a, b)
#define OCTOPT_TEST(name)                                                               \
  static void name();                                                                   \
  static const ::octopt_test::Registrar OCTOPT_TEST_CAT(registrar_, name){#name, name}; \
  static void name()

#define CHECK(cond)                                                \
  do {                                                             \
    if (static_cast<bool>(cond))                                   \
      ::octopt_test::pass();                                       \
    else                                                           \
      ::octopt_test::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

// Like CHECK, with a note (e.g. the input) added to the failure message; note is only evaluated
// on failure.
#define CHECK_AT(cond, note)                                                                   \
  do {                                                                                         \
    if (static_cast<bool>(cond))                                                               \
      ::octopt_test::pass();                                                                   \
    else                                                                                       \
      [&]() OCTOPT_TEST_COLD {                                                                 \
        ::octopt_test::fail(__FILE__, __LINE__, std::string("CHECK(" #cond ") at ") + (note)); \
      }();                                                                                     \
  } while (0)

#define CHECK_EQ(a, b) CHECK_EQ_AT(a, b, std::string("this check"))

// Like CHECK_EQ, with a note added to the failure message.
#define CHECK_EQ_AT(a, b, note)                                                             \
  do {                                                                                      \
    const auto& octopt_a_ = (a);                                                            \
    const auto& octopt_b_ = (b);                                                            \
    if (octopt_a_ == octopt_b_)                                                             \
      ::octopt_test::pass();                                                                \
    else                                                                                    \
      [&]() OCTOPT_TEST_COLD {                                                              \
        ::octopt_test::fail(__FILE__, __LINE__,                                             \
                            "CHECK_EQ(" #a ", " #b "): " + ::octopt_test::show(octopt_a_) + \
                                " != " + ::octopt_test::show(octopt_b_) + " at " + (note)); \
      }();                                                                                  \
  } while (0)

// Float equality of bit patterns (so -0.0 != 0.0 and a NaN equals the same NaN).
#define CHECK_BITS_EQ(a, b)                                                                      \
  do {                                                                                           \
    const float octopt_a_ = (a);                                                                 \
    const float octopt_b_ = (b);                                                                 \
    if (::octopt_test::bits_of(octopt_a_) == ::octopt_test::bits_of(octopt_b_))                  \
      ::octopt_test::pass();                                                                     \
    else                                                                                         \
      [&]() OCTOPT_TEST_COLD {                                                                   \
        ::octopt_test::fail(__FILE__, __LINE__,                                                  \
                            "CHECK_BITS_EQ(" #a ", " #b "): " + ::octopt_test::show(octopt_a_) + \
                                " != " + ::octopt_test::show(octopt_b_));                        \
      }();                                                                                       \
  } while (0)

// CHECK_THROWS(expr, ExceptionType, {"substring", ...}): expr throws ExceptionType (or a subclass)
// whose what() contains every substring.
#define CHECK_THROWS(expr, Exc, ...)                                                                \
  do {                                                                                              \
    std::string octopt_err_;                                                                        \
    try {                                                                                           \
      (void)(expr);                                                                                 \
      octopt_err_ = "did not throw";                                                                \
    } catch (const Exc& e) {                                                                        \
      const std::string octopt_msg_ = e.what();                                                     \
      for (const char* octopt_s_ : std::vector<const char*> __VA_ARGS__)                            \
        if (octopt_msg_.find(octopt_s_) == std::string::npos)                                       \
          octopt_err_ += std::string("message lacks '") + octopt_s_ + "'; ";                        \
      if (!octopt_err_.empty()) octopt_err_ += "message: " + octopt_msg_;                           \
    } catch (const std::exception& e) {                                                             \
      octopt_err_ = std::string("threw another exception type: ") + e.what();                       \
    } catch (...) {                                                                                 \
      octopt_err_ = "threw a non-standard exception";                                               \
    }                                                                                               \
    if (octopt_err_.empty())                                                                        \
      ::octopt_test::pass();                                                                        \
    else                                                                                            \
      ::octopt_test::fail(__FILE__, __LINE__, "CHECK_THROWS(" #expr ", " #Exc "): " + octopt_err_); \
  } while (0)
