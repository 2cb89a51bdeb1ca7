"""flash_attn_with_kvcache on the GPU: the public edge cases of the KV-cache call
(shared/cases/attention-edge-cases.md) against test_varlen_torch.py's fp64 torch reference and
tolerance rule, on fresh random inputs each run (seed printed; FA3JIT_TEST_SEED repeats it).
  E22  k/v of 1 and 5 rows appended at cache_seqlens, then attention: the whole cache equals the
       old cache plus the new rows, bit for bit (every other position untouched, entries past the
       batch too), and out / LSE equal attention over each sequence's cache_seqlens + seqlen_new
       keys of the updated cache (causal bottom-right and not); contiguous caches (plain, with a
       shuffled cache_batch_idx, heads-major strides read as pages), paged caches over a shuffled
       page table (page sizes 16, 64, 100);
  E21  some cache_seqlens 0 (without new rows: those rows O = 0, LSE = -inf; with new rows they
       attend to the new rows only); cache_seqlens as an int;
  E16  the call captured in a CUDA graph, then new cache_seqlens (and cache_batch_idx, new rows,
       q) written into the same tensors before each replay: the cache and the outputs follow.
Skipped without torch or a CUDA device of compute capability 9.0.
"""
import random
import zlib

import pytest

torch = pytest.importorskip("torch")

import fa3jit  # noqa: E402
from test_varlen_torch import SEED, _REASON, check  # noqa: E402  (the reference and its rule)

gpu = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
H, HK, D = 8, 2, 128


def make_cache(rng, kind, batch, capacity, dtype, hd=D, heads_k=HK):
    """Random caches of one kind: (k_cache, v_cache, layout) where layout says how sequence b's
    position j is stored (layout["where"](b, j) -> index into the cache tensor)."""
    g = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    lay = dict(kind=kind, bidx=None, page_table=None)
    if kind.startswith("paged"):
        ps = int(kind.split()[1])
        mpps = (capacity + ps - 1) // ps
        num_pages = batch * mpps + 3
        kc, vc = rnd(num_pages, ps, heads_k, hd), rnd(num_pages, ps, heads_k, hd)
        perm = list(range(num_pages))
        rng.shuffle(perm)
        table = torch.tensor(perm[:batch * mpps], dtype=torch.int32).reshape(batch, mpps)
        lay.update(page_table=table.cuda(), capacity=mpps * ps,
                   where=lambda b, j: (int(table[b, j // ps]), j % ps))
    else:
        entries = batch + 2
        if kind == "heads-major":       # (entries, heads, seqlen, dim) seen as (.., seqlen, ..)
            kc = rnd(entries, heads_k, capacity, hd).transpose(1, 2)
            vc = rnd(entries, heads_k, capacity, hd).transpose(1, 2)
        else:
            kc, vc = rnd(entries, capacity, heads_k, hd), rnd(entries, capacity, heads_k, hd)
        bidx = None
        if kind == "cache_batch_idx":
            perm = list(range(entries))
            rng.shuffle(perm)
            bidx = perm[:batch]
            lay["bidx"] = torch.tensor(bidx, dtype=torch.int32, device="cuda")
        lay.update(capacity=capacity,
                   where=lambda b, j: ((bidx[b] if bidx is not None else b), j))
    return kc, vc, lay


def lengths(rng, batch, capacity, seqlen_new, zeros=(0,)):
    top = capacity - seqlen_new
    lens = [rng.randint(0, top) for _ in range(batch)]
    for b in zeros:
        lens[b] = 0
    lens[-1] = top                                     # the last one fills its cache exactly
    return lens


def appended(cache, new, lens, lay):
    """The cache as the append must leave it: cache plus new's rows at lens[b] + i."""
    want = cache.clone()
    for b in range(len(lens)):
        for i in range(0 if new is None else new.shape[1]):
            want[lay["where"](b, lens[b] + i)] = new[b, i]
    return want


def seq_keys(cache, b, n, lay):
    """Sequence b's first n keys of cache, (n, heads_k, dim)."""
    if n == 0:
        return cache.new_zeros(0, *cache.shape[2:])
    if lay["page_table"] is None:
        return cache[lay["where"](b, 0)[0], :n]
    ps = cache.shape[1]
    pages = [cache[lay["where"](b, j)[0]] for j in range(0, n, ps)]
    return torch.cat(pages)[:n]


def call(q, kc, vc, lay, k, v, lens, causal, **kw):
    return fa3jit.flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=lens,
                                          page_table=lay["page_table"],
                                          cache_batch_idx=lay["bidx"], causal=causal,
                                          return_softmax_lse=True, **kw)


def judge(q, out, lse, kc, vc, lens, seqlen_new, lay, dtype, causal, what):
    """out / lse against the fp64 reference over the updated caches' keys (check())."""
    batch, sq = q.shape[:2]
    assert out.shape == (batch, sq, H, vc.shape[-1]) and lse.shape == (batch, H, sq), what
    seqs = [(q[b], seq_keys(kc, b, lens[b] + seqlen_new, lay),
             seq_keys(vc, b, lens[b] + seqlen_new, lay)) for b in range(batch)]
    case = dict(q=q.reshape(batch * sq, H, -1), cu_q=torch.arange(batch + 1) * sq, seqs=seqs)
    print(f"  {what}")
    check(case, out.reshape(batch * sq, H, -1), lse.permute(1, 0, 2).reshape(H, batch * sq),
          dtype, causal=causal)


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


@gpu
@pytest.mark.parametrize("kind", ["contiguous", "cache_batch_idx", "heads-major", "paged 16",
                                  "paged 64", "paged 100"])
@pytest.mark.parametrize("seqlen_new", [1, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_e22_append_then_attention(kind, seqlen_new, causal):
    rng = random.Random(SEED ^ zlib.crc32(f"E22 {kind} {seqlen_new} {causal}".encode()))
    batch, dtype = 6, torch.bfloat16
    kc, vc, lay = make_cache(rng, kind, batch, 320, dtype)
    lens = lengths(rng, batch, lay["capacity"], seqlen_new)
    g = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    q = torch.randn(batch, seqlen_new, H, D, device="cuda", generator=g).to(dtype)
    k = torch.randn(batch, seqlen_new, HK, D, device="cuda", generator=g).to(dtype)
    v = torch.randn(batch, seqlen_new, HK, D, device="cuda", generator=g).to(dtype)
    want_k, want_v = appended(kc, k, lens, lay), appended(vc, v, lens, lay)
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = call(q, kc, vc, lay, k, v, lens_t, causal)
    torch.cuda.synchronize()
    assert same_bits(kc, want_k), "k_cache is not the old cache plus the new rows"
    assert same_bits(vc, want_v), "v_cache is not the old cache plus the new rows"
    assert lens_t.tolist() == lens, "cache_seqlens changed"
    judge(q, out, lse, kc, vc, lens, seqlen_new, lay, dtype, causal,
          f"E22 {kind} seqlen_new {seqlen_new} causal {causal}")


@gpu
@pytest.mark.parametrize("kind", ["contiguous", "cache_batch_idx", "paged 64"])
def test_e21_empty_caches(kind):
    rng = random.Random(SEED ^ zlib.crc32(f"E21 {kind}".encode()))
    batch, dtype = 7, torch.float16
    kc, vc, lay = make_cache(rng, kind, batch, 200, dtype)
    lens = lengths(rng, batch, lay["capacity"], 0, zeros=(0, 3, 4))
    g = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    q = torch.randn(batch, 1, H, D, device="cuda", generator=g).to(dtype)
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    old_k = kc.clone()
    out, lse = call(q, kc, vc, lay, None, None, lens_t, True)
    torch.cuda.synchronize()
    assert same_bits(kc, old_k), "a call without new rows changed the cache"
    for b in (0, 3, 4):
        assert torch.all(out[b] == 0) and torch.all(torch.isneginf(lse[b])), f"sequence {b}"
    judge(q, out, lse, kc, vc, lens, 0, lay, dtype, True, f"E21 {kind} (no new rows)")
    # new rows into empty caches: they attend to the new rows only; cache_seqlens as an int 0
    k = torch.randn(batch, 3, HK, D, device="cuda", generator=g).to(dtype)
    v = torch.randn(batch, 3, HK, D, device="cuda", generator=g).to(dtype)
    want_k = appended(kc, k, [0] * batch, lay)
    q3 = torch.randn(batch, 3, H, D, device="cuda", generator=g).to(dtype)
    out, lse = call(q3, kc, vc, lay, k, v, 0, True)
    torch.cuda.synchronize()
    assert same_bits(kc, want_k)
    judge(q3, out, lse, kc, vc, [0] * batch, 3, lay, dtype, True, f"E21 {kind} int 0 + 3 rows")


@gpu
def test_mqa_hd64_softcap_window():
    """6 query heads over 1 kv head, head_dim 64, softcap 30, window (64, 0), paged 32."""
    rng = random.Random(SEED + 21)
    batch, dtype, hd, h, hk, n = 4, torch.bfloat16, 64, 6, 1, 2
    kc, vc, lay = make_cache(rng, "paged 32", batch, 500, dtype, hd=hd, heads_k=hk)
    lens = lengths(rng, batch, lay["capacity"], n)
    g = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    q = torch.randn(batch, n, h, hd, device="cuda", generator=g).to(dtype)
    k = torch.randn(batch, n, hk, hd, device="cuda", generator=g).to(dtype)
    v = torch.randn(batch, n, hk, hd, device="cuda", generator=g).to(dtype)
    want_k = appended(kc, k, lens, lay)
    lens_t = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = call(q, kc, vc, lay, k, v, lens_t, False, softcap=30.0, window_size=(64, 0))
    torch.cuda.synchronize()
    assert same_bits(kc, want_k)
    seqs = [(q[b], seq_keys(kc, b, lens[b] + n, lay), seq_keys(vc, b, lens[b] + n, lay))
            for b in range(batch)]
    case = dict(q=q.reshape(batch * n, h, hd), cu_q=torch.arange(batch + 1) * n, seqs=seqs)
    check(case, out.reshape(batch * n, h, hd), lse.permute(1, 0, 2).reshape(h, batch * n),
          dtype, window=(64, 0), softcap=30.0)


@gpu
@pytest.mark.parametrize("kind", ["contiguous", "cache_batch_idx", "paged 64"])
@pytest.mark.parametrize("splits", [0, 4], ids=["splits0", "splits4"])
def test_e16_graph_replay_follows_new_values(kind, splits):
    """num_splits 4: split-KV under capture (the workspace allocated stream-ordered in the
    graph), the combine following the new lengths too."""
    rng = random.Random(SEED ^ zlib.crc32(f"E16 {kind}".encode()))
    batch, dtype, n = 5, torch.bfloat16, 2
    kc, vc, lay = make_cache(rng, kind, batch, 256, dtype)
    g = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    q = torch.zeros(batch, n, H, D, device="cuda", dtype=dtype)
    k = torch.zeros(batch, n, HK, D, device="cuda", dtype=dtype)
    v = torch.zeros_like(k)
    lens_t = torch.zeros(batch, dtype=torch.int32, device="cuda")
    call(q, kc, vc, lay, k, v, lens_t, True, num_splits=splits)  # compile, warm up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call(q, kc, vc, lay, k, v, lens_t, True, num_splits=splits)
    cap = lay["capacity"]
    steps = [lengths(rng, batch, cap, n, zeros=(1,)), None, lengths(rng, batch, cap, n)]
    for step, lens in enumerate(steps):
        if lens is None:                                # decode on: each sequence n rows later
            lens = [x + n if x + 2 * n <= cap else 0 for x in prev]
        if lay["bidx"] is not None and step == 2:       # other cache entries for the batch
            perm = list(range(kc.shape[0]))
            rng.shuffle(perm)
            lay["bidx"].copy_(torch.tensor(perm[:batch], dtype=torch.int32))
            bl = perm[:batch]
            lay["where"] = lambda b, j: (bl[b], j)
        lens_t.copy_(torch.tensor(lens, dtype=torch.int32))
        q.copy_(torch.randn(q.shape, device="cuda", generator=g).to(dtype))
        k.copy_(torch.randn(k.shape, device="cuda", generator=g).to(dtype))
        v.copy_(torch.randn(v.shape, device="cuda", generator=g).to(dtype))
        want_k, want_v = appended(kc, k, lens, lay), appended(vc, v, lens, lay)
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(kc, want_k), f"replay {step}: k_cache"
        assert same_bits(vc, want_v), f"replay {step}: v_cache"
        judge(q, out, lse, kc, vc, lens, n, lay, dtype, True, f"E16 {kind} replay {step} {lens}")
        prev = lens


@gpu
def test_refused_call_appends_nothing():
    """A call fa3_fwd refuses on the host (pack_gqa=True with 6 query heads per kv head, which
    does not divide the 128-row tile) raises before the append: the cache is unchanged."""
    rng = random.Random(SEED + 31)
    batch, dtype = 2, torch.bfloat16
    kc, vc, lay = make_cache(rng, "paged 16", batch, 64, dtype, heads_k=1)
    q = torch.randn(batch, 1, 6, D, device="cuda", dtype=dtype)
    k = torch.randn(batch, 1, 1, D, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    before_k, before_v = kc.clone(), vc.clone()
    lens = torch.tensor([3, 7], dtype=torch.int32, device="cuda")
    with pytest.raises(fa3jit.Fa3Error, match="must divide the kernel's block_m"):
        call(q, kc, vc, lay, k, v, lens, False, pack_gqa=True, num_splits=1)
    torch.cuda.synchronize()
    assert same_bits(kc, before_k) and same_bits(vc, before_v), "the refused call appended"
