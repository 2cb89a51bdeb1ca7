"""fa3jit's forward kernel on the CPU emulator (ctasim.py), against an fp64 reference.

The kernel's PTX comes from fa3-gen (--emit-ptx --named-registers, FA3JIT_PLAN_DEBUG for knob
variants); the parameter block is built here as runtime/fwd.c builds it for a dense bf16/fp16
call, or an e4m3 one (--e4m3: UINT8 maps with 128-byte boxes, fp32 descales per (batch, kv
head), O in bf16 or --out-fp16) (tensor maps as this emulator's records); the grid is kept small
(--grid) so that each CTA walks several tiles of the persistent loop. Every CTA of the grid
runs, then O (filled with NaN before) and LSE are compared with the reference on fresh random
inputs (e4m3: standard normal values rounded to e4m3, descales 0.5..2; the reference on the
dequantized values q·descale_q etc.).

usage: run.py [--gen FA3GEN] [--knobs K] [--hd 64] [--causal|--local WL,WR] [--batch 1]
              [--heads 2] [--sq 256] [--sk 256] [--block-m N] [--grid 2] [--no-otma] [--seed S]
              [--fp16 | --e4m3 [--out-fp16] [--no-descales]]
exit status 0 when every element is within tolerance, 1 otherwise.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ctasim as cs  # noqa: E402
import ptxsim as ps  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def abi_offsets():
    offs = {}
    for ln in open(os.path.join(ROOT, "src", "kernel_abi.h")):
        if ln.startswith("#define FA3P_OFF_"):
            _, name, val = ln.split()[:3]
            offs[name[len("FA3P_OFF_"):]] = int(val)
    return offs


def div_slots():
    """fa3_div_slot's names in order (kernel_abi.h), up to FA3_DIV_SLOTS."""
    txt = open(os.path.join(ROOT, "src", "kernel_abi.h")).read()
    body = txt[txt.index("typedef enum fa3_div_slot"):txt.index("FA3_DIV_SLOTS,")]
    return re.findall(r"^\s+FA3_DIV_(\w+)", body, re.M)


def divmagic(d):
    """src/divmagic.h's (mul, s1, s2) of divisor d (0 taken as 1)."""
    d = max(d, 1)
    l = 0
    while l < 32 and (1 << l) < d:
        l += 1
    return ((((1 << l) - d) << 32) // d + 1) & 0xFFFFFFFF, min(l, 1), max(l - 1, 0)


def put_divs(P, off, vals):
    """fa3_kernel_params.div as runtime/fwd.c fa3_kernel_params_divs fills it: vals by slot."""
    for i, name in enumerate(div_slots()):
        struct.pack_into("<III", P, off + 12 * i, *divmagic(vals[name]))


def gen(fa3gen, args, knobs):
    env = dict(os.environ)
    env.pop("FA3JIT_PLAN_DEBUG", None)
    if knobs:
        env["FA3JIT_PLAN_DEBUG"] = knobs
    ptx = subprocess.run([fa3gen, "--emit-ptx", "--named-registers"] + args, env=env, check=True,
                         capture_output=True, text=True).stdout
    info = subprocess.run([fa3gen, "--info", "--no-cache"] + args, env=env, check=True,
                          capture_output=True, text=True).stdout
    kv = {}
    for ln in info.splitlines():
        k, _, v = ln.partition(":")
        kv[k.strip()] = v.strip()
    tp = kv["tile plan"].replace(",", "").split()
    plan = {"block_m": int(tp[1]), "block_n": int(tp[3]), "threads": int(kv["threads"]),
            "smem": int(kv["shared memory"].split()[0])}
    return ptx, plan


def bf16_round(x, fp16):
    if fp16:
        return x.astype(np.float16).astype(np.float32)
    return ps.from_bf16(ps.to_bf16(x.astype(np.float32)))


def to_bits(x, fp16):
    if fp16:
        return x.astype(np.float16).view(np.uint16)
    return ps.to_bf16(x.astype(np.float32)).astype(np.uint16)


def from_bits(h, fp16):
    if fp16:
        return h.view(np.float16).astype(np.float32)
    return ps.from_bf16(h.astype(np.uint32))


def reference(q, k, v, scale, wl, wr, sig=None):
    """O and LSE in fp64: (batch, sq, heads, d) inputs; key j visible to row i when
    i + sk - sq - wl <= j <= i + sk - sq + wr (a negative window: unlimited on that side).
    sig (an array shaped as O, or None): set to sqrt(sum_j w_j^2 v_j^2) per element, w_j the
    row's softmax weights (the scale of O's error from independent relative errors of P)."""
    b, sq, h, _ = q.shape
    sk = k.shape[1]
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    d = i + sk - sq
    vis = np.ones((sq, sk), bool)
    if wr >= 0:
        vis &= j <= d + wr
    if wl >= 0:
        vis &= j >= d - wl
    o = np.zeros((b, sq, h, v.shape[3]))
    lse = np.full((b, h, sq), -np.inf)
    if sk == 0:  # no keys (a varlen sequence of none): O 0, LSE -inf
        if sig is not None:
            sig[...] = 0
        return o, lse
    for bb in range(b):
        for hh in range(h):
            kh = hh * k.shape[2] // h  # GQA: query head hh reads kv head hh // (h / h_k)
            s = q[bb, :, hh, :].astype(np.float64) @ k[bb, :, kh, :].astype(np.float64).T * scale
            s = np.where(vis, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            ok = np.isfinite(m[:, 0])
            p = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
            l = p.sum(axis=1)
            o[bb, ok, hh, :] = (p[ok] / l[ok, None]) @ v[bb, :, kh, :].astype(np.float64)
            lse[bb, hh, ok] = np.log(l[ok]) + m[ok, 0]
            if sig is not None:
                w2 = (p[ok] / l[ok, None]) ** 2
                sig[bb, ok, hh, :] = np.sqrt(w2 @ v[bb, :, kh, :].astype(np.float64) ** 2)
    return o, lse


PLANTS = {
    # the loop's S wait removed: the softmax reads S before its QK completes (deferred wgmma)
    "no_s_wait": ("wgmma.wait_group.sync.aligned 1;", "", 1),
    # mask_branch: the loop body's mask skipped on every block
    "mask_branch_never": None,
    # the epilogue's wait for its previous TMA store to have read the staging, removed
    "no_store_read_wait": None,
    # the consumers' mbarrier retry branches removed (a try_wait that says no is taken as yes)
    "no_wait_retry": None,
    # the tile's O accumulator left unzeroed in its first register (only --poison shows it when
    # each CTA runs one tile: otherwise the register reads 0)
    "no_o_init": None,
    # e4m3: the tile's descales read at kv head 0 of its batch (b·num_heads_k, not + kv head):
    # wrong wherever num_heads_k > 1 (descales differ per kv head)
    "descale_kvhead0": None,
    # e4m3: V's transpose writes its output words 0 and 2 (prmt selector 0x5410) with their
    # halves exchanged: logical keys 4q+{0,1} and 4q+{2,3} of a word swap places in half of the
    # transposed V's rows (O columns), so P meets the wrong V rows there
    "vt_key_swap": None,
    # first_in_loop: the first block's mask decision (need = true in its own QK path) removed, so
    # it takes the need of the loop top (a key tail or diagonal left unmasked)
    "first_unmasked": None,
    # first_in_loop: the body's V release no longer skips the tile's first pass (an arrive on a
    # V stage the consumer never waited for)
    "first_v_release": None,
}


PLANT_MISSING = 3  # exit status of a run whose planted defect found nothing to change


def plant_missing(msg):
    """A plant that cannot be applied: its own exit status, so that tests/ctasim.sh does not take
    it for a caught defect."""
    print(msg, file=sys.stderr)
    sys.exit(PLANT_MISSING)


def plant(ptx, name):
    """A defect put into the PTX, to show the emulator's check fails on it."""
    lines = ptx.split("\n")
    if name == "no_s_wait":
        i = next((i for i, l in enumerate(lines) if "wgmma.wait_group.sync.aligned 1;" in l), None)
        if i is None:
            plant_missing("no S wait to plant in")
        del lines[i]
        return "\n".join(lines)
    def comment_out(rx, what, start=0, first=False):
        """The lines from start on that match rx, commented out (only the first one if first)."""
        n = 0
        for i in range(start, len(lines)):
            if re.match(rx, lines[i]):
                lines[i] = "\t// planted: " + lines[i].strip()
                n += 1
                if first:
                    break
        if not n:
            plant_missing("no %s to plant in" % what)
        return "\n".join(lines)
    def rewrite_first(rx, fmt, what):
        """The first line that matches rx, rewritten as fmt % its groups."""
        for i, l in enumerate(lines):
            m = re.match(rx, l)
            if m:
                lines[i] = fmt % m.groups()
                return "\n".join(lines)
        plant_missing("no %s to plant in" % what)
    if name == "no_o_init":
        return comment_out(r"\s*mov\.f32 %o0, 0f00000000;", "O zeroing", first=True)
    if name == "no_store_read_wait":
        return comment_out(r"\s*@%wglead_\d+ cp\.async\.bulk\.wait_group\.read 0;", "store wait")
    if name == "no_wait_retry":
        cons = next(i for i, l in enumerate(lines) if re.match(r"\$Lconsumer_\d+:", l))
        return comment_out(r"\s*@!%pw_\d+ bra \$Lwait_\d+;", "consumer retry branch", cons)
    if name == "descale_kvhead0":
        return rewrite_first(r"(\s*)mad\.lo\.u32 (%dsidx_\d+), (%\w+), (%nhk_\d+), %\w+;",
                             "%smul.lo.u32 %s, %s, %s;", "descale index (not an e4m3 kernel?)")
    if name == "vt_key_swap":
        n = 0
        for i, l in enumerate(lines):
            m = re.match(r"(\s*prmt\.b32 %vto_\d+, %\w+, %\w+, )0x5410;", l)
            if m:  # outputs 0 and 2 (from tt0/tt2, tt1/tt3): halves exchanged
                lines[i] = m.group(1) + "0x1054;"
                n += 1
        if not n:
            plant_missing("no V transpose to plant in (not an e4m3 kernel?)")
        return "\n".join(lines)
    if name == "mask_branch_never":
        return rewrite_first(r"(\s*)@!%needmask_\d+ bra\.uni (\$Lno_mask_\d+);", "%sbra.uni %s;",
                             "mask branch")
    if name == "first_unmasked":
        return comment_out(r"\s*mov\.pred %needmask_\d+, %ptrue_\d+;", "first block's need")
    if name == "first_v_release":
        return rewrite_first(r"(\s*)setp\.eq\.and\.u32 (%\w+), (%\w+), 0, !%first_\d+;",
                             "%ssetp.eq.u32 %s, %s, 0;", "first-pass V release")
    plant_missing("unknown plant " + name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", default=os.path.join(ROOT, "build", "fa3-gen"))
    ap.add_argument("--knobs", default="")
    ap.add_argument("--hd", type=int, default=64)
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--e4m3", action="store_true",
                    help="FP8 kernel: e4m3 Q/K/V (normal values rounded to e4m3), fp32 descales "
                         "0.5..2 per (batch, kv head), O in bf16 (--out-fp16: fp16)")
    ap.add_argument("--out-fp16", action="store_true", help="e4m3: O in fp16 (--out-dtype fp16)")
    ap.add_argument("--no-descales", action="store_true",
                    help="e4m3: descale pointers 0 (the kernel takes 1.0)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--local", default=None, help="WL,WR")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--sq", type=int, default=256)
    ap.add_argument("--sk", type=int, default=256)
    ap.add_argument("--block-m", type=int, default=0)
    ap.add_argument("--grid", type=int, default=2)
    ap.add_argument("--no-otma", action="store_true", help="O from registers (param o_tma = 0)")
    ap.add_argument("--counter", action="store_true",
                    help="dyn_sched's tile counter (masked dense configs): the producers take "
                         "tiles from it (the CTAs run one after another, so the first takes most)")
    ap.add_argument("--varlen", default=None,
                    help="varlen: the sequences' lengths, q:k,q:k,... (Q/K/V/O packed)")
    ap.add_argument("--heads-k", type=int, default=0, help="K/V heads (GQA; default: --heads)")
    ap.add_argument("--pack-gqa", action="store_true", help="packed GQA kernel (5-D Q/O maps)")
    ap.add_argument("--paged", type=int, default=0,
                    help="paged K/V with this page size (pages in a shuffled order)")
    ap.add_argument("--splits", type=int, default=0,
                    help="split-KV kernel with this num_splits: fp32 partials, combined here")
    ap.add_argument("--section-hb", type=int, default=0,
                    help="the masked order's pairs a section (default: all pairs in one); a "
                    "smaller one leaves a short last section")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--stress", action="store_true", help="uneven warp interleavings")
    ap.add_argument("--late", type=float, default=None, metavar="P",
                    help="TMA loads land at the end of a scheduling round (each with probability "
                         "P; all once no warp moves; P = 0: only then), not at their issue")
    ap.add_argument("--poison", action="store_true",
                    help="registers read before any write hold random bits (not 0); such reads "
                         "are listed")
    ap.add_argument("--save", default=None, help="write O and LSE (npz) for a bitwise comparison")
    ap.add_argument("--plant", default=None, choices=sorted(PLANTS))
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)

    wl, wr = (-1, -1)
    cfg = ["--head-dim", str(a.hd)]
    if a.e4m3 and a.fp16:
        raise SystemExit("--fp16 and --e4m3: one dtype")
    if (a.out_fp16 or a.no_descales) and not a.e4m3:
        raise SystemExit("--out-fp16 / --no-descales go with --e4m3")
    if a.fp16:
        cfg += ["--dtype", "fp16"]
    if a.e4m3:
        cfg += ["--dtype", "e4m3"]
        if a.out_fp16:
            cfg += ["--out-dtype", "fp16"]
    if a.causal:
        cfg.append("--causal")
        wl, wr = -1, 0
    elif a.local:
        wl, wr = (int(x) for x in a.local.split(","))
        cfg.append("--local")
    if a.block_m:
        cfg += ["--block-m", str(a.block_m)]
    if a.splits:
        cfg.append("--split-kv")
    if a.varlen:
        cfg.append("--varlen")
    if a.pack_gqa:
        cfg.append("--pack-gqa")
    if a.paged:
        cfg.append("--paged-kv")
    ptx, plan = gen(a.gen, cfg, a.knobs)
    prog, labels = cs.parse(ptx)
    bm, bn = plan["block_m"], plan["block_n"]
    if a.pack_gqa and bm % (a.heads // (a.heads_k or a.heads)):
        raise SystemExit("packed GQA needs num_heads / num_heads_k to divide block_m %d" % bm)
    if a.paged and a.varlen:
        raise SystemExit("--paged with --varlen is not modeled")
    hd = hdv = a.hd
    B, H, SQ, SK = a.batch, a.heads, a.sq, a.sk
    HK = a.heads_k or H
    ratio = H // HK
    fp8 = a.e4m3
    es = 1 if fp8 else 2  # input element bytes (Q, K, V)
    bc = 128 // es  # a 128-byte box's columns
    ofp16 = a.out_fp16 if fp8 else a.fp16  # O's dtype: fp16, else bf16
    eso = 2  # O's element bytes
    lens = None
    if a.varlen:  # one packed batch of total_q / total_k rows; the reference runs per sequence
        lens = [tuple(int(x) for x in item.split(":")) for item in a.varlen.split(",")]
        B, SQ, SK = 1, sum(q for q, _ in lens), sum(k for _, k in lens)

    # inputs, rounded to the dtype; O and LSE NaN-filled
    if fp8:  # values rounded to e4m3 (before the descales); their codes are exact again
        q, k, v = (cs.e4m3_to_f32(cs.f32_to_e4m3(rng.standard_normal(shape)))
                   for shape in ((B, SQ, H, hd), (B, SK, HK, hd), (B, SK, HK, hdv)))

        def in_bits(x):
            return cs.f32_to_e4m3(x).astype(np.uint8)
    else:
        q = bf16_round(rng.standard_normal((B, SQ, H, hd)), a.fp16)
        k = bf16_round(rng.standard_normal((B, SK, HK, hd)), a.fp16)
        v = bf16_round(rng.standard_normal((B, SK, HK, hdv)), a.fp16)

        def in_bits(x):
            return to_bits(x, a.fp16)
    mem = cs.Memory()
    gq = mem.alloc(q.size * es, in_bits(q))
    if a.paged:  # pages [num_pages][page_size][HK][d], page_table[b][j] a shuffled page
        ps_ = a.paged
        per = (SK + ps_ - 1) // ps_
        npages = B * per + 3
        perm = rng.permutation(npages)[:B * per].reshape(B, per).astype(np.int32)
        kp = np.zeros((npages, ps_, HK, hd), np.float32)
        vp = np.zeros((npages, ps_, HK, hdv), np.float32)
        for bb in range(B):
            for j in range(per):
                n = min(ps_, SK - j * ps_)
                kp[perm[bb, j], :n] = k[bb, j * ps_:j * ps_ + n]
                vp[perm[bb, j], :n] = v[bb, j * ps_:j * ps_ + n]
        gk = mem.alloc(kp.size * es, in_bits(kp))
        gv = mem.alloc(vp.size * es, in_bits(vp))
        gpt = mem.alloc(perm.size * 4, perm)
    else:
        gk = mem.alloc(k.size * es, in_bits(k))
        gv = mem.alloc(v.size * es, in_bits(v))
    # e4m3: the descales, fp32 (batch or sequence, kv head), as FA3 takes them: the kernel reads
    # entry b·num_heads_k + kv head for Q, K and V alike (codegen/softmax.c kg_descales_tile)
    nds = len(lens) if lens else B
    if fp8 and not a.no_descales:
        dsc = [rng.uniform(0.5, 2.0, (nds, HK)).astype(np.float32) for _ in range(3)]
        gds = [mem.alloc(d.size * 4, d) for d in dsc]
    else:
        dsc = [np.ones((nds, HK), np.float32) for _ in range(3)]
        gds = [0, 0, 0]
    onan = np.full(B * SQ * H * hdv, 0x7FC0 if not ofp16 else 0x7E00, np.uint16)
    maxq = max(q for q, _ in lens) if lens else 0
    if lens:  # the varlen O map starts max_seqlen_q rows before O (kernel_abi.h)
        pad = np.zeros(maxq * H * hdv, np.uint16)
        gpad = mem.alloc((pad.size + onan.size) * 2, np.concatenate([pad, onan]))
        go_base = gpad
        go = gpad + pad.size * 2
    else:
        go = mem.alloc(onan.size * 2, onan)
        go_base = go
    glse = mem.alloc(B * H * SQ * 4, np.full(B * H * SQ, np.nan, np.float32))
    gctr = mem.alloc(4, np.zeros(1, np.uint32)) if a.counter else 0

    def tmap(g, rows_total, heads, d, box_rows, es=es):
        return cs.TensorMap(g, es, [d, rows_total, heads, B],
                            [heads * d * es, d * es, rows_total * heads * d * es],
                            [128 // es, box_rows, 1, 1])

    O = abi_offsets()
    P = bytearray(832)

    def put(name, fmt, val):
        struct.pack_into("<" + fmt, P, O[name], val)

    scale = 1.0 / np.sqrt(hd)
    nmb = ((maxq if lens else SQ * (ratio if a.pack_gqa else 1)) + bm - 1) // bm
    pairs = (HK if a.pack_gqa else H) * B  # packed GQA: a pair is (kv head, batch)
    tiles = nmb * pairs
    if lens:  # only the real tiles (runtime/fwd.c): min(slots, rows bound)
        nseq = len(lens)
        tiles = min(nmb * H * nseq, (SQ + nseq * (bm - 1)) // bm * H)
        cuq = np.cumsum([0] + [q for q, _ in lens]).astype(np.int32)
        cuk = np.cumsum([0] + [k for _, k in lens]).astype(np.int32)
        gcq = mem.alloc(cuq.size * 4, cuq)
        gck = mem.alloc(cuk.size * 4, cuk)
    put("O_PTR", "Q", go)
    put("LSE_PTR", "Q", glse)
    put("O_BATCH_STRIDE", "q", SQ * H * hdv)
    put("O_ROW_STRIDE", "q", H * hdv)
    put("O_HEAD_STRIDE", "q", hdv)
    put("SEQLEN_Q", "i", SQ)
    put("SEQLEN_K", "i", SK)
    put("NUM_HEADS", "i", H)
    put("HEADS_PER_KV", "i", ratio)
    put("NUM_M_BLOCKS", "i", nmb)
    put("WINDOW_LEFT", "i", wl)
    put("WINDOW_RIGHT", "i", wr)
    put("SCORE_MUL", "f", 1.0)
    put("SCALE_LOG2", "f", float(np.float32(scale * np.log2(np.e))))
    put("LSE_MUL", "f", float(np.float32(scale)))
    put("TOTAL_TILES", "I", tiles)
    put("SECTION_HB", "I", 1 if lens else a.section_hb or pairs)
    if lens:
        put("CU_SEQLENS_Q", "Q", gcq)
        put("CU_SEQLENS_K", "Q", gck)
        put("SEQUSED_K", "Q", 0)
        put("MAX_SEQLEN_Q", "i", maxq)
        put("BATCH", "i", len(lens))
        put("NUM_M_BLOCKS", "i", nmb)
    put("O_TMA", "I", 0 if a.no_otma else 1)
    put("NUM_HEADS_K", "i", HK)
    put("TILE_COUNTER", "Q", gctr)
    put("DESCALE_Q", "Q", gds[0])
    put("DESCALE_K", "Q", gds[1])
    put("DESCALE_V", "Q", gds[2])
    nsp = max(a.splits, 1)
    if a.splits:  # fp32 partials [split][row][hdv], [split][row]; row (b·H + h)·SQ + i
        prows = B * H * SQ
        gop = mem.alloc(nsp * prows * hdv * 4, np.full(nsp * prows * hdv, np.nan, np.float32))
        glp = mem.alloc(nsp * prows * 4, np.full(nsp * prows, np.nan, np.float32))
        put("O_PARTIAL", "Q", gop)
        put("LSE_PARTIAL", "Q", glp)
        put("NUM_SPLITS", "i", nsp)
        put("PARTIAL_ROWS", "i", prows)
        put("TOTAL_TILES", "I", tiles * nsp)
        tiles *= nsp
    tm = {O["TMAP_Q"]: tmap(gq, SQ, H, hd, bm), O["TMAP_K"]: tmap(gk, SK, HK, hd, bn),
          O["TMAP_V"]: tmap(gv, SK, HK, hdv, bn), O["TMAP_O"]: tmap(go, SQ, H, hdv, 64, eso)}
    if a.pack_gqa:  # 5-D {d, ratio, seqlen, HK, B}, strides {head, row, ratio·head, batch}
        def gqa_map(g, d, rows, es=es):
            return cs.TensorMap(g, es, [d, ratio, SQ, HK, B],
                                [d * es, H * d * es, ratio * d * es, SQ * H * d * es],
                                [128 // es, ratio, rows // ratio, 1, 1])
        tm[O["TMAP_Q"]] = gqa_map(gq, hd, bm)
        if 64 % ratio == 0:
            tm[O["TMAP_O"]] = gqa_map(go, hdv, 64, eso)
        else:
            put("O_TMA", "I", 0)
    if a.paged:
        from math import gcd
        prow = gcd(bn, a.paged)
        for name, g, d in (("TMAP_K", gk, hd), ("TMAP_V", gv, hdv)):
            tm[O[name]] = cs.TensorMap(g, es, [d, a.paged, HK, npages],
                                       [HK * d * es, d * es, a.paged * HK * d * es], [bc, prow, 1, 1])
        put("PAGE_TABLE", "Q", gpt)
        put("PAGE_TABLE_STRIDE", "q", per)
        put("PAGE_SIZE", "i", a.paged)
        put("NUM_PAGES", "i", npages)
        put("PAGE_ROWS", "i", prow)
        put("RUNS_PER_BLOCK", "i", bn // prow)
        put("SEQUSED_K", "Q", 0)
    if lens:  # {hdv, max_seqlen_q, H, total_q + 1} over O - max_seqlen_q rows, the last dim a row
        rs = H * hdv * eso
        tm[O["TMAP_O"]] = cs.TensorMap(go_base, eso, [hdv, maxq, H, SQ + 1], [rs, hdv * eso, rs],
                                       [64, 64, 1, 1])
    # the launch's divisors (fast_div 2 kernels read them); section_hb is pairs here
    hb = 1 if lens else a.section_hb or pairs
    base_pairs = tiles // nsp // nmb if nmb else 0
    put_divs(P, O["DIV"], {"NMB": nmb, "HEADS": HK if a.pack_gqa and not lens else H,
                           "HPKV": ratio, "SEC_TILES": hb * nmb, "SEC_HB": hb,
                           "LAST_PAIRS": base_pairs % hb or hb, "SPLITS": nsp,
                           "PAGE_SIZE": a.paged or 1})
    grid = min(a.grid, tiles)
    if a.plant:
        ptx = plant(ptx, a.plant)
        prog, labels = cs.parse(ptx)
    t0 = time.time()
    steps = 0
    # the instruction that marks a tile's epilogue
    marks = {"tile epilogues": re.compile(r"selp\.f32 %linv_\d+,")}
    seen = {k: 0 for k in marks}
    uninit = {}
    for cta in range(grid):
        c = cs.CTA(prog, labels, mem, bytes(P), tm, cta, grid, plan["threads"], plan["smem"],
                   seed=seed + cta, trace=a.trace, stress=a.stress, poison=a.poison, late=a.late)
        c.run()
        for place, cnt in c.uninit.items():
            uninit[place] = uninit.get(place, 0) + cnt
        steps += c.steps
        for name, rx in marks.items():
            seen[name] += sum(int(c.pc_count[i]) for i, ins in enumerate(prog) if rx.search(ins.text))
    dt = time.time() - t0

    obuf, ooff = mem.find(go, onan.size * 2)
    oraw = obuf[ooff:ooff + onan.size * 2].view(np.uint16)
    o = from_bits(oraw, ofp16).reshape(B, SQ, H, hdv)
    lse = mem.region(glse).view(np.float32).reshape(B, H, SQ)
    if a.splits:  # the combine step, in fp64: LSE = log sum exp LSE_s, O = sum exp(LSE_s - LSE) O_s
        op = mem.region(gop).view(np.float32).reshape(nsp, B, H, SQ, hdv).astype(np.float64)
        lp = mem.region(glp).view(np.float32).reshape(nsp, B, H, SQ).astype(np.float64)
        with np.errstate(all="ignore"):
            mx = lp.max(axis=0)
            w = np.where(np.isfinite(lp), np.exp(lp - np.where(np.isfinite(mx), mx, 0)), 0.0)
            tot = w.sum(axis=0)
            lse = np.where(tot > 0, np.log(tot) + np.where(np.isfinite(mx), mx, 0), -np.inf)
            comb = (w[..., None] * op).sum(axis=0) / np.where(tot > 0, tot, 1)[..., None]
        o = np.transpose(comb, (0, 2, 1, 3)).astype(np.float32)  # (B, SQ, H, hdv)
        lse = lse.astype(np.float32)
    if a.save:
        np.savez(a.save, o=(mem.region(gop) if a.splits else oraw).copy(),
                 lse=lse.copy())
    if fp8:  # the dequantized inputs: each (batch or sequence, kv head) times its descales
        qd, kd, vd = (x.astype(np.float64).copy() for x in (q, k, v))
        if lens:
            segs = [(i, cuq[i], cuq[i + 1], cuk[i], cuk[i + 1]) for i in range(len(lens))]
        else:
            segs = [(i, 0, SQ, 0, SK) for i in range(B)]
        for i, a0, a1, b0, b1 in segs:
            bb = 0 if lens else i
            for h in range(H):
                qd[bb, a0:a1, h] *= dsc[0][i, h // ratio]
            for h in range(HK):
                kd[bb, b0:b1, h] *= dsc[1][i, h]
                vd[bb, b0:b1, h] *= dsc[2][i, h]
    else:
        qd, kd, vd = q, k, v
    sig = np.zeros(o.shape) if fp8 else None
    if lens:  # per sequence, into the packed layout; LSE (head, total_q)
        ro = np.zeros(o.shape)
        rlse = np.full((1, H, SQ), -np.inf)
        for (lq, lk), q0, k0 in zip(lens, cuq[:-1], cuk[:-1]):
            ssig = np.zeros((1, lq, H, hdv)) if fp8 else None
            so, sl = reference(qd[:, q0:q0 + lq], kd[:, k0:k0 + lk], vd[:, k0:k0 + lk], scale, wl,
                               wr, ssig)
            ro[:, q0:q0 + lq] = so
            rlse[:, :, q0:q0 + lq] = sl
            if fp8:
                sig[:, q0:q0 + lq] = ssig
    else:
        ro, rlse = reference(qd, kd, vd, scale, wl, wr, sig)
    nan_o = int(np.isnan(o).sum())
    err_o = np.abs(o - ro)
    if fp8:
        # P is rounded to e4m3 (2^8·p at the running max; l sums the fp32 p): independent
        # relative errors of at most 2^-4 a key, sd at most 2^-4/sqrt(3), so O's error has sd at
        # most 2^-4/sqrt(3)·sig; 6 of those (a row that one key dominates: above its worst
        # case), O's own rounding (2^-9 relative, bf16; taken twice) and the fp32 sums. A wrong
        # key block, row, head or descale is many of them off.
        tol_o = 6 * 2.0 ** -4 / np.sqrt(3) * sig + 2.0 ** -8 * np.abs(ro) + 2e-4
    else:
        # two units in the last place of a 16-bit output at |O| (from 0.25 down the bf16 P's
        # rounding and the fp32 sums set the floor), so a wrong key, row or scale is far outside
        tol_o = 2.0 ** -6 * np.maximum(np.abs(ro), 0.25) + 1e-3
    bad_o = int((err_o > tol_o).sum()) + nan_o
    fin = np.isfinite(rlse)
    bad_lse = int((np.abs(lse[fin] - rlse[fin]) > 1e-3 * np.maximum(1, np.abs(rlse[fin]))).sum()
                  + (~np.isneginf(lse[~fin])).sum())
    if fp8:  # the worst error in units of its tolerance (1: at the edge)
        rel = err_o / tol_o
        extra = ", worst/tol %.2f" % (float(np.nanmax(rel)) if o.size else 0)
    else:
        extra = ""
    print("%s %s: b%d h%d sq%d sk%d bm%d bn%d grid %d (%d tiles), seed %d: %d warp steps in %.1f s; "
          "O max err %.3g (%d bad of %d, %d NaN%s), LSE %d bad"
          % (" ".join(cfg), a.knobs or "default", B, H, SQ, SK, bm, bn, grid, tiles, seed, steps, dt,
             float(np.nanmax(err_o)) if o.size else 0, bad_o, o.size, nan_o, extra, bad_lse))
    print("  warp executions: " + ", ".join("%s %d" % kv for kv in seen.items()))
    if a.poison:
        text = {ins.line: ins.text for ins in prog}
        print("  registers read before any write: %d places" % len(uninit))
        for (line, reg), n in sorted(uninit.items()):
            print("    line %d %s (%d warps): %s" % (line, reg, n, text.get(line, "?")[:90]))
    if bad_o or bad_lse:
        idx = np.argwhere((err_o > tol_o) | np.isnan(o))[:5]
        for b, i, h, d in idx:
            print("  O[%d,%d,%d,%d] = %g, reference %g" % (b, i, h, d, o[b, i, h, d], ro[b, i, h, d]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
