"""flash_attn_func: FlashAttention's forward call on PyTorch CUDA tensors, through fa3_fwd.

torch is imported on the first call, never at `import fa3jit`.
"""
from __future__ import annotations

import ctypes
import math
import operator

from . import _args, _core, _lib, _splits
from ._lib import check, lib

__all__ = ["flash_attn_func", "DtypeMismatchError"]

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


class DtypeMismatchError(TypeError, ValueError):
    """q, k and v of different dtypes. Both a TypeError (what mixed bf16/fp16 raised before FP8
    came) and a ValueError (FlashAttention-3's rule for mixed FP8 inputs)."""


def _input_dtypes(torch) -> tuple:
    e4m3 = getattr(torch, "float8_e4m3fn", None)      # torch >= 2.1
    return (torch.bfloat16, torch.float16) + ((e4m3,) if e4m3 is not None else ())


def _is_e4m3(torch, dtype) -> bool:
    return dtype == getattr(torch, "float8_e4m3fn", None)


def _check_tensor(torch, name, t, *, cuda=False, contiguous_last=True, fp8=True):
    """Type, rank, layout, dtype and last-dimension stride of a 4-dimensional tensor: q, k, v
    (the device is checked after every dtype and descale rule, so that those can be checked on any
    device), or the quantizer's x (fp8=False: bf16/fp16 only; contiguous_last=False: any
    strides); cuda: also on a CUDA device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fa3jit: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"fa3jit: {name} must have 4 dimensions (batch, seqlen, heads, head_dim), "
                         f"got shape {tuple(t.shape)}")
    if t.layout != torch.strided or t.is_sparse:
        raise TypeError(f"fa3jit: {name} must be a dense (strided) tensor")
    if cuda:
        _check_device(torch, name, t)
    dtypes = _input_dtypes(torch) if fp8 else (torch.bfloat16, torch.float16)
    if t.dtype not in dtypes:
        if fp8 and "float8" in str(t.dtype):
            raise ValueError(f"fa3jit: {name} has dtype {t.dtype}, which is not supported: FP8 "
                             f"inputs must be torch.float8_e4m3fn (e4m3; e5m2 is not supported)")
        raise TypeError(f"fa3jit: {name} has dtype {t.dtype}; supported: torch.bfloat16, "
                        f"torch.float16" + (", torch.float8_e4m3fn" if fp8 else ""))
    if contiguous_last and t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"fa3jit: {name} must have a contiguous last dimension (stride 1), got "
                         f"strides {tuple(t.stride())}; call .contiguous() on it if that is "
                         f"what you want")


def _check_device(torch, name, t):
    if t.device.type != "cuda":
        raise ValueError(f"fa3jit: {name} must be a CUDA tensor, got device {t.device}")


def _check_cuda(name, t):
    _check_device(None, name, t)


def _check_descale(torch, name, d, q, batch, num_heads_k):
    """A descale as fa3_fwd takes it: None (1.0), or an fp32 tensor of shape exactly
    (batch, num_heads_k) on q's device, made contiguous."""
    if d is None:
        return None
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"fa3jit: {name} must be a torch.Tensor or None, got {type(d).__name__}")
    if d.layout != torch.strided or d.is_sparse:
        raise TypeError(f"fa3jit: {name} must be a dense (strided) tensor")
    if d.dtype != torch.float32:
        raise ValueError(f"fa3jit: {name} must have dtype torch.float32, got {d.dtype}")
    if tuple(d.shape) != (batch, num_heads_k):
        raise ValueError(f"fa3jit: {name} must have shape (batch, num_heads_k) = "
                         f"({batch}, {num_heads_k}), got {tuple(d.shape)}")
    if d.device != q.device:
        raise ValueError(f"fa3jit: {name} must be on q's device {q.device}, got device "
                         f"{d.device}")
    return d.contiguous()


def _dtypes_and_descales(torch, q, k, v, descales, out_dtype, batch, num_heads_k):
    """The dtype rules: (fa3 dtype code, out torch dtype, fa3 out_dtype code, the three descales
    checked). q, k, v have one dtype; FP8 (e4m3) inputs take descales and write O in out_dtype
    (None = bf16, or fp16); bf16/fp16 inputs take no descales and write O in their own dtype."""
    if not (q.dtype == k.dtype == v.dtype):
        hint = (" (FP8: q, k and v must all be torch.float8_e4m3fn)"
                if any(_is_e4m3(torch, t.dtype) for t in (q, k, v)) else "")
        raise DtypeMismatchError(f"fa3jit: q, k, v must have the same dtype, got q {q.dtype}, "
                                 f"k {k.dtype}, v {v.dtype}{hint}")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"fa3jit: out_dtype must be a torch.dtype or None, got {out_dtype!r}")
    names = ("q_descale", "k_descale", "v_descale")
    if not _is_e4m3(torch, q.dtype):
        for name, d in zip(names, descales):
            if d is not None:
                raise ValueError(f"fa3jit: {name} is given with {q.dtype} inputs: descales are "
                                 f"for FP8 (torch.float8_e4m3fn) q, k, v only")
        if out_dtype is not None and out_dtype != q.dtype:
            raise ValueError(f"fa3jit: out_dtype {out_dtype} is not supported with {q.dtype} "
                             f"inputs (O has the inputs' dtype; out_dtype is for FP8 inputs)")
        code = _lib.FA3_DTYPE_BF16 if q.dtype == torch.bfloat16 else _lib.FA3_DTYPE_FP16
        return code, q.dtype, _lib.FA3_DTYPE_AUTO, (None, None, None)
    if out_dtype is None:
        out_dtype = torch.bfloat16
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"fa3jit: out_dtype {out_dtype} is not supported with FP8 inputs "
                         f"(supported: torch.bfloat16, the default, and torch.float16)")
    out_code = _lib.FA3_DTYPE_BF16 if out_dtype == torch.bfloat16 else _lib.FA3_DTYPE_FP16
    checked = tuple(_check_descale(torch, name, d, q, batch, num_heads_k)
                    for name, d in zip(names, descales))
    return _lib.FA3_DTYPE_E4M3, out_dtype, out_code, checked


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


def _forward(q, k, v, softmax_scale, causal, window_size, softcap, return_lse, fp8,
             num_splits=1, pack_gqa=False):
    """fp8: (q_descale, k_descale, v_descale, out_dtype, check_descales) as flash_attn_func;
    num_splits, pack_gqa as flash_attn_func's."""
    torch = _import_torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(torch, name, t)
    q_descale, k_descale, v_descale, out_dtype, check_descales = fp8
    dtype_code, out_dtype, out_code, descales = _dtypes_and_descales(
        torch, q, k, v, (q_descale, k_descale, v_descale), out_dtype,
        q.shape[0], k.shape[2])
    check_descales = _args.flag("check_descales", check_descales)
    n_splits = _splits.check_num_splits(num_splits)
    pack_gqa = _splits.check_pack_gqa(pack_gqa)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_device(torch, name, t)
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

    cfg = _lib.new_config()
    cfg.head_dim = head_dim
    cfg.head_dim_v = head_dim_v
    cfg.dtype = dtype_code
    cfg.out_dtype = out_code
    cfg.mask = mask
    cfg.softcap = 1 if cap > 0 else 0
    n_splits = _splits.choose(torch, cfg, n_splits, q.device, batch, seqlen_q, seqlen_k,
                              num_heads, num_heads_k, pack_gqa)
    # Compiles on first use of this config (no GPU needed); raises Fa3Error for unsupported
    # head dims before anything is allocated.
    kernel = _core.default_context().kernel_handle(cfg)

    device = q.device
    with torch.cuda.device(device):
        out = torch.empty((batch, seqlen_q, num_heads, head_dim_v), dtype=out_dtype,
                          device=device)
        lse = (torch.empty((batch, num_heads, seqlen_q), dtype=torch.float32, device=device)
               if return_lse else None)
        if out.numel() == 0:
            pass                                        # nothing to compute
        elif seqlen_k == 0:                             # every row sees no key
            out.zero_()
            if lse is not None:
                lse.fill_(float("-inf"))
        else:
            a = _fwd_args(q, k, v, out, lse, scale, cap, wl, wr, descales, check_descales)
            a.num_splits = n_splits          # split-KV's workspace: allocated stream-ordered
            stream = torch.cuda.current_stream(device).cuda_stream
            check(lib.fa3_fwd(kernel, ctypes.byref(a), ctypes.c_void_p(stream)))
    return out, lse


def _fwd_args(q, k, v, out, lse, scale, cap, wl, wr, descales, check_descales) -> _lib.FwdArgs:
    """The fa3_fwd_args of one call: pointers, shape, strides, scalars; the descales' pointers
    (NULL = 1.0) and descales_trusted = not check_descales."""
    a = _lib.new_fwd_args()
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.batch, a.seqlen_q, a.num_heads = q.shape[:3]
    a.seqlen_k, a.num_heads_k = k.shape[1:3]
    a.q_batch_stride, a.q_row_stride, a.q_head_stride = q.stride()[:3]
    a.k_batch_stride, a.k_row_stride, a.k_head_stride = k.stride()[:3]
    a.v_batch_stride, a.v_row_stride, a.v_head_stride = v.stride()[:3]
    a.o_batch_stride, a.o_row_stride, a.o_head_stride = out.stride()[:3]
    a.softmax_scale = scale
    a.softcap = cap
    a.window_size_left, a.window_size_right = wl, wr
    a.descale_q, a.descale_k, a.descale_v = (d.data_ptr() if d is not None else None
                                             for d in descales)
    a.descales_trusted = 0 if check_descales else 1
    return a


def _get_autograd_fn():
    global _autograd_fn
    if _autograd_fn is None:
        torch = _import_torch()

        class _Fa3AttnFunc(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, softmax_scale, causal, window_size, softcap, return_lse,
                        fp8, num_splits, pack_gqa):
                out, lse = _forward(q, k, v, softmax_scale, causal, window_size, softcap,
                                    return_lse, fp8, num_splits, pack_gqa)
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
                    return_lse=False, *, q_descale=None, k_descale=None, v_descale=None,
                    out_dtype=None, check_descales=True, page_table=None, seqused_k=None,
                    num_splits=0, pack_gqa=None):
    """FlashAttention-3 forward on Hopper (sm_90a), FlashAttention's argument names and meaning.

    q: (batch, seqlen_q, num_heads, head_dim); k: (batch, seqlen_k, num_heads_k, head_dim);
    v: (batch, seqlen_k, num_heads_k, head_dim_v). CUDA tensors on one device, all bfloat16, all
    float16 or all float8_e4m3fn (FP8), any strides whose last dimension is contiguous (others:
    multiples of 16 bytes, as TMA requires). num_heads_k divides num_heads (MQA/GQA).
    softmax_scale: None = 1/sqrt(head_dim). causal: bottom-right aligned causal mask.
    window_size (left, right): local attention, -1 = unlimited; with causal the right side is 0.
    softcap > 0: scores become softcap·tanh(scores/softcap) (after scaling).
    return_lse: also return the fp32 log-sum-exp of the scaled scores, (batch, num_heads, seqlen_q).

    FP8 (keyword-only, FlashAttention-3's names): q_descale, k_descale, v_descale are None (1.0)
    or float32 tensors of shape exactly (batch, num_heads_k) on q's device: the kernel computes
    with q·q_descale, k·k_descale, v·v_descale (q_descale[b, h_k] scales every query head of kv
    head h_k's group); softmax_scale and softcap apply to the dequantized scores. out_dtype: O's
    dtype, None = torch.bfloat16, or torch.float16 (bf16/fp16 inputs: None or their own dtype;
    descales with them are a ValueError). check_descales=True: the library reads the descales
    back to refuse NaN, inf and values <= 0 (Fa3Error naming the array, index and value): a
    device-to-host copy that synchronizes the stream. Pass False under CUDA graph capture and in
    timed loops; a bad descale then gives a wrong output, not an error.

    KV cache (keyword-only, FlashAttention-3's KV-cache path): page_table, an int32 CUDA tensor
    (batch, max_pages_per_seq), makes k and v (num_pages, page_size, num_heads_k, head_dim[_v])
    pages (page_size 1..256): key j of sequence b is row j % page_size of page
    page_table[b, j // page_size]; each sequence has max_pages_per_seq · page_size keys, or
    seqused_k[b] with seqused_k, an int32 CUDA tensor (batch,) (also usable without pages:
    sequence b then uses the first seqused_k[b] of its seqlen_k keys). Masks stay bottom-right
    aligned per sequence. This path has no autograd wrapper (inference).

    num_splits (keyword-only; FlashAttention-3's split-KV): 0 (the default) = the library
    chooses: split-KV only where the query tiles would leave SMs idle and the keys span several
    blocks (decode shapes; prefill runs one pass, as with 1); 1 = one pass; 2..128 = that many
    splits of each query tile's keys, each writing fp32 partials that a second kernel merges
    (the workspace is allocated stream-ordered on the current stream). Not FA3's default (1):
    the library's choice is what makes decode shapes fast without tuning.
    pack_gqa (keyword-only, FlashAttention-3's): None (the default) = the library chooses; True =
    the num_heads / num_heads_k query heads of a kv head share each tile (needs the ratio to
    divide the tile's rows: 64 or 128, 192 at head_dim 64); False = one query head a tile. For
    few query rows (seqlen_q <= 64, or where packing fills tiles better) the library picks
    packed GQA with the 64-row decode tile and split-KV (fa3_fwd_tune).

    Returns out (batch, seqlen_q, num_heads, head_dim_v) in q's dtype (FP8: out_dtype), or
    (out, lse). Runs asynchronously on the current stream of q's device. Forward only: backward
    raises.
    """
    torch = _import_torch()
    tensors = (q, k, v)
    fp8 = (q_descale, k_descale, v_descale, out_dtype, check_descales)
    if page_table is not None or seqused_k is not None:
        from . import _varlen
        out, lse = _varlen.kvcache_forward(q, k, v, page_table, seqused_k, softmax_scale, causal,
                                           window_size, softcap, return_lse, fp8,
                                           num_splits=num_splits, pack_gqa=pack_gqa)
        return (out, lse) if lse is not None else out
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in tensors):
        return _get_autograd_fn().apply(q, k, v, softmax_scale, causal, window_size, softcap,
                                        return_lse, fp8, num_splits, pack_gqa)
    out, lse = _forward(q, k, v, softmax_scale, causal, window_size, softcap, return_lse, fp8,
                        num_splits, pack_gqa)
    return (out, lse) if lse is not None else out
