/*
 * Warpgroup 0, the producer: gives up registers (setmaxnreg.dec) and has one thread issue every
 * TMA load. Per tile: Q into buffer qc mod q_bufs once the consumers released that buffer's
 * previous use (with one Q buffer after the tile's first K, so K is not held up behind the last
 * QK of the tile before); per key block n = nmax-1 .. nmin: K, then V, into ring stage s once the
 * consumers released it. At the end it waits until the consumers released every stage still in
 * use, so no TMA write outlives the producer thread.
 */
#include "codegen/kgen.h"
#include "kernel_abi.h"

typedef struct prod {
    ptx_r tmq, tmk, tmv, qc, off;
    tile_info t;
} prod;

/* Q of the tile (use number qc) into its buffer, completing the buffer's q_full. */
static void load_q(kgen *g, prod *pr)
{
    const fa3_plan *p = g->p;
    const int bm = p->block_m;
    const int lab_free = ptx_label(g->f, "qfree");
    ptx_r first = ptx_reg(g->f, PTX_PRED, "qfirst");
    INS("setp.lt.u32 $, $, %d;", first, pr->qc, p->q_bufs);
    INS("@$ bra %s;", first, ptx_lab(g->f, lab_free));
    /* the buffer's previous use, by the parity of its use count */
    ptx_r buf = ptx_reg(g->f, PTX_B32, "qbuf");
    ptx_r par = ptx_reg(g->f, PTX_B32, "qpar");
    if (p->q_bufs == 1) {
        INS("add.u32 $, $, 1;", par, pr->qc);
        INS("and.b32 $, $, 1;", par, par);
        INS("mov.u32 $, 0;", buf);
    } else {
        INS("and.b32 $, $, 1;", buf, pr->qc);
        INS("shr.u32 $, $, 1;", par, pr->qc);
        INS("add.u32 $, $, 1;", par, par);
        INS("and.b32 $, $, 1;", par, par);
    }
    ptx_r empty = kg_q_bar(g, g->mb_q_empty, buf);
    kg_mbar_wait(g, empty, par, g->mb_q_empty[0]);
    ptx_place(g->f, lab_free);
    ptx_r qbuf = ptx_reg(g->f, PTX_B32, "qbuf");
    ptx_r dst = ptx_reg(g->f, PTX_B32, "qdst");
    if (p->q_bufs == 1) {
        INS("mov.u32 $, 0;", qbuf);
        INS("add.u32 $, $, %d;", dst, g->sbase, p->smem_q);
    } else {
        ptx_r t = ptx_reg(g->f, PTX_B32, "qdst");
        INS("and.b32 $, $, 1;", qbuf, pr->qc);
        INS("mad.lo.u32 $, $, %d, $;", t, qbuf, p->smem_q_buf, g->sbase);
        INS("add.u32 $, $, %d;", dst, t, p->smem_q);
    }
    ptx_smem_use(g->f, p->smem_q, p->q_bufs * p->smem_q_buf);
    ptx_r full = kg_q_bar(g, g->mb_q_full, qbuf);
    INS("add.u32 $, $, 1;", pr->qc, pr->qc);
    /* Q: hd_chunks boxes of {64 columns, bm rows} */
    INS("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$], %d;", full, p->hd_chunks * bm * 128);
    for (int c = 0; c < p->hd_chunks; c++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, "qbox");
        INS("add.u32 $, $, %d;", box, dst, c * bm * 128);
        INS("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [$], "
            "[$, {%d, $, $, $}], [$];",
            box, pr->tmq, c * 64, pr->t.m0, pr->t.head, pr->t.batch, full);
    }
}

/* One ring operand (K or V) of block row0 into stage s: wait for its release, then its boxes. */
static void load_kv(kgen *g, prod *pr, pipe_state *ps, ptx_r row0, int is_v)
{
    const fa3_plan *p = g->p;
    const int bn = p->block_n;
    const int *empty_mb = is_v ? g->mb_v_empty : g->mb_k_empty;
    const int *full_mb = is_v ? g->mb_v_full : g->mb_k_full;
    const int chunks = is_v ? p->hdv_chunks : p->hd_chunks;
    const int stage_bytes = is_v ? p->smem_v_stage : p->smem_k_stage;
    const int base = is_v ? p->smem_v : p->smem_k;
    ptx_r empty = kg_ring_bar(g, empty_mb, ps->stage, pr->off);
    ptx_r par = ptx_reg(g->f, PTX_B32, "epar");
    INS("xor.b32 $, $, 1;", par, ps->phase); /* first pass: parity 1 falls through */
    kg_mbar_wait(g, empty, par, empty_mb[0]);
    ptx_r full = kg_ring_bar(g, full_mb, ps->stage, pr->off);
    INS("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$], %d;", full, stage_bytes);
    ptx_r st = ptx_reg(g->f, PTX_B32, is_v ? "vst" : "kst");
    INS("mad.lo.u32 $, $, %d, $;", st, ps->stage, stage_bytes, g->sbase);
    ptx_smem_use(g->f, base, p->stages * stage_bytes);
    for (int c = 0; c < chunks; c++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, is_v ? "vbox" : "kbox");
        INS("add.u32 $, $, %d;", box, st, base + c * bn * 128);
        INS("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [$], "
            "[$, {%d, $, $, $}], [$];",
            box, is_v ? pr->tmv : pr->tmk, c * 64, row0, pr->t.kvhead, pr->t.batch, full);
    }
}

void kg_producer(kgen *g)
{
    const fa3_plan *p = g->p;
    prod pr;
    INS("setmaxnreg.dec.sync.aligned.u32 %d;", p->producer_regs);
    ptx_r notfirst = ptx_reg(g->f, PTX_PRED, "notthr0");
    INS("setp.ne.u32 $, $, 0;", notfirst, g->thr);
    INS("@$ bra %s;", notfirst, ptx_lab(g->f, g->lab_done));
    ptx_r params = ptx_reg(g->f, PTX_B64, "params");
    pr.tmq = ptx_reg(g->f, PTX_B64, "tmq");
    pr.tmk = ptx_reg(g->f, PTX_B64, "tmk");
    pr.tmv = ptx_reg(g->f, PTX_B64, "tmv");
    ptx_r gen = ptx_reg(g->f, PTX_B64, "pgen");
    INS("mov.b64 $, fa3_params;", params);
    INS("cvta.param.u64 $, $;", gen, params);
    INS("add.s64 $, $, %d;", pr.tmk, gen, FA3P_OFF_TMAP_K);
    INS("add.s64 $, $, %d;", pr.tmv, gen, FA3P_OFF_TMAP_V);
    INS("add.s64 $, $, %d;", pr.tmq, gen, FA3P_OFF_TMAP_Q);
    kg_scratch_init(g);
    pr.off = ptx_reg(g->f, PTX_B32, "off");
    pipe_state ps = kg_pipe_init(g);
    pr.qc = ptx_reg(g->f, PTX_B32, "qc");
    ptx_r totit = ptx_reg(g->f, PTX_B32, "totit");
    g->round = ptx_reg(g->f, PTX_B32, "round");
    INS("mov.u32 $, 0;", pr.qc);
    INS("mov.u32 $, 0;", totit);
    INS("mov.u32 $, 0;", g->round);

    /* the persistent loop over this CTA's tiles */
    const int lab_tile = ptx_label(g->f, "prod_tile"), lab_end = ptx_label(g->f, "prod_end");
    const int lab_next = ptx_label(g->f, "prod_next"), lab_loop = ptx_label(g->f, "prod_loop");
    ptx_place(g->f, lab_tile);
    pr.t = kg_tile_next(g, lab_end);
    ptx_r empty = ptx_reg(g->f, PTX_PRED, "notile");
    INS("setp.le.s32 $, $, 0;", empty, pr.t.niters);
    INS("@$ bra %s;", empty, ptx_lab(g->f, lab_next));
    if (p->q_bufs == 2)
        load_q(g, &pr);
    ptx_r it = ptx_reg(g->f, PTX_B32, "it");
    INS("mov.u32 $, 0;", it);
    ptx_place(g->f, lab_loop);
    ptx_r n = ptx_reg(g->f, PTX_B32, "n"), row0 = ptx_reg(g->f, PTX_B32, "krow");
    INS("sub.s32 $, $, $;", n, pr.t.nmax, it);
    INS("sub.s32 $, $, 1;", n, n);
    INS("mul.lo.s32 $, $, %d;", row0, n, p->block_n); /* first key row of the block */
    load_kv(g, &pr, &ps, row0, 0);
    if (p->q_bufs == 1) {
        /* the tile's first K is on its way; now wait for the Q buffer and load Q */
        const int lab_qdone = ptx_label(g->f, "q_done");
        ptx_r later = ptx_reg(g->f, PTX_PRED, "later");
        INS("setp.ne.u32 $, $, 0;", later, it);
        INS("@$ bra %s;", later, ptx_lab(g->f, lab_qdone));
        load_q(g, &pr);
        ptx_place(g->f, lab_qdone);
    }
    load_kv(g, &pr, &ps, row0, 1);
    kg_pipe_advance(g, &ps);
    ptx_r more = ptx_reg(g->f, PTX_PRED, "more");
    INS("add.u32 $, $, 1;", it, it);
    INS("setp.lt.s32 $, $, $;", more, it, pr.t.niters);
    INS("@$ bra %s;", more, ptx_lab(g->f, lab_loop));
    INS("add.u32 $, $, $;", totit, totit, pr.t.niters);
    ptx_place(g->f, lab_next);
    INS("add.u32 $, $, 1;", g->round, g->round);
    INS("bra.uni %s;", ptx_lab(g->f, lab_tile));

    /* tail: wait until the consumers released every stage still in use */
    ptx_place(g->f, lab_end);
    ptx_r none = ptx_reg(g->f, PTX_PRED, "noblocks");
    INS("setp.eq.u32 $, $, 0;", none, totit);
    INS("@$ bra %s;", none, ptx_lab(g->f, g->lab_done));
    ptx_r nwait = ptx_reg(g->f, PTX_B32, "ntail"), k = ptx_reg(g->f, PTX_B32, "tail");
    INS("min.u32 $, $, %d;", nwait, totit, p->stages);
    INS("mov.u32 $, 0;", k);
    const int lab_tail = ptx_label(g->f, "prod_tail");
    ptx_place(g->f, lab_tail);
    ptx_r vempty = kg_ring_bar(g, g->mb_v_empty, ps.stage, pr.off); /* released last */
    ptx_r par = ptx_reg(g->f, PTX_B32, "epar");
    INS("xor.b32 $, $, 1;", par, ps.phase);
    kg_mbar_wait(g, vempty, par, g->mb_v_empty[0]);
    kg_pipe_advance(g, &ps);
    ptx_r again = ptx_reg(g->f, PTX_PRED, "again");
    INS("add.u32 $, $, 1;", k, k);
    INS("setp.lt.s32 $, $, $;", again, k, nwait);
    INS("@$ bra %s;", again, ptx_lab(g->f, lab_tail));
    INS("bra.uni %s;", ptx_lab(g->f, g->lab_done));
}
