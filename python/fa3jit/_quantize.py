"""quantize_fp8: FP8 (e4m3) quantization of bf16/fp16 CUDA tensors for the FP8 forward pass,
through fa3_quantize_fp8, with FlashAttention-3's optional Hadamard rotation; hadamard_signs:
the rotation's random signs of a seed (fa3_hadamard_signs, no torch needed).

torch is imported on the first quantize_fp8 call, never at `import fa3jit`.
"""
from __future__ import annotations

import ctypes

from . import _args, _core, _lib, _torch
from ._lib import check, lib

__all__ = ["quantize_fp8", "hadamard_signs"]

ROTATION_HEAD_DIMS = (64, 128, 256)


def hadamard_signs(seed, head_dim) -> list:
    """The rotation's signs for seed: a list of head_dim floats, each 1.0 or -1.0 (sign i is bit 0
    of splitmix64(seed + i), 1 -> -1: fa3_hadamard_signs). seed: an int in 0..2**64-1."""
    seed = _args.c_uint64("seed", seed)
    head_dim = _args.c_int("head_dim", head_dim)
    if head_dim < 1:
        raise ValueError(f"fa3jit: head_dim {head_dim} must be at least 1")
    buf = (ctypes.c_float * head_dim)()
    check(lib.fa3_hadamard_signs(seed, head_dim, buf))
    return list(buf)


def _check_signs(torch, signs, x, head_dim):
    """signs as the float32 contiguous device tensor the library reads (values checked: ±1)."""
    if not isinstance(signs, torch.Tensor):
        raise TypeError(f"fa3jit: signs must be a torch.Tensor or None, got "
                        f"{type(signs).__name__}")
    if signs.dim() != 1 or signs.shape[0] != head_dim:
        raise ValueError(f"fa3jit: signs must hold head_dim = {head_dim} values (shape "
                         f"({head_dim},)), got shape {tuple(signs.shape)}")
    if not signs.dtype.is_floating_point:
        raise TypeError(f"fa3jit: signs has dtype {signs.dtype}; it must be a floating-point "
                        f"tensor of +1 and -1")
    if signs.device != x.device:
        raise ValueError(f"fa3jit: signs must be on x's device {x.device}, got {signs.device}")
    s = signs.detach().to(torch.float32).contiguous()
    bad = ((s != 1) & (s != -1)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"fa3jit: signs[{i}] = {float(s[i])!r}; every sign must be +1 or -1")
    return s


def quantize_fp8(x, num_heads_k=None, hadamard=False, seed=0, signs=None, context=None):
    """Quantizes x to FP8 e4m3 for the FP8 forward pass: returns (x_fp8, descale).

    x: a bfloat16 or float16 CUDA tensor (batch, seqlen, num_heads, head_dim), any strides (one
    whose last dimension is not contiguous is copied with .contiguous() first).
    num_heads_k: descale heads (None = num_heads): one descale per (batch, group of
    num_heads / num_heads_k consecutive heads), so pass K's head count for q (FlashAttention-3's
    descale_q shape) and nothing for k and v.
    hadamard: rotate every row first by diag(signs)·H/sqrt(head_dim) (H the Walsh-Hadamard
    matrix; head_dim 64, 128 or 256): do it to q and k with the same signs, not to v; q·kᵀ is
    unchanged and outliers are spread over the row (FlashAttention-3's incoherent processing).
    seed: the signs' seed (hadamard_signs(seed, head_dim)), or signs: a tensor of head_dim values
    ±1 on x's device (not both). context: the fa3jit.Context whose library calls are used
    (None: the process-wide one).

    x_fp8: torch.float8_e4m3fn, x's shape, contiguous: round(x / descale) to nearest even,
    saturating at ±448. descale: float32 (batch, num_heads_k), amax / 448 of each group (1 for a
    group of zeros), so x ≈ x_fp8 · descale (rotated). Runs asynchronously on the current stream
    of x's device; a signs tensor is read back once to check its values.
    """
    torch = _torch._import_torch("fa3jit.quantize_fp8")
    _torch._check_tensor(torch, "x", x, cuda=False, contiguous_last=False, fp8=False)
    batch, seqlen, num_heads, head_dim = x.shape
    for name, n in (("batch", batch), ("seqlen", seqlen), ("num_heads", num_heads),
                    ("head_dim", head_dim)):
        _args.c_int(name, n)
    if num_heads_k is None:
        num_heads_k = num_heads
    num_heads_k = _args.c_int("num_heads_k", num_heads_k)
    if (num_heads_k < 1 or num_heads % num_heads_k != 0) and num_heads_k != num_heads:
        raise ValueError(f"fa3jit: num_heads_k {num_heads_k} must divide num_heads {num_heads} "
                         f"(one descale per group of num_heads / num_heads_k heads)")
    hadamard = _args.flag("hadamard", hadamard)
    seed = _args.c_uint64("seed", seed)
    if not hadamard and (seed != 0 or signs is not None):
        raise ValueError(f"fa3jit: {'signs' if signs is not None else f'seed {seed}'} given "
                         f"with hadamard=False: the signs are those of the rotation")
    if hadamard and head_dim not in ROTATION_HEAD_DIMS:
        raise ValueError(f"fa3jit: head_dim {head_dim} cannot be rotated (hadamard=True needs "
                         f"head_dim 64, 128 or 256)")
    if signs is not None and seed != 0:
        raise ValueError(f"fa3jit: give signs or seed, not both (seed {seed})")
    # out is contiguous: its strides must be multiples of 16 bytes where the axis has more than
    # one element (fa3_fwd reads it by TMA), as fa3_quantize_fp8 checks.
    for axis, stride, extent in (("head", head_dim, num_heads),
                                 ("row", num_heads * head_dim, seqlen),
                                 ("batch", seqlen * num_heads * head_dim, batch)):
        if extent > 1 and stride % 16 != 0:
            raise ValueError(f"fa3jit: head_dim {head_dim}: the contiguous e4m3 output's {axis} "
                             f"stride {stride} bytes is not a multiple of 16 (fa3_fwd's TMA "
                             f"needs it)")
    if context is None:
        context = _core.default_context()
    elif not isinstance(context, _core.Context):
        raise TypeError(f"fa3jit: context must be an fa3jit.Context or None, got "
                        f"{type(context).__name__}")
    if signs is not None:
        signs = _check_signs(torch, signs, x, head_dim)
    _torch._check_cuda("x", x)

    device = x.device
    with torch.cuda.device(device):
        out = torch.empty(tuple(x.shape), dtype=torch.float8_e4m3fn, device=device)
        descale = torch.empty((batch, num_heads_k), dtype=torch.float32, device=device)
        if x.numel() == 0:
            descale.fill_(1.0)                  # groups with no elements: as groups of zeros
            return out, descale
        if x.stride(-1) != 1 and head_dim > 1:
            x = x.contiguous()
        a = _lib.new_quantize_args()
        a.dtype = _lib.FA3_DTYPE_BF16 if x.dtype == torch.bfloat16 else _lib.FA3_DTYPE_FP16
        a.x, a.out, a.descale = x.data_ptr(), out.data_ptr(), descale.data_ptr()
        a.batch, a.seqlen, a.num_heads, a.head_dim = batch, seqlen, num_heads, head_dim
        a.num_descale_heads = num_heads_k
        a.x_batch_stride, a.x_row_stride, a.x_head_stride = x.stride()[:3]
        a.out_batch_stride, a.out_row_stride, a.out_head_stride = out.stride()[:3]
        a.hadamard = int(hadamard)
        a.signs = signs.data_ptr() if signs is not None else None
        a.seed = seed
        stream = torch.cuda.current_stream(device).cuda_stream
        check(lib.fa3_quantize_fp8(context.handle, ctypes.byref(a), ctypes.c_void_p(stream)))
    return out, descale
