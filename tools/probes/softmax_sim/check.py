"""The default kernel against a knob set's (FA3JIT_PLAN_DEBUG syntax; default kept_branch=1) on
the same tiles of injected scores, through both kernels' generated PTX (ptxsim.py: one warp,
no GPU), compared bitwise: the P fragments and O after each block, m, e, l, l_lse, and the final
O and LSE. For knobs that must not change a result (session 15: kept_branch). Inputs: random
rows and adversarial ones (rows without keys, keys only in later blocks, NaN, +-inf, |s·c| >=
2^27, scores near +-FLT_MAX, maxima growing by just about the rescale threshold of 8), at five
exp2 scales. --plant NAME edits the variant's PTX to show that the check catches a defect:
kept_alpha (alpha 1 - 2^-24 on the kept path), kept_noff (the exponent's offset forgotten on the
kept path). Needs numpy. Written by a review helper in session 15 (docs/notes.md).

usage: check.py [--gen FA3GEN] [--knobs K] [--plant NAME] [--configs a,b] [--tiles N] [--seed S]
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim as ps

CONFIGS = {
    "bf16_none": ["--head-dim", "64"],
    "bf16_causal": ["--head-dim", "64", "--causal"],
    "bf16_local": ["--head-dim", "64", "--local"],
    "bf16_causal_softcap": ["--head-dim", "64", "--causal", "--softcap"],
    "fp16_causal": ["--head-dim", "64", "--causal", "--dtype", "fp16"],
    "bf16_causal_split": ["--head-dim", "64", "--causal", "--split-kv"],
    "bf16_causal_varlen": ["--head-dim", "64", "--causal", "--varlen"],
    "bf16_none_paged": ["--head-dim", "64", "--paged-kv"],
    "bf16_causal_bm64": ["--head-dim", "64", "--causal", "--block-m", "64"],
    "bf16_causal_ep1": ["--head-dim", "64", "--causal", "@early_pack=1"],
    "bf16_causal_ep2": ["--head-dim", "64", "--causal", "@early_pack=2"],
    "bf16_causal_tree": ["--head-dim", "64", "--causal", "@tree_reduce=1"],
    "bf16_none_emu4": ["--head-dim", "64", "@ex2_emu=4"],
    "bf16_causal_emu16": ["--head-dim", "64", "--causal", "@ex2_emu=16"],
    "fp16_none_emu4": ["--head-dim", "64", "--dtype", "fp16", "@ex2_emu=4"],
    "bf16_causal_onebody": ["--head-dim", "64", "--causal", "@one_body=1"],
    "bf16_hd128_causal": ["--head-dim", "128", "--causal"],
    "fp16_hd256_local_softcap": ["--head-dim", "256", "--local", "--softcap", "--dtype", "fp16"],
}


def gen(fa3gen, cfg, variant, plant=None):
    args = [a for a in cfg if not a.startswith("@")]
    knobs = [a[1:] for a in cfg if a.startswith("@")]
    if variant:
        knobs.append(variant)
    env = dict(os.environ)
    env.pop("FA3JIT_PLAN_DEBUG", None)
    if knobs:
        env["FA3JIT_PLAN_DEBUG"] = ",".join(knobs)
    ptx = subprocess.run([fa3gen, "--emit-ptx", "--named-registers"] + args, env=env,
                         check=True, capture_output=True, text=True).stdout
    if plant and variant:
        ptx = PLANTS[plant](ptx)
    return ptx


def _kept_alpha(ptx):  # a subtle one: alpha 1 -> 1 - 2^-24 on the kept path
    out, n = re.subn(r"(\$Lkept_max_\d+:\n\s*mov\.f32 %alpha_\d+), 0f3F800000;", r"\1, 0f3F7FFFFF;", ptx)
    assert n >= 1
    return out


def _kept_noff(ptx):  # the kept path forgets row 0's carried offset (-off = 0)
    noff = re.search(r"%noff_\d+", ptx).group(0)
    out, n = re.subn(r"(\$Lkept_max_\d+:\n)", r"\1\tmov.f32 %s, 0f00000000;\n" % noff, ptx)
    assert n >= 1
    return out


PLANTS = {"kept_alpha": _kept_alpha, "kept_noff": _kept_noff}


def dims(ptx):
    ns = int(re.search(r"\.reg \.f32 %s<(\d+)>", ptx).group(1))
    no = int(re.search(r"\.reg \.f32 %o<(\d+)>", ptx).group(1))
    return 2 * ns, 2 * no


# ------------------------------------------------------------------ inputs

def bf16_round(x, dtype):
    x = np.asarray(x, np.float32)
    if dtype == "bf16":
        return ps.from_bf16(ps.to_bf16(x.ravel())).reshape(x.shape)
    with np.errstate(all="ignore"):
        return x.astype(np.float16).astype(np.float32)


def make_tile(rng, nblk, bn, c, kind):
    """nblk blocks of S [16, bn] (processing order) with rows of assorted kinds."""
    S = np.zeros((nblk, 16, bn), np.float32)
    thr = 8.0 / c  # growth threshold in score units
    for r in range(16):
        k = kind if kind != "mix" else rng.choice(
            ["normal", "flat", "nokeys", "late", "nan", "inf", "huge", "edge", "negbig", "tiny",
             "posinf", "mixinf", "ovf", "neginf_unmasked", "negovf"])
        sig = rng.choice([0.5, 3.0, 20.0, 200.0])
        base = rng.normal(0, sig, (nblk, bn)).astype(np.float32)
        if k == "normal":
            pass
        elif k == "flat":  # maxima that never grow by more than the threshold
            base = np.full((nblk, bn), np.float32(rng.normal())) + rng.uniform(-thr, 0, (nblk, bn))
            base[:, 0] = base[0, 0] + rng.uniform(0, thr * 0.99, nblk)
        elif k == "nokeys":
            base[:] = -np.inf
        elif k == "late":  # no keys in the first blocks processed (causal/local)
            j = rng.integers(1, nblk + 1)
            base[:j] = -np.inf
            # partial masks
            if j < nblk:
                base[j, rng.integers(0, bn):] = -np.inf
        elif k == "nan":
            base[rng.random((nblk, bn)) < 0.05] = np.nan
            if rng.random() < 0.3:
                base[rng.integers(0, nblk)] = np.nan
        elif k == "inf":
            base[rng.random((nblk, bn)) < 0.02] = np.inf
        elif k == "posinf":
            base[rng.integers(0, nblk), rng.integers(0, bn)] = np.inf
        elif k == "mixinf":
            base[rng.random((nblk, bn)) < 0.5] = -np.inf
            base[rng.random((nblk, bn)) < 0.05] = np.nan
        elif k == "huge":  # |s·c| >= 2^27: the guard path (c2)
            mag = rng.choice([2.0 ** 27 / c, 2.0 ** 27 / c * 1.0000001, 1e20, 1e30, 3.0e38, 1.7e38])
            base = np.float32(mag) + (base * np.float32(mag) * np.float32(1e-6))
            if rng.random() < 0.5:
                base = -base
        elif k == "edge":  # block maxima growing by just about the threshold
            m0 = np.float32(rng.normal(0, 10))
            cur = m0
            for j in range(nblk):
                step = np.float32(thr) * np.float32(rng.choice([1.0, 1 - 1e-7, 1 + 1e-7, 0.5, 2.0]))
                if rng.random() < 0.3:
                    step = np.nextafter(np.float32(thr), np.float32(rng.choice([-1, 1]) * np.inf))
                cur = np.float32(cur + step) if j else cur
                base[j] = cur - np.abs(base[j]) - np.float32(0.001)
                base[j, rng.integers(0, bn)] = cur
        elif k == "negbig":
            base = base - np.float32(1e30)
        elif k == "tiny":
            base = base * np.float32(1e-30)
        elif k == "ovf":  # finite scores near FLT_MAX: m·c2 overflows when c2 >= 2
            base = np.float32(2.5e38) - np.abs(base) * np.float32(1e36)
        elif k == "negovf":  # finite scores near -FLT_MAX: -(m·c2) = +inf when c2 >= 2
            base = np.float32(-2.5e38) + np.abs(base) * np.float32(1e30)
            base[:, 0] = np.float32(-2.5e38)
        elif k == "neginf_unmasked":  # QK overflow to -inf in every key of the row
            base[:] = -np.inf
        S[:, r] = base.astype(np.float32)
    return S


def compare(A, B, tag, keys=("m0", "m1", "e0", "e1", "l0", "l1", "llse0", "llse1", "a", "o")):
    diffs = []
    for k in keys:
        if k not in A:
            continue
        a, b = A[k], B[k]
        if a.dtype == bool:
            ne = a != b
        else:
            ne = a.astype(np.uint32) != b.astype(np.uint32)
        if ne.any():
            idx = np.argwhere(ne)[0]
            diffs.append("%s %s at %s: default %s variant %s" % (tag, k, tuple(idx), show(a[tuple(idx)]),
                                                             show(b[tuple(idx)])))
    return diffs


def show(x):
    if isinstance(x, (np.bool_, bool)):
        return str(x)
    x = np.uint32(x)
    return "0x%08x(%g)" % (x, np.uint32(x).view(np.float32))


KEPT = [0, 0]
INNER = [0]  # tiles whose outputs agree but whose row state differs
STATE = ("m0", "m1", "e0", "e1", "l0", "l1", "llse0", "llse1")


def run_config(fa3gen, name, cfg, ntiles, seed, plant, verbose, kinds, scales, variant):
    pd, pk = gen(fa3gen, cfg, None), gen(fa3gen, cfg, variant, plant)
    bn, hdv = dims(pd)
    dtype = "fp16" if "fp16" in cfg else "bf16"
    rng = np.random.default_rng(seed)
    ndiff = 0
    first = []
    for sl2 in scales:
        kd = ps.Kernel(pd, bn, hdv, dtype, sl2, 0.125)
        kk = ps.Kernel(pk, bn, hdv, dtype, sl2, 0.125)
        for t in range(ntiles):
            nblk = int(rng.integers(1, 7))
            kind = kinds[t % len(kinds)]
            with np.errstate(over="ignore", invalid="ignore"):  # the huge and overflow rows
                S = make_tile(rng, nblk, bn, float(sl2), kind)
            V = [bf16_round(rng.normal(0, 1, (bn, hdv)), dtype) for _ in range(nblk)]
            if rng.random() < 0.1:
                V[0][rng.integers(0, bn), rng.integers(0, hdv)] = np.inf
            masked = [bool(rng.random() < 0.5) for _ in range(nblk)]
            td, fd = kd.run_tile(S, V, masked)
            tk, fk = kk.run_tile(S, V, masked)
            for j in range(nblk):
                if "rescale" in tk[j]:
                    assert (tk[j]["rescale"] == td[j]["rescale"]).all()
                    KEPT[0] += not tk[j]["rescale"][0]
                    KEPT[1] += 1
            # what leaves the softmax (P into the PV, O) and the kernel (O, LSE) must agree; the
            # row state (m, e, l, l_lse) may differ where both reach the same output (a row whose
            # m·c2 overflows: the default's l is NaN where the variant's is 0, both write O = 0
            # and LSE = -inf), and is reported apart
            d, inner = [], []
            for j in range(nblk):
                tag = "tile %d (%s, c=%g) block %d" % (t, kind, sl2, j)
                d += compare(td[j], tk[j], tag, keys=("a", "o"))
                inner += compare(td[j], tk[j], tag, keys=STATE)
            tag = "tile %d (%s, c=%g) final" % (t, kind, sl2)
            d += compare(fd, fk, tag, keys=("O_out", "lse_out"))
            inner += compare(fd, fk, tag, keys=("l_red", "m0", "m1", "e0", "e1"))
            if d:
                ndiff += 1
                if len(first) < 6:
                    first.append(d[:4])
            elif inner:
                INNER[0] += 1
                if verbose:
                    first.append(["(row state only) " + x for x in inner[:2]])
    skipped = kd.w.skipped | kk.w.skipped
    return ndiff, first, skipped, bn, hdv


def main():
    ap = argparse.ArgumentParser()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    ap.add_argument("--gen", default=os.path.join(root, "build", "fa3-gen"))
    ap.add_argument("--knobs", default="kept_branch=1")
    ap.add_argument("--plant", default=None)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--tiles", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="mix,normal,flat,edge,mix,late,mix,negovf,nokeys,ovf,late,huge,nokeys")
    ap.add_argument("--scales", default="0.18033688,1.0,2.8853900,0.0625,1e-3")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    scales = [np.float32(float(s)) for s in a.scales.split(",")]
    total = 0
    for name in a.configs.split(","):
        n, first, skipped, bn, hdv = run_config(a.gen, name, CONFIGS[name], a.tiles, a.seed, a.plant,
                                                a.v, a.kinds.split(","), scales, a.knobs)
        total += n
        print("%-26s bn %3d hdv %3d: %d of %d tiles differ (row state only: %d); kept blocks %d of "
              "%d (ops skipped: %s)" % (name, bn, hdv, n, a.tiles * len(scales), INNER[0], KEPT[0],
                                        KEPT[1], ",".join(sorted(skipped)) or "-"))
        KEPT[0] = KEPT[1] = INNER[0] = 0
        for d in first:
            for x in d:
                print("    " + x)
            print("    --")
    print("TOTAL tiles differing:", total)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
