# Sanitizer builds and the bindings' tests. CPython and the BEAM are not
# instrumented, so loading the instrumented libgpuactor.so (or the NIF) needs
# the sanitizer runtime loaded first: the tests preload it.
#   GPA_BINDING_ENV         test environment (a list of VAR=value)
#   GPA_BINDING_SAN_RUNTIME the preloaded runtime, empty outside sanitizer builds
# ASan: leak detection is off (the interpreters' own allocations alive at
# exit are not gpuactor's); other ASan/UBSan errors still abort the test.
set(GPA_BINDING_ENV "")
set(GPA_BINDING_SAN_RUNTIME "")
set(_san_lib "")
if(GPA_SANITIZE STREQUAL "address" OR GPA_SANITIZE STREQUAL "fuzz")
  set(_san_lib libasan.so)
  list(APPEND GPA_BINDING_ENV "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
elseif(GPA_SANITIZE STREQUAL "thread")
  set(_san_lib libtsan.so)
endif()
if(_san_lib)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=${_san_lib}
                  OUTPUT_VARIABLE GPA_BINDING_SAN_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND GPA_BINDING_ENV "LD_PRELOAD=${GPA_BINDING_SAN_RUNTIME}")
endif()
