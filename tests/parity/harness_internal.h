/* Internals shared by the parity harness's files (harness.c: specs, data,
 * runs and comparisons; harness_grad.c: finite-difference gradients). Not
 * for tests. */
#ifndef GPA_TESTS_PARITY_HARNESS_INTERNAL_H
#define GPA_TESTS_PARITY_HARNESS_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "actor/registry.h"
#include "tests/parity/harness.h"

struct gpa_parity {
  const char *suite;
  gpa_actor *actor;
  gpa_queue *q;
  const char *backend;
  gpa_registry reg;
  int reg_ok;
  int failures, passes;
  int actor_ok, unsupported; /* actor runs that ran / that the backend lacks */
  char skip_reason[256];
};

/* raw (the op's bytes) + d (the same values in double) */
typedef struct pdata {
  void *raw;
  double *d;
  int64_t n;
} pdata;

typedef struct pset {
  pdata in[GPA_PMAX], out[GPA_PMAX], ref[GPA_PMAX];
} pset;

int64_t gpa_pi_pt_numel(const gpa_pt *t);
uint64_t gpa_pi_pt_bytes(const gpa_pt *t);
uint64_t gpa_pi_rng_next(uint64_t *s);
double gpa_pi_rng_unit(uint64_t *s);
double gpa_pi_raw_get(const void *raw, int dtype, int64_t i);
void gpa_pi_raw_set(void *raw, int dtype, int64_t i, double v);
void gpa_pi_pdata_alloc(pdata *x, const gpa_pt *t);
void gpa_pi_pdata_free(pdata *x);
void gpa_pi_copy_pdata(pdata *dst, const pdata *src, const gpa_pt *t);
void gpa_pi_fill(pdata *x, const gpa_pt *t, uint64_t *rng);
uint64_t gpa_pi_case_seed(const gpa_pcase *c);
void gpa_pi_fmt_case(char *buf, size_t size, const gpa_pcase *c);
void gpa_pi_pset_free(pset *s);
/* Outputs' initial bytes: NaN poison, generated data, or the aliased input. */
void gpa_pi_init_outputs(const gpa_pcase *c, pset *s, uint64_t *rng);
/* A case's data from rng: its inputs generated, then its outputs' initial
 * bytes (gpa_pi_init_outputs); gpa_pi_pset_free releases them. */
void gpa_pi_pset_make(const gpa_pcase *c, pset *s, uint64_t *rng);
/* The reference on s's inputs into ref[] (started from the outputs' initial values). */
void gpa_pi_run_ref(const gpa_pcase *c, pset *s, pdata *ref);
/* The host implementation, inline (env NULL); outs hold initial bytes in, results out. */
gpa_status gpa_pi_run_direct(gpa_parity *p, const gpa_pcase *c, pdata *ins, pdata *outs, char *msg, size_t ms);
/* Direct and actor runs compared with s->ref; 1 if all passed. */
int gpa_pi_run_and_compare(gpa_parity *p, const gpa_pcase *c, pset *s);

#endif
