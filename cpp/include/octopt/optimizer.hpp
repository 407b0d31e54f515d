#pragma once
// A self-contained optimizer for C++ programs: it holds float32 parameters by pointer, owns its
// (8-bit, 4-bit or 32-bit) state, steps them with octopt::step on the CPU and saves/loads the same
// state files as Python's octopt.Optimizer.save/load (docs/format.md section 5), so a run can move
// between the two. Example: examples/cpp/least_squares.cpp; guide: docs/cpp.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "optim.hpp"

namespace octopt {

class Optimizer {
 public:
  // kind and hyper-parameters of the (single) param group. bits: 8, 4 or 32; block_size: a power of
  // two in [32, 4096], or 0 for the default (256 for 8-bit and 32-bit state, 128 for 4-bit); tensors
  // with fewer than min_8bit_size elements keep 32-bit state (as in Python). seed keys stochastic
  // rounding, which 4-bit states use (as Python's default stochastic_rounding=None).
  // Throws std::invalid_argument naming the bad argument.
  explicit Optimizer(OptimKind kind, HyperParams hp = {}, int bits = 8, int block_size = 0,
                     std::int64_t min_8bit_size = 4096, std::uint64_t seed = 0);

  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // Adagrad's initial sum of squares for parameters added from now on (Python's
  // initial_accumulator_value; >= 0).
  void set_initial_accumulator_value(double value);

  // Registers a float32 parameter of n elements, updated in place by step(); `data` must stay valid
  // and must not overlap another parameter. shape: for the state file ({} means {n}); its product
  // must be n. Returns the parameter's index.
  std::size_t add_param(float* data, std::int64_t n, std::vector<std::int64_t> shape = {});

  // One step of every parameter: grads[i] holds the gradient of parameter i (n_i float32 values), or
  // is null to leave parameter i unchanged this time. Returns the number of blocks left unchanged
  // because their gradient held NaN/Inf.
  std::int64_t step(const std::vector<const float*>& grads);

  // Writes the state to `path` atomically, in the format of Python's Optimizer.save.
  void save(const std::string& path) const;
  // Reads a file written by save() here or by Python's Optimizer.save. The whole file and its match
  // with this optimizer (kind, parameter count, sizes, shapes, slots, bits, block sizes, maps, array
  // sizes) are checked before anything changes; then the state, the step counts and the
  // hyper-parameters stored in the file replace the current ones. Throws std::invalid_argument
  // saying what differs, octopt::FormatError (a corrupt file) or octopt::FileError.
  void load(const std::string& path);

  std::size_t state_bytes() const;  // exact bytes of codes, absmax and 32-bit state
  OptimKind kind() const { return kind_; }
  const HyperParams& hparams() const { return hp_; }
  HyperParams& hparams() { return hp_; }  // e.g. a learning-rate schedule; checked by step()
  std::size_t num_params() const { return tensors_.size(); }
  std::int64_t global_step() const { return global_step_; }
  std::int64_t param_step(std::size_t i) const;  // steps parameter i has taken
  // Bits of each used state slot of parameter i (32, 8 or 4), in slot order.
  std::vector<int> state_bits(std::size_t i) const;

 private:
  struct Slot {
    int index = 0;        // s0, s1, s2 of octopt::step
    const char* name = "";  // state name in files: exp_avg, exp_avg_sq, ...
    bool is_signed = true;
    int bits = 32;
    std::vector<float> values;          // bits 32
    std::vector<std::uint8_t> codes;    // bits 8 / 4 (two codes per byte, low nibble first)
    std::vector<float> absmax;          // bits 8 / 4, one per block
  };
  struct Tensor {
    float* param = nullptr;
    std::int64_t n = 0;
    std::vector<std::int64_t> shape;
    int block_size = 256;
    std::int64_t step = 0;  // steps this tensor has taken
    std::vector<Slot> slots;
  };

  OptimKind kind_;
  HyperParams hp_;
  int bits_;
  int block_size_;  // 0: automatic
  std::int64_t min_8bit_size_;
  std::uint64_t seed_;
  double initial_accumulator_value_ = 0.0;
  std::int64_t global_step_ = 0;
  std::vector<Codebook> codebooks_;  // indexed as Python's _layout.CODEBOOKS
  std::vector<Tensor> tensors_;
  std::vector<StepTensor> slots_;  // rebuilt per step from tensors_ (keeps moves safe)
  StepWorkspace ws_;
};

}  // namespace octopt
