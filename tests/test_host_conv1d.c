/* kernels/host/conv1d.c run directly, on 1, 2 and 3 threads (a pool, as the
 * host backend's): forward and backward against a double reference on
 * shapes large enough to be split over the threads (by positions forward,
 * by input channels backward; units that do not divide evenly, groups,
 * stride, dilation, causal and symmetric padding, with and without bias;
 * the direct forward (its AVX-512F and AVX2 kernels), the shift path (forced
 * for the forward too), im2col (also forced on the stride-1 cases) and
 * direct 1x1 paths), the same bits on a second run, and the im2col memory bound: the scratch the
 * kernels ask for stays within GPA__CONV1D_SCRATCH_CAP for inputs whose
 * whole column matrix is far larger (over 10^12 bytes), and the kernels
 * write nothing past the scratch they asked for (a guard after it; ASan
 * sees the exact size too). Channels last (geom.nlc) on every path (its
 * dW units on tgemm and on the BLAS): the same values re-laid, the results
 * re-laid back against the same reference. Device independent. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/conv1d.h"
#include "kernels/host/conv1d_direct.h"
#include "kernels/host/pool.h"
#include "kernels/host/tgemm.h"
#include "util/nn_test.h"
#include "util/testutil.h"

#define GUARD 4096
#define GUARD_BITS 0x7fc12345u /* a NaN no kernel writes */

typedef struct ccase {
  int64_t B, Cin, L, Cout, K, stride, pad_l, pad_r, dilation, groups;
  int nobias; /* no b in the forward, no db in the backward */
} ccase;

/* Reference sums and magnitudes (sum of |terms|) of y, dx, dW, db. */
typedef struct cref {
  double *y, *ym, *dx, *dxm, *dW, *dWm, *db, *dbm;
} cref;

static void reference(const gpa__conv1d_geom *g, const float *x, const float *W, const float *b, const float *dy,
                      cref *r) { /* b: NULL for none */
  int64_t cg = g->Cin / g->groups, og = g->Cout / g->groups;
  for (int64_t bi = 0; bi < g->B; bi++)
    for (int64_t co = 0; co < g->Cout; co++)
      for (int64_t t = 0; t < g->Lout; t++) {
        int64_t yi = (bi * g->Cout + co) * g->Lout + t;
        double s = b ? b[co] : 0.0, m = fabs(s), d = dy[yi];
        r->db[co] += d;
        r->dbm[co] += fabs(d);
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t k = 0; k < g->K; k++) {
            int64_t pos = t * g->stride - g->pad_l + k * g->dilation;
            if (pos < 0 || pos >= g->L) continue;
            int64_t xi = (bi * g->Cin + co / og * cg + ci) * g->L + pos, wi = (co * cg + ci) * g->K + k;
            double v = (double)W[wi] * x[xi];
            s += v;
            m += fabs(v);
            r->dx[xi] += d * W[wi];
            r->dxm[xi] += fabs(d * W[wi]);
            r->dW[wi] += d * x[xi];
            r->dWm[wi] += fabs(d * x[xi]);
          }
        r->y[yi] = s;
        r->ym[yi] = m;
      }
}

static void close_to(const char *what, const ccase *c, int im2col, int threads, const float *got, const double *ref,
                     const double *mag, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - ref[i]) <= 1e-5 * 1.5 * mag[i] + 1e-30)) {
      fprintf(stderr,
              "%s off at %lld: %.9g vs %.9g (B=%lld Cin=%lld L=%lld Cout=%lld K=%lld s=%lld pad=%lld+%lld "
              "dil=%lld g=%lld%s, %d threads)\n",
              what, (long long)i, got[i], ref[i], (long long)c->B, (long long)c->Cin, (long long)c->L,
              (long long)c->Cout, (long long)c->K, (long long)c->stride, (long long)c->pad_l, (long long)c->pad_r,
              (long long)c->dilation, (long long)c->groups, im2col ? ", im2col" : "", threads);
      exit(1);
    }
}

/* Scratch of exactly the asked size, a NaN guard after it. */
static float *scratch_new(uint64_t bytes) {
  CHECK(bytes <= GPA__CONV1D_SCRATCH_CAP);
  float *s = malloc((size_t)bytes + GUARD * sizeof(float));
  CHECK(s);
  uint32_t bits = GUARD_BITS;
  for (int64_t i = 0; i < GUARD; i++) memcpy((char *)s + bytes + (size_t)i * sizeof(float), &bits, sizeof bits);
  return s;
}
static void scratch_check(float *s, uint64_t bytes) {
  for (int64_t i = 0; i < GUARD; i++) {
    uint32_t bits;
    memcpy(&bits, (char *)s + bytes + (size_t)i * sizeof(float), sizeof bits);
    CHECK(bits == GUARD_BITS); /* written past the scratch it asked for */
  }
  free(s);
}

/* [B][C][L] <-> [B][L][C] in place (to 1: into [B][L][C]), through a copy */
static void relayout(float *p, int64_t B, int64_t C, int64_t L, int to) {
  float *t = malloc((size_t)(B * C * L + 1) * 4);
  CHECK(t != NULL);
  memcpy(t, p, (size_t)(B * C * L) * 4);
  gpa_nt_relayout(p, t, B, C, L, to);
  free(t);
}

/* A case's inputs (fixed seeds) and their reference, built once for every
 * path it runs: the double reference is most of this test's time, under
 * TSan ~15x a plain build's (89 s of ctest's 120 s limit in CI). */
typedef struct cdata {
  gpa__conv1d_geom g; /* channels first, every path its default */
  int64_t nx, nw, ny;
  float *x, *W, *b, *dy;
  cref r;
} cdata;

static void case_data(const ccase *c, cdata *d) {
  gpa__conv1d_geom g = {c->B, c->Cin, c->L, c->Cout, c->K, c->stride, c->pad_l, c->pad_r, c->dilation, c->groups, 0,
                        0, 0, 0};
  CHECK(gpa__conv1d_geom_init(&g));
  d->g = g;
  d->nx = g.B * g.Cin * g.L, d->nw = g.Cout * (g.Cin / g.groups) * g.K, d->ny = g.B * g.Cout * g.Lout;
  d->x = malloc((size_t)d->nx * 4), d->W = malloc((size_t)d->nw * 4), d->b = malloc((size_t)g.Cout * 4);
  d->dy = malloc((size_t)d->ny * 4);
  CHECK(d->x && d->W && d->b && d->dy);
  gpa_nt_fill(d->x, d->nx, -0.5, 0.5, &(uint64_t){1});
  gpa_nt_fill(d->W, d->nw, -0.5, 0.5, &(uint64_t){2});
  gpa_nt_fill(d->b, g.Cout, -0.5, 0.5, &(uint64_t){3});
  gpa_nt_fill(d->dy, d->ny, -0.5, 0.5, &(uint64_t){4});
  double **all[8] = {&d->r.y, &d->r.ym, &d->r.dx, &d->r.dxm, &d->r.dW, &d->r.dWm, &d->r.db, &d->r.dbm};
  int64_t sizes[8] = {d->ny, d->ny, d->nx, d->nx, d->nw, d->nw, g.Cout, g.Cout};
  for (int i = 0; i < 8; i++) CHECK((*all[i] = calloc((size_t)sizes[i], sizeof(double))) != NULL);
  if (c->nobias) d->b[0] = NAN; /* must not be read */
  reference(&g, d->x, d->W, c->nobias ? NULL : d->b, d->dy, &d->r);
}

static void case_data_free(cdata *d) {
  double *all[8] = {d->r.y, d->r.ym, d->r.dx, d->r.dxm, d->r.dW, d->r.dWm, d->r.db, d->r.dbm};
  for (int i = 0; i < 8; i++) free(all[i]);
  free(d->x), free(d->W), free(d->b), free(d->dy);
}

/* mode 1: force the im2col path (stride 1 takes the direct forward and the
 * shift backward by default); mode 2: the shift path's forward instead of
 * the direct kernel. nlc: channels last (x, dy re-laid before, y, dx back
 * after). */
static void run_case(const ccase *c, const cdata *d, const gpa__par *pars[], int npar, int mode, int nlc) {
  int im2col = mode == 1;
  gpa__conv1d_geom g = d->g;
  g.im2col = im2col, g.no_direct = mode == 2, g.nlc = nlc;
  CHECK(gpa__conv1d_geom_init(&g));
  const int64_t nx = d->nx, nw = d->nw, ny = d->ny;
  const cref r = d->r;
  float *x = malloc((size_t)nx * 4), *dy = malloc((size_t)ny * 4), *y = malloc((size_t)ny * 4);
  float *dx = malloc((size_t)nx * 4), *dW = malloc((size_t)nw * 4), *db = malloc((size_t)g.Cout * 4);
  float *y2 = malloc((size_t)ny * 4), *dx2 = malloc((size_t)nx * 4), *dW2 = malloc((size_t)nw * 4);
  CHECK(x && dy && y && dx && dW && db && y2 && dx2 && dW2);
  const float *W = d->W, *b = d->b;
  memcpy(x, d->x, (size_t)nx * 4);
  memcpy(dy, d->dy, (size_t)ny * 4);
  if (nlc) {
    relayout(x, g.B, g.Cin, g.L, 1);
    relayout(dy, g.B, g.Cout, g.Lout, 1);
  }
  for (int pi = 0; pi < npar; pi++) {
    const gpa__par *par = pars[pi];
    int th = par ? par->threads : 1;
    for (int rep = 0; rep < 2; rep++) {
      float *yy = rep ? y2 : y, *dxx = rep ? dx2 : dx, *dWW = rep ? dW2 : dW;
      memset(yy, 0xff, (size_t)ny * 4); /* NaNs: every element must be written */
      memset(dxx, 0xff, (size_t)nx * 4);
      memset(dWW, 0xff, (size_t)nw * 4);
      uint64_t fb = gpa__conv1d_scratch_bytes(&g, 0, par), bb = gpa__conv1d_scratch_bytes(&g, 1, par);
      float *s = scratch_new(fb);
      gpa__conv1d_fwd(par, &g, x, W, c->nobias ? NULL : b, yy, s);
      scratch_check(s, fb);
      s = scratch_new(bb);
      gpa__conv1d_bwd(par, &g, dy, x, W, dxx, dWW, c->nobias ? NULL : db, s);
      scratch_check(s, bb);
      if (nlc) {
        relayout(yy, g.B, g.Cout, g.Lout, 0);
        relayout(dxx, g.B, g.Cin, g.L, 0);
      }
    }
    close_to(nlc ? "y (nlc)" : "y", c, im2col, th, y, r.y, r.ym, ny);
    close_to(nlc ? "dx (nlc)" : "dx", c, im2col, th, dx, r.dx, r.dxm, nx);
    close_to(nlc ? "dW (nlc)" : "dW", c, im2col, th, dW, r.dW, r.dWm, nw);
    if (!c->nobias) close_to(nlc ? "db (nlc)" : "db", c, im2col, th, db, r.db, r.dbm, g.Cout);
    CHECK(!memcmp(y, y2, (size_t)ny * 4) && !memcmp(dx, dx2, (size_t)nx * 4) && !memcmp(dW, dW2, (size_t)nw * 4));
  }
  free(x), free(dy), free(y), free(dx), free(dW), free(db), free(y2), free(dx2), free(dW2);
}

/* The bound on inputs far too large to run: the whole column matrix would
 * be B*Cin*K*Lout floats. */
static void bound(const gpa__par *pars[], int npar) {
  const ccase big[] = {
      {64, 1024, 1 << 20, 1024, 9, 1, 4, 4, 1, 1, 0},   /* 2.4e12 bytes of columns */
      {8, 4096, 100000, 64, 3, 2, 1, 1, 1, 1, 0},       /* stride 2 */
      {1, 4096, 1 << 22, 4096, 3, 1, 2, 0, 1, 4096, 0}, /* depthwise, one long sequence */
      {3, 300, 77777, 600, 5, 1, 8, 8, 4, 3, 0},        /* dilation, groups */
      {4, 2048, 50000, 2048, 3, 1, 1, 1, 1, 1, 0},      /* stride 1, W of 48 MB: im2col */
  };
  gpa__par wide = {pars[npar - 1]->pfor, pars[npar - 1]->self, 64}; /* a 64-thread plan (not run) */
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    const ccase *c = &big[i];
    gpa__conv1d_geom g = {c->B, c->Cin, c->L, c->Cout, c->K, c->stride, c->pad_l, c->pad_r, c->dilation, c->groups, 0, 0, 0, 0};
    CHECK(gpa__conv1d_geom_init(&g));
    double whole = (double)g.B * (double)(g.Cin * g.K) * (double)g.Lout * 4.0;
    CHECK(whole > 64.0 * (double)GPA__CONV1D_SCRATCH_CAP);
    for (int pi = 0; pi <= npar; pi++) {
      const gpa__par *par = pi < npar ? pars[pi] : &wide;
      for (int bwd = 0; bwd < 4; bwd++) {
        g.im2col = bwd >> 1; /* and with im2col forced */
        uint64_t s = gpa__conv1d_scratch_bytes(&g, bwd & 1, par);
        if (s > GPA__CONV1D_SCRATCH_CAP) {
          fprintf(stderr, "conv1d scratch %llu bytes > cap (case %zu, bwd %d, %d threads)\n", (unsigned long long)s,
                  i, bwd, par ? par->threads : 1);
          exit(1);
        }
      }
    }
  }
}

int main(void) {
  gpa__pool *p2 = gpa__pool_create(2), *p3 = gpa__pool_create(3);
  CHECK(p2 && p3);
  gpa__par par2 = gpa__pool_par(p2), par3 = gpa__pool_par(p3);
  const gpa__par *pars[3] = {NULL, &par2, &par3};
  const ccase cases[] = {
      /* B Cin L Cout K stride pad_l pad_r dil groups nobias */
      /* stride 1 (the shift path): the bench's form, smaller; split by positions / channels */
      {1, 64, 1000, 48, 3, 1, 1, 1, 1, 1, 0},
      {1, 64, 1000, 48, 3, 1, 1, 1, 1, 1, 1},   /* no bias: the centre tap first with beta 0 */
      {2, 48, 900, 36, 4, 1, 9, 0, 3, 3, 1},    /* causal dilated, 3 groups, no bias: last tap first */
      {3, 30, 800, 20, 5, 1, 7, 7, 2, 1, 1},    /* wide padding: no tap covers every output (zeroed first) */
      {1, 40, 1200, 30, 1, 1, 2, 3, 1, 1, 0},   /* K = 1 with padding (W used as is) */
      {1, 33, 1500, 20, 1, 1, 0, 0, 1, 1, 0},   /* the direct 1x1 path, odd channels */
      /* im2col: stride > 1, or W too large to repack (9.4 MB) */
      {3, 40, 700, 24, 5, 2, 3, 2, 2, 1, 0},    /* 3 batches over 2 threads: positions split to even units */
      {1, 7, 4000, 70, 3, 3, 1, 1, 1, 1, 1},    /* fewer channels than threads x 2 */
      {1, 512, 20, 512, 9, 1, 4, 4, 1, 1, 0},
      /* past the cap: the whole column matrix is 96*3*30000*4 = 35 MB, so it is built in chunks */
      {1, 96, 60000, 4, 3, 2, 2, 2, 2, 2, 0},
      {2, 64, 40000, 6, 3, 1, 1, 1, 1, 1, 0},   /* stride 1 at that size: no column matrix at all */
      /* the shift path's dynamic units: chunks of positions (forward and dx), blocks of output channels (dW) */
      {8, 32, 1024, 40, 3, 1, 8, 0, 4, 1, 0},   /* the bench's causal dilated form, smaller: 4 chunks per batch */
      {32, 24, 128, 24, 3, 1, 2, 0, 1, 1, 0},   /* the main job's form (B32, L128), smaller channels */
      {2, 40, 600, 160, 3, 1, 1, 1, 1, 2, 0},   /* 80 outputs per group: dW blocks of 48 and 32 */
      {2, 40, 600, 160, 3, 1, 1, 1, 1, 2, 1},   /* the same without bias */
      {1, 16, 700, 150, 3, 1, 300, 300, 1, 1, 0}, /* whole chunks of outputs read only padding (bias alone) */
      {2, 8, 10, 12, 3, 1, 40, 0, 20, 1, 0},    /* causal, dilation past L: two taps never read x (dW 0) */
      {1, 20, 3000, 20, 2, 1, 0, 600, 700, 1, 1}, /* right padding only: dx chunks no tap covers whole */
  };
  /* Per case: channels first and last on its default path, the forced
   * paths (im2col on the first five, the shift forward on stride 1 cases,
   * channels last only for the first five), then the direct forward's AVX2
   * kernel where the CPU also has AVX-512F (with tgemm capped at AVX2 too,
   * the channels-last dW units of small channel counts take the BLAS, as
   * every such unit does on an AVX2 CPU), half of the cases channels last. */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const ccase *c = &cases[i];
    cdata d;
    case_data(c, &d);
    for (int nlc = 0; nlc < 2; nlc++) {
      run_case(c, &d, pars, 3, 0, nlc);
      if (i < 5) run_case(c, &d, pars, 3, 1, nlc);
      if (c->stride == 1 && (!nlc || i < 5)) run_case(c, &d, pars, 3, 2, nlc);
    }
    if (c->stride == 1) {
      gpa__conv1d_direct_avx2_only(1);
      gpa__tgemm_isa(1);
      run_case(c, &d, pars, 3, 0, i % 2);
      gpa__conv1d_direct_avx2_only(0);
      gpa__tgemm_isa(0);
    }
    case_data_free(&d);
  }
  bound(pars, 3);
  gpa__pool_destroy(p2);
  gpa__pool_destroy(p3);
  printf("host_conv1d: ok\n");
  return 0;
}
