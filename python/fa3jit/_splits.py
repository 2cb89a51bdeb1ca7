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


def choose(torch, cfg, n, device, batch, seqlen_q, seqlen_k, num_heads, num_heads_k) -> int:
    """Sets cfg.split_kv for a call of this shape and returns the args' num_splits: n = 1 one
    pass; n > 1 that many splits; n = 0 the library's choice (fa3_fwd_tune: split-KV where the
    query tiles leave SMs idle; fa3_fwd then picks the count). Varlen configs (cfg.varlen): pass
    max_seqlen_q / max_seqlen_k as seqlen_q / seqlen_k."""
    if n == 1:
        cfg.split_kv = 0
        return n
    if n > 1:
        cfg.split_kv = 1
        return n
    a = _lib.new_fwd_args()
    a.batch, a.seqlen_q, a.seqlen_k = batch, seqlen_q, seqlen_k
    a.max_seqlen_q, a.max_seqlen_k = seqlen_q, seqlen_k
    a.num_heads, a.num_heads_k = num_heads, num_heads_k
    check(lib.fa3_fwd_tune(ctypes.byref(cfg), ctypes.byref(a), _sm_count(torch, device)))
    return 0
