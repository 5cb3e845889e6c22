/* The collective cases shared by the LOCAL and MPI tests (comm_cases.c). */
#ifndef GPA_TEST_COMM_CASES_H
#define GPA_TEST_COMM_CASES_H
#include "util/testutil.h"

typedef struct comm_case_env {
  gpa_actor *a;
  gpa_queue *q;
  gpa_comm *comm;
  int rank, size;
} comm_case_env;

/* Every case, as rank e->rank; every rank calls it at once. */
void comm_cases_run(const comm_case_env *e);
/* Every case on n (<= 4) ranks of one process, actors a and their comms c
 * (gpa_comm_init_all): a thread per rank on its actor's default queue;
 * then destroys the comms and the actors. */
void comm_cases_threads(gpa_actor **a, gpa_comm **c, int n);

#endif
