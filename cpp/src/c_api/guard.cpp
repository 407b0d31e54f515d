// Exceptions -> status codes and the thread-local message (c.h, "error model").
#include "guard.hpp"

#include <new>
#include <system_error>

#include "octopt/state_io.hpp"

namespace octopt::capi {
namespace {
thread_local std::string last_error;
}

int fail(int status, const std::string& message) noexcept {
  try {
    last_error = message;
  } catch (...) {  // no memory for the message: keep the status
  }
  return status;
}

int status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const NullError& e) {
    return fail(OCTOPT_ERR_NULL, e.what());
  } catch (const TypeError& e) {
    return fail(OCTOPT_ERR_TYPE, e.what());
  } catch (const FormatError& e) {
    return fail(OCTOPT_ERR_FORMAT, e.what());
  } catch (const FileError& e) {
    // as str() of the OSError Python raises: "[Errno 2] read_state_file: cannot open ...: No such file ..."
    return fail(OCTOPT_ERR_FILE, "[Errno " + std::to_string(e.code().value()) + "] " + e.what());
  } catch (const std::invalid_argument& e) {
    return fail(OCTOPT_ERR_VALUE, e.what());
  } catch (const std::out_of_range& e) {
    return fail(OCTOPT_ERR_VALUE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(OCTOPT_ERR_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(OCTOPT_ERR_STATE, e.what());
  } catch (...) {
    return fail(OCTOPT_ERR_STATE, "octopt: unknown internal error");
  }
}

}  // namespace octopt::capi

extern "C" const char* octopt_last_error(void) { return octopt::capi::last_error.c_str(); }
