#!/usr/bin/env bash
# llvm-mca estimates of the NEON loops (bench/mca/neon_loops.cpp) for Neoverse V1 and Apple M1, and of the
# AVX2 loops (bench/mca/avx2_loops.cpp) for Zen 3: each driver is compiled with clang -O3 -S, the code between
# its LLVM-MCA markers (one group of 16 elements, the kernels inlined) is cut out and given to llvm-mca.
#   bench/mca/run.sh [SRC_ROOT_FOR_AVX2]   (default: this checkout's cpp/)
# Needs clang (Debian: clang) and llvm-mca (Debian: llvm-19; LLVM 14's has no Neoverse V1 model).
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG=${CLANG:-clang++}
MCA=${MCA:-$(command -v llvm-mca-19 || command -v llvm-mca)}
AVX2_ROOT=${1:-cpp}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags=(-O3 -std=c++17 -ffp-contract=off -fno-math-errno -S)
"$CLANG" --target=aarch64-linux-gnu "${flags[@]}" -Icpp/include -Icpp/src bench/mca/neon_loops.cpp -o "$out/neon.s"
"$CLANG" --target=x86_64-linux-gnu "${flags[@]}" -mavx2 -mfma -mf16c -mbmi -mbmi2 -I"$AVX2_ROOT/include" -I"$AVX2_ROOT/src" bench/mca/avx2_loops.cpp \
  -o "$out/avx2.s"
region() {  # region FILE NAME: the instructions between the first BEGIN and END markers of NAME
  awk -v r="$2" '$0 ~ "LLVM-MCA-BEGIN "r"$" {p=1; next} $0 ~ "LLVM-MCA-END "r"$" {if (p) exit} p' "$1" |
    grep -v -E '^\s*(//|#)'
}
report() {  # report FILE NAME TRIPLE CPU [ELEMENTS]: cycles per 16 elements of a region of ELEMENTS (16)
  region "$1" "$2" >"$out/r.s"
  printf '%-22s %-12s %4d instructions  ' "$2" "$4" "$(grep -c . "$out/r.s")"
  "$MCA" -mtriple="$3" -mcpu="$4" -iterations=500 "$out/r.s" 2>/dev/null | awk -v e="${5:-16}" '
    /^Total Cycles:/ {printf "%6.1f cycles per 16 elements  ", $3 / 500 * 16 / e}
    /Block RThroughput:/ {printf "(throughput bound %.1f)\n", $3 * 16 / e}'
}
for r in encode_closed_form_16 decode256_16 decode_scalar_16 adam_update_16; do
  for cpu in neoverse-v1 apple-m1; do report "$out/neon.s" "$r" aarch64-linux-gnu "$cpu"; done
done
report "$out/avx2.s" encode_closed_form_32 x86_64-linux-gnu znver3 32
for r in decode256_16 adam_update_16; do report "$out/avx2.s" "$r" x86_64-linux-gnu znver3; done
