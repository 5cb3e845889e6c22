#!/bin/sh
# gpa-train-lm --data-parallel 2 under mpirun on the simulator (issue 27):
# one process per device. Checks the plumbing that runs on this machine:
# each process picks the device of its local rank (sim:0, sim:1: the line
# each prints), and, since the simulator's NCCL meets ranks of one process
# only, every process refuses at gpa_comm_bootstrap_mpi_nccl with that
# reason, at once, instead of waiting in an init (the timeout of ctest and
# `timeout` below turn a hang into a failure); with one process the whole
# path runs. On GPUs the same command joins the processes through the real
# NCCL (docs/collectives.md).
set -u
mpiexec=$1
lm=$2
out=$(GPA_DEVICE=sim OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 60 "$mpiexec" -np 2 --oversubscribe \
  "$lm" --data-parallel 2 --steps 2 --batch 8 --ctx 16 --dim 16 --heads 2 --blocks 1 --eval-every 0 2>&1)
rc=$?
echo "$out" | grep "gpa-train-lm"
fail() { echo "FAILED: $1"; exit 1; }
[ "$rc" -ne 0 ] || fail "mpirun exited 0: the simulator joined processes?"
[ "$rc" -ne 124 ] || fail "hung (timeout)"
echo "$out" | grep -q "local rank 0 of 2: device sim:0" || fail "rank 0 did not take sim:0"
echo "$out" | grep -q "local rank 1 of 2: device sim:1" || fail "rank 1 did not take sim:1"
n=$(echo "$out" | grep -c "gpa_comm_bootstrap_mpi_nccl.*meets ranks of one process only")
[ "$n" -eq 2 ] || fail "$n of 2 processes refused with the simulator's reason"
# One process: the same path runs (MPI bootstrap, NCCL's id made by rank
# 0 and broadcast, one NCCL rank on sim:0) and trains like the in-process
# rank (--parity-check: 1 rank in the process, then 1 rank through MPI).
out=$(GPA_DEVICE=sim OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 60 "$mpiexec" -np 1 \
  "$lm" --data-parallel 1 --parity-check --steps 10 --batch 8 --ctx 16 --dim 16 --heads 2 --blocks 1 \
  --eval-every 0 --print-every 10 --parity-tol 1e-6 2>&1)
rc=$?
echo "$out" | grep -E "device sim|data-parallel|parity"
[ "$rc" -eq 0 ] || fail "mpirun -np 1 exited $rc"
echo "$out" | grep -q "1 rank on sim (sim:0, one MPI process each)" || fail "-np 1 did not run through MPI on sim:0"
echo "$out" | grep -q "parity: .*: ok" || fail "-np 1: no parity"
echo "ok: each process on its local device; 2 processes refused (the simulated NCCL meets ranks of one process);"
echo "    1 process through the MPI bootstrap and NCCL trains as in-process"
