#!/bin/sh
# The main job (gpa-train-lm) eager and with every batch replayed as a CUDA
# graph (--graphs, docs/graphs.md): the same loss at every step, bit for bit
# (printed as hex floats), and the graph run really replayed (each batch
# reports how it ran). CUDA devices only (sim in CI).
set -eu
lm=$1
case "${GPA_DEVICE:-}" in sim* | cuda*) ;; *) echo "skipped: GPA_DEVICE=${GPA_DEVICE:-} is not a cuda device"; exit 77 ;; esac
steps=10
args="--steps $steps --batch 4 --ctx 16 --dim 16 --heads 2 --blocks 1 --eval-every 0 --quiet --losses"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$lm" $args > "$dir/eager" || { echo "eager run failed"; cat "$dir/eager"; exit 1; }
"$lm" $args --graphs > "$dir/graphs" || { echo "graph run failed"; cat "$dir/graphs"; exit 1; }
grep '^loss ' "$dir/eager" | cut -d' ' -f1-3 > "$dir/e"
grep '^loss ' "$dir/graphs" | cut -d' ' -f1-3 > "$dir/g"
[ "$(wc -l < "$dir/e")" -eq "$steps" ] || { echo "expected $steps loss lines"; cat "$dir/eager"; exit 1; }
if ! cmp -s "$dir/e" "$dir/g"; then
  echo "losses differ between eager and graph runs:"
  paste "$dir/e" "$dir/g"
  exit 1
fi
grep -q ' graph 0$' "$dir/eager" && [ "$(grep -c ' graph [12]$' "$dir/eager")" -eq 0 ] ||
  { echo "the eager run reports graphs"; exit 1; }
# the first step may run eagerly (its ops grow the scratch block), the next records
replayed=$(grep -c ' graph 2$' "$dir/graphs" || true)
recorded=$(grep -c ' graph 1$' "$dir/graphs" || true)
echo "graph main job: $steps steps, same losses bit for bit; recorded $recorded, replayed $replayed"
[ "$recorded" -eq 1 ] && [ "$replayed" -ge $((steps - 2)) ] || { cat "$dir/graphs"; exit 1; }
