/*
 * The consumer warpgroups (setmaxnreg.inc; each owns 64 query rows of the tile): the persistent
 * tile loop, Q, the QK and PV wgmmas, their overlap inside a warpgroup and the ping-pong between
 * warpgroups (FA3, arXiv 2407.08608, §3.1-3.2).
 *
 * Per tile (skipped when the range is empty: O = 0, LSE = -inf):
 *   1. key block nmax-1 (peeled): wait k_full, S = Q·Kᵀ (wgmma SS m64n{bn}k16 × hd/16), wait,
 *      release K, masked softmax, P packed to 16-bit A fragments;
 *   2. every other block: wait K and the previous block's V; issue S = Q·K_jᵀ and
 *      O += P_{j-1}·V_{j-1} (wgmma RS, V MN-major) together; wait_group 1 (S ready) → release
 *      K; softmax of S while PV runs; wait_group 0 → release V_{j-1}; O *= alpha; pack P. Blocks
 *      that need the mask (blockinfo.c; decided at the loop top, where no wgmma is in flight)
 *      take a masked copy of this body (knob one_body: every block takes it, one body in the
 *      PTX);
 *   3. the last PV alone; release V; the epilogue (epilogue.c).
 * That is split_loop. merged_loop (merge_ends) issues steps 1 and 3 through step 2's wgmmas;
 * with first_in_loop (the default where the ends merge, a knob with them apart: split_joined)
 * step 1's block takes step 2's softmax, its pass joining the body after the PV's wait.
 * No control flow may sit between a wgmma and its wait: a branch around a wgmma serializes every
 * wgmma (C7514), and a branch or label inside the stage makes ptxas move the wait up to it.
 *
 * Ping-pong: named barriers nb_pingpong + g ("consumer g may issue"); each GEMM section is
 * bar.sync own → issue → bar.arrive next. Every consumer runs the same sections (blocks + 1 per
 * tile), so the order runs on across tiles: the last consumer gives consumer 0 its first turn
 * once before the tile loop, and consumer 0 takes the arrive left over at exit. One consumer
 * (block_m 64, the decode tile) has no ping-pong: no named barrier at all; its own QK/softmax/PV
 * overlap (step 2) is unchanged.
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "kernel_abi.h"

/* dst = descriptor src advanced by off (16-byte units) in its start-address field: a 32-bit add
   on the low word (the field is 14 bits of a shared address under 256 KB, so no carry leaves the
   word). As a 64-bit add ptxas splits the Q descriptor's into an add with carry, its high half
   and a UMOV of the constant high word per wgmma (uniform_desc; for K and V, whose 64-bit adds
   become one UIADD3.64, the split form measured 6-10 instructions more per block). */
static void desc_add(kgen *g, cons *c, ptx_r dst, ptx_r src, int off)
{
    INS("mov.b64 {$, $}, $;", c->tmp.dlo, c->tmp.dhi, src);
    INS("add.u32 $, $, %d;", c->tmp.dlo, c->tmp.dlo, off);
    INS("mov.b64 $, {$, $};", dst, c->tmp.dlo, c->tmp.dhi);
}

/* k-step ks's offset (16-byte units) in a Q or K tile of `rows` rows: 64-column boxes of rows·128
   bytes, 32 bytes a step within a box */
static int step_off(int ks, int rows)
{
    return ((ks / 4) * rows * 128 + (ks % 4) * 32) >> 4;
}

/* q_desc_tile (knob; 16-bit): Q's descriptors of the first Q_TILE_STEPS k-steps built once a
   tile, not in every QK. All 12 of head_dim 192 or 16 of 256: ptxas kept only some in uniform
   registers (hd192 387, hd256 329 SASS a kept block against 379 / 317 with 8) and hd256's
   masked kernels spilled 4-16 bytes. Only with uniform_desc: in ordinary registers the 8
   descriptors (16 registers) spilled 20 bytes in hd64's masked kernels (test_ptxas,
   uniform_desc=0). */
#define Q_TILE_STEPS 8
static int q_desc_tile(const fa3_plan *p)
{
    return p->q_desc_tile && p->uniform_desc && !p->fp8;
}

/* dst = Q's descriptor of k-step ks */
static void q_desc_build(kgen *g, cons *c, ptx_r dst, int ks)
{
    const int qoff = step_off(ks, g->p->block_m);
    if (g->p->uniform_desc)
        desc_add(g, c, dst, c->descq, qoff);
    else
        INS("add.s64 $, $, %d;", dst, c->descq, qoff);
}

/* Q's descriptor of k-step ks: the tile's (q_desc_tile) or one built in c->tmp.dq */
static ptx_r q_step_desc(kgen *g, cons *c, int ks)
{
    if (q_desc_tile(g->p) && ks < Q_TILE_STEPS)
        return c->qdesc[ks];
    q_desc_build(g, c, c->tmp.dq, ks);
    return c->tmp.dq;
}

/* q_desc_tile: the first Q_TILE_STEPS k-steps' Q descriptors, once a tile (after q_wait_desc);
   ptxas keeps them in uniform registers beside the K descriptors the wgmmas pair them with */
static void q_tile_descs(kgen *g, cons *c)
{
    _Static_assert(sizeof c->qdesc / sizeof c->qdesc[0] == Q_TILE_STEPS, "cons.qdesc");
    for (int ks = 0; ks < g->p->qk_steps && ks < Q_TILE_STEPS; ks++) {
        c->qdesc[ks] = ptx_reg(g->f, PTX_B64, "qdesc");
        q_desc_build(g, c, c->qdesc[ks], ks);
    }
}

/* S = Q·Kᵀ for this warpgroup's 64 rows: qk_steps SS wgmmas, m64n{bn}k16 (16-bit: 4 per 64-column
   box, padded columns are TMA's zeros) or m64n{bn}k32 (e4m3: 4 per 128-column box, only the
   steps head_dim needs). */
/* One QK k-step into d (bn columns, bn/2 registers): SS, both operands K-major from the
   descriptors da (64 rows) and db (bn rows); acc: accumulate (false for the first step) */
static void qk_step(kgen *g, ptx_r d, int bn, ptx_r da, ptx_r db, ptx_r acc)
{
    if (g->p->fp8)
        INS("wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 ${, $, $, $, 1, 1;", bn, d,
            bn / 2, da, db, acc);
    else
        INS("wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s ${, $, $, $, 1, 1, 0, 0;", bn,
            g->ab, g->ab, d, bn / 2, da, db, acc);
}

static void qk(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    const int bn = p->block_n >> c->half; /* c->half: the block's first bn/2 keys (16-bit) */
    INS("wgmma.fence.sync.aligned;");
    for (int ks = 0; ks < p->qk_steps; ks++) {
        ptx_r dq = q_step_desc(g, c, ks), dk = c->tmp.dk;
        INS("add.s64 $, $, %d;", dk, c->desck, step_off(ks, p->block_n));
        qk_step(g, c->half ? c->sh : c->s, bn, dq, dk, ks ? c->ptrue : c->pfalse);
    }
    INS("wgmma.commit_group.sync.aligned;");
}

/* O += P·V: 16-bit: bn/16 RS wgmmas of m64n{hdv}k16, P from registers, V MN-major (tB = 1);
   e4m3: bn/32 RS wgmmas of m64n{hdv}k32 on the transposed V (K-major, 128 keys a box, +32 B a
   step). */
static void pv(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    const int ncols = p->hdv_chunks * 64;
    INS("wgmma.fence.sync.aligned;");
    if (p->fp8) {
        for (int kk = 0; kk < p->block_n / 32; kk++) {
            ptx_r dv = c->tmp.dv;
            const int off = (kk / 4) * p->vt_rows * 128 + (kk % 4) * 32;
            INS("add.s64 $, $, %d;", dv, c->descv, off >> 4);
            INS("wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3 ${, ${, $, $, 1, 1;", ncols,
                c->o, ncols / 2, ptx_at(c->a, 4 * kk), 4, dv, c->ptrue);
        }
        INS("wgmma.commit_group.sync.aligned;");
        return;
    }
    for (int kk = 0; kk < p->block_n / 16; kk++) {
        ptx_r dv = c->tmp.dv;
        INS("add.s64 $, $, %d;", dv, c->descv, (kk * 16 * 128) >> 4);
        INS("wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s ${, ${, $, $, 1, 1, 1;", ncols,
            g->ab, g->ab, c->o, ncols / 2, ptx_at(c->a, 4 * kk), 4, dv, c->ptrue);
    }
    INS("wgmma.commit_group.sync.aligned;");
}

/* A K-major (Q, K) or MN-major (V) descriptor: start address, LBO, SBO 1024 B, 128B swizzle. */
static void make_desc(kgen *g, ptx_r desc, ptx_r addr, int lbo_enc)
{
    INS("shr.u32 $, $, 4;", addr, addr); /* in place: addr is the caller's temporary */
    INS("or.b32 $, $, %d;", addr, addr, lbo_enc << 16);
    INS("mov.b64 $, {$, 0x40000040};", desc, addr);
}

/* ring_addr: make_desc's low word for the ring's stage 0 at smem offset off, kept in a register
   of its own for the consumer's life. */
static ptx_r ring_desc_word(kgen *g, const char *name, int off, int lbo_enc)
{
    ptx_r w = ptx_reg(g->f, PTX_B32, name);
    INS("add.u32 $, $, %d;", w, g->sbase, off);
    INS("shr.u32 $, $, 4;", w, w);
    INS("or.b32 $, $, %d;", w, w, lbo_enc << 16);
    return w;
}

/* Wait for the ring operand of a block and build its descriptor: K of block n (stage ps,
   K-major, LBO unused) or V of the previous block (stage pps; 16-bit: MN-major, LBO = the
   distance between 64-column boxes, bn·128 B; e4m3: the transposed stage, K-major, once the
   producer's threads wrote it). */
static void ring_wait_desc(kgen *g, cons *c, int is_v)
{
    const fa3_plan *p = g->p;
    const pipe_state *ps = is_v ? &c->pps : &c->ps;
    const int vt = is_v && p->fp8;
    const int *mb = !is_v ? g->mb_k_full : vt ? g->mb_vt_full : g->mb_v_full;
    ptx_r full = kg_ring_bar(g, mb, ps->stage, is_v ? c->tmp.voff : c->tmp.koff);
    kg_mbar_wait(g, full, ps->phase, mb[0]);
    ptx_r a = is_v ? c->tmp.vaddr : c->tmp.kaddr;
    if (p->ring_addr && !vt) { /* make_desc's word of stage 0 plus the stage's 16-byte units */
        const int stride = (is_v ? p->smem_v_stage : p->smem_k_stage) >> 4;
        INS("mad.lo.u32 $, $, %d, $;", a, ps->stage, stride, is_v ? c->vdesc0 : c->kdesc0);
        INS("mov.b64 $, {$, 0x40000040};", is_v ? c->descv : c->desck, a);
        return;
    }
    kg_ring_slot(g, a, ps->stage, vt ? p->smem_vt_stage : is_v ? p->smem_v_stage : p->smem_k_stage,
                 vt ? p->smem_vt : is_v ? p->smem_v : p->smem_k);
    make_desc(g, is_v ? c->descv : c->desck, a, is_v && !vt ? p->block_n * 128 >> 4 : 1);
}

static void k_wait_desc(kgen *g, cons *c)
{
    ring_wait_desc(g, c, 0);
}

static void k_release(kgen *g, cons *c)
{
    if (g->p->o_stage != 3) {
        kg_release_warp(g, kg_ring_bar(g, g->mb_k_empty, c->ps.stage, c->tmp.koff),
                        g->mb_k_empty[0], "consumer after QK");
        return;
    }
    /* o_stage 3: consumer 0 stages O in the tile's last block's K slot and releases it in its
       epilogue (kg_epilogue); consumer 1 tells it (nb_ring + 0) that its last QK has read the
       slot. Predicates, not branches: a branch here would move the PV's wait up to it. */
    ptx_r last = c->tmp.qlast, rel = g->sc.pt, next = c->tmp.kaddr; /* kaddr: free after QK */
    ptx_r cw0 = ptx_reg(g->f, PTX_PRED, "cw0");
    INS("add.u32 $, $, 1;", next, c->it);
    INS("setp.eq.s32 $, $, $;", last, next, c->t.niters);
    INS("setp.eq.u32 $, $, 0;", cw0, c->cw);
    INS("and.pred $, $, $;", rel, last, cw0);
    INS("setp.eq.and.u32 $, $, 0, !$;", rel, g->lane, rel);
    if (g->sc.fenced)
        INS("and.pred $, $, $;", rel, rel, g->sc.fence);
    ptx_mbar_release(g->f, g->mb_k_empty[0], 4 * g->p->num_consumer_wg,
                     "consumer after QK (consumer 0: not the tile's last block)");
    INS("@$ mbarrier.arrive.shared::cta.b64 _, [$];", rel,
        kg_ring_bar(g, g->mb_k_empty, c->ps.stage, c->tmp.koff));
    INS("and.pred $, $, !$;", last, last, cw0);
    ptx_named_bar(g->f, g->p->nb_ring, 256);
    INS("@$ bar.arrive %d, 256;", last, g->p->nb_ring);
}

static void v_wait_desc(kgen *g, cons *c)
{
    ring_wait_desc(g, c, 1);
}

static void v_release(kgen *g, cons *c)
{
    /* first_in_loop: the tile's first pass took no V (predicated: the softmax before it is the
       one every pass shares), so it skips the arrive. On that pass c->pps is the previous
       tile's, or undefined in the CTA's first tile, read only for the address of the arrive it
       predicates off (ctasim lists it as a register read before any write) */
    kg_release_warp_unless(g, kg_ring_bar(g, g->mb_v_empty, c->pps.stage, c->tmp.voff),
                           g->mb_v_empty[0], c->first, /* cls 0 without first_in_loop */
                           c->first.cls ? "consumer after PV (not the tile's first pass)"
                                        : "consumer after PV");
}

/* q_empty arrive when block it is the tile's last QK (predicated: no branch may sit between a
   wgmma and its wait). The producer then loads the next tile's Q, and behind it the next tile's
   first K/V, while this tile's last softmax, PV and epilogue run. With O staged in Q (o_stage 2)
   the epilogue releases Q instead. */
static void q_release_if_last(kgen *g, cons *c)
{
    if (g->p->o_stage == 2)
        return;
    ptx_r next = g->sc.bar, last = c->tmp.qlast;
    INS("add.u32 $, $, 1;", next, c->it);
    INS("setp.eq.s32 $, $, $;", last, next, c->t.niters);
    INS("setp.eq.and.u32 $, $, 0, $;", last, g->lane, last);
    ptx_r qe = kg_q_empty_bar(g, c);
    ptx_mbar_release(g->f, g->mb_q_empty[0], 4 * g->p->num_consumer_wg,
                     "consumer after the last QK");
    INS("@$ mbarrier.arrive.shared::cta.b64 _, [$];", last, qe);
}

/* One consumer (block_m 64) has no partner to take turns with, and the knob pingpong=0 drops
   the turns: no ping-pong at all (plan.c). */
static void pp_sync(kgen *g, cons *c)
{
    if (g->p->pingpong)
        INS("bar.sync $, 256;", c->pp_own);
}

static void pp_arrive(kgen *g, cons *c)
{
    if (g->p->pingpong)
        INS("bar.arrive $, 256;", c->pp_next);
}

/* Wait for this tile's Q and build the warpgroup's Q descriptor: rows 64·cw of each box. */
static void q_wait_desc(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    ptx_r par = ptx_reg(g->f, PTX_B32, "qpar"), a = ptx_reg(g->f, PTX_B32, "qa");
    ptx_r b = ptx_reg(g->f, PTX_B32, "qa");
    if (p->q_bufs == 2) {
        ptx_r t = ptx_reg(g->f, PTX_B32, "qpar"), qb = ptx_reg(g->f, PTX_B32, "qa");
        INS("and.b32 $, $, 1;", c->qbuf, c->qc); /* the tile's Q buffer */
        INS("shr.u32 $, $, 1;", t, c->qc);
        INS("and.b32 $, $, 1;", par, t);         /* parity of the buffer's use */
        ptx_r full = kg_q_bar(g, g->mb_q_full, c->qbuf);
        kg_mbar_wait(g, full, par, g->mb_q_full[0]);
        INS("mad.lo.u32 $, $, %d, $;", qb, c->qbuf, p->smem_q_buf, g->sbase);
        INS("mad.lo.u32 $, $, 8192, $;", a, c->cw, qb);
    } else {
        INS("and.b32 $, $, 1;", par, c->qc);
        ptx_r full = kg_q_bar(g, g->mb_q_full, c->qbuf);
        kg_mbar_wait(g, full, par, g->mb_q_full[0]);
        INS("mad.lo.u32 $, $, 8192, $;", a, c->cw, g->sbase);
    }
    INS("add.u32 $, $, %d;", b, a, p->smem_q);
    make_desc(g, c->descq, b, 1);
}

/* After a block's QK: the ring stage it read becomes the PV's (pps), the next block's K stage
   (ps) follows, and the block count moves on */
static void next_block(kgen *g, cons *c)
{
    kg_pipe_assign(g, &c->pps, c->ps);
    kg_pipe_advance(g, &c->ps);
    INS("add.u32 $, $, 1;", c->it, c->it);
}

/* An overlapped key block's second part, once S_j is ready (wait_group 1: the PV may still
   run): the softmax, O's rescale and P, then the next block (lab_loop) */
static void block_finish(kgen *g, cons *c, int masked, int lab_loop)
{
    const int early = kg_early_pack(g->p); /* the softmax waits for the PV and packs P */
    /* early_pack 2: the softmax releases K just before the PV's wait (kg_softmax) */
    c->k_release = early == 2 ? k_release : NULL;
    if (!c->k_release)
        k_release(g, c);
    q_release_if_last(g, c);
    kg_softmax(g, c, masked, 1);
    c->k_release = NULL;
    if (!early)
        INS("wgmma.wait_group.sync.aligned 0;");
    v_release(g, c);
    if (c->first.cls && g->p->cond_rescale) /* first_in_loop: O is the tile's zeros */
        INS("and.pred $, $, !$;", c->rescale, c->rescale, c->first);
    if (early) {
        kg_rescale_o(g, c);
    } else if (g->p->pack_first) {
        kg_pack_p(g, c);
        kg_rescale_o(g, c);
    } else {
        kg_rescale_o(g, c);
        kg_pack_p(g, c);
    }
    next_block(g, c);
    INS("bra.uni %s;", ptx_lab(g->f, lab_loop));
}

/* The key block a pass of the loop takes: n = nmax - it - 1 (blocks run last to first) */
static void pass_block(kgen *g, cons *c)
{
    INS("sub.s32 $, $, $;", c->n, c->t.nmax, c->it);
    INS("sub.s32 $, $, 1;", c->n, c->n);
}

/* One overlapped key block (step 2 above); masked: with the mask (2: where c->tmp.need, the
   block's kg_block_needs_mask, says: mask_branch). */
/* An overlapped key block's issue: its K's and the previous block's V's waits, S = Q·K_jᵀ and
   O += P_{j-1}·V_{j-1} in the ping-pong turn, then S's wait (wait_group 1) */
static void block_issue(kgen *g, cons *c)
{
    k_wait_desc(g, c);
    if (!g->p->late_v_wait)
        v_wait_desc(g, c);
    pp_sync(g, c);
    qk(g, c);
    if (g->p->late_v_wait) /* FA4's order: a late V holds up only the PV */
        v_wait_desc(g, c);
    pv(g, c);
    pp_arrive(g, c);
    INS("wgmma.wait_group.sync.aligned 1;"); /* S_j ready; PV may still run */
}

static void block_body(kgen *g, cons *c, int masked, int lab_loop)
{
    block_issue(g, c);
    block_finish(g, c, masked, lab_loop);
}

/* The tile's first key block after its QK's issue: S's wait, the masked softmax and P */
static void first_block_finish(kgen *g, cons *c)
{
    INS("wgmma.wait_group.sync.aligned 0;");
    for (int i = 0; c->half && i < kg_ns(g, c); i++)
        INS("mov.f32 $, $;", ptx_at(c->s, i), ptx_at(c->sh, i));
    k_release(g, c);
    q_release_if_last(g, c);
    kg_softmax(g, c, 1, 0);
    if (!kg_early_pack(g->p))
        kg_pack_p(g, c);
    for (int i = kg_ns(g, c); i < g->p->block_n / 2; i++) /* c->half: S's other half defined */
        INS("mov.f32 $, " ZERO_F ";", ptx_at(c->s, i));
}

/* The tile's first key block's QK alone, in its ping-pong turn */
static void first_qk(kgen *g, cons *c)
{
    pp_sync(g, c);
    qk(g, c);
    pp_arrive(g, c);
}

/* The tile's first key block after its K wait: QK alone, then the masked softmax and P. */
static void first_block(kgen *g, cons *c)
{
    first_qk(g, c);
    first_block_finish(g, c);
}

/* diag_half: the tile's first key block where no row of the consumer sees any of its keys: its
   turn in the ping-pong and its releases, P = 0, and the row state the softmax would leave (m =
   -inf, l = 0 and e = 0 from the tile's start; the exponent's scale c and offset 0, which the
   loop's kept-max blocks carry, kept_branch) */
static void first_block_none(kgen *g, cons *c)
{
    pp_sync(g, c);
    pp_arrive(g, c);
    k_release(g, c);
    q_release_if_last(g, c);
    kg_zero_p(g, c, 0);
    for (int r = 0; r < 2 && g->p->fast_exp; r++) {
        INS("mov.f32 $, $;", c->tmp.cr[r], c->scale_log2);
        INS("mov.f32 $, " ZERO_F ";", c->tmp.noff[r]);
    }
}

/* After the tile's last PV: release its V; o_stage 3: consumer 1 stages O in this V slot and
   releases it in its epilogue, and consumer 0 tells it (nb_ring + 1) that its last PV has read
   the slot */
static void last_v_release(kgen *g, cons *c)
{
    const fa3_plan *p = g->p;
    if (p->o_stage != 3) {
        v_release(g, c);
        return;
    }
    ptx_r cw0 = ptx_reg(g->f, PTX_PRED, "cw0"), rel = g->sc.pt;
    INS("setp.eq.u32 $, $, 0;", cw0, c->cw);
    INS("setp.eq.and.u32 $, $, 0, $;", rel, g->lane, cw0);
    ptx_mbar_release(g->f, g->mb_v_empty[0], 4 * p->num_consumer_wg,
                     "consumer 0 after the last PV (consumer 1: its epilogue)");
    INS("@$ mbarrier.arrive.shared::cta.b64 _, [$];", rel,
        kg_ring_bar(g, g->mb_v_empty, c->pps.stage, c->tmp.voff));
    /* Without GEMM turns (pingpong=0) consumer 0 takes its own ring barrier (consumer 1's last
       QK has read the K slot) here, before it lets consumer 1 on, not in its epilogue: each
       consumer's next arrive then follows the other's sync of this tile, so neither named
       barrier can take a second tile's arrive first (the turns order that otherwise) */
    if (!p->pingpong) {
        ptx_named_bar(g->f, p->nb_ring, 256);
        INS("@$ bar.sync %d, 256;", cw0, p->nb_ring);
    }
    ptx_named_bar(g->f, p->nb_ring + 1, 256);
    INS("@$ bar.arrive %d, 256;", cw0, p->nb_ring + 1);
}

/* A tile's start: O = 0, and each row's max -inf, sum 0 (with the offset's rounding e and the
   LSE's own sum) */
static void tile_state_init(kgen *g, cons *c)
{
    for (int i = 0; i < g->p->hdv_chunks * 32; i++)
        INS("mov.f32 $, " ZERO_F ";", ptx_at(c->o, i));
    for (int r = 0; r < 2; r++) {
        INS("mov.f32 $, " NEG_INF ";", c->m[r]);
        INS("mov.f32 $, " ZERO_F ";", c->l[r]);
        if (g->p->fast_exp)
            INS("mov.f32 $, " ZERO_F ";", c->e[r]);
        if (c->l_lse[r].id != c->l[r].id)
            INS("mov.f32 $, " ZERO_F ";", c->l_lse[r]);
    }
}

/* The tile's last PV, issued: its wait, the V stage's release, the next tile's Q */
static void last_pv_done(kgen *g, cons *c)
{
    INS("wgmma.wait_group.sync.aligned 0;");
    last_v_release(g, c);
    INS("add.u32 $, $, 1;", c->qc, c->qc);
}

/* The tile's last PV alone, after the key-block loop (the ends apart) */
static void last_pv(kgen *g, cons *c)
{
    v_wait_desc(g, c);
    pp_sync(g, c);
    pv(g, c);
    pp_arrive(g, c);
    last_pv_done(g, c);
}

/* first_in_loop: c->first names the pass predicate (the body's V release and O rescale skip
   the tile's first pass). A warp none of whose rows sees a key of the first block keeps its
   (-inf) maxima and jumps over the new max (kept_branch): its exponent's scale and offset must
   be finite, as first_block_none leaves them (p = 2^-inf = 0). */
static void first_join_init(kgen *g, cons *c, ptx_r first)
{
    const fa3_plan *p = g->p;
    c->first = first;
    for (int r = 0; r < 2 && p->kept_branch && p->cond_rescale && p->fast_exp; r++) {
        INS("mov.f32 $, $;", c->tmp.cr[r], c->scale_log2);
        INS("mov.f32 $, " ZERO_F ";", c->tmp.noff[r]);
    }
}

/* merge_ends (cold JIT; plan.c: the default for 16-bit kernels with head_dim > 128, a knob
   elsewhere): the tile's first QK and last PV issued by the key-block loop's own wgmmas, under
   warp-uniform branches, not by copies of their own (ptxas's time follows the wgmmas' total
   width: docs/notes.md, session 15). Pass it (0 .. niters) issues
   QK_it unless it is the last (it = niters) and PV_it-1 unless it is the first; the first
   takes the first block's softmax, the last leaves after the PV. The last pass issues, in the
   QK's place, one k-step of a QK on the V stage its PV reads (waited for, and held until that
   PV is done) into S, which nothing reads: with no QK group there, the PV's group history
   differs by path and ptxas serialized the wgmmas (C7514/C7515; an empty commit group or
   guard predicates in the QK's place: C7519 as well; session 27). first_in_loop (the default
   here since session 30; plan.c): the first pass waits for its S (wait_group 0: no PV is in flight) and joins the body after the
   PV's wait, so the first block takes the body's softmax (its mask under the body's branch,
   need or'ed with the first pass) and no softmax copy of its own; the body's V release skips
   the first pass (c->first). */
static void merged_loop(kgen *g, cons *c, int windows, int lab_loop)
{
    const fa3_plan *p = g->p;
    const int lab_nok = ptx_label(g->f, "cons_nok"), lab_dummy = ptx_label(g->f, "cons_dummy"),
              lab_qk = ptx_label(g->f, "cons_qkdone"), lab_first = ptx_label(g->f, "cons_first"),
              lab_last = ptx_label(g->f, "cons_lastpv");
    const int lab_nov = p->late_v_wait ? 0 : ptx_label(g->f, "cons_nov");
    const int join = p->first_in_loop;
    const int lab_join = join ? ptx_label(g->f, "cons_join") : 0;
    ptx_r first = ptx_reg(g->f, PTX_PRED, "first"), last = c->tmp.done;
    if (join) {
        first_join_init(g, c, first);
    } else {
        INS("mov.pred $, $;", first, c->ptrue);
    }
    ptx_place(g->f, lab_loop);
    if (join)
        INS("setp.eq.s32 $, $, 0;", first, c->it);
    INS("setp.ge.s32 $, $, $;", last, c->it, c->t.niters);
    pass_block(g, c);
    if (windows)
        kg_block_needs_mask(g, c);
    if (join && windows) /* the first block (the diagonal or the key tail) is always masked */
        INS("or.pred $, $, $;", c->tmp.need, c->tmp.need, first);
    else if (join)
        INS("mov.pred $, $;", c->tmp.need, first);
    INS("@$ bra %s;", last, ptx_lab(g->f, lab_nok));
    k_wait_desc(g, c);
    ptx_place(g->f, lab_nok);
    if (!p->late_v_wait) { /* V of the block before, ahead of the QK (not for the first) */
        INS("@$ bra %s;", first, ptx_lab(g->f, lab_nov));
        v_wait_desc(g, c);
        ptx_place(g->f, lab_nov);
    }
    pp_sync(g, c);
    INS("@$ bra %s;", last, ptx_lab(g->f, lab_dummy));
    qk(g, c);
    ptx_place(g->f, lab_qk);
    INS("@$ bra %s;", first, ptx_lab(g->f, lab_first));
    if (p->late_v_wait)
        v_wait_desc(g, c);
    pv(g, c);
    pp_arrive(g, c);
    /* the last pass leaves after this wait, not before: a branch between the PV's commit and
       the wait drew ptxas's C7514 */
    INS("wgmma.wait_group.sync.aligned 1;");
    INS("@$ bra %s;", last, ptx_lab(g->f, lab_last));
    if (join)
        ptx_place(g->f, lab_join);
    block_finish(g, c, windows || join ? 2 : 0, lab_loop);

    ptx_place(g->f, lab_first); /* the tile's first block: its QK alone */
    pp_arrive(g, c);
    if (join) { /* S ready, then the loop's softmax (no PV in flight: its wait returns) */
        INS("wgmma.wait_group.sync.aligned 0;");
        INS("bra.uni %s;", ptx_lab(g->f, lab_join));
    } else {
        first_block_finish(g, c);
        next_block(g, c);
        INS("mov.pred $, $;", first, c->pfalse);
        INS("bra.uni %s;", ptx_lab(g->f, lab_loop));
    }

    ptx_place(g->f, lab_dummy); /* the last pass: one QK k-step on the V stage, into S */
    if (p->late_v_wait)
        v_wait_desc(g, c); /* waited again before the PV: the phase is done, it returns */
    INS("wgmma.fence.sync.aligned;");
    /* 16-bit: bn·hdv·2 bytes, within the stage where bn >= 64; e4m3: the transposed stage's
       vt_boxes·vt_rows >= bn rows of 128 B */
    qk_step(g, c->s, p->block_n, c->descv, c->descv, c->pfalse);
    INS("wgmma.commit_group.sync.aligned;");
    INS("bra.uni %s;", ptx_lab(g->f, lab_qk));

    ptx_place(g->f, lab_last); /* the tile's last PV, issued above */
    c->first = (ptx_r){0};
    last_pv_done(g, c);
}

/* first_in_loop with the tile's ends apart (knob; plan.c): the first block enters the loop
   like any other, takes a QK copy of its own under the pass's branch (no PV, so no wgmma of the
   body's sits under a branch), waits for S (wait_group 0) and joins the body after the PV's
   wait_group 1, so its softmax is the body's (mask under the body's branch, need set; V's
   release and O's rescale skipped). The last PV stays after the loop. */
static void split_joined(kgen *g, cons *c, int windows, int lab_loop, int lab_pv)
{
    const int lab_fq = ptx_label(g->f, "cons_firstqk"), lab_join = ptx_label(g->f, "cons_join");
    ptx_r first = ptx_reg(g->f, PTX_PRED, "first"), done = c->tmp.done;
    first_join_init(g, c, first);
    ptx_place(g->f, lab_loop);
    INS("setp.ge.s32 $, $, $;", done, c->it, c->t.niters);
    INS("@$ bra %s;", done, ptx_lab(g->f, lab_pv));
    INS("setp.eq.s32 $, $, 0;", first, c->it);
    pass_block(g, c);
    if (windows)
        kg_block_needs_mask(g, c);
    else
        INS("mov.pred $, $;", c->tmp.need, c->pfalse);
    INS("@$ bra %s;", first, ptx_lab(g->f, lab_fq));
    block_issue(g, c);
    ptx_place(g->f, lab_join);
    block_finish(g, c, 2, lab_loop);

    ptx_place(g->f, lab_fq); /* the tile's first block (the diagonal or key tail): masked */
    k_wait_desc(g, c);
    first_qk(g, c);
    INS("wgmma.wait_group.sync.aligned 0;");
    INS("mov.pred $, $;", c->tmp.need, c->ptrue);
    INS("bra.uni %s;", ptx_lab(g->f, lab_join));

    ptx_place(g->f, lab_pv); /* the tile's last PV */
    c->first = (ptx_r){0};
    last_pv(g, c);
}

/* The tile's key blocks as FA3 lays them out: the first block's QK and softmax, the loop of
   overlapped blocks (PV of the block before, QK of this one), the last PV */
static void split_loop(kgen *g, cons *c, int windows, int lab_loop, int lab_pv)
{
    const fa3_plan *p = g->p;
    /* 1. the tile's first block (the key tail or diagonal: always masked). diag_half: a
       consumer whose rows see none of the block's last bn/2 keys takes a copy on its first bn/2
       columns, and one whose rows see none of its keys takes no QK or softmax at all (the
       branches sit where no wgmma is in flight; the PV of this P stays whole, its zero half or
       whole read like any masked score's) */
    const int half = p->diag_half; /* plan.c: 16-bit, with the softmax, block_n / 2 a multiple of 8 */
    ptx_r phalf = {0}, pnone = {0};
    if (half)
        kg_first_block_reach(g, c, &phalf, &pnone);
    const int lab_none = half ? ptx_label(g->f, "first_none") : 0;
    const int lab_half = half ? ptx_label(g->f, "first_half") : 0;
    const int lab_first = half ? ptx_label(g->f, "first_done") : 0;
    k_wait_desc(g, c);
    if (half) {
        INS("@$ bra %s;", pnone, ptx_lab(g->f, lab_none));
        INS("@$ bra %s;", phalf, ptx_lab(g->f, lab_half));
    }
    for (int h = 0; h <= half; h++) {
        if (h)
            ptx_place(g->f, lab_half);
        c->half = h;
        first_block(g, c);
        if (half)
            INS("bra.uni %s;", ptx_lab(g->f, lab_first));
    }
    c->half = 0;
    if (half) {
        ptx_place(g->f, lab_none);
        first_block_none(g, c);
        ptx_place(g->f, lab_first);
    }
    next_block(g, c);

    /* 2. the other blocks */
    ptx_place(g->f, lab_loop);
    ptx_r done = c->tmp.done;
    INS("setp.ge.s32 $, $, $;", done, c->it, c->t.niters);
    INS("@$ bra %s;", done, ptx_lab(g->f, lab_pv));
    pass_block(g, c);
    const int lab_masked = ptx_label(g->f, "cons_masked");
    /* one_body (knob): the masked body alone, for every block (the mask leaves a block inside
       every row's window unchanged) */
    const int one = windows && p->one_body;
    if (windows && p->mask_branch && !one) {
        /* mask_branch (knob): one body; its softmax takes the mask where c->tmp.need says */
        kg_block_needs_mask(g, c);
        block_body(g, c, 2, lab_loop);
    } else {
        if (windows && !one) {
            ptx_r need = kg_block_needs_mask(g, c);
            INS("@$ bra %s;", need, ptx_lab(g->f, lab_masked));
        }
        if (!one)
            block_body(g, c, 0, lab_loop);
        if (windows) {
            ptx_place(g->f, lab_masked);
            block_body(g, c, 1, lab_loop);
        }
    }

    /* 3. the tile's last PV */
    ptx_place(g->f, lab_pv);
    last_pv(g, c);
}

void kg_consumer(kgen *g)
{
    const fa3_plan *p = g->p;
    const int nwg = p->num_consumer_wg;
    cons c = {0};
    INS("setmaxnreg.inc.sync.aligned.u32 %d;", p->consumer_regs);
    c.cw = ptx_reg(g->f, PTX_B32, "cw");
    c.ptrue = ptx_reg(g->f, PTX_PRED, "ptrue");
    c.pfalse = ptx_reg(g->f, PTX_PRED, "pfalse");
    INS("sub.u32 $, $, 1;", c.cw, g->wg);
    INS("setp.eq.u32 $, $, $;", c.ptrue, c.cw, c.cw);
    INS("setp.ne.u32 $, $, $;", c.pfalse, c.cw, c.cw);
    c.score_mul = kg_param(g, PTX_F32, "f32", FA3P_OFF_SCORE_MUL, "score_mul");
    c.scale_log2 = kg_param(g, PTX_F32, "f32", FA3P_OFF_SCALE_LOG2, "scale_log2");
    c.lse_mul = kg_param(g, PTX_F32, "f32", FA3P_OFF_LSE_MUL, "lse_mul");
    if (p->fp8)
        kg_descales_init(g, &c);
    c.ps = kg_pipe_init(g);
    c.pps = (pipe_state){ptx_reg(g->f, PTX_B32, "pstage"), ptx_reg(g->f, PTX_B32, "pphase")};
    c.qc = ptx_reg(g->f, PTX_B32, "qc");
    c.qbuf = ptx_reg(g->f, PTX_B32, "qbuf");
    g->round = ptx_reg(g->f, PTX_B32, "round");
    INS("mov.u32 $, 0;", c.qc);
    INS("mov.u32 $, 0;", c.qbuf);
    INS("mov.u32 $, 0;", g->round);
    kg_tile_start(g);
    c.s = ptx_array(g->f, PTX_F32, "s", p->block_n / 2); /* S = Q·Kᵀ, then P in fp32 */
    if (p->diag_half) /* the first block's half QK (its own registers: written into s, its
                         wgmma was serialized at head_dim 64, C7511) */
        c.sh = ptx_array(g->f, PTX_F32, "sh", p->block_n / 4);
    /* P as A fragments: 16-bit (2 a register) or e4m3 (4 a register) */
    c.a = ptx_array(g->f, PTX_B32, "a", p->block_n / (p->fp8 ? 8 : 4));
    c.o = ptx_array(g->f, PTX_F32, "o", p->hdv_chunks * 32); /* O (padded head_dim_v) */
    kg_scratch_init(g);
    g->sc.ring_addr = p->ring_addr;
    c.tmp.dq = ptx_reg(g->f, PTX_B64, "dq");
    c.tmp.dk = ptx_reg(g->f, PTX_B64, "dk");
    c.tmp.dv = ptx_reg(g->f, PTX_B64, "dv");
    if (p->uniform_desc) {
        c.tmp.dlo = ptx_reg(g->f, PTX_B32, "dlo");
        c.tmp.dhi = ptx_reg(g->f, PTX_B32, "dhi");
    }
    if (p->ring_addr) { /* stage 0's descriptor words (ring_wait_desc); the shifted addresses
                           stay below 2^14, under the LBO field at bit 16 */
        c.kdesc0 = ring_desc_word(g, "kdesc0", p->smem_k, 1);
        if (!p->fp8)
            c.vdesc0 = ring_desc_word(g, "vdesc0", p->smem_v, p->block_n * 128 >> 4);
    }
    c.tmp.koff = ptx_reg(g->f, PTX_B32, "koff");
    c.tmp.voff = ptx_reg(g->f, PTX_B32, "voff");
    c.tmp.kaddr = ptx_reg(g->f, PTX_B32, "kaddr");
    c.tmp.vaddr = ptx_reg(g->f, PTX_B32, "vaddr");
    for (int r = 0; r < 2; r++) {
        c.tmp.bmax[r] = ptx_reg(g->f, PTX_F32, "bmax");
        c.tmp.mnew[r] = ptx_reg(g->f, PTX_F32, "mnew");
        c.tmp.mz[r] = ptx_reg(g->f, PTX_F32, "mz");
        c.tmp.psum[r] = ptx_reg(g->f, PTX_F32, "psum");
        c.tmp.rlast[r] = ptx_reg(g->f, PTX_B32, "rlast");
        c.tmp.rfirst[r] = ptx_reg(g->f, PTX_B32, "rfirst");
    }
    c.tmp.shf = ptx_reg(g->f, PTX_F32, "shf");
    for (int k = 0; k < 3 && p->ex2_emu; k++)
        c.tmp.emu[k] = ptx_reg(g->f, PTX_F32, "emu");
    for (int k = 0; k < 2 && p->ex2_emu; k++)
        c.tmp.emu_i[k] = ptx_reg(g->f, PTX_B32, "emui");
    for (int r = 0; r < 2 && p->tree_reduce; r++)
        for (int k = 0; k < 3; k++) {
            c.tmp.racc[r][k] = ptx_reg(g->f, PTX_F32, "racc");
            c.tmp.sacc[r][k] = ptx_reg(g->f, PTX_F32, "sacc");
        }
    if (p->fp8) {
        c.h[0] = ptx_reg(g->f, PTX_B16, "plo");
        c.h[1] = ptx_reg(g->f, PTX_B16, "phi");
    }
    c.tmp.nokey = ptx_reg(g->f, PTX_PRED, "nokey");
    c.tmp.col0 = ptx_reg(g->f, PTX_B32, "col0");
    c.tmp.lanecol = ptx_reg(g->f, PTX_B32, "lanecol");
    c.tmp.done = ptx_reg(g->f, PTX_PRED, "done");
    c.tmp.need = ptx_reg(g->f, PTX_PRED, "needmask");
    c.tmp.bk0 = ptx_reg(g->f, PTX_B32, "bk0");
    c.tmp.bk1 = ptx_reg(g->f, PTX_B32, "bk1");
    c.tmp.qlast = ptx_reg(g->f, PTX_PRED, "qlast");
    c.descq = ptx_reg(g->f, PTX_B64, "descq");
    c.desck = ptx_reg(g->f, PTX_B64, "desck");
    c.descv = ptx_reg(g->f, PTX_B64, "descv");
    for (int r = 0; r < 2; r++) {
        c.m[r] = ptx_reg(g->f, PTX_F32, "m");
        c.l[r] = ptx_reg(g->f, PTX_F32, "l");
        c.alpha[r] = ptx_reg(g->f, PTX_F32, "alpha");
        c.l_lse[r] = p->fast_exp && p->cond_rescale ? ptx_reg(g->f, PTX_F32, "llse")
                                                               : c.l[r];
    }
    if (p->cond_rescale)
        c.rescale = ptx_reg(g->f, PTX_PRED, "rescale");
    if (p->fast_exp) {
        for (int r = 0; r < 2; r++) {
            c.e[r] = ptx_reg(g->f, PTX_F32, "e");
            c.tmp.cr[r] = ptx_reg(g->f, PTX_F32, "cr");
            c.tmp.noff[r] = ptx_reg(g->f, PTX_F32, "noff");
            c.tmp.enew[r] = ptx_reg(g->f, PTX_F32, "enew");
        }
        c.tmp.c2 = ptx_reg(g->f, PTX_F32, "c2");
        c.tmp.big = ptx_reg(g->f, PTX_PRED, "big");
        c.tmp.p16 = ptx_reg(g->f, PTX_B16, "p16");
        c.own_max = ptx_reg(g->f, PTX_F32, "ownmax");
        ptx_r q = ptx_reg(g->f, PTX_B32, "lq"), z = ptx_reg(g->f, PTX_PRED, "lq0");
        INS("and.b32 $, $, 3;", q, g->lane);
        INS("setp.eq.u32 $, $, 0;", z, q);
        INS("selp.f32 $, " ONE_F ", " ZERO_F ", $;", c.own_max, z);
    }
    /* the ping-pong barriers: mine (nb_pingpong + cw) and the next consumer's */
    for (int w = 0; w < nwg && p->pingpong; w++)
        ptx_named_bar(g->f, p->nb_pingpong + w, 256);
    c.pp_own = ptx_reg(g->f, PTX_B32, "ppown");
    c.pp_next = ptx_reg(g->f, PTX_B32, "ppnext");
    if (p->pingpong) {
        /* the last consumer gives consumer 0 the first turn, once */
        const int lab = ptx_label(g->f, "pp");
        ptx_r notlast = ptx_reg(g->f, PTX_PRED, "notlast");
        INS("setp.ne.u32 $, $, %d;", notlast, c.cw, nwg - 1);
        INS("@$ bra %s;", notlast, ptx_lab(g->f, lab));
        INS("bar.arrive %d, 256;", p->nb_pingpong);
        ptx_place(g->f, lab);
    }

    const int lab_tile = ptx_label(g->f, "cons_tile"), lab_exit = ptx_label(g->f, "cons_exit");
    const int lab_loop = ptx_label(g->f, "cons_loop"), lab_pv = ptx_label(g->f, "cons_pv");
    c.lab_epilogue = ptx_label(g->f, "epilogue");
    if (p->dyn_sched) /* the tile indices the producer hands over, use round (kg_tile_take) */
        g->dyn_tile = ptx_reg(g->f, PTX_B32, "dtile");
    ptx_place(g->f, lab_tile);
    if (p->dyn_sched)
        kg_tile_take(g, g->round);
    c.t = kg_tile_next(g, lab_exit);
    if (p->fp8)
        kg_descales_tile(g, &c);
    tile_state_init(g, &c);
    kg_rows_init(g, &c);
    ptx_r empty = ptx_reg(g->f, PTX_PRED, "notile");
    INS("setp.le.s32 $, $, 0;", empty, c.t.niters);
    INS("@$ bra %s;", empty, ptx_lab(g->f, c.lab_epilogue));
    q_wait_desc(g, &c);
    if (q_desc_tile(p))
        q_tile_descs(g, &c);
    if (p->pingpong) {
        /* my ping-pong barrier and the next consumer's (per tile: short-lived registers) */
        INS("add.u32 $, $, %d;", c.pp_own, c.cw, p->nb_pingpong);
        INS("add.u32 $, $, 1;", c.pp_next, c.cw);
        kg_urem_imm_to(g, c.pp_next, c.pp_next, (uint32_t)nwg);
        INS("add.u32 $, $, %d;", c.pp_next, c.pp_next, p->nb_pingpong);
    }

    const int windows = p->cfg.mask != FA3_MASK_NONE;
    c.it = ptx_reg(g->f, PTX_B32, "it");
    c.n = ptx_reg(g->f, PTX_B32, "n");
    INS("mov.u32 $, 0;", c.it);
    INS("sub.s32 $, $, 1;", c.n, c.t.nmax);
    if (p->merge_ends) /* plan.c: where the tile loop has one body and no half copy */
        merged_loop(g, &c, windows, lab_loop);
    else if (p->first_in_loop)
        split_joined(g, &c, windows, lab_loop, lab_pv);
    else
        split_loop(g, &c, windows, lab_loop, lab_pv);

    kg_epilogue(g, &c);
    INS("add.u32 $, $, 1;", g->round, g->round);
    INS("bra.uni %s;", ptx_lab(g->f, lab_tile));

    ptx_place(g->f, lab_exit);
    if (p->o_stage) {
        /* the TMA stores of O must finish before the CTA (and its shared memory) goes away */
        ptx_r lead = kg_wg_lead(g, "wglead");
        INS("@$ cp.async.bulk.wait_group 0;", lead);
    }
    if (p->pingpong) {
        /* consumer 0 takes the last consumer's last arrive */
        ptx_r not0 = ptx_reg(g->f, PTX_PRED, "notcw0");
        INS("setp.ne.u32 $, $, 0;", not0, c.cw);
        INS("@$ bra %s;", not0, ptx_lab(g->f, g->lab_done));
        INS("bar.sync %d, 256;", p->nb_pingpong);
    }
    INS("bra.uni %s;", ptx_lab(g->f, g->lab_done));
}
