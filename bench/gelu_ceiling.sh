#!/usr/bin/env bash
# Where the host GELU kernels' two-thread time goes (bench/ab/gelu_ceiling.c):
# each kernel's GB/s over a STREAM triad's in the same rounds, three ways:
# as gpa-bench runs it (op), the same arithmetic on data that stays in L2
# (compute: what the arithmetic alone allows), and the same memory streams
# with no arithmetic (memory: what the memory pattern alone allows). The
# working tree's kernels/host/gelu.c, compiled as the library compiles it
# (cmake/host_kernels.cmake), as in bench/gelu_ab.sh.
# Usage: bench/gelu_ceiling.sh [rounds] [threads] [n]   (30, 2, 4194304)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/gpa_gelu_ceiling_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cf=(-std=c11 -D_GNU_SOURCE -O2 -O3 -fno-math-errno -I. -Iinclude)
macros=$(cc -dM -E -x c /dev/null)
if grep -q __GNUC__ <<<"$macros" && ! grep -q __clang__ <<<"$macros"; then cf+=(-fschedule-insns -fsched-pressure); fi
cc "${cf[@]}" -o "$tmp/gelu_ceiling" bench/ab/gelu_ceiling.c kernels/host/gelu.c kernels/host/nt_store.c \
  kernels/host/vmath.c kernels/host/pool.c -lm -lpthread
"$tmp/gelu_ceiling" "$@"
