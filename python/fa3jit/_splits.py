"""num_splits (FlashAttention's split-KV) for the forward calls: the argument's checks, and the
config's split_kv with the args' num_splits for one call, explicit or chosen by the library
(fa3_fwd_tune with the device's SM count)."""
from __future__ import annotations

import ctypes

from . import _args, _lib
from ._lib import check, lib

MAX_SPLITS = 128            # FA3_MAX_SPLITS
_sms = {}                   # device index -> SM count


def check_num_splits(num_splits) -> int:
    """num_splits as the C API takes it: 0 (the library chooses) or 1..128."""
    n = _args.c_int("num_splits", num_splits)
    if not 0 <= n <= MAX_SPLITS:
        raise ValueError(f"fa3jit: num_splits {n} is out of range (0 = the library chooses, "
                         f"1..{MAX_SPLITS})")
    return n


def _sm_count(torch, device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _sms:
        _sms[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _sms[idx]


def check_pack_gqa(pack_gqa):
    """pack_gqa as FlashAttention-3 takes it: None (the library chooses), True or False."""
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"fa3jit: pack_gqa must be None, True or False, got {pack_gqa!r}")
    return pack_gqa


def choose(torch, cfg, n, device, batch, seqlen_q, seqlen_k, num_heads, num_heads_k,
           pack_gqa=None) -> int:
    """Sets cfg's call-shape fields (split_kv, pack_gqa, block_m, block_n) for a call of this shape and
    returns the args' num_splits. What the caller leaves open (num_splits 0, pack_gqa None) is
    the library's choice (fa3_fwd_tune with the device's SM count: the decode family, packed GQA
    with the 64-row tile and split-KV, for few query rows; split-KV alone where the query tiles
    leave SMs idle); then n = 1 one pass, n > 1 that many splits, pack_gqa True / False packed or
    not (fa3_fwd refuses a head ratio that does not divide block_m). Varlen configs (cfg.varlen):
    pass max_seqlen_q / max_seqlen_k as seqlen_q / seqlen_k."""
    if n == 0 or pack_gqa is None:
        a = _lib.new_fwd_args()
        a.batch, a.seqlen_q, a.seqlen_k = batch, seqlen_q, seqlen_k
        a.max_seqlen_q, a.max_seqlen_k = seqlen_q, seqlen_k
        a.num_heads, a.num_heads_k = num_heads, num_heads_k
        check(lib.fa3_fwd_tune(ctypes.byref(cfg), ctypes.byref(a), _sm_count(torch, device)))
    if pack_gqa is not None:
        cfg.pack_gqa = 1 if pack_gqa else 0
    if n == 1:
        cfg.split_kv = 0
    elif n > 1:
        cfg.split_kv = 1
    if cfg.block_m == 128 and (cfg.pack_gqa or cfg.split_kv):
        # head_dim 64's short tile is fa3_fwd_tune's one-pass, unpacked choice: packed GQA
        # needs the ratio to divide the tile's rows (the planner's 192 takes 3, 6, 12 where 128
        # does not), and split-KV keeps the planner's tile
        cfg.block_m = 0
    if cfg.pack_gqa or cfg.split_kv:
        # head_dim 256's 64-key blocks are fa3_fwd_tune's one-pass, unpacked choice too (the
        # listed configs)
        cfg.block_n = 0
    return n
