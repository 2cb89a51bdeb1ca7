/*
 * Warpgroup 0, the producer: gives up registers (setmaxnreg.dec) and has one thread issue every
 * TMA load. Per tile: Q into buffer qc mod q_bufs once the consumers released that buffer's
 * previous use (with one Q buffer after the tile's first K, so K is not held up behind the last
 * QK of the tile before); per key block n = nmax-1 .. nmin: K, then V, into ring stage s once the
 * consumers released it. At the end it waits until the consumers released every stage still in
 * use, so no TMA write outlives the producer thread.
 * e4m3: every thread of the warpgroup stays; thread 0 issues the loads as above (V once the
 * threads have read the stage's previous V: vraw_empty), and then all 128 transpose the previous
 * block's V into its transposed stage (transpose_v.c), one block behind the loads so the TMA of
 * block j overlaps the transpose of block j-1; the last block is transposed after the tile loop.
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "kernel_abi.h"

typedef struct prod {
    ptx_r tmq, tmk, tmv, qc, off;
    int lazy_maps; /* e4m3: the tensor map addresses are formed at each load (registers) */
    tile_info t;
} prod;

/* The generic address of a tensor map parameter: kept (16-bit), or formed where it is used
   (e4m3, whose producer threads also transpose V and have few registers to spare). */
static ptx_r tmap(kgen *g, const prod *pr, ptx_r kept, int off)
{
    if (!pr->lazy_maps)
        return kept;
    ptx_r prm = ptx_reg(g->f, PTX_B64, "params"), gen = ptx_reg(g->f, PTX_B64, "pgen");
    ptx_r m = ptx_reg(g->f, PTX_B64, "tmap");
    INS("mov.b64 $, fa3_params;", prm);
    INS("cvta.param.u64 $, $;", gen, prm);
    INS("add.s64 $, $, %d;", m, gen, off);
    return m;
}

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
    /* Q: hd_chunks boxes of {box_cols columns, bm rows} */
    INS("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$], %d;", full, p->hd_chunks * bm * 128);
    ptx_r tmq = tmap(g, pr, pr->tmq, FA3P_OFF_TMAP_Q);
    const char *pol = kg_l2_policy(g, FA3_L2_Q);
    for (int c = 0; c < p->hd_chunks; c++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, "qbox");
        INS("add.u32 $, $, %d;", box, dst, c * bm * 128);
        /* packed GQA: the 5-D map {head_dim, ratio, seqlen_q, num_heads_k, batch}, box
           {box_cols, ratio, bm / ratio, 1, 1}: smem row i·ratio + h is query row qrow + i of
           head kvhead·ratio + h, the tile's packed rows in order (rows past seqlen_q
           zero-filled) */
        kg_tma_load(g, box, tmq, c * p->box_cols, pr->t.qrow, pr->t.head, pr->t.tbatch, full, pol,
                    p->cfg.pack_gqa);
    }
}

/* Paged K/V, one lane's run of a key block whose first key (of its sequence) is key0: the block
   is runs_per_block runs of page_rows keys, each inside one page (page_rows divides block_n and
   page_size); lane l takes runs l, l + 32, ...: page page_table[batch][key / page_size], row
   key % page_size. A run past the sequence's keys loads page num_pages, outside the map: TMA
   fills it with zeros and still counts its bytes, so the stage's transaction count stays the
   full stage. */
typedef struct paged_run {
    ptx_r few, mine;       /* runs_per_block <= 32 (one run a lane at most); this lane has one */
    ptx_r page, prow, doff; /* its page, row in the page, byte offset in the stage's boxes */
} paged_run;

static void paged_entry(kgen *g, prod *pr, ptx_r run, ptx_r key0, paged_run *r)
{
    ptx_r pt = kg_param(g, PTX_B64, "u64", FA3P_OFF_PAGE_TABLE, "ptab");
    ptx_r pts = kg_param(g, PTX_B64, "s64", FA3P_OFF_PAGE_TABLE_STRIDE, "ptstr");
    ptx_r psz = kg_param(g, PTX_B32, "u32", FA3P_OFF_PAGE_SIZE, "psize");
    ptx_r rows = kg_param(g, PTX_B32, "u32", FA3P_OFF_PAGE_ROWS, "prows");
    ptx_r key = ptx_reg(g->f, PTX_B32, "pkey"), pidx = ptx_reg(g->f, PTX_B32, "pidx");
    ptx_r in = ptx_reg(g->f, PTX_PRED, "pin");
    INS("mad.lo.u32 $, $, $, $;", key, run, rows, key0);
    INS("setp.lt.s32 $, $, $;", in, key, pr->t.sk);
    kg_udiv_param_to(g, pidx, key, psz, FA3_DIV_PAGE_SIZE);
    INS("mul.lo.u32 $, $, $;", r->prow, pidx, psz);
    INS("sub.u32 $, $, $;", r->prow, key, r->prow);
    INS("selp.b32 $, $, 0, $;", r->prow, r->prow, in);
    ptx_r b64 = ptx_reg(g->f, PTX_B64, "pb64"), ea = ptx_reg(g->f, PTX_B64, "pent");
    INS("cvt.u64.u32 $, $;", b64, pr->t.batch);
    INS("mul.lo.s64 $, $, $;", b64, b64, pts); /* the sequence's page-table row */
    INS("cvt.u64.u32 $, $;", ea, pidx);
    INS("add.s64 $, $, $;", ea, ea, b64);
    INS("shl.b64 $, $, 2;", ea, ea);
    INS("add.s64 $, $, $;", ea, pt, ea);
    INS("ld.param.u32 $, [fa3_params+%d];", r->page, FA3P_OFF_NUM_PAGES);
    INS("@$ ld.global.nc.u32 $, [$];", in, r->page, ea);
    INS("mul.lo.u32 $, $, $;", r->doff, run, rows);
    INS("shl.b32 $, $, 7;", r->doff, r->doff);
}

/* Before the block's K is waited for (so the page-table read overlaps the wait): the lane's
   run when there are at most 32 (every page_size but 1 and 2 at the planner's tiles). */
static void paged_lookup(kgen *g, prod *pr, ptx_r key0, paged_run *r)
{
    ptx_r runs = kg_param(g, PTX_B32, "u32", FA3P_OFF_RUNS_PER_BLOCK, "pruns");
    r->few = ptx_reg(g->f, PTX_PRED, "pfew");
    r->mine = ptx_reg(g->f, PTX_PRED, "pmine");
    r->page = ptx_reg(g->f, PTX_B32, "page");
    r->prow = ptx_reg(g->f, PTX_B32, "prow");
    r->doff = ptx_reg(g->f, PTX_B32, "pdoff");
    INS("setp.le.u32 $, $, 32;", r->few, runs);
    INS("setp.lt.and.u32 $, $, $, $;", r->mine, g->lane, runs, r->few);
    const int lab = ptx_label(g->f, "plook_done");
    ptx_r skip = ptx_reg(g->f, PTX_PRED, "pskip");
    INS("not.pred $, $;", skip, r->mine);
    INS("@$ bra %s;", skip, ptx_lab(g->f, lab));
    paged_entry(g, pr, g->lane, key0, r);
    ptx_place(g->f, lab);
}

static void paged_issue(kgen *g, ptx_r tm, ptx_r st, int base, int chunks, const paged_run *r,
                        ptx_r kvhead, ptx_r full)
{
    const fa3_plan *p = g->p;
    ptx_r dst = ptx_reg(g->f, PTX_B32, "pdst");
    INS("add.u32 $, $, $;", dst, r->doff, st);
    const char *pol = kg_l2_policy(g, FA3_L2_KV);
    for (int c = 0; c < chunks; c++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, "pbox");
        INS("add.u32 $, $, %d;", box, dst, base + c * p->block_n * 128);
        kg_tma_load(g, box, tm, c * p->box_cols, r->prow, kvhead, r->page, full, pol, 0);
    }
}

/* The boxes of one paged key block from the stage's smem address st: the looked-up run (pre),
   or with more than 32 runs each lane's runs in turn. */
static void kv_boxes_paged(kgen *g, prod *pr, ptx_r tm, ptx_r st, int base, int chunks,
                           ptx_r key0, ptx_r full, const paged_run *pre)
{
    const int lab_loop = ptx_label(g->f, "prun"), lab_out = ptx_label(g->f, "prun_end");
    ptx_r many = ptx_reg(g->f, PTX_PRED, "pmany"), none = ptx_reg(g->f, PTX_PRED, "pnone");
    INS("not.pred $, $;", many, pre->few);
    INS("@$ bra %s;", many, ptx_lab(g->f, lab_loop));
    INS("not.pred $, $;", none, pre->mine);
    INS("@$ bra %s;", none, ptx_lab(g->f, lab_out));
    paged_issue(g, tm, st, base, chunks, pre, pr->t.kvhead, full);
    INS("bra.uni %s;", ptx_lab(g->f, lab_out));
    /* page sizes 1 and 2: runs lane, lane + 32, ... */
    ptx_place(g->f, lab_loop);
    ptx_r runs = kg_param(g, PTX_B32, "u32", FA3P_OFF_RUNS_PER_BLOCK, "pruns");
    ptx_r i = ptx_reg(g->f, PTX_B32, "run");
    INS("mov.u32 $, $;", i, g->lane);
    const int lab_run = ptx_label(g->f, "prun_next");
    ptx_place(g->f, lab_run);
    ptx_r over = ptx_reg(g->f, PTX_PRED, "runover");
    INS("setp.ge.u32 $, $, $;", over, i, runs);
    INS("@$ bra %s;", over, ptx_lab(g->f, lab_out));
    paged_run r;
    r.page = ptx_reg(g->f, PTX_B32, "page");
    r.prow = ptx_reg(g->f, PTX_B32, "prow");
    r.doff = ptx_reg(g->f, PTX_B32, "pdoff");
    paged_entry(g, pr, i, key0, &r);
    paged_issue(g, tm, st, base, chunks, &r, pr->t.kvhead, full);
    INS("add.u32 $, $, 32;", i, i);
    INS("bra.uni %s;", ptx_lab(g->f, lab_run));
    ptx_place(g->f, lab_out);
}

/* One ring operand (K or V) of block row0 into stage s: wait for its release, then its boxes
   (paged: the 32 lanes of the loading warp wait, lane 0 sets the transaction count, each lane
   loads its runs; row0 is then the block's first key of its sequence). */
static void load_kv(kgen *g, prod *pr, pipe_state *ps, ptx_r row0, int is_v,
                    const paged_run *pre)
{
    const fa3_plan *p = g->p;
    const int bn = p->block_n;
    /* e4m3: the loaded V stage is free once the producer threads have read it */
    const int *empty_mb = is_v ? (p->fp8 ? g->mb_vraw_empty : g->mb_v_empty) : g->mb_k_empty;
    const int *full_mb = is_v ? g->mb_v_full : g->mb_k_full;
    const int chunks = is_v ? p->v_boxes : p->hd_chunks;
    const int stage_bytes = is_v ? p->smem_v_stage : p->smem_k_stage;
    const int base = is_v ? p->smem_v : p->smem_k;
    ptx_r empty = kg_ring_bar(g, empty_mb, ps->stage, pr->off);
    ptx_r par = ptx_reg(g->f, PTX_B32, "epar");
    INS("xor.b32 $, $, 1;", par, ps->phase); /* first pass: parity 1 falls through */
    kg_mbar_wait(g, empty, par, empty_mb[0]);
    ptx_r full = kg_ring_bar(g, full_mb, ps->stage, pr->off);
    if (p->cfg.paged_kv) {
        ptx_r l0 = g->sc.pt;
        INS("setp.eq.u32 $, $, 0;", l0, g->lane);
        INS("@$ mbarrier.arrive.expect_tx.shared::cta.b64 _, [$], %d;", l0, full, stage_bytes);
        INS("bar.warp.sync -1;"); /* the count is set before any lane's load can complete */
    } else {
        INS("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$], %d;", full, stage_bytes);
    }
    ptx_r st = ptx_reg(g->f, PTX_B32, is_v ? "vst" : "kst");
    INS("mad.lo.u32 $, $, %d, $;", st, ps->stage, stage_bytes, g->sbase);
    ptx_smem_use(g->f, base, p->stages * stage_bytes);
    ptx_r tm = is_v ? tmap(g, pr, pr->tmv, FA3P_OFF_TMAP_V) : tmap(g, pr, pr->tmk, FA3P_OFF_TMAP_K);
    if (p->cfg.paged_kv) {
        kv_boxes_paged(g, pr, tm, st, base, chunks, row0, full, pre);
        return;
    }
    const char *pol = kg_l2_policy(g, FA3_L2_KV);
    for (int c = 0; c < chunks; c++) {
        ptx_r box = ptx_reg(g->f, PTX_B32, is_v ? "vbox" : "kbox");
        INS("add.u32 $, $, %d;", box, st, base + c * bn * 128);
        kg_tma_load(g, box, tm, c * p->box_cols, row0, pr->t.kvhead, pr->t.tbatch, full, pol, 0);
    }
}

/* dyn_sched: whether the launch has a tile counter (its address nonzero); the address in *ctr */
static ptx_r has_counter(kgen *g, ptx_r *ctr)
{
    *ctr = kg_param(g, PTX_B64, "u64", FA3P_OFF_TILE_COUNTER, "tctr");
    ptx_r dyn = ptx_reg(g->f, PTX_PRED, "tdyn");
    INS("setp.ne.u64 $, $, 0;", dyn, *ctr);
    return dyn;
}

/* dyn_sched: the next tile's index from the counter (its old value, into tnext), where the
   launch has one. Where it is taken decides how greedy the order is (late_claim). */
static ptx_r claim_tile(kgen *g, ptx_r tnext)
{
    ptx_r ctr, dyn = has_counter(g, &ctr);
    INS("@$ atom.global.add.u32 $, [$], 1;", dyn, tnext, ctr);
    return dyn;
}

void kg_producer(kgen *g)
{
    const fa3_plan *p = g->p;
    prod pr;
    INS("setmaxnreg.dec.sync.aligned.u32 %d;", p->producer_regs);
    const int paged = p->cfg.paged_kv;
    ptx_r notfirst = ptx_reg(g->f, PTX_PRED, "notthr0");
    INS("setp.ne.u32 $, $, 0;", notfirst, g->thr);
    /* the threads that load K/V: thread 0, or (paged) the first warp */
    ptx_r notloader = notfirst;
    if (paged) {
        notloader = ptx_reg(g->f, PTX_PRED, "notwarp0");
        INS("setp.ge.u32 $, $, 32;", notloader, g->thr);
    }
    if (!p->fp8) /* only the loaders work */
        INS("@$ bra %s;", notloader, ptx_lab(g->f, g->lab_done));
    pr.lazy_maps = p->fp8 || paged; /* paged: registers for the page walk */
    if (!pr.lazy_maps) {
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
    }
    kg_scratch_init(g);
    pr.off = ptx_reg(g->f, PTX_B32, "off");
    pipe_state ps = kg_pipe_init(g);
    /* e4m3: the position of the block loaded last (transposed next); stage -1 before the first
       block (the 16-bit producer counts its blocks in totit instead: a register fewer here) */
    pipe_state pps = {0};
    ptx_r fin = {0}; /* e4m3: set once the tile loop is over (the final transpose) */
    const int lab_vt = p->fp8 ? ptx_label(g->f, "vt_do") : -1;
    const int lab_fin = p->fp8 ? ptx_label(g->f, "vt_final") : -1;
    if (p->fp8) {
        pps = (pipe_state){ptx_reg(g->f, PTX_B32, "pstage"), ptx_reg(g->f, PTX_B32, "pphase")};
        INS("mov.u32 $, -1;", pps.stage);
        fin = ptx_reg(g->f, PTX_PRED, "vtfinal");
        INS("setp.ne.u32 $, $, $;", fin, g->thr, g->thr);
    }
    pr.qc = ptx_reg(g->f, PTX_B32, "qc");
    ptx_r totit = p->fp8 ? (ptx_r){0} : ptx_reg(g->f, PTX_B32, "totit");
    g->round = ptx_reg(g->f, PTX_B32, "round");
    INS("mov.u32 $, 0;", pr.qc);
    if (!p->fp8)
        INS("mov.u32 $, 0;", totit);
    INS("mov.u32 $, 0;", g->round);
    kg_tile_start(g);
    /* dyn_sched: the CTA's first tile is ctaid.x; each later one grid + the counter's old value,
       taken once the tile before it has issued its loads (late_claim; 0: at its start); every
       tile index (the one past the end too) is handed to the consumers before this thread uses
       it */
    /* dyn_sched: tile_counter 0 (the runtime's choice for this launch) walks the static order,
       else the counter */
    ptx_r tnext = {0};
    if (p->dyn_sched) { /* handed over as use number round */
        g->dyn_tile = ptx_reg(g->f, PTX_B32, "dtile");
        tnext = ptx_reg(g->f, PTX_B32, "tnext");
        INS("mov.u32 $, %%ctaid.x;", g->dyn_tile);
    }

    /* the persistent loop over this CTA's tiles */
    const int lab_tile = ptx_label(g->f, "prod_tile"), lab_end = ptx_label(g->f, "prod_end");
    const int lab_next = ptx_label(g->f, "prod_next"), lab_loop = ptx_label(g->f, "prod_loop");
    ptx_place(g->f, lab_tile);
    if (p->dyn_sched)
        kg_tile_publish(g, g->round);
    pr.t = kg_tile_next(g, lab_end);
    if (p->dyn_sched && !p->late_claim)
        claim_tile(g, tnext);
    ptx_r empty = ptx_reg(g->f, PTX_PRED, "notile");
    INS("setp.le.s32 $, $, 0;", empty, pr.t.niters);
    INS("@$ bra %s;", empty, ptx_lab(g->f, lab_next));
    const int q_guard = p->fp8 || paged; /* threads besides thread 0 reach the Q loads */
    if (p->q_bufs == 2) {
        const int lab_q = q_guard ? ptx_label(g->f, "q_skip") : -1;
        if (q_guard)
            INS("@$ bra %s;", notfirst, ptx_lab(g->f, lab_q));
        load_q(g, &pr);
        if (q_guard)
            ptx_place(g->f, lab_q);
    }
    ptx_r it = ptx_reg(g->f, PTX_B32, "it");
    INS("mov.u32 $, 0;", it);
    ptx_place(g->f, lab_loop);
    ptx_r n = ptx_reg(g->f, PTX_B32, "n"), row0 = ptx_reg(g->f, PTX_B32, "krow");
    INS("sub.s32 $, $, $;", n, pr.t.nmax, it);
    INS("sub.s32 $, $, 1;", n, n);
    INS("mul.lo.s32 $, $, %d;", row0, n, p->block_n); /* first key row of the block */
    if (p->cfg.varlen && !paged) /* in the packed K/V */
        INS("add.s32 $, $, $;", row0, row0, pr.t.koff);
    const int lab_loads = p->fp8 ? ptx_label(g->f, "loads_done") : -1;
    if (p->fp8)
        INS("@$ bra %s;", notloader, ptx_lab(g->f, lab_loads));
    paged_run pre = {0};
    if (paged) /* the lane's page for K and V of this block, read before the waits */
        paged_lookup(g, &pr, row0, &pre);
    load_kv(g, &pr, &ps, row0, 0, &pre);
    if (p->q_bufs == 1) {
        /* the tile's first K is on its way; now wait for the Q buffer and load Q */
        const int lab_qdone = ptx_label(g->f, "q_done");
        ptx_r later = ptx_reg(g->f, PTX_PRED, "later");
        INS("setp.ne.u32 $, $, 0;", later, it);
        if (paged) /* thread 0 alone */
            INS("or.pred $, $, $;", later, later, notfirst);
        INS("@$ bra %s;", later, ptx_lab(g->f, lab_qdone));
        load_q(g, &pr);
        ptx_place(g->f, lab_qdone);
    }
    load_kv(g, &pr, &ps, row0, 1, &pre);
    if (p->fp8) {
        ptx_place(g->f, lab_loads);
        /* the previous block's V, if there is one */
        const int lab_t = ptx_label(g->f, "vt_skip");
        ptx_r none = ptx_reg(g->f, PTX_PRED, "firstblk");
        INS("setp.eq.u32 $, $, -1;", none, pps.stage);
        INS("@$ bra %s;", none, ptx_lab(g->f, lab_t));
        ptx_place(g->f, lab_vt);
        kg_vt_transpose(g, pps);
        INS("@$ bra %s;", fin, ptx_lab(g->f, lab_fin)); /* the last block's, after the loop */
        ptx_place(g->f, lab_t);
        kg_pipe_assign(g, &pps, ps);
    }
    kg_pipe_advance(g, &ps);
    ptx_r more = ptx_reg(g->f, PTX_PRED, "more");
    INS("add.u32 $, $, 1;", it, it);
    INS("setp.lt.s32 $, $, $;", more, it, pr.t.niters);
    INS("@$ bra %s;", more, ptx_lab(g->f, lab_loop));
    if (!p->fp8)
        INS("add.u32 $, $, $;", totit, totit, pr.t.niters);
    ptx_place(g->f, lab_next);
    INS("add.u32 $, $, 1;", g->round, g->round);
    if (p->dyn_sched) {
        ptx_r ctr, dyn = p->late_claim ? claim_tile(g, tnext) : has_counter(g, &ctr);
        ptx_r ncta = ptx_reg(g->f, PTX_B32, "ncta"), td = ptx_reg(g->f, PTX_B32, "tdnext");
        INS("mov.u32 $, %%nctaid.x;", ncta);
        INS("add.u32 $, $, $;", td, tnext, ncta);
        ptx_r ts = kg_tile_index_static(g);
        INS("selp.b32 $, $, $, $;", g->dyn_tile, td, ts, dyn);
    }
    INS("bra.uni %s;", ptx_lab(g->f, lab_tile));

    /* tail: wait until the consumers released every stage still in use */
    ptx_place(g->f, lab_end);
    ptx_r none = ptx_reg(g->f, PTX_PRED, "noblocks");
    if (p->fp8)
        INS("setp.eq.u32 $, $, -1;", none, pps.stage);
    else
        INS("setp.eq.u32 $, $, 0;", none, totit);
    INS("@$ bra %s;", none, ptx_lab(g->f, g->lab_done));
    if (p->fp8) { /* the last block's V (the loop's transpose, entered with fin set: the PTX
                     holds one copy, which cuts its compile time); then thread 0 alone waits
                     for the releases */
        INS("setp.eq.u32 $, $, $;", fin, g->thr, g->thr);
        INS("bra.uni %s;", ptx_lab(g->f, lab_vt));
        ptx_place(g->f, lab_fin);
        INS("@$ bra %s;", notfirst, ptx_lab(g->f, g->lab_done));
    }
    ptx_r nwait = ptx_reg(g->f, PTX_B32, "ntail"), k = ptx_reg(g->f, PTX_B32, "tail");
    if (p->fp8) /* every stage: one never used passes at once (parity 1 of phase 0) */
        INS("mov.u32 $, %d;", nwait, p->stages);
    else
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
