# Dependencies from Debian: libck (mailbox rings, event counts), pthreads,
# libdl. OpenBLAS (host GEMMs) is loaded at run time, not linked
# (kernels/host/blas_lib.h: its kernel set is chosen before it initialises);
# the simulator's cuBLAS subset and a few tests link it. The CUDA toolkit is
# optional.
find_package(Threads REQUIRED)
find_path(CK_INCLUDE_DIR ck_ring.h REQUIRED)
find_library(CK_LIBRARY ck REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)

# jansson parses the GPA_CONFIG file; without it the file is ignored with a warning.
find_path(JANSSON_INCLUDE_DIR jansson.h)
find_library(JANSSON_LIBRARY jansson)

add_library(gpa_deps INTERFACE)
if(JANSSON_INCLUDE_DIR AND JANSSON_LIBRARY)
  target_link_libraries(gpa_deps INTERFACE ${JANSSON_LIBRARY})
  target_compile_definitions(gpa_deps INTERFACE GPA_HAVE_JANSSON=1)
  set(GPA_HAVE_JANSSON ON)
else()
  message(STATUS "gpuactor: libjansson not found: GPA_CONFIG files are ignored (install libjansson-dev)")
endif()
target_include_directories(gpa_deps INTERFACE ${CK_INCLUDE_DIR} ${CBLAS_INCLUDE_DIR})
target_link_libraries(gpa_deps INTERFACE ${CK_LIBRARY} Threads::Threads ${CMAKE_DL_LIBS} m)

set(GPA_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit location (optional)")
option(GPA_WITH_CUDA "build the cuda backend, kernels and sim when the toolkit is there" ON)
if(GPA_WITH_CUDA AND EXISTS "${GPA_CUDA_ROOT}/include/cuda.h" AND EXISTS "${GPA_CUDA_ROOT}/bin/nvcc")
  set(GPA_HAVE_CUDA_TOOLKIT ON)
  set(GPA_NVCC "${GPA_CUDA_ROOT}/bin/nvcc")
  set(GPA_CUDA_INCLUDE "${GPA_CUDA_ROOT}/include")
  message(STATUS "gpuactor: CUDA toolkit found at ${GPA_CUDA_ROOT}: cuda backend, kernels and the simulated device are built")
else()
  set(GPA_HAVE_CUDA_TOOLKIT OFF)
  message(STATUS "gpuactor: no CUDA toolkit at ${GPA_CUDA_ROOT} (cuda.h and nvcc not both found) or GPA_WITH_CUDA=OFF: building the host backend only")
endif()
