#!/usr/bin/env python3
"""Decode speed (issue 16's table), one process, one device run: bf16, q len 1-4, long KV, GQA;
GB/s of K+V read once (2 · batch · seqlen_k · num_heads_k · head_dim · 2 bytes over the time).

Columns: fa3jit (flash_attn_func with its defaults: the library chooses split-KV, packed GQA and
the 64-row decode tile, fa3_fwd_tune), fa3jit with num_splits=1 and pack_gqa=False (one pass,
the prefill kernel: what the library did before split-KV), cuDNN (PyTorch SDPA, cuDNN backend,
enable_gqa, (b, h, s, d) tensors) and FA4 (flash_attn.cute.flash_attn_func) when it imports
(../shared/peers: source .peers/a/env.sh first). Each call captured in a CUDA graph and replayed
under do_bench (L2 flushed, median: bench/compare.py's graph_ms), the libraries in an order rotated
each round, --repeat rounds, the median kept; each library's output against cuDNN's (relative
L2 error) so a fast wrong answer shows.

usage: bench/decode.py [--repeat 3] [--json OUT.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPES = [  # (batch, seqlen_q, num_heads, num_heads_k, seqlen_k, head_dim): issue 16's table
    (32, 1, 32, 8, 32768, 128),
    (128, 1, 32, 8, 4096, 128),
    (8, 4, 32, 8, 65536, 128),
    (1, 1, 64, 8, 131072, 128),
    (64, 1, 16, 16, 8192, 64),
]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import torch
    import fa3jit
    from varlen import fa4, measure
    fa4_dense, _ = fa4()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for (b, sq, h, hk, sk, d) in SHAPES:
        torch.manual_seed(b + sk)
        q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                     enable_gqa=hk != h)
            return o.transpose(1, 2)
        fns = {"fa3jit": lambda: fa3jit.flash_attn_func(q, k, v),
               "fa3jit one pass": lambda: fa3jit.flash_attn_func(q, k, v, num_splits=1,
                                                                 pack_gqa=False),
               "cudnn": cudnn}
        if fa4_dense:
            fns["fa4"] = lambda: (lambda o: o[0] if isinstance(o, tuple) else o)(
                fa4_dense(q, k, v))
        ms, errors = measure(fns, a.repeat)
        ref = cudnn().float()
        err = {}
        for n, f in fns.items():
            if n != "cudnn" and ms.get(n) is not None:
                o = f().float()
                err[n] = (torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref)).item()
        byts = 2 * b * sk * hk * d * 2
        gbs = {n: (byts / (t * 1e-3) / 1e9 if t else None) for n, t in ms.items()}
        rows.append(dict(shape=[b, sq, h, hk, sk, d], ms=ms, gbs=gbs, err=err, errors=errors))
        txt = "  ".join(f"{n} {g:6.0f}" if g else f"{n} failed ({errors.get(n, '?')})"
                        for n, g in gbs.items())
        best = max((g for n, g in gbs.items() if n in ("cudnn", "fa4") and g), default=None)
        ratio = f"  -> {gbs['fa3jit'] / best:.2f}x the faster peer" if best and gbs["fa3jit"] else ""
        print(f"decode b{b} sq{sq} h{h}/{hk} sk{sk} d{d} GB/s: {txt}{ratio}  "
              f"err vs cudnn {', '.join(f'{n} {e:.1e}' for n, e in err.items())}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
