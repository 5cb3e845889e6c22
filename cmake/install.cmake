# Install rules (docs/bindings.md, "Installing"): headers, the shared library
# (SONAME libgpuactor.so.<major>, the version script's exports only), the
# static library, the CMake package (find_package(gpuactor CONFIG) ->
# gpuactor::gpuactor, gpuactor::gpuactor_static) and gpuactor.pc.
#
# The CUDA kernels are fatbins embedded in the library itself (cmake/cuda.cmake),
# so the library is all a CUDA machine needs. The simulated device (sim/) is a
# development tool: it is not installed, and an installed library finds it
# only in the build tree it came from.
#
# The package file is written here rather than exported with install(EXPORT):
# the library's dependencies are absolute paths found on the build machine
# (cmake/deps.cmake), and the consumer's machine should look for its own.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(TARGETS gpuactor gpuactor_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# What a static link needs besides libgpuactor.a: the same libraries the
# shared one records as DT_NEEDED.
set(GPA_PC_REQUIRES_PRIVATE "ck openblas")
set(GPA_CONFIG_STATIC_LIBS "ck;openblas")
if(GPA_HAVE_JANSSON)
  string(APPEND GPA_PC_REQUIRES_PRIVATE " jansson")
  list(APPEND GPA_CONFIG_STATIC_LIBS jansson)
endif()

# The backends a device build adds are reached through weak references
# (backends/backend.h), which do not pull an archive member into a static
# link: the consumer's link names one of its symbols.
set(GPA_STATIC_LINK_OPTIONS "")
set(GPA_PC_STATIC_FLAGS "")
if(GPA_HAVE_CUDA_TOOLKIT)
  set(GPA_STATIC_LINK_OPTIONS "LINKER:-u,gpa__backend_cuda")
  set(GPA_PC_STATIC_FLAGS "-Wl,-u,gpa__backend_cuda ")
endif()

set(GPA_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpuactor)
# The config finds the prefix from its own location: the install stays
# relocatable (DESTDIR, a copied prefix, a wheel).
file(RELATIVE_PATH GPA_CONFIG_TO_PREFIX /${GPA_CONFIG_DIR} /)
configure_file(${CMAKE_CURRENT_LIST_DIR}/gpuactorConfig.cmake.in ${CMAKE_BINARY_DIR}/install/gpuactorConfig.cmake
               @ONLY)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/gpuactorConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/gpuactorConfig.cmake
              ${CMAKE_BINARY_DIR}/install/gpuactorConfigVersion.cmake
        DESTINATION ${GPA_CONFIG_DIR})

# gpuactor.pc: prefix from pcfiledir, for the same reason.
file(RELATIVE_PATH GPA_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_CURRENT_LIST_DIR}/gpuactor.pc.in ${CMAKE_BINARY_DIR}/install/gpuactor.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install/gpuactor.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The install test: a consumer project built against a temporary prefix
# (tests/install/check.sh). Not in sanitizer builds: their library needs the
# sanitizer runtime that a plain consumer does not link.
if((BUILD_TESTING OR NOT DEFINED BUILD_TESTING) AND GPA_SANITIZE STREQUAL "")
  add_test(NAME install_consumer
           COMMAND sh ${PROJECT_SOURCE_DIR}/tests/install/check.sh ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR}/tests/install ${CMAKE_COMMAND} ${CMAKE_C_COMPILER}
                   "${CMAKE_INCLUDE_PATH}" "${CMAKE_LIBRARY_PATH}")
  set_tests_properties(install_consumer PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
