// The CUDA entry points of a build without CUDA: the API is the same, every device call throws.
#include <stdexcept>

#include "octopt/blockwise.hpp"
#include "octopt/muon.hpp"
#include "octopt/optim.hpp"
#include "octopt/runtime.hpp"

namespace octopt::cuda {
namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("octopt was built without CUDA"); }
}  // namespace

bool built() { return false; }
bool available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "octopt was built without CUDA"; }
std::string runtime_version() { return ""; }
void* device_malloc(std::size_t, int) { no_cuda(); }
void device_free(void*, int) noexcept {}
void copy_to_device(void*, const void*, std::size_t, int) { no_cuda(); }
void copy_to_host(void*, const void*, std::size_t, int) { no_cuda(); }
void* managed_malloc(std::size_t, int) { no_cuda(); }
void managed_free(void*, int) noexcept {}
void prefetch_to_device(const void*, std::size_t, int, std::uintptr_t) { no_cuda(); }

void quantize_blockwise(const void*, DType, std::int64_t, const Codebook&, int, int, Rounding, std::uint64_t,
                        std::uint8_t*, float*, cudaStream_t, int) {
  no_cuda();
}

void dequantize_blockwise(const std::uint8_t*, const float*, std::int64_t, const Codebook&, int, int, DType, void*,
                          cudaStream_t, int) {
  no_cuda();
}

void muon_apply(void*, DType, const void*, DType, std::int64_t, double, double, cudaStream_t, int, const char*) {
  no_cuda();
}

struct DevicePlan::Impl {};

DevicePlan::DevicePlan(const StepConfig&, const StepTensor*, std::size_t, const int*, int, int, const char*) {
  no_cuda();
}
DevicePlan::~DevicePlan() = default;
int DevicePlan::device() const { return -1; }
std::size_t DevicePlan::size() const { return 0; }

void step(DevicePlan&, const StepArgs&, cudaStream_t) { no_cuda(); }
void upload(DevicePlan&, const StepArgs&, cudaStream_t) { no_cuda(); }
std::int64_t skipped_blocks(DevicePlan&, bool) { no_cuda(); }
void read_steps(DevicePlan&, std::int64_t*, std::int64_t*) { no_cuda(); }
void write_steps(DevicePlan&, const std::int64_t*, std::int64_t) { no_cuda(); }
std::vector<float> trust_ratios(DevicePlan&) { no_cuda(); }
void read_mu_products(DevicePlan&, float*) { no_cuda(); }
void write_mu_products(DevicePlan&, const float*) { no_cuda(); }
void begin_capture(cudaStream_t) { no_cuda(); }
std::pair<int, int> end_capture_count_nodes(cudaStream_t) { no_cuda(); }
bool stream_capturing(cudaStream_t) { return false; }

}  // namespace octopt::cuda
