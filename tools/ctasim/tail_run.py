"""A dense non-causal call's tail split (runtime/tail.c) on the CPU emulator, end to end: the
forward kernel runs tiles [0, F) (total_tiles = F), then the same config's split_kv kernel the
T = tiles - F tail tiles as T·k pieces with tile_base = F, partial_row_base = r0 and
partial_rows = r1 - r0 (fwd.c's tail_wanted sets them so), then the combine's merge (numpy, with
the combine kernel's row mapping: output row = row_base + partial row; the kernel itself is
test_combine_ptx's). O and LSE NaN-prefilled, the partials NaN-prefilled and exactly sized
(ctasim raises on any access outside an allocation); checked: the forward kernel writes exactly
the rows below r0, the split kernel every partial and no O, the result against fp64.
F defaults to the whole rounds of --grid, k to 3 (the runtime's choice is test_schedule's).
usage: tail_run.py [--gen build/fa3-gen] [--hd 64] [--batch 2 --heads 3 --sq 300 --sk 300]
                   [--grid 4] [--F N] [--k K] [--fp16] [--no-otma] [--seed S]
"""
import argparse
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ctasim as cs  # noqa: E402
import run as R  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", default=os.path.join(R.ROOT, "build", "fa3-gen"))
    ap.add_argument("--hd", type=int, default=64)
    ap.add_argument("--hdv", type=int, default=0)
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--heads-k", type=int, default=0)
    ap.add_argument("--sq", type=int, default=300)
    ap.add_argument("--sk", type=int, default=300)
    ap.add_argument("--grid", type=int, default=4)
    ap.add_argument("--F", type=int, default=-1, help="the forward kernel's tiles (default: whole rounds)")
    ap.add_argument("--k", type=int, default=0, help="the splits (default 3)")
    ap.add_argument("--plant", action="store_true",
                    help="a planted defect: tile_base one tile short (the run must fail)")
    ap.add_argument("--no-otma", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--knobs", default="", help="FA3JIT_PLAN_DEBUG for both kernels")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    cfg = ["--head-dim", str(a.hd)] + (["--dtype", "fp16"] if a.fp16 else [])
    if a.hdv:
        cfg += ["--head-dim-v", str(a.hdv)]
    ptx_d, plan_d = R.gen(a.gen, cfg, a.knobs)
    ptx_s, plan_s = R.gen(a.gen, cfg + ["--split-kv"], a.knobs)
    assert (plan_d["block_m"], plan_d["block_n"]) == (plan_s["block_m"], plan_s["block_n"])
    prog_d, lab_d = cs.parse(ptx_d)
    prog_s, lab_s = cs.parse(ptx_s)
    bm, bn = plan_d["block_m"], plan_d["block_n"]
    hd = a.hd
    hdv = a.hdv or a.hd
    B, H, SQ, SK = a.batch, a.heads, a.sq, a.sk
    HK = a.heads_k or H
    es = 2
    nmb = (SQ + bm - 1) // bm
    tiles = nmb * H * B
    kb = (SK + bn - 1) // bn
    F = a.F if a.F >= 0 else tiles // a.grid * a.grid
    T, k = tiles - F, a.k or 3
    if F == tiles or F == 0:
        raise SystemExit("no part round: tiles %d on a grid of %d" % (tiles, a.grid))
    r0 = F // nmb * SQ + F % nmb * bm
    r1 = B * H * SQ
    rows = r1 - r0
    print("tiles %d (nmb %d) grid %d: F %d T %d k %d, key blocks %d; rows [%d, %d)"
          % (tiles, nmb, a.grid, F, T, k, kb, r0, r1))

    q = R.bf16_round(rng.standard_normal((B, SQ, H, hd)), a.fp16)
    kk = R.bf16_round(rng.standard_normal((B, SK, HK, hd)), a.fp16)
    v = R.bf16_round(rng.standard_normal((B, SK, HK, hdv)), a.fp16)
    mem = cs.Memory()
    gq = mem.alloc(q.size * 2, R.to_bits(q, a.fp16))
    gk = mem.alloc(kk.size * 2, R.to_bits(kk, a.fp16))
    gv = mem.alloc(v.size * 2, R.to_bits(v, a.fp16))
    nan16 = 0x7FC0 if not a.fp16 else 0x7E00
    onan = np.full(B * SQ * H * hdv, nan16, np.uint16)
    go = mem.alloc(onan.size * 2, onan)
    glse = mem.alloc(B * H * SQ * 4, np.full(B * H * SQ, np.nan, np.float32))

    def tmap(g, rows_total, heads, d, box_rows):
        return cs.TensorMap(g, es, [d, rows_total, heads, B],
                            [heads * d * es, d * es, rows_total * heads * d * es],
                            [64, box_rows, 1, 1])

    O = R.abi_offsets()
    P = bytearray(832)

    def put(P, name, fmt, val):
        struct.pack_into("<" + fmt, P, O[name], val)

    scale = 1.0 / np.sqrt(hd)
    put(P, "O_PTR", "Q", go)
    put(P, "LSE_PTR", "Q", glse)
    put(P, "O_BATCH_STRIDE", "q", SQ * H * hdv)
    put(P, "O_ROW_STRIDE", "q", H * hdv)
    put(P, "O_HEAD_STRIDE", "q", hdv)
    put(P, "SEQLEN_Q", "i", SQ)
    put(P, "SEQLEN_K", "i", SK)
    put(P, "NUM_HEADS", "i", H)
    put(P, "HEADS_PER_KV", "i", H // HK)
    put(P, "NUM_M_BLOCKS", "i", nmb)
    put(P, "WINDOW_LEFT", "i", -1)
    put(P, "WINDOW_RIGHT", "i", -1)
    put(P, "SCORE_MUL", "f", 1.0)
    put(P, "SCALE_LOG2", "f", float(np.float32(scale * np.log2(np.e))))
    put(P, "LSE_MUL", "f", float(np.float32(scale)))
    put(P, "NUM_HEADS_K", "i", HK)
    put(P, "O_TMA", "I", 0 if a.no_otma else 1)
    tm = {O["TMAP_Q"]: tmap(gq, SQ, H, hd, bm), O["TMAP_K"]: tmap(gk, SK, HK, hd, bn),
          O["TMAP_V"]: tmap(gv, SK, HK, hdv, bn), O["TMAP_O"]: tmap(go, SQ, H, hdv, 64)}

    # 1. the dense kernel over tiles [0, F)
    Pd = bytearray(P)
    put(Pd, "TOTAL_TILES", "I", F)
    put(Pd, "SECTION_HB", "I", max(F // nmb, 1))
    divs = {"NMB": nmb, "HEADS": H, "HPKV": H // HK, "SEC_TILES": nmb, "SEC_HB": 1,
            "LAST_PAIRS": 1, "SPLITS": 1, "PAGE_SIZE": 1}  # (no masked order here)
    R.put_divs(Pd, O["DIV"], divs)
    # only the bytes the dense kernel declares (up to tmap_o, or the whole block under
    # fast_div 2, the planner's default): the rest reads as zero, as a launch would leave it
    declared = int(re.search(r"fa3_params\[(\d+)\]", ptx_d).group(1))
    dense = bytes(Pd[:declared]) + bytes(len(Pd) - declared)
    gd = min(a.grid, F)
    for cta in range(gd):
        c = cs.CTA(prog_d, lab_d, mem, dense, tm, cta, gd,
                   plan_d["threads"], plan_d["smem"], seed=a.seed + cta)
        c.run()
    o_after = R.from_bits(mem.region(go).view(np.uint16).copy(), a.fp16).reshape(B, SQ, H, hdv)
    lse_after = mem.region(glse).view(np.float32).copy().reshape(B, H, SQ)
    # rows as (b·H + h)·SQ + i
    o_rows = np.transpose(o_after, (0, 2, 1, 3)).reshape(B * H * SQ, hdv)
    l_rows = lse_after.reshape(-1)
    bad = 0
    if np.isnan(o_rows[:r0]).any() or np.isnan(l_rows[:r0]).any():
        print("  dense kernel left rows below r0 unwritten: %d" % int(np.isnan(o_rows[:r0]).any(1).sum()))
        bad += 1
    if not np.isnan(o_rows[r0:]).all() or not np.isnan(l_rows[r0:]).all():
        print("  dense kernel wrote tail rows: %d" % int((~np.isnan(o_rows[r0:])).any(1).sum()))
        bad += 1

    # 2. the split kernel over the tail pieces
    gop = mem.alloc(k * rows * hdv * 4, np.full(k * rows * hdv, np.nan, np.float32))
    glp = mem.alloc(k * rows * 4, np.full(k * rows, np.nan, np.float32))
    Ps = bytearray(P)
    put(Ps, "O_PARTIAL", "Q", gop)
    put(Ps, "LSE_PARTIAL", "Q", glp)
    put(Ps, "NUM_SPLITS", "i", k)
    put(Ps, "PARTIAL_ROWS", "i", rows)
    put(Ps, "TILE_BASE", "I", F - 1 if a.plant else F)
    put(Ps, "PARTIAL_ROW_BASE", "I", r0)
    put(Ps, "TOTAL_TILES", "I", T * k)
    put(Ps, "SECTION_HB", "I", T * k // k // nmb)  # fwd.c: may be 0
    R.put_divs(Ps, O["DIV"], dict(divs, SPLITS=k))
    gs = min(a.grid, T * k)
    for cta in range(gs):
        c = cs.CTA(prog_s, lab_s, mem, bytes(Ps), tm, cta, gs, plan_s["threads"], plan_s["smem"],
                   seed=a.seed + 100 + cta)
        c.run()
    op = mem.region(gop).view(np.float32).reshape(k, rows, hdv).astype(np.float64)
    lp = mem.region(glp).view(np.float32).reshape(k, rows).astype(np.float64)
    if np.isnan(lp).any() or np.isnan(op).any():
        print("  partials left unwritten: LSE %d, O rows %d" % (int(np.isnan(lp).sum()),
                                                              int(np.isnan(op).any(2).sum())))
        bad += 1
    # the dense region untouched by the split kernel
    o2 = R.from_bits(mem.region(go).view(np.uint16).copy(), a.fp16)
    if not np.array_equal(np.nan_to_num(o2, nan=7.0),
                          np.nan_to_num(o_after.reshape(-1), nan=7.0)):
        print("  split kernel wrote O")
        bad += 1
    # 3. the combine (row_base = r0)
    with np.errstate(all="ignore"):
        mx = lp.max(axis=0)
        w = np.where(np.isfinite(lp), np.exp(lp - np.where(np.isfinite(mx), mx, 0)), 0.0)
        tot = w.sum(axis=0)
        lse_c = np.where(tot > 0, np.log(tot) + np.where(np.isfinite(mx), mx, 0), -np.inf)
        comb = (w[..., None] * op).sum(axis=0) / np.where(tot > 0, tot, 1)[..., None]
    o_rows = o_rows.astype(np.float64)
    l_rows = l_rows.astype(np.float64)
    o_rows[r0:] = R.bf16_round(comb, a.fp16)
    l_rows[r0:] = lse_c
    o = o_rows.reshape(B, H, SQ, hdv).transpose(0, 2, 1, 3)
    lse = l_rows.reshape(B, H, SQ)
    ro, rlse = R.reference(q, kk, v, scale, -1, -1)
    err = np.abs(o - ro)
    tol = 2.0 ** -6 * np.maximum(np.abs(ro), 0.25) + 1e-3
    nbad_o = int((err > tol).sum() + np.isnan(o).sum())
    nbad_l = int((np.abs(lse - rlse) > 1e-3 * np.maximum(1, np.abs(rlse))).sum() + np.isnan(lse).sum())
    print("  O max err %.3g (%d bad of %d), LSE %d bad; tail rows O max err %.3g"
          % (float(np.nanmax(err)), nbad_o, o.size, nbad_l,
             float(np.nanmax(np.abs(o_rows[r0:] - np.transpose(ro, (0, 2, 1, 3)).reshape(-1, hdv)[r0:])))))
    if nbad_o or nbad_l:
        bad += 1
    print("PASS" if not bad else "FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
