#!/usr/bin/env python3
"""Where a row's time goes, per library: the kernels (and memsets) one call launches, each one's
median GPU duration over REPS calls from a flushed L2 (torch.profiler / CUPTI), beside the call's
time as bench/compare.py takes it (one call captured in a CUDA graph, replayed under do_bench
with L2 flushed). Graph time minus the kernels' sum is what the launch costs around them.
Shapes are compare.py's sweep shapes (batch * seqlen = 16384, heads * head_dim = 2048; fa3jit and
FA4 (batch, seqlen, heads, head_dim), cuDNN (batch, heads, seqlen, head_dim)).

  python3 tools/probes/kernel_times.py --shapes 256:512:causal,128:512:causal [--dtype fp16]
      [--libs fa3jit,cudnn[,fa4]] [--reps 20]
"""
import argparse
import os
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "python")]  # compare, fa3jit
import compare  # noqa: E402  (its sweep shape, graph capture and TFLOP/s)


def call_of(lib, dtype, hd, seqlen, causal):
    tdt, b, h = compare.sweep_shape(dtype, hd, seqlen)
    if lib == "cudnn":
        q, k, v = (torch.randn(b, h, seqlen, hd, device="cuda", dtype=tdt) for _ in range(3))

        def fn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return fn, b, h
    q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=tdt) for _ in range(3))
    if lib == "fa3jit":
        import fa3jit
        return (lambda: fa3jit.flash_attn_func(q, k, v, causal=causal)), b, h
    from flash_attn.cute import flash_attn_func
    return (lambda: flash_attn_func(q, k, v, causal=causal)), b, h


def gpu_events(fn, reps, flush, mode):
    """The GPU activities (start, name, us) of reps iterations, in start order, each iteration
    an L2 flush (mode "zero": do_bench's, writing the buffer, the L2 left full of dirty lines;
    "read": reading it, clean lines; "none": no flush) and then fn() (None: the flush alone)."""
    acts = torch.profiler.ProfilerActivity
    with torch.profiler.profile(activities=[acts.CUDA]) as prof:
        for _ in range(reps):
            if mode == "zero":
                flush.zero_()
            elif mode == "read":
                flush.view(torch.float32).sum()  # no conversion copy: reads 256 MB, writes 4 B
            torch.cuda.synchronize()
            if fn is not None:
                fn()
                torch.cuda.synchronize()
    ev = [(e.time_range.start, e.name, e.time_range.elapsed_us()) for e in prof.events()
          if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(ev)


def kernel_table(fn, reps, flush, mode):
    """{"#i name": [durations us]}: the i-th GPU activity of each call of fn (a call may launch
    one kernel name twice, e.g. a tail split's two forward launches), over reps calls after the
    flush of mode; the flush's own activities (counted from a run of the flush alone) left out."""
    fn()
    torch.cuda.synchronize()
    n_flush, extra = divmod(len(gpu_events(None, reps, flush, mode)), reps)
    ev = gpu_events(fn, reps, flush, mode)
    per_iter, extra2 = divmod(len(ev), reps)
    if extra or extra2 or per_iter <= n_flush:
        raise SystemExit(f"kernel_times.py: {len(ev)} GPU activities in {reps} calls (the flush "
                         f"alone: {n_flush} each): not the same sequence every call")
    out = {}
    for it in range(reps):
        chunk = ev[it * per_iter:(it + 1) * per_iter][n_flush:]
        for i, (_, name, us) in enumerate(chunk):
            out.setdefault(f"#{i} {name}", []).append(us)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="256:512:causal,128:512:causal",
                    help="comma-separated head_dim:seqlen[:causal]")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--libs", default="fa3jit,cudnn")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--flush", default="zero",
                    help="comma-separated L2 states before each profiled call: zero (do_bench's "
                    "flush, dirty lines), read (clean lines), none (back to back)")
    a = ap.parse_args()
    if a.reps < 3:
        ap.error(f"--reps {a.reps}: at least 3")
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for spec in a.shapes.split(","):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "causal"):
            ap.error(f"--shapes: {spec!r} is not head_dim:seqlen[:causal]")
        hd, seqlen, causal = int(parts[0]), int(parts[1]), len(parts) == 3
        for lib in a.libs.split(","):
            if lib not in ("fa3jit", "cudnn", "fa4"):
                ap.error(f"--libs: unknown library {lib!r}")
            fn, b, h = call_of(lib, a.dtype, hd, seqlen, causal)
            g_ms = compare.graph_ms(fn)
            print(f"{a.dtype} hd{hd} seqlen {seqlen} {'causal' if causal else 'full'} {lib}: "
                  f"graph {g_ms * 1e3:.1f} us ({compare.tflops(b, h, seqlen, hd, causal, g_ms):.1f}"
                  " TFLOP/s, do_bench's flush)")
            for mode in a.flush.split(","):
                if mode not in ("zero", "read", "none"):
                    ap.error(f"--flush: unknown mode {mode!r}")
                table = kernel_table(fn, a.reps, flush, mode)
                total = 0.0
                for name, d in sorted(table.items(), key=lambda kv: int(kv[0][1:].split()[0])):
                    med = statistics.median(d)
                    total += med
                    print(f"    flush {mode:4s} median {med:8.1f} us  "
                          f"min {min(d):8.1f}  max {max(d):8.1f}  {name[:100]}")
                print(f"    flush {mode:4s} kernels' sum per call {total:.1f} us"
                      + (f"; graph - sum {g_ms * 1e3 - total:.1f} us" if mode == "zero" else ""))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
