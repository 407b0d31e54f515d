// Host-side, double-precision preparation of a step: bias corrections and schedules.
#include <cmath>
#include <stdexcept>
#include <string>

#include "octopt/optim.hpp"
#include "octopt/optim_table.hpp"

namespace octopt {
// The names are the optimizer table's (optim_table.hpp).
const char* optim_name(OptimKind kind) { return optim_def(kind).name; }

OptimKind parse_optim(const std::string& name) { return optim_def(name).kind; }

int optim_num_states(OptimKind kind) { return optim_state_slots(kind); }

SlotScalars compute_scalars(OptimKind kind, const HyperParams& hp, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("compute_scalars: step must be >= 1");
  return scalars_for_step(kind, hp, step);
}

}  // namespace octopt
