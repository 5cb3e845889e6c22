#!/usr/bin/env bash
# The checks that need a real GPU (docs/cuda.md, "On a real GPU"): build with
# the CUDA toolkit into ${BUILD_DIR:-build-gpu}, then, by default in this
# order (or the steps named as arguments):
#   build     configure + build (all cores)
#   ctest     the whole suite with GPA_DEVICE=cuda
#   train     the main job's training run on the GPU
#   bench     gpa-bench cuda_membound, cuda_linear, cuda_attention
#   sanitize  compute-sanitizer memcheck over the parity tests (quick shapes)
# Logs go to ${OUT:-gpu-check}/. Exits 77 when no GPU is visible.
# GPA_DEPS_PREFIX: where the Debian packages libck-dev, libopenblas-dev
# (openblas-pthread) and libjansson-dev were unpacked (dpkg -x) on a machine
# that does not have them installed.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "gpu_check: no GPU visible" >&2; exit 77; }
B=${BUILD_DIR:-build-gpu}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
cmake_args=()
if [ -n "${GPA_DEPS_PREFIX:-}" ]; then
  L=$GPA_DEPS_PREFIX/usr/lib/x86_64-linux-gnu
  cmake_args+=(-DCMAKE_INCLUDE_PATH="$GPA_DEPS_PREFIX/usr/include;$GPA_DEPS_PREFIX/usr/include/x86_64-linux-gnu/openblas-pthread"
               -DCMAKE_LIBRARY_PATH="$L;$L/openblas-pthread")
  export LD_LIBRARY_PATH=$L/openblas-pthread:$L:${LD_LIBRARY_PATH:-}
fi
sanitizer=/usr/local/cuda/bin/compute-sanitizer
fails=0

step() { # name command...: runs it with its log in $OUT/name.txt, prints the tail
  local name=$1
  shift
  echo "== $name"
  "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n "${TAIL:-8}" "$OUT/$name.txt"
  echo "-- $name: exit $rc"
  [ $rc = 0 ] || fails=$((fails + 1))
}

build() {
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_args[@]}" &&
    cmake --build "$B" -j"$(nproc)"
}
sanitize() {
  local rc=0
  for t in parity_elementwise parity_gelu parity_layernorm parity_linear parity_linear_bf16 parity_conv1d \
    parity_embedding parity_metrics parity_optim attention; do
    GPA_DEVICE=cuda GPA_PARITY_QUICK=1 "$sanitizer" --tool memcheck --error-exitcode 9 "$B/tests/test_$t" \
      >"$OUT/memcheck_$t.txt" 2>&1
    local r=$?
    echo "memcheck $t: exit $r, $(grep -h "ERROR SUMMARY" "$OUT/memcheck_$t.txt")"
    [ $r = 0 ] || rc=1
  done
  return $rc
}

steps=("$@")
[ ${#steps[@]} = 0 ] && steps=(build ctest train bench sanitize)
for s in "${steps[@]}"; do
  case $s in
    build) step build build || exit 1 ;;
    ctest) TAIL=20 step ctest env GPA_DEVICE=cuda ctest --test-dir "$B" -j8 --timeout 300 --output-on-failure ;;
    train) step train "$B/examples/gpa-train-lm" --steps 600 ;;
    bench) TAIL=20 step bench env GPA_DEVICE=cuda "$B/bench/gpa-bench" cuda_ ;;
    sanitize) TAIL=12 step sanitize sanitize ;;
    *) echo "gpu_check: unknown step $s" >&2; exit 2 ;;
  esac
done
echo "gpu_check: $fails step(s) failed; logs in $OUT/"
[ $fails = 0 ]
