"""flash_attn_with_kvcache: FlashAttention-3's decode call on PyTorch CUDA tensors. New k/v rows
are appended to the cache at cache_seqlens (fa3_kvcache_append, on the current stream, no host
synchronization), then q attends to each sequence's cache_seqlens + seqlen_new keys through the
existing kernels: a paged cache through flash_attn_func(page_table=, seqused_k=), a contiguous
one through seqused_k, and a contiguous one with cache_batch_idx (or with strides that do not
hold its batch's rows end to end) viewed as pages whose page table is built on the device.

Every rule the host can check is checked before anything is launched (ValueError / TypeError
naming the value); the device arrays' contents (cache_seqlens + seqlen_new within the capacity,
cache_batch_idx and page indices in range) are the caller's contract, as in FlashAttention:
FA3JIT_DEBUG_VARLEN=1 makes the library read them back and refuse the first bad entry (Fa3Error).
"""
from __future__ import annotations

import ctypes
import math

from . import _args, _core, _lib, _splits, _torch, _varlen
from ._lib import check, lib

__all__ = ["flash_attn_with_kvcache"]

# A contiguous cache seen as pages: page sizes the paged kernel supports.
MAX_PAGE_SIZE = 256


def page_view_size(seqlen_cache, batch_stride, row_stride, batch_cache):
    """The page size that shows a contiguous (batch_cache, seqlen_cache, ...) cache as pages: a
    divisor P of seqlen_cache, at most 256, with the batch stride a multiple of P · row stride
    (page j of entry e is then page e · batch_stride / (P · row_stride) + j of one view), the
    one sharing the largest power of two with 128 (the kernels' key blocks load whole boxes of
    gcd(block_n, P) rows), then the largest; None if there is none (a row stride of 0)."""
    if seqlen_cache == 1:
        return 1                                    # a page per entry, at the batch stride
    if row_stride <= 0:
        return None
    best = None
    for p in range(1, min(seqlen_cache, MAX_PAGE_SIZE) + 1):
        if seqlen_cache % p or (batch_cache > 1 and batch_stride % (p * row_stride)):
            continue
        key = (math.gcd(p, 128), p)
        if best is None or key > best[0]:
            best = (key, p)
    return best[1] if best else None


def _as_pages(t, page_size):
    """The cache t (batch_cache, seqlen_cache, heads, dim) as (num_pages, page_size, heads, dim)
    pages of one strided view over t's elements (no copy; page_view_size's page_size), and the
    pages per cache entry: entry e's page j is page e · per_entry + j."""
    batch_cache, seqlen_cache = t.shape[:2]
    bs, rs, hs, ds = t.stride()
    if seqlen_cache == 1:
        page_stride, per_entry = bs, 1
    else:
        page_stride = page_size * rs
        per_entry = bs // page_stride if batch_cache > 1 else seqlen_cache // page_size
    num_pages = (batch_cache - 1) * per_entry + seqlen_cache // page_size
    pages = t.as_strided((num_pages, page_size, t.shape[2], t.shape[3]),
                         (page_stride, rs, hs, ds))
    return pages, per_entry, num_pages


def _check_new(torch, name, t, cache, batch, num_heads_k, dim, capacity):
    """k / v: (batch, seqlen_new, num_heads_k, dim) in the cache's dtype; seqlen_new rows."""
    _torch._check_tensor(torch, name, t)
    cname = name + "_cache"
    if t.dtype != cache.dtype:
        raise TypeError(f"fa3jit: {name} has dtype {t.dtype} but {cname} {cache.dtype}: the new "
                        f"rows are copied into the cache bit for bit")
    if t.shape[0] != batch or t.shape[2] != num_heads_k or t.shape[3] != dim:
        raise ValueError(f"fa3jit: {name} must have shape (batch, seqlen_new, num_heads_k, "
                         f"head_dim) = ({batch}, seqlen_new, {num_heads_k}, {dim}), got "
                         f"{tuple(t.shape)}")
    if t.shape[1] < 1:
        raise ValueError(f"fa3jit: {name} has seqlen_new {t.shape[1]} rows: give at least 1 "
                         f"(or k=None, v=None)")
    if t.shape[1] > capacity:
        raise ValueError(f"fa3jit: {name} has seqlen_new {t.shape[1]} rows, more than the "
                         f"cache's capacity of {capacity} rows per sequence")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                            page_table=None, cache_batch_idx=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, num_splits=0,
                            return_softmax_lse=False, *, q_descale=None, k_descale=None,
                            v_descale=None, out_dtype=None, check_descales=True, pack_gqa=None):
    """FlashAttention-3's flash_attn_with_kvcache (forward, Hopper; no rotary embedding).

    q: (batch, seqlen_q, num_heads, head_dim). k_cache / v_cache: (batch_cache, seqlen_cache,
    num_heads_k, head_dim[_v]), or with page_table (num_pages, page_size, num_heads_k,
    head_dim[_v]) (page_size 1..256) and page_table an int32 tensor (batch, max_pages_per_seq):
    position j of sequence b is row j % page_size of page page_table[b, j // page_size].
    cache_seqlens: an int, or an int32 tensor (batch,): the rows each sequence has cached (None:
    the whole cache, seqlen_cache or max_pages_per_seq · page_size rows). k, v: None, or the new
    rows (batch, seqlen_new, num_heads_k, head_dim[_v]) (seqlen_new >= 1, the caches' dtype),
    written IN PLACE into k_cache / v_cache at rows cache_seqlens[b] .. + seqlen_new - 1 before
    the attention (cache_seqlens itself is not changed: advance it yourself, as with
    FlashAttention). cache_batch_idx: int32 (batch,), contiguous caches only: sequence b uses
    cache entry cache_batch_idx[b] (None: entry b; batch_cache >= batch).
    q attends to cache_seqlens[b] + seqlen_new keys of sequence b; causal and window_size are
    bottom-right aligned (query i sees key j <= i + keys - seqlen_q). softmax_scale, softcap and
    the FP8 keywords (q_descale, k_descale, v_descale of shape (batch, num_heads_k), out_dtype,
    check_descales) as flash_attn_func. num_splits: 0 (the default) = the library chooses
    split-KV where the query tiles leave SMs idle (decode), 1 = one pass, 2..128 = that many
    splits (fp32 partials merged by a second kernel, workspace allocated stream-ordered). A
    contiguous cache is read as pages when page_view_size finds a size sharing 64 or more with
    128 (as fast as contiguous), else through the varlen kernel over its rows. Returns out (batch, seqlen_q, num_heads, head_dim_v), or (out, lse)
    with return_softmax_lse, lse (batch, num_heads, seqlen_q) fp32 (-inf for a row that sees no
    key, e.g. cache_seqlens 0 without new rows).

    Asynchronous on the current stream of q's device, without host synchronization: the device
    arrays are read by the kernels at run time, so a captured CUDA graph follows new values
    written into cache_seqlens (and cache_batch_idx, page_table) before each replay (pass
    check_descales=False with FP8 under capture). Device-side contract (FA3JIT_DEBUG_VARLEN=1
    checks it): cache_seqlens[b] + seqlen_new <= the capacity, cache_batch_idx in
    0..batch_cache-1, the page indices used in 0..num_pages-1; broken, the append writes nothing
    for those rows and the attention is wrong, never out of bounds. Contiguous caches whose rows
    are not end to end per batch entry, or with cache_batch_idx, are read as pages of the size
    page_view_size() picks (speed: 64..256 about that of the contiguous kernel; a seqlen_cache
    with no such divisor is slower). The cache rows past each sequence's keys must hold finite
    values (allocate caches with torch.zeros, not torch.empty): the kernels may load them with
    the keys before them, and their probability 0 times a NaN is NaN. pack_gqa (keyword-only):
    flash_attn_func's (None: the library chooses). Forward only.
    """
    torch = _torch._import_torch("fa3jit.flash_attn_with_kvcache")
    n_splits = _splits.check_num_splits(num_splits)
    pack_gqa = _splits.check_pack_gqa(pack_gqa)
    _torch._check_tensor(torch, "q", q)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _torch._check_tensor(torch, name, t)
    batch, seqlen_q, num_heads, head_dim = q.shape
    paged = page_table is not None
    slots, rows, num_heads_k = k_cache.shape[:3]
    head_dim_v = v_cache.shape[3]
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise ValueError(f"fa3jit: k_cache and v_cache must agree on all but the last dimension: "
                         f"k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}")
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"fa3jit: q and k_cache head_dim differ: {head_dim} vs "
                         f"{k_cache.shape[3]}")
    if num_heads_k < 1 or num_heads % num_heads_k != 0 or head_dim_v < 1:
        raise ValueError(f"fa3jit: num_heads {num_heads} must be a multiple of num_heads_k "
                         f"{num_heads_k} (MQA/GQA), head_dim_v {head_dim_v} at least 1")
    for name, n in (("batch", batch), ("seqlen_q", seqlen_q), ("num_heads", num_heads),
                    ("head_dim", head_dim), ("rows of k_cache", slots * rows)):
        _args.c_int(name, n)
    if batch < 1:
        raise ValueError(f"fa3jit: q has batch {batch}: at least 1 sequence")
    if slots < 1 or rows < 1:
        what = "(num_pages, page_size)" if paged else "(batch_cache, seqlen_cache)"
        raise ValueError(f"fa3jit: k_cache {what} = ({slots}, {rows}) must be at least 1 each")

    # The cache kind and its capacity (rows per sequence).
    if paged:
        _varlen._int32_array(torch, "page_table", page_table, (batch, None), q)
        if cache_batch_idx is not None:
            raise ValueError("fa3jit: cache_batch_idx is given with a page_table: the page table "
                             "maps sequences to pages; cache_batch_idx is for a contiguous cache "
                             "only")
        if not 1 <= rows <= MAX_PAGE_SIZE:
            raise ValueError(f"fa3jit: page_size {rows} (k_cache.shape[1]) is out of range "
                             f"(1..{MAX_PAGE_SIZE})")
        if page_table.shape[1] < 1:
            raise ValueError("fa3jit: page_table has 0 columns: max_pages_per_seq must be at "
                             "least 1")
        capacity = page_table.shape[1] * rows
    else:
        capacity = rows
        if cache_batch_idx is not None:
            _varlen._int32_array(torch, "cache_batch_idx", cache_batch_idx, (batch,), q)
        elif slots < batch:
            raise ValueError(f"fa3jit: k_cache has batch_cache {slots} entries, fewer than q's "
                             f"batch {batch} (without cache_batch_idx sequence b uses entry b)")
    _args.c_int("the cache's capacity", capacity)

    # New rows.
    if (k is None) != (v is None):
        raise ValueError(f"fa3jit: {'k' if v is None else 'v'} is given without "
                         f"{'v' if v is None else 'k'}: append both new K and V rows, or neither")
    seqlen_new = 0
    if k is not None:
        _check_new(torch, "k", k, k_cache, batch, num_heads_k, head_dim, capacity)
        _check_new(torch, "v", v, v_cache, batch, num_heads_k, head_dim_v, capacity)
        if v.shape[1] != k.shape[1]:
            raise ValueError(f"fa3jit: k and v have {k.shape[1]} and {v.shape[1]} new rows: "
                             f"they must append the same seqlen_new")
        seqlen_new = k.shape[1]
        _args.c_int("seqlen_new", seqlen_new)

    # cache_seqlens: None, an int, or an int32 tensor (batch,).
    lens_int = None
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("fa3jit: k and v are given without cache_seqlens: the new rows go "
                             "to rows cache_seqlens[b] .. of each sequence; give cache_seqlens")
    elif isinstance(cache_seqlens, torch.Tensor):
        _varlen._int32_array(torch, "cache_seqlens", cache_seqlens, (batch,), q)
    else:
        try:
            lens_int = _args.c_int("cache_seqlens", cache_seqlens)
        except TypeError:
            raise TypeError(f"fa3jit: cache_seqlens must be an int or an int32 torch.Tensor "
                            f"(batch,), got {cache_seqlens!r}") from None
        if not 0 <= lens_int <= capacity - seqlen_new:
            top = capacity - seqlen_new
            raise ValueError(f"fa3jit: cache_seqlens {lens_int} is out of range (0..{top}: with "
                             f"{seqlen_new} new rows a sequence holds at most the cache's "
                             f"{capacity} rows)")

    # Scalars, dtypes and the mask, before any device work (flash_attn_func's rules).
    fp8 = (q_descale, k_descale, v_descale, out_dtype, check_descales)
    _torch._dtypes_and_descales(torch, q, k_cache, v_cache, fp8[:3], out_dtype, batch,
                                num_heads_k)
    _args.flag("check_descales", check_descales)
    if softmax_scale is not None:
        scale, raw = _torch._float32("softmax_scale", softmax_scale)
        if not (math.isfinite(raw) and raw > 0 and math.isfinite(scale) and scale > 0):
            raise ValueError(f"fa3jit: softmax_scale {softmax_scale!r} must be positive and "
                             f"finite in float32")
    cap, raw_cap = _torch._float32("softcap", softcap)
    if not (raw_cap == 0 or (raw_cap > 0 and cap > 0 and math.isfinite(raw_cap))):
        raise ValueError(f"fa3jit: softcap {softcap!r} must be 0 (off) or positive and finite "
                         f"in float32")
    _torch._mask_and_window(causal, window_size, max(seqlen_q, 1), capacity)
    return_lse = _args.flag("return_softmax_lse", return_softmax_lse)

    # Devices: everything on q's CUDA device.
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v),
             ("cache_seqlens", cache_seqlens if lens_int is None else None),
             ("page_table", page_table), ("cache_batch_idx", cache_batch_idx)]
    _torch._check_device(torch, "q", q)
    for name, t in named[1:]:
        if isinstance(t, torch.Tensor) and t.device != q.device:
            raise ValueError(f"fa3jit: {name} must be on q's device {q.device}, got {t.device}")

    # How the attention reads the cache.
    kc, vc, table = k_cache, v_cache, page_table
    if not paged:
        end_to_end = all(t.shape[0] == 1 or t.shape[1] == 1 or
                         t.stride(0) == t.shape[1] * t.stride(1) for t in (k_cache, v_cache))
        sizes = {page_view_size(rows, t.stride(0), t.stride(1), slots)
                 for t in (k_cache, v_cache)}
        psize = sizes.pop() if len(sizes) == 1 else None
        # pages loaded in boxes of 64+ rows (gcd with block_n 128) run at the contiguous kernel's
        # speed (bench/RESULTS.md); else an end-to-end cache goes through seqused_k (varlen)
        as_pages = cache_batch_idx is not None or not end_to_end or (
            psize is not None and math.gcd(psize, 128) >= 64 and cache_seqlens is not None)
        if not as_pages:
            kc, vc = k_cache[:batch], v_cache[:batch]   # seqused_k over (batch · seqlen) rows
        else:
            if psize is None:
                raise ValueError(f"fa3jit: k_cache strides {tuple(k_cache.stride())} and v_cache "
                                 f"strides {tuple(v_cache.stride())} cannot be read as pages of "
                                 f"one size (a divisor of seqlen_cache {rows} up to 256 whose "
                                 f"row span divides the batch stride)")
            kc, per_entry, num_pages = _as_pages(k_cache, psize)
            vc, per_entry_v, _ = _as_pages(v_cache, psize)
            if per_entry_v != per_entry or num_pages > 2**31 - 1:
                raise ValueError(f"fa3jit: k_cache strides {tuple(k_cache.stride())} and v_cache "
                                 f"strides {tuple(v_cache.stride())} do not give one page table")
            idx = (cache_batch_idx if cache_batch_idx is not None
                   else torch.arange(batch, dtype=torch.int32, device=q.device))
            table = (idx[:, None] * per_entry +
                     torch.arange(rows // psize, dtype=torch.int32, device=q.device)[None, :])
            table = table.to(torch.int32)

    device = q.device
    with torch.cuda.device(device):
        lens = None
        if lens_int is not None:
            lens = torch.full((batch,), lens_int, dtype=torch.int32, device=device)
        elif cache_seqlens is not None:
            lens = cache_seqlens
        before = None
        seqused = lens
        if k is not None:
            seqused = torch.empty(batch, dtype=torch.int32, device=device)
            a = _append_args(torch, k, v, k_cache, v_cache, lens, cache_batch_idx, seqused,
                             page_table)

            def before():
                stream = torch.cuda.current_stream(device).cuda_stream
                check(lib.fa3_kvcache_append(_core.default_context().handle, ctypes.byref(a),
                                             ctypes.c_void_p(stream)))
        if seqused is None and table is None:           # the whole contiguous cache
            out, lse = _torch._forward(q, kc, vc, softmax_scale, causal, window_size, softcap,
                                       return_lse, fp8, n_splits, pack_gqa)
        else:
            out, lse = _varlen.kvcache_forward(q, kc, vc, table, seqused, softmax_scale, causal,
                                               window_size, softcap, return_lse, fp8,
                                               before_launch=before, num_splits=n_splits,
                                               pack_gqa=pack_gqa)
    return (out, lse) if return_lse else out


def _append_args(torch, k, v, k_cache, v_cache, lens, cache_batch_idx, seqused, page_table):
    """The fa3_kvcache_append_args of the call (the caches as given: contiguous or paged)."""
    a = _lib.new_kvcache_append_args()
    e4m3 = _torch._is_e4m3(torch, k.dtype)
    a.dtype = (_lib.FA3_DTYPE_E4M3 if e4m3 else _lib.FA3_DTYPE_BF16
               if k.dtype == torch.bfloat16 else _lib.FA3_DTYPE_FP16)
    a.k_new, a.v_new = k.data_ptr(), v.data_ptr()
    a.k_cache, a.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    a.cache_seqlens = lens.data_ptr()
    a.cache_batch_idx = cache_batch_idx.data_ptr() if cache_batch_idx is not None else None
    a.seqused_out = seqused.data_ptr()
    a.batch, a.seqlen_new, a.num_heads_k, a.head_dim = k.shape
    a.head_dim_v = v.shape[3]
    a.k_new_batch_stride, a.k_new_row_stride, a.k_new_head_stride = k.stride()[:3]
    a.v_new_batch_stride, a.v_new_row_stride, a.v_new_head_stride = v.stride()[:3]
    a.k_cache_batch_stride, a.k_cache_row_stride, a.k_cache_head_stride = k_cache.stride()[:3]
    a.v_cache_batch_stride, a.v_cache_row_stride, a.v_cache_head_stride = v_cache.stride()[:3]
    if page_table is not None:
        a.page_table = page_table.data_ptr()
        a.num_pages, a.page_size = k_cache.shape[:2]
        a.max_pages_per_seq = page_table.shape[1]
        a.page_table_stride = (page_table.stride(0) if page_table.shape[0] > 1
                               else page_table.shape[1])
    else:
        a.batch_cache, a.seqlen_cache = k_cache.shape[:2]
    return a
