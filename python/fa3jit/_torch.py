"""flash_attn_func: FlashAttention's forward call on PyTorch CUDA tensors, through fa3_fwd.

torch is imported on the first call, never at `import fa3jit`.
"""
from __future__ import annotations

import ctypes
import math
import operator

from . import _args, _core, _lib
from ._lib import check, lib

__all__ = ["flash_attn_func"]

_torch = None
_autograd_fn = None


def _import_torch(what="fa3jit.flash_attn_func"):
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(f"{what} needs PyTorch (import torch failed)") from e
        _torch = torch
    return _torch


def _check_tensor(torch, name, t, *, cuda=True, contiguous_last=True):
    """t a dense 4-dimensional bf16/fp16 tensor; cuda: on a CUDA device (else _check_cuda later);
    contiguous_last: its last dimension contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fa3jit: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"fa3jit: {name} must have 4 dimensions (batch, seqlen, heads, head_dim), "
                         f"got shape {tuple(t.shape)}")
    if t.layout != torch.strided or t.is_sparse:
        raise TypeError(f"fa3jit: {name} must be a dense (strided) tensor")
    if cuda:
        _check_cuda(name, t)
    if t.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"fa3jit: {name} has dtype {t.dtype}; supported: torch.bfloat16, "
                        f"torch.float16")
    if contiguous_last and t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"fa3jit: {name} must have a contiguous last dimension (stride 1), got "
                         f"strides {tuple(t.stride())}; call .contiguous() on it if that is "
                         f"what you want")


def _check_cuda(name, t):
    if t.device.type != "cuda":
        raise ValueError(f"fa3jit: {name} must be a CUDA tensor, got device {t.device}")


def _float32(name, x):
    """(x as the C float the library will see, x as a Python float)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"fa3jit: {name} must be a number, got {x!r}")
    f = ctypes.c_float(float(x)).value
    return f, float(x)


def _mask_and_window(causal, window_size, seqlen_q, seqlen_k):
    """(fa3 mask, window_left, window_right) following flash_attn_func: causal means a right
    window of 0; any negative window side means unlimited, and so does a side that reaches past
    every key (left >= seqlen_k, right >= seqlen_q, as the library normalizes them), so that such
    windows use the plain or causal kernel."""
    causal = _args.flag("causal", causal)
    try:
        wl, wr = window_size
    except (TypeError, ValueError):
        raise TypeError(f"fa3jit: window_size must be a pair (left, right), got {window_size!r}"
                        ) from None
    try:
        if isinstance(wl, bool) or isinstance(wr, bool):
            raise TypeError
        wl, wr = operator.index(wl), operator.index(wr)
    except TypeError:
        raise TypeError(f"fa3jit: window_size must be a pair of ints, got {window_size!r}"
                        ) from None
    wl = -1 if wl < 0 or wl >= seqlen_k else wl
    wr = -1 if wr < 0 or wr >= seqlen_q else wr
    if causal:
        wr = 0
    if wl < 0 and wr < 0:
        return _lib.FA3_MASK_NONE, -1, -1
    if wl < 0 and wr == 0:      # causal, or window (-1, 0): the same mask, the cheaper kernel
        return _lib.FA3_MASK_CAUSAL, -1, -1
    return _lib.FA3_MASK_LOCAL, wl, wr


def _forward(q, k, v, softmax_scale, causal, window_size, softcap, return_lse):
    torch = _import_torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(torch, name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"fa3jit: q, k, v must have the same dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"fa3jit: q, k, v must be on the same device, got {q.device}, "
                         f"{k.device}, {v.device}")
    batch, seqlen_q, num_heads, head_dim = q.shape
    _, seqlen_k, num_heads_k, _ = k.shape
    head_dim_v = v.shape[3]
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"fa3jit: batch sizes differ: q {batch}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[3] != head_dim:
        raise ValueError(f"fa3jit: q and k head_dim differ: {head_dim} vs {k.shape[3]}")
    if head_dim_v < 1:
        # 0 would read as "same as head_dim" in the C config
        raise ValueError(f"fa3jit: v head_dim_v {head_dim_v} must be at least 1")
    if tuple(v.shape[1:3]) != (seqlen_k, num_heads_k):
        raise ValueError(f"fa3jit: k and v must agree on (seqlen_k, num_heads_k): "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    for name, n in (("batch", batch), ("seqlen_q", seqlen_q), ("seqlen_k", seqlen_k),
                    ("num_heads", num_heads), ("num_heads_k", num_heads_k),
                    ("head_dim", head_dim), ("head_dim_v", head_dim_v)):
        _args.c_int(name, n)                            # the C API takes them as int
    if num_heads_k == 0 and num_heads > 0 or num_heads_k > 0 and num_heads % num_heads_k != 0:
        raise ValueError(f"fa3jit: num_heads {num_heads} must be a multiple of num_heads_k "
                         f"{num_heads_k} (MQA/GQA)")

    # Scalars, as FlashAttention takes them.
    if softmax_scale is None:
        scale = 0.0                                   # the library's default: 1/sqrt(head_dim)
    else:
        scale, raw = _float32("softmax_scale", softmax_scale)
        if not (math.isfinite(raw) and raw > 0) or not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"fa3jit: softmax_scale {softmax_scale!r} must be positive and "
                             f"finite in float32")
    cap, raw_cap = _float32("softcap", softcap)
    if raw_cap < 0 or not math.isfinite(raw_cap) or (raw_cap > 0 and not (cap > 0)):
        raise ValueError(f"fa3jit: softcap {softcap!r} must be 0 (off) or positive and finite "
                         f"in float32")
    mask, wl, wr = _mask_and_window(causal, window_size, seqlen_q, seqlen_k)
    return_lse = _args.flag("return_lse", return_lse)

    dtype_code = _lib.FA3_DTYPE_BF16 if q.dtype == torch.bfloat16 else _lib.FA3_DTYPE_FP16
    cfg = _lib.new_config()
    cfg.head_dim = head_dim
    cfg.head_dim_v = head_dim_v
    cfg.dtype = dtype_code
    cfg.mask = mask
    cfg.softcap = 1 if cap > 0 else 0
    # Compiles on first use of this config (no GPU needed); raises Fa3Error for unsupported
    # head dims before anything is allocated.
    kernel = _core.default_context().kernel_handle(cfg)

    device = q.device
    with torch.cuda.device(device):
        out = torch.empty((batch, seqlen_q, num_heads, head_dim_v), dtype=q.dtype, device=device)
        lse = (torch.empty((batch, num_heads, seqlen_q), dtype=torch.float32, device=device)
               if return_lse else None)
        if out.numel() == 0:
            pass                                        # nothing to compute
        elif seqlen_k == 0:                             # every row sees no key
            out.zero_()
            if lse is not None:
                lse.fill_(float("-inf"))
        else:
            a = _lib.new_fwd_args()
            a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
            a.lse = lse.data_ptr() if lse is not None else None
            a.batch, a.seqlen_q, a.seqlen_k = batch, seqlen_q, seqlen_k
            a.num_heads, a.num_heads_k = num_heads, num_heads_k
            a.q_batch_stride, a.q_row_stride, a.q_head_stride = q.stride()[:3]
            a.k_batch_stride, a.k_row_stride, a.k_head_stride = k.stride()[:3]
            a.v_batch_stride, a.v_row_stride, a.v_head_stride = v.stride()[:3]
            a.o_batch_stride, a.o_row_stride, a.o_head_stride = out.stride()[:3]
            a.softmax_scale = scale
            a.softcap = cap
            a.window_size_left, a.window_size_right = wl, wr
            stream = torch.cuda.current_stream(device).cuda_stream
            check(lib.fa3_fwd(kernel, ctypes.byref(a), ctypes.c_void_p(stream)))
    return out, lse


def _get_autograd_fn():
    global _autograd_fn
    if _autograd_fn is None:
        torch = _import_torch()

        class _Fa3AttnFunc(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, softmax_scale, causal, window_size, softcap, return_lse):
                out, lse = _forward(q, k, v, softmax_scale, causal, window_size, softcap,
                                    return_lse)
                if lse is not None:
                    ctx.mark_non_differentiable(lse)
                    return out, lse
                return out

            @staticmethod
            def backward(ctx, *grads):
                raise NotImplementedError("fa3jit has no backward pass (forward only): run "
                                          "flash_attn_func under torch.no_grad() / inference_mode, "
                                          "or use another attention for training")

        _autograd_fn = _Fa3AttnFunc
    return _autograd_fn


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    return_lse=False):
    """FlashAttention-3 forward on Hopper (sm_90a), FlashAttention's argument names and meaning.

    q: (batch, seqlen_q, num_heads, head_dim); k: (batch, seqlen_k, num_heads_k, head_dim);
    v: (batch, seqlen_k, num_heads_k, head_dim_v). CUDA tensors, all bfloat16 or all float16, on
    one device, any strides whose last dimension is contiguous (others: multiples of 16 bytes,
    as TMA requires). num_heads_k divides num_heads (MQA/GQA).
    softmax_scale: None = 1/sqrt(head_dim). causal: bottom-right aligned causal mask.
    window_size (left, right): local attention, -1 = unlimited; with causal the right side is 0.
    softcap > 0: scores become softcap·tanh(scores/softcap) (after scaling).
    return_lse: also return the fp32 log-sum-exp of the scaled scores, (batch, num_heads, seqlen_q).

    Returns out (batch, seqlen_q, num_heads, head_dim_v) in q's dtype, or (out, lse). Runs
    asynchronously on the current stream of q's device. Forward only: backward raises.
    """
    torch = _import_torch()
    tensors = (q, k, v)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in tensors):
        return _get_autograd_fn().apply(q, k, v, softmax_scale, causal, window_size, softcap,
                                        return_lse)
    out, lse = _forward(q, k, v, softmax_scale, causal, window_size, softcap, return_lse)
    return (out, lse) if lse is not None else out
