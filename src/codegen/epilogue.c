/*
 * The epilogue of a tile: row sums reduced over the 4 threads of a row, O·(1/l) converted to the
 * dtype and stored, LSE = m·lse_mul + ln(l) (natural log; -inf for a row that saw no key).
 *
 * Split-KV writes fp32 partials instead (store_partials), from registers.
 *
 * O leaves by TMA when the plan stages it (o_stage) and the runtime found O TMA-storable (param
 * o_tma): thread 0 of the warpgroup waits until its previous store has read the staging, the
 * warpgroup writes its values into the staging boxes (64 rows × 128 B each, 128B swizzle: 16-byte
 * chunk c of row r at c ^ (r mod 8), conflict-free), fences them to the async proxy, and thread 0
 * stores each 64-column box with cp.async.bulk.tensor (rows past seqlen_q and columns past
 * head_dim_v clipped by the map). Staging: its own buffer (o_stage 1), the warpgroup's own rows
 * of the tile's Q buffer (o_stage 2, head_dim 192/256, where shared memory is full), so Q is
 * released by thread 0 after the store has read it, or (o_stage 3, the default there: ring_stage)
 * the tile's last key block's ring slot, K for consumer 0 and V for consumer 1, each taken once
 * the other consumer's GEMMs have read it (named barrier nb_ring + cw) and released by thread 0
 * after the store has read it. Otherwise st.global from registers (only real columns).
 *
 * Packed GQA: the thread's rows are packed rows r of the tile's kv head; each is query row
 * r / ratio of head kv_head · ratio + r mod ratio (gqa_row) for the register stores, LSE and the
 * partials; the TMA store takes the 5-D map {head_dim_v, ratio, seqlen_q, num_heads_k, batch} at
 * query row (m0 + 64·cw) / ratio (the runtime sets o_tma only when ratio divides 64).
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "kernel_abi.h"

/* Row r of the thread in the output tensors: its sequence row, plus (varlen) the sequence's
   first packed row. */
static ptx_r packed_row(kgen *g, cons *c, int r)
{
    if (!g->p->cfg.varlen)
        return c->row[r];
    ptx_r a = ptx_reg(g->f, PTX_B32, "prow");
    INS("add.s32 $, $, $;", a, c->row[r], c->t.qoff);
    return a;
}

/* Packed GQA: row r of the thread as (query row, head): packed = q·ratio + (head - kvhead·ratio).
   *past: q >= seqlen_q (the row is not stored). */
static void gqa_row(kgen *g, cons *c, int r, ptx_r *q, ptx_r *head)
{
    ptx_r ratio = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "ratio");
    ptx_r qr = ptx_reg(g->f, PTX_B32, "gq"), m = ptx_reg(g->f, PTX_B32, "gqm");
    ptx_r hin = ptx_reg(g->f, PTX_B32, "gqh"), h = ptx_reg(g->f, PTX_B32, "ghead");
    kg_udiv_param_to(g, qr, c->row[r], ratio, FA3_DIV_HPKV);
    INS("mul.lo.u32 $, $, $;", m, qr, ratio);
    INS("sub.u32 $, $, $;", hin, c->row[r], m);
    INS("mad.lo.u32 $, $, $, $;", h, c->t.kvhead, ratio, hin);
    *q = qr;
    *head = h;
}

ptx_r kg_q_empty_bar(kgen *g, cons *c)
{
    return kg_q_bar(g, g->mb_q_empty, c->qbuf);
}

/* O/l of row rr, columns 8j .. 8j+1 of box b as one packed register. */
static ptx_r packed_o(kgen *g, cons *c, int i, ptx_r inv)
{
    ptx_r lo = ptx_reg(g->f, PTX_F32, "olo"), hi = ptx_reg(g->f, PTX_F32, "ohi");
    ptx_r w = ptx_reg(g->f, PTX_B32, "opack");
    INS("mul.f32 $, $, $;", lo, ptx_at(c->o, i), inv);
    INS("mul.f32 $, $, $;", hi, ptx_at(c->o, i + 1), inv);
    INS("cvt.rn.%s.f32 $, $, $;", g->cvt, w, hi, lo);
    return w;
}

/* o_stage 3: this consumer's staging (bar 0), or the empty barrier it releases after the store
   (bar 1): the tile's last key block's K slot for consumer 0, its V slot for consumer 1 (the
   last block's stage is pps after the last PV). */
static ptx_r ring_slot(kgen *g, cons *c, int bar)
{
    const fa3_plan *p = g->p;
    ptx_r k = ptx_reg(g->f, PTX_B32, "rslot"), v = ptx_reg(g->f, PTX_B32, "rslot");
    ptx_r out = ptx_reg(g->f, PTX_B32, "rslot"), cw0 = ptx_reg(g->f, PTX_PRED, "cw0");
    if (bar) {
        INS("mov.u32 $, $;", k, kg_ring_bar(g, g->mb_k_empty, c->pps.stage, c->tmp.koff));
        INS("mov.u32 $, $;", v, kg_ring_bar(g, g->mb_v_empty, c->pps.stage, c->tmp.voff));
    } else {
        kg_ring_slot(g, k, c->pps.stage, p->smem_k_stage, p->smem_k);
        kg_ring_slot(g, v, c->pps.stage, p->smem_v_stage, p->smem_v);
    }
    INS("setp.eq.u32 $, $, 0;", cw0, c->cw);
    INS("selp.b32 $, $, $, $;", out, k, v, cw0);
    return out;
}

/* o_stage 3: thread 0 of the warpgroup releases its ring slot for the warpgroup's four warps
   (the stores have read it, or O left from registers); pred: thread 0 and a tile with blocks. */
static void ring_release(kgen *g, cons *c, ptx_r pred)
{
    const fa3_plan *p = g->p;
    ptx_r bar = ring_slot(g, c, 1);
    ptx_mbar_release(g->f, g->mb_k_empty[0], 4 * p->num_consumer_wg,
                     "consumer 0's epilogue (O staged in the K slot, 4 arrivals)");
    ptx_mbar_release(g->f, g->mb_v_empty[0], 4 * p->num_consumer_wg,
                     "consumer 1's epilogue (O staged in the V slot, 4 arrivals)");
    INS("@$ mbarrier.arrive.shared::cta.b64 _, [$], 4;", pred, bar);
}

static void store_tma(kgen *g, cons *c, const ptx_r inv[2], int lab_gmem, int lab_lse)
{
    const fa3_plan *p = g->p;
    const int st_base = p->o_stage == 2 ? p->smem_q : p->smem_o;
    const int st_wg = p->o_stage == 2 ? 8192 : p->smem_o_wg;
    const int st_box = p->o_stage == 2 ? p->block_m * 128 : 8192;
    ptx_r otma = kg_param(g, PTX_B32, "u32", FA3P_OFF_O_TMA, "otma");
    ptx_r no_tma = ptx_reg(g->f, PTX_PRED, "notma");
    INS("setp.eq.u32 $, $, 0;", no_tma, otma);
    if (p->o_stage >= 2) /* an empty tile has no Q (no ring slot) of its own to stage in */
        INS("setp.le.or.s32 $, $, 0, $;", no_tma, c->t.niters, no_tma);
    INS("@$ bra %s;", no_tma, ptx_lab(g->f, lab_gmem));
    ptx_r lead = kg_wg_lead(g, "wglead");
    INS("@$ cp.async.bulk.wait_group.read 0;", lead);
    ptx_r own = ptx_reg(g->f, PTX_B32, "epibar");
    INS("add.u32 $, $, %d;", own, c->cw, p->nb_epilogue); /* this warpgroup's own barrier */
    for (int w = 0; w < p->num_consumer_wg; w++)
        ptx_named_bar(g->f, p->nb_epilogue + w, 128);
    INS("bar.sync $, 128;", own);
    /* the staging row base of row 16·warp + lane/4, XOR-ed with its swizzle (lane/4) << 4 */
    ptx_r b0 = ptx_reg(g->f, PTX_B32, "stg"), b1 = ptx_reg(g->f, PTX_B32, "stg");
    ptx_r q4 = ptx_reg(g->f, PTX_B32, "lq"), r16 = ptx_reg(g->f, PTX_B32, "lr");
    ptx_r r17 = ptx_reg(g->f, PTX_B32, "lr"), r18 = ptx_reg(g->f, PTX_B32, "lr");
    ptx_r b2 = ptx_reg(g->f, PTX_B32, "stg"), c4 = ptx_reg(g->f, PTX_B32, "lc");
    ptx_r c5 = ptx_reg(g->f, PTX_B32, "lc"), b3 = ptx_reg(g->f, PTX_B32, "stg");
    ptx_r sw = ptx_reg(g->f, PTX_B32, "swz"), row_base = ptx_reg(g->f, PTX_B32, "stgrow");
    if (p->o_stage == 3) {
        INS("mov.u32 $, $;", b1, ring_slot(g, c, 0));
    } else {
        INS("mad.lo.u32 $, $, %d, $;", b0, c->cw, st_wg, g->sbase);
        INS("add.u32 $, $, %d;", b1, b0, st_base);
    }
    INS("shr.u32 $, $, 2;", q4, g->lane);
    INS("shl.b32 $, $, 4;", r16, g->warp);
    INS("add.u32 $, $, $;", r17, r16, q4);
    INS("shl.b32 $, $, 7;", r18, r17);
    INS("add.u32 $, $, $;", b2, b1, r18);
    INS("and.b32 $, $, 3;", c4, g->lane);
    INS("shl.b32 $, $, 2;", c5, c4);
    INS("add.u32 $, $, $;", b3, b2, c5);
    INS("shl.b32 $, $, 4;", sw, q4);
    INS("xor.b32 $, $, $;", row_base, b3, sw);
    if (p->o_stage != 3) /* o_stage 3: inside the K/V ring */
        ptx_smem_use(g->f, st_base, p->num_consumer_wg * st_wg);
    for (int ch = 0; ch < 8; ch++) {
        ptx_r at = ptx_reg(g->f, PTX_B32, "stgat");
        INS("xor.b32 $, $, %d;", at, row_base, ch << 4);
        for (int b = 0; b < p->hdv_chunks; b++)
            for (int rr = 0; rr < 2; rr++) {
                const int i = 4 * (8 * b + ch) + 2 * rr; /* row rr, columns 8·(8b+ch) .. */
                ptx_r w = packed_o(g, c, i, inv[rr]);
                INS("st.shared.b32 [$+%d], $;", at, b * st_box + rr * 1024, w);
            }
    }
    INS("fence.proxy.async.shared::cta;");
    INS("bar.sync $, 128;", own);
    ptx_r prm = ptx_reg(g->f, PTX_B64, "oparams"), tmo = ptx_reg(g->f, PTX_B64, "tmo");
    ptx_r tmo2 = ptx_reg(g->f, PTX_B64, "tmo");
    INS("mov.b64 $, fa3_params;", prm);
    INS("cvta.param.u64 $, $;", tmo, prm);
    INS("add.s64 $, $, %d;", tmo2, tmo, FA3P_OFF_TMAP_O);
    ptx_r orow = ptx_reg(g->f, PTX_B32, "orow"), src0 = ptx_reg(g->f, PTX_B32, "stg");
    ptx_r src = ptx_reg(g->f, PTX_B32, "stg");
    INS("mad.lo.u32 $, $, 64, $;", orow, c->cw, c->t.m0); /* first row of this warpgroup */
    if (p->cfg.pack_gqa) { /* its first query row (ratio divides 64: o_tma) */
        ptx_r ratio = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "ratio");
        kg_udiv_param_to(g, orow, orow, ratio, FA3_DIV_HPKV);
    }
    ptx_r obatch = c->t.batch;
    if (p->cfg.varlen) { /* counted back from the sequence's end (kernel_abi.h: max_seqlen_q) */
        ptx_r e = kg_param(g, PTX_B32, "u32", FA3P_OFF_MAX_SEQLEN_Q, "maxsq");
        INS("sub.s32 $, $, $;", orow, orow, c->t.sq);
        INS("add.s32 $, $, $;", orow, orow, e);
        obatch = ptx_reg(g->f, PTX_B32, "oend");
        INS("add.s32 $, $, $;", obatch, c->t.qoff, c->t.sq);
    }
    if (p->o_stage == 3) {
        INS("mov.u32 $, $;", src, b1);
    } else {
        INS("mad.lo.u32 $, $, %d, $;", src0, c->cw, st_wg, g->sbase);
        INS("add.u32 $, $, %d;", src, src0, st_base);
    }
    const char *pol = kg_l2_policy(g, FA3_L2_O);
    for (int b = 0; b < p->hdv_chunks; b++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, "obox");
        INS("add.u32 $, $, %d;", box, src, b * st_box);
        kg_tma_store(g, lead, tmo2, b * 64, orow, c->t.head, obatch, box, pol, p->cfg.pack_gqa);
    }
    INS("@$ cp.async.bulk.commit_group;", lead);
    if (p->o_stage == 2) {
        /* Q (the staging) is free once the store has read it: release it for the warpgroup's
           four warps */
        INS("@$ cp.async.bulk.wait_group.read 0;", lead);
        ptx_r qe = kg_q_empty_bar(g, c);
        ptx_mbar_release(g->f, g->mb_q_empty[0], 4 * p->num_consumer_wg,
                         "epilogue (O staged in Q, thread 0 of each warpgroup, 4 arrivals)");
        INS("@$ mbarrier.arrive.shared::cta.b64 _, [$], 4;", lead, qe);
    }
    if (p->o_stage == 3) { /* the slot is free once the store has read it */
        INS("@$ cp.async.bulk.wait_group.read 0;", lead);
        ring_release(g, c, lead);
    }
    INS("bra.uni %s;", ptx_lab(g->f, lab_lse));
}

static void store_gmem(kgen *g, cons *c, const ptx_r inv[2])
{
    const fa3_plan *p = g->p;
    const int no = p->hdv_chunks * 32;
    ptx_r optr = kg_param(g, PTX_B64, "u64", FA3P_OFF_O_PTR, "optr");
    ptx_r obs = kg_param(g, PTX_B64, "s64", FA3P_OFF_O_BATCH_STRIDE, "obs");
    ptx_r ors = kg_param(g, PTX_B64, "s64", FA3P_OFF_O_ROW_STRIDE, "ors");
    ptx_r ohs = kg_param(g, PTX_B64, "s64", FA3P_OFF_O_HEAD_STRIDE, "ohs");
    /* base address of the thread's two O rows at column 2·(lane%4) */
    ptx_r b64 = ptx_reg(g->f, PTX_B64, "ob"), h64 = ptx_reg(g->f, PTX_B64, "oh");
    ptx_r off = ptx_reg(g->f, PTX_B64, "ooff"), off2 = ptx_reg(g->f, PTX_B64, "ooff");
    ptx_r col = ptx_reg(g->f, PTX_B32, "ocol"), col2 = ptx_reg(g->f, PTX_B32, "ocol");
    ptx_r col64 = ptx_reg(g->f, PTX_B64, "ocol"), base = ptx_reg(g->f, PTX_B64, "obase");
    const int pack = p->cfg.pack_gqa;
    INS("cvt.u64.u32 $, $;", b64, c->t.tbatch); /* varlen: 0 (the rows are packed) */
    INS("mul.lo.s64 $, $, $;", off, b64, obs);
    if (pack) { /* each row its own head (gqa_row) */
        INS("mov.b64 $, $;", off2, off);
    } else {
        INS("cvt.u64.u32 $, $;", h64, c->t.head);
        INS("mad.lo.s64 $, $, $, $;", off2, h64, ohs, off);
    }
    INS("shl.b32 $, $, 1;", col, g->lane);
    INS("and.b32 $, $, 6;", col2, col);
    INS("cvt.u64.u32 $, $;", col64, col2);
    INS("add.s64 $, $, $;", base, off2, col64);
    ptx_r addr[2], qrow[2] = {c->row[0], c->row[1]};
    for (int r = 0; r < 2; r++) {
        ptx_r r64 = ptx_reg(g->f, PTX_B64, "orow"), e = ptx_reg(g->f, PTX_B64, "oel");
        ptx_r by = ptx_reg(g->f, PTX_B64, "oby");
        addr[r] = ptx_reg(g->f, PTX_B64, "oaddr");
        if (pack) {
            ptx_r hd, hr64 = ptx_reg(g->f, PTX_B64, "ohead"), e0 = ptx_reg(g->f, PTX_B64, "oel");
            gqa_row(g, c, r, &qrow[r], &hd);
            INS("cvt.s64.s32 $, $;", r64, qrow[r]);
            INS("cvt.u64.u32 $, $;", hr64, hd);
            INS("mad.lo.s64 $, $, $, $;", e0, hr64, ohs, base);
            INS("mad.lo.s64 $, $, $, $;", e, r64, ors, e0);
        } else {
            INS("cvt.s64.s32 $, $;", r64, packed_row(g, c, r));
            INS("mad.lo.s64 $, $, $, $;", e, r64, ors, base);
        }
        INS("shl.b64 $, $, 1;", by, e);
        INS("add.s64 $, $, $;", addr[r], by, optr);
    }
    ptx_r never = ptx_reg(g->f, PTX_PRED, "nostore");
    if (p->dbg_no_o_store)
        INS("setp.eq.u64 $, $, 1;", never, optr);
    for (int r = 0; r < 2; r++) {
        const int lab = ptx_label(g->f, "skiprow");
        ptx_r past = ptx_reg(g->f, PTX_PRED, "pastsq");
        INS("setp.ge.s32 $, $, $;", past, qrow[r], c->t.sq);
        INS("@$ bra %s;", past, ptx_lab(g->f, lab));
        for (int i = 0; i < no; i += 2) {
            /* columns 8·(i/4) .. +7 of this group; padding beyond head_dim_v is not stored */
            if (acc_row(i) != r || 8 * (i >> 2) >= p->cfg.head_dim_v)
                continue;
            ptx_r w = packed_o(g, c, i, inv[r]);
            /* dbg_no_o_store: the store is predicated on o_ptr == 1 (never true at run time),
               so O is still computed (an unconditional skip lets ptxas delete the PV GEMMs) */
            if (p->dbg_no_o_store)
                INS("@$ st.global.b32 [$+%d], $;", never, addr[r], 2 * acc_col(i), w);
            else
                INS("st.global.b32 [$+%d], $;", addr[r], 2 * acc_col(i), w);
        }
        ptx_place(g->f, lab);
    }
    if (p->o_stage == 3) { /* stored from registers: the slot was never written; every thread of
                              the warpgroup passed its last GEMM's wait before the nb_ring sync
                              (kg_epilogue), so thread 0 may release it for all four warps */
        ptx_r rel = kg_wg_lead(g, "rrel");
        INS("setp.gt.and.s32 $, $, 0, $;", rel, c->t.niters, rel);
        ring_release(g, c, rel);
    }
    if (p->o_stage == 2) {
        /* stored from registers: release Q (lane 0 of each warp) if this tile loaded one */
        ptx_r rel = ptx_reg(g->f, PTX_PRED, "qrel");
        INS("setp.eq.u32 $, $, 0;", rel, g->lane);
        INS("setp.gt.and.s32 $, $, 0, $;", rel, c->t.niters, rel);
        ptx_r qe = kg_q_empty_bar(g, c);
        ptx_mbar_release(g->f, g->mb_q_empty[0], 4 * p->num_consumer_wg,
                         "epilogue (O from registers, lane 0 of each warp)");
        INS("@$ mbarrier.arrive.shared::cta.b64 _, [$];", rel, qe);
    }
}

static void store_lse(kgen *g, cons *c, int lab_end)
{
    ptx_r lptr = kg_param(g, PTX_B64, "u64", FA3P_OFF_LSE_PTR, "lseptr");
    ptx_r nolse = ptx_reg(g->f, PTX_PRED, "nolse"), notlead = ptx_reg(g->f, PTX_PRED, "notq0");
    ptx_r q = ptx_reg(g->f, PTX_B32, "lq");
    INS("setp.eq.u64 $, $, 0;", nolse, lptr);
    INS("@$ bra %s;", nolse, ptx_lab(g->f, lab_end));
    INS("and.b32 $, $, 3;", q, g->lane);
    INS("setp.ne.u32 $, $, 0;", notlead, q);
    INS("@$ bra %s;", notlead, ptx_lab(g->f, lab_end));
    ptx_r nh = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    ptx_r bh = ptx_reg(g->f, PTX_B32, "bh"), bh64 = ptx_reg(g->f, PTX_B64, "bh");
    ptx_r sq64 = ptx_reg(g->f, PTX_B64, "sq"), rows = ptx_reg(g->f, PTX_B64, "bhrows");
    const int pack = g->p->cfg.pack_gqa;
    if (!pack) {
        INS("mad.lo.u32 $, $, $, $;", bh, c->t.tbatch, nh, c->t.head); /* varlen: (head, total_q) */
        INS("cvt.u64.u32 $, $;", bh64, bh);
        INS("cvt.u64.u32 $, $;", sq64, g->sq);
        INS("mul.lo.s64 $, $, $;", rows, bh64, sq64);
    }
    for (int r = 0; r < 2; r++) {
        const int lab = ptx_label(g->f, "skiplse");
        ptx_r past = ptx_reg(g->f, PTX_PRED, "pastsq"), seen = ptx_reg(g->f, PTX_PRED, "seen");
        ptx_r lg = ptx_reg(g->f, PTX_F32, "lg"), ln = ptx_reg(g->f, PTX_F32, "ln");
        ptx_r v = ptx_reg(g->f, PTX_F32, "lse"), out = ptx_reg(g->f, PTX_F32, "lse");
        ptx_r qr = c->row[r];
        if (pack) { /* the row's own (head, query row): ((b·nh + head)·sq + q) */
            ptx_r hd;
            gqa_row(g, c, r, &qr, &hd);
            INS("mad.lo.u32 $, $, $, $;", bh, c->t.tbatch, nh, hd);
            INS("cvt.u64.u32 $, $;", bh64, bh);
            INS("cvt.u64.u32 $, $;", sq64, g->sq);
            INS("mul.lo.s64 $, $, $;", rows, bh64, sq64);
        }
        INS("setp.ge.s32 $, $, $;", past, qr, c->t.sq);
        INS("@$ bra %s;", past, ptx_lab(g->f, lab));
        INS("lg2.approx.f32 $, $;", lg, c->l_lse[r]);
        if (g->p->fp8) /* l carries P's 2^8 (softmax.c) */
            INS("add.f32 $, $, 0fC1000000;", lg, lg);
        if (g->p->fast_exp) /* l's weights were 2^e too large (softmax.c) */
            INS("sub.f32 $, $, $;", lg, lg, c->e[r]);
        INS("mul.f32 $, $, 0f3F317218;", ln, lg); /* ln(2) */
        INS("fma.rn.f32 $, $, $, $;", v, c->m[r], c->lse_mul, ln);
        INS("setp.gt.f32 $, $, " ZERO_F ";", seen, c->l[r]);
        INS("selp.f32 $, $, " NEG_INF ", $;", out, v, seen);
        ptx_r r64 = ptx_reg(g->f, PTX_B64, "lrow"), e = ptx_reg(g->f, PTX_B64, "lel");
        ptx_r by = ptx_reg(g->f, PTX_B64, "lby"), a = ptx_reg(g->f, PTX_B64, "laddr");
        INS("cvt.s64.s32 $, $;", r64, pack ? qr : packed_row(g, c, r));
        INS("add.s64 $, $, $;", e, r64, rows);
        INS("shl.b64 $, $, 2;", by, e);
        INS("add.s64 $, $, $;", a, by, lptr);
        INS("st.global.f32 [$], $;", a, out);
        ptx_place(g->f, lab);
    }
}

/* Split-KV: the split's fp32 partials from registers, O_s = O/l (e4m3: times descale_v) at
   o_partial[split][row][col] and LSE_s at lse_partial[split][row], row indexed as the LSE output
   less partial_row_base (kernel_abi.h; 0 but in a dense call's tail split); rows past the sequence are not written, a row that saw no key of the split
   gets O_s = 0 and LSE_s = -inf. */
static void store_partials(kgen *g, cons *c, const ptx_r inv[2])
{
    const fa3_plan *p = g->p;
    const int no = p->hdv_chunks * 32, hdv = p->cfg.head_dim_v;
    ptx_r optr = kg_param(g, PTX_B64, "u64", FA3P_OFF_O_PARTIAL, "opart");
    ptx_r lptr = kg_param(g, PTX_B64, "u64", FA3P_OFF_LSE_PARTIAL, "lpart");
    ptx_r prows = kg_param(g, PTX_B32, "u32", FA3P_OFF_PARTIAL_ROWS, "prows");
    ptx_r nh = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    /* the split's first row: split · partial_rows, plus the (batch, head)'s: (b·nh + h)·sq */
    ptx_r bh = ptx_reg(g->f, PTX_B32, "bh"), bh64 = ptx_reg(g->f, PTX_B64, "bh");
    ptx_r sq64 = ptx_reg(g->f, PTX_B64, "sq"), s64 = ptx_reg(g->f, PTX_B64, "sp");
    ptx_r pr64 = ptx_reg(g->f, PTX_B64, "sp"), sbase = ptx_reg(g->f, PTX_B64, "sprow");
    ptx_r rows = ptx_reg(g->f, PTX_B64, "bhrows");
    const int pack = p->cfg.pack_gqa;
    if (!pack)
        INS("mad.lo.u32 $, $, $, $;", bh, c->t.tbatch, nh, c->t.head); /* varlen: (head, total_q) */
    if (!pack)
        INS("cvt.u64.u32 $, $;", bh64, bh);
    INS("cvt.u64.u32 $, $;", sq64, g->sq);
    INS("cvt.u64.u32 $, $;", s64, c->t.split);
    INS("cvt.u64.u32 $, $;", pr64, prows);
    INS("mul.lo.s64 $, $, $;", sbase, s64, pr64);
    if (!p->cfg.varlen) { /* a dense call's tail split: its partial rows from partial_row_base */
        ptx_r prb = kg_param(g, PTX_B32, "u32", FA3P_OFF_PARTIAL_ROW_BASE, "prbase");
        ptx_r prb64 = ptx_reg(g->f, PTX_B64, "prbase");
        INS("cvt.u64.u32 $, $;", prb64, prb);
        INS("sub.s64 $, $, $;", sbase, sbase, prb64);
    }
    if (!pack)
        INS("mad.lo.s64 $, $, $, $;", rows, bh64, sq64, sbase);
    /* the thread's column 2·(lane%4); LSE from the row's first thread */
    ptx_r col = ptx_reg(g->f, PTX_B32, "ocol"), col2 = ptx_reg(g->f, PTX_B32, "ocol");
    ptx_r col64 = ptx_reg(g->f, PTX_B64, "ocol"), lead = ptx_reg(g->f, PTX_PRED, "lselead");
    INS("shl.b32 $, $, 1;", col, g->lane);
    INS("and.b32 $, $, 6;", col2, col);
    INS("cvt.u64.u32 $, $;", col64, col2);
    INS("setp.eq.u32 $, $, 0;", lead, col2);
    for (int r = 0; r < 2; r++) {
        const int lab = ptx_label(g->f, "skiprow");
        ptx_r past = ptx_reg(g->f, PTX_PRED, "pastsq");
        ptx_r qr = c->row[r];
        if (pack) { /* the row's own (head, query row), indexed as the LSE output */
            ptx_r hd;
            gqa_row(g, c, r, &qr, &hd);
            INS("mad.lo.u32 $, $, $, $;", bh, c->t.tbatch, nh, hd);
            INS("cvt.u64.u32 $, $;", bh64, bh);
            INS("mad.lo.s64 $, $, $, $;", rows, bh64, sq64, sbase);
        }
        INS("setp.ge.s32 $, $, $;", past, qr, c->t.sq);
        INS("@$ bra %s;", past, ptx_lab(g->f, lab));
        ptx_r r64 = ptx_reg(g->f, PTX_B64, "prow"), e = ptx_reg(g->f, PTX_B64, "prow");
        INS("cvt.s64.s32 $, $;", r64, pack ? qr : packed_row(g, c, r));
        INS("add.s64 $, $, $;", e, r64, rows); /* the partial row */
        /* LSE_s = m·lse_mul + ln l, -inf without a key */
        ptx_r lg = ptx_reg(g->f, PTX_F32, "lg"), ln = ptx_reg(g->f, PTX_F32, "ln");
        ptx_r v = ptx_reg(g->f, PTX_F32, "lse"), out = ptx_reg(g->f, PTX_F32, "lse");
        ptx_r seen = ptx_reg(g->f, PTX_PRED, "seen");
        INS("lg2.approx.f32 $, $;", lg, c->l_lse[r]);
        if (p->fp8) /* l carries P's 2^8 (softmax.c) */
            INS("add.f32 $, $, 0fC1000000;", lg, lg);
        if (g->p->fast_exp) /* l's weights were 2^e too large (softmax.c) */
            INS("sub.f32 $, $, $;", lg, lg, c->e[r]);
        INS("mul.f32 $, $, 0f3F317218;", ln, lg); /* ln(2) */
        INS("fma.rn.f32 $, $, $, $;", v, c->m[r], c->lse_mul, ln);
        INS("setp.gt.f32 $, $, " ZERO_F ";", seen, c->l[r]);
        INS("selp.f32 $, $, " NEG_INF ", $;", out, v, seen);
        ptx_r lby = ptx_reg(g->f, PTX_B64, "lby"), la = ptx_reg(g->f, PTX_B64, "laddr");
        INS("shl.b64 $, $, 2;", lby, e);
        INS("add.s64 $, $, $;", la, lby, lptr);
        INS("@$ st.global.f32 [$], $;", lead, la, out);
        /* O_s: element (row, col) at (row·head_dim_v + col)·4 */
        ptx_r oe = ptx_reg(g->f, PTX_B64, "oel"), oby = ptx_reg(g->f, PTX_B64, "oby");
        ptx_r oa = ptx_reg(g->f, PTX_B64, "oaddr");
        INS("mad.lo.s64 $, $, %d, $;", oe, e, hdv, col64);
        INS("shl.b64 $, $, 2;", oby, oe);
        INS("add.s64 $, $, $;", oa, oby, optr);
        for (int i = 0; i < no; i += 2) {
            /* columns 8·(i/4) .. +1 of this thread; padding beyond head_dim_v is not stored */
            if (acc_row(i) != r || 8 * (i >> 2) >= hdv)
                continue;
            ptx_r lo = ptx_reg(g->f, PTX_F32, "olo"), hi = ptx_reg(g->f, PTX_F32, "ohi");
            INS("mul.f32 $, $, $;", lo, ptx_at(c->o, i), inv[r]);
            INS("mul.f32 $, $, $;", hi, ptx_at(c->o, i + 1), inv[r]);
            INS("st.global.v2.f32 [$+%d], {$, $};", oa, 4 * acc_col(i), lo, hi);
        }
        ptx_place(g->f, lab);
    }
}

void kg_epilogue(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    ptx_place(g->f, c->lab_epilogue);
    ptx_r inv[2];
    for (int r = 0; r < 2; r++) {
        for (int lanes = 1; lanes <= 2; lanes *= 2) {
            ptx_r o = ptx_reg(g->f, PTX_F32, "lsh");
            INS("shfl.sync.bfly.b32 $, $, %d, 31, -1;", o, c->l[r], lanes);
            INS("add.f32 $, $, $;", c->l[r], c->l[r], o);
            if (c->l_lse[r].id != c->l[r].id) {
                INS("shfl.sync.bfly.b32 $, $, %d, 31, -1;", o, c->l_lse[r], lanes);
                INS("add.f32 $, $, $;", c->l_lse[r], c->l_lse[r], o);
            }
        }
        ptx_r pos = ptx_reg(g->f, PTX_PRED, "lpos"), rc = ptx_reg(g->f, PTX_F32, "rcp");
        inv[r] = ptx_reg(g->f, PTX_F32, "linv");
        INS("setp.gt.f32 $, $, " ZERO_F ";", pos, c->l[r]);
        INS("rcp.rn.f32 $, $;", rc, c->l[r]);
        if (p->fp8) /* O = descale_v · (P·V8)/l */
            INS("mul.rn.f32 $, $, $;", rc, rc, c->ds.v);
        INS("selp.f32 $, $, " ZERO_F ", $;", inv[r], rc, pos);
    }
    if (p->cfg.split_kv) {
        store_partials(g, c, inv);
        return;
    }
    const int lab_lse = ptx_label(g->f, "epi_lse"), lab_end = ptx_label(g->f, "epi_end");
    if (p->o_stage == 3) {
        /* the other consumer's GEMMs have read this consumer's slot (mainloop.c: nb_ring) */
        const int lab = ptx_label(g->f, "ring_ready");
        ptx_r none = ptx_reg(g->f, PTX_PRED, "noblk"), id = ptx_reg(g->f, PTX_B32, "ringbar");
        INS("setp.le.s32 $, $, 0;", none, c->t.niters);
        if (!p->pingpong) /* consumer 0 took its own at the last PV (mainloop.c last_v_release) */
            INS("setp.eq.or.u32 $, $, 0, $;", none, c->cw, none);
        INS("@$ bra %s;", none, ptx_lab(g->f, lab));
        INS("add.u32 $, $, %d;", id, c->cw, p->nb_ring);
        INS("bar.sync $, 256;", id);
        ptx_place(g->f, lab);
    }
    if (p->o_stage) {
        const int lab_gmem = ptx_label(g->f, "epi_gmem");
        store_tma(g, c, inv, lab_gmem, lab_lse);
        ptx_place(g->f, lab_gmem);
    }
    store_gmem(g, c, inv);
    if (p->o_stage)
        ptx_place(g->f, lab_lse);
    store_lse(g, c, lab_end);
    ptx_place(g->f, lab_end);
}
