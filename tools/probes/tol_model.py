#!/usr/bin/env python3
"""The 16-bit forward kernel's softmax arithmetic in numpy, against the tolerance rule
(tools/common/tolerance.h), without a GPU.

The model follows the kernel's documented order (src/codegen/softmax.c): key blocks of block_n
from the last to the first; each warp's 16 rows keep their max unless one of them grows by more
than 8 in the exp2 domain (cond_rescale, FA4's conditional rescale, voted over the warp); p =
2^(s·c - off) with off the max times c rounded to fp32; P rounded to bf16 (round to nearest even)
before the PV product; the row sum l from the unrounded p plus, once a block, the block max's
own rounding (the l correction); O = acc / l rounded to bf16. The emulated reference is the
library's (src/runtime/reference_kernel.c, emulate_dtype 1): P = exp(s - m_final) rounded to
bf16, l unrounded, O rounded.

Modes:
  --check-case   regenerates fa3-gen check --all's inputs for one case (host_rng: splitmix64 and
                 Box-Muller, tools/common/numerics.c; pools sized for --all's largest dense case)
                 and prints err_o, err_emul and the rule's ratio. Session 29: the case
                 "hd256 bf16 none h6/3 b2 sq=1000 sk=257" of seed 1795599281325196 failed on the
                 H100 at err_o 5.552e-03, tol 5.521e-03; the model gives 5.5524e-03 and 5.5202e-03.
  --dist N       N fresh N(0,1) samples of the shape: the ratio's distribution with cond_rescale
                 and with the max always taken (the emulation's own order), for each factor.
usage: tol_model.py --check-case [--seed S] | --dist N [--hd 256 --bn 80 --sq 1000 --sk 257
       --heads 6 --heads-k 3 --batch 2]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "softmax_sim"))
import ptxsim as ps  # noqa: E402  (cvt.rn.bf16.f32 as the emulators model it)

LOG2E = 1.4426950408889634


def bf16(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    return ps.from_bf16(ps.to_bf16(np.asarray(x, np.float32)))


def host_normals(seed, first_draw, n):
    """n normals of fill_normal_f32 starting at uniform draw first_draw (even)."""
    m = n + (n & 1)
    i = np.arange(first_draw + 1, first_draw + m + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0
    rad, th = np.sqrt(-2 * np.log(u[0::2])), 2 * np.pi * u[1::2]
    out = np.empty(m)
    out[0::2], out[1::2] = rad * np.cos(th), rad * np.sin(th)
    return out[:n].astype(np.float32)


def errors(q, k, v, bn, cond=True):
    """max|O_kernel - O_ref| and max|O_emul - O_ref| over the whole (batch, seqlen, heads, dim)."""
    batch, sq, heads, d = q.shape
    sk, heads_k = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(d)
    c = scale * LOG2E
    err_o = err_emul = 0.0
    for b in range(batch):
        for h in range(heads):
            hk = h // (heads // heads_k)
            s_raw = (q[b, :, h, :] @ k[b, :, hk, :].T).astype(np.float64)  # fp32 products
            V = v[b, :, hk, :].astype(np.float64)
            s = s_raw * scale
            m = s.max(1, keepdims=True)
            w = np.exp(s - m)
            ref = (w @ V) / w.sum(1, keepdims=True)
            e = np.exp(s - m).astype(np.float32)
            emul = bf16((bf16(e).astype(np.float64) @ V) / e.astype(np.float64).sum(1, keepdims=True))
            acc = np.zeros((sq, V.shape[1]))
            l = np.zeros((sq, 1))
            mk = np.full((sq, 1), -np.inf)
            for j in range((sk + bn - 1) // bn - 1, -1, -1):
                lo, hi = j * bn, min(sk, (j + 1) * bn)
                sb = s_raw[:, lo:hi]
                bmax = sb.max(1, keepdims=True)
                need = (bmax - mk) * c > 8 if cond else np.ones_like(bmax, bool)
                warp = np.repeat([need[r:r + 16].any() for r in range(0, sq, 16)], 16)[:sq, None]
                mnew = np.where(warp, np.maximum(mk, bmax), mk)
                alpha = np.where(np.isinf(mk), 0.0, np.exp2((mk - mnew) * c))
                off = (mnew * c).astype(np.float32).astype(np.float64)
                p = np.exp2(sb * c - off).astype(np.float32)
                pmax = np.exp2(bmax * c - off).astype(np.float32)
                l = l * alpha + p.astype(np.float64).sum(1, keepdims=True) + (bf16(pmax) - pmax)
                acc = acc * alpha + bf16(p).astype(np.float64) @ V[lo:hi]
                mk = mnew
            out = bf16(acc / l)
            err_o = max(err_o, np.abs(out - ref).max())
            err_emul = max(err_emul, np.abs(emul - ref).max())
    return err_o, err_emul


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check-case", action="store_true")
    g.add_argument("--dist", type=int)
    ap.add_argument("--seed", type=int, default=1795599281325196)
    for name, val in (("hd", 256), ("bn", 80), ("sq", 1000), ("sk", 257), ("heads", 6),
                      ("heads-k", 3), ("batch", 2)):
        ap.add_argument("--" + name, type=int, default=val)
    a = ap.parse_args()
    shape_q = (a.batch, a.sq, a.heads, a.hd)
    shape_k = (a.batch, a.sk, a.heads_k, a.hd)
    if a.check_case:
        # fa3-gen check --all's pools: Q 2*1000*16*256, K and V 2*1000*3*256 (the largest dense
        # case of each), filled in that order from one stream; each case reads their prefixes
        max_q, max_k = 8192000, 1536000
        nq, nk = int(np.prod(shape_q)), int(np.prod(shape_k))
        q = bf16(host_normals(a.seed, 0, nq)).reshape(shape_q)
        k = bf16(host_normals(a.seed, max_q, nk)).reshape(shape_k)
        v = bf16(host_normals(a.seed, max_q + max_k, nk)).reshape(shape_k)
        eo, ee = errors(q, k, v, a.bn)
        for f in (2.0, 2.5):
            print("factor %.1f: err_o %.4e err_emul %.4e tol %.4e ratio %.3f" %
                  (f, eo, ee, f * ee + 1e-3, eo / (f * ee + 1e-3)))
        return
    rs = np.random.default_rng(a.seed)
    res = {True: [], False: []}
    for _ in range(a.dist):
        q = bf16(rs.standard_normal(shape_q, np.float32))
        k = bf16(rs.standard_normal(shape_k, np.float32))
        v = bf16(rs.standard_normal(shape_k, np.float32))
        for cond in (True, False):
            res[cond].append(errors(q, k, v, a.bn, cond))
    for cond in (True, False):
        e = np.array(res[cond])
        for f in (2.0, 2.5):
            r = np.sort(e[:, 0] / (f * e[:, 1] + 1e-3))
            print("%-15s factor %.1f: n %d median %.3f p99 %.3f max %.3f over 1: %d" %
                  ("cond_rescale" if cond else "max always taken", f, len(r), np.median(r),
                   r[min(len(r) - 1, int(0.99 * len(r)))], r[-1], int((r > 1).sum())))


if __name__ == "__main__":
    main()
