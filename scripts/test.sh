#!/usr/bin/env bash
# The test command: set up, build, and run the whole suite with ctest on every
# device this machine has (cpu; sim when the CUDA toolkit is present), then
# the cpu suite of a build without the CUDA backend, valgrind memcheck of the
# core tests, the same suite in ASan+UBSan and TSan
# builds, and the libFuzzer targets for a bounded time (clang). Set
# GPA_QUICK=1 to skip everything after the first suite while iterating.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)

run_suite() { # build-dir device
  echo "== ctest: $1 with GPA_DEVICE=$2 ($(( $(date +%s) - start )) s in)"
  GPA_DEVICE=$2 ctest --test-dir "$1" --output-on-failure -j"$jobs" --timeout 300
}

devices() { # build-dir -> the devices its suite runs on
  echo cpu
  # The simulated device, where the cuda backend is built (GPA_CUDA_BACKEND in
  # the cache). In the TSan build too: there the emulated kernels and the SIMT
  # executor are compiled without TSan (cmake/sanitize.cmake; they are the
  # simulated GPU's interior), which keeps the sim suite inside its limits.
  if grep -q "^GPA_CUDA_BACKEND:INTERNAL=ON" "$1/CMakeCache.txt" 2>/dev/null; then
    echo sim
  fi
}

BUILD_DIR=build scripts/setup.sh
for d in $(devices build); do run_suite build "$d"; done

if [ "${GPA_QUICK:-0}" != 1 ]; then
  # The build where the CUDA toolkit is absent (host backend only), as a
  # user without it gets: everything builds and the cpu suite passes (the
  # CUDA tests skip). Two tests had stopped linking there unnoticed.
  BUILD_DIR=build-nocuda scripts/setup.sh -DGPA_WITH_CUDA=OFF
  run_suite build-nocuda cpu
  # valgrind: the core runtime's tests, leak-checked (stress scaled down);
  # then, where the sim is built, a few of its own tests and of the cuda
  # backend's on it, kernels included (the fiber stacks are registered with
  # valgrind, sim/runtime/simt.cpp): about 30 s.
  if command -v valgrind >/dev/null; then
    vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect
        --show-leak-kinds=definite,indirect --suppressions=scripts/valgrind.supp)
    for t in status submit_await batch fifo backpressure buffers destroy misuse options feed custom_ops stress by_value \
             actor_churn queue_churn comm_local; do
      echo "== valgrind: $t ($(( $(date +%s) - start )) s in)"
      GPA_DEVICE=cpu GPA_STRESS_PER=20000 GPA_CHURN_PER=5 GPA_QUEUE_CHURN_CYCLES=500 "${vg[@]}" "build/tests/test_$t" >/dev/null
    done
    if [ "$(devices build | grep -c sim)" = 1 ]; then
      for c in "sim_simt barrier" "sim_simt shuffle" "sim_simt dynshared" "sim_kernel layernorm" "sim_kernel wmma" \
               "sim_driver stream_order" "sim_driver events"; do
        echo "== valgrind: $c ($(( $(date +%s) - start )) s in)"
        GPA_SIM_MODULE_PATH=build/sim/modules "${vg[@]}" build/sim/$c >/dev/null
      done
      for t in batch submit_await cuda_faults cuda_sticky cuda_graph cuda_stream_alloc custom_kernel actor_churn queue_churn; do
        echo "== valgrind: $t on sim ($(( $(date +%s) - start )) s in)"
        GPA_DEVICE=sim GPA_CHURN_PER=3 GPA_QUEUE_CHURN_CYCLES=200 "${vg[@]}" "build/tests/test_$t" >/dev/null
      done
    fi
  fi
  BUILD_DIR=build-asan scripts/setup.sh -DGPA_SANITIZE=address
  for d in $(devices build-asan); do
    # ASan's frames are larger: emulated threads get a bigger stack.
    GPA_SIM_STACK_KB=1024 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_suite build-asan "$d"
  done
  BUILD_DIR=build-tsan scripts/setup.sh -DGPA_SANITIZE=thread
  for d in $(devices build-tsan); do
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_suite build-tsan "$d"
  done
  # libFuzzer over the API's validation: GPA_FUZZ_SECONDS per target, then
  # every saved regression input.
  if command -v clang >/dev/null; then
    CC=clang BUILD_DIR=build-fuzz scripts/setup.sh -DGPA_SANITIZE=fuzz -DGPA_WITH_CUDA=OFF \
      -DGPA_FUZZ_SECONDS="${GPA_FUZZ_SECONDS:-60}"
    echo "== ctest: build-fuzz ($(( $(date +%s) - start )) s in)"
    ctest --test-dir build-fuzz --output-on-failure
  fi
fi
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
