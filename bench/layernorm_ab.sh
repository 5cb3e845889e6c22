#!/usr/bin/env bash
# A/B of the host layernorm kernels (bench/ab/layernorm_ab.c): A is
# kernels/host/layernorm.c at git revision REV, B the working tree's, both
# compiled as the library compiles them (-O2 -O3 -fno-math-errno, no -march;
# the AVX2+FMA paths are chosen at run time), on the host pool. A, B and a
# non-temporal triad run alternately in one process; the median of
# per-round ratios is the load-robust figure.
# Usage: bench/layernorm_ab.sh REV fwd|bwd|copy threads N D [rounds] [calls]
#   e.g. bench/layernorm_ab.sh HEAD~3 bwd 2 4096 1024 40   (streaming)
#        bench/layernorm_ab.sh HEAD~3 bwd 1 32 1024 100 100 (rows in L2;
#        with GPA_HOST_NT=0, as the kernels choose for data in cache)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/layernorm_ab.sh REV fwd|bwd|copy threads N D [rounds] [calls]}
shift
tmp=$(mktemp -d /tmp/gpa_layernorm_ab_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git show "$rev:kernels/host/layernorm.c" >"$tmp/layernorm_a.c"
cf=(-std=c11 -D_GNU_SOURCE -O2 -I. -Iinclude)
ren() { echo "-Dgpa__layernorm_fwd_f32=$1_fwd -Dgpa__layernorm_bwd_f32=$1_bwd -Dgpa__layernorm_bwd_scratch=$1_scr"; }
# shellcheck disable=SC2046
cc "${cf[@]}" -O3 -fno-math-errno $(ren A) -c "$tmp/layernorm_a.c" -o "$tmp/a.o"
# shellcheck disable=SC2046
cc "${cf[@]}" -O3 -fno-math-errno $(ren B) -c kernels/host/layernorm.c -o "$tmp/b.o"
cc "${cf[@]}" -o "$tmp/layernorm_ab" bench/ab/layernorm_ab.c "$tmp/a.o" "$tmp/b.o" kernels/host/nt_store.c \
  kernels/host/pool.c -lm -lpthread
"$tmp/layernorm_ab" "$@"
