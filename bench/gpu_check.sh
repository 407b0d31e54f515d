#!/usr/bin/env bash
# First contact with a lent GPU machine (one H200, 16 cores, no internet; torch, CuPy, JAX with its CUDA
# plugin, optax, pytest, scikit-build-core, nanobind, CMake, nvcc, compute-sanitizer): one call that
# builds octopt for sm_90, proves the GPU is usable, runs one fused step under compute-sanitizer
# (memcheck, racecheck, synccheck), the probes of bench/gpu_probe.py (CPU-vs-GPU bytes, two plans on one
# device, edge cases, CUDA graphs with upload, two GPUs, a paged step, the XLA handler), the GPU test
# suite, the nccl distributed tests and the one-GPU memory benchmark, and measures the 8-bit step's
# bandwidth against a device-to-device copy. Each section runs under its own timeout and under one
# overall budget (GPU_CHECK_BUDGET, 470 s), so the whole call stays under 8 minutes; typically 5-6.
#
# Ends with a summary table (the rows of docs/cuda.md's verification table). Exit status: 0 when every
# section passed or was skipped for a reason of the machine (one GPU: no second-GPU checks); 2 when no GPU
# is visible (nvidia-smi lists none); 3 when a GPU is visible but octopt cannot use it (e.g. a driver
# older than the CUDA runtime octopt links statically: every GPU test would otherwise skip and pass);
# 1 when any section failed or timed out. The log and the summary go to $OUT (gpu_check.log,
# gpu_check_summary.md; the benchmarks' own files too) when OUT is set, else to a temporary folder.
#
# GPU_CHECK_SITE=DIR: use an octopt already installed in DIR instead of building (the tests of this
# script use it); CMAKE_BUILD_PARALLEL_LEVEL defaults to the core count.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-470}
OUTDIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_check.log"
SUMMARY="$OUTDIR/gpu_check_summary.md"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
PY=${PYTHON:-python3}
# JAX takes 75% of the GPU's memory when its GPU backend starts; torch, CuPy, octopt's tables and the
# other test workers share the GPU here.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
command -v "$PY" >/dev/null 2>&1 || PY=python

ROWS=()
FAILED=0
SECTION_OUT=/dev/null
row() { # name result seconds detail
  ROWS+=("| $1 | $2 | $3 | ${4//|//} |")
  [[ $2 == FAIL || $2 == TIMEOUT ]] && FAILED=1
  return 0
}

summary() {
  {
    echo
    echo "## gpu_check summary ($(date -u +%FT%TZ), $(($(date +%s) - T0)) s)"
    echo
    echo "| check | result | s | detail |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${ROWS[@]}"
  } | tee "$SUMMARY"
  echo "log: $LOG"
}

finish() { # exit status
  summary
  exit "$1"
}

# section NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, what is left of the budget); the row's
# detail is the last line of its output that starts with PASS/SKIP/FAIL, else the last line. A command
# that exits 77 (a probe that cannot run on this machine) or pytest's 5 (nothing collected) is SKIP.
section() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - T0)))
  if ((left < 10)); then
    row "$name" SKIP 0 "no time left in the ${BUDGET} s budget"
    return 0
  fi
  ((limit > left)) && limit=$left
  echo
  echo "== $name (limit ${limit} s, at $(($(date +%s) - T0)) s)"
  local start out rc
  start=$(date +%s)
  out=$(mktemp)
  SECTION_OUT=$out # the caller may read it until the next section
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local secs=$(($(date +%s) - start)) detail result
  detail=$(grep -E '^(PASS|SKIP|FAIL) |SUMMARY:' "$out" | tail -1)
  [[ -z $detail ]] && detail=$(grep -v '^\s*$' "$out" | tail -1)
  case $rc in
    0) result=PASS
      # a pytest run in which everything was skipped ran nothing
      [[ $detail =~ ^[0-9]+\ skipped && $detail != *passed* ]] && result=SKIP ;;
    77 | 5) result=SKIP ;;
    124 | 137) result=TIMEOUT detail="over ${limit} s; $detail" ;;
    *) result=FAIL ;;
  esac
  row "$name" "$result" "$secs" "${detail:0:160}"
  return "$rc"
}

# -- 1. versions, and is a GPU visible at all ---------------------------------------------------
echo "== versions"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "nvidia-smi not found: no GPU driver on this machine"
  row "GPU visible (nvidia-smi)" FAIL 0 "nvidia-smi not found: no NVIDIA driver"
  finish 2
fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
DRIVER=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "nvidia-smi: $GPUS GPU(s): $DRIVER"
nvcc --version 2>/dev/null | tail -2
compute-sanitizer --version 2>/dev/null | head -2
"$PY" - <<'EOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "cupy", "jax", "jaxlib", "optax", "numpy"):
    try:
        m = importlib.import_module(name)
        extra = f" (CUDA {m.version.cuda}, sees GPU: {m.cuda.is_available()})" if name == "torch" else ""
        print(name, getattr(m, "__version__", "?") + extra)
    except Exception as e:  # noqa: BLE001
        print(name, "missing:", type(e).__name__, e)
EOF
if ((GPUS == 0)); then
  row "GPU visible (nvidia-smi)" FAIL 0 "nvidia-smi lists no GPU"
  finish 2
fi
row "GPU visible (nvidia-smi)" PASS 0 "$GPUS x $DRIVER"

# -- 2. build (sm_90 only: the lent machine is an H200) ------------------------------------------
if [[ -n ${GPU_CHECK_SITE:-} ]]; then
  SITE=$GPU_CHECK_SITE
  row "build (sm_90)" SKIP 0 "GPU_CHECK_SITE=$SITE"
else
  SITE=$(mktemp -d)
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  if ! section "build (sm_90)" 180 "$PY" -m pip install --no-build-isolation --no-deps --target "$SITE" . -q \
    -Cbuild-dir=build/gpu -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90; then
    echo "BUILD FAILED"
    finish 1
  fi
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

# -- 3. usable: a visible GPU that octopt cannot use is a hard failure ---------------------------
echo
echo "== octopt on the GPU"
USABLE=$("$PY" -c 'import octopt; i = octopt.info()
print("yes" if i["cuda_available"] else "no", "| octopt", i["version"], "runtime", i["cuda_runtime"], "devices", i["cuda_devices"], "|", i.get("cuda_unavailable_reason"))' 2>&1 | tail -1)
echo "$USABLE"
if [[ $USABLE != yes* ]]; then
  echo "GPU VISIBLE BUT UNUSABLE: nvidia-smi lists $GPUS GPU(s) (driver: $DRIVER) but octopt.cuda_available() is False"
  echo "(the static CUDA runtime needs a driver at least as new as the toolkit it was built with: CUDA 13 needs R580+)"
  row "octopt can use the GPU" FAIL 0 "visible but unusable: ${USABLE:0:140}"
  finish 3
fi
row "octopt can use the GPU" PASS 0 "${USABLE#yes | }"
export OCTOPT_REQUIRE_GPU=1 # from here on a GPU test may not skip for want of a usable GPU

# -- 4. one fused step under compute-sanitizer ----------------------------------------------------
# API errors are left to octopt's own checks (torch probes some calls that may fail by design); the
# sanitizers judge the kernels: memory accesses, shared-memory races, barrier use.
# --launch-timeout 0: python imports torch before it first touches CUDA, later than the default 10 s.
SAN="compute-sanitizer --error-exitcode 9 --target-processes all --report-api-errors no --launch-timeout 0"
if command -v compute-sanitizer >/dev/null 2>&1; then
  section "memcheck: Adam 8-bit step, LAMB, percentile, quantize" 60 $SAN --tool memcheck "$PY" bench/gpu_probe.py adam_step
  section "racecheck: the same kernels" 60 $SAN --tool racecheck "$PY" bench/gpu_probe.py adam_step
  section "synccheck: the same kernels" 45 $SAN --tool synccheck "$PY" bench/gpu_probe.py adam_step
else
  row "compute-sanitizer" FAIL 0 "compute-sanitizer not on PATH"
fi

# -- 5. probes, in one process (one torch import); a row per probe -------------------------------
PROBES=(parity two_plans edge_cases graph multi_gpu paged xla)
declare -A PROBE_ROW=(
  [parity]="CPU-GPU bytes: Adam 8/4-bit (4097, 70001), AdEMAMix bs 4096, LAMB/LARS 1M"
  [two_plans]="two plans on one device (shared-memory limit)"
  [edge_cases]="empty tensor, None gradient, NaN blocks"
  [graph]="side stream, graph capture, replay, upload(lr), replay"
  [multi_gpu]="quantize on cuda:1, no context on GPU 0 (2 GPUs)"
  [paged]="paged optimizer step"
  [xla]="JAX/XLA handler on the GPU"
)
section "probes (bench/gpu_probe.py)" 150 "$PY" bench/gpu_probe.py "${PROBES[@]}"
for p in "${PROBES[@]}"; do
  line=$(grep -E "^(PASS|SKIP|FAIL) $p: " "$SECTION_OUT" | tail -1)
  if [[ -z $line ]]; then
    row "${PROBE_ROW[$p]}" FAIL 0 "no result (the probe process ended before it)"
  else
    row "${PROBE_ROW[$p]}" "${line%% *}" - "${line#* }"
  fi
done

# -- 6. the GPU test suite, nccl, memory, bandwidth ------------------------------------------------
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rfEs --timeout=60)
# ~790 tests, most of them a GPU step against its CPU twin: 4 workers share the GPU and the 16 cores
XDIST=()
"$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 4)
section "GPU test suite (tests/cuda, torch and jax CUDA tests)" 120 "${PYTEST[@]}" ${XDIST[@]+"${XDIST[@]}"} tests/cuda \
  tests/torch/test_cuda.py tests/jax/test_cuda.py
section "nccl distributed tests (2+ GPUs)" 40 "${PYTEST[@]}" tests/distributed -k nccl
section "memory benchmark (GPT-2 small, one GPU)" 50 "$PY" bench/memory.py --device cuda --ranks 1 --steps 3 \
  --out "$OUTDIR/memory.json"
section "8-bit step bandwidth vs device copy" 45 env OUT="$OUTDIR" "$PY" bench/gpu_step.py

echo
echo "== done in $(($(date +%s) - T0)) s"
finish "$FAILED"
