#!/bin/sh
# The data-parallel main job on two real GPUs (issue 27): gpa-train-lm
# --data-parallel 2 puts rank r on cuda:r and joins them through the real
# NCCL; 2 ranks x batch 16 against 1 rank x batch 32 from the same start
# and data, every step's loss within 1e-5 relative over 50 steps (cpu,
# sim and MPI measure about 1e-7; example_train_lm_dp_parity*). Skipped
# (77), saying why, unless GPA_DEVICE names cuda and two GPUs are visible:
# the simulated devices have their own test (example_train_lm_dp_parity_sim).
set -eu
lm=$1
case "${GPA_DEVICE:-}" in cuda*) ;; *) echo "skipped: needs two GPUs; GPA_DEVICE=${GPA_DEVICE:-} is not cuda"; exit 77 ;; esac
command -v nvidia-smi >/dev/null 2>&1 || { echo "skipped: needs two GPUs; no nvidia-smi"; exit 77; }
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  v=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
  [ "$v" -lt "$n" ] && n=$v
fi
[ "$n" -ge 2 ] || { echo "skipped: needs two GPUs, $n visible"; exit 77; }
GPA_DEVICE=cuda exec "$lm" --data-parallel 2 --parity-check --steps 50 --batch 32 --ctx 32 --dim 32 --heads 2 \
  --blocks 2 --lr 1e-2 --eval-every 0 --print-every 50 --bucket-kb 8 --parity-tol 1e-5
