#pragma once
// The C ABI's error model (c.h): every entry point runs its body through guard(), which turns the
// core's exceptions into a status code and this thread's message, so that no exception crosses the
// boundary. The code follows the exception the Python layer raises for the same mistake.
#include <stdexcept>
#include <string>

#include "octopt/c.h"

namespace octopt::capi {

// A wrong type or dtype code: Python raises TypeError for the same mistake.
struct TypeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// A required pointer argument was NULL.
struct NullError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Records `message` as this thread's last error and returns `status`.
int fail(int status, const std::string& message) noexcept;
// The status of the exception being handled (call inside a catch block), with its message recorded.
int status_of_current_exception() noexcept;

template <class F>
int guard(F&& body) noexcept {
  try {
    body();
    return OCTOPT_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

// Throws NullError "fn: argument 'arg' is NULL" when p is null.
inline void require(const void* p, const char* fn, const char* arg) {
  if (!p) throw NullError(std::string(fn) + ": argument '" + arg + "' is NULL");
}

}  // namespace octopt::capi
