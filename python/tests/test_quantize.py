"""fa3jit.quantize_fp8 against a torch fp64 implementation of fa3jit.h's rule:

    x_rot = x · diag(signs) · H / sqrt(head_dim)   (hadamard=True; H the Sylvester Walsh-Hadamard)
    descale[b, g] = amax(|x_rot| over the group's rows, heads and head_dim) / 448  (1 if all zero)
    x_fp8 = e4m3(x_rot / descale), round to nearest even, saturating at ±448

Checked: descale to relative 1e-5; every value of x_fp8 within the half-ulp that round-to-nearest
allows (plus 1e-5 relative for descale and twice the fp32 rotation's error bound), and at least 99.9% of the bytes equal to
torch's own e4m3 rounding of the fp64 value; q·kᵀ kept by a shared rotation. The argument checks
need torch but no GPU; the rest is skipped without a Hopper GPU (the quantizer's kernels need
sm_89 or newer; these tests run where the others do).
"""
import math

import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402

from test_torch import gpu  # noqa: E402  (the same skip rule as flash_attn_func's tests)


# ------------------------------------------------------------------ the fp64 reference
def sylvester(n, device):
    h = torch.ones(1, 1, dtype=torch.float64, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def quantize_ref(x, num_heads_k=None, signs=None):
    """(x_rot / descale in fp64, descale fp64 (batch, num_heads_k), the fp32 rotation's error
    bound a row in x's units (batch, seqlen, num_heads, 1)); signs None: no rotation, bound 0.
    The kernel's rotation, log2(head_dim) butterfly stages and two scalings in fp32, moves each
    value by at most (stages + 2)·2^-24·sum|x|/sqrt(head_dim) (tests/quant_ref.c qref_row)."""
    b, s, h, d = x.shape
    hk = num_heads_k or h
    xr = x.double()
    rot_err = torch.zeros(b, s, h, 1, dtype=torch.float64, device=x.device)
    if signs is not None:
        rot_err = (math.log2(d) + 2) * 2.0**-24 * xr.abs().sum(-1, keepdim=True) / math.sqrt(d)
        xr = (xr * signs.double()) @ sylvester(d, x.device) / math.sqrt(d)
    amax = xr.abs().reshape(b, s, hk, h // hk, d).amax(dim=(1, 3, 4))
    descale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = xr / descale.repeat_interleave(h // hk, dim=1)[:, None, :, None]
    return q, descale, rot_err / descale.repeat_interleave(h // hk, dim=1)[:, None, :, None]


def half_ulp(q):
    """Half the e4m3 spacing at |q| (2^-10 below 2^-6): the most round-to-nearest moves q."""
    a = q.abs().clamp(min=2.0**-6)
    return torch.where(q.abs() < 2.0**-6, torch.full_like(q, 2.0**-10),
                       torch.exp2(torch.floor(torch.log2(a)) - 4))


def check_against_ref(x8, descale, q_ref, descale_ref, q_err):
    """q_err: the rotation's error bound in q's units (quantize_ref). A value within that
    window of a rounding midpoint may round either way: it may be off by half an ulp plus it."""
    assert x8.dtype == torch.float8_e4m3fn and x8.is_contiguous()
    assert descale.dtype == torch.float32 and descale.shape == descale_ref.shape
    rel = ((descale.double() - descale_ref).abs() / descale_ref).max().item()
    assert rel <= 1e-5, f"descale off by {rel:.3g} relative"
    got = x8.double()
    assert torch.isfinite(got).all(), "NaN bytes in x_fp8 (unwritten or overflowed)"
    err = (got - q_ref).abs()
    w = 1e-5 * q_ref.abs() + 2 * q_err
    allowed = half_ulp(q_ref.abs() + w) * (1 + 1e-6) + w
    worst = (err / allowed).max().item()
    assert worst <= 1.0, f"an e4m3 value is off by {worst:.3g} times what rounding allows"
    want = q_ref.clamp(-448, 448).float().to(torch.float8_e4m3fn)
    same = (x8.view(torch.uint8) == want.view(torch.uint8)).double().mean().item()
    assert same >= 0.999, f"only {same:.5f} of the bytes equal torch's e4m3 rounding"


def make_x(shape, dtype, device, outliers=True):
    x = torch.randn(shape, dtype=torch.float64, device=device)
    if outliers:
        pick = torch.rand(shape, device=device) < 1 / 512
        x = torch.where(pick, x * (30 + 70 * torch.rand(shape, device=device)), x)
    return x.to(dtype)


# ------------------------------------------------------------------ GPU
@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim, hadamard", [(64, False), (64, True), (128, False),
                                                (128, True), (256, True), (96, False)])
@pytest.mark.parametrize("num_heads_k", [None, 2])
def test_matches_fp64_reference(dtype, head_dim, hadamard, num_heads_k):
    x = make_x((2, 77, 8, head_dim), dtype, "cuda")
    seed = 1234 + head_dim
    x8, descale = fa3jit.quantize_fp8(x, num_heads_k=num_heads_k, hadamard=hadamard,
                                      seed=seed if hadamard else 0)
    assert x8.shape == x.shape and descale.shape == (2, num_heads_k or 8)
    signs = (torch.tensor(fa3jit.hadamard_signs(seed, head_dim), device="cuda") if hadamard
             else None)
    check_against_ref(x8, descale, *quantize_ref(x, num_heads_k, signs))


@gpu
def test_strided_and_non_contiguous_inputs():
    base = make_x((2, 40, 12, 256), torch.bfloat16, "cuda")
    x = base[:, ::2, 2:10, 64:192]                     # strided rows and heads, offset head_dim
    assert not x.is_contiguous() and x.stride(-1) == 1
    x8, descale = fa3jit.quantize_fp8(x, num_heads_k=4, hadamard=True, seed=7)
    signs = torch.tensor(fa3jit.hadamard_signs(7, 128), device="cuda")
    check_against_ref(x8, descale, *quantize_ref(x, 4, signs))
    xt = make_x((2, 16, 4, 64), torch.float16, "cuda").transpose(1, 3).contiguous().transpose(1, 3)
    assert xt.stride(-1) != 1                          # last dimension not contiguous: copied
    x8, descale = fa3jit.quantize_fp8(xt)
    check_against_ref(x8, descale, *quantize_ref(xt))


@gpu
def test_explicit_signs_equal_the_seeds_and_rotation_keeps_q_k():
    q = make_x((2, 64, 8, 128), torch.bfloat16, "cuda", outliers=False)
    k = make_x((2, 48, 2, 128), torch.bfloat16, "cuda", outliers=False)
    q8, dq = fa3jit.quantize_fp8(q, num_heads_k=2, hadamard=True, seed=99)
    signs = torch.tensor(fa3jit.hadamard_signs(99, 128), device="cuda")
    q8b, dqb = fa3jit.quantize_fp8(q, num_heads_k=2, hadamard=True, signs=signs)
    assert torch.equal(q8.view(torch.uint8), q8b.view(torch.uint8)) and torch.equal(dq, dqb)
    k8, dk = fa3jit.quantize_fp8(k, hadamard=True, signs=signs)
    qd = q8.double() * dq.double().repeat_interleave(4, 1)[:, None, :, None]
    kd = (k8.double() * dk.double()[:, None, :, None]).repeat_interleave(4, 2)
    scores_rot = torch.einsum("bshd,bthd->bhst", qd, kd)
    kr = k.double().repeat_interleave(4, 2)
    scores = torch.einsum("bshd,bthd->bhst", q.double(), kr)
    # e4m3 keeps ~4 significant bits: |error| within a few % of |q|·|k|
    norms = q.double().norm(dim=-1).transpose(1, 2)[..., None] * \
        kr.norm(dim=-1).transpose(1, 2)[:, :, None, :]
    assert ((scores_rot - scores).abs() / norms).max().item() < 0.1
    other = torch.tensor(fa3jit.hadamard_signs(100, 128), device="cuda")
    k8o, dko = fa3jit.quantize_fp8(k, hadamard=True, signs=other)
    kdo = (k8o.double() * dko.double()[:, None, :, None]).repeat_interleave(4, 2)
    mixed = torch.einsum("bshd,bthd->bhst", qd, kdo)
    assert ((mixed - scores).abs() / norms).max().item() > 0.1   # other signs: not kept


@gpu
def test_zeros_runs_on_the_current_stream_and_empty():
    x = torch.zeros(1, 8, 4, 64, dtype=torch.bfloat16, device="cuda")
    x8, descale = fa3jit.quantize_fp8(x, hadamard=True)
    assert torch.equal(descale, torch.ones_like(descale)) and not x8.float().any()
    s = torch.cuda.Stream()
    y = make_x((2, 300, 8, 128), torch.float16, "cuda")
    with torch.cuda.stream(s):
        y8, dy = fa3jit.quantize_fp8(y)
    s.synchronize()
    check_against_ref(y8, dy, *quantize_ref(y))
    e8, de = fa3jit.quantize_fp8(torch.empty(2, 0, 4, 64, dtype=torch.bfloat16, device="cuda"))
    assert e8.shape == (2, 0, 4, 64) and torch.equal(de, torch.ones(2, 4, device="cuda"))


@gpu
def test_bad_signs_values_and_device():
    x = make_x((1, 4, 2, 64), torch.bfloat16, "cuda")
    bad = torch.ones(64, device="cuda")
    bad[5] = 0.5
    with pytest.raises(ValueError, match=r"signs\[5\] = 0\.5"):
        fa3jit.quantize_fp8(x, hadamard=True, signs=bad)
    with pytest.raises(ValueError, match="device"):
        fa3jit.quantize_fp8(x, hadamard=True, signs=torch.ones(64))


# ------------------------------------------------------------------ argument checks (no GPU)
def test_non_tensor_and_cpu_tensors_raise():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        fa3jit.quantize_fp8([1.0])
    with pytest.raises(ValueError, match="CUDA"):
        fa3jit.quantize_fp8(torch.randn(1, 4, 2, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("shape", [(4, 2, 64), (1, 1, 4, 2, 64)])
def test_dimensions_other_than_4_raise(shape):
    with pytest.raises(ValueError, match="4 dimensions"):
        fa3jit.quantize_fp8(torch.zeros(shape, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8, torch.float8_e4m3fn])
def test_other_dtypes_raise_naming_them(dtype):
    with pytest.raises(TypeError, match=str(dtype)):
        fa3jit.quantize_fp8(torch.zeros(1, 4, 2, 64).to(dtype))



def _x(head_dim=64, heads=8):
    return torch.zeros(1, 4, heads, head_dim, dtype=torch.bfloat16)


@pytest.mark.parametrize("num_heads_k, error, words", [
    (3, ValueError, "num_heads_k 3 must divide num_heads 8"),
    (16, ValueError, "num_heads_k 16 must divide"),
    (0, ValueError, "num_heads_k 0"),
    (-2, ValueError, "num_heads_k -2"),
    (2.0, TypeError, "num_heads_k must be an int"),
    (True, TypeError, "num_heads_k must be an int"),
])
def test_num_heads_k_checked(num_heads_k, error, words):
    with pytest.raises(error, match=words):
        fa3jit.quantize_fp8(_x(), num_heads_k=num_heads_k)


@pytest.mark.parametrize("head_dim", [32, 96, 512])
def test_rotation_needs_64_128_256(head_dim):
    with pytest.raises(ValueError, match=f"head_dim {head_dim} cannot be rotated"):
        fa3jit.quantize_fp8(_x(head_dim), hadamard=True)


def test_output_strides_must_suit_fa3_fwd():
    with pytest.raises(ValueError, match="head_dim 72.*not a multiple of 16"):
        fa3jit.quantize_fp8(_x(72))


@pytest.mark.parametrize("kw, error, words", [
    (dict(hadamard=2), TypeError, "hadamard must be a bool"),
    (dict(hadamard="yes"), TypeError, "hadamard must be a bool"),
    (dict(seed=-1), ValueError, "seed -1 is out of range"),
    (dict(seed=2**64, hadamard=True), ValueError, "seed 18446744073709551616"),
    (dict(seed=1.0, hadamard=True), TypeError, "seed must be an int"),
    (dict(seed=5), ValueError, "seed 5 given with hadamard=False"),
    (dict(signs=torch.ones(64)), ValueError, "signs given with hadamard=False"),
    (dict(hadamard=True, seed=3, signs=torch.ones(64)), ValueError, "signs or seed, not both"),
    (dict(hadamard=True, signs=[1.0] * 64), TypeError, "signs must be a torch.Tensor"),
    (dict(hadamard=True, signs=torch.ones(32)), ValueError, r"head_dim = 64 .*shape \(32,\)"),
    (dict(hadamard=True, signs=torch.ones(2, 64)), ValueError, r"shape \(2, 64\)"),
    (dict(hadamard=True, signs=torch.ones(64, dtype=torch.int32)), TypeError, "torch.int32"),
    (dict(hadamard=True, signs=torch.full((64,), 2.0)), ValueError, r"signs\[0\] = 2\.0"),
    (dict(context="default"), TypeError, "context must be an fa3jit.Context"),
])
def test_other_arguments_checked(kw, error, words):
    with pytest.raises(error, match=words):
        fa3jit.quantize_fp8(_x(), **kw)


def test_valid_arguments_reach_the_device_check():
    """Everything above passes for valid values: the CPU tensor is the only complaint left."""
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        fa3jit.quantize_fp8(_x(128), num_heads_k=2, hadamard=True,
                            signs=torch.tensor(fa3jit.hadamard_signs(5, 128)))
