"""_splits.choose without torch or a GPU (the SM count primed, a stand-in device): what the
caller fixes (pack_gqa True, num_splits > 1) on top of fa3_fwd_tune's choice must leave a config
that fa3_fwd takes. head_dim 64's short causal tile (block_m 128, fa3_fwd_tune's one-pass,
unpacked choice) is the case: packed GQA needs the head ratio to divide the tile's rows, and
the planner's 192 rows take ratios that 128 does not (3, 6, 12, ...)."""
import ctypes
import types

import pytest

from fa3jit import _lib, _splits


DEV = types.SimpleNamespace(index=0)       # _sm_count reads only .index once primed


def _canonical_block_m(cfg):
    out = _lib.new_config()
    _lib.check(_lib.lib.fa3_config_canonicalize(ctypes.byref(cfg), ctypes.byref(out)))
    return out.block_m


def _hd64(mask=_lib.FA3_MASK_CAUSAL):
    cfg = _lib.new_config()
    cfg.head_dim = 64
    cfg.mask = mask
    return cfg


def test_short_tile_is_the_library_choice():
    _splits._sms[0] = 132
    cfg = _hd64()
    assert _splits.choose(None, cfg, 0, DEV, 32, 512, 512, 32, 32) == 0
    assert (cfg.split_kv, cfg.pack_gqa, cfg.block_m) == (0, 0, 128)


@pytest.mark.parametrize("heads", [(6, 2), (24, 8), (12, 1)])   # ratios 3, 3, 12
@pytest.mark.parametrize("mask", [_lib.FA3_MASK_CAUSAL, _lib.FA3_MASK_LOCAL])
def test_pack_gqa_true_keeps_a_tile_the_ratio_divides(heads, mask):
    _splits._sms[0] = 132
    h, hk = heads
    cfg = _hd64(mask)
    _splits.choose(None, cfg, 0, DEV, 8, 512, 512, h, hk, pack_gqa=True)
    assert cfg.pack_gqa == 1
    bm = _canonical_block_m(cfg)
    assert bm % (h // hk) == 0, f"block_m {bm} refuses ratio {h // hk} (fa3_fwd: BAD_SHAPE)"


def test_forced_splits_keep_the_planner_tile():
    # fa3_fwd_tune: "split-KV keeps the planner's tile" (the listed split configs)
    _splits._sms[0] = 132
    cfg = _hd64()
    assert _splits.choose(None, cfg, 4, DEV, 32, 512, 512, 32, 32) == 4
    assert cfg.split_kv == 1
    assert cfg.block_m == 0


def test_hd256_short_keys_reset_when_the_caller_splits_or_packs():
    # fa3_fwd_tune gives head_dim 256's short causal calls 64-key blocks, a one-pass unpacked
    # config; forced splits or packing go back to the planner's block_n (the listed configs)
    _splits._sms[0] = 132
    cfg = _lib.new_config()
    cfg.head_dim = 256
    cfg.mask = _lib.FA3_MASK_CAUSAL
    assert _splits.choose(None, cfg, 0, DEV, 32, 512, 512, 8, 8) == 0
    assert (cfg.split_kv, cfg.pack_gqa, cfg.block_m, cfg.block_n) == (0, 0, 0, 64)
    assert _splits.choose(None, cfg, 4, DEV, 32, 512, 512, 8, 8) == 4
    assert (cfg.split_kv, cfg.block_n) == (1, 0)
    cfg = _lib.new_config()
    cfg.head_dim = 256
    cfg.mask = _lib.FA3_MASK_CAUSAL
    _splits.choose(None, cfg, 0, DEV, 32, 512, 512, 8, 2, pack_gqa=True)
    assert (cfg.pack_gqa, cfg.block_n) == (1, 0)
