#!/usr/bin/env python3
"""One shape of FA4's forward (flash-attn-4, CuTeDSL), called REPS times on fresh random inputs,
for a profiler to pick one launch of (tools/gpu-run.sh step ncu_fa4: ncu skips the compile's and
the first calls' launches). The shape is compare.py's sweep shape: batch * seqlen = 16384,
heads * head_dim = 2048, layout (batch, seqlen, heads, head_dim).

  source .peers/a/env.sh; python3 tools/probes/fa4_call.py --head-dim 128 --seqlen 16384 [--causal]
"""
import argparse

import torch


def sweep_args(who, min_reps):
    """(options, torch dtype, batch, heads) of a probe's compare.py sweep shape (also
    cudnn_call.py's); who names the probe in its errors, min_reps the launches ncu skips + 1."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    if a.seqlen < 1 or 16384 % a.seqlen or a.head_dim < 1 or 2048 % a.head_dim:
        ap.error(f"--seqlen {a.seqlen} must divide 16384 and --head-dim {a.head_dim} 2048")
    if a.reps < min_reps:
        ap.error(f"--reps {a.reps} must be at least {min_reps} ({who} profiles launch {min_reps})")
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    return a, dt, 16384 // a.seqlen, 2048 // a.head_dim


def call_reps(fn, a, b, h, who):
    """fn() a.reps times, then a check that its last output is finite and a line naming the
    shape (who: the library)."""
    for _ in range(a.reps):
        out = fn()
    torch.cuda.synchronize()
    o = out[0] if isinstance(out, tuple) else out
    if not torch.isfinite(o).all():
        raise SystemExit(f"{who}'s output holds a non-finite value")
    print(f"{who} {a.dtype} hd{a.head_dim} seqlen {a.seqlen} batch {b} heads {h}"
          f"{' causal' if a.causal else ''}: {a.reps} calls")


def main():
    from flash_attn.cute import flash_attn_func
    a, dt, b, h = sweep_args("ncu_fa4", 4)
    q, k, v = (torch.randn(b, a.seqlen, h, a.head_dim, device="cuda", dtype=dt) for _ in range(3))
    call_reps(lambda: flash_attn_func(q, k, v, causal=a.causal), a, b, h, "FA4")


if __name__ == "__main__":
    main()
