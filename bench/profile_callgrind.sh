#!/usr/bin/env bash
# Instructions per training step with profiling off, on (trace written) and
# compiled out: the load-independent half of profile_overhead (gpa-bench
# measures wall time). Each variant runs STEPS steps of the profile step
# under callgrind, counted from after the warm-up to the end of the timed
# run (client requests in profile_step.c; its flush included). Counted: the
# actor's work, i.e. the instructions inside gpa__dispatch and
# gpa__drain_completions (every message: the ops, the profiling hooks, the
# trace's formatting at flush). The idle and wait loops are left out: they
# spin for a time, not a count. One thread everywhere (GPA_THREADS=1,
# OPENBLAS_NUM_THREADS=1) keeps the counts the same from run to run.
# Usage: bench/profile_callgrind.sh [build-dir] [steps]; prints JSON lines.
set -euo pipefail
build=${1:-build}
steps=${2:-3}
bench=$build/bench
tmp=$(mktemp -d /tmp/gpa_cg_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export GPA_DEVICE=cpu GPA_THREADS=1 OPENBLAS_NUM_THREADS=1

per_step() { # tag exe [env...]: the actor's instructions per step
  local out=$tmp/cg.$1 exe=$2
  shift 2
  env "$@" valgrind --tool=callgrind --callgrind-out-file="$out" "$bench/$exe" "$steps" 1 >/dev/null 2>"$out.log" ||
    { cat "$out.log" >&2; exit 1; }
  [ -s "$out.1" ] || { echo "profile_callgrind: no dump from $exe (built without valgrind/callgrind.h?)" >&2; exit 1; }
  callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$out.1" |
    awk -v n="$steps" '/:(gpa__dispatch|gpa__drain_completions) \[/ { gsub(",", "", $1); s += $1 }
                       END { printf "%d\n", s / n }'
}

emit() { # name ref ours theirs
  awk -v n="$1" -v r="$2" -v o="$3" -v t="$4" 'BEGIN {
    printf "{\"name\":\"%s\",\"backend\":\"cpu\",\"shape\":\"mlp_256x512\",\"ir_per_step\":%d,\"ref\":\"%s\",", n, o, r
    printf "\"ref_ir_per_step\":%d,\"ratio\":%.5f,\"extra_ir_per_step\":%d}\n", t, t / o, o - t }'
}

off=$(per_step off gpa-bench-step GPA_TRACE= GPA_PROFILE=0)
on=$(per_step on gpa-bench-step GPA_TRACE="$tmp/trace.json" GPA_PROFILE=0)
emit profile_overhead_on_ir profiling_off "$on" "$off"
if [ -x "$bench/gpa-bench-noprof" ]; then
  out=$(per_step out gpa-bench-noprof GPA_TRACE= GPA_PROFILE=0)
  emit profile_overhead_off_ir profiling_compiled_out "$off" "$out"
fi
