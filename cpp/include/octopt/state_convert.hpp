#pragma once
// Export and import of one state slot in any layout: float values, or codes of any bits, block size and map
// (4-bit codes packed two per byte or one per byte, blocks restarting at shard boundaries), re-quantized where
// the layouts differ. Every state-dict format (octopt's, bitsandbytes', torchao's, DCP's) is a key map over
// these functions: all checks of incoming state and all layout arithmetic live here (docs/state_convert.md).
// The arrays are host memory; a plan on a CUDA device is read and written through host copies.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace octopt {

class StepPlan;

// How one slot's state is laid out.
struct SlotForm {
  int bits = 32;           // 32: one float value per element; 8 or 4: codes and one absmax per block
  int block_size = 0;      // 8/4: elements per block; 0: one scale for the whole slot (bitsandbytes' block_wise=False)
  std::vector<float> map;  // 8/4: the 2^bits values the codes index
  bool packed = true;      // 4 bits: two codes per byte (low nibble = even element); false: one code per byte
  // Quantized in segments (the shards of a sharded tensor): segment k covers the global elements
  // [segments[k], segments[k + 1]) and has blocks of its own from its start; absmax holds the blocks of
  // every segment, segment after segment (more values may follow). Empty: one segment, the slot itself.
  std::vector<std::int64_t> segments;
  std::int64_t offset = 0;  // with segments: the global index of the slot's first element
};

// Element types an incoming array may have (values: float at 32 bits, u8 codes at 8/4; absmax: f32).
enum class SlotElem : std::uint8_t { f32, f64, f16, bf16, u8, other };
const char* slot_elem_name(SlotElem e);  // "float32", ...; "other" for the rest

// A slot in some form, in host memory the caller owns.
struct SlotSource {
  const void* values = nullptr;
  SlotElem elem = SlotElem::f32;
  std::int64_t count = 0;
  const char* elem_name = nullptr;  // the dtype's name in messages where elem is `other`
  const float* absmax = nullptr;    // null: none given
  SlotElem absmax_elem = SlotElem::f32;
  std::int64_t absmax_count = 0;
  const char* absmax_elem_name = nullptr;
};

// Where a slot is written: float32 values (bits 32) or code bytes, and absmax (bits 8/4).
struct SlotTarget {
  void* values = nullptr;
  std::int64_t count = 0;
  float* absmax = nullptr;
  std::int64_t absmax_count = 0;
};

// Names for messages: "<where>: '<values>' must hold ...".
struct SlotNames {
  std::string where;   // e.g. "load_state_dict: the state of parameter 3"
  std::string values;  // the key of the values or codes, e.g. "exp_avg" or "state1"
  std::string absmax;  // the key of the absmax, e.g. "exp_avg_absmax" or "absmax1"
  std::string map;     // the key of the map, e.g. "qmap1"; empty: "<values> map"
};

// Elements of `values` and of `absmax` that n elements take in `form` (absmax: 0 at 32 bits).
std::int64_t slot_values_count(std::int64_t n, const SlotForm& form);
std::int64_t slot_absmax_count(std::int64_t n, const SlotForm& form);

// Throws std::invalid_argument naming `names` unless `form` is a form of n elements (bits 32, 8 or 4; a
// power-of-two block size in [32, 4096], or 0 for one scale; a valid map; ascending segments that hold
// [offset, offset + n)). `source`: forms only an import reads (one scale, segments) are allowed.
void check_slot_form(std::int64_t n, const SlotForm& form, bool source, const SlotNames& names);

// Writes the n elements of `src` (in form `from`) into `dst` in form `to`. Equal forms (bits, block size,
// map) are copied as they are (4-bit codes repacked where only the packing differs); others pass through
// float32: dequantized with the source's map and blocks, quantized (nearest codes) on the target's; a
// segmented source keeps every target block that is one of its blocks. Validates everything before
// writing: the forms, the element types and sizes of src and dst, that no block scale is negative (NaN and
// Inf ones pass: a step that made a NaN stores them), and that values to be quantized are finite. Throws
// std::invalid_argument naming `names` (the state-dict formats raise ValueError for all of it).
void convert_slot(std::int64_t n, const SlotForm& from, const SlotSource& src, const SlotForm& to,
                  const SlotTarget& dst, const SlotNames& names);

// The bits of codes that take `code_bytes` bytes for n elements (8: n, 4: ceil(n / 2), 8 first when both fit);
// throws naming `names` when neither fits.
int infer_code_bits(std::int64_t n, std::int64_t code_bytes, const SlotNames& names);
// The first of `candidates` whose blocks over n elements number `blocks`; throws naming `names` when none does.
int infer_block_size(std::int64_t n, std::int64_t blocks, const std::vector<int>& candidates, const SlotNames& names);

// 4-bit codes between one per byte and two per byte (low nibble = even element; an odd count's last high
// nibble is 0). `packed` holds ceil(n / 2) bytes, `codes` n.
void pack_codes4(const std::uint8_t* codes, std::int64_t n, std::uint8_t* packed);
void unpack_codes4(const std::uint8_t* packed, std::int64_t n, std::uint8_t* codes);

// -- a plan's slots (slot: OptimDef::slots' index, one the tensor uses) --
// The form the plan stores slot `slot` of tensor `tensor` in.
SlotForm plan_slot_form(const StepPlan& plan, std::size_t tensor, int slot, const char* fn = "plan_slot_form");
// Writes the slot, in form `to`, into `dst`.
void export_slot(StepPlan& plan, std::size_t tensor, int slot, const SlotForm& to, const SlotTarget& dst,
                 const SlotNames& names);
// Replaces the slot with `src` given in form `from`, converted to the plan's form; nothing changes unless
// everything is valid.
void import_slot(StepPlan& plan, std::size_t tensor, int slot, const SlotForm& from, const SlotSource& src,
                 const SlotNames& names);

}  // namespace octopt
