#pragma once
// One export function per feature, all called from the single NB_MODULE in main.cpp.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void export_runtime(nb::module_& m);
void export_qmap(nb::module_& m);
void export_blockwise(nb::module_& m);
void export_muon(nb::module_& m);
void export_optim_table(nb::module_& m);
void export_step_plan(nb::module_& m);
void export_state_io(nb::module_& m);
void export_state_convert(nb::module_& m);
void export_ffi(nb::module_& m);
