#!/usr/bin/env python3
"""Probe (H200): tanh.approx.f32 near saturation. Prints, for x in decades 1 .. 1e8, how far
tanh.approx(x) is from 1 (the fp32 value of tanh there is 1.0 for x > 9.01)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _tanh_approx(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                  is_pure=True, pack=1)
    tl.store(y_ptr + offs, y, mask=m)


x = torch.logspace(-1, 8, 900001, device="cuda", dtype=torch.float64).float()
y = torch.empty_like(x)
_tanh_approx[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
ref = torch.tanh(x.double())
err = (y.double() - ref).abs()
for lo, hi in [(0.1, 1), (1, 3), (3, 9), (9, 20), (20, 100), (100, 1e3), (1e3, 1e4), (1e4, 1e5),
               (1e5, 1e6), (1e6, 1e8)]:
    sel = (x >= lo) & (x < hi)
    e = err[sel]
    i = int(torch.argmax(e))
    print(f"x in [{lo:g}, {hi:g}): max|tanh.approx - tanh| = {float(e.max()):.3e} at x = "
          f"{float(x[sel][i]):.6g} (approx {float(y[sel][i]):.9f}); values != 1: "
          f"{int((y[sel] != 1).sum())} of {int(sel.sum())}")
