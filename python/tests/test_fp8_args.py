"""flash_attn_func's FP8 arguments checked on the CPU (torch needed, no GPU): dtypes of q/k/v,
q_descale/k_descale/v_descale, out_dtype, check_descales (none of these needs the library), and
the fa3_fwd_args they become (fa3_fwd_args_init: the library). Every refusal happens before any tensor reaches the device check, so CPU tensors reach
each rule; a call whose FP8 arguments are all right gets as far as "must be a CUDA tensor".
"""
import re

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover - torch < 2.1
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

import fa3jit  # noqa: E402
from fa3jit import _lib, _torch  # noqa: E402

def _has_library():
    try:
        fa3jit.library_path()
        return True
    except fa3jit.LibraryNotFoundError:
        return False


needs_library = pytest.mark.skipif(not _has_library(), reason="libfa3jit.so not built")
E4M3 = torch.float8_e4m3fn
B, SQ, SK, H, HK, D = 3, 16, 24, 4, 2, 64


def qkv(dtype=E4M3, heads_k=HK):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, SQ, H, D, generator=g).to(dtype)
    k = torch.randn(B, SK, heads_k, D, generator=g).to(dtype)
    v = torch.randn(B, SK, heads_k, D, generator=g).to(dtype)
    return q, k, v


def descale(*shape, dtype=torch.float32, device="cpu"):
    return torch.full(shape, 0.5, dtype=dtype, device=device)


def reaches_device_check(*args, **kw):
    """Every dtype and descale rule passed: the first refusal is q's CPU device."""
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        fa3jit.flash_attn_func(*args, **kw)


# ------------------------------------------------------------------ accepted
@pytest.mark.parametrize("kw", [
    dict(), dict(q_descale=descale(B, HK)),
    dict(q_descale=descale(B, HK), k_descale=descale(B, HK), v_descale=descale(B, HK)),
    dict(out_dtype=torch.bfloat16), dict(out_dtype=torch.float16), dict(check_descales=False),
    dict(check_descales=0),
], ids=["none", "q", "qkv", "out-bf16", "out-fp16", "unchecked", "unchecked-0"])
def test_fp8_arguments_accepted(kw):
    reaches_device_check(*qkv(), **kw)


def test_bf16_fp16_inputs_take_their_own_out_dtype():
    for dt in (torch.bfloat16, torch.float16):
        reaches_device_check(*qkv(dt))
        reaches_device_check(*qkv(dt), out_dtype=dt)


# ------------------------------------------------------------------ dtypes
def test_e5m2_is_not_supported():
    for which in range(3):
        t = list(qkv())
        t[which] = t[which].to(torch.float32).to(torch.float8_e5m2)
        name = "qkv"[which]
        with pytest.raises(ValueError, match=rf"{name} has dtype torch.float8_e5m2.*not supported"):
            fa3jit.flash_attn_func(*t)


@pytest.mark.parametrize("other", [torch.bfloat16, torch.float16])
def test_mixed_fp8_and_other_dtypes_name_both(other):
    q, k, v = qkv()
    for args in ((q, k.to(torch.float32).to(other), v), (q.float().to(other), k, v),
                 (q, k, v.float().to(other))):
        with pytest.raises(ValueError, match="same dtype") as ei:
            fa3jit.flash_attn_func(*args)
        msg = str(ei.value)
        assert "torch.float8_e4m3fn" in msg and str(other) in msg, msg
        assert isinstance(ei.value, TypeError)      # what a bf16/fp16 mix raised before


def test_float32_is_a_type_error_listing_e4m3():
    q, k, v = qkv(torch.float32)
    with pytest.raises(TypeError, match="float32.*torch.float8_e4m3fn"):
        fa3jit.flash_attn_func(q, k, v)


# ------------------------------------------------------------------ descales
@pytest.mark.parametrize("name", ["q_descale", "k_descale", "v_descale"])
@pytest.mark.parametrize("shape", [(B, H), (1, HK), (B,), (HK, B), (B, HK, 1), ()],
                         ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_descale_shape_must_be_batch_by_num_heads_k(name, shape):
    """Exactly (batch, num_heads_k), as FlashAttention-3: neither (batch, num_heads) nor a
    broadcastable (1, num_heads_k)."""
    pattern = rf"{name} must have shape \(batch, num_heads_k\) = \({B}, {HK}\), got " + \
        re.escape(str(tuple(shape)))
    with pytest.raises(ValueError, match=pattern):
        fa3jit.flash_attn_func(*qkv(), **{name: descale(*shape)})


@pytest.mark.parametrize("name", ["q_descale", "k_descale", "v_descale"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32])
def test_descale_dtype_must_be_float32(name, dtype):
    with pytest.raises(ValueError, match=rf"{name} must have dtype torch.float32, got {dtype}"):
        fa3jit.flash_attn_func(*qkv(), **{name: descale(B, HK, dtype=dtype)})


@pytest.mark.parametrize("name", ["q_descale", "k_descale", "v_descale"])
def test_descale_must_be_on_qs_device(name):
    with pytest.raises(ValueError, match=rf"{name} must be on q's device cpu, got device meta"):
        fa3jit.flash_attn_func(*qkv(), **{name: descale(B, HK, device="meta")})


@pytest.mark.parametrize("value", [0.5, [[0.5, 0.5]] * B, "1"], ids=repr)
def test_descale_must_be_a_tensor(value):
    with pytest.raises(TypeError, match="k_descale must be a torch.Tensor or None"):
        fa3jit.flash_attn_func(*qkv(), k_descale=value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["q_descale", "k_descale", "v_descale"])
def test_descales_with_bf16_fp16_inputs_are_refused(name, dtype):
    with pytest.raises(ValueError, match=rf"{name} is given with {dtype} inputs"):
        fa3jit.flash_attn_func(*qkv(dtype), **{name: descale(B, HK)})


def test_descale_made_contiguous_with_its_values():
    """A transposed (batch, num_heads_k) view is copied to a contiguous tensor (fa3_fwd reads
    element b·num_heads_k + h_k); the values stay where they were."""
    q = qkv()[0]
    base = torch.arange(HK * B, dtype=torch.float32).reshape(HK, B) + 1
    d = base.t()
    assert not d.is_contiguous()
    got = _torch._check_descale(torch, "q_descale", d, q, B, HK)
    assert got.is_contiguous() and torch.equal(got, d)
    same = torch.ones(B, HK)
    assert _torch._check_descale(torch, "q_descale", same, q, B, HK) is same


# ------------------------------------------------------------------ out_dtype, check_descales
@pytest.mark.parametrize("out_dtype", [torch.float32, E4M3, torch.float8_e5m2, torch.int8])
def test_fp8_out_dtype_bf16_or_fp16_only(out_dtype):
    with pytest.raises(ValueError, match=rf"out_dtype {out_dtype} is not supported with FP8"):
        fa3jit.flash_attn_func(*qkv(), out_dtype=out_dtype)


@pytest.mark.parametrize("dtype, out_dtype", [(torch.bfloat16, torch.float16),
                                              (torch.float16, torch.bfloat16),
                                              (torch.bfloat16, torch.float32)])
def test_bf16_fp16_out_dtype_is_their_own(dtype, out_dtype):
    with pytest.raises(ValueError, match=rf"out_dtype {out_dtype} is not supported with {dtype}"):
        fa3jit.flash_attn_func(*qkv(dtype), out_dtype=out_dtype)


@pytest.mark.parametrize("value", ["bf16", "torch.bfloat16", 0, 1.0])
def test_out_dtype_must_be_a_torch_dtype(value):
    with pytest.raises(TypeError, match=rf"out_dtype must be a torch.dtype or None, got "
                                        rf"{re.escape(repr(value))}"):
        fa3jit.flash_attn_func(*qkv(), out_dtype=value)


@pytest.mark.parametrize("value", ["no", 2, None, 1.0])
def test_check_descales_is_a_flag(value):
    with pytest.raises(TypeError, match=rf"check_descales must be a bool, got "
                                        rf"{re.escape(repr(value))}"):
        fa3jit.flash_attn_func(*qkv(), check_descales=value)


def test_fp8_arguments_are_keyword_only():
    q, k, v = qkv()
    with pytest.raises(TypeError):
        fa3jit.flash_attn_func(q, k, v, None, False, (-1, -1), 0.0, False, descale(B, HK))


# ------------------------------------------------------------------ what reaches the library
def test_dtype_codes_and_output_dtype():
    q, k, v = qkv()
    ds = (descale(B, HK), None, descale(B, HK))
    code, out_dt, out_code, checked = _torch._dtypes_and_descales(torch, q, k, v, ds, None, B, HK)
    assert (code, out_dt, out_code) == (_lib.FA3_DTYPE_E4M3, torch.bfloat16, _lib.FA3_DTYPE_BF16)
    assert checked[0] is ds[0] and checked[1] is None and checked[2] is ds[2]
    r = _torch._dtypes_and_descales(torch, q, k, v, (None,) * 3, torch.float16, B, HK)
    assert r[1:3] == (torch.float16, _lib.FA3_DTYPE_FP16)
    qb, kb, vb = qkv(torch.float16)
    r = _torch._dtypes_and_descales(torch, qb, kb, vb, (None,) * 3, None, B, HK)
    assert r == (_lib.FA3_DTYPE_FP16, torch.float16, _lib.FA3_DTYPE_AUTO, (None, None, None))


@needs_library
@pytest.mark.parametrize("check_descales", [True, False])
def test_fwd_args_carry_descales_and_trust(check_descales):
    """The descales' addresses go to descale_q/k/v (NULL for None); descales_trusted is
    not check_descales."""
    q, k, v = qkv()
    out = torch.empty(B, SQ, H, D, dtype=torch.bfloat16)
    dq, dv = descale(B, HK), descale(B, HK)
    a = _torch._fwd_args(q, k, v, out, None, 0.0, 0.0, -1, -1, (dq, None, dv), check_descales)
    assert a.descale_q == dq.data_ptr() and a.descale_k is None and a.descale_v == dv.data_ptr()
    assert a.descales_trusted == (0 if check_descales else 1)
    assert (a.batch, a.seqlen_q, a.seqlen_k, a.num_heads, a.num_heads_k) == (B, SQ, SK, H, HK)
    assert (a.q_batch_stride, a.q_row_stride, a.q_head_stride) == q.stride()[:3]
    assert (a.o_batch_stride, a.o_row_stride, a.o_head_stride) == out.stride()[:3]
    assert a.q == q.data_ptr() and a.o == out.data_ptr() and a.lse is None
