#pragma once
// Umbrella header of the octopt C++ API.
#include "blockwise.hpp"
#include "dtype.hpp"
#include "muon.hpp"
#include "optim_table.hpp"
#include "optimizer.hpp"
#include "qmap.hpp"
#include "runtime.hpp"
#include "state_io.hpp"
#include "step_plan.hpp"
#include "step_setup.hpp"
#include "threading.hpp"
#include "version.hpp"
