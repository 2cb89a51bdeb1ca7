"""flash_attn_with_kvcache's arguments checked on the CPU (torch needed, no GPU): the caches
(contiguous and paged), the new k/v rows, cache_seqlens as an int or a tensor, cache_batch_idx,
page_table, num_splits, the scalars and flags; and the page view of a contiguous cache
(page_view_size, the strided view) that serves cache_batch_idx. Every refusal comes before the
device check, so CPU tensors reach each rule; a call whose arguments are all right gets as far as
"q must be a CUDA tensor", before anything is launched or written.
"""
import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from fa3jit import _kvcache  # noqa: E402

B, SQ, H, HK, D = 3, 2, 4, 2, 64
SC = 100                                  # seqlen_cache
NP, PS, MP = 10, 16, 4                    # num_pages, page_size, max_pages_per_seq


def i32(x):
    return torch.tensor(x, dtype=torch.int32)


def make(paged=False, new=1, dtype=torch.bfloat16):
    q = torch.zeros(B, SQ, H, D, dtype=dtype)
    shape = (NP, PS, HK, D) if paged else (B + 1, SC, HK, D)
    kc, vc = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
    k = torch.zeros(B, new, HK, D, dtype=dtype) if new else None
    v = torch.zeros(B, new, HK, D, dtype=dtype) if new else None
    kw = dict(k=k, v=v, cache_seqlens=i32([0, 5, 20]))
    if paged:
        kw["page_table"] = torch.zeros(B, MP, dtype=torch.int32)
    return (q, kc, vc), kw


def call(paged=False, new=1, dtype=torch.bfloat16, **over):
    (q, kc, vc), kw = make(paged, new, dtype)
    kw.update(over)
    return fa3jit.flash_attn_with_kvcache(q, kc, vc, **kw)


def reaches_device_check(**kw):
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        call(**kw)


# ------------------------------------------------------------------ accepted
def test_exported():
    assert "flash_attn_with_kvcache" in fa3jit.__all__


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("kw", [
    dict(), dict(new=5), dict(new=0), dict(new=0, cache_seqlens=None), dict(cache_seqlens=7),
    dict(cache_seqlens=0), dict(causal=True), dict(window_size=(8, 0)), dict(softcap=30.0),
    dict(softmax_scale=0.1), dict(num_splits=0), dict(num_splits=1), dict(num_splits=2),
    dict(num_splits=128), dict(return_softmax_lse=True), dict(dtype=torch.float16),
], ids=["append1", "append5", "no-new", "no-lens", "lens-int", "lens-0", "causal", "window",
        "softcap", "scale", "splits0", "splits1", "splits2", "splits128", "lse", "fp16"])
def test_accepted(paged, kw):
    reaches_device_check(paged=paged, **kw)


def test_accepted_contiguous_variants():
    reaches_device_check(cache_batch_idx=i32([3, 0, 1]))
    # cache_batch_idx lets the cache have fewer entries than the batch
    (q, kc, vc), kw = make()
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        fa3jit.flash_attn_with_kvcache(q, kc[:1], vc[:1], cache_batch_idx=i32([0, 0, 0]), **kw)
    # the largest cache_seqlens int that leaves room for the new rows
    reaches_device_check(new=5, cache_seqlens=SC - 5)
    # k, v with padded strides, a (batch, heads, seqlen, dim) cache permuted
    (q, kc, vc), kw = make()
    kw["k"] = torch.zeros(B, 1, HK, D + 8, dtype=torch.bfloat16)[..., :D]
    kc2 = torch.zeros(B + 1, HK, SC, D, dtype=torch.bfloat16).transpose(1, 2)
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        fa3jit.flash_attn_with_kvcache(q, kc2, kc2.clone(), **kw)


def test_fp8_accepted():
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    if e4m3 is None:
        pytest.skip("torch has no float8_e4m3fn")
    (q, kc, vc), kw = make()
    q, kc, vc = q.to(e4m3), kc.to(e4m3), vc.to(e4m3)
    kw["k"], kw["v"] = kw["k"].to(e4m3), kw["v"].to(e4m3)
    ds = torch.ones(B, HK)
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        fa3jit.flash_attn_with_kvcache(q, kc, vc, q_descale=ds, k_descale=ds, v_descale=ds,
                                       check_descales=False, **kw)


# ------------------------------------------------------------------ refused
BAD = [
    # num_splits
    (dict(num_splits=129), ValueError, r"num_splits 129 is out of range \(0 = the library "
                                       r"chooses, 1..128\)"),
    (dict(num_splits=-1), ValueError, "num_splits -1 is out of range"),
    (dict(num_splits=True), TypeError, "num_splits"),
    (dict(num_splits=1.0), TypeError, "num_splits"),
    # new rows
    (dict(v=None), ValueError, "k is given without v"),
    (dict(k=None), ValueError, "v is given without k"),
    (dict(new=0, k=torch.zeros(B, 0, HK, D, dtype=torch.bfloat16),
          v=torch.zeros(B, 0, HK, D, dtype=torch.bfloat16)), ValueError,
     "k has seqlen_new 0 rows: give at least 1"),
    (dict(k=torch.zeros(B, 1, HK, D, dtype=torch.float16)), TypeError,
     "k has dtype torch.float16 but k_cache torch.bfloat16"),
    (dict(k=torch.zeros(B + 1, 1, HK, D, dtype=torch.bfloat16)), ValueError,
     r"k must have shape \(batch, seqlen_new, num_heads_k, head_dim\) = \(3, seqlen_new, 2, 64\)"),
    (dict(v=torch.zeros(B, 1, HK + 1, D, dtype=torch.bfloat16)), ValueError, "v must have shape"),
    (dict(v=torch.zeros(B, 2, HK, D, dtype=torch.bfloat16)), ValueError,
     "k and v have 1 and 2 new rows"),
    (dict(k=torch.zeros(B, 1, HK, 2 * D, dtype=torch.bfloat16)[..., ::2]), ValueError,
     "k must have a contiguous last dimension"),
    (dict(k=[1]), TypeError, "k must be a torch.Tensor"),
    (dict(new=101), ValueError, "k has seqlen_new 101 rows, more than the cache's capacity of "
                                "100 rows"),
    # cache_seqlens
    (dict(cache_seqlens=None), ValueError, "k and v are given without cache_seqlens"),
    (dict(cache_seqlens=100), ValueError, r"cache_seqlens 100 is out of range \(0..99: with 1 "
                                          r"new rows"),
    (dict(new=5, cache_seqlens=96), ValueError, r"cache_seqlens 96 is out of range \(0..95"),
    (dict(cache_seqlens=-1), ValueError, r"cache_seqlens -1 is out of range"),
    (dict(cache_seqlens=2.0), TypeError, "cache_seqlens"),
    (dict(cache_seqlens=True), TypeError, "cache_seqlens"),
    (dict(cache_seqlens=i32([1, 2])), ValueError, r"cache_seqlens must have shape \(3\)"),
    (dict(cache_seqlens=torch.tensor([1, 2, 3])), TypeError,
     "cache_seqlens must have dtype torch.int32, got torch.int64"),
    (dict(cache_seqlens=[1, 2, 3]), TypeError,
     r"cache_seqlens must be an int or an int32 torch.Tensor \(batch,\), got \[1, 2, 3\]"),
    # cache_batch_idx
    (dict(cache_batch_idx=i32([0, 1])), ValueError, r"cache_batch_idx must have shape \(3\)"),
    (dict(cache_batch_idx=torch.tensor([0, 1, 2])), TypeError,
     "cache_batch_idx must have dtype torch.int32"),
    # scalars and flags
    (dict(softcap=-1.0), ValueError, "softcap -1.0 must be 0"),
    (dict(softcap=float("inf")), ValueError, "softcap inf"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale 0.0 must be positive"),
    (dict(softmax_scale=1e39), ValueError, r"softmax_scale 1e\+39 must be positive and finite in "
                                           "float32"),
    (dict(window_size=(1,)), TypeError, "window_size must be a pair"),
    (dict(window_size=(1.5, 0)), TypeError, "window_size must be a pair of ints"),
    (dict(causal="yes"), TypeError, "causal must be a bool"),
    (dict(return_softmax_lse=2), TypeError, "return_softmax_lse must be a bool"),
    (dict(q_descale=torch.ones(B, HK)), ValueError, "q_descale is given with torch.bfloat16"),
]


@pytest.mark.parametrize("kw,exc,msg", BAD, ids=[str(i) for i in range(len(BAD))])
def test_refused(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        call(**kw)


PAGED_BAD = [
    (dict(cache_batch_idx=i32([0, 1, 2])), ValueError,
     "cache_batch_idx is given with a page_table"),
    (dict(page_table=torch.zeros(B, MP)), TypeError, "page_table must have dtype torch.int32"),
    (dict(page_table=torch.zeros(B + 1, MP, dtype=torch.int32)), ValueError,
     r"page_table must have shape \(3, any\)"),
    (dict(page_table=torch.zeros(B, 0, dtype=torch.int32)), ValueError,
     "page_table has 0 columns"),
    (dict(new=65), ValueError, "k has seqlen_new 65 rows, more than the cache's capacity of 64"),
    (dict(cache_seqlens=64), ValueError, r"cache_seqlens 64 is out of range \(0..63"),
]


@pytest.mark.parametrize("kw,exc,msg", PAGED_BAD, ids=[str(i) for i in range(len(PAGED_BAD))])
def test_refused_paged(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        call(paged=True, **kw)


def test_refused_caches():
    (q, kc, vc), kw = make()
    f = fa3jit.flash_attn_with_kvcache
    with pytest.raises(ValueError, match="k_cache and v_cache must agree"):
        f(q, kc, vc[:, :50], **kw)
    with pytest.raises(ValueError, match="q and k_cache head_dim differ: 64 vs 32"):
        f(q, kc[..., :32], vc, **kw)
    with pytest.raises(ValueError, match="num_heads 4 must be a multiple of num_heads_k 3"):
        f(q, torch.zeros(B + 1, SC, 3, D, dtype=torch.bfloat16),
          torch.zeros(B + 1, SC, 3, D, dtype=torch.bfloat16), cache_seqlens=1)
    with pytest.raises(ValueError, match="k_cache has batch_cache 2 entries, fewer than q's "
                                         "batch 3"):
        f(q, kc[:2], vc[:2], **kw)
    with pytest.raises(ValueError, match="k_cache must have 4 dimensions"):
        f(q, kc[0], vc, **kw)
    with pytest.raises(TypeError, match="q, k, v must have the same dtype"):
        f(q, kc.half(), vc.half(), cache_seqlens=1)
    with pytest.raises(TypeError, match="k_cache must be a torch.Tensor"):
        f(q, None, vc, **kw)
    kc_big = torch.zeros(NP, 300, HK, D, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"page_size 300 \(k_cache.shape\[1\]\) is out of range"):
        f(q, kc_big, kc_big.clone(), page_table=torch.zeros(B, 1, dtype=torch.int32),
          cache_seqlens=1)


# ------------------------------------------------------------------ the page view
@pytest.mark.parametrize("seqlen,bs_rows,entries,want", [
    (1024, 1024, 4, 256), (4096, 4096, 2, 256), (1000, 1000, 3, 200), (100, 100, 5, 100),
    (1009, 1009, 2, 1), (96, 96, 2, 96), (512, 640, 3, 128), (100, 110, 2, 10),
    (300, 300, 1, 100), (1, 1, 4, 1), (1, 7, 4, 1),
])
def test_page_view_size(seqlen, bs_rows, entries, want):
    rs = 2 * 64
    assert _kvcache.page_view_size(seqlen, bs_rows * rs, rs, entries) == want


def test_page_view_size_none():
    assert _kvcache.page_view_size(100, 12800, 0, 2) is None


@pytest.mark.parametrize("layout", ["contiguous", "padded", "heads-major", "one-row"])
def test_page_view_reads_the_same_rows(layout):
    g = torch.Generator().manual_seed(1)
    if layout == "heads-major":
        t = torch.randn(3, HK, 96, D, generator=g).transpose(1, 2)
    elif layout == "padded":
        t = torch.randn(3, 100, HK, D, generator=g)[:, :96]
    elif layout == "one-row":
        t = torch.randn(3, 1, HK, D, generator=g)
    else:
        t = torch.randn(3, 96, HK, D, generator=g)
    rows = t.shape[1]
    p = _kvcache.page_view_size(rows, t.stride(0), t.stride(1), 3)
    pages, per_entry, num_pages = _kvcache._as_pages(t, p)
    assert pages.shape == (num_pages, p, HK, D)
    for e in range(3):
        for j in range(rows):
            assert torch.equal(pages[e * per_entry + j // p, j % p], t[e, j])
