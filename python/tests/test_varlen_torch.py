"""flash_attn_varlen_func and flash_attn_func's KV-cache path on the GPU against a torch fp64
reference written out per sequence (scores, softcap, bottom-right mask, softmax, PV), under
FlashAttention's rule max|out - ref| <= 2 * max|out_lowp - ref| + 1e-3 (out_lowp: the same
reference with P rounded to the inputs' dtype) and |lse - lse_ref| <= 1e-3; rows that see no key
exactly O = 0, LSE = -inf; O NaN-prefilled rows past cu_seqlens_q[-1] are not the library's.
E16: a varlen call captured in a CUDA graph follows new lengths written into the same device
arrays before a replay. Inputs random from a fresh seed each run (printed).

Skipped without torch or a CUDA device of compute capability 9.0.
"""
import os
import random
import zlib

import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402


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
SEED = int(os.environ.get("FA3JIT_TEST_SEED", random.randrange(1 << 30)))
print(f"test_varlen_torch seed {SEED} (FA3JIT_TEST_SEED to repeat)")


def attend(q, k, v, causal, window, softcap, scale, lowp=None):
    """One sequence: q (sq, H, d), k/v (sk, Hk, d) in fp64 -> (o (sq, H, dv), lse (H, sq)).
    lowp: round P to that dtype before PV (the error the dtype itself makes)."""
    sq, H, _ = q.shape
    sk, Hk, dv = v.shape
    if sq == 0:
        return q.new_zeros(0, H, dv), q.new_zeros(H, 0)
    if sk == 0:
        return q.new_zeros(sq, H, dv), q.new_full((H, sq), float("-inf"))
    g = H // Hk
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diag = i + sk - sq
    left, right = window
    if causal:
        right = 0
    seen = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        seen &= j >= diag - left
    if right >= 0:
        seen &= j <= diag + right
    s = s.masked_fill(~seen, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isinf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    l_ = p.sum(-1, keepdim=True)
    pw = p.to(lowp).double() if lowp is not None else p
    o = torch.einsum("hqk,khd->qhd", pw, vv) / torch.where(empty, torch.ones_like(l_), l_
                                                            ).permute(1, 0, 2)
    o = torch.where(empty.permute(1, 0, 2), torch.zeros_like(o), o)
    if lowp is not None:  # and O stored in that dtype, as the kernel stores it
        o = o.to(lowp).double()
    lse = torch.where(empty[..., 0], torch.full_like(m[..., 0], float("-inf")),
                      (m + torch.log(l_))[..., 0])
    return o, lse


def lengths(rng, batch, max_q, max_k, pattern):
    out = []
    for b in range(batch):
        lq, lk = rng.randint(1, max_q), rng.randint(1, max_k)
        if pattern == "long+tiny":
            lq, lk = (max_q, max_k) if b == 0 else (rng.randint(0, 3), rng.randint(0, 3))
        elif pattern == "with-empty":
            lq = 0 if b % 3 == 1 else lq
            lk = 0 if b % 4 == 2 else lk
        elif pattern == "short-k":
            lq, lk = rng.randint(max_q - max_q // 8, max_q), rng.randint(0, max_k // 16 + 1)
        out.append((lq, lk))
    return out


def make_case(rng, lens, H, Hk, d, dtype, page_size=0):
    """Packed q, K/V storage (packed rows, or shuffled pages with prefix sharing), the int32
    arrays, and per-sequence fp64 copies for the reference."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(rng.randrange(1 << 30))
    cu_q = [0]
    for lq, _ in lens:
        cu_q.append(cu_q[-1] + lq)
    q = torch.randn(cu_q[-1], H, d, device=dev, generator=g).to(dtype)
    seqs_k = [torch.randn(lk, Hk, d, device=dev, generator=g).to(dtype) for _, lk in lens]
    seqs_v = [torch.randn(lk, Hk, d, device=dev, generator=g).to(dtype) for _, lk in lens]
    case = dict(q=q, cu_q=torch.tensor(cu_q, dtype=torch.int32, device=dev),
                max_q=max(lq for lq, _ in lens), max_k=max(lk for _, lk in lens))
    if not page_size:
        cu_k = [0]
        for _, lk in lens:
            cu_k.append(cu_k[-1] + lk)
        case.update(k=torch.cat(seqs_k + [torch.zeros(1, Hk, d, device=dev, dtype=dtype)]),
                    v=torch.cat(seqs_v + [torch.zeros(1, Hk, d, device=dev, dtype=dtype)]),
                    cu_k=torch.tensor(cu_k, dtype=torch.int32, device=dev))
    else:
        need = [(lk + page_size - 1) // page_size for _, lk in lens]
        num_pages = sum(need) + 2
        perm = list(range(num_pages))
        rng.shuffle(perm)
        mpps = max(max(need), 1) + 1
        k = torch.zeros(num_pages, page_size, Hk, d, device=dev, dtype=dtype)
        v = torch.zeros_like(k)
        table = torch.zeros(len(lens), mpps, dtype=torch.int32)
        nxt = 0
        for b, (_, lk) in enumerate(lens):
            for p in range(need[b]):
                page = perm[nxt]
                nxt += 1
                rows = slice(p * page_size, min(lk, (p + 1) * page_size))
                n = rows.stop - rows.start
                k[page, :n], v[page, :n] = seqs_k[b][rows], seqs_v[b][rows]
                table[b, p] = page
        case.update(k=k, v=v, page_table=table.to(dev),
                    seqused_k=torch.tensor([lk for _, lk in lens], dtype=torch.int32, device=dev),
                    cu_k=torch.zeros(len(lens) + 1, dtype=torch.int32, device=dev))
    case["seqs"] = [(q[cu_q[b]:cu_q[b + 1]], seqs_k[b], seqs_v[b]) for b in range(len(lens))]
    return case


def check(case, out, lse, dtype, causal=False, window=(-1, -1), softcap=0.0):
    d = case["q"].shape[-1]
    scale = d ** -0.5
    err = err_lowp = err_lse = 0.0
    cu = case["cu_q"].tolist()
    for b, (q, k, v) in enumerate(case["seqs"]):
        args = (q.double(), k.double(), v.double(), causal, window, softcap, scale)
        ref, lse_ref = attend(*args)
        lowp, _ = attend(*args, lowp=dtype)
        got = out[cu[b]:cu[b + 1]].double()
        gl = lse[:, cu[b]:cu[b + 1]].double()
        empty = torch.isinf(lse_ref)
        assert torch.all(got.permute(1, 0, 2)[empty] == 0), f"sequence {b}: empty rows not 0"
        assert torch.all(torch.isinf(gl[empty]) & (gl[empty] < 0)), f"sequence {b}: LSE not -inf"
        if q.shape[0]:
            err = max(err, (got - ref).abs().nan_to_num(float("inf")).max().item())
            err_lowp = max(err_lowp, (lowp - ref).abs().max().item())
            if (~empty).any():
                err_lse = max(err_lse, (gl[~empty] - lse_ref[~empty]).abs()
                              .nan_to_num(float("inf")).max().item())
    print(f"  max|O-ref| {err:.3g}, max|lowp-ref| {err_lowp:.3g}, max|LSE-ref| {err_lse:.3g}")
    assert err <= 2 * err_lowp + 1e-3, (err, err_lowp)
    assert err_lse <= 1e-3, err_lse


@gpu
@pytest.mark.parametrize("pattern", ["random", "long+tiny", "with-empty", "short-k"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("page_size", [0, 1, 16, 64, 256, 100])
def test_varlen_against_fp64(pattern, causal, page_size):
    rng = random.Random(SEED ^ zlib.crc32(f"{pattern} {causal} {page_size}".encode()))
    lens = lengths(rng, 9, 400, 400, pattern)
    c = make_case(rng, lens, 8, 2, 128, torch.bfloat16, page_size)
    out, lse = fa3jit.flash_attn_varlen_func(
        c["q"], c["k"], c["v"], c["cu_q"], c["cu_k"], c["max_q"], c["max_k"],
        seqused_k=c.get("seqused_k"), page_table=c.get("page_table"), causal=causal,
        return_lse=True)
    check(c, out, lse, torch.bfloat16, causal=causal)


@gpu
@pytest.mark.parametrize("dtype,softcap,window,heads", [
    (torch.float16, 0.0, (-1, -1), (8, 8)), (torch.bfloat16, 30.0, (-1, -1), (6, 1)),
    (torch.bfloat16, 0.0, (64, 16), (8, 2)), (torch.float16, 0.0, (256, 0), (4, 2))])
def test_varlen_features(dtype, softcap, window, heads):
    rng = random.Random(SEED + 1)
    lens = lengths(rng, 6, 300, 500, "with-empty")
    c = make_case(rng, lens, heads[0], heads[1], 128, dtype, 16)
    out, lse = fa3jit.flash_attn_varlen_func(
        c["q"], c["k"], c["v"], c["cu_q"], None, c["max_q"], c["max_k"],
        seqused_k=c["seqused_k"], page_table=c["page_table"], window_size=window,
        softcap=softcap, return_lse=True)
    check(c, out, lse, dtype, window=window, softcap=softcap)


@gpu
def test_kvcache_decode_flash_attn_func():
    """flash_attn_func(page_table=..., seqused_k=...): decode with some empty caches (E21)."""
    rng = random.Random(SEED + 2)
    lens = [(1, rng.choice([0, 1, 17, 300, 1000])) for _ in range(12)]
    c = make_case(rng, lens, 8, 2, 128, torch.bfloat16, 64)
    q = c["q"].reshape(12, 1, 8, 128)
    out, lse = fa3jit.flash_attn_func(q, c["k"], c["v"], page_table=c["page_table"],
                                      seqused_k=c["seqused_k"], causal=True, return_lse=True)
    assert out.shape == (12, 1, 8, 128) and lse.shape == (12, 8, 1)
    check(c, out.reshape(12, 8, 128), lse.permute(1, 0, 2).reshape(8, 12), torch.bfloat16,
          causal=True)


@gpu
def test_e16_graph_replay_follows_new_lengths():
    rng = random.Random(SEED + 3)
    lens1 = [(50, 70), (0, 10), (100, 100)]
    lens2 = [(10, 5), (90, 150), (50, 0)]             # within the same q/k rows
    c1 = make_case(rng, lens1, 8, 2, 128, torch.bfloat16)
    total_q, total_k = c1["q"].shape[0], c1["k"].shape[0]
    q, k, v = c1["q"], c1["k"], c1["v"]
    cu_q, cu_k = c1["cu_q"].clone(), c1["cu_k"].clone()
    fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, total_q, total_k)  # compile, warm up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        res = fa3jit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, total_q, total_k,
                                            return_lse=True)
    for lens in (lens1, lens2):
        cq, ck = [0], [0]
        for lq, lk in lens:
            cq.append(cq[-1] + lq)
            ck.append(ck[-1] + lk)
        assert cq[-1] <= total_q and ck[-1] <= total_k
        cu_q.copy_(torch.tensor(cq, dtype=torch.int32))
        cu_k.copy_(torch.tensor(ck, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        seqs = [(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]])
                for b in range(len(lens))]
        check(dict(q=q, cu_q=torch.tensor(cq), seqs=seqs), res[0], res[1], torch.bfloat16)
