// Graph capture: whether a stream is being captured, and (test aid) what a captured step recorded
// (kernel nodes and all nodes of the CUDA graph).
#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "check.cuh"
#include "octopt/optim.hpp"

namespace octopt::cuda {

using detail::check;

void begin_capture(cudaStream_t stream) {
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin_capture: cudaStreamBeginCapture");
}

std::pair<int, int> end_capture_count_nodes(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(stream, &graph), "end_capture_count_nodes: cudaStreamEndCapture");
  std::size_t n = 0;
  cudaError_t err = cudaGraphGetNodes(graph, nullptr, &n);
  std::vector<cudaGraphNode_t> nodes(n);
  if (err == cudaSuccess && n > 0) err = cudaGraphGetNodes(graph, nodes.data(), &n);
  int kernels = 0;
  for (std::size_t i = 0; i < n && err == cudaSuccess; ++i) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    err = cudaGraphNodeGetType(nodes[i], &type);
    kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
  }
  (void)cudaGraphDestroy(graph);
  check(err, "end_capture_count_nodes: cudaGraphGetNodes");
  return {kernels, int(n)};
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err == cudaErrorStreamCaptureImplicit || err == cudaErrorStreamCaptureUnsupported) {
    (void)cudaGetLastError();
    return true;  // the legacy stream while another stream captures in global mode
  }
  check(err, "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace octopt::cuda
