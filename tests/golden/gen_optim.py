#!/usr/bin/env python3
"""gen_optim.py - known answers for the optimizer kernels (compute/optim.h).

Writes tests/golden/optim_golden.h: for each case, a starting state (p, m,
v), the gradients of a few steps and the state after each step, as computed
here from PyTorch's formulas.  tests/unit/compute/test_optim_golden.c runs the
kernels on the same inputs and compares.  Standard library only; the output
is the same on every run (a fixed linear congruential generator makes the
data).  Regenerate with

    python3 tests/golden/gen_optim.py > tests/golden/optim_golden.h

The formulas are the algorithm boxes of the PyTorch documentation (amsgrad
and maximize off), for element i, step t = 1, 2, ... and gradient
g = raw gradient * grad_scale:

  torch.optim.Adam  (https://pytorch.org/docs/stable/generated/torch.optim.Adam.html)
      if wd != 0: g = g + wd p
      m = b1 m + (1 - b1) g
      v = b2 v + (1 - b2) g^2
      m_hat = m / (1 - b1^t);  v_hat = v / (1 - b2^t)
      p = p - lr m_hat / (sqrt(v_hat) + eps)
  torch.optim.AdamW (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html)
      p = p - lr wd p;  then Adam's lines without "g = g + wd p"
  torch.optim.SGD   (https://pytorch.org/docs/stable/generated/torch.optim.SGD.html)
      if wd != 0: g = g + wd p
      if mu != 0:
          b = g if t == 1 else mu b + (1 - dampening) g
          g = g + mu b if nesterov else b
      p = p - lr g
  torch.optim.Adagrad (https://pytorch.org/docs/stable/generated/torch.optim.Adagrad.html)
      clr = lr / (1 + (t - 1) lr_decay)
      if wd != 0: g = g + wd p
      sum = sum + g^2            (sum starts at initial_accumulator_value)
      p = p - clr g / (sqrt(sum) + eps)

Each is computed twice:
  reference()  exactly as written above, in double precision;
  emulated()   in float32, every operation rounded to float32 one at a time
               (a double result rounded to float32 is the correctly rounded
               float32 result for + - * / sqrt), in the order PyTorch 2.x's
               single-tensor code evaluates it: Adam's m as torch.lerp
               (m + w (g - m) for w = 1 - b1 < 0.5, else g - (g - m)(1 - w)),
               v = (v b2) + ((1 - b2) g) g, denom = sqrt(v) / sqrt(1 - b2^t)
               + eps, p = p - step_size (m / denom) with step_size = lr / (1 -
               b1^t); AdaGrad's p = p - clr (g / std).  Constants PyTorch
               computes in Python (bias corrections, step_size, 1 - b1, 1 -
               b2, 1 - lr wd, 1 - dampening, clr) are computed in double and
               rounded to float32 once, where PyTorch hands them to a float32
               tensor op.
The two must agree to 1e-5 (relative, or absolute below 1), or this script
stops: the float32 order is a faithful evaluation of the documented formula.
The header holds the emulated values, which are what an fp32 implementation
of that order gives bit for bit; the kernels are such an implementation.

Hyper-parameters are written as short decimals (0.999f); the kernels read a
float back as the shortest decimal that names it, so they see the same
doubles (0.999) as Python and PyTorch do.  Gradients are multiples of 1/64
below 2 in magnitude, exact in f16, bf16 and f32 alike, so one case checks
all three gradient types; about a third are zero (the Top-K pattern, and
element 2 is zero in every step: an element a sparse gradient never names).
"""

import math
import struct
import sys

N = 11      # elements per case: one 8-lane vector and a 3-element tail
STEPS = 3   # steps per case

ADAM, ADAMW, SGD, ADAGRAD = "KVF_OPT_ADAM", "KVF_OPT_ADAMW", "KVF_OPT_SGD", "KVF_OPT_ADAGRAD"


def f32(x):
    """x rounded to the nearest float32 (ties to even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Lcg:
    """Knuth's MMIX linear congruential generator, top 31 bits."""

    def __init__(self, seed):
        self.s = seed & (2**64 - 1)

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        return self.s >> 33

    def uniform(self, lo, hi):
        return lo + (hi - lo) * (self.next() / 2.0**31)


# ---- the documented formulas, in double --------------------------------

def reference(c, p, m, v, g, t):
    p, m, v = list(p), list(m), list(v)
    for i in range(N):
        gi = g[i] * c["grad_scale"]
        if c["kind"] in (ADAM, ADAMW):
            if c["kind"] == ADAMW:
                p[i] = p[i] - c["lr"] * c["weight_decay"] * p[i]
            elif c["weight_decay"] != 0:
                gi = gi + c["weight_decay"] * p[i]
            m[i] = c["beta1"] * m[i] + (1 - c["beta1"]) * gi
            v[i] = c["beta2"] * v[i] + (1 - c["beta2"]) * gi * gi
            m_hat = m[i] / (1 - c["beta1"] ** t)
            v_hat = v[i] / (1 - c["beta2"] ** t)
            p[i] = p[i] - c["lr"] * m_hat / (math.sqrt(v_hat) + c["eps"])
        elif c["kind"] == SGD:
            if c["weight_decay"] != 0:
                gi = gi + c["weight_decay"] * p[i]
            if c["momentum"] != 0:
                if t == 1:
                    m[i] = gi
                else:
                    m[i] = c["momentum"] * m[i] + (1 - c["dampening"]) * gi
                gi = gi + c["momentum"] * m[i] if c["nesterov"] else m[i]
            p[i] = p[i] - c["lr"] * gi
        else:
            clr = c["lr"] / (1 + (t - 1) * c["lr_decay"])
            if c["weight_decay"] != 0:
                gi = gi + c["weight_decay"] * p[i]
            v[i] = v[i] + gi * gi
            p[i] = p[i] - clr * gi / (math.sqrt(v[i]) + c["eps"])
    return p, m, v


# ---- the same, float32 one operation at a time (PyTorch's order) --------

def emulated(c, p, m, v, g, t):
    p, m, v = list(p), list(m), list(v)
    kind, lr, wd = c["kind"], c["lr"], c["weight_decay"]
    scale = f32(c["grad_scale"])
    l2 = f32(wd) if wd != 0 and kind != ADAMW else 0.0
    if kind in (ADAM, ADAMW):
        b1, b2 = c["beta1"], c["beta2"]
        decay = f32(1 - lr * wd) if kind == ADAMW and wd != 0 else 1.0
        w = f32(1 - b1)
        wc = f32(1 - w)
        small = abs(w) < 0.5
        b2f, omb2 = f32(b2), f32(1 - b2)
        step_size = f32(lr / (1 - b1 ** t))
        bc2_sqrt = f32(math.sqrt(1 - b2 ** t))
        eps = f32(c["eps"])
    elif kind == SGD:
        lrf, mom = f32(lr), f32(c["momentum"])
        omd = f32(1 - c["dampening"])
    else:
        clr = f32(lr / (1 + (t - 1) * c["lr_decay"]))
        eps = f32(c["eps"])
    for i in range(N):
        gi = f32(g[i] * scale)
        pi = p[i]
        if l2 != 0:
            gi = f32(gi + f32(l2 * pi))
        if kind in (ADAM, ADAMW):
            if decay != 1.0:
                pi = f32(pi * decay)
            if small:
                mi = f32(m[i] + f32(w * f32(gi - m[i])))
            else:
                mi = f32(gi - f32(f32(gi - m[i]) * wc))
            vi = f32(v[i] * b2f)
            vi = f32(vi + f32(f32(omb2 * gi) * gi))
            den = f32(f32(f32(math.sqrt(vi)) / bc2_sqrt) + eps)
            pi = f32(pi - f32(step_size * f32(mi / den)))
            m[i], v[i] = mi, vi
        elif kind == SGD:
            if mom != 0:
                if t == 1:
                    buf = gi
                else:
                    buf = f32(f32(m[i] * mom) + f32(omd * gi))
                m[i] = buf
                gi = f32(gi + f32(mom * buf)) if c["nesterov"] else buf
            pi = f32(pi - f32(lrf * gi))
        else:
            s = f32(v[i] + f32(gi * gi))
            std = f32(f32(math.sqrt(s)) + eps)
            v[i] = s
            pi = f32(pi - f32(clr * f32(gi / std)))
        p[i] = pi
    return p, m, v


def close(a, b):
    return all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for x, y in zip(a, b))


# ---- the cases ----------------------------------------------------------

def case(name, kind, **kw):
    c = dict(name=name, kind=kind, lr=0.01, beta1=0.9, beta2=0.999,
             eps=1e-8, weight_decay=0.0, momentum=0.0, dampening=0.0,
             nesterov=0, lr_decay=0.0, initial_accumulator_value=0.0,
             grad_scale=1.0, grad_mult=1, t0=1)
    c.update(kw)
    return c


CASES = [
    case("adam", ADAM),
    case("adam_wd", ADAM, weight_decay=0.01),
    case("adam_betas_eps_clip", ADAM, lr=0.05, beta1=0.8, beta2=0.99,
         eps=1e-6, weight_decay=0.01, grad_scale=0.37),
    case("adam_resume_t1000", ADAM, t0=1000),
    case("adam_small_betas", ADAM, beta1=0.3, beta2=0.5, eps=1e-3),
    case("adam_loss_scaled", ADAM, weight_decay=0.01, grad_mult=1024,
         grad_scale=1.0 / 1024),
    case("adamw", ADAMW, weight_decay=0.01),
    case("adamw_wd0.1_resume", ADAMW, lr=0.05, weight_decay=0.1, eps=1e-6,
         t0=7),
    case("adamw_wd0", ADAMW, weight_decay=0.0),
]
for mom, damp, nest in ((0.0, 0.0, 0), (0.0, 0.1, 0), (0.9, 0.0, 0),
                        (0.9, 0.1, 0), (0.9, 0.0, 1)):
    for wd in (0.0, 0.01):
        CASES.append(case("sgd_m%g_d%g_n%d_wd%g" % (mom, damp, nest, wd), SGD,
                          lr=0.1, momentum=mom, dampening=damp, nesterov=nest,
                          weight_decay=wd))
CASES.append(case("sgd_resume_t5", SGD, lr=0.1, momentum=0.9, dampening=0.1,
                  weight_decay=0.01, t0=5))
for lrd in (0.0, 0.01):
    for iav in (0.0, 0.1):
        for wd in (0.0, 0.01):
            CASES.append(case("adagrad_lrd%g_iav%g_wd%g" % (lrd, iav, wd),
                              ADAGRAD, lr=0.1, eps=1e-10, lr_decay=lrd,
                              initial_accumulator_value=iav, weight_decay=wd))
CASES.append(case("adagrad_resume_t3", ADAGRAD, lr=0.1, eps=1e-10,
                  lr_decay=0.5, weight_decay=0.01, t0=3))


def shortest(x):
    """The shortest decimal that names f32(x); it must read back as x."""
    for digits in range(1, 10):
        s = "%.*g" % (digits, f32(x))
        if f32(float(s)) == f32(x):
            assert float(s) == x, "%r is not a short decimal" % x
            return s if ("." in s or "e" in s) else s + ".0"
    raise AssertionError(x)


def hexf(x):
    """x (a float32 value) as an exact C hexadecimal float literal."""
    if x == 0:
        return "-0.0f" if math.copysign(1, x) < 0 else "0.0f"
    assert f32(x) == x
    mant, exp = float.hex(x).split("p")     # "-0x1.8000000000000", "-3"
    return "%sp%sf" % (mant.rstrip("0").rstrip("."), exp)


def arr(xs):
    return "{ " + ", ".join(hexf(x) for x in xs) + " }"


def make(c, rng):
    uses_m = c["kind"] in (ADAM, ADAMW) or (c["kind"] == SGD and c["momentum"] != 0)
    uses_v = c["kind"] in (ADAM, ADAMW, ADAGRAD)
    p = [f32(rng.uniform(-1, 1)) for _ in range(N)]
    m = [0.0] * N
    v = [f32(c["initial_accumulator_value"])] * N if c["kind"] == ADAGRAD else [0.0] * N
    if c["t0"] > 1:    # resumed: a state some earlier steps left
        m = [f32(rng.uniform(-0.5, 0.5)) if uses_m else 0.0 for _ in range(N)]
        v = [f32(rng.uniform(0, 0.5)) if uses_v else 0.0 for _ in range(N)]
    grads = []
    for _ in range(STEPS):
        g = []
        for i in range(N):
            k = rng.next() % 255 - 127           # -127 .. 127
            if i == 2 or rng.next() % 3 == 0:
                k = 0
            g.append(float(k * c["grad_mult"]) / 64)
        grads.append(g)
    start = (p, m, v)
    after = []
    ref = (p, m, v)
    for s in range(STEPS):
        t = c["t0"] + s
        p, m, v = emulated(c, p, m, v, grads[s], t)
        ref = reference(c, *ref, grads[s], t)
        for got, want, what in zip((p, m, v), ref, "pmv"):
            if not close(got, want):
                sys.exit("%s step %d: %s float32 %r double %r" %
                         (c["name"], t, what, got, want))
        after.append((p, m, v))
    return start, grads, after


def main():
    out = sys.stdout
    out.write("""/*
 * optim_golden.h - known answers for the optimizer kernels, written by
 * tests/golden/gen_optim.py (see there for the formulas; do not edit):
 *   python3 tests/golden/gen_optim.py > tests/golden/optim_golden.h
 * Each case: hyper-parameters, the step number t0 of the first step, the
 * starting state, the raw gradient of each step (multiples of 1/64, exact
 * in f16, bf16 and f32), and the state after each step.  Arrays a rule
 * does not keep stay zero.
 */
#ifndef KVF_TESTS_OPTIM_GOLDEN_H
#define KVF_TESTS_OPTIM_GOLDEN_H

#include <stdint.h>

#include "kvflash.h"

#define OPTIM_GOLDEN_N %d     /* elements per case */
#define OPTIM_GOLDEN_STEPS %d /* steps per case */

struct optim_golden {
	const char *name;       /* what the case covers */
	kvf_opt_kind kind;      /* update rule */
	float lr, beta1, beta2, eps, weight_decay;         /* torch's names */
	float momentum, dampening;                         /* SGD */
	uint32_t nesterov;                                 /* SGD */
	float lr_decay, initial_accumulator_value;         /* AdaGrad */
	float grad_scale;       /* kvc_optim_step_prepare's factor */
	uint64_t t0;            /* step number of the first step */
	float p0[OPTIM_GOLDEN_N], m0[OPTIM_GOLDEN_N], v0[OPTIM_GOLDEN_N];
	float g[OPTIM_GOLDEN_STEPS][OPTIM_GOLDEN_N]; /* raw gradients */
	float p[OPTIM_GOLDEN_STEPS][OPTIM_GOLDEN_N]; /* after each step */
	float m[OPTIM_GOLDEN_STEPS][OPTIM_GOLDEN_N];
	float v[OPTIM_GOLDEN_STEPS][OPTIM_GOLDEN_N];
};

static const struct optim_golden optim_golden[] = {
""" % (N, STEPS))
    rng = Lcg(20240607)
    for c in CASES:
        (p0, m0, v0), grads, after = make(c, rng)
        out.write("\t{ \"%s\", %s,\n" % (c["name"], c["kind"]))
        out.write("\t  %sf, %sf, %sf, %sf, %sf,\n" % tuple(
            shortest(c[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay")))
        out.write("\t  %sf, %sf, %d, %sf, %sf, %s, %d,\n" % (
            shortest(c["momentum"]), shortest(c["dampening"]), c["nesterov"],
            shortest(c["lr_decay"]), shortest(c["initial_accumulator_value"]),
            hexf(f32(c["grad_scale"])), c["t0"]))
        for a in (p0, m0, v0):
            out.write("\t  %s,\n" % arr(a))
        for k, rows in (("g", grads), ("p", [a[0] for a in after]),
                        ("m", [a[1] for a in after]), ("v", [a[2] for a in after])):
            out.write("\t  { " + ",\n\t    ".join(arr(r) for r in rows) + " },\n")
        out.write("\t},\n")
    out.write("};\n\n#endif /* KVF_TESTS_OPTIM_GOLDEN_H */\n")


if __name__ == "__main__":
    main()
