#!/usr/bin/env python3
"""Fits the rational exp used by the host GELU forward kernels
(kernels/host/gelu.c):

    e^r ~ (E + r) / (E - r),  E = 2 + c r^2,  |r| <= ln2 / 2,

after the usual reduction s = k ln2 + r (2^k goes into the exponent bits).
The form is e^r's own symmetry e^-r = 1 / e^r, so numerator and
denominator share E: one multiply (r^2) and one FMA give both, where a
degree-5 polynomial takes five FMAs; the kernels fold the one division into
the division they already have. c = 1/6 is the [2/2] Pade approximant
(7.0e-6 relative at ln2/2); the one free parameter is chosen here for the
smallest maximum relative error (golden-section search on the max over a
grid; the error is odd in r, so [0, ln2/2] suffices, widened a little for
k's rounding). Prints c, the error with c in double and rounded to float,
and the Pade error for comparison.

Usage: scripts/fit_gelu_exp.py   (needs mpmath)
"""
import struct

import mpmath as mp

mp.mp.dps = 30
H = mp.log(2) / 2 * (1 + mp.mpf("1e-5"))


def f32(x):
    return mp.mpf(struct.unpack("f", struct.pack("f", float(x)))[0])


def rel_err(c, r):
    e = 2 + c * r * r
    return (e + r) / ((e - r) * mp.exp(r)) - 1


def max_err(c, n=400):
    return max(abs(rel_err(c, H * i / n)) for i in range(n + 1))


def main():
    lo, hi = mp.mpf(1) / 6 - mp.mpf("0.01"), mp.mpf(1) / 6 + mp.mpf("0.01")
    for _ in range(80):
        m1, m2 = lo + (hi - lo) * mp.mpf("0.382"), lo + (hi - lo) * mp.mpf("0.618")
        if max_err(m1) < max_err(m2):
            hi = m2
        else:
            lo = m1
    c = (lo + hi) / 2
    print("c = %.17g (float %.9e)" % (float(c), float(f32(c))))
    print("max relative error on |r| <= ln2/2: %.3e; %.3e with c in float; Pade (c = 1/6) %.3e"
          % (max_err(c, 3000), max_err(f32(c), 3000), max_err(mp.mpf(1) / 6, 3000)))


if __name__ == "__main__":
    main()
