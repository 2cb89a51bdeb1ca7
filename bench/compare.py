#!/usr/bin/env python3
"""Times fa3jit, cuDNN fused attention (PyTorch SDPA) and FA4 (flash-attn-4 4.0.0b36, CuTeDSL:
`from flash_attn.cute import flash_attn_func`, the peers of ../shared/peers/README.md) on the same
shapes in the same device run, and prints a markdown table with fa3jit's ratio to each and to the
faster of the two.

Shapes: the FlashAttention-3 paper sweep, batch*seqlen = 16384, num_heads*head_dim = 2048.
Inputs: random normal, fresh tensors for every timing. Memory layout (--layout): "mixed"
(default, the tables in bench/RESULTS.md until 2026-11-29): fa3jit (batch, seqlen, heads,
head_dim) contiguous as FlashAttention takes it, cuDNN (batch, heads, seqlen, head_dim)
contiguous as in ../shared/baselines/h200-sdpa.json; "bshd" or "bhsd": fa3jit and cuDNN on that
layout (cuDNN through a transposed view for bshd). FA4 always takes (batch, seqlen, heads,
head_dim) contiguous, its own layout.
FLOPs: 4*batch*heads*seqlen^2*head_dim, halved for causal (the same count fa3-gen uses).

--peers cudnn,fa4 (default: cuDNN, and FA4 where it imports; `source .peers/a/env.sh` puts it on
PYTHONPATH): the peers timed. Naming fa4 when it does not import is an error; a shape FA4 refuses
(or fails on) reads n/a, with its reason printed once and kept in the JSON row (fa4_error).
--fa3-timer: "python" (default) times every library the same way, in this process: per shape,
one call of each (fa3jit.flash_attn_func, SDPA, FA4's flash_attn_func) captured in a CUDA graph
and replayed under triton's do_bench (median, warmup 25 ms, rep 100 ms, L2 flushed before each
replay), so that host-side costs (Python, ctypes, tensor maps, CuTeDSL's argument handling) stay
out of all times; each library's first call of a config (fa3jit's JIT, FA4's 1-5 s CuTeDSL
compile) is made before the capture, outside the timing, FA4's for all shapes of a head_dim
before its rounds (fa4_warm: no seconds of idle GPU between two libraries' timings). --l2 warm times 10 calls back to back per
replay instead of do_bench's one call after an L2 flush. "bench" times fa3jit with `fa3-gen
bench` (one process runs all shapes of a head_dim back to back, no L2 flush) and cuDNN and FA4
with do_bench directly (L2 flushed before each call).
--repeat N: N rounds, the median kept; within a round each shape's columns (fa3jit, its
--variants, cuDNN, FA4) are timed one after the other in an order rotated by one place each round
(and each shape), so that over N = the number of columns rounds each column stands once in every
place. The H200's SM clock moved between 1485 and 1980 MHz within one run (nvidia-smi, 0.5 s
samples) and the first of three rounds ran fastest for both libraries (52 and 62 of 72 shapes):
the per-shape rotation compares them at the same clock. (--fa3-timer bench: fa3-gen bench in N
processes, one kernel's speed moved up to 15% between processes on some shapes; the peers'
order rotated per shape.)

Printed: a line per shape as it is done (TFLOP/s, ratios, the rounds' spread), then the table
(dtype, head_dim, causal, seqlen, fa3jit / cuDNN / FA4 TFLOP/s, fa3jit/cuDNN, fa3jit/FA4,
fa3jit/max(cuDNN,FA4); n/a where a peer did not run), then summary lines: on how many rows
fa3jit >= 1.0x the faster peer, the median of fa3jit / faster peer and its minimum with the row,
over all rows and split at seqlen 4096 (bench/compare_report.py, tested by bench/test_compare.py).
--json: the rows, each with the medians, every round's values (<library>_runs), ratio_cudnn,
ratio_fa4, best_peer, ratio_best ("ratio": fa3jit / cuDNN, as before).

--variants "knob=v;knob=v,knob2=v" (python timer): extra fa3jit columns, each kernel planned
with that FA3JIT_PLAN_DEBUG setting, timed beside the default in the rotated order.
--gemm (python timer): a cuBLAS 8192^3 product per head_dim and round, timed the same way.
--gqa R (python timer): grouped-query attention, num_heads_k = num_heads / R for every library
(SDPA with enable_gqa, FA4's K/V with fewer heads); the FLOP count stays the query heads'.

usage: bench/compare.py [--fa3-gen build/fa3-gen] [--dtypes bf16,fp16] [--head-dims 64,128,256]
                        [--seqlens 512,...,16384] [--layout mixed|bshd|bhsd] [--repeat 1]
                        [--peers cudnn,fa4] [--fa3-timer bench|python] [--l2 flush|warm]
                        [--variants V;V] [--gemm] [--gqa R] [--json OUT.json]
"""
import argparse
import json
import statistics
import subprocess
import sys

import compare_report as report

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


GQA = 1  # --gqa: num_heads / num_heads_k


def kv_heads(h):
    """num_heads_k of a shape with h query heads under --gqa."""
    return h // GQA


def tflops(b, h, seqlen, hd, causal, ms):
    return 4.0 * b * h * seqlen * seqlen * hd * (0.5 if causal else 1.0) / (ms * 1e-3) / 1e12


def cudnn_tflops(dtype, hd, seqlen, causal, layout, graph=False):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    tdt, b, h = sweep_shape(dtype, hd, seqlen)
    if layout == "bshd":
        q, k, v = (torch.randn(b, seqlen, n, hd, device="cuda", dtype=tdt).transpose(1, 2)
                   for n in (h, kv_heads(h), kv_heads(h)))
    else:
        q, k, v = (torch.randn(b, n, seqlen, hd, device="cuda", dtype=tdt)
                   for n in (h, kv_heads(h), kv_heads(h)))
    gqa = {"enable_gqa": True} if GQA > 1 else {}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                      **gqa)
        ms = graph_ms(fn) if graph else do_bench(fn, warmup=25, rep=100, return_mode="median")
    return tflops(b, h, seqlen, hd, causal, ms)


L2_MODE = "flush"  # --l2


def capture_graph(fn, calls=1):
    """A CUDA graph of calls back-to-back calls of fn, after a first call outside the capture
    (fa3jit: the kernel's JIT; FA4: its compile) and a warm call on a side stream."""
    import torch
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return g


def graph_ms(fn):
    """fn replayed from a CUDA graph, so that neither library's host-side cost lands in the time.
    L2_MODE "flush": do_bench (L2 flushed before each rep, events around it, median); "warm": a
    graph of 10 back-to-back calls replayed 10 times after 3 warm replays, median per call (as
    `fa3-gen bench` times: each call finds the previous one's data in L2)."""
    import torch
    from triton.testing import do_bench
    calls = 1 if L2_MODE == "flush" else 10
    g = capture_graph(fn, calls)
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
    q, k, v = (torch.randn(b, seqlen, n, hd, device="cuda", dtype=tdt)
               for n in (h, kv_heads(h), kv_heads(h)))
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


FA4_NA = {}  # (dtype, head_dim, seqlen, causal) -> why FA4 did not run that shape


def fa4_import():
    """(flash_attn_func, "flash-attn-4 <version>") of FA4 (CuTeDSL), or (None, why its import
    failed): the peers' wheels, on PYTHONPATH after `source .peers/a/env.sh`."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # noqa: BLE001 - ImportError, or the DSL's own errors while loading
        return None, f"{type(e).__name__}: {e}"
    try:
        from importlib.metadata import version
        about = "flash-attn-4 " + version("flash-attn-4")
    except Exception:  # noqa: BLE001 - installed without its dist-info
        about = "flash_attn " + str(getattr(sys.modules.get("flash_attn"), "__version__", "?"))
    return flash_attn_func, about


def fa4_tflops(dtype, hd, seqlen, causal, graph=True, warm_only=False):
    """FA4's flash_attn_func on (batch, seqlen, heads, head_dim) contiguous tensors (its layout,
    whatever --layout says), timed as fa3jit is: from a CUDA graph (graph_ms), or with graph=False
    (--fa3-timer bench) under do_bench directly, as cuDNN is there. Its first call of a config
    compiles (CuTeDSL, 1-5 s) and is made here, outside the capture and the timing (warm_only:
    that call alone, see fa4_warm). None (n/a) where FA4 refuses the shape or fails; the reason is
    kept in FA4_NA and printed once."""
    import torch
    from flash_attn.cute import flash_attn_func
    from triton.testing import do_bench
    key = (dtype, hd, seqlen, causal)
    if key in FA4_NA:
        return None
    tdt, b, h = sweep_shape(dtype, hd, seqlen)
    q, k, v = (torch.randn(b, seqlen, n, hd, device="cuda", dtype=tdt)
               for n in (h, kv_heads(h), kv_heads(h)))
    fn = lambda: flash_attn_func(q, k, v, causal=causal)  # (out, lse) or out: either is timed
    try:
        fn()
        torch.cuda.synchronize()
        if warm_only:
            return None
        ms = graph_ms(fn) if graph else do_bench(fn, warmup=25, rep=100, return_mode="median")
    except Exception as e:  # noqa: BLE001 - an unsupported shape says why, in its n/a cell
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
        if why not in FA4_NA.values():
            print(f"FA4 n/a on {dtype} hd{hd} {'causal' if causal else 'full'} {seqlen}: {why}",
                  file=sys.stderr, flush=True)
        FA4_NA[key] = why
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a sticky error shows again in the next library
            pass
        return None
    return tflops(b, h, seqlen, hd, causal, ms)


def check_variant(variant):
    """Exits on a knob name knobs.c does not know or a value outside its range (the library would
    warn, then time the default kernel under the variant's name: session 12's `dyn_sched=3`)."""
    import pathlib
    import re
    plan = pathlib.Path(__file__).resolve().parents[1] / "src" / "codegen" / "knobs.c"
    known = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(
        r'\{"(\w+)", offsetof\(fa3_plan, \w+\), (\d+), (\d+)\}', plan.read_text())}
    for part in variant.split(","):
        name, _, value = part.partition("=")
        if name not in known or not value.isdigit():
            sys.exit(f"compare.py: variant {variant!r}: {part!r} is not knob=digit with a knob "
                     f"of src/codegen/knobs.c ({', '.join(sorted(known))})")
        lo, hi = known[name]
        if not lo <= int(value) <= hi:
            sys.exit(f"compare.py: variant {variant!r}: {name} takes {lo}..{hi} "
                     f"(src/codegen/knobs.c), not {value}")


VARIANT_CONTEXTS = {}  # FA3JIT_PLAN_DEBUG setting -> fa3jit Context


def gemm_tflops(dtype, n=8192):
    """cuBLAS n×n×n matrix product on random normal inputs, timed as the attention calls are (a
    CUDA graph under do_bench, L2 flushed): the tensor-core rate this card sustains right now."""
    import torch
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    a, b = (torch.randn(n, n, device="cuda", dtype=tdt) for _ in range(2))
    ms = graph_ms(lambda: torch.matmul(a, b))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def fa4_warm(dtype, hd, seqlens):
    """FA4's first call of every shape of one dtype and head_dim, before the timed rounds: its
    compiles (1-5 s a config) would otherwise leave the GPU idle, and cooling, between two
    libraries' timings of a shape. A shape that fails here reads n/a (FA4_NA)."""
    for causal in (False, True):
        for s in seqlens:
            fa4_tflops(dtype, hd, s, causal, warm_only=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--fa3-gen", default="build/fa3-gen")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--json", default=None, help="write all rows to this file")
    ap.add_argument("--layout", default="mixed", choices=["mixed", "bshd", "bhsd"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--peers", default=None,
                    help="comma-separated: cudnn, fa4 (or none); default cudnn, and fa4 where "
                    "`from flash_attn.cute import flash_attn_func` works. Naming fa4 makes its "
                    "import failure an error")
    ap.add_argument("--fa3-timer", choices=["bench", "python"], default="python",
                    help="python: the library fa3jit's Python layer loads ($FA3JIT_LIBRARY, which "
                    "tools/gpu-run.sh points at the carried build; --fa3-gen is not used)")
    ap.add_argument("--l2", choices=["flush", "warm"], default="flush",
                    help="--fa3-timer python: L2 flushed before each call, or calls back to back")
    ap.add_argument("--variants", default="",
                    help="--fa3-timer python: ';'-separated FA3JIT_PLAN_DEBUG settings, each timed "
                    "as an extra fa3jit column beside the default, all columns' order rotated "
                    "each round (same-run A/B); balanced when --repeat is a multiple of the "
                    "number of columns")
    ap.add_argument("--gemm", action="store_true",
                    help="--fa3-timer python: also time a cuBLAS 8192^3 product per head_dim and "
                    "round, the same way (the card's tensor-core ceiling in this run)")
    ap.add_argument("--gqa", type=int, default=1,
                    help="--fa3-timer python: num_heads / num_heads_k (grouped-query attention; "
                    "must divide every head dim's num_heads = 2048 / head_dim)")
    return ap.parse_args(argv)


def choose_peers(text):
    """(peers, FA4's "name version" or None) for --peers text (None: the default); exits naming
    what is wrong where a named peer cannot run."""
    if text is None:
        fa4, about = fa4_import()
        if fa4 is None:
            print(f"compare.py: FA4 left out: `from flash_attn.cute import flash_attn_func` "
                  f"failed ({about}); ../shared/peers/README.md says how to bring it", 
                  file=sys.stderr)
            return ["cudnn"], None
        return ["cudnn", "fa4"], about
    try:
        peers = report.parse_peers(text)
    except ValueError as e:
        sys.exit(f"compare.py: {e}")
    if "fa4" not in peers:
        return peers, None
    fa4, about = fa4_import()
    if fa4 is None:
        sys.exit(f"compare.py: --peers {text!r} asks for FA4, but `from flash_attn.cute import "
                 f"flash_attn_func` failed: {about}. On the GPU machine, with .peers/a and "
                 ".peers/b sent: bash .peers/a/gpu-setup.sh; source .peers/a/env.sh "
                 "(../shared/peers/README.md)")
    return peers, about


def peer_versions(peers, fa4_about):
    """The peers as the run's first line names them: cuDNN's and PyTorch's versions, FA4's."""
    import torch
    names = []
    if "cudnn" in peers:
        names.append(f"cuDNN {torch.backends.cudnn.version()} (PyTorch {torch.__version__} SDPA)")
    if "fa4" in peers:
        names.append(f"FA4 ({fa4_about})")
    return ", ".join(names) or "no peer"


def column_timers(dtype, hd, variants, peers, sdpa_layout, python_timer):
    """{column: f(seqlen, causal) -> TFLOP/s or None}: fa3jit and its variants (python timer
    only: `fa3-gen bench` runs apart), then the peers."""
    graph = python_timer
    timers = {}
    if python_timer:
        timers["fa3jit"] = lambda s, c: fa3_python_tflops(dtype, hd, s, c)
        for v in variants:
            timers[f"[{v}]"] = lambda s, c, v=v: fa3_python_tflops(dtype, hd, s, c, v)
    if "cudnn" in peers:
        timers["cudnn"] = lambda s, c: cudnn_tflops(dtype, hd, s, c, sdpa_layout, graph=graph)
    if "fa4" in peers:
        timers["fa4"] = lambda s, c: fa4_tflops(dtype, hd, s, c, graph=graph)
    return timers


def time_rounds(a, dtype, hd, seqlens, timers, python_timer):
    """--repeat rounds over the shapes of one dtype and head_dim, each shape's columns in an order
    rotated each round. (times: {(column, seqlen, causal): [TFLOP/s of each round it ran]},
    runs: --fa3-timer bench: one {(seqlen, causal): TFLOP/s} per fa3-gen process, gemm: --gemm
    TFLOP/s per round)."""
    times, runs, gemm = {}, [], []
    if "fa4" in timers:
        fa4_warm(dtype, hd, seqlens)
    for rnd in range(max(1, a.repeat)):
        if python_timer and a.gemm:
            gemm.append(gemm_tflops(dtype))
        if not python_timer:
            args = ["--dtype", dtype, "--head-dim", str(hd), "--both"]
            runs.append(fa3_gen_bench(a.fa3_gen, args + (["--layout", "bhsd"]
                                                         if a.layout == "bhsd" else [])))
        shapes = [(s, c) for c in (False, True) for s in seqlens
                  if python_timer or (s, c) in runs[-1]]
        for i, (s, causal) in enumerate(shapes):
            for col in report.rotated(timers, rnd, shift=i):
                t = timers[col](s, causal)
                if t is not None:
                    times.setdefault((col, s, causal), []).append(t)
    return times, runs, gemm


def make_row(dtype, hd, s, causal, fa3_runs, times, peers, variants, gemm):
    """One shape's JSON row: medians over the rounds, the rounds' values, ratios (n/a: None)."""
    r = dict(dtype=dtype, head_dim=hd, seqlen=s, causal=causal, gqa=GQA,
             fa3jit=statistics.median(fa3_runs), fa3jit_runs=fa3_runs)
    for p in peers:
        t = times.get((p, s, causal), [])
        r[p], r[f"{p}_runs"] = (statistics.median(t) if t else None), t
    if "fa4" in peers and (dtype, hd, s, causal) in FA4_NA:
        r["fa4_error"] = FA4_NA[(dtype, hd, s, causal)]
    report.add_ratios(r, peers)
    if gemm:
        r["gemm_runs"] = gemm
    r["variants"] = {v: times.get((f"[{v}]", s, causal), []) for v in variants}
    return r


def main(argv=None):
    a = parse_args(argv)
    variants = [v for v in a.variants.split(";") if v]
    if (variants or a.gemm) and a.fa3_timer != "python":
        sys.exit("compare.py: --variants and --gemm need --fa3-timer python")
    for v in variants:
        check_variant(v)
    global L2_MODE, GQA
    L2_MODE = a.l2
    heads = [2048 // int(x) for x in a.head_dims.split(",")]
    if a.gqa < 1 or any(h % a.gqa for h in heads):
        sys.exit(f"compare.py: --gqa {a.gqa}: must be >= 1 and divide num_heads "
                 f"{', '.join(map(str, heads))} (2048 / head_dim)")
    if a.gqa > 1 and a.fa3_timer != "python":
        sys.exit("compare.py: --gqa needs --fa3-timer python (fa3-gen bench has no GQA shapes)")
    GQA = a.gqa
    if a.l2 == "warm" and a.fa3_timer != "python":
        sys.exit("compare.py: --l2 warm needs --fa3-timer python (fa3-gen bench runs warm, "
                 "cuDNN's do_bench flushes L2)")
    python_timer = a.fa3_timer == "python"
    if python_timer:
        if a.layout == "bhsd":
            sys.exit("compare.py: --fa3-timer python takes fa3jit's (batch, seqlen, heads, "
                     "head_dim) tensors: use --layout mixed or bshd")
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] /
                               "python"))
    peers, fa4_about = choose_peers(a.peers)
    ncols = (1 + len(variants) if python_timer else 0) + len(peers)
    if ncols > 1 and a.repeat % ncols:
        print(f"compare.py: warning: {a.repeat} rounds for {ncols} columns: not every column is "
              "timed in every place equally often on a shape", file=sys.stderr)
    print(f"fa3jit vs {peer_versions(peers, fa4_about)}; timer {a.fa3_timer}, L2 {a.l2}, "
          f"{f'GQA {GQA}, ' if GQA > 1 else ''}layout "
          f"{a.layout}, {max(1, a.repeat)} rounds", flush=True)
    seqlens = [int(s) for s in a.seqlens.split(",")]
    rows = []
    for dtype in a.dtypes.split(","):
        for hd in (int(x) for x in a.head_dims.split(",")):
            timers = column_timers(dtype, hd, variants, peers,
                                   "bshd" if a.layout == "bshd" else "bhsd", python_timer)
            times, runs, gemm = time_rounds(a, dtype, hd, seqlens, timers, python_timer)
            if gemm:
                print(f"{dtype} hd{hd:<3} cuBLAS 8192^3 GEMM {statistics.median(gemm):6.1f} "
                      f"TFLOP/s ({min(gemm):.0f}-{max(gemm):.0f})", flush=True)
            for causal in (False, True):
                for s in seqlens:
                    fa3_runs = (times.get(("fa3jit", s, causal), []) if python_timer else
                                [r[(s, causal)] for r in runs if (s, causal) in r])
                    if fa3_runs:
                        rows.append(make_row(dtype, hd, s, causal, fa3_runs, times, peers,
                                             variants, gemm))
                        print(report.row_line(rows[-1], peers), flush=True)
    print()
    print("\n".join(report.table_lines(rows, peers)))
    print()
    print("\n".join(report.summary_lines(rows, peers)))
    if variants:
        print()
        print("\n".join(report.variant_lines(rows)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
