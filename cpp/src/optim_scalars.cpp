// Host-side, double-precision preparation of a step: bias corrections and schedules.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>

#include "octopt/optim.hpp"

namespace octopt {
namespace {
// In OptimKind order.
constexpr const char* kNames[] = {"adam", "adamw", "sgd",  "rmsprop", "adagrad", "lion",
                                  "ademamix", "lamb", "lars", "radam", "nadam"};
static_assert(sizeof kNames / sizeof *kNames == std::size_t(kNumOptimKinds), "one name per OptimKind");
}

const char* optim_name(OptimKind kind) {
  if (int(kind) >= kNumOptimKinds)
    throw std::invalid_argument("optim_name: unknown optimizer kind " + std::to_string(int(kind)));
  return kNames[int(kind)];
}

OptimKind parse_optim(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (int k = 0; k < int(sizeof kNames / sizeof *kNames); ++k)
    if (lower == kNames[k]) return OptimKind(k);
  throw std::invalid_argument("unknown optimizer '" + name + "'");
}

int optim_num_states(OptimKind kind) { return optim_state_slots(kind); }

SlotScalars compute_scalars(OptimKind kind, const HyperParams& hp, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("compute_scalars: step must be >= 1");
  return scalars_for_step(kind, hp, step);
}

}  // namespace octopt
