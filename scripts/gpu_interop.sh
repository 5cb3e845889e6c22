#!/usr/bin/env bash
# The GPU checks of the PyTorch and JAX interop (issues 28 and 29) in one
# command, on a machine with a GPU whose python has PyTorch with CUDA and
# JAX with CUDA, after a build that has the XLA handlers
# (scripts/gpu_check.sh build makes one: it configures with GPA_XLA_PYTHON
# when python3 has jax):
#
#   BUILD_DIR=build-gpu [PY=python3] [OUT=gpu-interop] scripts/gpu_interop.sh [step...]
#
# Steps (all by default, in this order; about 2 minutes):
#   torch_tests   test_torch.py and test_torch_cuda.py with GPA_DEVICE=cuda
#   torch_bench   bench_torch.py --device cuda --breakdown: an op on torch's
#                 CUDA tensors over the same op on gpuactor tensors (issue
#                 28: <= 1.5x), and each step of a call alone
#   xla_tests     test_registration.py and test_feed.py under CUDA JAX (no
#                 JAX_PLATFORMS: the programs run on the GPU)
#   xla_overhead  bench_overhead.py under CUDA JAX: host time a CUDA handler
#                 adds per call over gpuactor_nothing (issue 29)
#   xla_handler   bench_xla_cuda on libcuda.so.1: one handler call alone, no JAX
#   xla_attention bench/xla_attention_vs_jax.py: our attention custom call
#                 in a jitted step against jax.nn.dot_product_attention on
#                 the same shapes, time and largest difference (issue 29's
#                 GPU test; not yet run on a GPU as of session 16)
# Logs in $OUT/<step>.txt; each step's tail is printed. Exits 77 when no GPU
# is visible, else the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "gpu_interop: no GPU visible" >&2; exit 77; }
B=${BUILD_DIR:-build-gpu}
case $B in /*) ;; *) B=$PWD/$B ;; esac
PY=${PY:-python3}
OUT=${OUT:-gpu-interop}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/bindings/python GPA_LIBRARY=$B/libgpuactor.so PYTHONUNBUFFERED=1
export GPA_XLA_LIBRARY=$B/bindings/xla/libgpuactor_xla.so
[ -e "$GPA_XLA_LIBRARY" ] || echo "gpu_interop: no $GPA_XLA_LIBRARY (configure with -DGPA_XLA_PYTHON=<a python with jax>): the xla steps will fail" >&2
fails=0

step() { # name limit command...: runs it with its log in $OUT/name.txt, prints the tail
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.txt"
  if [ $rc -ne 0 ]; then
    echo "== $name: exit $rc"
    fails=$((fails + 1))
  fi
}

run_step() {
  case $1 in
  torch_tests)
    step torch_tests 120 env GPA_DEVICE=cuda "$PY" -m pytest -q -rs -p no:cacheprovider \
      bindings/python/tests/test_torch.py bindings/python/tests/test_torch_cuda.py ;;
  torch_bench)
    step torch_bench 120 env GPA_DEVICE=cuda "$PY" bindings/python/examples/bench_torch.py --device cuda \
      --rounds 9 --breakdown ;;
  xla_tests)
    step xla_tests 150 env -u JAX_PLATFORMS -u GPA_DEVICE "$PY" -m pytest -q -rs -p no:cacheprovider \
      bindings/xla/tests/test_registration.py bindings/xla/tests/test_feed.py ;;
  xla_overhead)
    step xla_overhead 120 env -u GPA_DEVICE JAX_PLATFORMS=cuda "$PY" bindings/xla/bench_overhead.py ;;
  xla_handler)
    step xla_handler 60 env GPA_DEVICE=cuda "$B/bindings/xla/bench_xla_cuda" libcuda.so.1 2000 ;;
  xla_attention)
    step xla_attention 120 env -u JAX_PLATFORMS GPA_DEVICE=cuda "$PY" bench/xla_attention_vs_jax.py ;;
  *)
    echo "gpu_interop: unknown step $1" >&2
    fails=$((fails + 1)) ;;
  esac
}

if [ $# -eq 0 ]; then
  set -- torch_tests torch_bench xla_tests xla_overhead xla_handler xla_attention
fi
for s in "$@"; do run_step "$s"; done
echo "gpu_interop: $fails step(s) failed; logs in $OUT/"
exit "$fails"
