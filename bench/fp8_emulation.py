"""FP8 (e4m3) numerics in plain torch for the FP8 benchmarks and tests: rounding to e4m3,
quantization with one descale per tensor, per (batch, head group) or per block of rows, the
random-sign Hadamard rotation of FlashAttention-3's incoherent processing, and an fp64 attention
reference that can emulate the kernel's e4m3 P. Runs on any device (the CPU tests use fp64 on
small tensors); tensors are (batch, seqlen, heads, head_dim) as flash_attn_func takes them.

quantize_fp8() calls fa3jit.quantize_fp8 (the library's quantizer) when this fa3jit has it and
the tensor is on a GPU, and the torch quantizer here otherwise; it says which one it used.
"""
from __future__ import annotations

import math

FP8_MAX = 448.0           # the largest finite e4m3fn value
P_OFFSET = 256.0          # FA3's FP8 P: exp(s - max) · 2^8 rounded to e4m3 (its exponent offset)
_MASK64 = (1 << 64) - 1


def _torch():
    import torch
    return torch


# ---------------------------------------------------------------- rounding and quantization
def to_e4m3(x):
    """x rounded to e4m3fn (nearest even), saturating at ±448: torch's cast alone turns values
    past 448 into NaN."""
    torch = _torch()
    return x.float().clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def descale_of(amax):
    """amax / 448, with 1.0 where amax is 0 (a group of zeros), as fa3_quantize_fp8 does."""
    torch = _torch()
    amax = amax.float()
    return torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))


def quantize_per_tensor(x):
    """(e4m3 tensor, fp32 0-dim descale): one scale for the whole tensor."""
    d = descale_of(x.abs().amax())
    return to_e4m3(x.double() / d.double()), d


def quantize_per_head(x, num_descale_heads=None):
    """x (batch, seqlen, num_heads, head_dim) with one descale per (batch, head group): group g
    covers heads g·r .. g·r + r - 1, r = num_heads / num_descale_heads (None: num_heads, one
    per head). num_descale_heads = num_heads_k gives a q descale of flash_attn_func's shape
    (batch, num_heads_k). Returns (e4m3 tensor, fp32 descale (batch, num_descale_heads))."""
    b, s, h, d = x.shape
    g = h if num_descale_heads is None else num_descale_heads
    if g < 1 or h % g:
        raise ValueError(f"num_descale_heads {g} must divide num_heads {h}")
    amax = x.abs().reshape(b, s, g, h // g, d).amax(dim=(1, 3, 4))     # (b, g)
    desc = descale_of(amax)
    return to_e4m3(x.double() / expand_descale(desc, h).double()), desc


def expand_descale(descale, num_heads):
    """A (batch, groups) descale as a (batch, 1, num_heads, 1) factor: head h takes group
    h // (num_heads / groups)."""
    b, g = descale.shape
    return descale.repeat_interleave(num_heads // g, dim=1).reshape(b, 1, num_heads, 1)


def dequantize(x8, descale, dtype=None):
    """The values an FP8 kernel computes with: x8 · descale (a 0-dim, or a (batch, groups)
    descale as quantize_per_head gives), in fp64 unless dtype says otherwise."""
    torch = _torch()
    dtype = dtype or torch.float64
    if descale.dim() == 0:
        return x8.to(dtype) * descale.to(dtype)
    return x8.to(dtype) * expand_descale(descale, x8.shape[2]).to(dtype)


def fake_quant_per_tensor(x):
    return dequantize(*quantize_per_tensor(x))


def fake_quant_per_head(x, num_descale_heads=None):
    return dequantize(*quantize_per_head(x, num_descale_heads))


def fake_quant_per_block(x, block_rows=128):
    """Quantized and dequantized with one descale per (batch, head, block of block_rows rows of
    the sequence); fp64 out."""
    b, s, h, d = x.shape
    if s % block_rows:
        raise ValueError(f"seqlen {s} is not a multiple of the block of {block_rows} rows")
    xb = x.double().reshape(b, s // block_rows, block_rows, h, d)
    desc = descale_of(xb.abs().amax(dim=(2, 4), keepdim=True)).double()
    return (to_e4m3(xb / desc).double() * desc).reshape(b, s, h, d)


# ---------------------------------------------------------------- Hadamard rotation
def _splitmix64(state):
    z = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def hadamard_signs(seed, head_dim):
    """The ±1 signs of fa3_hadamard_signs: sign i is bit 0 of splitmix64(seed + i), 1 → -1
    (one splitmix64 step from the state seed + i), as a list of floats."""
    return [-1.0 if _splitmix64((seed + i) & _MASK64) & 1 else 1.0 for i in range(head_dim)]


def sylvester_hadamard(n, dtype=None, device="cpu"):
    """The n×n Sylvester Walsh-Hadamard matrix H (entries ±1, H·Hᵀ = n·I), n a power of two."""
    torch = _torch()
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    h = torch.ones(1, 1, dtype=dtype or torch.float64, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rotation(signs, dtype=None, device="cpu"):
    """M = diag(signs) · H / sqrt(head_dim): orthogonal, so (q·M)(k·M)ᵀ = q·kᵀ."""
    torch = _torch()
    dtype = dtype or torch.float64
    n = len(signs)
    s = torch.tensor(signs, dtype=dtype, device=device)
    return s[:, None] * sylvester_hadamard(n, dtype, device) / math.sqrt(n)


def rotate(x, signs):
    """Every row of x (last axis head_dim) times diag(signs)·H/sqrt(head_dim), in fp64."""
    return x.double() @ rotation(signs, device=x.device)


# ---------------------------------------------------------------- attention reference
def attention_fp64(q, k, v, softmax_scale=None, mask=None, softcap=0.0, p_offset=None,
                   out_dtype=None, return_lse=False):
    """softmax(softcap(q·kᵀ·scale)) · v in fp64, (batch, seqlen, heads, head_dim) in and out,
    GQA by head groups (query head h reads kv head h // (num_heads / num_heads_k)).
    mask: boolean (seqlen_q, seqlen_k), True where query i sees key j; a row that sees no key
    gets O = 0 (lse -inf). p_offset: emulate an FP8 kernel's P: P~ = exp(s - rowmax) is rounded
    as e4m3(P~ · p_offset) / p_offset before the PV product, the row sum uses the unrounded P~.
    out_dtype: O rounded to it at the end. Batch by batch (the scores of one batch at a time)."""
    torch = _torch()
    b, sq, h, d = q.shape
    hk = k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    outs, lses = [], []
    for bi in range(b):
        qt = q[bi].double().transpose(0, 1)                          # (h, sq, d)
        kt = k[bi].double().transpose(0, 1).repeat_interleave(h // hk, dim=0)
        vt = v[bi].double().transpose(0, 1).repeat_interleave(h // hk, dim=0)
        s = torch.matmul(qt, kt.transpose(-1, -2)) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        row = p.sum(dim=-1, keepdim=True)
        if p_offset is not None:
            p = to_e4m3(p * p_offset).double() / p_offset
        o = torch.matmul(p, vt) / torch.where(row > 0, row, torch.ones_like(row))
        outs.append(o.transpose(0, 1))
        if return_lse:
            lses.append((torch.log(row) + m).squeeze(-1))
        del s, p
    out = torch.stack(outs, 0)
    if out_dtype is not None:
        out = out.to(out_dtype).double()
    if return_lse:
        return out, torch.stack(lses, 0)
    return out


def lse_score_error_bound(q, k, softmax_scale=None, mask=None, softcap=0.0):
    """Per row, (batch, heads, seqlen_q): sum_j P_j · cap'(s_j) · scale · sum_i |q_i·k_ji|, in fp64.
    A score whose products are summed with relative error e (of the sum of their magnitudes) moves
    the row's LSE by at most e times this (first order: dLSE = sum_j P_j ds_j, and the softcap's
    tanh scales ds by its derivative). Rows that see no key get 0."""
    torch = _torch()
    b, sq, h, d = q.shape
    hk = k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    rows = []
    for bi in range(b):
        qt = q[bi].double().transpose(0, 1)
        kt = k[bi].double().transpose(0, 1).repeat_interleave(h // hk, dim=0)
        s = torch.matmul(qt, kt.transpose(-1, -2)) * scale
        mag = torch.matmul(qt.abs(), kt.abs().transpose(-1, -2)) * scale
        if softcap:
            t = torch.tanh(s / softcap)
            s, mag = softcap * t, mag * (1 - t * t)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        rows.append((p * mag).sum(dim=-1))
        del s, mag, p
    return torch.stack(rows, 0)


def rmse(a, ref):
    return (a.double() - ref.double()).pow(2).mean().sqrt().item()


# ---------------------------------------------------------------- the library's quantizer
def quantize_fp8(x, num_descale_heads=None, hadamard=False, seed=0, prefer="auto"):
    """(e4m3 x, fp32 descale (batch, num_descale_heads), 'fa3jit' | 'torch'): x rotated first
    when hadamard (signs of seed), then quantized per (batch, head group). prefer 'auto':
    fa3jit.quantize_fp8 when fa3jit has it and x is on a CUDA device, else the torch quantizer;
    'fa3jit' / 'torch': that one (ValueError when 'fa3jit' cannot be used)."""
    why = None
    if prefer in ("auto", "fa3jit"):
        try:
            import fa3jit
            fn = getattr(fa3jit, "quantize_fp8", None)
        except ImportError as e:
            fn, why = None, f"fa3jit not importable: {e}"
        if fn is None:
            why = why or "this fa3jit has no quantize_fp8"
        elif x.device.type != "cuda":
            why = "x is not on a CUDA device"
        else:
            kw = {"seed": seed} if hadamard else {}  # seed names the rotation's signs
            out = fn(x, num_heads_k=num_descale_heads, hadamard=hadamard, **kw)
            return out[0], out[1], "fa3jit"
        if prefer == "fa3jit":
            raise ValueError(f"fa3jit.quantize_fp8 cannot be used: {why}")
    elif prefer != "torch":
        raise ValueError(f"prefer {prefer!r} is not one of 'auto', 'fa3jit', 'torch'")
    src = rotate(x, hadamard_signs(seed, x.shape[-1])) if hadamard else x
    x8, desc = quantize_per_head(src, num_descale_heads)
    return x8, desc, "torch"
