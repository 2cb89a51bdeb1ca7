#!/usr/bin/env python3
"""One shape of cuDNN's fused attention (PyTorch SDPA, cuDNN backend), called REPS times on fresh
random inputs, for a profiler to pick one launch of (tools/gpu-run.sh step ncu_cudnn). The shape
is compare.py's sweep shape (batch * seqlen = 16384, heads * head_dim = 2048) in the layout
compare.py gives cuDNN by default: (batch, heads, seqlen, head_dim) contiguous.

  python3 tools/probes/cudnn_call.py --head-dim 256 --seqlen 512 --causal [--dtype fp16]
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


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
    if a.reps < 4:
        ap.error(f"--reps {a.reps} must be at least 4 (ncu_cudnn profiles the 4th launch)")
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    b, h = 16384 // a.seqlen, 2048 // a.head_dim
    q, k, v = (torch.randn(b, h, a.seqlen, a.head_dim, device="cuda", dtype=dt) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(a.reps):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    torch.cuda.synchronize()
    if not torch.isfinite(o).all():
        raise SystemExit("cudnn_call.py: cuDNN's output holds a non-finite value")
    print(f"cuDNN {torch.backends.cudnn.version()} {a.dtype} hd{a.head_dim} seqlen {a.seqlen} "
          f"batch {b} heads {h}{' causal' if a.causal else ''}: {a.reps} calls")


if __name__ == "__main__":
    main()
