#!/usr/bin/env bash
# How many FMA-pipe slots one more vector operation of each kind takes on
# this CPU (bench/ab/fp_ports.c): the figures behind the GELU kernels'
# operation counts. x86 with AVX2+FMA only.
# Usage: bench/fp_ports.sh [millions of steps]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/gpa_fp_ports_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -D_GNU_SOURCE -O2 -o "$tmp/fp_ports" bench/ab/fp_ports.c
"$tmp/fp_ports" "$@"
