/*
 * The varlen tile order's table in PTX (varlen_order.h describes the order and the layout, and
 * models both steps in C): warp 0 builds it at kernel start, before the CTA barrier that ends the
 * prologue, and every role decodes its tiles from it with shared-memory loads.
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "codegen/varlen_order.h"
#include "kernel_abi.h"

/* Warp 0 of the CTA: the sorted sequences and the prefix of the config's order. */
void kg_vtab_build(kgen *g)
{
    const fa3_plan *p = g->p;
    if (!p->cfg.varlen || !p->smem_vtab)
        return;
    const int masked = p->cfg.mask != FA3_MASK_NONE;
    ptx_smem_use(g->f, p->smem_vtab, FA3_VT_BYTES);
    const int lab_done = ptx_label(g->f, "vt_done"), lab_bad = ptx_label(g->f, "vt_invalid");
    const int lab_rank = ptx_label(g->f, "vt_rank");
    ptx_r notw0 = ptx_reg(g->f, PTX_PRED, "vtnotw0");
    INS("setp.ge.u32 $, $, 32;", notw0, g->thr);
    INS("@$ bra %s;", notw0, ptx_lab(g->f, lab_done));
    INS("bar.warp.sync -1;");
    ptx_r base = ptx_reg(g->f, PTX_B32, "vtbase"), lane0 = ptx_reg(g->f, PTX_PRED, "vtlane0");
    INS("add.u32 $, $, %d;", base, g->sbase, p->smem_vtab);
    INS("setp.eq.u32 $, $, 0;", lane0, g->lane);
    ptx_r nseq = kg_param(g, PTX_B32, "u32", FA3P_OFF_BATCH, "nseq");
    ptx_r nh = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    ptx_r cuq = kg_param(g, PTX_B64, "u64", FA3P_OFF_CU_SEQLENS_Q, "cuq");
    ptx_r big = ptx_reg(g->f, PTX_PRED, "vtbig");
    INS("setp.gt.u32 $, $, %d;", big, nseq, FA3_VT_BATCH);
    INS("@$ bra.uni %s;", big, ptx_lab(g->f, lab_bad));

    /* the lane's sequence: its m_blocks, 0 past batch */
    ptx_r mine = ptx_reg(g->f, PTX_PRED, "vtmine"), a = ptx_reg(g->f, PTX_B64, "vtaddr");
    ptx_r qs = ptx_reg(g->f, PTX_B32, "vtqs"), qe = ptx_reg(g->f, PTX_B32, "vtqe");
    ptx_r nmb = ptx_reg(g->f, PTX_B32, "vtnmb");
    INS("setp.lt.u32 $, $, $;", mine, g->lane, nseq);
    INS("mov.u32 $, 0;", qs);
    INS("mov.u32 $, 0;", qe);
    INS("cvt.u64.u32 $, $;", a, g->lane);
    INS("shl.b64 $, $, 2;", a, a);
    INS("add.s64 $, $, $;", a, cuq, a);
    INS("@$ ld.global.nc.u32 $, [$];", mine, qs, a);
    INS("@$ ld.global.nc.u32 $, [$+4];", mine, qe, a);
    INS("sub.u32 $, $, $;", nmb, qe, qs);
    INS("add.u32 $, $, %d;", nmb, nmb, p->block_m - 1);
    kg_udiv_imm_to(g, nmb, nmb, (uint32_t)p->block_m);
    INS("selp.b32 $, $, 0, $;", nmb, nmb, mine);

    /* its rank: the lanes with more m_blocks, or as many and a lower index, go first */
    ptx_r rank = ptx_reg(g->f, PTX_B32, "vtrank"), j = ptx_reg(g->f, PTX_B32, "vtj");
    ptx_r v = ptx_reg(g->f, PTX_B32, "vtv"), inc = ptx_reg(g->f, PTX_B32, "vtinc");
    ptx_r gt = ptx_reg(g->f, PTX_PRED, "vtgt"), eq = ptx_reg(g->f, PTX_PRED, "vteq");
    ptx_r lt = ptx_reg(g->f, PTX_PRED, "vtlt");
    INS("mov.u32 $, 0;", rank);
    INS("mov.u32 $, 0;", j);
    ptx_place(g->f, lab_rank);
    INS("shfl.sync.idx.b32 $, $, $, 31, -1;", v, nmb, j);
    INS("setp.gt.u32 $, $, $;", gt, v, nmb);
    INS("setp.eq.u32 $, $, $;", eq, v, nmb);
    INS("setp.lt.u32 $, $, $;", lt, j, g->lane);
    INS("and.pred $, $, $;", eq, eq, lt);
    INS("or.pred $, $, $;", gt, gt, eq);
    INS("selp.u32 $, 1, 0, $;", inc, gt);
    INS("add.u32 $, $, $;", rank, rank, inc);
    INS("add.u32 $, $, 1;", j, j);
    INS("setp.lt.u32 $, $, %d;", lt, j, FA3_VT_BATCH);
    INS("@$ bra.uni %s;", lt, ptx_lab(g->f, lab_rank));
    ptx_r ra = ptx_reg(g->f, PTX_B32, "vtra");
    INS("shl.b32 $, $, 2;", ra, rank);
    INS("add.u32 $, $, $;", ra, ra, base);
    INS("st.shared.u32 [$+%d], $;", ra, FA3_VT_SEQ, g->lane);
    INS("st.shared.u32 [$+%d], $;", ra, FA3_VT_NMB, nmb);
    INS("bar.warp.sync -1;");

    ptx_r la = ptx_reg(g->f, PTX_B32, "vtla"), one = ptx_reg(g->f, PTX_B32, "vtone");
    INS("shl.b32 $, $, 2;", la, g->lane);
    INS("add.u32 $, $, $;", la, la, base);
    INS("mov.u32 $, 1;", one);
    if (!masked) {
        /* pre[i + 1] = heads · (m_blocks of sorted 0 .. i): an inclusive scan over the lanes */
        ptx_r s = ptx_reg(g->f, PTX_B32, "vts"), x = ptx_reg(g->f, PTX_B32, "vtx");
        ptx_r ok = ptx_reg(g->f, PTX_PRED, "vtok");
        INS("ld.shared.u32 $, [$+%d];", s, la, FA3_VT_NMB);
        INS("mul.lo.u32 $, $, $;", s, s, nh);
        for (int d = 1; d < 32; d *= 2) {
            INS("shfl.sync.up.b32 $, $, %d, 0, -1;", x, s, d);
            INS("setp.ge.u32 $, $, %d;", ok, g->lane, d);
            INS("@$ add.u32 $, $, $;", ok, s, s, x);
        }
        INS("st.shared.u32 [$+%d], $;", la, FA3_VT_PRE + 4, s);
        ptx_r last = ptx_reg(g->f, PTX_PRED, "vtlast");
        INS("setp.eq.u32 $, $, 31;", last, g->lane);
        INS("@$ st.shared.u32 [$+%d], $;", last, base, FA3_VT_TOTAL, s);
        INS("@$ st.shared.u32 [$+%d], 0;", lane0, base, FA3_VT_PRE);
        INS("@$ st.shared.u32 [$+%d], $;", lane0, base, FA3_VT_VALID, one);
    } else {
        /* pre[m] = heads · sum_b max(0, nmb_b - m): the lane's levels lane + 32k */
        ptx_r acc[4], mk[4], w[4], d = ptx_reg(g->f, PTX_B32, "vtd");
        ptx_r ba = ptx_reg(g->f, PTX_B32, "vtba"), more = ptx_reg(g->f, PTX_PRED, "vtmore");
        const int lab_sum = ptx_label(g->f, "vt_sum");
        for (int k = 0; k < 4; k++) {
            acc[k] = ptx_reg(g->f, PTX_B32, "vtacc");
            mk[k] = ptx_reg(g->f, PTX_B32, "vtm");
            w[k] = ptx_reg(g->f, PTX_B32, "vtw");
            INS("mov.u32 $, 0;", acc[k]);
            INS("add.u32 $, $, %d;", mk[k], g->lane, 32 * k);
        }
        ptx_r end = ptx_reg(g->f, PTX_B32, "vtend");
        INS("add.u32 $, $, %d;", ba, base, FA3_VT_NMB);
        INS("add.u32 $, $, %d;", end, base, FA3_VT_NMB + 4 * FA3_VT_BATCH);
        ptx_place(g->f, lab_sum);
        INS("ld.shared.v4.u32 {$, $, $, $}, [$];", w[0], w[1], w[2], w[3], ba);
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 4; k++) {
                INS("sub.s32 $, $, $;", d, w[i], mk[k]);
                INS("max.s32 $, $, 0;", d, d);
                INS("add.u32 $, $, $;", acc[k], acc[k], d);
            }
        INS("add.u32 $, $, 16;", ba, ba);
        INS("setp.lt.u32 $, $, $;", more, ba, end);
        INS("@$ bra.uni %s;", more, ptx_lab(g->f, lab_sum));
        for (int k = 0; k < 4; k++) {
            INS("mul.lo.u32 $, $, $;", acc[k], acc[k], nh);
            INS("st.shared.u32 [$+%d], $;", la, FA3_VT_PRE + 128 * k, acc[k]);
        }
        /* level FA3_VT_LEVELS ends nothing; valid while the longest has at most that many */
        ptx_r n0 = ptx_reg(g->f, PTX_B32, "vtn0"), fits = ptx_reg(g->f, PTX_PRED, "vtfits");
        ptx_r val = ptx_reg(g->f, PTX_B32, "vtval");
        INS("ld.shared.u32 $, [$+%d];", n0, base, FA3_VT_NMB);
        INS("setp.le.u32 $, $, %d;", fits, n0, FA3_VT_LEVELS);
        INS("selp.u32 $, 1, 0, $;", val, fits);
        INS("@$ st.shared.u32 [$+%d], 0;", lane0, base, FA3_VT_PRE + 4 * FA3_VT_LEVELS);
        INS("@$ st.shared.u32 [$+%d], $;", lane0, base, FA3_VT_TOTAL, acc[0]);
        INS("@$ st.shared.u32 [$+%d], $;", lane0, base, FA3_VT_VALID, val);
    }
    INS("bra.uni %s;", ptx_lab(g->f, lab_done));
    ptx_place(g->f, lab_bad);
    INS("@$ st.shared.u32 [$+%d], 0;", lane0, base, FA3_VT_VALID);
    ptx_place(g->f, lab_done);
}

/* The tile's (m_block, head, batch) from the table into t's registers; branches to lab_walk when
   the table is invalid, to lab_past when the tile is past the real ones. */
void kg_vtab_decode(kgen *g, ptx_r tile, int lab_past, int lab_walk, tile_info *t)
{
    const fa3_plan *p = g->p;
    const int masked = p->cfg.mask != FA3_MASK_NONE;
    ptx_r base = ptx_reg(g->f, PTX_B32, "vtbase"), v = ptx_reg(g->f, PTX_B32, "vtv");
    ptx_r pr = ptx_reg(g->f, PTX_PRED, "vtp"), addr = ptx_reg(g->f, PTX_B32, "vtaddr");
    INS("add.u32 $, $, %d;", base, g->sbase, p->smem_vtab);
    INS("ld.shared.u32 $, [$+%d];", v, base, FA3_VT_VALID);
    INS("setp.eq.u32 $, $, 0;", pr, v);
    INS("@$ bra %s;", pr, ptx_lab(g->f, lab_walk));
    INS("ld.shared.u32 $, [$+%d];", v, base, FA3_VT_TOTAL);
    INS("setp.ge.u32 $, $, $;", pr, tile, v);
    INS("@$ bra %s;", pr, ptx_lab(g->f, lab_past));
    INS("mov.u32 $, $;", addr, base);
    ptx_r nh = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    if (!masked) {
        /* the last sorted position whose tiles start at or before the tile */
        for (int step = FA3_VT_BATCH / 2; step; step /= 2) {
            INS("ld.shared.u32 $, [$+%d];", v, addr, FA3_VT_PRE + 4 * step);
            INS("setp.le.u32 $, $, $;", pr, v, tile);
            INS("@$ add.u32 $, $, %d;", pr, addr, addr, 4 * step);
        }
        ptx_r local = ptx_reg(g->f, PTX_B32, "vlocal"), n = ptx_reg(g->f, PTX_B32, "vnmb");
        INS("ld.shared.u32 $, [$+%d];", v, addr, FA3_VT_PRE);
        INS("sub.u32 $, $, $;", local, tile, v);
        INS("ld.shared.u32 $, [$+%d];", n, addr, FA3_VT_NMB);
        INS("ld.shared.u32 $, [$+%d];", t->batch, addr, FA3_VT_SEQ);
        INS("div.u32 $, $, $;", t->head, local, n);
        INS("mul.lo.u32 $, $, $;", v, t->head, n);
        INS("sub.u32 $, $, $;", t->mblk, local, v);
        return;
    }
    /* the level whose tiles hold the tile: the last m with pre[m] > tile */
    for (int step = FA3_VT_LEVELS / 2; step; step /= 2) {
        INS("ld.shared.u32 $, [$+%d];", v, addr, FA3_VT_PRE + 4 * step);
        INS("setp.gt.u32 $, $, $;", pr, v, tile);
        INS("@$ add.u32 $, $, %d;", pr, addr, addr, 4 * step);
    }
    ptx_r jj = ptx_reg(g->f, PTX_B32, "vtj"), s = ptx_reg(g->f, PTX_B32, "vts");
    INS("ld.shared.u32 $, [$+%d];", v, addr, FA3_VT_PRE + 4);
    INS("sub.u32 $, $, $;", jj, tile, v);
    kg_udiv_param_to(g, s, jj, nh, FA3_DIV_HEADS);
    INS("mul.lo.u32 $, $, $;", v, s, nh);
    INS("sub.u32 $, $, $;", t->head, jj, v);
    INS("sub.u32 $, $, $;", v, addr, base);
    INS("shr.u32 $, $, 2;", t->mblk, v);
    INS("shl.b32 $, $, 2;", s, s);
    INS("add.u32 $, $, $;", s, s, base);
    INS("ld.shared.u32 $, [$+%d];", t->batch, s, FA3_VT_SEQ);
}
