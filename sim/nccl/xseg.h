/* gpa-sim NCCL subset: the shared segment of a group whose ranks are in
 * several processes (layout; design in xproc.c). Each rank's fields are
 * written by that rank only, except `taken`, by the staged send's
 * receiver, and `failed`, claimed by one writer. */
#ifndef GPA_SIM_NCCL_XSEG_H
#define GPA_SIM_NCCL_XSEG_H
#include "internal.h"

#define XDATA_OFF ((size_t)1 << 16)

enum { X_ALIVE = 0, X_LEFT = 1 };

typedef struct xrank {
  _Atomic int32_t pid; /* 0: not joined */
  _Atomic int32_t state;
  _Atomic uint64_t posted; /* collectives whose input this rank staged */
  _Atomic uint64_t read;   /* collectives this rank finished reading */
  struct {
    int kind, dtype, op, root;
    uint64_t count;
  } desc; /* of the collective posted last, written before `posted` */
  _Atomic uint64_t sent; /* sends staged in this rank's send area */
  _Atomic uint64_t taken; /* of them, received */
  int32_t to, dtype;      /* the staged send's, written before `sent` */
  uint64_t bytes;
} xrank;

struct xseg {
  _Atomic uint64_t magic;
  int32_t nranks;
  _Atomic int32_t joined;
  _Atomic int32_t failed; /* 1: being written, 2: fail_why readable */
  char fail_why[200];
  xrank r[MAXR];
};
_Static_assert(sizeof(struct xseg) <= XDATA_OFF, "the header fits before the data");

/* rank's areas: its collective input, then its send */
static inline unsigned char *xarea(group *g, int rank, int which) {
  return g->xdata + (size_t)rank * (XCAP + XPCAP) + (which ? XCAP : 0);
}

#endif
