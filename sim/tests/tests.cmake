# Tests of the simulator itself: ctest names start with sim_. Each case runs
# in its own process: <binary> <case>. Exit 77 = skipped.
set(GPA_SIM_TEST_TIMEOUT 60)

function(gpa_sim_test binary source)
  cmake_parse_arguments(T "" "" "CASES;LIBS;MODULES;ENV" ${ARGN})
  add_executable(${binary} ${source})
  target_link_libraries(${binary} PRIVATE gpa_sim_cuda ${T_LIBS})
  target_include_directories(${binary} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
  foreach(m IN LISTS T_MODULES)
    target_link_libraries(${binary} PRIVATE ${m}_fatbin)
    add_dependencies(${binary} ${m}_sim)
  endforeach()
  foreach(c IN LISTS T_CASES)
    add_test(NAME ${binary}_${c} COMMAND ${binary} ${c})
    set_tests_properties(${binary}_${c} PROPERTIES TIMEOUT ${GPA_SIM_TEST_TIMEOUT} SKIP_RETURN_CODE 77
                         ENVIRONMENT "GPA_SIM_MODULE_PATH=${GPA_SIM_MODULE_DIR};${T_ENV}")
  endforeach()
endfunction()

gpa_sim_test(sim_simt tests/test_simt.c MODULES sim_simt_kernels
  CASES barrier shuffle atomics dynshared params)
gpa_sim_test(sim_check tests/test_checks.c MODULES sim_bug_kernels
  CASES divergent_barrier deadlock exited_lane trap oob_global oob_dyn_shared oob_static_shared
        launch_limits memcpy_bounds use_after_free bad_param_ptr pageable_async no_context)
gpa_sim_test(sim_driver tests/test_driver.c MODULES sim_simt_kernels
  CASES device procaddress stream_order events cross_stream_wait legacy_sync memory library)
target_compile_definitions(sim_driver PRIVATE GPA_SIM_DRIVER_PATH="$<TARGET_FILE:gpa_sim_cuda>")
target_link_libraries(sim_driver PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME sim_driver_launch_log COMMAND sim_driver launch_log)
set_tests_properties(sim_driver_launch_log PROPERTIES TIMEOUT ${GPA_SIM_TEST_TIMEOUT} SKIP_RETURN_CODE 77
  ENVIRONMENT "GPA_SIM_MODULE_PATH=${GPA_SIM_MODULE_DIR};GPA_SIM_LAUNCH_LOG=${CMAKE_CURRENT_BINARY_DIR}/sim_launch_log.txt")
gpa_sim_test(sim_fault tests/test_faults.c MODULES sim_simt_kernels CASES alloc launch sticky delay)
add_test(NAME sim_fault_env COMMAND sim_fault env)
set_tests_properties(sim_fault_env PROPERTIES TIMEOUT ${GPA_SIM_TEST_TIMEOUT} SKIP_RETURN_CODE 77
  ENVIRONMENT "GPA_SIM_MODULE_PATH=${GPA_SIM_MODULE_DIR};GPA_SIM_FAULT=alloc=2,launch=1,delay_us=2000")
if(TARGET gpa_sim_cublas)
  gpa_sim_test(sim_cublas tests/test_cublas.c CASES sgemm gemmex batched errors)
  target_compile_definitions(sim_cublas PRIVATE GPA_SIM_CUBLAS_PATH="$<TARGET_FILE:gpa_sim_cublas>")
  target_link_libraries(sim_cublas PRIVATE ${CMAKE_DL_LIBS} m)
  add_dependencies(sim_cublas gpa_sim_cublas)
endif()
gpa_sim_test(sim_kernel tests/test_kernels.c MODULES gpa_sim_layernorm sim_wmma_kernels
  CASES layernorm wmma half_math LIBS m)
# The backend's path: driver dlopened (not linked), entry points from cuGetProcAddress.
add_executable(sim_dlopen tests/test_dlopen.c)
target_include_directories(sim_dlopen PRIVATE ${GPA_CUDA_INCLUDE})
target_link_libraries(sim_dlopen PRIVATE sim_simt_kernels_fatbin ${CMAKE_DL_LIBS})
target_compile_definitions(sim_dlopen PRIVATE GPA_SIM_DRIVER_PATH="$<TARGET_FILE:gpa_sim_cuda>")
add_dependencies(sim_dlopen gpa_sim_cuda sim_simt_kernels_sim)
add_test(NAME sim_driver_dlopen COMMAND sim_dlopen)
set_tests_properties(sim_driver_dlopen PROPERTIES TIMEOUT ${GPA_SIM_TEST_TIMEOUT} SKIP_RETURN_CODE 77
  ENVIRONMENT "GPA_SIM_MODULE_PATH=${GPA_SIM_MODULE_DIR}")
# kernels/cuda/gpa_mma.h (mma.sync, ldmatrix, cp.async) against the PTX
# ISA's fragment layouts (sim/emu/gpa_sim_mma.h emulates them).
gpa_cuda_kernels(sim_mma_kernels SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tests/kernels/mma_kernels.cu)
gpa_sim_test(sim_mma tests/test_mma.c MODULES sim_mma_kernels CASES direct ldmatrix tiles tf32 tf32_sums)
# The FlashAttention-2-structured attention kernels (kernels/cuda/
# attention_fa2*.cu, in the backend's attn module) launched directly against
# tests/util/attn_ref.c.
gpa_sim_test(sim_attention_fa2 tests/test_attention_fa2.c MODULES gpa_cu_attn CASES small big LIBS m)
target_sources(sim_attention_fa2 PRIVATE ${PROJECT_SOURCE_DIR}/tests/util/attn_ref.c)
target_include_directories(sim_attention_fa2 PRIVATE ${PROJECT_SOURCE_DIR}/tests)
# The fp32 tensor-core (3xTF32) attention forward (kernels/cuda/
# attention_f32tc.cu) against the same reference with the fp32 bound.
gpa_sim_test(sim_attention_f32tc tests/test_attention_f32tc.c MODULES gpa_cu_attn CASES small big LIBS m)
target_sources(sim_attention_f32tc PRIVATE ${PROJECT_SOURCE_DIR}/tests/util/attn_ref.c)
target_include_directories(sim_attention_f32tc PRIVATE ${PROJECT_SOURCE_DIR}/tests)
