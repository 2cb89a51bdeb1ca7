"""flash_attn_varlen_func's and flash_attn_func's KV-cache arguments checked on the CPU (torch
needed, no GPU): shapes, dtypes and devices of q/k/v, cu_seqlens, seqused_k and page_table,
max_seqlen ranges, page sizes. Every refusal comes before the device check, so CPU tensors reach
each rule; a call whose arguments are all right gets as far as "q must be a CUDA tensor".
"""
import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402

B, H, HK, D = 3, 4, 2, 64
LENS_Q, LENS_K = [5, 0, 7], [9, 4, 0]


def packed(total_q=sum(LENS_Q), total_k=sum(LENS_K), dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(total_q, H, D, generator=g).to(dtype)
    k = torch.randn(total_k, HK, D, generator=g).to(dtype)
    v = torch.randn(total_k, HK, D, generator=g).to(dtype)
    return q, k, v


def cu(lens):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32)


def pages(num_pages=10, page_size=16, dtype=torch.bfloat16):
    k = torch.zeros(num_pages, page_size, HK, D, dtype=dtype)
    return k, k.clone()


def reaches_device_check(fn, *args, **kw):
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        fn(*args, **kw)


def varlen(**kw):
    q, k, v = kw.pop("qkv", packed())
    args = dict(cu_seqlens_q=cu(LENS_Q), cu_seqlens_k=cu(LENS_K), max_seqlen_q=7,
                max_seqlen_k=9)
    args.update(kw)
    return fa3jit.flash_attn_varlen_func(q, k, v, **args)


# ------------------------------------------------------------------ accepted
def test_exported():
    assert "flash_attn_varlen_func" in fa3jit.__all__


@pytest.mark.parametrize("kw", [
    dict(), dict(causal=True), dict(window_size=(8, 0)), dict(softcap=30.0),
    dict(seqused_k=torch.tensor([3, 4, 0], dtype=torch.int32)), dict(return_lse=True),
    dict(max_seqlen_q=0), dict(max_seqlen_k=13),
], ids=["plain", "causal", "window", "softcap", "seqused", "lse", "maxq0", "maxk-total"])
def test_varlen_accepted(kw):
    reaches_device_check(varlen, **kw)


@pytest.mark.parametrize("page_size", [1, 16, 100, 256])
def test_paged_accepted(page_size):
    k, v = pages(page_size=page_size)
    pt = torch.zeros(B, 4, dtype=torch.int32)
    reaches_device_check(varlen, qkv=(packed()[0], k, v), page_table=pt, max_seqlen_k=page_size)
    # cu_seqlens_k may be left out with a page table and seqused_k
    reaches_device_check(varlen, qkv=(packed()[0], k, v), page_table=pt, cu_seqlens_k=None,
                         seqused_k=torch.zeros(B, dtype=torch.int32), max_seqlen_k=0)
    # a page table with a row stride wider than its rows
    wide = torch.zeros(B, 8, dtype=torch.int32)[:, :4]
    reaches_device_check(varlen, qkv=(packed()[0], k, v), page_table=wide, max_seqlen_k=4)


def test_kvcache_flash_attn_func_accepted():
    q = torch.zeros(B, 2, H, D, dtype=torch.bfloat16)
    k, v = pages()
    pt = torch.zeros(B, 3, dtype=torch.int32)
    reaches_device_check(fa3jit.flash_attn_func, q, k, v, page_table=pt)
    reaches_device_check(fa3jit.flash_attn_func, q, k, v, page_table=pt,
                         seqused_k=torch.tensor([1, 0, 48], dtype=torch.int32), causal=True)
    kd = torch.zeros(B, 20, HK, D, dtype=torch.bfloat16)
    reaches_device_check(fa3jit.flash_attn_func, q, kd, kd.clone(),
                         seqused_k=torch.tensor([1, 0, 20], dtype=torch.int32))


# ------------------------------------------------------------------ refused
@pytest.mark.parametrize("kw,exc,match", [
    (dict(cu_seqlens_q=[0, 5, 5, 12]), ValueError, "cu_seqlens_q must be a 1-D int32 tensor"),
    (dict(cu_seqlens_q=torch.tensor([0], dtype=torch.int32)), ValueError, "batch \\+ 1 >= 2"),
    (dict(cu_seqlens_q=cu(LENS_Q).long()), TypeError, "cu_seqlens_q must have dtype torch.int32"),
    (dict(cu_seqlens_k=cu(LENS_K).long()), TypeError, "cu_seqlens_k must have dtype torch.int32"),
    (dict(cu_seqlens_k=torch.zeros(3, dtype=torch.int32)), ValueError,
     r"cu_seqlens_k must have shape \(4\), got \(3,\)"),
    (dict(cu_seqlens_k=None), ValueError, "cu_seqlens_k is None"),
    (dict(cu_seqlens_q=torch.zeros(8, dtype=torch.int32)[::2]), ValueError,
     "cu_seqlens_q must have a contiguous last dimension"),
    (dict(seqused_k=torch.zeros(2, dtype=torch.int32)), ValueError,
     r"seqused_k must have shape \(3\)"),
    (dict(seqused_k=torch.zeros(3, dtype=torch.int64)), TypeError, "seqused_k must have dtype"),
    (dict(seqused_k=[1, 2, 3]), TypeError, "seqused_k must be a torch.Tensor"),
    (dict(max_seqlen_q=-1), ValueError, r"max_seqlen_q -1 is out of range \(0..12"),
    (dict(max_seqlen_q=13), ValueError, "max_seqlen_q 13 is out of range"),
    (dict(max_seqlen_k=14), ValueError, r"max_seqlen_k 14 is out of range \(0..13"),
    (dict(max_seqlen_k=2.5), TypeError, "max_seqlen_k must be an int"),
    (dict(max_seqlen_q=True), TypeError, "max_seqlen_q must be an int"),
    (dict(softcap=-1.0), ValueError, "softcap -1.0"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale 0.0"),
    (dict(window_size=(1, 2, 3)), TypeError, "window_size must be a pair"),
    (dict(causal="yes"), TypeError, "causal must be a bool"),
    (dict(q_descale=torch.ones(B, HK)), ValueError, "q_descale is given with"),
])
def test_varlen_refused(kw, exc, match):
    with pytest.raises(exc, match=match):
        varlen(**kw)


def test_tensor_shapes_refused():
    q, k, v = packed()
    with pytest.raises(ValueError, match=r"q must have 3 dimensions \(total_q"):
        varlen(qkv=(q[None], k, v))
    with pytest.raises(ValueError, match=r"k must have 3 dimensions \(total_k"):
        varlen(qkv=(q, k[None], v))
    with pytest.raises(ValueError, match="q and k head_dim differ"):
        varlen(qkv=(q, k[..., :32].contiguous(), v))
    with pytest.raises(ValueError, match="k and v must agree"):
        varlen(qkv=(q, k, v[:5]))
    with pytest.raises(ValueError, match="multiple of num_heads_k"):
        varlen(qkv=(q[:, :3].contiguous(), k, v))
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        varlen(qkv=(q.float(), k, v))
    with pytest.raises(TypeError, match="must have the same dtype"):
        varlen(qkv=(q, k.half(), v))
    with pytest.raises(ValueError, match="q must have a contiguous last dimension"):
        varlen(qkv=(q.transpose(1, 2).contiguous().transpose(1, 2), k, v))


def test_paged_refused():
    q = packed()[0]
    pt = torch.zeros(B, 4, dtype=torch.int32)
    k, v = pages()
    with pytest.raises(ValueError, match=r"k must have 4 dimensions \(num_pages, page_size"):
        varlen(qkv=(q, packed()[1], packed()[2]), page_table=pt)
    with pytest.raises(ValueError, match=r"page_table must have shape \(3, any\)"):
        varlen(qkv=(q, k, v), page_table=torch.zeros(2, 4, dtype=torch.int32))
    with pytest.raises(TypeError, match="page_table must have dtype torch.int32"):
        varlen(qkv=(q, k, v), page_table=pt.long())
    with pytest.raises(ValueError, match="page_table must have a contiguous last dimension"):
        varlen(qkv=(q, k, v), page_table=torch.zeros(B, 8, dtype=torch.int32)[:, ::2])
    k3, v3 = pages(page_size=300)
    with pytest.raises(ValueError, match=r"page_size 300 \(k.shape\[1\]\) is out of range"):
        varlen(qkv=(q, k3, v3), page_table=pt)
    with pytest.raises(ValueError, match=r"max_seqlen_k 65 is out of range \(0..64"):
        varlen(qkv=(q, k, v), page_table=pt, max_seqlen_k=65)
    qd = torch.zeros(B, 2, H, D, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"page_table must have shape \(3, any\)"):
        fa3jit.flash_attn_func(qd, k, v, page_table=torch.zeros(4, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"seqused_k must have shape \(3\)"):
        fa3jit.flash_attn_func(qd, k, v, page_table=pt, seqused_k=torch.zeros(4, dtype=torch.int32))
