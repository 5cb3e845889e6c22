#!/usr/bin/env bash
# A/B of the cuDNN SDPA path's experiment knobs on one shape (docs/cuda.md,
# "cuDNN fused attention"): what separates our backward from PyTorch's.
#
#   bench/sdpa_ab.sh [BUILD_DIR] ["SHAPE LABEL"] [VARIANTS]
#
# BUILD_DIR defaults to build, the label to "bf16 B4 S4096 H32 Hkv32 D64"
# (as gpa-bench cuda_sdpa prints it), VARIANTS to all of
# "default,ds_io,heur_b,engine1,torchlib" (a comma-separated subset runs
# only those: a GPU call can be kept short). Each variant is its own gpa-bench
# process, since an actor reads the knobs when it loads cuDNN; each prints
# the forward and the backward twice (deterministic, then not:
# GPA_BENCH_SDPA_NONDET=both), every line naming the engine config that ran
# ("plan") and the cuDNN version, and on stderr the candidates the
# heuristics offered (GPA_CUDNN_VERBOSE=2). PyTorch's SDPA runs on the same
# shape in the first variant only (bench/sdpa_torch.py). The last variant
# loads the libcudnn PyTorch itself runs (the machine's again if that is PyTorch's):
# the same library on both sides.
set -u
cd "$(dirname "$0")/.."
b=${1:-build}
shape=${2:-"bf16 B4 S4096 H32 Hkv32 D64"}
variants=",${3:-default,ds_io,heur_b,engine1,torchlib},"
bench=$b/bench/gpa-bench
[ -x "$bench" ] || { echo "sdpa_ab: no $bench" >&2; exit 1; }

run() { # variant, title, then VAR=value...
  local title=$2
  case $variants in *",$1,"*) ;; *) return 0 ;; esac
  shift 2
  echo "== $title"
  env GPA_BENCH_SDPA_ONLY="$shape" GPA_BENCH_SDPA_NONDET=both GPA_CUDNN_VERBOSE=2 "$@" "$bench" cuda_sdpa 2>&1
}

run default "default: dS fp32, heuristics mode A, its first engine config" GPA_BENCH_SDPA_TORCH=bench/sdpa_torch.py
run ds_io "dS in the storage type (our graph before session 16)" GPA_CUDNN_SDPA_DS=io
run heur_b "heuristics mode B" GPA_CUDNN_SDPA_HEUR=b
run engine1 "the backward on mode A's second engine config" GPA_CUDNN_SDPA_BWD_ENGINE=1

case $variants in *,torchlib,*) ;; *) exit 0 ;; esac
# The libcudnn.so.9 that PyTorch has mapped once cuDNN is loaded.
lib=$(python3 - 2>/dev/null <<'EOF'
import torch
print("# torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), flush=True)
for line in open("/proc/self/maps"):
    if line.rstrip().endswith("/libcudnn.so.9") or "/libcudnn.so.9." in line:
        print(line.split()[-1])
        break
EOF
)
echo "$lib" | grep '^#'
path=$(echo "$lib" | grep -v '^#' | head -1)
if [ -n "$path" ] && [ -e "$path" ]; then
  run torchlib "PyTorch's libcudnn: $path" GPA_CUDNN="$path" LD_LIBRARY_PATH="$(dirname "$path"):${LD_LIBRARY_PATH:-}"
else
  echo "== PyTorch's libcudnn: not found"
fi
