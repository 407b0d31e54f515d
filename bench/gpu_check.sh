#!/usr/bin/env bash
# One prepared check for a lent GPU machine (torch, CuPy, JAX, nanobind, scikit-build-core, CMake,
# nvcc; no internet): build and install octopt, run the GPU tests (octopt.optax's CUDA handler too:
# the machine has jax with its CUDA plugin and optax; octopt.torch on CUDA tensors and, where the machine
# has 2 GPUs, the nccl variants of the distributed tests), then benchmark the fused 8-bit Adam step and the
# memory of a GPT-2-small training step (torch.optim.AdamW vs octopt AdamW8bit/4bit, one GPU).
# Typically under 6 minutes; the timeouts cap it at 8 min 15 s (build 140 s, GPU tests 90 s, optax
# CUDA tests 55 s, torch CUDA tests 60 s, distributed 30 s, step benchmark 60 s, memory benchmark 60 s);
# the tables go to $OUT/gpu_step.txt and $OUT/memory.json when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
SITE=$(mktemp -d)
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
echo "== build ($(date +%T))"
if ! timeout 140 pip install --no-build-isolation --no-deps --target "$SITE" . -q -Cbuild-dir=build/gpu; then
  echo "BUILD FAILED"; exit 1
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
python -c "import octopt; print('octopt', octopt.__version__ if hasattr(octopt, '__version__') else '', 'cuda_available', octopt.cuda_available())"
echo "== GPU tests ($(date +%T), $(( $(date +%s) - T0 )) s)"
timeout 90 python -m pytest -q -x -p no:cacheprovider tests/cuda/test_optim.py tests/cuda/test_launches.py \
  tests/cuda/test_blockwise.py 2>&1 | tail -25
TEST_RC=${PIPESTATUS[0]}
echo "== octopt.optax CUDA handler tests ($(date +%T), $(( $(date +%s) - T0 )) s)"
python -c "import octopt; print('xla_ffi_cuda_built', octopt.info()['xla_ffi_cuda_built'])"
timeout 55 python -m pytest -q -x -p no:cacheprovider -rs tests/jax/test_cuda.py 2>&1 | tail -25
OPTAX_RC=${PIPESTATUS[0]}
echo "== octopt.torch CUDA tests ($(date +%T), $(( $(date +%s) - T0 )) s)"
timeout 60 python -m pytest -q -x -p no:cacheprovider -rs tests/torch/test_cuda.py 2>&1 | tail -25
TORCH_RC=${PIPESTATUS[0]}
echo "== distributed nccl tests ($(date +%T), $(( $(date +%s) - T0 )) s; skipped below 2 GPUs)"
timeout 30 python -m pytest -q -p no:cacheprovider -rs tests/distributed -k nccl 2>&1 | tail -12
DIST_RC=${PIPESTATUS[0]}
TEST_RC=$(( TEST_RC != 0 || OPTAX_RC != 0 || TORCH_RC != 0 || (DIST_RC != 0 && DIST_RC != 5) ))
echo "== benchmark ($(date +%T), $(( $(date +%s) - T0 )) s)"
timeout 60 python bench/gpu_step.py
BENCH_RC=$?
echo "== memory benchmark ($(date +%T), $(( $(date +%s) - T0 )) s)"
timeout 60 python bench/memory.py --device cuda --ranks 1 --steps 3 ${OUT:+--out "$OUT/memory.json"}
BENCH_RC=$(( BENCH_RC != 0 || $? != 0 ))
echo "== done in $(( $(date +%s) - T0 )) s (tests rc=$TEST_RC, bench rc=$BENCH_RC)"
exit $(( TEST_RC != 0 || BENCH_RC != 0 ))
