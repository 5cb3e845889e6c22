# The CUDA backend (docs/cuda.md): backends/cuda/*.c into the library, and
# the kernels of kernels/cuda/*.cu as embedded fatbins (plus their emulated
# modules for the simulated device). Included by the root CMakeLists.txt
# after gpa_obj is defined, only when the CUDA toolkit was found.
include(${CMAKE_CURRENT_LIST_DIR}/cuda.cmake)

# The backend, and the CUDA adapters of the op families with the tables of
# their kernels (ops/cuda_*.c), which the families' descriptors bind
# (GPA__CUDA in ops/family.h).
file(GLOB GPA_CUDA_BACKEND_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/cuda/*.c
  ${PROJECT_SOURCE_DIR}/ops/cuda_*.c ${PROJECT_SOURCE_DIR}/ops/*/cuda*.c)
target_sources(gpa_obj PRIVATE ${GPA_CUDA_BACKEND_SOURCES})
target_include_directories(gpa_obj PRIVATE ${GPA_CUDA_INCLUDE})
target_compile_definitions(gpa_obj PRIVATE GPA_HAVE_CUDA_BACKEND=1)
# Code linked with the library's objects (bench/bench_cuda.c) may use the
# backend's internals when it is built.
target_include_directories(gpa_obj INTERFACE ${GPA_CUDA_INCLUDE})
target_compile_definitions(gpa_obj INTERFACE GPA_HAVE_CUDA_BACKEND=1)

# Kernel modules: gpa_cu_<mod> (ops/cuda_kernels.h names them),
# from one source or several (separated by ","; one translation unit).
set(GPA_CUDA_KERNEL_MODULES
  "ew:elementwise.cu,cast.cu"
  "norm:norm.cu"
  "emb:embedding.cu"
  "met:metrics.cu"
  "lin:linear.cu"
  "conv:conv1d.cu,conv1d_small.cu,conv1d_tc.cu,conv1d_tc32.cu"
  "attn:attention.cu,attention_fa2.cu,attention_fa2_bwd.cu,attention_fa2_dkv128.cu,attention_f32tc.cu,attention_f32tc_bwd.cu")
foreach(entry IN LISTS GPA_CUDA_KERNEL_MODULES)
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 mod)
  list(GET parts 1 src)
  string(REPLACE "," ";" src "${src}")
  list(TRANSFORM src PREPEND ${PROJECT_SOURCE_DIR}/kernels/cuda/)
  gpa_cuda_kernels(gpa_cu_${mod} SOURCES ${src})
  # The fatbin's embedding source goes into the library itself.
  set(embed ${CMAKE_CURRENT_BINARY_DIR}/gpa_cu_${mod}_cuda/gpa_cu_${mod}_fatbin.c)
  target_sources(gpa_obj PRIVATE ${embed})
  set_source_files_properties(${embed} PROPERTIES OBJECT_DEPENDS
    ${CMAKE_CURRENT_BINARY_DIR}/gpa_cu_${mod}_cuda/gpa_cu_${mod}.fatbin)
  if(TARGET gpa_sim_cuda OR EXISTS ${PROJECT_SOURCE_DIR}/sim/CMakeLists.txt)
    add_dependencies(gpa_obj gpa_cu_${mod}_sim)
  endif()
endforeach()

# The attention kernels (fp32 SIMT and 3xTF32, bf16 and fp16: all six
# sources) keep their accumulators in registers: ptxas must report no spills
# for sm_80 and sm_90 (cmake/check_no_spills.cmake). The result does not
# depend on the host build's sanitizers: normal builds only.
if((BUILD_TESTING OR NOT DEFINED BUILD_TESTING) AND NOT GPA_SANITIZE)
  add_test(NAME attention_no_spills COMMAND ${CMAKE_COMMAND} -DNVCC=${GPA_NVCC}
    "-DSRC=${PROJECT_SOURCE_DIR}/kernels/cuda/attention.cu|${PROJECT_SOURCE_DIR}/kernels/cuda/attention_fa2.cu|${PROJECT_SOURCE_DIR}/kernels/cuda/attention_fa2_bwd.cu|${PROJECT_SOURCE_DIR}/kernels/cuda/attention_fa2_dkv128.cu|${PROJECT_SOURCE_DIR}/kernels/cuda/attention_f32tc.cu|${PROJECT_SOURCE_DIR}/kernels/cuda/attention_f32tc_bwd.cu"
    -DINC=${PROJECT_SOURCE_DIR}/kernels/cuda
    -DOUT=${CMAKE_BINARY_DIR}/check_no_spills -P ${CMAKE_CURRENT_LIST_DIR}/check_no_spills.cmake)
  set_tests_properties(attention_no_spills PROPERTIES TIMEOUT 900)
endif()

# GPA_DEVICE=sim: the simulator's driver and cuBLAS subset from this build
# (GPA_CUDA_DRIVER / GPA_CUBLAS override them at run time).
if(EXISTS ${PROJECT_SOURCE_DIR}/sim/CMakeLists.txt)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/backends/cuda/backend.c APPEND PROPERTY COMPILE_DEFINITIONS
    GPA_SIM_DRIVER_DEFAULT="${CMAKE_BINARY_DIR}/sim/libgpa_sim_cuda.so")
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/backends/cuda/blas.c APPEND PROPERTY COMPILE_DEFINITIONS
    GPA_SIM_CUBLAS_DEFAULT="${CMAKE_BINARY_DIR}/sim/libgpa_sim_cublas.so")
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/backends/cuda/blas_lt.c APPEND PROPERTY COMPILE_DEFINITIONS
    GPA_SIM_CUBLASLT_DEFAULT="${CMAKE_BINARY_DIR}/sim/libgpa_sim_cublasLt.so")
  add_dependencies(gpa_obj gpa_sim_cuda gpa_sim_cublas gpa_sim_cublasLt)
  # cuDNN's fused attention (backends/cuda/cudnn.c): the simulator's subset.
  if(EXISTS ${PROJECT_SOURCE_DIR}/sim/cudnn/cudnn.c)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/backends/cuda/cudnn.c APPEND PROPERTY COMPILE_DEFINITIONS
      GPA_SIM_CUDNN_DEFAULT="${CMAKE_BINARY_DIR}/sim/libgpa_sim_cudnn.so")
    add_dependencies(gpa_obj gpa_sim_cudnn)
  endif()
  # NCCL for collectives of cuda actors (backends/cuda/nccl.c): the simulator's subset.
  if(EXISTS ${PROJECT_SOURCE_DIR}/sim/nccl/nccl.c AND EXISTS ${GPA_CUDA_INCLUDE}/nccl.h)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/backends/cuda/nccl.c APPEND PROPERTY COMPILE_DEFINITIONS
      GPA_SIM_NCCL_DEFAULT="${CMAKE_BINARY_DIR}/sim/libgpa_sim_nccl.so")
    add_dependencies(gpa_obj gpa_sim_nccl)
  endif()
endif()

# Test helper: a driver that reports no device (tests/test_cuda_driver.c
# finds it next to itself).
add_library(gpa_cuda_nodev MODULE ${PROJECT_SOURCE_DIR}/backends/cuda/testing/nodev_driver.c)
target_include_directories(gpa_cuda_nodev PRIVATE ${GPA_CUDA_INCLUDE})
set_target_properties(gpa_cuda_nodev PROPERTIES PREFIX "lib" OUTPUT_NAME gpa_cuda_nodev
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_dependencies(gpa_obj gpa_cuda_nodev)

# The other modules' kernels (fp32 and bf16): no spills either, one test per
# source (ew_no_spills, ...).
if((BUILD_TESTING OR NOT DEFINED BUILD_TESTING) AND NOT GPA_SANITIZE)
  foreach(entry ew:elementwise cast:cast norm:norm lin:linear conv:conv1d convs:conv1d_small convtc:conv1d_tc convtc32:conv1d_tc32 emb:embedding met:metrics)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 mod)
    list(GET parts 1 src)
    # conv1d's tensor-core and small-grid kernels: no stack frame either (their 64
    # accumulators and fragments stay in registers)
    set(no_stack OFF)
    if(mod STREQUAL "convtc" OR mod STREQUAL "convtc32" OR mod STREQUAL "convs")
      set(no_stack ON)
    endif()
    add_test(NAME ${mod}_no_spills COMMAND ${CMAKE_COMMAND} -DNVCC=${GPA_NVCC} -DNO_STACK=${no_stack}
      -DSRC=${PROJECT_SOURCE_DIR}/kernels/cuda/${src}.cu -DINC=${PROJECT_SOURCE_DIR}/kernels/cuda
      -DOUT=${CMAKE_BINARY_DIR}/check_no_spills_${mod} -P ${CMAKE_CURRENT_LIST_DIR}/check_no_spills.cmake)
    set_tests_properties(${mod}_no_spills PROPERTIES TIMEOUT 900)
  endforeach()
endif()

# The whole suite passes on the simulated device: scripts/test.sh runs it
# with GPA_DEVICE=sim too (see devices() there for the sanitizer builds).
set(GPA_CUDA_BACKEND ON CACHE INTERNAL "the cuda backend is built; the suite runs on sim")
