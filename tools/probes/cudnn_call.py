#!/usr/bin/env python3
"""One shape of cuDNN's fused attention (PyTorch SDPA, cuDNN backend), called REPS times on fresh
random inputs, for a profiler to pick one launch of (tools/gpu-run.sh step ncu_cudnn). The shape
is compare.py's sweep shape (batch * seqlen = 16384, heads * head_dim = 2048) in the layout
compare.py gives cuDNN by default: (batch, heads, seqlen, head_dim) contiguous.

  python3 tools/probes/cudnn_call.py --head-dim 256 --seqlen 512 --causal [--dtype fp16]
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from fa4_call import call_reps, sweep_args  # the same options and shape (FA4 imported in main)


def main():
    a, dt, b, h = sweep_args("ncu_cudnn", 4)
    q, k, v = (torch.randn(b, h, a.seqlen, a.head_dim, device="cuda", dtype=dt) for _ in range(3))

    def sdpa():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    call_reps(sdpa, a, b, h, f"cuDNN {torch.backends.cudnn.version()}")


if __name__ == "__main__":
    main()
