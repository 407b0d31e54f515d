// Where the plan puts large host state buffers within a page (cpp/src/state_placement.hpp), and what it tells
// an allocator about each buffer (StateRequest).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "harness.hpp"
#include "octopt/step_plan.hpp"
#include "state_placement.hpp"

using namespace octopt;

namespace {

int page_of(const void* p) { return int(reinterpret_cast<std::uintptr_t>(p) % placement::kPage); }

int page_distance(int a, int b) {
  const int d = ((a - b) % placement::kPage + placement::kPage) % placement::kPage;
  return d < placement::kPage - d ? d : placement::kPage - d;
}

// Records every request, then allocates through the default allocator.
class Recorder final : public StateAllocator {
 public:
  std::vector<StateRequest> allocated, released;
  void* allocate(const StateRequest& r) override {
    allocated.push_back(r);
    return inner_->allocate(r);
  }
  void deallocate(void* p, const StateRequest& r) noexcept override {
    released.push_back(r);
    inner_->deallocate(p, r);
  }

 private:
  std::shared_ptr<StateAllocator> inner_ = default_state_allocator();
};

}  // namespace

OCTOPT_TEST(placement_takes_the_farthest_offset) {
  CHECK_EQ(placement::farthest({}), 0);
  CHECK_EQ(placement::farthest({0}), 2048);
  CHECK_EQ(placement::farthest({0, 2048}), 1024);
  CHECK_EQ(placement::farthest({16, 2048, 1024}), 3072);
  CHECK_EQ(placement::farthest({4000}), 1920);  // the page is a circle; multiples of 64, the lowest on a tie
}

OCTOPT_TEST(placement_allocates_at_the_offset) {
  for (int offset : {0, 64, 1344, 4032}) {
    const std::size_t bytes = 3 * 4096 + 5;
    auto* p = static_cast<unsigned char*>(placement::alloc_at_offset(bytes, offset));
    CHECK(p != nullptr);
    CHECK_EQ(page_of(p), offset);
    std::memset(p, 0xab, bytes);  // the whole range is ours (the sanitizer builds check it)
    placement::free_at_offset(p);
  }
}

OCTOPT_TEST(plan_places_large_host_state_away_from_the_parameter) {
  const std::int64_t n = (std::int64_t(1) << 20) + 1;  // 4 MiB of float32 state, 1 MiB + 1 of 8-bit codes
  std::vector<float> w(std::size_t(n), 0.5f), g(std::size_t(n), 0.25f);
  for (int bits : {32, 8}) {
    StepPlan plan(OptimKind::adam);
    LayoutOptions lo;
    lo.bits = bits;
    plan.add_group(HyperParams{}, lo);
    plan.add_tensor(0, w.data(), DType::f32, {n}, -1);
    std::vector<int> seen = {page_of(w.data())};
    for (const StateBuffers& b : plan.tensor_state(0)) {
      const int at = page_of(b.data);
      CHECK_EQ(at % 64, 0);
      for (int other : seen) CHECK_AT(page_distance(at, other) >= placement::kPage / 4, std::to_string(bits));
      seen.push_back(at);
    }
    CHECK_EQ(int(seen.size()), 3);
    const void* grads[] = {g.data()};
    const DType dts[] = {DType::f32};
    CHECK_EQ(plan.step(grads, dts), std::int64_t(0));
    CHECK(w[0] < 0.5f && w[std::size_t(n) - 1] == w[0]);
  }
}

OCTOPT_TEST(allocator_is_told_tensor_slot_and_buffer) {
  auto rec = std::make_shared<Recorder>();
  std::vector<float> big(std::size_t(1) << 20, 1.0f), small(5000, 1.0f);
  {
    StepPlan plan(OptimKind::adam, PlanOptions{}, rec);
    plan.add_group(HyperParams{}, LayoutOptions{});  // 8-bit moments
    plan.add_tensor(0, small.data(), DType::f32, {5000}, -1);
    plan.add_tensor(0, big.data(), DType::f32, {std::int64_t(big.size())}, -1);
    CHECK_EQ(rec->allocated.size(), std::size_t(8));  // two tensors x two slots x (codes, absmax)
    for (std::size_t k = 0; k < rec->allocated.size(); ++k) {
      const StateRequest& r = rec->allocated[k];
      CHECK_EQ(r.tensor, k / 4);
      CHECK_EQ(r.slot, int(k / 2 % 2));
      CHECK(r.buffer == (k % 2 ? StateBufferKind::absmax : StateBufferKind::values));
      CHECK(r.elem == (k % 2 ? StateElem::f32 : StateElem::u8));
      CHECK_EQ(r.device, -1);
      // only the big tensor's codes (1 MiB each) are placed; absmax (16 KiB) and the small tensor's are not
      const bool placed = r.tensor == 1 && r.buffer == StateBufferKind::values;
      CHECK_EQ(r.page_offset >= 0, placed);
      CHECK_EQ(r.count, r.tensor == 0 ? std::size_t(k % 2 ? 20 : 5000) : std::size_t(k % 2 ? 4096 : 1 << 20));
    }
  }
  CHECK_EQ(rec->released.size(), rec->allocated.size());  // every buffer back, with its own request
  for (const StateRequest& r : rec->released) {
    bool found = false;
    for (const StateRequest& a : rec->allocated)
      found = found || (a.tensor == r.tensor && a.slot == r.slot && a.buffer == r.buffer && a.count == r.count &&
                        a.page_offset == r.page_offset);
    CHECK(found);
  }
}
