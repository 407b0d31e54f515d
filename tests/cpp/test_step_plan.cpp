// The optimizer table and the core's StepPlan: layout rules, validation messages, groups, dtypes,
// counters and state files, through the C++ API alone.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/optimizer.hpp"
#include "octopt/qmap.hpp"
#include "octopt/state_io.hpp"

using namespace octopt;

namespace {

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return std::uint16_t(u >> 16);  // the test values are exact in bf16
}

std::string temp_path(const char* name) { return std::string("octopt_test_") + name + ".safetensors"; }

}  // namespace

OCTOPT_TEST(table_lists_every_kind_once) {
  for (const OptimDef& d : optim_defs()) {
    CHECK(&optim_def(d.kind) == &d);
    CHECK(&optim_def(d.name) == &d);
    CHECK(!d.slots.empty());
    CHECK(d.num_betas == 0 || d.num_betas == 2 || d.num_betas == 3);
    for (const char* key : d.options) {
      bool known = std::string(key) == "betas" || std::string(key) == "initial_accumulator_value";
      for (const HParamDef& h : hparam_defs()) known = known || std::string(key) == h.key;
      CHECK_AT(known, std::string(d.name) + " option " + key);
    }
  }
  CHECK_THROWS(optim_def("adamm"), std::invalid_argument, {"unknown optimizer 'adamm'"});
  const std::vector<std::string> names = hparam_array_names();
  CHECK_EQ(int(names.size()), kNumRealHParams);
  CHECK(names[0] == "learning_rate");
}

OCTOPT_TEST(format_real_reads_like_python) {
  CHECK_EQ(format_real(0.1), std::string("0.1"));
  CHECK_EQ(format_real(1.0), std::string("1.0"));
  CHECK_EQ(format_real(-0.5), std::string("-0.5"));
  CHECK_EQ(format_real(1e-5), std::string("1e-05"));
  CHECK_EQ(format_real(1e16), std::string("1e+16"));
  CHECK_EQ(format_real(123456.0), std::string("123456.0"));
  CHECK_EQ(format_real(0.0001), std::string("0.0001"));
}

OCTOPT_TEST(validation_names_the_key) {
  HyperParams hp;
  hp.lr = -0.1;
  CHECK_THROWS(validate_hparams(OptimKind::adam, hp, "Adam"), std::invalid_argument,
               {"Adam: 'lr' must be in >= 0.0, got -0.1"});
  hp = HyperParams{};
  hp.beta2 = 1.0;
  CHECK_THROWS(validate_hparams(OptimKind::adam, hp, "Adam"), std::invalid_argument,
               {"'betas[1]' must be in [0.0, 1.0), got 1.0"});
  hp = HyperParams{};
  hp.alpha = 1.0;
  CHECK_THROWS(validate_hparams(OptimKind::rmsprop, hp, "RMSprop"), std::invalid_argument, {"for RMSprop"});
  validate_hparams(OptimKind::ademamix, hp, "AdEMAMix");  // alpha is a mixing weight there
  LayoutOptions lo;
  lo.block_size = 100;
  CHECK_THROWS(validate_layout(lo, "Adam"), std::invalid_argument, {"'block_size' must be a power of two"});
}

OCTOPT_TEST(layout_follows_the_rules) {
  HyperParams hp;
  LayoutOptions lo;
  TensorLayout t = layout_tensor(OptimKind::adam, hp, lo, 4096);
  CHECK_EQ(t.block_size, 256);
  CHECK_EQ(int(t.slots.size()), 2);
  CHECK_EQ(t.slots[0].bits, 8);
  CHECK(t.slots[0].is_signed && !t.slots[1].is_signed);
  t = layout_tensor(OptimKind::adam, hp, lo, 4095);  // below min_8bit_size: 32-bit state
  CHECK_EQ(t.slots[0].bits, 32);
  lo.bits = 4;
  t = layout_tensor(OptimKind::adam, hp, lo, 1 << 20);
  CHECK_EQ(t.block_size, 128);
  CHECK(t.slots[0].stochastic);  // 4-bit codes round stochastically by default
  lo.bits = 8;
  lo.first_moment_bits = 4;
  t = layout_tensor(OptimKind::adam, hp, lo, 1 << 20);
  CHECK_EQ(t.slots[0].bits, 4);
  CHECK_EQ(t.slots[1].bits, 8);
  CHECK_EQ(int(layout_tensor(OptimKind::sgd, hp, LayoutOptions{}, 1 << 20).slots.size()), 0);
  hp.momentum = 0.9;
  hp.centered = true;
  CHECK_EQ(int(layout_tensor(OptimKind::rmsprop, hp, LayoutOptions{}, 1 << 20).slots.size()), 3);
}

// Two groups, a bf16 and a float32 parameter, a None gradient; the file round trip restores everything.
OCTOPT_TEST(step_plan_groups_dtypes_and_files) {
  const int n = 5000;
  std::vector<float> w(n, 0.5f), g(n, 0.25f);
  std::vector<std::uint16_t> wb(n, to_bf16(0.5f)), gb(n, to_bf16(0.25f));
  Optimizer opt(OptimKind::adamw, PlanOptions{});
  HyperParams hp;
  hp.lr = 1e-2;
  LayoutOptions lo8, lo32;
  lo32.bits = 32;
  CHECK_EQ(opt.add_group(hp, lo8), 0);
  hp.lr = 1e-3;
  CHECK_EQ(opt.add_group(hp, lo32), 1);
  CHECK_EQ(opt.add_param(0, w.data(), DType::f32, {50, 100}), std::size_t(0));
  CHECK_EQ(opt.add_param(1, wb.data(), DType::bf16, {n}), std::size_t(1));
  CHECK_THROWS(opt.add_param(0, w.data() + 10, DType::f32, {10}), std::invalid_argument, {"overlaps the memory"});
  CHECK(opt.state_bits(0) == (std::vector<int>{8, 8}));
  CHECK(opt.state_bits(1) == (std::vector<int>{32, 32}));
  CHECK_EQ(opt.step({g.data(), gb.data()}, {DType::f32, DType::bf16}), std::int64_t(0));
  CHECK(w[0] < 0.5f);
  CHECK_EQ(opt.step({g.data(), nullptr}, {DType::f32, DType::f32}), std::int64_t(0));
  CHECK_EQ(opt.param_step(0), std::int64_t(2));
  CHECK_EQ(opt.param_step(1), std::int64_t(1));
  CHECK_EQ(opt.global_step(), std::int64_t(2));
  opt.hparams(1).lr = -1.0;  // validated when the next step hands it to the core
  CHECK_THROWS(opt.step({g.data(), gb.data()}, {DType::f32, DType::bf16}), std::invalid_argument, {"'lr'"});
  opt.hparams(1).lr = 5e-4;

  const std::string path = temp_path("groups");
  opt.save(path);
  std::vector<float> w2 = w;
  std::vector<std::uint16_t> wb2 = wb;
  Optimizer resumed(OptimKind::adamw, PlanOptions{});
  hp.lr = 1.0;  // replaced by the file's
  resumed.add_group(hp, lo8);
  resumed.add_group(hp, lo32);
  resumed.add_param(0, w2.data(), DType::f32, {50, 100});
  resumed.add_param(1, wb2.data(), DType::bf16, {n});
  resumed.load(path);
  CHECK_EQ(resumed.param_step(1), std::int64_t(1));
  CHECK_EQ(resumed.hparams(0).lr, 1e-2);
  CHECK_EQ(resumed.hparams(1).lr, 5e-4);
  opt.step({g.data(), gb.data()}, {DType::f32, DType::bf16});
  resumed.step({g.data(), gb.data()}, {DType::f32, DType::bf16});
  CHECK(w == w2);
  CHECK(wb == wb2);

  Optimizer other(OptimKind::adamw, PlanOptions{});
  other.add_group(hp, lo8);
  other.add_param(0, w2.data(), DType::f32, {100, 50});
  CHECK_THROWS(other.load(path), std::invalid_argument, {"2 tensors but this optimizer has 1"});
  std::remove(path.c_str());
}

// LayoutOptions::state_map = fp8: 8-bit slots in the fp8 map (codebooks 4/5), refused with 4-bit state,
// named in the state file, restored by a load and refused by a plan of the dynamic maps.
OCTOPT_TEST(fp8_state_map_layout_codes_and_files) {
  LayoutOptions lo;
  lo.state_map = StateMap::fp8;
  validate_layout(lo, "Adam");
  HyperParams hp;
  TensorLayout t = layout_tensor(OptimKind::adam, hp, lo, 1 << 20);
  CHECK(t.slots[0].map == StateMap::fp8 && t.slots[1].map == StateMap::fp8);
  CHECK_EQ(state_map_index(8, true, StateMap::fp8), 4);
  CHECK_EQ(state_map_index(8, false, StateMap::fp8), 5);
  CHECK_EQ(std::string(state_map_name(8, false, StateMap::fp8)), std::string("fp8_e4m3"));
  CHECK_EQ(int(state_codebooks().size()), kNumStateMaps);
  const Codebook& u = state_codebooks()[5];
  CHECK(u.nonzero_floor >= 0 && u.values[u.nonzero_floor] > 0.0f);  // unsigned: keep_nonzero
  CHECK_EQ(state_codebooks()[4].nonzero_floor, -1);
  const std::vector<float> q = fp8_map();
  for (int k = 0; k < 256; ++k) CHECK_BITS_EQ(state_codebooks()[4].values[k], q[std::size_t(k)]);
  CHECK(parse_state_map("fp8", "f") == StateMap::fp8 && parse_state_map("dynamic", "f") == StateMap::dynamic);
  CHECK_THROWS(parse_state_map("e5m2", "Adam"), std::invalid_argument,
               {"Adam: 'state_map' must be 'dynamic' or 'fp8', got 'e5m2'"});
  lo.bits = 4;
  CHECK_THROWS(validate_layout(lo, "Adam"), std::invalid_argument,
               {"'state_map' 'fp8' is an 8-bit map, but 'bits' is 4"});
  lo.bits = 8;
  lo.first_moment_bits = 4;
  CHECK_THROWS(validate_layout(lo, "Adam"), std::invalid_argument, {"but 'first_moment_bits' is 4"});
  lo.first_moment_bits = 0;
  lo.bits = 32;
  validate_layout(lo, "Adam");  // nothing quantized: no effect
  lo.bits = 8;

  const int n = 5000;
  std::vector<float> w(n), g(n);
  for (int i = 0; i < n; ++i) w[std::size_t(i)] = float(i % 17) * 0.1f - 0.8f, g[std::size_t(i)] = float(i % 13) - 6.0f;
  Optimizer opt(OptimKind::adamw, PlanOptions{});
  hp.lr = 1e-2;
  opt.add_group(hp, lo);
  opt.add_param(0, w.data(), DType::f32, {n});
  opt.step({g.data()}, {DType::f32});
  const std::string path = temp_path("fp8");
  opt.save(path);
  const StateFile file = read_state_file(path);
  CHECK(file.metadata.at("octopt.tensors").find("\"map\":\"fp8_e4m3\"") != std::string::npos);
  CHECK(file.metadata.at("octopt.hparams").find("\"state_map\":\"fp8\"") != std::string::npos);
  std::vector<float> w2 = w;
  Optimizer resumed(OptimKind::adamw, PlanOptions{});
  resumed.add_group(hp, lo);
  resumed.add_param(0, w2.data(), DType::f32, {n});
  resumed.load(path);
  opt.step({g.data()}, {DType::f32});
  resumed.step({g.data()}, {DType::f32});
  CHECK(w == w2);
  Optimizer dynamic(OptimKind::adamw, PlanOptions{});
  dynamic.add_group(hp, LayoutOptions{});
  dynamic.add_param(0, w2.data(), DType::f32, {n});
  CHECK_THROWS(dynamic.load(path), std::invalid_argument, {"state_map=\"fp8\" in the file but \"dynamic\" here"});
  std::remove(path.c_str());
}

// Muon's core step writes a direction, not the parameter: the Optimizer front end refuses it (both constructors)
// rather than overwrite the parameter with the direction.
OCTOPT_TEST(optimizer_refuses_direction_steps) {
  CHECK_THROWS(Optimizer(OptimKind::muon), std::invalid_argument, {"Optimizer", "'kind'", "muon", "muon_apply"});
  CHECK_THROWS(Optimizer(OptimKind::muon, PlanOptions{}), std::invalid_argument, {"muon_apply"});
  Optimizer fine(OptimKind::adan);
  CHECK_EQ(fine.kind(), OptimKind::adan);
}
