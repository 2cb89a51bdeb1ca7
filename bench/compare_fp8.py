#!/usr/bin/env python3
"""FP8 speed in one device run: fa3jit's FP8 (e4m3) forward, cuDNN's FP8 SDPA (the cudnn
frontend, when importable: ../shared/peers/README.md) and fa3jit's bf16 forward, on the
FlashAttention-3 paper sweep (batch*seqlen = 16384, num_heads*head_dim = 2048, seqlen 1k..16k,
head_dim 64/128/256, causal and not), timed as bench/compare.py times its libraries: each call
captured in a CUDA graph and replayed under triton's do_bench (median, L2 flushed before each
replay; --l2 warm: 10 back-to-back calls per replay), the libraries in an order rotated each
round, the median of --repeat rounds kept.

fa3jit FP8 runs with check_descales=False (descales_trusted: no read-back, so no sync in the
timed call, and capturable), descales of shape (batch, num_heads_k). cuDNN FP8 takes one descale
per tensor and, on Hopper, writes O in e4m3 (cuDNN refuses bf16 O there before Blackwell);
fa3jit FP8 writes bf16 O. Both read the same e4m3 tensors (per-tensor quantized random normal
inputs), (batch, seqlen, heads, head_dim) contiguous. FLOPs = 4*batch*heads*seqlen^2*head_dim,
halved for causal. Printed: TFLOP/s per library, fp8/cudnn_fp8 and fp8/bf16 ratios, and as a
sanity check the relative L2 error of each FP8 output against fa3jit's bf16 one (SUSPECT over
0.15); a markdown table; one line `COMPARE_FP8_JSON [...]`.

usage: bench/compare_fp8.py [--head-dims 64,128,256] [--seqlens 1024,2048,4096,8192,16384]
                            [--masks full,causal] [--repeat 1] [--l2 flush|warm]
                            [--no-cudnn] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import compare  # noqa: E402  (graph_ms, sweep_shape, tflops: the one way shapes are timed)

LIBS = ("fa3jit_fp8", "cudnn_fp8", "fa3jit_bf16")
SUSPECT = 0.15


def int_list(text):
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers")
    return values


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head-dims", type=int_list, default=[64, 128, 256])
    ap.add_argument("--seqlens", type=int_list, default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; the median is kept")
    ap.add_argument("--l2", choices=["flush", "warm"], default="flush")
    ap.add_argument("--no-cudnn", action="store_true", help="leave out the cuDNN FP8 column")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    masks = [m for m in a.masks.split(",") if m]
    if not masks or any(m not in ("full", "causal") for m in masks):
        ap.error(f"--masks {a.masks!r}: a comma-separated list of 'full' and 'causal'")
    a.causals = [m == "causal" for m in masks]
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    for hd in a.head_dims:
        if 2048 % hd:
            ap.error(f"--head-dims: {hd} does not divide num_heads*head_dim = 2048")
    for s in a.seqlens:
        if 16384 % s:
            ap.error(f"--seqlens: {s} does not divide batch*seqlen = 16384")
    return a


def short(e, n=300):
    msg = " ".join(f"{type(e).__name__}: {e}".split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def rel_err(a, ref):
    a, ref = a.float(), ref.float()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-30)).item()


class Shape:
    """Inputs and one callable per library for one sweep shape."""

    def __init__(self, hd, seqlen, causal, cudnn, handle):
        import torch
        import fa3jit
        import fp8_emulation as emu
        _, b, h = compare.sweep_shape("bf16", hd, seqlen)
        self.b, self.h = b, h
        x = [torch.randn(b, seqlen, h, hd, device="cuda") for _ in range(3)]
        self.bf = [t.to(torch.bfloat16) for t in x]
        q8 = [emu.quantize_per_tensor(t) for t in x]
        del x
        self.e4m3 = [t8.contiguous() for t8, _ in q8]
        scalars = [float(d.item()) for _, d in q8]
        # fa3jit's descales, (batch, num_heads_k), here all the tensor's one value
        self.descales = [torch.full((b, h), s, device="cuda") for s in scalars]
        q, k, v = self.e4m3
        dq, dk, dv = self.descales
        qb, kb, vb = self.bf
        self.fns, self.errors, self.notes = {}, {}, {}
        self.fns["fa3jit_fp8"] = lambda: fa3jit.flash_attn_func(
            q, k, v, causal=causal, q_descale=dq, k_descale=dk, v_descale=dv,
            check_descales=False)
        self.fns["fa3jit_bf16"] = lambda: fa3jit.flash_attn_func(qb, kb, vb, causal=causal)
        if cudnn is not None:
            from cudnn_fp8 import CudnnFp8Attention
            try:
                peer = CudnnFp8Attention(cudnn, handle, b, seqlen, h, hd, causal, hd ** -0.5)
                peer.bind(q, k, v, *scalars)
                self.fns["cudnn_fp8"] = peer.run
                self.cudnn_peer = peer
                self.notes["cudnn_fp8"] = f"{peer.describe()}, built in {peer.build_s:.1f}s"
            except Exception as e:  # noqa: BLE001
                self.errors["cudnn_fp8"] = short(e, 600)

    def outputs(self):
        """Each library's O once more (after timing), fp32, for the sanity check."""
        outs = {}
        for lib in ("fa3jit_fp8", "fa3jit_bf16"):
            if lib in self.fns and lib not in self.errors:
                outs[lib] = self.fns[lib]().float()
        if "cudnn_fp8" in self.fns and "cudnn_fp8" not in self.errors:
            self.fns["cudnn_fp8"]()
            outs["cudnn_fp8"] = self.cudnn_peer.output()
        return outs


def run(a):
    import torch
    import fa3jit
    compare.L2_MODE = a.l2
    torch.backends.cuda.matmul.allow_tf32 = False
    cudnn, handle, why = None, None, "--no-cudnn"
    if not a.no_cudnn:
        from cudnn_fp8 import load
        cudnn, why = load()
        if cudnn is not None:
            handle = cudnn.create_handle()
    print(f"fa3jit {fa3jit.version()} from {fa3jit.library_path()}; torch {torch.__version__}; "
          f"{torch.cuda.get_device_name(0)}; cuDNN FP8: "
          + (f"frontend {cudnn.__version__}, backend {cudnn.backend_version()}" if cudnn
             else f"not run ({why})"), flush=True)
    rows = []
    for hd in a.head_dims:
        for causal in a.causals:
            for seqlen in a.seqlens:
                rows.append(one_shape(a, hd, seqlen, causal, cudnn, handle))
                torch.cuda.empty_cache()
    return rows, why if cudnn is None else None


def one_shape(a, hd, seqlen, causal, cudnn, handle):
    import torch
    sh = Shape(hd, seqlen, causal, cudnn, handle)
    times = {lib: [] for lib in LIBS}
    for rnd in range(a.repeat):
        order = LIBS[rnd % len(LIBS):] + LIBS[:rnd % len(LIBS)]
        for lib in order:
            if lib not in sh.fns or lib in sh.errors:
                continue
            try:
                ms = compare.graph_ms(sh.fns[lib])
                times[lib].append(compare.tflops(sh.b, sh.h, seqlen, hd, causal, ms))
            except Exception as e:  # noqa: BLE001 - a library that fails says why, once
                sh.errors[lib] = short(e, 600)
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
    row = {"head_dim": hd, "seqlen": seqlen, "causal": causal, "batch": sh.b, "heads": sh.h,
           "errors": dict(sh.errors), "notes": dict(sh.notes),
           "runs": {lib: t for lib, t in times.items() if t}}
    for lib, t in times.items():
        if t:
            row[lib] = statistics.median(t)
    fp8 = row.get("fa3jit_fp8")
    if fp8 and row.get("cudnn_fp8"):
        row["fp8_over_cudnn_fp8"] = fp8 / row["cudnn_fp8"]
    if fp8 and row.get("fa3jit_bf16"):
        row["fp8_over_bf16"] = fp8 / row["fa3jit_bf16"]
    try:
        outs = sh.outputs()
        if "fa3jit_bf16" in outs:
            for lib in ("fa3jit_fp8", "cudnn_fp8"):
                if lib in outs:
                    row[f"{lib}_rel_err_vs_bf16"] = rel_err(outs[lib], outs["fa3jit_bf16"])
        del outs
    except Exception as e:  # noqa: BLE001
        row["errors"]["outputs"] = short(e)
    print(line(row), flush=True)
    del sh
    return row


def fmt(x, spec=".1f"):
    return format(x, spec) if isinstance(x, float) else "n/a"


def line(r):
    s = (f"hd{r['head_dim']:<3} {'causal' if r['causal'] else 'full  '} {r['seqlen']:6d}  "
         f"fa3jit fp8 {fmt(r.get('fa3jit_fp8')):>6}  cuDNN fp8 {fmt(r.get('cudnn_fp8')):>6}  "
         f"fa3jit bf16 {fmt(r.get('fa3jit_bf16')):>6}  fp8/cudnn_fp8 "
         f"{fmt(r.get('fp8_over_cudnn_fp8'), '.2f')}  fp8/bf16 {fmt(r.get('fp8_over_bf16'), '.2f')}")
    for lib in ("fa3jit_fp8", "cudnn_fp8"):
        e = r.get(f"{lib}_rel_err_vs_bf16")
        if e is not None:
            s += f"  {lib} err {e:.3f}" + (" SUSPECT" if e > SUSPECT else "")
    for lib, msg in r["errors"].items():
        s += f"\n    {lib}: {msg}"
    return s


def table(rows, cudnn_missing):
    print("\n| head_dim | causal | seqlen | fa3jit FP8 TFLOP/s | cuDNN FP8 TFLOP/s | fa3jit bf16 "
          "TFLOP/s | fp8 / cudnn_fp8 | fp8 / bf16 | FP8 rel err vs bf16 (fa3jit, cuDNN) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        errs = ", ".join(fmt(r.get(f"{lib}_rel_err_vs_bf16"), ".3f")
                         for lib in ("fa3jit_fp8", "cudnn_fp8"))
        print(f"| {r['head_dim']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | "
              f"{fmt(r.get('fa3jit_fp8'))} | {fmt(r.get('cudnn_fp8'))} | "
              f"{fmt(r.get('fa3jit_bf16'))} | {fmt(r.get('fp8_over_cudnn_fp8'), '.2f')} | "
              f"{fmt(r.get('fp8_over_bf16'), '.2f')} | {errs} |")
    if cudnn_missing:
        print(f"\ncuDNN FP8 not run: {cudnn_missing}")
    notes = sorted({n for r in rows for n in r["notes"].values()})
    if notes:
        print("\n" + "\n".join(notes))


def main(argv=None):
    a = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("compare_fp8: needs a CUDA device", file=sys.stderr)
        return 2
    rows, cudnn_missing = run(a)
    table(rows, cudnn_missing)
    print("COMPARE_FP8_JSON " + json.dumps(rows), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    failed = [r for r in rows if "fa3jit_fp8" not in r]
    if failed:
        print(f"\nfa3jit FP8 did not run on {len(failed)} of {len(rows)} shapes: "
              f"{failed[0]['errors'].get('fa3jit_fp8', '?')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
