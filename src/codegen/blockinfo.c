/*
 * Which keys each query row sees, in one place (FA4's BlockInfo and Mask): the tile's key-block
 * range comes from the tile decode (tile_order.h); here the bounds of each row, the test of whether
 * a key block needs the mask at all, and the mask itself.
 *
 * Row i sees keys [i + sk - sq - wl, i + sk - sq + wr] ∩ [0, sk - 1] (bottom-right aligned; wl or
 * wr = -1: unlimited on that side; mask none and causal reach the kernel as windows (-1, -1) and
 * (-1, 0)). A key block needs the mask when it ends past the last key every row of the tile sees
 * or starts before the first; the loop decides that at its top, where no wgmma is in flight.
 *
 * Packed GQA: the tile's rows are packed rows r = i · ratio + (head - kv_head · ratio), and the
 * bounds above are those of query row i = r / ratio (a division per row and tile).
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "kernel_abi.h"

void kg_rows_init(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    /* r0 = m0 + 64·cw + 16·warp + lane/4, r1 = r0 + 8 */
    ptx_r a = ptx_reg(g->f, PTX_B32, "rowa"), b = ptx_reg(g->f, PTX_B32, "rowb");
    ptx_r d = ptx_reg(g->f, PTX_B32, "rowc"), e = ptx_reg(g->f, PTX_B32, "rowd");
    c->row[0] = ptx_reg(g->f, PTX_B32, "row0");
    c->row[1] = ptx_reg(g->f, PTX_B32, "row1");
    INS("shl.b32 $, $, 6;", a, c->cw);
    INS("add.s32 $, $, $;", b, a, c->t.m0);
    INS("shl.b32 $, $, 4;", d, g->warp);
    INS("add.s32 $, $, $;", e, b, d);
    ptx_r q = ptx_reg(g->f, PTX_B32, "lane4");
    INS("shr.u32 $, $, 2;", q, g->lane);
    INS("add.s32 $, $, $;", c->row[0], e, q);
    INS("add.s32 $, $, 8;", c->row[1], c->row[0]);
    ptx_r diag = ptx_reg(g->f, PTX_B32, "diag");
    ptx_r klim = ptx_reg(g->f, PTX_B32, "klim");
    ptx_r wl_none = ptx_reg(g->f, PTX_PRED, "wlnone"), wr_none = ptx_reg(g->f, PTX_PRED, "wrnone");
    INS("sub.s32 $, $, $;", diag, c->t.sk, c->t.sq); /* the tile's sequence (varlen) */
    INS("sub.s32 $, $, 1;", klim, c->t.sk);
    INS("setp.lt.s32 $, $, 0;", wl_none, g->wl);
    INS("setp.lt.s32 $, $, 0;", wr_none, g->wr);
    const int pack = p->cfg.pack_gqa;
    ptx_r ratio = {0};
    if (pack)
        ratio = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "ratio");
    for (int r = 0; r < 2; r++) {
        ptx_r at = ptx_reg(g->f, PTX_B32, "rdiag");
        ptx_r f0 = ptx_reg(g->f, PTX_B32, "kf"), l0 = ptx_reg(g->f, PTX_B32, "kl");
        ptx_r l1 = ptx_reg(g->f, PTX_B32, "kl");
        c->kfirst[r] = ptx_reg(g->f, PTX_B32, r ? "kfirst1" : "kfirst0");
        c->klast[r] = ptx_reg(g->f, PTX_B32, r ? "klast1" : "klast0");
        if (pack) {
            ptx_r qi = ptx_reg(g->f, PTX_B32, "qidx");
            kg_udiv_param_to(g, qi, c->row[r], ratio, FA3_DIV_HPKV);
            INS("add.s32 $, $, $;", at, qi, diag);
        } else {
            INS("add.s32 $, $, $;", at, c->row[r], diag);
        }
        INS("sub.s32 $, $, $;", f0, at, g->wl);
        INS("selp.b32 $, 0, $, $;", c->kfirst[r], f0, wl_none);
        INS("add.s32 $, $, $;", l0, at, g->wr);
        INS("min.s32 $, $, $;", l1, l0, klim);
        INS("selp.b32 $, $, $, $;", c->klast[r], klim, l1, wr_none);
    }
    /* the tile's bounds: the first row's last key, the last row's first key */
    ptx_r t0 = ptx_reg(g->f, PTX_B32, "al"), t1 = ptx_reg(g->f, PTX_B32, "al");
    ptx_r t2 = ptx_reg(g->f, PTX_B32, "al");
    c->all_last = ptx_reg(g->f, PTX_B32, "alllast");
    c->all_first = ptx_reg(g->f, PTX_B32, "allfirst");
    ptx_r first = c->t.m0, lastr = {0};
    if (pack) { /* query rows m0 / ratio .. (m0 + bm - 1) / ratio */
        first = ptx_reg(g->f, PTX_B32, "qfirst");
        lastr = ptx_reg(g->f, PTX_B32, "qlast");
        kg_udiv_param_to(g, first, c->t.m0, ratio, FA3_DIV_HPKV);
        INS("add.s32 $, $, %d;", lastr, c->t.m0, p->block_m - 1);
        kg_udiv_param_to(g, lastr, lastr, ratio, FA3_DIV_HPKV);
    }
    INS("add.s32 $, $, $;", t0, first, diag);
    INS("add.s32 $, $, $;", t1, t0, g->wr);
    INS("selp.b32 $, $, $, $;", t2, klim, t1, wr_none);
    INS("min.s32 $, $, $;", c->all_last, t2, klim);
    ptx_r u0 = ptx_reg(g->f, PTX_B32, "af"), u1 = ptx_reg(g->f, PTX_B32, "af");
    ptx_r u2 = ptx_reg(g->f, PTX_B32, "af");
    if (pack)
        INS("mov.u32 $, $;", u0, lastr);
    else
        INS("add.s32 $, $, %d;", u0, c->t.m0, p->block_m - 1);
    INS("add.s32 $, $, $;", u1, u0, diag);
    INS("sub.s32 $, $, $;", u2, u1, g->wl);
    INS("selp.b32 $, 0, $, $;", c->all_first, u2, wl_none);
}

/* diag_half: where the last key any row of this consumer sees (that of its last row, 64·cw + 63
   of the tile) lies in key block c->n: *half when it is below the block's middle n·bn + bn/2
   (the block's first bn/2 columns are all its scores can use), *none when it is below the
   block (no row sees any of its keys). Rows past the sequence count too (their bound is the
   largest), which only makes the tests stricter. */
void kg_first_block_reach(kgen *g, cons *c, ptx_r *half, ptx_r *none)
{
    const fa3_plan *p = g->p;
    ptx_r r = ptx_reg(g->f, PTX_B32, "hrow"), k = ptx_reg(g->f, PTX_B32, "hkey");
    ptx_r mid = ptx_reg(g->f, PTX_B32, "hmid");
    *half = ptx_reg(g->f, PTX_PRED, "half");
    *none = ptx_reg(g->f, PTX_PRED, "nokeys");
    ptx_r wr_none = ptx_reg(g->f, PTX_PRED, "hwrnone");
    INS("mad.lo.s32 $, $, 64, $;", r, c->cw, c->t.m0);
    INS("add.s32 $, $, 63;", r, r);
    if (p->cfg.pack_gqa) {
        ptx_r ratio = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "ratio");
        kg_udiv_param_to(g, r, r, ratio, FA3_DIV_HPKV);
    }
    INS("add.s32 $, $, $;", k, r, c->t.sk); /* r + sk - sq + wr, at most sk - 1 */
    INS("sub.s32 $, $, $;", k, k, c->t.sq);
    INS("add.s32 $, $, $;", k, k, g->wr);
    INS("sub.s32 $, $, 1;", r, c->t.sk);
    INS("min.s32 $, $, $;", k, k, r);
    INS("setp.lt.s32 $, $, 0;", wr_none, g->wr);
    INS("selp.b32 $, $, $, $;", k, r, k, wr_none);
    INS("mad.lo.s32 $, $, %d, %d;", mid, c->n, p->block_n, p->block_n / 2);
    INS("setp.lt.s32 $, $, $;", *half, k, mid);
    INS("sub.s32 $, $, %d;", mid, mid, p->block_n / 2);
    INS("setp.lt.s32 $, $, $;", *none, k, mid);
}

/* 1 when key block c->n ends past the tile's all_last or starts before its all_first. */
ptx_r kg_block_needs_mask(kgen *g, cons *c)
{
    const int bn = g->p->block_n;
    ptx_r k0 = c->tmp.bk0, k1 = c->tmp.bk1, need = c->tmp.need;
    INS("mul.lo.s32 $, $, %d;", k0, c->n, bn);
    INS("add.s32 $, $, %d;", k1, k0, bn - 1); /* last key of the block */
    INS("setp.gt.s32 $, $, $;", need, k1, c->all_last);
    INS("setp.lt.or.s32 $, $, $, $;", need, k0, c->all_first, need);
    return need;
}

/* S = -inf where the key is outside its row's bounds. Relative to the thread's base column the
   bounds become offsets, so each element costs one compare per bound against its column, an
   immediate; only local windows have a first visible key above 0. */
void kg_apply_mask(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    const int lower = p->cfg.mask == FA3_MASK_LOCAL;
    ptx_r col0 = c->tmp.col0, l2 = c->tmp.lanecol;
    INS("mul.lo.s32 $, $, %d;", col0, c->n, p->block_n);
    INS("shl.b32 $, $, 1;", l2, g->lane);
    INS("and.b32 $, $, 6;", l2, l2);
    INS("add.s32 $, $, $;", col0, col0, l2); /* this thread's base key column */
    for (int r = 0; r < 2; r++) {
        INS("sub.s32 $, $, $;", c->tmp.rlast[r], c->klast[r], col0);
        if (lower)
            INS("sub.s32 $, $, $;", c->tmp.rfirst[r], c->kfirst[r], col0);
    }
    const int ns = kg_ns(g, c);
    ptx_r out = g->sc.pt;
    for (int i = 0; i < ns; i++) {
        const int r = acc_row(i);
        INS("setp.lt.s32 $, $, %d;", out, c->tmp.rlast[r], acc_col(i)); /* past the last key */
        if (lower) /* before the first key */
            INS("setp.gt.or.s32 $, $, %d, $;", out, c->tmp.rfirst[r], acc_col(i), out);
        INS("selp.f32 $, " NEG_INF ", $, $;", ptx_at(c->s, i), ptx_at(c->s, i), out);
    }
}
