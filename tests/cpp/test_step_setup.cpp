// The stateless part of a step (octopt/step_setup.hpp), which StepPlan and both XLA handlers use: layout sizes,
// per-tensor scalar state, the StepConfig and scalars of a step, and optax's updates.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <stdexcept>
#include <vector>

#include "harness.hpp"
#include "octopt/numerics/hparam_array.hpp"
#include "octopt/optim_table.hpp"
#include "octopt/step_plan.hpp"
#include "octopt/step_setup.hpp"

using namespace octopt;

OCTOPT_TEST(step_setup_slot_extent) {
  const SlotExtent f = slot_extent(32, 1000, 256);
  CHECK_EQ(f.values, std::size_t(1000));
  CHECK_EQ(f.value_bytes, std::size_t(4000));
  CHECK_EQ(f.absmax, std::size_t(0));
  const SlotExtent b = slot_extent(8, 1000, 256);
  CHECK_EQ(b.values, std::size_t(1000));
  CHECK_EQ(b.value_bytes, std::size_t(1000));
  CHECK_EQ(b.absmax, std::size_t(4));
  const SlotExtent n = slot_extent(4, 1001, 128);
  CHECK_EQ(n.values, std::size_t(501));
  CHECK_EQ(n.absmax, std::size_t(8));
  CHECK_THROWS(slot_extent(16, 10, 128), std::invalid_argument, {"32, 8 or 4", "16"});
}

OCTOPT_TEST(step_setup_plan_buffers_have_the_slot_extents) {
  StepPlan plan(OptimKind::adam);
  LayoutOptions lo;
  lo.bits = 4;
  lo.min_8bit_size = 0;
  const int g = plan.add_group(optim_def(OptimKind::adam).defaults, lo);
  std::vector<float> p(1001, 0.5f);
  const std::size_t i = plan.add_tensor(g, p.data(), DType::f32, {1001}, -1);
  for (const StateBuffers& b : plan.tensor_state(i)) {
    const SlotExtent e = slot_extent(b.slot.bits, 1001, b.slot.block_size);
    CHECK_EQ(b.count, e.values);
    CHECK_EQ(b.blocks, e.absmax);
  }
}

OCTOPT_TEST(step_setup_tensor_scalars) {
  const std::vector<TensorScalarDef> nadam = tensor_scalar_defs(OptimKind::nadam);
  CHECK_EQ(nadam.size(), std::size_t(1));
  CHECK_EQ(std::string(nadam[0].name), std::string("mu_product"));
  CHECK_EQ(nadam[0].initial, 1.0f);
  CHECK(StepTensor{}.mu_product == nadam[0].initial);  // what a StepPlan's tensors start from
  for (const OptimDef& d : optim_defs())
    if (d.kind != OptimKind::nadam) CHECK(tensor_scalar_defs(d.kind).empty());
  StepTensor t[2];
  const float in[2] = {0.25f, 0.5f};
  load_tensor_scalars(OptimKind::nadam, in, t, 2);
  CHECK_EQ(t[0].mu_product, 0.25f);
  CHECK_EQ(t[1].mu_product, 0.5f);
  t[1].mu_product = 0.125f;
  float out[2] = {0, 0};
  store_tensor_scalars(OptimKind::nadam, t, 2, out);
  CHECK_EQ(out[0], 0.25f);
  CHECK_EQ(out[1], 0.125f);
  store_tensor_scalars(OptimKind::adam, t, 2, nullptr);  // none: nothing is read or written
  load_tensor_scalars(OptimKind::adam, nullptr, t, 2);
}

// The per-tensor scalar's range and advance come from the rule (NAdam's mu_product), not from a kind test.
OCTOPT_TEST(step_setup_tensor_scalar_rule) {
  CHECK(optim_has_tensor_scalar(OptimKind::nadam) && !optim_has_tensor_scalar(OptimKind::adam) &&
        !optim_has_tensor_scalar(OptimKind::adan));
  CHECK_EQ(tensor_scalar_range(OptimKind::nadam), std::string("[0, 1]"));
  CHECK_EQ(tensor_scalar_range(OptimKind::adam), std::string(""));
  CHECK_EQ(tensor_scalar_problem(OptimKind::nadam, 2.0), std::string("mu_product must be in [0, 1]"));
  CHECK_EQ(tensor_scalar_problem(OptimKind::nadam, 0.5), std::string(""));
  CHECK_EQ(tensor_scalar_problem(OptimKind::adam, 2.0), std::string(""));
  HyperParams hp;
  hp.momentum_decay = 4e-3;
  SlotScalars s = compute_scalars(OptimKind::nadam, hp, 3);
  const float before = 0.5f;
  const float after = advance_tensor_scalar(OptimKind::nadam, s, before);
  CHECK_EQ(after, nadam_advance(before, s.nadam_mu));
  SlotScalars bound = compute_scalars(OptimKind::nadam, hp, 3);
  nadam_bind(bound, after);
  CHECK_EQ(s.nadam_grad, bound.nadam_grad);
  CHECK_EQ(s.nadam_mom, bound.nadam_mom);
  SlotScalars a = compute_scalars(OptimKind::adam, hp, 3);
  CHECK_EQ(advance_tensor_scalar(OptimKind::adam, a, 0.25f), 0.25f);
}

OCTOPT_TEST(step_setup_config_and_scalars) {
  StepOptions o;
  o.seed = 7;
  o.stochastic_state = true;
  const HyperParams hp = optim_def(OptimKind::nadam).defaults;
  const StepSetup s = setup_step(OptimKind::nadam, o, 12, &hp, 5);
  CHECK(s.cfg.kind == OptimKind::nadam);
  CHECK_EQ(s.cfg.step, std::int64_t(12));
  CHECK_EQ(s.cfg.seed, std::uint64_t(7));
  CHECK(s.cfg.stochastic_state && !s.cfg.stochastic_bf16);
  CHECK(s.cfg.codebooks == state_codebooks().data());
  CHECK_EQ(s.cfg.num_codebooks, int(state_codebooks().size()));
  const SlotScalars ref = scalars_for_step(OptimKind::nadam, hp, 5);
  CHECK_EQ(s.scalars.nadam_mu, ref.nadam_mu);
  CHECK_EQ(s.scalars.nadam_mu_next, ref.nadam_mu_next);
  CHECK_EQ(s.scalars.nadam_lr, ref.nadam_lr);
  CHECK_THROWS(setup_step(OptimKind::nadam, o, 1, &hp, 0, "f"), std::invalid_argument, {"f: ", ">= 1", "got 0"});
  o.percentile = 101.0f;
  CHECK_THROWS(setup_step(OptimKind::adam, o, 1), std::invalid_argument, {"'percentile'"});
}

OCTOPT_TEST(step_setup_hparams_from_values_refuses_non_finite) {
  std::vector<double> v(kNumHyperParams, 0.5);
  const HyperParams h = hparams_from_values(v.data(), 0, "f");
  CHECK_EQ(h.lr, 0.5);
  v[0] = std::numeric_limits<double>::quiet_NaN();
  const std::string name = hparam_array_names()[0];  // outlives the check's list of expected phrases
  CHECK_THROWS(hparams_from_values(v.data(), 0, "f"), std::invalid_argument,
               {"f: hyper-parameter '", name.c_str(), "' must be finite"});
}

OCTOPT_TEST(step_setup_params_to_updates) {
  float p_new[3] = {1.5f, -2.0f, 3.0f};
  const float p[3] = {1.0f, 1.0f, 3.0f};
  StepTensor t;
  t.param = p_new;
  t.n = 3;
  const void* in[1] = {p};
  params_to_updates(&t, in, 1);
  CHECK_EQ(p_new[0], 0.5f);
  CHECK_EQ(p_new[1], -3.0f);
  CHECK_EQ(p_new[2], 0.0f);
}
