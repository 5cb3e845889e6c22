/* The benchmark table. One line per benchmark; each bench_*.c file defines its
 * functions. Conditional entries are guarded by the macro its CMake sets. */
#ifndef GPA_BENCH_LIST_H
#define GPA_BENCH_LIST_H
#include "bench.h"

void gpa_bench_mailbox_async(void);
void gpa_bench_mailbox_roundtrip(void);
void gpa_bench_mailbox_memory(void);
#ifdef GPA_BENCH_SIM
void gpa_bench_sim_layernorm(void);
#endif

static const gpa_bench_entry gpa_benches[] = {
    {"mailbox_async", gpa_bench_mailbox_async},
    {"mailbox_roundtrip", gpa_bench_mailbox_roundtrip},
    {"mailbox_memory", gpa_bench_mailbox_memory},
#ifdef GPA_BENCH_SIM
    {"sim_layernorm", gpa_bench_sim_layernorm},
#endif
};
#endif
