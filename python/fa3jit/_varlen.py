"""flash_attn_varlen_func and flash_attn_func's KV-cache path (page_table, seqused_k): packed
variable-length batches and paged K/V on PyTorch CUDA tensors, through fa3_fwd's varlen and
paged_kv configs (fa3jit.h, "Varlen" and "Paged KV").

Every rule the host can check is checked here first (ValueError / TypeError naming the value);
the device arrays' contents (cu_seqlens non-decreasing from 0, page indices in range, seqused_k
within capacity) are the caller's contract, as in FlashAttention: FA3JIT_DEBUG_VARLEN=1 makes the
library read them back and refuse the first bad entry (Fa3Error).
"""
from __future__ import annotations

import ctypes

from . import _args, _core, _lib, _splits, _torch
from ._lib import check, lib

__all__ = ["flash_attn_varlen_func"]


def _check_rank(torch, name, t, rank, layout):
    """A q/k/v tensor of the given rank (layout: its axes, for the message), dtype and a
    contiguous last dimension (the rules of flash_attn_func's tensors)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fa3jit: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"fa3jit: {name} must have {rank} dimensions {layout}, got shape "
                         f"{tuple(t.shape)}")
    if t.layout != torch.strided or t.is_sparse:
        raise TypeError(f"fa3jit: {name} must be a dense (strided) tensor")
    if t.dtype not in _torch._input_dtypes(torch):
        raise TypeError(f"fa3jit: {name} has dtype {t.dtype}; supported: torch.bfloat16, "
                        f"torch.float16, torch.float8_e4m3fn")
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"fa3jit: {name} must have a contiguous last dimension (stride 1), got "
                         f"strides {tuple(t.stride())}")


def _int32_array(torch, name, t, shape, q):
    """cu_seqlens / seqused_k / page_table: an int32 tensor of exactly shape on q's device, last
    dimension contiguous (a 2-D page table may have any row stride)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fa3jit: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"fa3jit: {name} must have dtype torch.int32, got {t.dtype}")
    if t.dim() != len(shape) or any(s is not None and t.shape[i] != s
                                    for i, s in enumerate(shape)):
        want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"fa3jit: {name} must have shape {want}, got {tuple(t.shape)}")
    if t.layout != torch.strided or t.is_sparse:
        raise TypeError(f"fa3jit: {name} must be a dense (strided) tensor")
    if t.numel() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"fa3jit: {name} must have a contiguous last dimension, got strides "
                         f"{tuple(t.stride())}")
    if t.device != q.device:
        raise ValueError(f"fa3jit: {name} must be on q's device {q.device}, got {t.device}")
    return t


def _max_seqlen(name, value, bound, what):
    n = _args.c_int(name, value)
    if n < 0 or n > bound:
        raise ValueError(f"fa3jit: {name} {n} is out of range (0..{bound}, {what})")
    return n


def _forward(q, k, v, cu_q, cu_k, max_q, max_k, seqused_k, page_table, softmax_scale, causal,
             window_size, softcap, return_lse, fp8, rect=None, before_launch=None,
             num_splits=1, pack_gqa=False):
    """The varlen (or, rect = (batch, seqlen_q), the rectangular-Q paged) call: (out, lse).
    before_launch: called (on q's device) after every check, before the kernel is launched
    (flash_attn_with_kvcache's append), also when there is no query row to compute.
    num_splits, pack_gqa: flash_attn_func's (pack_gqa for rectangular Q only)."""
    torch = _torch._import_torch("fa3jit.flash_attn_varlen_func")
    paged = page_table is not None
    _check_rank(torch, "q", q, 3, "(total_q, num_heads, head_dim)")
    kv_layout = ("(num_pages, page_size, num_heads_k, head_dim)" if paged
                 else "(total_k, num_heads_k, head_dim)")
    for name, t in (("k", k), ("v", v)):
        _check_rank(torch, name, t, 4 if paged else 3, kv_layout)
    total_q, num_heads, head_dim = q.shape
    num_heads_k, head_dim_v = k.shape[-2], v.shape[-1]
    rows_k = k.shape[0] * (k.shape[1] if paged else 1)
    if k.shape[-1] != head_dim:
        raise ValueError(f"fa3jit: q and k head_dim differ: {head_dim} vs {k.shape[-1]}")
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError(f"fa3jit: k and v must agree on all but the last dimension: "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if head_dim_v < 1 or num_heads_k < 1 or num_heads % num_heads_k != 0:
        raise ValueError(f"fa3jit: num_heads {num_heads} must be a multiple of num_heads_k "
                         f"{num_heads_k} (MQA/GQA), head_dim_v {head_dim_v} at least 1")
    for name, n in (("total_q", total_q), ("num_heads", num_heads), ("head_dim", head_dim),
                    ("rows of k", rows_k)):
        _args.c_int(name, n)

    # The batch and its int32 arrays.
    if rect is None:
        if not isinstance(cu_q, torch.Tensor) or cu_q.dim() != 1 or cu_q.shape[0] < 2:
            raise ValueError(f"fa3jit: cu_seqlens_q must be a 1-D int32 tensor of batch + 1 >= 2 "
                             f"offsets, got {cu_q.shape if isinstance(cu_q, torch.Tensor) else cu_q!r}")
        batch = cu_q.shape[0] - 1
        _int32_array(torch, "cu_seqlens_q", cu_q, (batch + 1,), q)
        if cu_k is None:
            if not (paged and seqused_k is not None):
                raise ValueError("fa3jit: cu_seqlens_k is None: it may be left out only with a "
                                 "page_table and seqused_k (the keys of each sequence)")
        else:
            _int32_array(torch, "cu_seqlens_k", cu_k, (batch + 1,), q)
    else:
        batch = rect[0]
    _args.c_int("batch", batch)
    if seqused_k is not None:
        _int32_array(torch, "seqused_k", seqused_k, (batch,), q)
    if paged:
        _int32_array(torch, "page_table", page_table, (batch, None), q)
        num_pages, page_size = k.shape[0], k.shape[1]
        max_pages = page_table.shape[1]
        if not 1 <= page_size <= 256:
            raise ValueError(f"fa3jit: page_size {page_size} (k.shape[1]) is out of range "
                             f"(1..256)")
        if num_pages < 1 or max_pages < 1:
            raise ValueError(f"fa3jit: num_pages {num_pages} (k.shape[0]) and max_pages_per_seq "
                             f"{max_pages} (page_table.shape[1]) must be at least 1")
        capacity = max_pages * page_size
    else:
        capacity = rows_k
    seqlen_q = rect[1] if rect is not None else total_q
    if rect is None:
        max_q = _max_seqlen("max_seqlen_q", max_q, total_q, "the rows of q")
        max_k = _max_seqlen("max_seqlen_k", max_k, capacity,
                            "the page table's capacity" if paged else "the rows of k")
    else:
        max_q, max_k = seqlen_q, capacity

    # dtypes, scalars and the mask, as flash_attn_func.
    q_descale, k_descale, v_descale, out_dtype, check_descales = fp8
    dtype_code, out_dtype, out_code, descales = _torch._dtypes_and_descales(
        torch, q, k, v, (q_descale, k_descale, v_descale), out_dtype, batch, num_heads_k)
    check_descales = _args.flag("check_descales", check_descales)
    scale = 0.0
    if softmax_scale is not None:
        scale, raw = _torch._float32("softmax_scale", softmax_scale)
        if not (raw > 0 and scale > 0 and raw != float("inf")):
            raise ValueError(f"fa3jit: softmax_scale {softmax_scale!r} must be positive and "
                             f"finite in float32")
    cap, raw_cap = _torch._float32("softcap", softcap)
    if not (raw_cap == 0 or (raw_cap > 0 and cap > 0 and raw_cap != float("inf"))):
        raise ValueError(f"fa3jit: softcap {softcap!r} must be 0 (off) or positive and finite "
                         f"in float32")
    mask, wl, wr = _torch._mask_and_window(causal, window_size, max(max_q, 1), max(max_k, 1))
    return_lse = _args.flag("return_lse", return_lse)
    n_splits = _splits.check_num_splits(num_splits)
    pack_gqa = _splits.check_pack_gqa(pack_gqa)
    if rect is None and pack_gqa:
        raise ValueError("fa3jit: pack_gqa=True is not supported with packed variable-length "
                         "sequences (cu_seqlens_q): pass None or False")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _torch._check_device(torch, name, t)
    if not (q.device == k.device == v.device):
        raise ValueError(f"fa3jit: q, k, v must be on the same device, got {q.device}, "
                         f"{k.device}, {v.device}")

    cfg = _lib.new_config()
    cfg.head_dim, cfg.head_dim_v = head_dim, head_dim_v
    cfg.dtype, cfg.out_dtype, cfg.mask = dtype_code, out_code, mask
    cfg.softcap = 1 if cap > 0 else 0
    cfg.varlen = 1 if rect is None else 0
    cfg.paged_kv = 1 if paged else 0
    n_splits = _splits.choose(torch, cfg, n_splits, q.device, batch, max_q, max_k,
                              num_heads, num_heads_k, pack_gqa)
    kernel = _core.default_context().kernel_handle(cfg)

    device = q.device
    with torch.cuda.device(device):
        out = torch.empty((total_q, num_heads, head_dim_v), dtype=out_dtype, device=device)
        lse_shape = (num_heads, total_q) if rect is None else (batch, num_heads, seqlen_q)
        lse = (torch.empty(lse_shape, dtype=torch.float32, device=device)
               if return_lse else None)
        if total_q == 0 or max_q == 0:
            if before_launch is not None:
                before_launch()
            return out, lse                             # no query row: nothing to compute
        if cu_k is None and rect is None:               # paged + seqused_k: lengths unused
            cu_k = torch.zeros(batch + 1, dtype=torch.int32, device=device)
        a = _lib.new_fwd_args()
        a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        a.lse = lse.data_ptr() if lse is not None else None
        a.batch, a.num_heads, a.num_heads_k = batch, num_heads, num_heads_k
        a.seqlen_q = seqlen_q
        a.seqlen_k = capacity
        if rect is None:
            a.q_row_stride, a.q_head_stride = q.stride()[:2]
            a.o_row_stride, a.o_head_stride = out.stride()[:2]
            a.cu_seqlens_q, a.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
            a.max_seqlen_q, a.max_seqlen_k = max_q, max_k
        else:                                           # (batch · seqlen_q) rows, batch-major
            a.q_batch_stride, a.o_batch_stride = seqlen_q * q.stride(0), seqlen_q * out.stride(0)
            a.q_row_stride, a.q_head_stride = q.stride()[:2]
            a.o_row_stride, a.o_head_stride = out.stride()[:2]
        ks, vs = k.stride(), v.stride()
        if paged:
            a.k_batch_stride, a.k_row_stride, a.k_head_stride = ks[:3]
            a.v_batch_stride, a.v_row_stride, a.v_head_stride = vs[:3]
            a.page_table = page_table.data_ptr()
            a.num_pages, a.page_size, a.max_pages_per_seq = k.shape[0], k.shape[1], max_pages
            a.page_table_stride = page_table.stride(0) if batch > 1 else max_pages
        else:
            a.k_row_stride, a.k_head_stride = ks[:2]
            a.v_row_stride, a.v_head_stride = vs[:2]
        a.seqused_k = seqused_k.data_ptr() if seqused_k is not None else None
        a.softmax_scale, a.softcap = scale, cap
        a.window_size_left, a.window_size_right = wl, wr
        a.descale_q, a.descale_k, a.descale_v = (d.data_ptr() if d is not None else None
                                                 for d in descales)
        a.descales_trusted = 0 if check_descales else 1
        a.num_splits = n_splits
        if before_launch is not None:
            # every check fa3_fwd makes on the host first (fa3_fwd_workspace_size validates as
            # it does), so that a refused call has not appended to the cache
            nbytes = ctypes.c_size_t(0)
            check(lib.fa3_fwd_workspace_size(kernel, ctypes.byref(a), ctypes.byref(nbytes)))
            before_launch()
        stream = torch.cuda.current_stream(device).cuda_stream
        check(lib.fa3_fwd(kernel, ctypes.byref(a), ctypes.c_void_p(stream)))
    return out, lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, return_lse=False, q_descale=None,
                           k_descale=None, v_descale=None, out_dtype=None, check_descales=True,
                           num_splits=1):
    """FlashAttention's flash_attn_varlen_func (forward, Hopper): the batch's sequences packed.

    q: (total_q, num_heads, head_dim); k, v: (total_k, num_heads_k, head_dim[_v]), or with
    page_table (num_pages, page_size, num_heads_k, head_dim[_v]) (page_size 1..256).
    cu_seqlens_q, cu_seqlens_k: int32 CUDA tensors of batch + 1 offsets (sequence b is rows
    cu[b] .. cu[b+1]-1); cu_seqlens_k may be None with page_table and seqused_k. max_seqlen_q /
    max_seqlen_k: upper bounds of the lengths (ints; 0..total_q, 0..total_k or the page table's
    capacity). seqused_k: optional int32 (batch,): sequence b uses its first seqused_k[b] keys.
    page_table: int32 (batch, max_pages_per_seq): key j of sequence b is row j % page_size of page
    page_table[b, j // page_size]; pages may be shared and in any order.
    Masks (causal, window_size) are bottom-right aligned per sequence; a sequence with no query
    or no key is valid (its rows: O = 0, LSE = -inf). softmax_scale, softcap, the FP8 descales
    ((batch, num_heads_k), b the sequence), out_dtype and check_descales as flash_attn_func.
    Returns out (total_q, num_heads, head_dim_v), or (out, lse) with lse (num_heads, total_q)
    fp32 (return_lse). Rows past cu_seqlens_q[-1] are not written. Asynchronous on the current
    stream; the device arrays are read by the kernel, never by the host (graph capture works),
    unless FA3JIT_DEBUG_VARLEN=1. num_splits: flash_attn_func's (split-KV), here with FA3's
    default 1 (one pass); 0 = the library chooses from max_seqlen_q / max_seqlen_k. Forward only.
    """
    fp8 = (q_descale, k_descale, v_descale, out_dtype, check_descales)
    out, lse = _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        seqused_k, page_table, softmax_scale, causal, window_size, softcap,
                        return_lse, fp8, num_splits=num_splits)
    return (out, lse) if lse is not None else out


def kvcache_forward(q, k, v, page_table, seqused_k, softmax_scale, causal, window_size, softcap,
                    return_lse, fp8, before_launch=None, num_splits=1, pack_gqa=False):
    """flash_attn_func with page_table and/or seqused_k: (out, lse) in flash_attn_func's shapes
    (batch, seqlen_q, ...), (batch, num_heads, seqlen_q). before_launch as _forward's (a
    contiguous k/v that cannot be viewed as (batch · seqlen_k) rows is copied by reshape before
    it: flash_attn_with_kvcache sends such caches through pages instead). num_splits:
    flash_attn_func's."""
    torch = _torch._import_torch()
    _torch._check_tensor(torch, "q", q)
    batch, seqlen_q, num_heads, head_dim = q.shape
    if page_table is None and _splits.check_pack_gqa(pack_gqa):
        raise ValueError("fa3jit: pack_gqa=True needs rectangular q over a paged (or page-viewed) "
                         "cache; with seqused_k and a contiguous k/v the call runs as packed "
                         "sequences, which packed GQA does not take: pass None or False, or a "
                         "page_table")
    if page_table is None:
        # Contiguous cache with seqused_k: the varlen config over (batch · seqlen) packed rows.
        for name, t in (("k", k), ("v", v)):
            _torch._check_tensor(torch, name, t)
        if k.shape[0] != batch or v.shape[0] != batch:
            raise ValueError(f"fa3jit: batch sizes differ: q {batch}, k {k.shape[0]}, "
                             f"v {v.shape[0]}")
        seqlen_k = k.shape[1]
        ar = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
        out, lse = _forward(q.reshape(batch * seqlen_q, num_heads, head_dim),
                            k.reshape(batch * seqlen_k, *k.shape[2:]),
                            v.reshape(batch * seqlen_k, *v.shape[2:]), ar * seqlen_q,
                            ar * seqlen_k, seqlen_q, seqlen_k, seqused_k, None, softmax_scale,
                            causal, window_size, softcap, return_lse, fp8,
                            before_launch=before_launch, num_splits=num_splits,
                            pack_gqa=pack_gqa)
        if lse is not None:                             # (num_heads, batch · seqlen_q) packed
            lse = lse.reshape(num_heads, batch, seqlen_q).permute(1, 0, 2).contiguous()
    else:
        q2 = q.reshape(batch * seqlen_q, num_heads, head_dim)
        out, lse = _forward(q2, k, v, None, None, 0, 0, seqused_k, page_table, softmax_scale,
                            causal, window_size, softcap, return_lse, fp8,
                            rect=(batch, seqlen_q),     # lse already (batch, heads, seqlen_q)
                            before_launch=before_launch, num_splits=num_splits,
                            pack_gqa=pack_gqa)
    out = out.reshape(batch, seqlen_q, num_heads, out.shape[-1])
    return out, lse
