"""flash_attn_func against PyTorch's SDPA (math backend), FlashAttention's testing rule:

    max|out - ref| <= 2 * max|out_lowp - ref| + 1e-3

ref: SDPA in fp32 on the upcast inputs; out_lowp: the same SDPA in the inputs' dtype (bf16/fp16,
with the math backend's low-precision reductions allowed so it really computes in that dtype).
Causal and local masks are bottom-right aligned, built here as boolean masks (SDPA's is_causal is
top-left aligned). Softcap has no SDPA form: its reference is written out (scores, softcap·tanh,
mask, softmax, PV), in fp32 and in the low dtype.

Skipped without torch; the GPU tests also without a CUDA device of compute capability 9.0.
"""
import contextlib
import math

import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402

F = torch.nn.functional

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # pragma: no cover - torch < 2.3
    SDPBackend = sdpa_kernel = None


def _gpu_reason():
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    if torch.cuda.get_device_capability(0) != (9, 0):
        return f"needs a Hopper GPU (sm_90), found {torch.cuda.get_device_name(0)}"
    try:
        fa3jit.library_path()
    except fa3jit.LibraryNotFoundError as e:
        return str(e)
    return None


_REASON = _gpu_reason()
gpu = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture(autouse=True, scope="module")
def _fp32_matmul_is_fp32():
    """The fp32 reference must not run on TF32."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(old)


# ------------------------------------------------------------------ references
def visible_mask(seqlen_q, seqlen_k, window, device):
    """Boolean (seqlen_q, seqlen_k), True where query i sees key j (bottom-right aligned);
    None when every pair is visible."""
    left, right = window
    if left < 0 and right < 0:
        return None
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    diag = i + seqlen_k - seqlen_q
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        ok &= j <= diag + right
    if left >= 0:
        ok &= j >= diag - left
    return ok


def effective_window(causal, window_size):
    left, right = window_size
    left = -1 if left < 0 else left
    right = 0 if causal else (-1 if right < 0 else right)
    return left, right


@contextlib.contextmanager
def _math_sdpa(low_precision):
    flag = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    getter = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    old = getter() if getter else None
    if flag:
        flag(low_precision)
    try:
        if sdpa_kernel is not None:
            with sdpa_kernel(SDPBackend.MATH):
                yield
        else:
            with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True,
                                                enable_mem_efficient=False):
                yield
    finally:
        if flag:
            flag(old)


def attention_ref(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                  upcast=True):
    """(out (b, sq, h, dv), lse (b, h, sq) fp32 or None). upcast: fp32 on upcast inputs; else
    the inputs' dtype."""
    dtype = torch.float32 if upcast else q.dtype
    qt, kt, vt = (x.transpose(1, 2).to(dtype) for x in (q, k, v))   # (b, h, s, d)
    h, hk = q.shape[2], k.shape[2]
    if hk != h:
        kt = kt.repeat_interleave(h // hk, dim=1)
        vt = vt.repeat_interleave(h // hk, dim=1)
    sq, sk = q.shape[1], k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    mask = visible_mask(sq, sk, effective_window(causal, window_size), q.device)
    lse = None
    if softcap == 0:
        with _math_sdpa(low_precision=not upcast):
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
    else:
        s = torch.matmul(qt, kt.transpose(-1, -2)) * scale
        s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        out = torch.matmul(p.nan_to_num(0.0), vt)
    if upcast:
        s = torch.matmul(qt, kt.transpose(-1, -2)) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
    if mask is not None:                               # a row that sees no key: O = 0
        sees_none = ~mask.any(dim=-1)                  # (sq,)
        out = out.masked_fill(sees_none[None, None, :, None], 0.0)
    return out.transpose(1, 2), lse


def make_qkv(batch, seqlen_q, seqlen_k, heads, heads_k, head_dim, dtype, seed=0, q_mul=1.0,
             head_dim_v=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dv = head_dim_v or head_dim
    q = torch.randn(batch, seqlen_q, heads, head_dim, device="cuda", generator=g) * q_mul
    k = torch.randn(batch, seqlen_k, heads_k, head_dim, device="cuda", generator=g)
    v = torch.randn(batch, seqlen_k, heads_k, dv, device="cuda", generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def check_against_reference(out, q, k, v, **kw):
    ref, _ = attention_ref(q, k, v, upcast=True, **kw)
    lowp, _ = attention_ref(q, k, v, upcast=False, **kw)
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "non-finite values in the output"
    err = (out.float() - ref).abs().max().item()
    lowp_err = (lowp.float() - ref).abs().max().item()
    assert err <= 2 * lowp_err + 1e-3, (
        f"max|out - ref| = {err:.3g} > 2 * {lowp_err:.3g} + 1e-3 (lowp SDPA error)")
    return err, lowp_err


DTYPES = [torch.bfloat16, torch.float16]
SEQLENS = [(1, 1), (113, 203), (128, 128), (1000, 1000), (512, 2048), (2048, 512)]
# every supported (head_dim, head_dim_v) pair (fa3_supported_configs)
HEAD_DIMS = [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)]


# ------------------------------------------------------------------ correctness
@gpu
@pytest.mark.parametrize("seqlens", SEQLENS, ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("head_dims", HEAD_DIMS, ids=lambda d: f"hd{d[0]}" + (f"x{d[1]}" if d[1] != d[0] else ""))
def test_matches_sdpa(head_dims, dtype, causal, seqlens):
    sq, sk = seqlens
    head_dim, head_dim_v = head_dims
    q, k, v = make_qkv(2, sq, sk, 4, 4, head_dim, dtype, head_dim_v=head_dim_v)
    out = fa3jit.flash_attn_func(q, k, v, causal=causal)
    check_against_reference(out, q, k, v, causal=causal)


@gpu
@pytest.mark.parametrize("seqlens", [(113, 203), (1000, 1000), (2048, 512)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads_k", [1, 2, 3], ids=["hk1-mqa", "hk2-gqa", "hk3-gqa"])
def test_gqa_mqa(heads_k, causal, seqlens):
    sq, sk = seqlens
    q, k, v = make_qkv(2, sq, sk, 6, heads_k, 128, torch.bfloat16, seed=1)
    out = fa3jit.flash_attn_func(q, k, v, causal=causal)
    check_against_reference(out, q, k, v, causal=causal)


@gpu
@pytest.mark.parametrize("seqlens", [(113, 203), (1000, 1000), (2048, 512)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_softmax_scale(dtype, causal, seqlens):
    sq, sk = seqlens
    q, k, v = make_qkv(1, sq, sk, 4, 4, 128, dtype, seed=2)
    out = fa3jit.flash_attn_func(q, k, v, softmax_scale=0.3, causal=causal)
    check_against_reference(out, q, k, v, softmax_scale=0.3, causal=causal)


@gpu
@pytest.mark.parametrize("seqlens", [(113, 203), (1000, 1000), (512, 2048), (2048, 512)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_softcap(head_dim, dtype, causal, seqlens):
    sq, sk = seqlens
    # q scaled up so that many scores reach the tanh's curved part (|s| ~ softcap).
    q, k, v = make_qkv(2, sq, sk, 4, 4, head_dim, dtype, seed=3, q_mul=8.0)
    out = fa3jit.flash_attn_func(q, k, v, causal=causal, softcap=30.0)
    check_against_reference(out, q, k, v, causal=causal, softcap=30.0)


@gpu
@pytest.mark.parametrize("seqlens", [(113, 203), (1000, 1000), (512, 2048), (2048, 512)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_local_window(head_dim, dtype, causal, seqlens):
    sq, sk = seqlens
    q, k, v = make_qkv(2, sq, sk, 4, 4, head_dim, dtype, seed=4)
    out = fa3jit.flash_attn_func(q, k, v, causal=causal, window_size=(64, 32))
    check_against_reference(out, q, k, v, causal=causal, window_size=(64, 32))


@gpu
@pytest.mark.parametrize("window", [(0, 0), (-1, 17), (200, -1), (-1, 0), (5000, 5000)])
def test_window_edges(window):
    q, k, v = make_qkv(1, 300, 257, 2, 2, 64, torch.float16, seed=5)
    out = fa3jit.flash_attn_func(q, k, v, window_size=window)
    check_against_reference(out, q, k, v, window_size=window)


@gpu
def test_window_left_unlimited_right_zero_equals_causal():
    q, k, v = make_qkv(2, 333, 444, 4, 2, 128, torch.bfloat16, seed=6)
    a = fa3jit.flash_attn_func(q, k, v, causal=True)
    b = fa3jit.flash_attn_func(q, k, v, window_size=(-1, 0))
    c = fa3jit.flash_attn_func(q, k, v, causal=True, window_size=(-1, 123))   # causal wins
    assert torch.equal(a, b) and torch.equal(a, c)


@gpu
@pytest.mark.parametrize("kw", [dict(), dict(causal=True), dict(window_size=(64, 32)),
                                dict(softcap=30.0), dict(causal=True, softcap=30.0)],
                         ids=["full", "causal", "local", "softcap", "causal-softcap"])
@pytest.mark.parametrize("seqlens", [(1, 1), (113, 203), (2048, 512)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_return_lse(dtype, seqlens, kw):
    sq, sk = seqlens
    q, k, v = make_qkv(2, sq, sk, 4, 4, 128, dtype, seed=7)
    res = fa3jit.flash_attn_func(q, k, v, return_lse=True, **kw)
    assert isinstance(res, tuple) and len(res) == 2
    out, lse = res
    _, ref_lse = attention_ref(q, k, v, upcast=True, **kw)
    assert lse.shape == (2, 4, sq) and lse.dtype == torch.float32 and lse.is_contiguous()
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=0)
    check_against_reference(out, q, k, v, **kw)
    assert torch.equal(out, fa3jit.flash_attn_func(q, k, v, **kw))


@gpu
def test_rows_that_see_no_key():
    """causal, seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows are O = 0, LSE = -inf."""
    q, k, v = make_qkv(1, 8, 3, 2, 2, 64, torch.float16, seed=8)
    out, lse = fa3jit.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.all(out[:, :5] == 0)
    assert torch.all(lse[:, :, :5] == float("-inf"))
    assert torch.isfinite(lse[:, :, 5:]).all()
    check_against_reference(out, q, k, v, causal=True)


@gpu
def test_single_key_gives_v():
    q, k, v = make_qkv(2, 1, 1, 3, 3, 64, torch.float16, seed=9)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert torch.equal(out, v)
    scores = (q.float() * k.float()).sum(-1) / 8.0             # (b, 1, h)
    torch.testing.assert_close(lse, scores.transpose(1, 2), atol=1e-3, rtol=0)


@gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 256])
def test_non_contiguous_inputs(head_dim, causal):
    """q, k, v made as (batch, heads, seqlen, head_dim) and passed transposed (E10)."""
    b, h, hk, sq, sk = 2, 4, 2, 777, 1025
    g = torch.Generator(device="cuda").manual_seed(10)
    mk = lambda s, n: torch.randn(b, n, s, head_dim, device="cuda", generator=g,  # noqa: E731
                                  dtype=torch.float32).to(torch.bfloat16).transpose(1, 2)
    q, k, v = mk(sq, h), mk(sk, hk), mk(sk, hk)
    assert not q.is_contiguous() and q.stride(-1) == 1
    out = fa3jit.flash_attn_func(q, k, v, causal=causal)
    ref = fa3jit.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal)
    assert torch.equal(out, ref)
    check_against_reference(out, q, k, v, causal=causal)


@gpu
def test_sliced_inputs():
    """Views into a packed qkv tensor (row stride 3·heads·head_dim), as models make them."""
    qkv = torch.randn(2, 300, 3, 4, 128, device="cuda").to(torch.float16)
    q, k, v = qkv.unbind(dim=2)
    out = fa3jit.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out, fa3jit.flash_attn_func(q.contiguous(), k.contiguous(),
                                                   v.contiguous(), causal=True))


@gpu
def test_kv_broadcast_over_heads_stride_zero():
    """K and V broadcast across heads with stride 0 on the head axis (E11)."""
    q, k1, v1 = make_qkv(2, 100, 32 * 3 + 1, 4, 1, 128, torch.bfloat16, seed=11)
    k, v = k1.expand(2, 97, 4, 128), v1.expand(2, 97, 4, 128)
    assert k.stride(2) == 0
    out = fa3jit.flash_attn_func(q, k, v)
    assert torch.equal(out, fa3jit.flash_attn_func(q, k.contiguous(), v.contiguous()))


@gpu
def test_runs_on_the_current_stream():
    """The launch goes to torch's current stream: work queued before it on a side stream (a
    long sleep, then the write of q) is waited for; the default stream is not used."""
    q_src, k, v = make_qkv(2, 512, 512, 4, 4, 128, torch.bfloat16, seed=12)
    expected = fa3jit.flash_attn_func(q_src, k, v)         # also compiles and loads the kernel
    q = torch.zeros_like(q_src)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    assert side.cuda_stream != torch.cuda.default_stream().cuda_stream
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)                     # ~0.1 s of GPU time on side
        q.copy_(q_src)
        out = fa3jit.flash_attn_func(q, k, v)
    # had the kernel gone to another stream, it would have read q = 0 (or raced the copy)
    side.synchronize()
    assert torch.equal(out, expected)


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensors_on_another_device():
    q, k, v = (t.to("cuda:1") for t in make_qkv(1, 200, 300, 2, 2, 128, torch.bfloat16, seed=13))
    with torch.cuda.device(0):
        out = fa3jit.flash_attn_func(q, k, v, causal=True)
    assert out.device == q.device
    check_against_reference(out, q, k, v, causal=True)


@gpu
def test_tail_split_eager_and_in_cuda_graphs(monkeypatch):
    """The plan knob tail_split=2 forces a dense non-causal call whose tiles leave a part round on
    the card's SMs (192 here) to run its last tiles as split-KV pieces (runtime/tail.c). In a
    fresh context: a capture before the split-KV kernel exists runs unsplit (nothing is compiled
    or loaded inside a capture); an eager call then builds it and splits; a capture after that
    splits too. Each replay writes O over NaN, and all three match the reference."""
    from fa3jit import _core
    q, k, v = make_qkv(2, 4096, 4096, 3, 3, 128, torch.bfloat16, seed=21)
    small = make_qkv(1, 128, 128, 3, 3, 128, torch.bfloat16, seed=22)  # 3 tiles: no split
    monkeypatch.setenv("FA3JIT_PLAN_DEBUG", "tail_split=2")
    ctx = _core.Context()
    saved = _core._default
    _core._default = ctx
    try:
        fa3jit.flash_attn_func(*small)  # builds and loads the forward kernel alone
        torch.cuda.synchronize()
        for eager_first in (False, True):
            if eager_first:
                check_against_reference(fa3jit.flash_attn_func(q, k, v), q, k, v)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fa3jit.flash_attn_func(q, k, v)
            out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            check_against_reference(out, q, k, v)
            del g
    finally:
        _core._default = saved


@gpu
def test_repeated_calls_are_bitwise_identical():
    q, k, v = make_qkv(2, 1000, 1000, 4, 4, 128, torch.bfloat16, seed=14)
    a = fa3jit.flash_attn_func(q, k, v, causal=True)
    b = fa3jit.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(a, b)


@gpu
def test_empty_shapes():
    q, k, v = make_qkv(2, 0, 10, 4, 4, 64, torch.bfloat16)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)
    q, k, v = make_qkv(2, 5, 0, 4, 4, 64, torch.bfloat16)
    out, lse = fa3jit.flash_attn_func(q, k, v, return_lse=True)
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))


@gpu
def test_backward_raises():
    q, k, v = make_qkv(1, 64, 64, 2, 2, 64, torch.bfloat16)
    q.requires_grad_(True)
    out = fa3jit.flash_attn_func(q, k, v)
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match="backward"):
        out.sum().backward()
    with torch.no_grad():
        assert not fa3jit.flash_attn_func(q, k, v).requires_grad


# ------------------------------------------------------------------ errors
@gpu
def test_float32_raises():
    q, k, v = make_qkv(1, 16, 16, 2, 2, 64, torch.float32)
    with pytest.raises(TypeError, match="float32"):
        fa3jit.flash_attn_func(q, k, v)


@gpu
def test_bad_head_dim_raises_fa3error_naming_it():
    q, k, v = make_qkv(1, 16, 16, 2, 2, 72, torch.bfloat16)
    with pytest.raises(fa3jit.Fa3Error, match="72") as ei:
        fa3jit.flash_attn_func(q, k, v)
    assert ei.value.status_name == "FA3_ERR_BAD_HEAD_DIM"


@gpu
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_last_dim_stride_not_one_raises(which):
    q, k, v = make_qkv(1, 16, 16, 2, 2, 64, torch.bfloat16)
    t = {"q": q, "k": k, "v": v}
    t[which] = torch.cat([t[which], t[which]], dim=-1)[..., ::2]     # stride 2 on head_dim
    assert t[which].stride(-1) == 2
    msg = f"{which} must have a contiguous last dimension"
    with pytest.raises(ValueError, match=msg):
        fa3jit.flash_attn_func(t["q"], t["k"], t["v"])


@gpu
def test_bad_strides_raise_fa3error():
    """A head stride of 68 elements (136 bytes, not a multiple of 16: TMA) is refused by the
    library, before any launch."""
    q = torch.randn(1, 16, 2, 68, device="cuda").to(torch.bfloat16)[..., :64]
    assert q.stride(2) == 68
    k = torch.randn(1, 16, 2, 64, device="cuda").to(torch.bfloat16)
    with pytest.raises(fa3jit.Fa3Error, match="stride") as ei:
        fa3jit.flash_attn_func(q, k, k)
    assert ei.value.status_name == "FA3_ERR_BAD_STRIDE"


@gpu
def test_mismatched_arguments_raise():
    q, k, v = make_qkv(2, 16, 24, 4, 2, 64, torch.bfloat16)
    with pytest.raises(TypeError, match="same dtype"):
        fa3jit.flash_attn_func(q, k.half(), v)
    with pytest.raises(ValueError, match="batch"):
        fa3jit.flash_attn_func(q[:1], k, v)
    with pytest.raises(ValueError, match="head_dim"):
        fa3jit.flash_attn_func(q, torch.cat([k, k], -1), v)
    with pytest.raises(ValueError, match="seqlen_k"):
        fa3jit.flash_attn_func(q, k, v[:, :5])
    with pytest.raises(ValueError, match="multiple"):
        fa3jit.flash_attn_func(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="4 dimensions"):
        fa3jit.flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match="softmax_scale"):
        fa3jit.flash_attn_func(q, k, v, softmax_scale=0.0)
    with pytest.raises(ValueError, match="softmax_scale"):
        fa3jit.flash_attn_func(q, k, v, softmax_scale=float("nan"))
    with pytest.raises(ValueError, match="softcap"):
        fa3jit.flash_attn_func(q, k, v, softcap=-1.0)
    with pytest.raises(TypeError, match="window_size"):
        fa3jit.flash_attn_func(q, k, v, window_size=5)
    with pytest.raises(TypeError):
        fa3jit.flash_attn_func(q, k, v, dropout_p=0.1)       # not a parameter: never ignored
    with pytest.raises(fa3jit.Fa3Error, match="head_dim_v"):
        fa3jit.flash_attn_func(q, k, torch.cat([v, v], -1))  # head_dim_v != head_dim: C refuses


def test_cpu_tensors_raise():
    q = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        fa3jit.flash_attn_func(q, q, q)


def test_non_tensor_raises():
    with pytest.raises(TypeError, match="torch.Tensor"):
        fa3jit.flash_attn_func([1.0], [1.0], [1.0])
