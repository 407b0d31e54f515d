// Export and import of a StepPlan's slots (state_convert.hpp) through its public state buffers; a plan on a
// CUDA device is read and written through host copies (never during a step).
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "octopt/optim_table.hpp"
#include "octopt/runtime.hpp"
#include "octopt/state_convert.hpp"
#include "octopt/step_plan.hpp"

namespace octopt {
namespace {

StateBuffers slot_buffers(const StepPlan& plan, std::size_t tensor, int slot, const char* fn) {
  if (tensor >= plan.num_tensors())
    throw std::out_of_range(std::string(fn) + ": tensor " + std::to_string(tensor) + " does not exist (the plan has " +
                            std::to_string(plan.num_tensors()) + ")");
  for (const StateBuffers& b : plan.tensor_state(tensor))
    if (b.slot.index == slot) return b;
  throw std::invalid_argument(std::string(fn) + ": tensor " + std::to_string(tensor) + " has no state slot " +
                              std::to_string(slot));
}

void read(void* dst, const void* src, std::size_t bytes, int device) {
  if (!bytes) return;
  if (device < 0)
    std::memcpy(dst, src, bytes);
  else
    cuda::copy_to_host(dst, src, bytes, device);
}

void write(void* dst, const void* src, std::size_t bytes, int device) {
  if (!bytes) return;
  if (device < 0)
    std::memcpy(dst, src, bytes);
  else
    cuda::copy_to_device(dst, src, bytes, device);
}

std::size_t value_bytes(const StateBuffers& b) { return b.count * (b.slot.bits == 32 ? 4 : 1); }

}  // namespace

SlotForm plan_slot_form(const StepPlan& plan, std::size_t tensor, int slot, const char* fn) {
  const SlotLayout s = slot_buffers(plan, tensor, slot, fn).slot;
  SlotForm f;
  f.bits = s.bits;
  if (s.bits != 32) {
    f.block_size = s.block_size;
    f.map = state_map_values(s.bits, s.is_signed, s.map);
  }
  return f;
}

void export_slot(StepPlan& plan, std::size_t tensor, int slot, const SlotForm& to, const SlotTarget& dst,
                 const SlotNames& names) {
  const StateBuffers b = slot_buffers(plan, tensor, slot, names.where.c_str());
  const SlotForm from = plan_slot_form(plan, tensor, slot, names.where.c_str());
  std::vector<unsigned char> values(value_bytes(b));
  std::vector<float> absmax(b.slot.bits == 32 ? 0 : b.blocks);
  read(values.data(), b.data, values.size(), plan.device());
  read(absmax.data(), b.absmax, absmax.size() * sizeof(float), plan.device());
  SlotSource src;
  src.values = values.data();
  src.elem = b.slot.bits == 32 ? SlotElem::f32 : SlotElem::u8;
  src.count = std::int64_t(b.count);
  src.absmax = b.slot.bits == 32 ? nullptr : absmax.data();
  src.absmax_count = std::int64_t(absmax.size());
  convert_slot(plan.tensor_numel(tensor), from, src, to, dst, names);
}

void import_slot(StepPlan& plan, std::size_t tensor, int slot, const SlotForm& from, const SlotSource& src,
                 const SlotNames& names) {
  const StateBuffers b = slot_buffers(plan, tensor, slot, names.where.c_str());
  const SlotForm to = plan_slot_form(plan, tensor, slot, names.where.c_str());
  std::vector<unsigned char> values(value_bytes(b));
  std::vector<float> absmax(b.slot.bits == 32 ? 0 : b.blocks);
  SlotTarget dst{values.data(), std::int64_t(b.count), absmax.data(), std::int64_t(absmax.size())};
  convert_slot(plan.tensor_numel(tensor), from, src, to, dst, names);  // throws before anything changes
  write(b.data, values.data(), values.size(), plan.device());
  write(b.absmax, absmax.data(), absmax.size() * sizeof(float), plan.device());
}

}  // namespace octopt
