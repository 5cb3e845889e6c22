# Collectives (comm/, docs/collectives.md). The MPI engine's MPI side is a
# module of its own, libgpuactor_mpi.so, that libgpuactor loads at run time:
# the library never links MPI, so its consumers and the programs that use no
# collectives never load it. Built where MPI's C headers and library are
# found (Debian: libopenmpi-dev); elsewhere the MPI transport answers
# EUNSUPPORTED naming the module.
find_package(MPI COMPONENTS C QUIET)
# The fuzz build fuzzes the API's validation: no MPI is ever loaded there.
if(MPI_C_FOUND AND NOT GPA_SANITIZE STREQUAL "fuzz")
  add_library(gpuactor_mpi MODULE comm/mpi/module.c)
  target_link_libraries(gpuactor_mpi PRIVATE MPI::MPI_C)
  target_compile_definitions(gpuactor_mpi PRIVATE _GNU_SOURCE)
  target_include_directories(gpuactor_mpi PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/include)
  set_target_properties(gpuactor_mpi PROPERTIES PREFIX "lib" LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  # The library looks next to itself, then here (the build tree's tests).
  set_property(SOURCE comm/mpi.c APPEND PROPERTY COMPILE_DEFINITIONS
               "GPA_MPI_MODULE_BUILD=\"$<TARGET_FILE:gpuactor_mpi>\"")
  add_dependencies(gpa_obj gpuactor_mpi)
  # allreduce through the actor against MPI's own call (bench/comm/allreduce.c)
  add_executable(gpa-bench-allreduce bench/comm/allreduce.c)
  target_link_libraries(gpa-bench-allreduce PRIVATE gpuactor MPI::MPI_C)
  set_target_properties(gpa-bench-allreduce PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  add_dependencies(gpa-bench-allreduce gpuactor_mpi)
  include(GNUInstallDirs)
  install(TARGETS gpuactor_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  message(STATUS "gpuactor: MPI collectives through ${MPI_C_LIBRARIES} (mpirun: ${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "gpuactor: MPI not found: the MPI transport of collectives answers EUNSUPPORTED")
endif()
