#!/usr/bin/env python3
"""Fits the rational approximation of the Mills ratio used by the host GELU
kernels (kernels/host/gelu.c, erf form):

    R(a) = Phi(-a) / phi(a) = P(a) / Q(a),  a in [0, A],

P of degree m, Q monic of degree n, for small *relative* error. Method:
linearized least squares (P - R Q = 0, each row divided by R times the
previous iterate's Q, so it measures relative error), repeated, with
Lawson's reweighting on top to approach the minimax error. The printed
error is measured on a fine grid with the coefficients rounded to float.

Usage: scripts/fit_gelu_mills.py [m n [A]]   (default 3 4 13.2; needs mpmath)
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 30


def f32(x):
    return mp.mpf(struct.unpack("f", struct.pack("f", float(x)))[0])


def horner(c, a):
    s = mp.mpf(0)
    for cc in reversed(c):
        s = s * a + cc
    return s


def mills(a):
    return mp.erfc(a / mp.sqrt(2)) / 2 * mp.sqrt(2 * mp.pi) * mp.exp(a * a / 2)


def fit(m, n, A, iters=60):
    N = 12 * (m + n + 2)
    pts = [A / 2 + A / 2 * mp.cos(mp.pi * (k + 0.5) / N) for k in range(N)] + [mp.mpf(0), A]
    rv = [mills(a) for a in pts]
    q = [mp.binomial(n, j) for j in range(n + 1)]  # (1 + a)^n to start
    wt = [mp.mpf(1)] * len(pts)
    best = None
    for it in range(iters):
        qp = [horner(q, a) for a in pts]
        rows, rhs = [], []
        for i, a in enumerate(pts):
            sc = mp.sqrt(wt[i]) / (rv[i] * qp[i])
            rows.append([a**j * sc for j in range(m + 1)] + [-rv[i] * a**j * sc for j in range(n)])
            rhs.append(rv[i] * a**n * sc)
        M, b = mp.matrix(rows), mp.matrix(rhs)
        sol = mp.lu_solve(M.T * M, M.T * b)
        p = [sol[j] for j in range(m + 1)]
        q = [sol[m + 1 + j] for j in range(n)] + [mp.mpf(1)]
        err = [abs(horner(p, a) / horner(q, a) / rv[i] - 1) for i, a in enumerate(pts)]
        if best is None or max(err) < best[0]:
            best = (max(err), p[:], q[:])
        if it >= 5:
            s = sum(w * e for w, e in zip(wt, err))
            wt = [w * e / s * len(pts) for w, e in zip(wt, err)]
    return best


def main():
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    A = mp.mpf(sys.argv[3]) if len(sys.argv) > 3 else mp.mpf("13.2")
    e, p, q = fit(m, n, A)
    pf, qf = [f32(x) for x in p], [f32(x) for x in q]
    worst, at = 0, 0
    for i in range(3001):
        a = A * i / 3000
        r = abs(horner(pf, a) / horner(qf, a) / mills(a) - 1)
        if r > worst:
            worst, at = r, a
    print("(%d,%d) on [0, %s]: relative error %.3e; %.3e with float coefficients (at a = %.3f)"
          % (m, n, mp.nstr(A, 6), e, worst, at))
    print("mills_p = {%s}" % ", ".join("%.9ef" % float(x) for x in p))
    print("mills_q = {%s}  (monic: the leading 1 is implicit)" % ", ".join("%.9ef" % float(x) for x in q[:-1]))
    print("poles:", ", ".join("%.4g%+.4gi" % (r.real, r.imag) for r in (complex(z) for z in mp.polyroots(list(reversed(q))))))


if __name__ == "__main__":
    main()
