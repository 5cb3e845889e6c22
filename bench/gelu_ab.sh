#!/usr/bin/env bash
# Single-thread A/B of the host GELU kernels (bench/ab/gelu_ab.c): A is
# kernels/host/gelu.c at git revision REV, B the working tree's, both
# compiled as the library compiles them now (-O2 -O3 -fno-math-errno, with
# gcc's first scheduling pass, no -march; the AVX2+FMA paths are chosen at
# run time; cmake/host_kernels.cmake). A_CFLAGS / B_CFLAGS add flags to one
# side, e.g. A_CFLAGS="-fno-schedule-insns" for A as the library compiled
# it before 2026-11-22. Load-robust: the two run alternately in one
# process, and the median of per-round ratios is printed.
# Usage: bench/gelu_ab.sh REV [n] [rounds] [GHz] [threads]   (n = 4096: data
# in L1; threads > 1: the host pool, and each side's ratio to a triad timed
# in the same rounds, see bench/ab/gelu_ab.c)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/gelu_ab.sh REV [n] [rounds] [GHz]}
shift
tmp=$(mktemp -d /tmp/gpa_gelu_ab_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git show "$rev:kernels/host/gelu.c" >"$tmp/gelu_a.c"
cf=(-std=c11 -D_GNU_SOURCE -O2 -O3 -fno-math-errno -I. -Iinclude)
macros=$(cc -dM -E -x c /dev/null)
if grep -q __GNUC__ <<<"$macros" && ! grep -q __clang__ <<<"$macros"; then cf+=(-fschedule-insns -fsched-pressure); fi
# shellcheck disable=SC2086
cc "${cf[@]}" ${A_CFLAGS:-} -Dgpa__gelu_fwd_f32=A_fwd -Dgpa__gelu_bwd_f32=A_bwd -c "$tmp/gelu_a.c" -o "$tmp/a.o"
# shellcheck disable=SC2086
cc "${cf[@]}" ${B_CFLAGS:-} -Dgpa__gelu_fwd_f32=B_fwd -Dgpa__gelu_bwd_f32=B_bwd -c kernels/host/gelu.c -o "$tmp/b.o"
cc "${cf[@]}" -o "$tmp/gelu_ab" bench/ab/gelu_ab.c "$tmp/a.o" "$tmp/b.o" kernels/host/nt_store.c kernels/host/vmath.c \
  kernels/host/pool.c -lm -lpthread
"$tmp/gelu_ab" "$@"
