#!/usr/bin/env python3
"""fa3jit against FA4 and cuDNN in tight alternation, shape by shape: compare.py's rounds (each
library's whole do_bench, one after the other) let the card's clock drift between the libraries
(session 23 saw 1485-1980 MHz inside one run), and rows 1-2% apart then order differently from run
to run. Here each pair of measurements is one library's REPS graph replays right beside the
other's, the order rotated every pair, so drift hits all three alike; the printed ratios are the
medians over PAIRS of the per-pair time ratios, with each library's median TFLOP/s.
--l2 flush (default) clears L2 before every replay (a 256 MB write outside the timed events, as
do_bench does); warm times the replays back to back.
usage (device; PYTHONPATH=python:bench and `source .peers/a/env.sh`, the library as gpu-run.sh
sets it):
  peer_ab.py [--shapes 128:16384,256:16384] [--causal] [--dtype bf16] [--pairs 21] [--reps 5]"""
import argparse
import statistics

import torch

import compare
import fa3jit


FLUSH = None


def timed(g, reps, flush):
    """Mean ms of reps replays of g (each after an L2 flush when flush)."""
    global FLUSH
    if flush and FLUSH is None:
        FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    total = 0.0
    for _ in range(reps):
        if flush:
            FLUSH.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        total += e0.elapsed_time(e1)
    return total / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:16384,256:16384,64:16384")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--l2", default="flush", choices=["flush", "warm"])
    a = ap.parse_args()
    fa4, about = compare.fa4_import()
    if fa4 is None:
        raise SystemExit(f"peer_ab.py: FA4 does not import ({about}); source .peers/a/env.sh")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flush = a.l2 == "flush"
    print(f"peer_ab: {about}, cuDNN {torch.backends.cudnn.version()}, {a.dtype}, "
          f"{'causal' if a.causal else 'non-causal'}, {a.pairs} x {a.reps} replays, L2 {a.l2}",
          flush=True)
    for spec in a.shapes.split(","):
        hd, seqlen = (int(x) for x in spec.split(":"))
        tdt, b, h = compare.sweep_shape(a.dtype, hd, seqlen)
        q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=tdt) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        cap = compare.capture_graph
        sdpa = torch.nn.functional.scaled_dot_product_attention
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            graphs = {
                "fa3jit": cap(lambda: fa3jit.flash_attn_func(q, k, v, causal=a.causal)),
                "fa4": cap(lambda: fa4(q, k, v, causal=a.causal)),
                "cudnn": cap(lambda: sdpa(qt, kt, vt, is_causal=a.causal)),
            }
        names = list(graphs)
        for _ in range(2):
            for n in names:
                timed(graphs[n], a.reps, flush)
        times = {n: [] for n in names}
        for i in range(a.pairs):
            order = names[i % 3:] + names[:i % 3]
            got = {n: timed(graphs[n], a.reps, flush) for n in order}
            for n in names:
                times[n].append(got[n])
        tf = {n: compare.tflops(b, h, seqlen, hd, a.causal, statistics.median(times[n]))
              for n in names}
        r4 = [y / x for x, y in zip(times["fa3jit"], times["fa4"])]
        rc = [y / x for x, y in zip(times["fa3jit"], times["cudnn"])]
        print(f"{a.dtype} hd{hd} {'causal' if a.causal else 'full'} {seqlen}: fa3jit "
              f"{tf['fa3jit']:.1f}  FA4 {tf['fa4']:.1f}  cuDNN {tf['cudnn']:.1f} TFLOP/s; "
              f"fa3jit/FA4 {statistics.median(r4):.4f} ({min(r4):.3f}-{max(r4):.3f})  "
              f"fa3jit/cuDNN {statistics.median(rc):.4f} ({min(rc):.3f}-{max(rc):.3f})", flush=True)
        del graphs
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
