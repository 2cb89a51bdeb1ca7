#!/usr/bin/env python3
"""Varlen and paged-KV prefill speed (issue 15's targets), one process, one device run:

  varlen   bf16 hd128, 16 heads, 16 sequences of random lengths summing to --total (16384)
           tokens, causal and not: fa3jit.flash_attn_varlen_func vs fa3jit's dense kernel on 16
           equal sequences of the same total (batch 16, seqlen total/16), vs FA4's
           flash_attn_varlen_func on the same inputs when `flash_attn.cute` imports
           (../shared/peers: source .peers/a/env.sh first);
  paged    batch 4, seqlen 4096 (causal and not): fa3jit.flash_attn_func with page_table at page
           sizes 1, 16, 64, 256 (a shuffled table over the same keys) vs the contiguous kernel,
           and FA4 on the same pages.

Each call is captured in a CUDA graph and replayed under do_bench (L2 flushed, median:
bench/compare.py's graph_ms), libraries in an order rotated each round, --repeat rounds, the
median kept. FLOPs: 4 · heads · head_dim · visible (query, key) pairs, counted per sequence
(causal: bottom-right, = L(L+1)/2 for L = L; FlashAttention's dense convention halves L² —
both columns use the same count for the same shape). A library that fails on a shape is
reported with its error and the run goes on.

usage: bench/varlen.py [--total 16384] [--seed 7] [--repeat 3] [--page-sizes 1,16,64,256]
                       [--json OUT.json] [--equal]
"""
import argparse
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

H, D = 16, 128


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--total", type=int, default=16384)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--page-sizes", default="1,16,64,256")
    p.add_argument("--json", default=None)
    p.add_argument("--equal", action="store_true",
                   help="also time the varlen kernel on the dense kernel's equal lengths")
    a = p.parse_args(argv)
    if a.total < 16 or a.repeat < 1:
        p.error(f"--total {a.total} must be >= 16 and --repeat {a.repeat} >= 1")
    try:
        a.page_sizes = [int(x) for x in a.page_sizes.split(",")]
    except ValueError:
        p.error(f"--page-sizes {a.page_sizes!r} is not a comma-separated list of ints")
    if any(not 1 <= s <= 256 for s in a.page_sizes):
        p.error(f"--page-sizes {a.page_sizes}: each must be in 1..256")
    return a


def random_lengths(total, n, seed):
    """n positive lengths summing to total (sorted random cuts)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, total), n - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def pairs(lq, lk, causal):
    """Visible (query, key) pairs of one sequence, bottom-right causal."""
    if not causal:
        return lq * lk
    return sum(max(0, min(lk, i + lk - lq + 1)) for i in range(lq))


def measure(fns, repeat):
    """{name: median ms} over repeat rounds, the order rotated each round; errors kept."""
    from compare import graph_ms
    times, errors = {n: [] for n in fns}, {}
    names = list(fns)
    for r in range(repeat):
        for n in names[r % len(names):] + names[:r % len(names)]:
            if n in errors:
                continue
            try:
                times[n].append(graph_ms(fns[n]))
            except Exception as e:  # a library that cannot run this shape
                errors[n] = f"{type(e).__name__}: {str(e)[:160]}"
    return {n: (statistics.median(t) if t else None) for n, t in times.items()}, errors


def fa4():
    try:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
        return flash_attn_func, flash_attn_varlen_func
    except Exception as e:
        print(f"FA4 not available ({type(e).__name__}: {e}); source .peers/a/env.sh")
        return None, None


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    import torch
    import fa3jit
    fa4_dense, fa4_varlen = fa4()
    dt, dev = torch.bfloat16, "cuda"
    results = []

    lens = random_lengths(a.total, 16, a.seed)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    q, k, v = (torch.randn(a.total, H, D, device=dev, dtype=dt) for _ in range(3))
    seq = a.total // 16
    qd, kd, vd = (x[:16 * seq].reshape(16, seq, H, D) for x in (q, k, v))
    for causal in (False, True):
        flops_v = 4 * H * D * sum(pairs(L, L, causal) for L in lens)
        flops_d = 4 * H * D * 16 * pairs(seq, seq, causal)
        fns = {
            "fa3jit varlen": lambda: fa3jit.flash_attn_varlen_func(
                q, k, v, cu, cu, max(lens), max(lens), causal=causal),
            "fa3jit dense": lambda: fa3jit.flash_attn_func(qd, kd, vd, causal=causal),
        }
        if a.equal:  # the varlen kernel on the dense kernel's 16 equal lengths
            cu_eq = torch.arange(17, dtype=torch.int32, device=dev) * seq
            fns["fa3jit varlen equal"] = lambda: fa3jit.flash_attn_varlen_func(
                q[:16 * seq], k[:16 * seq], v[:16 * seq], cu_eq, cu_eq, seq, seq, causal=causal)
        if fa4_varlen:
            fns["fa4 varlen"] = lambda: fa4_varlen(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                   max_seqlen_q=max(lens),
                                                   max_seqlen_k=max(lens), causal=causal)
        ms, err = measure(fns, a.repeat)
        tf = {n: (flops_d if "dense" in n or "equal" in n else flops_v) / (t * 1e-3) / 1e12
              if t else None
              for n, t in ms.items()}
        results.append(dict(kind="varlen", causal=causal, lengths=lens, ms=ms, tflops=tf,
                            errors=err))

    b, s = 4, 4096
    qp, kp, vp = (torch.randn(b, s, H, D, device=dev, dtype=dt) for _ in range(3))
    for causal in (False, True):
        flops = 4 * H * D * b * pairs(s, s, causal)
        fns = {"fa3jit contiguous": lambda: fa3jit.flash_attn_func(qp, kp, vp, causal=causal)}
        for ps in a.page_sizes:
            per_seq = -(-s // ps)
            perm = torch.randperm(b * per_seq, device=dev)
            pt = perm.view(b, per_seq).to(torch.int32).contiguous()
            kc = torch.zeros(b * per_seq, ps, H, D, device=dev, dtype=dt)
            vc = torch.zeros_like(kc)
            pad = per_seq * ps - s
            kpad = torch.nn.functional.pad(kp, (0, 0, 0, 0, 0, pad)).reshape(-1, ps, H, D)
            vpad = torch.nn.functional.pad(vp, (0, 0, 0, 0, 0, pad)).reshape(-1, ps, H, D)
            kc[perm], vc[perm] = kpad, vpad
            su = torch.full((b,), s, dtype=torch.int32, device=dev)
            fns[f"fa3jit page {ps}"] = (lambda kc=kc, vc=vc, pt=pt, su=su: fa3jit.flash_attn_func(
                qp, kc, vc, causal=causal, page_table=pt, seqused_k=su))
            if fa4_varlen:
                fns[f"fa4 page {ps}"] = (lambda kc=kc, vc=vc, pt=pt, su=su: fa4_varlen(
                    qp, kc, vc, page_table=pt, seqused_k=su, max_seqlen_q=s, max_seqlen_k=s,
                    causal=causal))
        if fa4_dense:
            fns["fa4 contiguous"] = lambda: fa4_dense(qp, kp, vp, causal=causal)
        ms, err = measure(fns, a.repeat)
        tf = {n: flops / (t * 1e-3) / 1e12 if t else None for n, t in ms.items()}
        results.append(dict(kind="paged", causal=causal, batch=b, seqlen=s, ms=ms, tflops=tf,
                            errors=err))

    for r in results:
        head = (f"varlen 16 seqs (min {min(r['lengths'])}, max {max(r['lengths'])}, total "
                f"{a.total})" if r["kind"] == "varlen" else f"paged prefill b{r['batch']} "
                f"s{r['seqlen']}")
        print(f"\n{head}, causal={r['causal']}: TFLOP/s")
        base = r["tflops"].get("fa3jit dense" if r["kind"] == "varlen" else "fa3jit contiguous")
        for n, t in r["tflops"].items():
            if t is None:
                print(f"  {n:20s} failed: {r['errors'].get(n, '?')}")
            else:
                ratio = f" ({t / base:.2f}x fa3jit {'dense' if r['kind'] == 'varlen' else 'contiguous'})" if base else ""
                print(f"  {n:20s} {t:7.1f}{ratio}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
