#!/bin/sh
# The main job (gpa-train-lm) in fp32 and with --bf16 (mixed precision:
# fp32 masters and AdamW state, bf16 GEMM weights and activations) from the
# same seed on the same data: the held-out loss of the bf16 run must be
# within 0.02 nats of the fp32 run's (issue 25), and the bf16 run must really
# have run bf16: its trace (GPA_TRACE) must show every conv1d, linear and
# attention op, forward and backward, on bf16 tensors and cast ops beside
# them, and the fp32 run's none of either. A --bf16 that fell back to fp32
# fails the second check; one that broke the numerics, the first. A third
# run, --bf16 --cast-weights (a cast per bf16 weight copy at every forward
# instead of AdamW writing the copies through adamw_multi's bf16_copies),
# must give every step's loss and the held-out loss bit for bit, with more
# casts: the copies the optimizer writes are the casts' bits. The bf16 run
# casts nothing but its bf16 weight copies, once at init (2 per conv block
# and 7 for the projections and the head: 11 here): where fp32 and bf16
# activations meet, the ops' mixed forms (docs/ops.md) replace the casts.
set -eu
lm=$1
tol=0.02
args="--steps 60 --batch 8 --ctx 32 --dim 32 --heads 2 --blocks 2 --lr 1e-2 --eval-every 0 --quiet"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
GPA_TRACE="$dir/f32.json" "$lm" $args > "$dir/f32" || { echo "fp32 run failed"; cat "$dir/f32"; exit 1; }
GPA_TRACE="$dir/bf16.json" "$lm" $args --bf16 --losses > "$dir/bf16" || { echo "bf16 run failed"; cat "$dir/bf16"; exit 1; }
"$lm" $args --bf16 --losses --cast-weights > "$dir/bf16cw" || { echo "bf16 --cast-weights run failed"; cat "$dir/bf16cw"; exit 1; }
held() { sed -n 's/.*held-out loss \([0-9.]*\) nats.*/\1/p' "$1"; }
a=$(held "$dir/f32")
b=$(held "$dir/bf16")
[ -n "$a" ] && [ -n "$b" ] || { echo "no held-out loss in the output"; cat "$dir/f32" "$dir/bf16"; exit 1; }
echo "held-out loss: fp32 $a, bf16 $b nats (tolerance $tol)"
awk -v a="$a" -v b="$b" -v t="$tol" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }' ||
  { echo "FAIL: the bf16 run's held-out loss is more than $tol nats from the fp32 run's"; exit 1; }
gemm='"name":"(linear_fwd|linear_bwd|linear_bwd_nobias|conv1d_fwd|conv1d_bwd|attention_fwd|attention_bwd)"'
# events per dtype of the op's first tensor
count() { grep -E "$gemm" "$1" | grep -c "\"shapes\":\"$2\[" || true; }
casts() { grep -c '"name":"cast"' "$1" || true; }
n16=$(count "$dir/bf16.json" bf16)
n32=$(count "$dir/bf16.json" f32)
c16=$(casts "$dir/bf16.json")
echo "bf16 run: $n16 GEMM-family ops on bf16, $n32 on f32, $c16 casts"
[ "$n16" -ge 60 ] && [ "$n32" -eq 0 ] && [ "$c16" -gt 0 ] || { echo "FAIL: the --bf16 run did not run bf16"; exit 1; }
f16=$(count "$dir/f32.json" bf16)
f32=$(count "$dir/f32.json" f32)
c32=$(casts "$dir/f32.json")
echo "fp32 run: $f32 GEMM-family ops on f32, $f16 on bf16, $c32 casts"
[ "$f32" -ge 60 ] && [ "$f16" -eq 0 ] && [ "$c32" -eq 0 ] || { echo "FAIL: the fp32 run is not fp32"; exit 1; }
grep -q 'bf16 mixed precision' "$dir/bf16" || { echo "FAIL: the bf16 run does not say so"; exit 1; }
# every step's loss (%a, exact) and the held-out loss: the same bits
grep -E '^loss |held-out loss' "$dir/bf16" > "$dir/l1"
grep -E '^loss |held-out loss' "$dir/bf16cw" > "$dir/l2"
[ "$(grep -c '^loss ' "$dir/l1")" -eq 60 ] || { echo "FAIL: --losses printed no per-step losses"; exit 1; }
cmp -s "$dir/l1" "$dir/l2" || { echo "FAIL: the bf16 copies AdamW writes are not the casts' bits:"; diff "$dir/l1" "$dir/l2" | head; exit 1; }
ncast() { sed -n 's/.*bf16: \([0-9]*\) casts submitted.*/\1/p' "$1"; }
k1=$(ncast "$dir/bf16")
k2=$(ncast "$dir/bf16cw")
echo "bf16 run: $k1 casts; with --cast-weights $k2; every step's loss the same bits"
[ -n "$k1" ] && [ -n "$k2" ] && [ "$k2" -gt "$k1" ] || { echo "FAIL: --cast-weights did not cast the weights"; exit 1; }
[ "$k1" -eq 11 ] && [ "$c16" -eq 11 ] ||
  { echo "FAIL: the bf16 run cast more than its 11 weight copies once ($k1 submitted, $c16 traced)"; exit 1; }
echo "ok"
