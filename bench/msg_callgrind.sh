#!/usr/bin/env bash
# Our library's instructions per message on the CUDA backend, counted on the
# simulated device under callgrind (issue 24): the same count on any
# machine, the emulator's own work left out (bench/msg_callgrind.py says
# what is counted). Cases, one JSON line each:
#   stream:           2000 tiny adds without handles, then a sync
#   stream_profiled:  the same with GPA_PROFILE=1
#   roundtrip:        500 adds each submitted with a handle, awaited, released
#   lm, lm_profiled:  gpa-train-lm (small shapes: example_train_lm's), per
#                     step, from the difference of a 2-step and a 5-step run
#                     (setup and shutdown cancel); messages per step from
#                     GPA_PROFILE=1's summary
# Usage: bench/msg_callgrind.sh [build-dir] [cases...]; -v after build-dir
# also lists the calls into the simulator that were left out.
set -euo pipefail
build=${1:-build}
shift || true
verbose=
if [ "${1:-}" = -v ]; then verbose=-v; shift; fi
cases=${*:-stream stream_profiled roundtrip lm lm_profiled}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/gpa_msgcg_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export GPA_DEVICE=sim GPA_THREADS=1 OPENBLAS_NUM_THREADS=1 GPA_TRACE=
cg() { # out-file cmd...: callgrind, quietly
  local out=$1
  shift
  valgrind --tool=callgrind --trace-children=yes --compress-strings=no --compress-pos=no --callgrind-out-file="$out" "$@" \
    >"$out.stdout" 2>"$out.log" || { cat "$out.log" >&2; exit 1; }
}
producer="gpa_submit gpa_upload gpa_readback gpa_handle_release gpa_batch_begin gpa_batch_begin_opts"
# cu_poll is left out: it runs while the actor sleeps with work in flight,
# every 5 ms (GPA__POLL_NS), a count of wall time (under valgrind's
# slowdown, several a message), not of messages
actor="gpa__mailbox_drain gpa__drain_completions cu_flush cu_reap cu_park"
ours() { python3 "$here/msg_callgrind.py" $verbose "$1" $producer $actor; }

msg_case() { # name mode n [env...]
  local name=$1 mode=$2 n=$3
  shift 3
  cg "$tmp/$name" env "$@" "$build/bench/gpa-bench-msgcost" "$mode" "$n"
  local f
  f=$(ls "$tmp/$name".* 2>/dev/null | grep -E '\.[0-9]+$' | head -1)
  [ -n "$f" ] || { echo "msg_callgrind: no dump (built without valgrind/callgrind.h?)" >&2; exit 1; }
  local ir dc
  read -r ir dc < <(ours "$f")
  awk -v n="$name" -v ir="$ir" -v dc="$dc" -v m="$n" 'BEGIN {
    printf "{\"name\":\"msg_ir_%s\",\"backend\":\"sim\",\"messages\":%d,\"ir_per_message\":%.0f,", n, m, ir / m
    printf "\"driver_calls_per_message\":%.3f}\n", dc / m }'
}

lm_case() { # name [env...]
  local name=$1
  shift
  local lm=(--batch 8 --ctx 32 --dim 32 --heads 2 --blocks 2 --eval-every 0 --lr 1e-2)
  cg "$tmp/$name.2" env "$@" "$build/examples/gpa-train-lm" "${lm[@]}" --steps 2
  cg "$tmp/$name.5" env "$@" "$build/examples/gpa-train-lm" "${lm[@]}" --steps 5
  local a b da db msgs
  read -r a da < <(ours "$tmp/$name.2")
  read -r b db < <(ours "$tmp/$name.5")
  # messages a step: the profiled run's summary counts them (5 - 2 steps)
  env GPA_PROFILE=1 "$build/examples/gpa-train-lm" "${lm[@]}" --steps 2 2>"$tmp/p2" >/dev/null
  env GPA_PROFILE=1 "$build/examples/gpa-train-lm" "${lm[@]}" --steps 5 2>"$tmp/p5" >/dev/null
  msgs=$(awk '/^gpuactor profile: / && $4 ~ /^[0-9]+$/ { s += $4 } END { print s }' "$tmp/p5")
  msgs=$((msgs - $(awk '/^gpuactor profile: / && $4 ~ /^[0-9]+$/ { s += $4 } END { print s }' "$tmp/p2")))
  awk -v n="$name" -v a="$a" -v b="$b" -v da="$da" -v db="$db" -v m="$msgs" 'BEGIN {
    printf "{\"name\":\"msg_ir_%s\",\"backend\":\"sim\",\"ir_per_step\":%.0f,\"messages_per_step\":%.1f,", n, (b - a) / 3, m / 3
    printf "\"ir_per_message\":%.0f,\"driver_calls_per_message\":%.3f}\n", (b - a) / m, (db - da) / m }'
}

for c in $cases; do
  case $c in
    stream) msg_case stream stream 2000 GPA_PROFILE=0 ;;
    stream_profiled) msg_case stream_profiled stream 2000 GPA_PROFILE=1 ;;
    roundtrip) msg_case roundtrip roundtrip 500 GPA_PROFILE=0 ;;
    lm) lm_case lm GPA_PROFILE=0 ;;
    lm_profiled) lm_case lm_profiled GPA_PROFILE=1 ;;
    *) echo "msg_callgrind: unknown case $c" >&2; exit 2 ;;
  esac
done
