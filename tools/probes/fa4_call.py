#!/usr/bin/env python3
"""One shape of FA4's forward (flash-attn-4, CuTeDSL), called REPS times on fresh random inputs,
for a profiler to pick one launch of (tools/gpu-run.sh step ncu_fa4: ncu skips the compile's and
the first calls' launches). The shape is compare.py's sweep shape: batch * seqlen = 16384,
heads * head_dim = 2048, layout (batch, seqlen, heads, head_dim).

  source .peers/a/env.sh; python3 tools/probes/fa4_call.py --head-dim 128 --seqlen 16384 [--causal]
"""
import argparse

import torch
from flash_attn.cute import flash_attn_func


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if a.seqlen < 1 or 16384 % a.seqlen or a.head_dim < 1 or 2048 % a.head_dim:
        ap.error(f"--seqlen {a.seqlen} must divide 16384 and --head-dim {a.head_dim} 2048")
    if a.reps < 1:
        ap.error(f"--reps {a.reps} must be at least 1 (ncu_fa4 profiles the 4th launch)")
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    b, h = 16384 // a.seqlen, 2048 // a.head_dim
    q, k, v = (torch.randn(b, a.seqlen, h, a.head_dim, device="cuda", dtype=dt) for _ in range(3))
    for _ in range(a.reps):
        out = flash_attn_func(q, k, v, causal=a.causal)
    torch.cuda.synchronize()
    o = out[0] if isinstance(out, tuple) else out
    if not torch.isfinite(o).all():
        raise SystemExit("fa4_call.py: FA4's output holds a non-finite value")
    print(f"FA4 {a.dtype} hd{a.head_dim} seqlen {a.seqlen} batch {b} heads {h}"
          f"{' causal' if a.causal else ''}: {a.reps} calls")


if __name__ == "__main__":
    main()
