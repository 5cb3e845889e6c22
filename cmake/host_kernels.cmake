# Per-file flags of the basic op library's host kernels (kernels/host/):
# -O3 and -fno-math-errno. Their loops are written for the vectorizer's full
# cost model; at -O2 gcc's "very cheap" model leaves most of them scalar
# (about 2x slower on layernorm, gelu and cross-entropy). Without
# -fno-math-errno a sqrtf in a loop (AdamW) cannot be vectorized (errno on a
# negative input); the kernels never read errno. attention: its row loops
# around the tile GEMMs (rescaling O, 1/l, the dk/dv scaling) vectorize at
# -O3 (3% fewer instructions, fwd+bwd S=1024 D=128; no reductions are
# reordered, so the same bits). gelu, with gcc: also the first scheduling
# pass (off by default on x86), which interleaves the four independent
# vectors of each loop step; without it gcc emits one vector's long
# dependency chain after the other, and the core's scheduler fills with the
# first chain's waiting operations (3-6% fewer cycles per element with the
# data in L2, docs/benchmarks.md; the same instructions, so the same bits).
# Included from the root CMakeLists.txt;
# only sets source properties, so it may be included before or after the
# targets are defined (same directory).
foreach(gpa_k elementwise gelu layernorm embedding metrics optim vmath attention)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/kernels/host/${gpa_k}.c PROPERTIES COMPILE_OPTIONS "-O3;-fno-math-errno")
endforeach()
set_property(SOURCE ${CMAKE_SOURCE_DIR}/kernels/host/gelu.c APPEND PROPERTY COMPILE_OPTIONS
             "$<$<C_COMPILER_ID:GNU>:-fschedule-insns>" "$<$<C_COMPILER_ID:GNU>:-fsched-pressure>")
