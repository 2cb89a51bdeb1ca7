/*
 * e4m3 only: the producer warpgroup's transpose of a loaded V stage into the K-major layout the
 * FP8 PV wgmma needs (both operands of an fp8 wgmma are K-major; hopper-ptx-facts §1). Callers
 * keep V in (batch, seqlen, heads, head_dim) as for bf16; the kernel does the transpose in shared
 * memory, as FlashAttention-3 does (arXiv 2407.08608 §3.3), here with plain 32-bit loads, byte
 * permutes and 32-bit stores by all 128 producer threads.
 *
 * Layouts (byte offsets from a 1024-aligned stage base; 128B swizzle: 16-byte chunk j of a 128-byte
 * row r sits at chunk j ^ (r mod 8), i.e. offset ^ ((offset >> 3) & 0x70)):
 *   loaded V:     v_boxes boxes of block_n rows (keys) × 128 B (O columns n), box x holds columns
 *                 128x .. 128x+127 (TMA, zero-filled past head_dim_v);
 *   transposed V: vt_boxes boxes of vt_rows = 128·v_boxes rows (O columns; the PV reads the first
 *                 hdv_chunks·64) × 128 B (keys), box y holds
 *                 keys 128y .. 128y+127, in the PV's logical k order: logical key 32t + 16h + 4q + i
 *                 of a block holds key 32t + 16h + 2q + (i&1) + 8(i>>1) (softmax.c, kg_pack_p).
 * Work unit of a thread: one 4 × 4 byte block, 4 O columns (a 32-bit word of a V row) × the 4
 * keys of one logical word: 4 loads, 8 prmt, 4 stores. Lane l = a + 8b (a < 8, b < 4) of warp w
 * takes O columns 4(a&1) + 8(a>>1) + 32X + {0..3} and the logical key word b of 16-key group kc =
 * w + 4·i (block_n a multiple of 64: every warp has the same number); the 32 lanes of a warp then load 4 rows × 32 bytes that fall in 32 different banks, and
 * store 8 rows (a rotation r = a>>1 of the four output words, folded into the prmt selectors, makes
 * the 8 row residues distinct) × 4 words, again 32 banks. X runs in the order x ^ b inside each
 * box of 4 so that every load offset is an immediate.
 */
#include "codegen/kgen.h"

/* Per-thread constants of the transpose: the lane's coordinates and the prmt selectors of its
   rotation. */
static void kg_vt_init(kgen *g, vt_thread *t)
{
    /* lane and warp read again from %tid.x (the producer thread is 0..127): fewer registers
       live across the producer's loop */
    ptx_r tid = ptx_reg(g->f, PTX_B32, "vttid"), lane = ptx_reg(g->f, PTX_B32, "vtlane");
    INS("mov.u32 $, %%tid.x;", tid);
    INS("and.b32 $, $, 31;", lane, tid);
    t->warp = ptx_reg(g->f, PTX_B32, "vtwarp");
    INS("shr.u32 $, $, 5;", t->warp, tid);
    t->a = ptx_reg(g->f, PTX_B32, "vta");
    t->b = ptx_reg(g->f, PTX_B32, "vtb");
    t->sel_a = ptx_reg(g->f, PTX_B32, "vtsel");
    t->sel_b = ptx_reg(g->f, PTX_B32, "vtsel");
    INS("and.b32 $, $, 7;", t->a, lane);
    INS("shr.u32 $, $, 3;", t->b, lane);
    /* rotation r = a >> 1: output word s holds O column 4(a&1) + 8(a>>1) + ((s + r) & 3), so
       t0/t2 take bytes r, r+1 and t1/t3 bytes r+2, r+3 of their two sources (mod 4):
       selectors 0x5140, 0x6251, 0x7362, 0x4073 for r = 0..3, one 16-bit entry each */
    ptx_r r = ptx_reg(g->f, PTX_B32, "vtr"), sh = ptx_reg(g->f, PTX_B32, "vtsh");
    ptx_r tab = ptx_reg(g->f, PTX_B64, "vttab"), v = ptx_reg(g->f, PTX_B64, "vttab");
    ptx_r r2 = ptx_reg(g->f, PTX_B32, "vtr");
    INS("shr.u32 $, $, 1;", r, t->a);
    INS("shl.b32 $, $, 4;", sh, r);
    INS("mov.b64 $, 0x4073736262515140;", tab);
    INS("shr.b64 $, $, $;", v, tab, sh);
    INS("cvt.u32.u64 $, $;", t->sel_a, v);
    INS("and.b32 $, $, 65535;", t->sel_a, t->sel_a);
    INS("add.u32 $, $, 2;", r2, r);
    INS("and.b32 $, $, 3;", r2, r2);
    ptx_r sh2 = ptx_reg(g->f, PTX_B32, "vtsh"), v2 = ptx_reg(g->f, PTX_B64, "vttab");
    INS("shl.b32 $, $, 4;", sh2, r2);
    INS("shr.b64 $, $, $;", v2, tab, sh2);
    INS("cvt.u32.u64 $, $;", t->sel_b, v2);
    INS("and.b32 $, $, 65535;", t->sel_b, t->sel_b);
}

/* Transposes loaded V stage ps (its TMA complete) into transposed stage ps (released by the
   consumers), then every thread arrives on vraw_empty (the loaded stage may be loaded again) and
   vt_full (the consumers may read the transposed one). */
void kg_vt_transpose(kgen *g, pipe_state ps)
{
    const fa3_plan *p = g->p;
    vt_thread T, *t = &T; /* recomputed each time: the producer's registers are few */
    kg_vt_init(g, t);
    const int bn = p->block_n, rows = p->vt_rows;
    /* the loaded stage is in; the transposed stage's previous use is released */
    ptx_r full = kg_ring_bar(g, g->mb_v_full, ps.stage, g->sc.flip);
    kg_mbar_wait(g, full, ps.phase, g->mb_v_full[0]);
    ptx_r par = ptx_reg(g->f, PTX_B32, "vtpar");
    INS("xor.b32 $, $, 1;", par, ps.phase);
    ptx_r empty = kg_ring_bar(g, g->mb_v_empty, ps.stage, g->sc.flip);
    kg_mbar_wait(g, empty, par, g->mb_v_empty[0]);

    /* load bases: row 16·w + 2b of the stage (w = kc for i = 0), column 4a; odd rows have the
       other swizzle bit 4 */
    ptx_r ld_e = ptx_reg(g->f, PTX_B32, "vtld"), ld_o = ptx_reg(g->f, PTX_B32, "vtld");
    ptx_r x = ptx_reg(g->f, PTX_B32, "vtx");
    INS("mad.lo.u32 $, $, %d, $;", ld_e, ps.stage, p->smem_v_stage, g->sbase);
    INS("mad.lo.u32 $, $, 2048, $;", ld_e, t->warp, ld_e);
    INS("mad.lo.u32 $, $, 256, $;", ld_e, t->b, ld_e);
    INS("mad.lo.u32 $, $, 4, $;", ld_e, t->a, ld_e);
    INS("add.u32 $, $, %d;", ld_e, ld_e, p->smem_v);
    INS("xor.b32 $, $, 16;", ld_o, ld_e);
    ptx_smem_use(g->f, p->smem_v, p->stages * p->smem_v_stage);
    ptx_smem_use(g->f, p->smem_vt, p->stages * p->smem_vt_stage);

    /* store bases, one per output word s: row n_s = 4(a&1) + 8(a>>1) + ((s + r) & 3), logical key
       byte 16·(w mod 8) + 4b, swizzled by n_s mod 8 = 4(a&1) + ((s + r) & 3) */
    ptx_r st[4], vt0 = ptx_reg(g->f, PTX_B32, "vtst");
    kg_ring_slot(g, vt0, ps.stage, p->smem_vt_stage, p->smem_vt);
    INS("mad.lo.u32 $, $, 4, $;", vt0, t->b, vt0);
    ptx_r a1 = ptx_reg(g->f, PTX_B32, "vta1"), n0 = ptx_reg(g->f, PTX_B32, "vtn0");
    ptx_r r = ptx_reg(g->f, PTX_B32, "vtr");
    INS("and.b32 $, $, 1;", a1, t->a);
    INS("shl.b32 $, $, 2;", a1, a1);              /* 4(a&1) */
    INS("shr.u32 $, $, 1;", r, t->a);
    INS("shl.b32 $, $, 3;", n0, r);
    INS("add.u32 $, $, $;", n0, n0, a1);          /* 4(a&1) + 8(a>>1) */
    for (int s = 0; s < 4; s++) {
        ptx_r ts = ptx_reg(g->f, PTX_B32, "vtt"), m = ptx_reg(g->f, PTX_B32, "vtm");
        ptx_r n = ptx_reg(g->f, PTX_B32, "vtn"), k = ptx_reg(g->f, PTX_B32, "vtk");
        st[s] = ptx_reg(g->f, PTX_B32, "vtst");
        INS("add.u32 $, $, %d;", ts, r, s);
        INS("and.b32 $, $, 3;", ts, ts);
        INS("add.u32 $, $, $;", m, a1, ts);       /* n_s mod 8 */
        INS("add.u32 $, $, $;", n, n0, ts);       /* n_s */
        INS("xor.b32 $, $, $;", k, t->warp, m);   /* (w mod 8) ^ (n_s mod 8): w < 4 */
        INS("shl.b32 $, $, 4;", k, k);
        INS("mad.lo.u32 $, $, 128, $;", st[s], n, vt0);
        INS("add.u32 $, $, $;", st[s], st[s], k);
    }

    ptx_r w[4], tt[4], o[4];
    for (int i = 0; i < 4; i++) {
        w[i] = ptx_reg(g->f, PTX_B32, "vtw");
        tt[i] = ptx_reg(g->f, PTX_B32, "vtp");
        o[i] = ptx_reg(g->f, PTX_B32, "vto");
    }
    ptx_r sa = ptx_reg(g->f, PTX_B32, "vtsa");
    const int groups = p->dbg_no_vt ? 0 : bn / 16; /* the knob: no transpose work */ /* 16-key groups kc; warp w takes kc = w + 4i */
    /* one pass per loaded box of 128 columns; more than one box is a loop, not unrolled, so
       that ptxas keeps the producer within its registers (unrolled, head_dim 256 spilled) */
    ptx_r nbox = ptx_reg(g->f, PTX_B32, "vtbox");
    const int lab_box = p->v_boxes > 1 && groups ? ptx_label(g->f, "vt_box") : -1;
    if (p->v_boxes > 1 && groups) {
        INS("mov.u32 $, 0;", nbox);
        ptx_place(g->f, lab_box);
    }
    for (int i = 0; 4 * i < groups; i++) {
        const int kc_lo = 4 * i; /* kc = w + kc_lo (w < 4), kc mod 8 = w + 4(i&1) */
        if (i) /* kc mod 8 = w + 4(i&1): its bit 2 flips, bit 6 of the swizzled byte offset */
            for (int s = 0; s < 4; s++)
                INS("xor.b32 $, $, 64;", st[s], st[s]);
        const int kbox = kc_lo / 8; /* keys 128·kbox .. : (w + 4i) / 8 = i / 2 */
        for (int xx = 0; xx < 4; xx++) {
            /* X = 4·box + (xx ^ b): the loads' column 32·xx is an immediate */
            const int ld = kc_lo * 16 * 128 + 32 * xx;
            INS("ld.shared.b32 $, [$+%d];", w[0], ld_e, ld);
            INS("ld.shared.b32 $, [$+%d];", w[1], ld_o, ld + 128);
            INS("ld.shared.b32 $, [$+%d];", w[2], ld_e, ld + 1024);
            INS("ld.shared.b32 $, [$+%d];", w[3], ld_o, ld + 1152);
            INS("prmt.b32 $, $, $, $;", tt[0], w[0], w[1], t->sel_a);
            INS("prmt.b32 $, $, $, $;", tt[1], w[0], w[1], t->sel_b);
            INS("prmt.b32 $, $, $, $;", tt[2], w[2], w[3], t->sel_a);
            INS("prmt.b32 $, $, $, $;", tt[3], w[2], w[3], t->sel_b);
            INS("prmt.b32 $, $, $, 0x5410;", o[0], tt[0], tt[2]);
            INS("prmt.b32 $, $, $, 0x7632;", o[1], tt[0], tt[2]);
            INS("prmt.b32 $, $, $, 0x5410;", o[2], tt[1], tt[3]);
            INS("prmt.b32 $, $, $, 0x7632;", o[3], tt[1], tt[3]);
            /* rows 32·X more: 4096·X bytes, X = 4·box + (xx ^ b) (the box in st) */
            INS("xor.b32 $, $, %d;", x, t->b, xx);
            INS("shl.b32 $, $, 12;", x, x);
            const int so = kbox * rows * 128;
            for (int s = 0; s < 4; s++) {
                INS("add.u32 $, $, $;", sa, st[s], x);
                INS("st.shared.b32 [$+%d], $;", sa, so, o[s]);
            }
        }
    }
    if (p->v_boxes > 1 && groups) {
        /* the next box: 128 columns on in the loaded stage, 128 rows in the transposed one */
        ptx_r more = ptx_reg(g->f, PTX_PRED, "vtmore");
        INS("add.u32 $, $, %d;", ld_e, ld_e, bn * 128);
        INS("add.u32 $, $, %d;", ld_o, ld_o, bn * 128);
        for (int s = 0; s < 4; s++) {
            if ((groups / 4 - 1) & 1) /* undo the group flips */
                INS("xor.b32 $, $, 64;", st[s], st[s]);
            INS("add.u32 $, $, %d;", st[s], st[s], 4 * 4096);
        }
        INS("add.u32 $, $, 1;", nbox, nbox);
        INS("setp.lt.u32 $, $, %d;", more, nbox, p->v_boxes);
        INS("@$ bra %s;", more, ptx_lab(g->f, lab_box));
    }
    INS("fence.proxy.async.shared::cta;");
    ptx_r raw = kg_ring_bar(g, g->mb_vraw_empty, ps.stage, g->sc.flip);
    ptx_mbar_release(g->f, g->mb_vraw_empty[0], p->bar_producer_count,
                     "producer threads after reading a V stage");
    INS("mbarrier.arrive.shared::cta.b64 _, [$];", raw);
    ptx_r vt = kg_ring_bar(g, g->mb_vt_full, ps.stage, g->sc.flip);
    ptx_mbar_release(g->f, g->mb_vt_full[0], p->bar_producer_count,
                     "producer threads after writing a transposed V stage");
    INS("mbarrier.arrive.shared::cta.b64 _, [$];", vt);
}
