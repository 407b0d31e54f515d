#include "exports.hpp"

NB_MODULE(_octopt, m) {
  m.doc() =
      "octopt native core: quantization maps, block-wise quantization, runtime information, state files, XLA FFI "
      "handlers";
  export_runtime(m);
  export_qmap(m);
  export_blockwise(m);
  export_muon(m);
  export_optim_table(m);
  export_step_plan(m);
  export_state_io(m);
  export_state_convert(m);
  export_ffi(m);
}
