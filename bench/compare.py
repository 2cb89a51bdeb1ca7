#!/usr/bin/env python3
"""Times fa3jit (through `fa3-gen bench --json`) and cuDNN fused attention (PyTorch SDPA) on the
same shapes in the same device run, and prints a markdown table with the ratio.

Shapes: the FlashAttention-3 paper sweep, batch*seqlen = 16384, num_heads*head_dim = 2048.
cuDNN is timed with triton.testing.do_bench (median, warmup 25 ms, rep 100 ms) on random normal
inputs. Memory layout (--layout): "mixed" (default, the tables in bench/RESULTS.md until
2026-11-29): fa3jit (batch, seqlen, heads, head_dim) contiguous as FlashAttention takes it, cuDNN
(batch, heads, seqlen, head_dim) contiguous as in ../shared/baselines/h200-sdpa.json; "bshd" or
"bhsd": both libraries on that layout (cuDNN through a transposed view for bshd).
FLOPs: 4*batch*heads*seqlen^2*head_dim, halved for causal (the same count fa3-gen uses).
--repeat N: each library measured N times, alternating, and the median kept: fa3-gen bench in N
processes (one kernel's speed moved up to 15% between processes on some shapes), cuDNN on N
fresh sets of tensors.
--fa3-timer: "bench" times fa3jit with `fa3-gen bench` (one process runs all shapes of
a head_dim back to back, no L2 flush) and cuDNN with do_bench (L2 flushed before each call);
"python" (default) times both the same way, in this process, fa3jit right before cuDNN on each shape: one
call of each (fa3jit.flash_attn_func, SDPA) captured in a CUDA graph and replayed under do_bench,
so that host-side costs (Python, ctypes, tensor maps) stay out of both times; --l2 warm times
10 calls back to back per replay instead of do_bench's one call after an L2 flush. The H200's SM clock moved between 1485 and
1980 MHz within one run (nvidia-smi, 0.5 s samples) and the first of three rounds ran fastest
for both libraries (52 and 62 of 72 shapes), so the per-shape alternation compares the two
at the same clock.

--variants "knob=v;knob=v,knob2=v" (python timer): extra fa3jit columns, each kernel planned
with that FA3JIT_PLAN_DEBUG setting, timed beside the default in an order rotated each round.
--gemm (python timer): a cuBLAS 8192^3 product per head_dim and round, timed the same way.

usage: bench/compare.py [--fa3-gen build/fa3-gen] [--dtypes bf16,fp16] [--head-dims 64,128,256]
                        [--seqlens 512,...,16384] [--layout mixed|bshd|bhsd] [--repeat 1]
                        [--fa3-timer bench|python] [--l2 flush|warm] [--variants V;V]
                        [--gemm] [--json OUT.json]
"""
import argparse
import json
import statistics
import subprocess
import sys


TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def fa3_gen_bench(gen, args, env=None):
    """Runs `fa3-gen bench --json` with the extra arguments; {(seqlen, causal): TFLOP/s}."""
    out = subprocess.run([gen, "bench", "--json"] + args, check=True, capture_output=True,
                         text=True, env=env).stdout
    return {(int(r["seqlen"]), bool(r["causal"])): float(r["tflops"]) for r in json.loads(out)}


def sweep_shape(dtype, hd, seqlen):
    """(torch dtype, batch, heads) of the paper sweep's shape: batch*seqlen = 16384 (batch 1 from
    16k), heads*head_dim = 2048."""
    import torch
    return getattr(torch, TORCH_DTYPES[dtype]), max(1, 16384 // seqlen), 2048 // hd


def tflops(b, h, seqlen, hd, causal, ms):
    return 4.0 * b * h * seqlen * seqlen * hd * (0.5 if causal else 1.0) / (ms * 1e-3) / 1e12


def cudnn_tflops(dtype, hd, seqlen, causal, layout, graph=False):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    tdt, b, h = sweep_shape(dtype, hd, seqlen)
    if layout == "bshd":
        q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=tdt).transpose(1, 2)
                   for _ in range(3))
    else:
        q, k, v = (torch.randn(b, h, seqlen, hd, device="cuda", dtype=tdt) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms = graph_ms(fn) if graph else do_bench(fn, warmup=25, rep=100, return_mode="median")
    return tflops(b, h, seqlen, hd, causal, ms)


L2_MODE = "flush"  # --l2


def graph_ms(fn):
    """fn replayed from a CUDA graph, so that neither library's host-side cost lands in the time.
    L2_MODE "flush": do_bench (L2 flushed before each rep, events around it, median); "warm": a
    graph of 10 back-to-back calls replayed 10 times after 3 warm replays, median per call (as
    `fa3-gen bench` times: each call finds the previous one's data in L2)."""
    import torch
    from triton.testing import do_bench
    fn()  # first call outside the capture (fa3jit: the kernel's JIT)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    calls = 1 if L2_MODE == "flush" else 10
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    if L2_MODE == "flush":
        return do_bench(g.replay, warmup=25, rep=100, return_mode="median")
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / calls)
    return sorted(times)[len(times) // 2]


def fa3_python_tflops(dtype, hd, seqlen, causal, variant=""):
    """fa3jit.flash_attn_func on (batch, seqlen, heads, head_dim) tensors, from a CUDA graph.
    variant: a FA3JIT_PLAN_DEBUG setting (src/codegen/knobs.c) in force while the kernel is built
    (its first call, outside the capture); "" = the process's own setting (normally none)."""
    import os
    import torch
    import fa3jit
    from fa3jit import _core
    tdt, b, h = sweep_shape(dtype, hd, seqlen)
    q, k, v = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=tdt) for _ in range(3))
    # A context per variant (contexts remember kernels by config, not by plan), made current as
    # the process-wide one while this variant's call is built and captured; never freed.
    fn = lambda: fa3jit.flash_attn_func(q, k, v, causal=causal)
    if not variant:
        return tflops(b, h, seqlen, hd, causal, graph_ms(fn))
    default = _core.default_context()
    if variant not in VARIANT_CONTEXTS:
        VARIANT_CONTEXTS[variant] = _core.Context()
    saved = os.environ.get("FA3JIT_PLAN_DEBUG")
    os.environ["FA3JIT_PLAN_DEBUG"] = variant
    _core._default = VARIANT_CONTEXTS[variant]
    try:
        ms = graph_ms(fn)
    finally:
        _core._default = default
        os.environ.pop("FA3JIT_PLAN_DEBUG", None)
        if saved is not None:
            os.environ["FA3JIT_PLAN_DEBUG"] = saved
    return tflops(b, h, seqlen, hd, causal, ms)


def check_variant(variant):
    """Exits on a knob name knobs.c does not know (the library would warn, then time the default
    kernel)."""
    import pathlib
    import re
    plan = pathlib.Path(__file__).resolve().parents[1] / "src" / "codegen" / "knobs.c"
    known = set(re.findall(r'\{"(\w+)", offsetof\(fa3_plan', plan.read_text()))
    for part in variant.split(","):
        name, _, value = part.partition("=")
        if name not in known or not value.isdigit():
            sys.exit(f"compare.py: variant {variant!r}: {part!r} is not knob=digit with a knob "
                     f"of src/codegen/knobs.c ({', '.join(sorted(known))})")


VARIANT_CONTEXTS = {}  # FA3JIT_PLAN_DEBUG setting -> fa3jit Context


def gemm_tflops(dtype, n=8192):
    """cuBLAS n×n×n matrix product on random normal inputs, timed as the attention calls are (a
    CUDA graph under do_bench, L2 flushed): the tensor-core rate this card sustains right now."""
    import torch
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    a, b = (torch.randn(n, n, device="cuda", dtype=tdt) for _ in range(2))
    ms = graph_ms(lambda: torch.matmul(a, b))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fa3-gen", default="build/fa3-gen")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--json", default=None, help="write all rows to this file")
    ap.add_argument("--layout", default="mixed", choices=["mixed", "bshd", "bhsd"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--fa3-timer", choices=["bench", "python"], default="python",
                    help="python: the library fa3jit's Python layer loads ($FA3JIT_LIBRARY, which "
                    "tools/gpu-run.sh points at the carried build; --fa3-gen is not used)")
    ap.add_argument("--l2", choices=["flush", "warm"], default="flush",
                    help="--fa3-timer python: L2 flushed before each call, or calls back to back")
    ap.add_argument("--variants", default="",
                    help="--fa3-timer python: ';'-separated FA3JIT_PLAN_DEBUG settings, each timed "
                    "as an extra fa3jit column beside the default, the columns' order rotated "
                    "each round (same-run A/B); balanced when --repeat is a multiple of the "
                    "number of fa3jit columns")
    ap.add_argument("--gemm", action="store_true",
                    help="--fa3-timer python: also time a cuBLAS 8192^3 product per head_dim and "
                    "round, the same way (the card's tensor-core ceiling in this run)")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(";") if v]
    if (variants or a.gemm) and a.fa3_timer != "python":
        sys.exit("compare.py: --variants and --gemm need --fa3-timer python")
    for v in variants:
        check_variant(v)
    if variants and a.repeat % (1 + len(variants)):
        print(f"compare.py: warning: {a.repeat} rounds for {1 + len(variants)} fa3jit columns: "
              "not every column is timed first equally often", file=sys.stderr)
    global L2_MODE
    L2_MODE = a.l2
    if a.l2 == "warm" and a.fa3_timer != "python":
        sys.exit("compare.py: --l2 warm needs --fa3-timer python (fa3-gen bench runs warm, "
                 "cuDNN's do_bench flushes L2)")
    if a.fa3_timer == "python":
        if a.layout == "bhsd":
            sys.exit("compare.py: --fa3-timer python takes fa3jit's (batch, seqlen, heads, "
                     "head_dim) tensors: use --layout mixed or bshd")
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] /
                               "python"))
    seqlens = [int(s) for s in a.seqlens.split(",")]
    rows = []
    for dtype in a.dtypes.split(","):
        for hd in (int(x) for x in a.head_dims.split(",")):
            args = ["--dtype", dtype, "--head-dim", str(hd), "--both"]
            if a.layout == "bhsd":
                args += ["--layout", "bhsd"]
            sdpa_layout = "bshd" if a.layout == "bshd" else "bhsd"
            runs = []  # one {(seqlen, causal): tflops} per fa3-gen process (or python round)
            cudnn = {}  # (seqlen, causal) -> [tflops per repeat]
            var = {}  # (variant, seqlen, causal) -> [tflops per repeat]
            gemm = []
            for rnd in range(max(1, a.repeat)):
                if a.fa3_timer == "python":
                    runs.append({})
                    if a.gemm:
                        gemm.append(gemm_tflops(dtype))
                    # the fa3jit columns in an order rotated each round (the first timing of a
                    # shape read 2-4% low in one run)
                    order = [""] + variants
                    order = order[rnd % len(order):] + order[:rnd % len(order)]
                    for causal in (False, True):
                        for s in seqlens:
                            for v in order:
                                t = fa3_python_tflops(dtype, hd, s, causal, v)
                                if v:
                                    var.setdefault((v, s, causal), []).append(t)
                                else:
                                    runs[-1][(s, causal)] = t
                            cudnn.setdefault((s, causal), []).append(cudnn_tflops(
                                dtype, hd, s, causal, sdpa_layout, graph=True))
                    continue
                runs.append(fa3_gen_bench(a.fa3_gen, args))
                for key in runs[-1]:
                    if key[0] in seqlens:
                        cudnn.setdefault(key, []).append(cudnn_tflops(
                            dtype, hd, key[0], key[1], sdpa_layout))
            fa3 = {key: statistics.median(r[key] for r in runs if key in r) for key in cudnn}
            if gemm:
                print(f"{dtype} hd{hd:<3} cuBLAS 8192^3 GEMM {statistics.median(gemm):6.1f} "
                      f"TFLOP/s ({min(gemm):.0f}-{max(gemm):.0f})", flush=True)
            for causal in (False, True):
                for s in seqlens:
                    if (s, causal) not in fa3:
                        continue
                    c = statistics.median(cudnn[(s, causal)])
                    runs_fa3 = [r[(s, causal)] for r in runs if (s, causal) in r]
                    rows.append(dict(dtype=dtype, head_dim=hd, seqlen=s, causal=causal,
                                     fa3jit=fa3[(s, causal)], cudnn=c, ratio=fa3[(s, causal)] / c,
                                     fa3jit_runs=runs_fa3, cudnn_runs=cudnn[(s, causal)]))
                    r = rows[-1]
                    if gemm:
                        r["gemm_runs"] = gemm
                    r["variants"] = {v: var[(v, s, causal)] for v in variants}
                    vtext = "".join(f"  [{v}] {statistics.median(var[(v, s, causal)]):6.1f} "
                                    f"x{statistics.median(var[(v, s, causal)]) / c:.2f}"
                                    for v in variants)
                    spread = (f"  (fa3jit {min(runs_fa3):.0f}-{max(runs_fa3):.0f}, cuDNN "
                              f"{min(r['cudnn_runs']):.0f}-{max(r['cudnn_runs']):.0f})"
                              if len(runs_fa3) > 1 else "")
                    print(f"{dtype} hd{hd:<3} {'causal' if causal else 'full  '} {s:6d}  "
                          f"fa3jit {r['fa3jit']:6.1f}  cuDNN {r['cudnn']:6.1f}  x{r['ratio']:.2f}"
                          + spread + vtext, flush=True)
    print()
    print("| dtype | head_dim | causal | seqlen | fa3jit TFLOP/s | cuDNN TFLOP/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['head_dim']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | "
              f"{r['fa3jit']:.1f} | {r['cudnn']:.1f} | {r['ratio']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
