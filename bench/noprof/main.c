/* The profile step on its own, for gpa-bench's profile_overhead and for
 * instruction counts under callgrind (bench/profile_callgrind.sh). Built
 * twice: gpa-bench-noprof against a library with GPA_NO_PROFILING, and
 * gpa-bench-step against the normal one, where GPA_TRACE / GPA_PROFILE in
 * the environment switch profiling on. Prints the best ns per step. */
#include <stdio.h>
#include <stdlib.h>

#include "../profile_step.h"

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 20, reps = argc > 2 ? atoi(argv[2]) : 5;
  gpa_actor *a;
  if (gpa_actor_create(NULL, &a) != GPA_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], gpa_last_error_message());
    return 1;
  }
  gpa_pstep *p = gpa_pstep_new(a);
  printf("%.1f\n", gpa_pstep_best_ns(p, steps, reps));
  gpa_pstep_free(p);
  gpa_actor_destroy(a);
  return 0;
}
