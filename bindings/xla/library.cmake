# gpa_xla_library(<ffi include dir>): the target gpuactor_xla
# (libgpuactor_xla.so) from this folder's sources. Shared by the project's
# build (CMakeLists.txt) and the standalone build the test runner makes when
# the project was configured without XLA's headers (standalone/).
function(gpa_xla_library ffi_include)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/src/*.c)
  add_library(gpuactor_xla SHARED ${srcs})
  target_include_directories(gpuactor_xla PUBLIC ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/include ${ffi_include})
  set_target_properties(gpuactor_xla PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF
                        C_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(gpuactor_xla PRIVATE _GNU_SOURCE)
  target_compile_options(gpuactor_xla PRIVATE -Wall -Wextra)
  find_package(Threads REQUIRED)
  target_link_libraries(gpuactor_xla PRIVATE Threads::Threads ${CMAKE_DL_LIBS}) # the CUDA driver, opened at run time
  # XLA loads it into a process it does not own: every symbol it needs must
  # be resolved by its own dependencies.
  target_link_options(gpuactor_xla PRIVATE -Wl,--no-undefined)
endfunction()
