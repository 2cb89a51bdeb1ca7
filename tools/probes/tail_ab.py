#!/usr/bin/env python3
"""Same-run A/B of two fa3jit plan variants (FA3JIT_PLAN_DEBUG settings, "" = the default) on the
benchmark sweep's shapes, in tight alternation: each pair of measurements times REPS calls of A
then REPS calls of B back to back (CUDA events, L2 warm), so clock and power drift hit both alike;
the printed ratio B/A is the median over PAIRS pairs of the per-pair time ratios, with the
medians' TFLOP/s. Session 23 wrote it for the tail split (tail_split=0 against the default): the
card's clock moved 1485-1980 MHz inside one compare.py run, more than the effect looked for.
usage (device; PYTHONPATH=python:bench, the library as gpu-run.sh sets it):
  tail_ab.py [--variant tail_split=0] [--shapes 128:16384,256:16384] [--causal] [--pairs 15]"""
import argparse
import os
import statistics

import torch

import compare
import fa3jit
from fa3jit import _core


CONTEXTS = []  # kept alive: a freed context unloads the modules its graphs launch


def build(variant, fn):
    """fn's kernels built under variant (its own context, as compare.py's variants), captured."""
    saved = os.environ.pop("FA3JIT_PLAN_DEBUG", None)
    default = _core.default_context()
    if variant:
        os.environ["FA3JIT_PLAN_DEBUG"] = variant
        _core._default = _core.Context()
        CONTEXTS.append(_core._default)
    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
    finally:
        _core._default = default
        os.environ.pop("FA3JIT_PLAN_DEBUG", None)
        if saved is not None:
            os.environ["FA3JIT_PLAN_DEBUG"] = saved
    return g


def timed(g, reps):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        g.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="tail_split=0")
    ap.add_argument("--base", default="")
    ap.add_argument("--shapes", default="128:16384,128:8192,256:16384,256:8192,128:4096,64:16384")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    for spec in a.shapes.split(","):
        hd, seqlen = (int(x) for x in spec.split(":"))
        tdt, b, h = compare.sweep_shape("bf16", hd, seqlen)
        q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=tdt) for _ in range(3))
        fn = lambda: fa3jit.flash_attn_func(q, k, v, causal=a.causal)  # noqa: E731
        ga, gb = build(a.base, fn), build(a.variant, fn)
        for _ in range(3):
            timed(ga, a.reps), timed(gb, a.reps)
        ta, tb, ratios = [], [], []
        for i in range(a.pairs):
            if i % 2:
                y = timed(gb, a.reps)
                x = timed(ga, a.reps)
            else:
                x = timed(ga, a.reps)
                y = timed(gb, a.reps)
            ta.append(x)
            tb.append(y)
            ratios.append(x / y)  # B's speed over A's
        fa, fb = (compare.tflops(b, h, seqlen, hd, a.causal, statistics.median(t)) for t in (ta, tb))
        print(f"hd{hd} {'causal' if a.causal else 'full'} {seqlen}: A[{a.base or 'default'}] "
              f"{fa:.1f}  B[{a.variant}] {fb:.1f}  B/A speed {statistics.median(ratios):.4f} "
              f"(pairs {min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
