# GPA_SANITIZE=address -> ASan+UBSan; thread -> TSan. Applied to every target.
if(GPA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(GPA_ASAN=1)
elseif(GPA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  add_compile_definitions(GPA_TSAN=1)
  # The simulated device's interior runs without TSan instrumentation: the
  # emulated kernels and the SIMT executor (a block's threads as fibers on one
  # OS thread). Their accesses are the simulated GPU's, not our concurrency,
  # and instrumented they ran 50-100x slower. The driver API layer, the block
  # worker pool (sim/runtime/grid.cpp) and the whole library stay instrumented.
  set(GPA_SIM_UNINSTRUMENTED -fno-sanitize=thread)
elseif(GPA_SANITIZE STREQUAL "fuzz")
  # libFuzzer: every object instrumented for coverage, plus ASan+UBSan.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(GPA_ASAN=1 GPA_FUZZING=1)
elseif(NOT GPA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "GPA_SANITIZE must be empty, address, thread or fuzz (got '${GPA_SANITIZE}')")
endif()
