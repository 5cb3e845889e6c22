# ctest attention_no_spills (cmake/cuda_backend.cmake): compiles kernel
# sources with `nvcc -Xptxas -v` for sm_80 and sm_90 and fails when ptxas
# reports spill stores or loads for any of their kernels; prints registers,
# stack and spills per kernel and architecture.
#   cmake -DNVCC=<nvcc> -DSRC=<a.cu|b.cu> -DINC=<include dir> -DOUT=<scratch dir> -P check_no_spills.cmake
# With -DNO_STACK=ON a stack frame (local memory: an array indexed at run
# time, say) fails it too.
if(NOT EXISTS "${NVCC}")
  message(FATAL_ERROR "nvcc not found: ${NVCC}")
endif()
file(MAKE_DIRECTORY "${OUT}")
string(REPLACE "|" ";" sources "${SRC}")
set(all "")
foreach(src IN LISTS sources)
  execute_process(
    COMMAND "${NVCC}" -std=c++17 -O3 -Wno-deprecated-gpu-targets -I${INC} -Xptxas -v --threads 2
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 --cubin -o /dev/null "${src}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    # --cubin takes one architecture on some nvcc versions: a fatbin then
    execute_process(
      COMMAND "${NVCC}" -std=c++17 -O3 -Wno-deprecated-gpu-targets -I${INC} -Xptxas -v --threads 2
              -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 --fatbin
              -o "${OUT}/check_no_spills.fatbin" "${src}"
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nvcc failed on ${src} (${rc}):\n${out}${err}")
  endif()
  string(APPEND all "${out}${err}")
endforeach()
string(REPLACE "\n" ";" lines "${all}")
set(kernel "")
set(bad 0)
set(n 0)
foreach(l IN LISTS lines)
  if(l MATCHES "Compiling entry function '([^']+)' for '(sm_[0-9]+)'")
    set(kernel "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}")
    math(EXPR n "${n} + 1")
  elseif(l MATCHES "([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
    set(stack ${CMAKE_MATCH_1})
    set(st ${CMAKE_MATCH_2})
    set(ld ${CMAKE_MATCH_3})
    if(NOT st EQUAL 0 OR NOT ld EQUAL 0)
      set(bad 1)
      message("SPILL: ${kernel}: ${st} bytes spill stores, ${ld} bytes spill loads")
    endif()
    if(NO_STACK AND NOT stack EQUAL 0)
      set(bad 1)
      message("STACK: ${kernel}: ${stack} bytes stack frame")
    endif()
  elseif(l MATCHES "Used ([0-9]+) registers")
    message("${kernel}: ${CMAKE_MATCH_1} registers, stack ${stack}, spills ${st}/${ld}")
  endif()
endforeach()
if(n EQUAL 0)
  message(FATAL_ERROR "no ptxas report in the output:\n${all}")
endif()
if(bad)
  message(FATAL_ERROR "register spills or a stack frame (NO_STACK) in ${sources}")
endif()
message("${n} kernel compilations, no spills")
