"""The FP8 benchmarks' torch numerics (bench/fp8_emulation.py) on the CPU, in fp64 on small
tensors: e4m3 rounding and saturation, the quantizers' descales and error, the Hadamard rotation
(orthogonal, scores unchanged, the library's signs), the attention reference (against SDPA, GQA,
masks, the e4m3-P emulation) and the quantizer choice. Needs torch (CPU); no GPU.
"""
import ctypes
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover - torch < 2.1
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import fp8_emulation as emu  # noqa: E402

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ rounding, quantizers
def test_to_e4m3_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([1.0, 1.0625, 1.1875, 448.0, 460.0, 470.0, -1e4, 2.0**-9, 2.0**-10, 0.0])
    got = emu.to_e4m3(x).float()
    # 1.0625 is halfway between 1 and 1.125: even mantissa (1.0); 1.1875 -> 1.25 (even)
    want = torch.tensor([1.0, 1.0, 1.25, 448.0, 448.0, 448.0, -448.0, 2.0**-9, 0.0, 0.0])
    assert torch.equal(got, want), got
    assert torch.isfinite(got).all()


def test_per_tensor_quantization_maps_amax_to_448_within_e4m3_error():
    x = torch.randn(4, 64, 3, 32, generator=gen(1), dtype=F64) * 7
    x8, d = emu.quantize_per_tensor(x)
    assert x8.dtype == torch.float8_e4m3fn and d.dtype == torch.float32 and d.dim() == 0
    assert x8.float().abs().max().item() == 448.0
    assert math.isclose(d.item(), x.abs().max().item() / 448.0, rel_tol=1e-6)
    back = emu.dequantize(x8, d)
    normal = x.abs() >= 2.0**-6 * d.item()               # e4m3 normals: relative step 2^-3
    rel = ((back - x).abs() / x.abs())[normal]
    assert rel.max().item() <= 2.0**-4 * (1 + 1e-6)       # half a step, round to nearest
    assert rel.max().item() > 2.0**-6                     # it does round


def test_per_head_quantization_groups_heads_like_gqa():
    """num_descale_heads = num_heads_k: group g covers query heads g*r .. g*r + r - 1; each
    group's amax maps to 448; a group of zeros gets descale 1."""
    b, s, h, hk, d = 2, 16, 6, 3, 8
    x = torch.randn(b, s, h, d, generator=gen(2), dtype=F64)
    x = x * torch.arange(1, h + 1, dtype=F64).reshape(1, 1, h, 1)
    x[1, :, 2:4] = 0                                       # batch 1, group 1: zeros
    x8, desc = emu.quantize_per_head(x, hk)
    assert desc.shape == (b, hk) and desc.dtype == torch.float32
    for bi in range(b):
        for g in range(hk):
            amax = x[bi, :, 2 * g:2 * g + 2].abs().max().item()
            want = amax / 448.0 if amax > 0 else 1.0
            assert math.isclose(desc[bi, g].item(), want, rel_tol=1e-6), (bi, g)
            if amax > 0:
                assert x8[bi, :, 2 * g:2 * g + 2].float().abs().max().item() == 448.0
    assert torch.all(x8[1, :, 2:4].float() == 0)
    err = (emu.dequantize(x8, desc) - x).abs().max() / x.abs().max()
    assert err.item() <= 2.0**-4
    with pytest.raises(ValueError, match="num_descale_heads 4 must divide num_heads 6"):
        emu.quantize_per_head(x, 4)
    assert emu.quantize_per_head(x)[1].shape == (b, h)    # default: one per head


def test_per_block_beats_per_tensor_on_rows_of_small_magnitude():
    """Rows spanning five decades: one scale pushes the small rows into e4m3's subnormals,
    a scale per block of rows does not."""
    x = torch.randn(1, 256, 2, 64, generator=gen(3), dtype=F64)
    x = x * torch.logspace(-4, 1, 256, dtype=F64).reshape(1, 256, 1, 1)
    small = (slice(None), slice(0, 16))         # magnitudes 1e-4 .. 2e-4

    def rel(a):
        return ((a - x)[small].norm() / x[small].norm()).item()

    assert rel(emu.fake_quant_per_block(x, 64)) < 0.5 * rel(emu.fake_quant_per_tensor(x))
    with pytest.raises(ValueError, match="multiple of the block"):
        emu.fake_quant_per_block(x, 100)


# ------------------------------------------------------------------ Hadamard
@pytest.mark.parametrize("n", [64, 128, 256])
def test_hadamard_rotation_is_orthogonal_and_keeps_scores(n):
    signs = emu.hadamard_signs(12345, n)
    assert set(signs) == {1.0, -1.0} and len(signs) == n
    h = emu.sylvester_hadamard(n)
    assert torch.equal(h @ h.T, n * torch.eye(n, dtype=F64))
    m = emu.rotation(signs)
    assert torch.allclose(m @ m.T, torch.eye(n, dtype=F64), atol=1e-12)
    q, k = (torch.randn(2, 5, 3, n, generator=gen(4 + i), dtype=F64) for i in range(2))
    qr, kr = emu.rotate(q, signs), emu.rotate(k, signs)
    assert torch.allclose(torch.einsum("bshd,bthd->bhst", qr, kr),
                          torch.einsum("bshd,bthd->bhst", q, k), atol=1e-10)
    assert not torch.allclose(qr, q)
    with pytest.raises(ValueError, match="power of two"):
        emu.sylvester_hadamard(96)


def test_hadamard_signs_follow_splitmix64():
    """sign i is bit 0 of one splitmix64 step from the state seed + i. The generator's first
    outputs from state 0 are published (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
    0x06C45D188009454F): one step from the states 0, gamma and 2·gamma."""
    gamma = 0x9E3779B97F4A7C15
    first = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    assert [emu._splitmix64(n * gamma % 2**64) for n in range(3)] == first
    assert emu.hadamard_signs(0, 1) == [-1.0 if first[0] & 1 else 1.0]
    assert emu.hadamard_signs(gamma, 2)[0] == (-1.0 if first[1] & 1 else 1.0)
    assert emu.hadamard_signs(5, 8)[3] == emu.hadamard_signs(8, 1)[0]     # seed + i


def test_hadamard_signs_match_the_library():
    try:
        import fa3jit
        lib = ctypes.CDLL(fa3jit.library_path())
        fn = lib.fa3_hadamard_signs
    except (ImportError, OSError, AttributeError) as e:
        pytest.skip(f"no fa3_hadamard_signs to compare with: {e}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    for seed in (0, 1, 2**63 + 5):
        out = (ctypes.c_float * 128)()
        assert fn(seed, 128, out) == 0
        assert list(out) == emu.hadamard_signs(seed, 128), seed


def test_hadamard_lowers_the_per_tensor_error_on_outlier_inputs():
    g = gen(5)
    q, k, v = (torch.randn(1, 256, 2, 64, generator=g, dtype=F64) for _ in range(3))
    for x in (q, k, v):
        pick = torch.rand(x.shape, generator=g) < 0.01
        x[pick] *= 10
    ref = emu.attention_fp64(q, k, v)
    signs = emu.hadamard_signs(7, 64)
    pt = emu.fake_quant_per_tensor
    plain = emu.rmse(emu.attention_fp64(pt(q), pt(k), pt(v)), ref)
    rot = emu.rmse(emu.attention_fp64(pt(emu.rotate(q, signs)), pt(emu.rotate(k, signs)), pt(v)),
                   ref)
    assert rot < 0.8 * plain, (rot, plain)


# ------------------------------------------------------------------ attention reference
def test_attention_matches_sdpa_and_gqa_repeats_kv_heads():
    g = gen(6)
    q = torch.randn(2, 33, 6, 16, generator=g, dtype=F64)
    k, v = (torch.randn(2, 47, 2, 16, generator=g, dtype=F64) for _ in range(2))
    out, lse = emu.attention_fp64(q, k, v, softmax_scale=0.3, return_lse=True)
    kr, vr = (x.repeat_interleave(3, dim=2) for x in (k, v))
    sd = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), scale=0.3).transpose(1, 2)
    assert torch.allclose(out, sd, atol=1e-12)
    s = torch.einsum("bshd,bthd->bhst", q, kr) * 0.3
    assert torch.allclose(lse, torch.logsumexp(s, dim=-1), atol=1e-12)


def test_attention_mask_softcap_and_keyless_rows():
    g = gen(7)
    q, k, v = (torch.randn(1, 6, 2, 8, generator=g, dtype=F64) * 4 for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    mask[0] = False                                      # row 0 sees no key
    out, lse = emu.attention_fp64(q, k, v, mask=mask, softcap=5.0, return_lse=True)
    assert torch.all(out[:, 0] == 0) and torch.all(lse[:, :, 0] == float("-inf"))
    s = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(8)
    s = (5.0 * torch.tanh(s / 5.0)).masked_fill(~mask, float("-inf"))
    p = torch.softmax(s[:, :, 1:], dim=-1)
    want = torch.einsum("bhst,bthd->bshd", p, v)
    assert torch.allclose(out[:, 1:], want, atol=1e-12)


def test_e4m3_p_emulation_adds_a_small_error():
    g = gen(8)
    q, k, v = (torch.randn(1, 128, 2, 32, generator=g, dtype=F64) for _ in range(3))
    ref = emu.attention_fp64(q, k, v)
    lowp = emu.attention_fp64(q, k, v, p_offset=emu.P_OFFSET, out_dtype=torch.bfloat16)
    rel = ((lowp - ref).norm() / ref.norm()).item()
    assert 1e-4 < rel < 0.05, rel


def test_quantize_fp8_falls_back_to_torch_off_the_gpu():
    x = torch.randn(2, 16, 4, 64, generator=gen(9), dtype=F64)
    x8, d, used = emu.quantize_fp8(x, 2, hadamard=True, seed=3)
    assert used == "torch" and d.shape == (2, 2)
    want8, want_d = emu.quantize_per_head(emu.rotate(x, emu.hadamard_signs(3, 64)), 2)
    assert torch.equal(x8.float(), want8.float()) and torch.equal(d, want_d)
    with pytest.raises(ValueError, match="fa3jit.quantize_fp8 cannot be used"):
        emu.quantize_fp8(x, 2, prefer="fa3jit")
    with pytest.raises(ValueError, match="prefer 'gpu'"):
        emu.quantize_fp8(x, 2, prefer="gpu")
