#pragma once
// What this build of octopt is and what the machine under it offers.
#include <cstddef>
#include <cstdint>
#include <string>

namespace octopt {

std::string version();
std::string compiler();    // the C++ compiler that built the core
std::string simd_level();  // instruction set of the CPU kernels in use: baseline, avx2, avx512, avx512vbmi or neon
// Forces the CPU kernels ("baseline", "avx2", "avx512", "avx512vbmi", "neon"; "" = the start-up choice: OCTOPT_ISA
// in the environment when set, else the best available). All variants give bit-identical results.
void set_simd_level(const std::string& name);
std::string cpu_features();  // relevant features the CPU reports
// "off" when the core was compiled without floating-point contraction (cmake/numerics.cmake), as
// every target that compiles octopt's numerics must be.
std::string fp_contract();

namespace cuda {
bool built();                      // compiled with CUDA kernels
bool available();                  // built, and a CUDA device is usable now (never throws)
int device_count();                // 0 when unavailable
std::string unavailable_reason();  // why available() is false ("" when it is true), never throws
std::string runtime_version();     // "" without CUDA
// Device memory and synchronous copies (construction, save, load; never inside a step). Each runs
// on `device` and restores the caller's current device. Without CUDA they throw.
void* device_malloc(std::size_t bytes, int device);
void device_free(void* p, int device) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes, int device);
void copy_to_host(void* dst, const void* src, std::size_t bytes, int device);
// Managed (unified) memory, for paged optimizer state: its pages may be evicted to the host under
// memory pressure and migrate back on access. prefetch_to_device moves them to `device` ahead of a
// step, enqueued on `stream` (a cudaStream_t as an integer; 0: the legacy default stream); a device
// without concurrent managed access migrates on demand instead and the call does nothing.
void* managed_malloc(std::size_t bytes, int device);
void managed_free(void* p, int device) noexcept;
void prefetch_to_device(const void* p, std::size_t bytes, int device, std::uintptr_t stream);
}  // namespace cuda

}  // namespace octopt
