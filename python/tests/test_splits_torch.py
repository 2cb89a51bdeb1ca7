"""num_splits through Python (split-KV): flash_attn_func and flash_attn_with_kvcache on decode
shapes, num_splits 0 (the library's choice), 1, 3 and 8, against test_varlen_torch.py's fp64
reference and tolerance rule on fresh random inputs (seed printed; FA3JIT_TEST_SEED repeats it),
O and LSE; the split counts agree with each other. The CPU part: _splits.choose sets split_kv
for decode shapes and not for prefill (fa3_fwd_tune), explicit counts force it, varlen by max_seqlen_q/k. GPU cases skip without torch or a CUDA device of compute capability 9.0.
"""
import random

import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from fa3jit import _lib, _splits  # noqa: E402
from test_varlen_torch import SEED, _REASON, attend  # noqa: E402

gpu = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


# ------------------------------------------------------------------ CPU: the choice
@pytest.mark.parametrize("shape,want", [
    ((1, 1, 64, 8, 131072), (1, 1, 64)),    # decode: packed GQA, the 64-row tile, split-KV
    ((32, 1, 32, 8, 32768), (1, 1, 64)),
    ((64, 1, 16, 16, 8192), (1, 1, 64)),    # ratio 1: one row a tile, still the decode tile
    ((4, 100, 16, 16, 1000), (1, 0, 0)),    # 100 rows, no GQA: split-KV alone (64 tiles)
    ((16, 1024, 16, 16, 1024), (0, 0, 0)),  # prefill
    ((4, 4096, 32, 8, 4096), (0, 0, 0)),    # GQA prefill: no packing
    ((1, 1, 24, 8, 131072), (1, 0, 0)),     # ratio 3 does not divide 64: split-KV alone
])
def test_choose(shape, want):
    _splits._sms[0] = 132
    b, sq, h, hk, sk = shape
    shape = (b, sq, sk, h, hk)                        # choose's order
    dev = torch.device("cuda", 0)
    cfg = _lib.new_config()
    assert _splits.choose(torch, cfg, 0, dev, *shape) == 0
    assert (cfg.split_kv, cfg.pack_gqa, cfg.block_m) == want
    cfg = _lib.new_config()                           # explicit counts
    assert _splits.choose(torch, cfg, 5, dev, *shape) == 5
    assert cfg.split_kv == 1
    cfg = _lib.new_config()
    assert _splits.choose(torch, cfg, 1, dev, *shape) == 1
    assert cfg.split_kv == 0 and (cfg.pack_gqa, cfg.block_m) == want[1:]
    cfg = _lib.new_config()                           # explicit packing
    _splits.choose(torch, cfg, 0, dev, *shape, pack_gqa=False)
    assert cfg.pack_gqa == 0 and cfg.split_kv == want[0]
    cfg = _lib.new_config()
    _splits.choose(torch, cfg, 1, dev, *shape, pack_gqa=False)
    assert (cfg.split_kv, cfg.pack_gqa, cfg.block_m) == (0, 0, 0)  # one pass, the prefill tile
    cfg = _lib.new_config()
    _splits.choose(torch, cfg, 1, dev, *shape, pack_gqa=True)
    assert (cfg.split_kv, cfg.pack_gqa, cfg.block_m) == (0, 1, 0)


def test_choose_varlen():
    _splits._sms[0] = 132
    cfg = _lib.new_config()
    cfg.varlen = 1
    assert _splits.choose(torch, cfg, 0, torch.device("cuda", 0), 4, 1, 30000, 16, 8) == 0
    assert cfg.split_kv == 1
    cfg.split_kv = 0
    _splits.choose(torch, cfg, 0, torch.device("cuda", 0), 4, 1000, 30000, 16, 8)
    assert cfg.split_kv == 0


def test_num_splits_refused():
    for bad in (-1, 129, 1000):
        with pytest.raises(ValueError, match=f"num_splits {bad} is out of range"):
            _splits.check_num_splits(bad)
    for bad in (True, 2.0, "3"):
        with pytest.raises(TypeError, match="num_splits"):
            _splits.check_num_splits(bad)
    q = torch.zeros(2, 1, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="num_splits 129"):
        fa3jit.flash_attn_func(q, q, q, num_splits=129)
    for bad in (1, 0, "yes"):
        with pytest.raises(TypeError, match="pack_gqa must be None, True or False"):
            fa3jit.flash_attn_func(q, q, q, pack_gqa=bad)
    # the seqused_k path without pages (packed sequences): type checked, True refused
    su = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(TypeError, match="pack_gqa must be None, True or False"):
        fa3jit.flash_attn_func(q, q, q, seqused_k=su, pack_gqa="yes")
    with pytest.raises(ValueError, match="pack_gqa=True needs rectangular q"):
        fa3jit.flash_attn_func(q, q, q, seqused_k=su, pack_gqa=True)


# ------------------------------------------------------------------ GPU
def _reference(q, k, v, causal, window=(-1, -1), softcap=0.0, lens=None):
    """fp64 reference per sequence, (out (b, sq, h, dv), lse (b, h, sq), lowp out)."""
    b = q.shape[0]
    outs, lses, lows = [], [], []
    for i in range(b):
        n = k.shape[1] if lens is None else lens[i]
        args = (q[i].double(), k[i, :n].double(), v[i, :n].double(), causal, window, softcap,
                q.shape[-1] ** -0.5)
        o, l_ = attend(*args)
        lo, _ = attend(*args, lowp=q.dtype)
        outs.append(o), lses.append(l_), lows.append(lo)
    return torch.stack(outs), torch.stack(lses), torch.stack(lows)


def _judge(out, lse, ref, lse_ref, low, tag):
    err = (out.double() - ref).abs().nan_to_num(float("inf")).max().item()
    err_low = (low - ref).abs().max().item()
    fin = ~torch.isinf(lse_ref)
    err_lse = (lse.double()[fin] - lse_ref[fin]).abs().nan_to_num(float("inf")).max().item()
    print(f"  {tag}: max|O-ref| {err:.3g} (lowp {err_low:.3g}), max|LSE-ref| {err_lse:.3g}")
    assert err <= 2 * err_low + 1e-3, (tag, err, err_low)
    assert err_lse <= 1e-3, (tag, err_lse)
    assert torch.all(torch.isinf(lse[~fin]) & (lse[~fin] < 0)), tag


@gpu
@pytest.mark.parametrize("shape", [(2, 1, 16, 4, 3000, 128), (1, 3, 8, 8, 5000, 64),
                                   (3, 2, 8, 1, 777, 256)],
                         ids=["b2-gqa4-hd128", "b1-sq3-hd64", "b3-mqa-hd256"])
@pytest.mark.parametrize("causal", [False, True], ids=["none", "causal"])
def test_flash_attn_func_splits(shape, causal):
    b, sq, h, hk, sk, d = shape
    g = torch.Generator(device="cuda").manual_seed(SEED + sk)
    q = torch.randn(b, sq, h, d, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(b, sk, hk, d, device="cuda", generator=g).to(torch.bfloat16)
    v = torch.randn(b, sk, hk, d, device="cuda", generator=g).to(torch.bfloat16)
    ref, lse_ref, low = _reference(q, k, v, causal)
    results = {}
    for n in (0, 1, 3, 8):
        for pack in (None, False, True):       # the library's choice (the decode family), not
            out, lse = fa3jit.flash_attn_func(q, k, v, causal=causal, return_lse=True,
                                              num_splits=n, pack_gqa=pack)
            torch.cuda.synchronize()
            _judge(out, lse, ref, lse_ref, low, f"num_splits {n} pack_gqa {pack}")
            if pack is None:
                results[n] = out.float()
    for n in (3, 8):  # the splits agree with one pass within the dtype's rounding of O
        assert (results[n] - results[1]).abs().max().item() <= 2 * (low - ref).abs().max().item() + 1e-3


@gpu
@pytest.mark.parametrize("kind", ["contiguous", "paged 64"])
@pytest.mark.parametrize("n", [0, 4])
def test_kvcache_splits(kind, n):
    rng = random.Random(SEED + n)
    b, h, hk, d, cap = 4, 16, 2, 128, 4096
    g = torch.Generator(device="cuda").manual_seed(SEED + 7 * n)

    def rnd(*s):
        return torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16)
    lens = [rng.randint(1, cap - 1) for _ in range(b)]
    lens[0] = 0                                       # E21: an empty cache plus one new row
    kc, vc = rnd(b, cap, hk, d), rnd(b, cap, hk, d)
    table = None
    if kind.startswith("paged"):
        ps = 64
        pages = list(range(b * cap // ps))
        rng.shuffle(pages)
        table = torch.tensor(pages, dtype=torch.int32, device="cuda").reshape(b, cap // ps)
        kp = torch.empty(b * cap // ps, ps, hk, d, dtype=torch.bfloat16, device="cuda")
        vp = torch.empty_like(kp)
        for bi in range(b):
            for j in range(cap // ps):
                kp[table[bi, j]] = kc[bi, j * ps:(j + 1) * ps]
                vp[table[bi, j]] = vc[bi, j * ps:(j + 1) * ps]
    q = rnd(b, 1, h, d)
    knew, vnew = rnd(b, 1, hk, d), rnd(b, 1, hk, d)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if table is None:
        out, lse = fa3jit.flash_attn_with_kvcache(q, kc, vc, knew, vnew, cache_seqlens=seqlens,
                                                  num_splits=n, return_softmax_lse=True)
    else:
        out, lse = fa3jit.flash_attn_with_kvcache(q, kp, vp, knew, vnew, cache_seqlens=seqlens,
                                                  page_table=table, num_splits=n,
                                                  return_softmax_lse=True)
    torch.cuda.synchronize()
    for bi, L in enumerate(lens):                     # the reference's keys: old rows + new
        kc[bi, L], vc[bi, L] = knew[bi, 0], vnew[bi, 0]
    ref, lse_ref, low = _reference(q, kc, vc, False, lens=[L + 1 for L in lens])
    _judge(out, lse, ref, lse_ref, low, f"{kind} num_splits {n}")


@gpu
@pytest.mark.parametrize("page_size", [0, 64], ids=["packed", "paged64"])
@pytest.mark.parametrize("n", [0, 5])
@pytest.mark.parametrize("causal", [False, True], ids=["none", "causal"])
def test_varlen_splits(page_size, n, causal):
    """flash_attn_varlen_func with num_splits: decode-like lengths (1-3 query rows, up to 6000
    keys, an empty sequence), split-KV over varlen Q; O and LSE against fp64 per sequence."""
    from test_varlen_torch import check, make_case
    rng = random.Random(SEED + 11 * n + page_size)
    lens = [(rng.randint(1, 3), rng.randint(1, 6000)) for _ in range(6)]
    lens[2] = (2, 0)
    c = make_case(rng, lens, 8, 2, 128, torch.bfloat16, page_size)
    out, lse = fa3jit.flash_attn_varlen_func(
        c["q"], c["k"], c["v"], c["cu_q"], None if page_size else c["cu_k"], c["max_q"],
        c["max_k"], seqused_k=c.get("seqused_k"), page_table=c.get("page_table"), causal=causal,
        return_lse=True, num_splits=n)
    torch.cuda.synchronize()
    check(c, out, lse, torch.bfloat16, causal=causal)
