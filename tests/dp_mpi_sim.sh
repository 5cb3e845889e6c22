#!/bin/sh
# gpa-train-lm --data-parallel 2 under mpirun on the simulator (issue 27):
# one process per device, joined through the simulator's NCCL subset across
# processes (sim/nccl/xproc.c), the path a multi-GPU machine takes with the
# real NCCL. Checks:
# - each process picks the device of its local rank (sim:0, sim:1);
# - the job trains: --parity-check compares every step's loss with the
#   1-rank baseline each process runs first (within 1e-5 relative);
# - its losses are the same bits as the same job's with both ranks in one
#   process (the subset reduces in rank order either way);
# - a fault: rank 1's third collective fails on its stream (the subset's
#   injected asynchronous error): both processes stop with an error naming
#   it, and mpirun returns, without a hang (`timeout` turns one into a
#   failure).
set -u
mpiexec=$1
lm=$2
args="--data-parallel 2 --steps 12 --batch 8 --ctx 16 --dim 16 --heads 2 --blocks 1 --lr 1e-2 --eval-every 0
  --print-every 1 --bucket-kb 4"
fail() { echo "FAILED: $1"; exit 1; }
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# shellcheck disable=SC2086
out=$(GPA_DEVICE=sim timeout 60 "$mpiexec" -np 2 --oversubscribe "$lm" $args --parity-check --parity-tol 1e-5 2>&1)
rc=$?
echo "$out" | grep -E "device sim|data-parallel|parity"
[ "$rc" -ne 124 ] || fail "hung (timeout)"
[ "$rc" -eq 0 ] || { echo "$out" | tail -20; fail "mpirun -np 2 exited $rc"; }
echo "$out" | grep -q "local rank 0 of 2: device sim:0" || fail "rank 0 did not take sim:0"
echo "$out" | grep -q "local rank 1 of 2: device sim:1" || fail "rank 1 did not take sim:1"
echo "$out" | grep -q "2 ranks on sim (sim:0, one MPI process each)" || fail "not 2 ranks through MPI"
echo "$out" | grep -q "parity: .*: ok" || fail "no parity with the 1-rank baseline"
# The same job in one process: every step's loss, bit for bit (--losses
# prints them exactly; rank 0 prints under mpirun).
pick() { grep -E "^loss [0-9]+ " | cut -d" " -f1-3; }
# shellcheck disable=SC2086
a=$(GPA_DEVICE=sim timeout 60 "$mpiexec" -np 2 --oversubscribe "$lm" $args --losses 2>&1 | pick)
# shellcheck disable=SC2086
b=$(GPA_DEVICE=sim timeout 60 "$lm" $args --losses 2>&1 | pick)
[ "$(echo "$a" | wc -l)" -eq 12 ] || fail "not 12 loss lines from mpirun ($a)"
[ "$a" = "$b" ] || { printf 'mpirun:\n%s\nin-process:\n%s\n' "$a" "$b"; fail "losses differ from the in-process ranks'"; }
echo "losses of 12 steps equal the in-process job's: $(echo "$a" | tail -1)"
# A collective that fails on rank 1 only: both processes end with an error.
# shellcheck disable=SC2086
out=$(GPA_DEVICE=sim timeout 60 "$mpiexec" -np 2 --oversubscribe sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export GPA_SIM_NCCL_FAULT=async=3; fi; exec "$0" "$@"' \
  "$lm" $args 2>&1)
rc=$?
[ "$rc" -ne 124 ] || fail "the fault hung (timeout)"
[ "$rc" -ne 0 ] || fail "mpirun exited 0 with a failed collective"
echo "$out" | grep -E "injected|peer failed" | head -4
echo "$out" | grep -q "injected asynchronous failure on rank 1" || fail "no process reported the injected failure"
echo "ok: 2 processes on sim:0 and sim:1 through the simulated NCCL: parity with 1 rank, the in-process"
echo "    losses bit for bit; a failed collective on rank 1 ends the job with its error, no hang"
