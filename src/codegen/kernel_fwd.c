/*
 * Emits the FlashAttention-3 forward kernel (sm_90a PTX) for one plan. Decides nothing: every
 * size comes from the plan (plan.c). The kernel, one CTA per (m_block, head, batch) tile:
 *
 *   all threads   init mbarriers (q_full, k_full[s], v_full[s], k_empty[s], v_empty[s]) → bar.sync 0
 *   warpgroup 0   producer: setmaxnreg.dec; one thread issues TMA loads: Q once, then for each key
 *                 block K and V into ring stage s (waiting k_empty/v_empty[s]); completes
 *                 k_full/v_full[s]
 *   warpgroups 1+ consumers: setmaxnreg.inc; each owns 64 query rows; per key block:
 *                 issue S_j = Q·K_jᵀ (wgmma SS) together with O += P_{j-1}·V_{j-1} (wgmma RS,
 *                 P from registers) → release K_j → mask, online softmax of S_j with ex2
 *                 (scale·log2e folded) while PV runs → release V_{j-1} → O *= alpha → pack P_j
 *                 Two consumers alternate their GEMMs through a pair of named barriers (ping-pong).
 *   epilogue      O / l to global memory (dtype of Q), LSE = m·lse_mul + ln(l) (fp32).
 *
 * Layouts (see ../shared/docs/hopper-ptx-facts.md): tiles are loaded as 64-column boxes with the
 * 128-byte swizzle; Q/K are K-major operands, V an MN-major operand (tB = 1).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/emit.h"
#include "kernel_abi.h"

extern const char fa3_tmpl_header[];

#define NEG_INF "0fFF800000"
#define ZERO_F "0f00000000"
#define BAR_WG_FIRST 1 /* named barrier ids 1..num_consumer_wg: "consumer g may issue GEMMs";
                          4 + g: consumer g's own barrier (TMA-store epilogue) */

typedef struct gen {
    fa3_buf *b;
    const fa3_plan *p;
    int label; /* unique label counter */
    const char *ab; /* "bf16" or "f16" */
} gen;

#define E(...) fa3_emitl(g->b, __VA_ARGS__)

static int new_label(gen *g)
{
    return g->label++;
}

static void param_ld(gen *g, const char *type, const char *reg, int off)
{
    E("ld.param.%s %s, [fa3_params+%d];", type, reg, off);
}

/* Spin on an mbarrier phase: bar = 32-bit shared address register, parity = register or imm. */
static void mbar_wait(gen *g, const char *bar, const char *parity)
{
    int l = new_label(g);
    fa3_emitf(g->b, "$Lwait%d:\n", l);
    E("mbarrier.try_wait.parity.shared::cta.b64 %%pw, [%s], %s;", bar, parity);
    E("@!%%pw bra $Lwait%d;", l);
}

/* Register list "{%pre0, %pre1, ...}" of n registers starting at first. */
static void reglist(char *out, size_t cap, const char *pre, int first, int n)
{
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "{");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%%%s%d", i ? ", " : "", pre, first + i);
    snprintf(out + k, cap - k, "}");
}

/* ------------------------------------------------------------------ declarations */
static void emit_decls(gen *g)
{
    const fa3_plan *p = g->p;
    E(".reg .pred %%p<16>;");
    E(".reg .pred %%pw, %%ptrue, %%pfalse;");
    E(".reg .b32 %%r<64>;");
    E(".reg .b64 %%rd<32>;");
    E(".reg .f32 %%f<48>;");
    E(".reg .f32 %%s<%d>;", p->block_n / 2);    /* S = Q·Kᵀ accumulators, then P in fp32 */
    E(".reg .b32 %%a<%d>;", p->block_n / 4);    /* P as 16-bit A fragments */
    E(".reg .f32 %%o<%d>;", p->hdv_chunks * 32); /* O accumulators (padded head_dim_v) */
    E(".reg .b64 %%descq, %%desck, %%descv;");
    E(".reg .b32 %%thr, %%wg, %%warp, %%lane, %%sbase, %%bars;");
    E(".reg .b32 %%mblk, %%head, %%kvhead, %%batch, %%m0, %%sq, %%sk, %%wl, %%wr;");
    E(".reg .b32 %%nmin, %%nmax, %%niters, %%it, %%n, %%stage, %%phase, %%pstage, %%pphase;");
    E(".reg .b32 %%tile, %%round, %%ntiles, %%qc, %%totit;");
    E(".reg .f32 %%score_mul, %%scale_log2, %%lse_mul;");
    E(".reg .f32 %%m0r, %%m1r, %%l0r, %%l1r;");
    E(".reg .b64 %%tmq, %%tmk, %%tmv;");
}

/* Arrivals that complete one phase of a consumer-release barrier (k_empty, v_empty, q_empty):
   one per consumer warp (lane 0, after the warp's wgmma.wait_group). */
static int release_count(const fa3_plan *p)
{
    return 4 * p->num_consumer_wg;
}

/* mbarrier byte offsets from %bars: q_full[0] first, q_empty[0] after the stage barriers, then
   q_full[1], q_empty[1] when there are two Q buffers (q_empty[b] = q_empty[0] + 16·b). */
static int qfull_off(const fa3_plan *p, int b)
{
    return b ? 8 + 32 * p->stages + 8 : 0;
}
static int qempty_off(const fa3_plan *p, int b)
{
    return 8 + 32 * p->stages + 16 * b;
}

/* dst = address of q_full[buffer] (buf: register holding the buffer, 0 or 1; two Q buffers) */
static void emit_qfull_addr(gen *g, const char *buf, const char *pred, const char *dst)
{
    E("setp.ne.u32 %s, %s, 0;", pred, buf);
    E("selp.b32 %s, %d, 0, %s;", dst, qfull_off(g->p, 1), pred);
    E("add.u32 %s, %s, %%bars;", dst, dst);
}

/* dst = address of q_empty of this tile's Q buffer (%r58 holds it with two buffers) */
static void emit_qempty_addr(gen *g, const char *dst)
{
    E("add.u32 %s, %%bars, %d;", dst, qempty_off(g->p, 0));
    if (g->p->q_bufs == 2)
        E("mad.lo.u32 %s, %%r58, 16, %s;", dst, dst); /* q_empty[buffer] */
}

static void emit_release_arrive(gen *g, const char *bar)
{
    E("setp.eq.u32 %%p9, %%lane, 0;");
    E("@%%p9 mbarrier.arrive.shared::cta.b64 _, [%s];", bar);
}

/* ------------------------------------------------------------------ prologue (all threads) */
static void emit_prologue(gen *g)
{
    const fa3_plan *p = g->p;
    E("mov.u32 %%thr, %%tid.x;");
    E("shr.u32 %%wg, %%thr, 7;");
    E("shr.u32 %%warp, %%thr, 5;");
    E("and.b32 %%warp, %%warp, 3;"); /* warp within its warpgroup */
    E("and.b32 %%lane, %%thr, 31;");
    /* 1024-aligned dynamic shared memory base (128B-swizzle atoms need it). */
    E("mov.u32 %%r0, fa3_smem;");
    E("add.u32 %%r0, %%r0, 1023;");
    E("and.b32 %%sbase, %%r0, -1024;");
    E("add.u32 %%bars, %%sbase, %d;", p->smem_bar);

    param_ld(g, "u32", "%sq", FA3P_OFF_SEQLEN_Q);
    param_ld(g, "u32", "%sk", FA3P_OFF_SEQLEN_K);
    param_ld(g, "s32", "%wl", FA3P_OFF_WINDOW_LEFT);
    param_ld(g, "s32", "%wr", FA3P_OFF_WINDOW_RIGHT);
    param_ld(g, "u32", "%ntiles", FA3P_OFF_TOTAL_TILES);

    /* mbarriers: q_full, k_full[s], v_full[s] (1 arrival + tx bytes); k_empty[s], v_empty[s],
       q_empty (one arrival per consumer thread). */
    int lab = new_label(g);
    E("setp.ne.u32 %%p2, %%thr, 0;");
    E("@%%p2 bra $Linit%d;", lab);
    E("mbarrier.init.shared::cta.b64 [%%bars], 1;");
    for (int s = 0; s < p->stages; s++) {
        E("mbarrier.init.shared::cta.b64 [%%bars+%d], 1;", 8 + 8 * s);
        E("mbarrier.init.shared::cta.b64 [%%bars+%d], 1;", 8 + 8 * p->stages + 8 * s);
        E("mbarrier.init.shared::cta.b64 [%%bars+%d], %d;", 8 + 16 * p->stages + 8 * s,
          release_count(p)); /* k_empty[s] */
        E("mbarrier.init.shared::cta.b64 [%%bars+%d], %d;", 8 + 24 * p->stages + 8 * s,
          release_count(p)); /* v_empty[s] */
    }
    for (int b = 0; b < p->q_bufs; b++) {
        if (b)
            E("mbarrier.init.shared::cta.b64 [%%bars+%d], 1;", qfull_off(p, b));
        E("mbarrier.init.shared::cta.b64 [%%bars+%d], %d;", qempty_off(p, b),
          4 * p->num_consumer_wg); /* q_empty[b]: lane 0 of each consumer warp */
    }
    E("fence.mbarrier_init.release.cluster;");
    fa3_emitf(g->b, "$Linit%d:\n", lab);
    E("bar.sync 0;");
}

/* Decodes tile index %tile into (mblk, head, batch, kvhead, m0) and the key-block range
   [nmin, nmax) with niters = nmax - nmin (≤ 0: no visible key). Producer and consumers run the
   same code, so they agree on every tile's work. */
static void emit_tile_decode(gen *g)
{
    const fa3_plan *p = g->p;
    const int bm = p->block_m, bn = p->block_n;
    /* Tile decode. Non-causal: m_block fastest (neighbouring CTAs share K/V in L2).
       Masked: tiles come in L2 sections of section_hb (head, batch) pairs (the last section may
       be smaller); inside a section, (head, batch) fastest and m_block slowest and reversed, so
       the longest rows start first (longest work first) while the CTAs running at one time
       read the K/V of only section_hb heads, which the host sizes to fit in L2. */
    param_ld(g, "u32", "%r1", FA3P_OFF_NUM_M_BLOCKS);
    param_ld(g, "u32", "%r2", FA3P_OFF_NUM_HEADS);
    param_ld(g, "u32", "%r3", FA3P_OFF_HEADS_PER_KV);
    E("mov.u32 %%r4, %%tile;");
    if (p->cfg.mask == FA3_MASK_NONE) {
        E("rem.u32 %%mblk, %%r4, %%r1;");
        E("div.u32 %%r5, %%r4, %%r1;");
    } else {
        param_ld(g, "u32", "%r27", FA3P_OFF_SECTION_HB);
        E("div.u32 %%r6, %%ntiles, %%r1;");      /* heads · batch */
        E("mul.lo.u32 %%r28, %%r27, %%r1;");     /* tiles per full section */
        E("div.u32 %%r29, %%r4, %%r28;");        /* section */
        E("mul.lo.u32 %%r37, %%r29, %%r28;");
        E("sub.u32 %%r37, %%r4, %%r37;");        /* tile within its section */
        E("mul.lo.u32 %%r38, %%r29, %%r27;");    /* first (head, batch) of the section */
        E("sub.u32 %%r39, %%r6, %%r38;");
        E("min.u32 %%r39, %%r39, %%r27;");       /* (head, batch) pairs in this section */
        E("div.u32 %%r7, %%r37, %%r39;");        /* reversed m index */
        E("rem.u32 %%r5, %%r37, %%r39;");
        E("add.u32 %%r5, %%r5, %%r38;");         /* head + batch·heads */
        E("sub.u32 %%r8, %%r1, 1;");
        E("sub.u32 %%mblk, %%r8, %%r7;");
    }
    E("rem.u32 %%head, %%r5, %%r2;");
    E("div.u32 %%batch, %%r5, %%r2;");
    E("div.u32 %%kvhead, %%head, %%r3;");
    E("mul.lo.u32 %%m0, %%mblk, %d;", bm);

    /* Key-block range [nmin, nmax) visible to rows m0 .. m0+bm-1 (bottom-right aligned). */
    E("sub.s32 %%r9, %%sk, %%sq;");          /* diagonal offset sk - sq */
    E("mov.u32 %%r10, %%sk;");               /* exclusive key end */
    E("setp.ge.s32 %%p0, %%wr, 0;");
    E("add.s32 %%r11, %%m0, %d;", bm);
    E("add.s32 %%r11, %%r11, %%r9;");
    E("add.s32 %%r11, %%r11, %%wr;");         /* m0 + bm + sk - sq + wr */
    E("min.s32 %%r11, %%r11, %%r10;");
    E("selp.b32 %%r10, %%r11, %%r10, %%p0;");
    E("max.s32 %%r10, %%r10, 0;");
    E("add.s32 %%r10, %%r10, %d;", bn - 1);
    E("div.s32 %%nmax, %%r10, %d;", bn);
    E("mov.u32 %%nmin, 0;");
    E("setp.ge.s32 %%p1, %%wl, 0;");
    E("add.s32 %%r12, %%m0, %%r9;");
    E("sub.s32 %%r12, %%r12, %%wl;");         /* first visible key of row m0 */
    E("max.s32 %%r12, %%r12, 0;");
    E("div.s32 %%r12, %%r12, %d;", bn);
    E("selp.b32 %%nmin, %%r12, 0, %%p1;");
    E("sub.s32 %%niters, %%nmax, %%nmin;");
    E("max.s32 %%niters, %%niters, 0;");

}

/* %tile = this CTA's tile of round %round. Non-causal: ctaid.x + round·nctaid.x. Masked
   (tiles sorted longest first): alternate direction each round (boustrophedon), so the CTA
   that took the longest tile of one round takes the shortest of the next. */
static void emit_tile_index(gen *g)
{
    E("mov.u32 %%r14, %%nctaid.x;");
    E("mov.u32 %%r15, %%ctaid.x;");
    if (g->p->cfg.mask != FA3_MASK_NONE) {
        E("and.b32 %%r16, %%round, 1;");
        E("setp.ne.u32 %%p5, %%r16, 0;");
        E("sub.u32 %%r16, %%r14, 1;");
        E("sub.u32 %%r16, %%r16, %%r15;");
        E("selp.b32 %%r15, %%r16, %%r15, %%p5;");
    }
    E("mad.lo.u32 %%tile, %%round, %%r14, %%r15;");
}

/* Stage/phase bookkeeping shared by producer and consumers: advance after each key block. */
static void emit_stage_advance(gen *g)
{
    E("add.u32 %%stage, %%stage, 1;");
    E("setp.eq.u32 %%p3, %%stage, %d;", g->p->stages);
    E("selp.b32 %%stage, 0, %%stage, %%p3;");
    E("xor.b32 %%r13, %%phase, 1;");
    E("selp.b32 %%phase, %%r13, %%phase, %%p3;");
}

/* ------------------------------------------------------------------ producer warpgroup */

/* Producer: load this tile's Q (use number %qc) into buffer qc mod q_bufs once the consumers
   released that buffer's previous use (q_empty), completing q_full of the buffer. Uses only
   registers that are dead in the producer loop (%r27-%r29, %r37). */
static void emit_prod_q(gen *g)
{
    const fa3_plan *p = g->p;
    const int bm = p->block_m;
    int lab = new_label(g);
    E("setp.lt.u32 %%p5, %%qc, %d;", p->q_bufs);
    E("@%%p5 bra $Lqfree%d;", lab);
    if (p->q_bufs == 1) {
        E("add.u32 %%r28, %%qc, 1;");
        E("and.b32 %%r28, %%r28, 1;"); /* parity of use qc-1 */
        E("add.u32 %%r27, %%bars, %d;", qempty_off(p, 0));
    } else {
        E("and.b32 %%r29, %%qc, 1;");  /* buffer */
        E("shr.u32 %%r28, %%qc, 1;");
        E("add.u32 %%r28, %%r28, 1;");
        E("and.b32 %%r28, %%r28, 1;"); /* parity of the buffer's previous use */
        E("shl.b32 %%r37, %%r29, 4;");
        E("add.u32 %%r27, %%bars, %d;", qempty_off(p, 0));
        E("add.u32 %%r27, %%r27, %%r37;");
    }
    mbar_wait(g, "%r27", "%r28");
    fa3_emitf(g->b, "$Lqfree%d:\n", lab);
    if (p->q_bufs == 1) {
        E("mov.u32 %%r27, %%bars;");
        E("add.u32 %%r37, %%sbase, %d;", p->smem_q);
    } else {
        E("and.b32 %%r29, %%qc, 1;");
        emit_qfull_addr(g, "%r29", "%p5", "%r27");
        E("mad.lo.u32 %%r37, %%r29, %d, %%sbase;", p->smem_q_buf);
        E("add.u32 %%r37, %%r37, %d;", p->smem_q);
    }
    E("add.u32 %%qc, %%qc, 1;");
    /* Q: hd_chunks boxes of {64 columns, bm rows}. */
    E("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r27], %d;", p->hd_chunks * bm * 128);
    for (int c = 0; c < p->hd_chunks; c++) {
        E("add.u32 %%r28, %%r37, %d;", c * bm * 128);
        E("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%%r28], "
          "[%%tmq, {%d, %%m0, %%head, %%batch}], [%%r27];", c * 64);
    }
}

static void emit_producer(gen *g)
{
    const fa3_plan *p = g->p;
    const int bn = p->block_n;
    E("setmaxnreg.dec.sync.aligned.u32 %d;", p->producer_regs);
    E("setp.ne.u32 %%p4, %%thr, 0;");
    E("@%%p4 bra $Ldone;");
    E("mov.b64 %%rd0, fa3_params;");
    E("cvta.param.u64 %%tmq, %%rd0;");
    E("add.s64 %%tmk, %%tmq, %d;", FA3P_OFF_TMAP_K);
    E("add.s64 %%tmv, %%tmq, %d;", FA3P_OFF_TMAP_V);
    E("add.s64 %%tmq, %%tmq, %d;", FA3P_OFF_TMAP_Q);
    E("mov.u32 %%stage, 0;");
    E("mov.u32 %%phase, 0;");
    E("mov.u32 %%qc, 0;");
    E("mov.u32 %%totit, 0;");
    E("mov.u32 %%round, 0;");

    /* Persistent loop over this CTA's tiles, one per round (emit_tile_index). */
    fa3_emitf(g->b, "$Lprod_tile:\n");
    emit_tile_index(g);
    E("setp.ge.u32 %%p5, %%tile, %%ntiles;");
    E("@%%p5 bra $Lprod_end;");
    emit_tile_decode(g);
    E("setp.le.s32 %%p5, %%niters, 0;");
    E("@%%p5 bra $Lprod_next;");
    if (p->q_bufs == 2)
        emit_prod_q(g);

    E("mov.u32 %%it, 0;");
    fa3_emitf(g->b, "$Lprod_loop:\n");
    E("sub.s32 %%n, %%nmax, %%it;");
    E("sub.s32 %%n, %%n, 1;");
    E("mul.lo.s32 %%r15, %%n, %d;", bn); /* first key row of this block */
    /* K: wait until consumers released this stage's K (first pass: parity 1 falls through) */
    E("shl.b32 %%r16, %%stage, 3;");
    E("add.u32 %%r17, %%bars, %d;", 8 + 16 * p->stages);
    E("add.u32 %%r17, %%r17, %%r16;"); /* k_empty[stage] */
    E("xor.b32 %%r18, %%phase, 1;");
    mbar_wait(g, "%r17", "%r18");
    E("add.u32 %%r19, %%bars, 8;");
    E("add.u32 %%r19, %%r19, %%r16;"); /* k_full[stage] */
    E("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r19], %d;", p->smem_k_stage);
    E("mad.lo.u32 %%r20, %%stage, %d, %%sbase;", p->smem_k_stage);
    for (int c = 0; c < p->hd_chunks; c++) {
        E("add.u32 %%r21, %%r20, %d;", p->smem_k + c * bn * 128);
        E("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%%r21], "
          "[%%tmk, {%d, %%r15, %%kvhead, %%batch}], [%%r19];", c * 64);
    }
    if (p->q_bufs == 1) {
        /* the tile's first K is on its way; now wait for the Q buffer and load Q */
        int lab = new_label(g);
        E("setp.ne.u32 %%p5, %%it, 0;");
        E("@%%p5 bra $Lq_done%d;", lab);
        emit_prod_q(g);
        fa3_emitf(g->b, "$Lq_done%d:\n", lab);
    }
    /* V: wait for v_empty[stage] */
    E("add.u32 %%r17, %%bars, %d;", 8 + 24 * p->stages);
    E("add.u32 %%r17, %%r17, %%r16;"); /* v_empty[stage] */
    mbar_wait(g, "%r17", "%r18");
    E("add.u32 %%r22, %%bars, %d;", 8 + 8 * p->stages);
    E("add.u32 %%r22, %%r22, %%r16;"); /* v_full[stage] */
    E("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r22], %d;", p->smem_v_stage);
    E("mad.lo.u32 %%r23, %%stage, %d, %%sbase;", p->smem_v_stage);
    for (int c = 0; c < p->hdv_chunks; c++) {
        E("add.u32 %%r24, %%r23, %d;", p->smem_v + c * bn * 128);
        E("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%%r24], "
          "[%%tmv, {%d, %%r15, %%kvhead, %%batch}], [%%r22];", c * 64);
    }
    emit_stage_advance(g);
    E("add.u32 %%it, %%it, 1;");
    E("setp.lt.s32 %%p6, %%it, %%niters;");
    E("@%%p6 bra $Lprod_loop;");
    E("add.u32 %%totit, %%totit, %%niters;");
    fa3_emitf(g->b, "$Lprod_next:\n");
    E("add.u32 %%round, %%round, 1;");
    E("bra.uni $Lprod_tile;");

    /* Tail: wait until the consumers released every stage still in use, so no TMA write can
       outlive the producer thread. */
    fa3_emitf(g->b, "$Lprod_end:\n");
    E("setp.eq.u32 %%p5, %%totit, 0;");
    E("@%%p5 bra $Ldone;");
    E("min.u32 %%r25, %%totit, %d;", p->stages);
    E("mov.u32 %%r26, 0;");
    fa3_emitf(g->b, "$Lprod_tail:\n");
    E("shl.b32 %%r16, %%stage, 3;");
    E("add.u32 %%r17, %%bars, %d;", 8 + 24 * p->stages); /* v_empty: released last */
    E("add.u32 %%r17, %%r17, %%r16;");
    E("xor.b32 %%r18, %%phase, 1;");
    mbar_wait(g, "%r17", "%r18");
    emit_stage_advance(g);
    E("add.u32 %%r26, %%r26, 1;");
    E("setp.lt.s32 %%p6, %%r26, %%r25;");
    E("@%%p6 bra $Lprod_tail;");
    E("bra.uni $Ldone;");
}

/* ------------------------------------------------------------------ consumer pieces */

/* S = Q·Kᵀ for this warpgroup's 64 rows: hd/16 SS wgmmas of m64n{bn}k16. */
static void emit_qk(gen *g)
{
    const fa3_plan *p = g->p;
    char regs[4096];
    reglist(regs, sizeof regs, "s", 0, p->block_n / 2);
    E("wgmma.fence.sync.aligned;");
    for (int ks = 0; ks < p->hd_chunks * 4; ks++) { /* padded columns are zeros (TMA fill) */
        int chunk = ks / 4, within = ks % 4;
        int qoff = (chunk * p->block_m * 128 + within * 32) >> 4;
        int koff = (chunk * p->block_n * 128 + within * 32) >> 4;
        E("add.s64 %%rd1, %%descq, %d;", qoff);
        E("add.s64 %%rd2, %%desck, %d;", koff);
        E("wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, %%rd1, %%rd2, %s, 1, 1, 0, 0;",
          p->block_n, g->ab, g->ab, regs, ks ? "%ptrue" : "%pfalse");
    }
    E("wgmma.commit_group.sync.aligned;");
}

/* O += P·V: bn/16 RS wgmmas of m64n{hdv}k16, P from registers, V MN-major (tB = 1). With
   pv_split, each k-step is split into wgmmas of at most 128 columns: O registers 64h.. hold
   columns 128h.., whose V boxes start 2h boxes (2h·bn·128 bytes) further. */
static void emit_pv(gen *g)
{
    const fa3_plan *p = g->p;
    const int ncols = p->hdv_chunks * 64;
    const int step = ncols;
    char oregs[4096], aregs[128];
    E("wgmma.fence.sync.aligned;");
    for (int kk = 0; kk < p->block_n / 16; kk++) {
        reglist(aregs, sizeof aregs, "a", 4 * kk, 4);
        for (int c0 = 0; c0 < ncols; c0 += step) {
            int n = ncols - c0 < step ? ncols - c0 : step;
            reglist(oregs, sizeof oregs, "o", c0 / 2, n / 2);
            E("add.s64 %%rd3, %%descv, %d;", (kk * 16 * 128 + (c0 / 64) * p->block_n * 128) >> 4);
            E("wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, %s, %%rd3, %%ptrue, 1, 1, 1;",
              n, g->ab, g->ab, oregs, aregs);
        }
    }
    E("wgmma.commit_group.sync.aligned;");
}

/* Row of accumulator register i within the thread's pair of rows (0 or 1). */
static int acc_row(int i)
{
    return (i >> 1) & 1;
}
/* Column of accumulator register i relative to the thread's base column 2·(lane%4). */
static int acc_col(int i)
{
    return 8 * (i >> 2) + (i & 1);
}

/* Softcap, mask, online softmax; leaves P (fp32) in %s and the rescale factors alpha of the two
   rows in %f10/%f11. Row maxima %m0r/%m1r and partial row sums %l0r/%l1r are per thread. */
static void emit_softmax(gen *g, int masked)
{
    const fa3_plan *p = g->p;
    const int ns = p->block_n / 2;
    if (p->dbg_no_softmax) {
        /* timing only: P = S as it comes (no softcap, mask, max, exp or sum), alpha = 1; l stays
           0, so O is written as 0 (or NaN) and LSE as -inf */
        E("mov.f32 %%f10, 0f3F800000;");
        E("mov.f32 %%f11, 0f3F800000;");
        return;
    }
    if (p->cfg.softcap) {
        for (int i = 0; i < ns; i++) {
            E("mul.f32 %%s%d, %%s%d, %%score_mul;", i, i);
            E("tanh.approx.f32 %%s%d, %%s%d;", i, i);
        }
    }
    /* Masked variant (key tail, or a block crossing the causal/local window edges).
       %r30/%r31: first visible key of rows 0/1, %r32/%r33: last visible key (inclusive). Relative
       to the thread's base column (%r34) the bounds become %r36/%r37 (last) and %r38/%r39
       (first), so each element costs one compare per bound against its column, an immediate.
       Only local windows have a first visible key above 0 (the runtime passes window_size_left
       -1 for mask none and causal). */
    if (masked) {
        const int lower = p->cfg.mask == FA3_MASK_LOCAL;
        E("mul.lo.s32 %%r34, %%n, %d;", p->block_n);
        E("shl.b32 %%r35, %%lane, 1;");
        E("and.b32 %%r35, %%r35, 6;");
        E("add.s32 %%r34, %%r34, %%r35;"); /* this thread's base key column */
        for (int r = 0; r < 2; r++) {
            E("sub.s32 %%r%d, %%r%d, %%r34;", 36 + r, 32 + r);
            if (lower)
                E("sub.s32 %%r%d, %%r%d, %%r34;", 38 + r, 30 + r);
        }
        for (int i = 0; i < ns; i++) {
            int r = acc_row(i);
            E("setp.lt.s32 %%p9, %%r%d, %d;", 36 + r, acc_col(i)); /* past the last key */
            if (lower) /* before the first key */
                E("setp.gt.or.s32 %%p9, %%r%d, %d, %%p9;", 38 + r, acc_col(i));
            E("selp.f32 %%s%d, " NEG_INF ", %%s%d, %%p9;", i, i);
        }
    }

    /* Row maxima over the thread's values, then across the 4 threads sharing each row. */
    for (int r = 0; r < 2; r++) {
        int fm = 0 + r; /* %f0 / %f1: block maxima */
        int first = 1;
        for (int i = 0; i < ns; i++) {
            if (acc_row(i) != r)
                continue;
            if (first)
                E("mov.f32 %%f%d, %%s%d;", fm, i);
            else
                E("max.f32 %%f%d, %%f%d, %%s%d;", fm, fm, i);
            first = 0;
        }
        E("shfl.sync.bfly.b32 %%f2, %%f%d, 1, 31, -1;", fm);
        E("max.f32 %%f%d, %%f%d, %%f2;", fm, fm);
        E("shfl.sync.bfly.b32 %%f2, %%f%d, 2, 31, -1;", fm);
        E("max.f32 %%f%d, %%f%d, %%f2;", fm, fm);
        const char *mr = r ? "%m1r" : "%m0r";
        /* m_new, and m_z = m_new or 0 while the row has seen no key (so that no (-inf)-(-inf)
           arises); alpha = 2^((m_old - m_z)·scale_log2). The max is subtracted before scaling:
           with the scaled max as an FMA addend, p = 2^(s·c - round(m·c)) is off by the
           rounding of m·c, up to half an ulp of it (4096 at |m·c| = 1e11), so p overflows or
           vanishes for large scores (issue 12, item 1). s - m is exact for every s near m. */
        E("max.f32 %%f%d, %%f%d, %s;", 4 + r, fm, mr);                  /* m_new */
        E("setp.eq.f32 %%p10, %%f%d, " NEG_INF ";", 4 + r);
        E("selp.f32 %%f%d, " ZERO_F ", %%f%d, %%p10;", 6 + r, 4 + r);    /* m_z */
        E("sub.rn.f32 %%f%d, %s, %%f%d;", 10 + r, mr, 6 + r);
        E("mul.rn.f32 %%f%d, %%f%d, %%scale_log2;", 10 + r, 10 + r);
        E("ex2.approx.ftz.f32 %%f%d, %%f%d;", 10 + r, 10 + r);          /* alpha */
        E("mov.f32 %s, %%f%d;", mr, 4 + r);
    }
    /* p = 2^((s - m_z)·scale_log2) (explicit rounding: no contraction into an FMA), partial
       row sums */
    E("mov.f32 %%f12, " ZERO_F ";");
    E("mov.f32 %%f13, " ZERO_F ";");
    for (int i = 0; i < ns; i++) {
        int r = acc_row(i);
        E("sub.rn.f32 %%s%d, %%s%d, %%f%d;", i, i, 6 + r);
        E("mul.rn.f32 %%s%d, %%s%d, %%scale_log2;", i, i);
        E("ex2.approx.ftz.f32 %%s%d, %%s%d;", i, i);
        E("add.f32 %%f%d, %%f%d, %%s%d;", 12 + r, 12 + r, i);
    }
    E("fma.rn.f32 %%l0r, %%l0r, %%f10, %%f12;");
    E("fma.rn.f32 %%l1r, %%l1r, %%f11, %%f13;");
}

/* O *= alpha (per row, %f10/%f11), once the PV wgmma writing O has completed. */
static void emit_rescale_o(gen *g)
{
    if (g->p->dbg_no_softmax)
        return;
    for (int i = 0; i < g->p->hdv_chunks * 32; i++)
        E("mul.f32 %%o%d, %%o%d, %%f%d;", i, i, 10 + acc_row(i));
}

/* P fragments: a[4kk+j] = (lo = p[8kk+2j], hi = p[8kk+2j+1]); cvt puts its first source in the
   upper half. */
static void emit_pack_p(gen *g)
{
    const char *cv = g->p->cfg.dtype == FA3_DTYPE_FP16 ? "f16x2" : "bf16x2";
    for (int j = 0; j < g->p->block_n / 4; j++)
        E("cvt.rn.%s.f32 %%a%d, %%s%d, %%s%d;", cv, j, 2 * j + 1, 2 * j);
}

/* Wait for K of block %n (stage %stage) and build its descriptor (K-major, 128B swizzle). */
static void emit_k_wait_desc(gen *g)
{
    const fa3_plan *p = g->p;
    E("shl.b32 %%r52, %%stage, 3;");
    E("add.u32 %%r53, %%bars, 8;");
    E("add.u32 %%r53, %%r53, %%r52;"); /* k_full[stage] */
    mbar_wait(g, "%r53", "%phase");
    E("mad.lo.u32 %%r54, %%stage, %d, %%sbase;", p->smem_k_stage);
    E("add.u32 %%r54, %%r54, %d;", p->smem_k);
    E("shr.u32 %%r54, %%r54, 4;");
    E("or.b32 %%r54, %%r54, 0x10000;");
    E("mov.b64 %%desck, {%%r54, 0x40000040};");
}

/* Release K of stage %stage once its QK wgmma completed. */
static void emit_k_release(gen *g)
{
    E("shl.b32 %%r52, %%stage, 3;");
    E("add.u32 %%r53, %%bars, %d;", 8 + 16 * g->p->stages);
    E("add.u32 %%r53, %%r53, %%r52;"); /* k_empty[stage] */
    emit_release_arrive(g, "%r53");
}

/* Wait for V of the previous block (stage %pstage) and build its descriptor: MN-major, LBO =
   distance between 64-column boxes (bn·128 B), SBO 1024 B, 128B swizzle. */
static void emit_v_wait_desc(gen *g)
{
    const fa3_plan *p = g->p;
    E("shl.b32 %%r59, %%pstage, 3;");
    E("add.u32 %%r53, %%bars, %d;", 8 + 8 * p->stages);
    E("add.u32 %%r53, %%r53, %%r59;"); /* v_full[pstage] */
    mbar_wait(g, "%r53", "%pphase");
    E("mad.lo.u32 %%r57, %%pstage, %d, %%sbase;", p->smem_v_stage);
    E("add.u32 %%r57, %%r57, %d;", p->smem_v);
    E("shr.u32 %%r57, %%r57, 4;");
    E("or.b32 %%r57, %%r57, %d;", (p->block_n * 128 >> 4) << 16);
    E("mov.b64 %%descv, {%%r57, 0x40000040};");
}

/* Release V of the previous block (after its PV wgmma completed). */
static void emit_v_release(gen *g)
{
    E("shl.b32 %%r59, %%pstage, 3;");
    E("add.u32 %%r53, %%bars, %d;", 8 + 24 * g->p->stages);
    E("add.u32 %%r53, %%r53, %%r59;"); /* v_empty[pstage] */
    emit_release_arrive(g, "%r53");
}

/* q_empty arrive when block %it is the tile's last QK (predicated: no branch may sit between
   a wgmma and its wait). The producer then loads the next tile's Q, and behind it the next
   tile's first K/V, while this tile's last softmax, PV and epilogue run. */
static void emit_q_release_if_last(gen *g)
{
    if (g->p->o_stage == 2)
        return;
    E("add.u32 %%r53, %%it, 1;");
    E("setp.eq.s32 %%p13, %%r53, %%niters;");
    E("setp.eq.and.u32 %%p13, %%lane, 0, %%p13;");
    emit_qempty_addr(g, "%r53");
    E("@%%p13 mbarrier.arrive.shared::cta.b64 _, [%%r53];");
}

/* Consumer warpgroups. */
static void emit_consumer(gen *g)
{
    const fa3_plan *p = g->p;
    const int nwg = p->num_consumer_wg;
    E("setmaxnreg.inc.sync.aligned.u32 %d;", p->consumer_regs);
    E("sub.u32 %%r40, %%wg, 1;"); /* consumer index cw */
    E("setp.eq.u32 %%ptrue, %%r40, %%r40;");
    E("setp.ne.u32 %%pfalse, %%r40, %%r40;");
    param_ld(g, "f32", "%score_mul", FA3P_OFF_SCORE_MUL);
    param_ld(g, "f32", "%scale_log2", FA3P_OFF_SCALE_LOG2);
    param_ld(g, "f32", "%lse_mul", FA3P_OFF_LSE_MUL);
    E("mov.u32 %%stage, 0;");
    E("mov.u32 %%phase, 0;");
    E("mov.u32 %%qc, 0;");
    E("mov.u32 %%round, 0;");

    {
        /* Ping-pong across the whole persistent loop: all consumers run the same GEMM sections
           (tile by tile) in turn 0, 1, .., nwg-1, 0, ..; the last consumer gives consumer 0 the
           first turn once, here, and consumer 0 takes the one arrive left over at the end
           ($Lcons_exit). */
        int lab = new_label(g);
        E("setp.ne.u32 %%p12, %%r40, %d;", nwg - 1);
        E("@%%p12 bra $Lpp%d;", lab);
        E("bar.arrive %d, 256;", BAR_WG_FIRST);
        fa3_emitf(g->b, "$Lpp%d:\n", lab);
    }

    /* Persistent loop over this CTA's tiles (the producer walks the same sequence). */
    fa3_emitf(g->b, "$Lcons_tile:\n");
    emit_tile_index(g);
    E("setp.ge.u32 %%p5, %%tile, %%ntiles;");
    E("@%%p5 bra $Lcons_exit;");
    emit_tile_decode(g);
    for (int i = 0; i < p->hdv_chunks * 32; i++)
        E("mov.f32 %%o%d, " ZERO_F ";", i);
    E("mov.f32 %%m0r, " NEG_INF ";");
    E("mov.f32 %%m1r, " NEG_INF ";");
    E("mov.f32 %%l0r, " ZERO_F ";");
    E("mov.f32 %%l1r, " ZERO_F ";");

    /* This thread's two query rows (absolute): r0 = m0 + 64·cw + 16·warp + lane/4, r1 = r0 + 8 */
    E("shl.b32 %%r41, %%r40, 6;");
    E("add.s32 %%r41, %%r41, %%m0;");
    E("shl.b32 %%r42, %%warp, 4;");
    E("add.s32 %%r41, %%r41, %%r42;");
    E("shr.u32 %%r42, %%lane, 2;");
    E("add.s32 %%r41, %%r41, %%r42;");   /* r0 */
    E("add.s32 %%r43, %%r41, 8;");       /* r1 */
    /* visible key range of each row: [r + sk - sq - wl, r + sk - sq + wr] ∩ [0, sk-1] */
    E("sub.s32 %%r44, %%sk, %%sq;");
    for (int r = 0; r < 2; r++) {
        const char *row = r ? "%r43" : "%r41";
        E("add.s32 %%r45, %s, %%r44;", row);
        E("sub.s32 %%r%d, %%r45, %%wl;", 30 + r);
        E("setp.lt.s32 %%p11, %%wl, 0;");
        E("selp.b32 %%r%d, 0, %%r%d, %%p11;", 30 + r, 30 + r);
        E("add.s32 %%r%d, %%r45, %%wr;", 32 + r);
        E("sub.s32 %%r46, %%sk, 1;");
        E("min.s32 %%r%d, %%r%d, %%r46;", 32 + r, 32 + r);
        E("setp.lt.s32 %%p11, %%wr, 0;");
        E("selp.b32 %%r%d, %%r46, %%r%d, %%p11;", 32 + r, 32 + r);
    }
    /* Per-CTA mask bounds, to decide per key block whether masking is needed at all:
       %r47 = last key visible to every row (min over rows of the row's last key),
       %r48 = first key visible to every row. */
    E("add.s32 %%r47, %%m0, %%r44;");
    E("add.s32 %%r47, %%r47, %%wr;");
    E("sub.s32 %%r46, %%sk, 1;");
    E("setp.lt.s32 %%p11, %%wr, 0;");
    E("selp.b32 %%r47, %%r46, %%r47, %%p11;");
    E("min.s32 %%r47, %%r47, %%r46;");
    E("add.s32 %%r48, %%m0, %d;", p->block_m - 1);
    E("add.s32 %%r48, %%r48, %%r44;");
    E("sub.s32 %%r48, %%r48, %%wl;");
    E("setp.lt.s32 %%p11, %%wl, 0;");
    E("selp.b32 %%r48, 0, %%r48, %%p11;");

    E("setp.le.s32 %%p5, %%niters, 0;");
    E("@%%p5 bra $Lepilogue;");

    /* this warpgroup's Q descriptor: rows 64·cw of each box; K-major, 128B swizzle,
       LBO 16 B (encoded 1), SBO 1024 B (encoded 64) */
    if (p->q_bufs == 2) {
        E("and.b32 %%r58, %%qc, 1;");   /* Q buffer of this tile */
        E("shr.u32 %%r49, %%qc, 1;");
        E("and.b32 %%r49, %%r49, 1;");  /* parity of the buffer's use */
        emit_qfull_addr(g, "%r58", "%p12", "%r50");
        mbar_wait(g, "%r50", "%r49");
        E("mad.lo.u32 %%r49, %%r58, %d, %%sbase;", p->smem_q_buf);
        E("mad.lo.u32 %%r49, %%r40, 8192, %%r49;");
    } else {
        E("and.b32 %%r49, %%qc, 1;");
        mbar_wait(g, "%bars", "%r49");
        E("mad.lo.u32 %%r49, %%r40, 8192, %%sbase;");
    }
    E("add.u32 %%r49, %%r49, %d;", p->smem_q);
    E("shr.u32 %%r49, %%r49, 4;");
    E("or.b32 %%r49, %%r49, 0x10000;");
    E("mov.b64 %%descq, {%%r49, 0x40000040};");
    const int pp = 1;
    if (pp) {
        E("add.u32 %%r55, %%r40, %d;", BAR_WG_FIRST);   /* my scheduling barrier */
        E("add.u32 %%r56, %%r40, 1;");
        E("rem.u32 %%r56, %%r56, %d;", nwg);
        E("add.u32 %%r56, %%r56, %d;", BAR_WG_FIRST);   /* the next consumer's */
    }

    /* Intra-warpgroup overlap (FA3 §3.2): iteration j issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1}
       together, runs the softmax of S_j while the PV product is in flight, then rescales O.
       Key blocks run from the last (key tail, diagonal) down, so the masked blocks come first.
       No control flow may sit between a wgmma and its wait: a branch around a wgmma serializes
       every wgmma (C7514), and any branch or label inside the stage makes ptxas move the wait up
       to it (no C75xx message; the softmax then no longer overlaps the PV product). Sections:
         $Lcons_qk    S_j = Q·K_jᵀ alone, masked softmax, O *= alpha (zeros for block 0)
         $Lcons_loop  unmasked block: S_j and P_{j-1}·V_{j-1} overlapped
         $Lcons_pv    P_{j-1}·V_{j-1} alone: before a masked block's $Lcons_qk, and at the end
       Masked blocks after the first (key tails are first and single, so only causal or local
       windows have them) thus run their two GEMMs one after the other; masked_overlap emits a
       masked copy of the overlapped body for them instead (a kernel 30-40% longer to compile). */
    const int windows = p->cfg.mask != FA3_MASK_NONE;
    const int masked_body = windows;
    E("mov.u32 %%it, 0;");
    E("sub.s32 %%n, %%nmax, 1;");
    if (windows && !masked_body)
        fa3_emitf(g->b, "$Lcons_qk:\n");
    emit_k_wait_desc(g);
    if (pp)
        E("bar.sync %%r55, 256;");
    emit_qk(g);
    if (pp)
        E("bar.arrive %%r56, 256;");
    E("wgmma.wait_group.sync.aligned 0;");
    emit_k_release(g);
    emit_q_release_if_last(g);
    emit_softmax(g, 1);
    if (windows && !masked_body)
        emit_rescale_o(g);
    emit_pack_p(g);
    E("mov.u32 %%pstage, %%stage;");
    E("mov.u32 %%pphase, %%phase;");
    emit_stage_advance(g);
    E("add.u32 %%it, %%it, 1;");

    fa3_emitf(g->b, "$Lcons_loop:\n");
    E("setp.ge.s32 %%p6, %%it, %%niters;");
    E("@%%p6 bra $Lcons_pv;");
    E("sub.s32 %%n, %%nmax, %%it;");
    E("sub.s32 %%n, %%n, 1;");
    if (windows) {
        /* needs the mask: the block ends past the last key every row sees (%r47) or starts
           before the first (%r48) */
        E("mul.lo.s32 %%r50, %%n, %d;", p->block_n);
        E("add.s32 %%r51, %%r50, %d;", p->block_n - 1); /* last key of the block */
        E("setp.gt.s32 %%p8, %%r51, %%r47;");
        E("setp.lt.or.s32 %%p8, %%r50, %%r48, %%p8;");
        E("@%%p8 bra %s;", masked_body ? "$Lcons_masked" : "$Lcons_pv");
    }
    for (int masked = 0; masked <= masked_body; masked++) {
        if (masked)
            fa3_emitf(g->b, "$Lcons_masked:\n");
        emit_k_wait_desc(g);
        emit_v_wait_desc(g);
        if (pp)
            E("bar.sync %%r55, 256;");
        emit_qk(g);
        emit_pv(g);
        if (pp)
            E("bar.arrive %%r56, 256;");
        E("wgmma.wait_group.sync.aligned 1;"); /* S_j ready; PV may still run */
        emit_k_release(g);
        emit_q_release_if_last(g);
        emit_softmax(g, masked);
        E("wgmma.wait_group.sync.aligned 0;");
        emit_v_release(g);
        emit_rescale_o(g);
        emit_pack_p(g);
        E("mov.u32 %%pstage, %%stage;");
        E("mov.u32 %%pphase, %%phase;");
        emit_stage_advance(g);
        E("add.u32 %%it, %%it, 1;");
        E("bra.uni $Lcons_loop;");
    }

    /* O += P_{j-1} · V_{j-1} alone: the tile's last, or before masked block j */
    fa3_emitf(g->b, "$Lcons_pv:\n");
    emit_v_wait_desc(g);
    if (pp)
        E("bar.sync %%r55, 256;");
    emit_pv(g);
    if (pp)
        E("bar.arrive %%r56, 256;");
    E("wgmma.wait_group.sync.aligned 0;");
    emit_v_release(g);
    if (windows && !masked_body) {
        E("setp.lt.s32 %%p6, %%it, %%niters;");
        E("@%%p6 bra $Lcons_qk;");
    }
    E("add.u32 %%qc, %%qc, 1;");
}

/* Epilogue: l reduced over the row's 4 threads, O/l stored in the dtype, LSE in fp32. */
static void emit_epilogue(gen *g)
{
    const fa3_plan *p = g->p;
    const int no = p->hdv_chunks * 32;
    fa3_emitf(g->b, "$Lepilogue:\n");
    for (int r = 0; r < 2; r++) {
        const char *l = r ? "%l1r" : "%l0r";
        E("shfl.sync.bfly.b32 %%f20, %s, 1, 31, -1;", l);
        E("add.f32 %s, %s, %%f20;", l, l);
        E("shfl.sync.bfly.b32 %%f20, %s, 2, 31, -1;", l);
        E("add.f32 %s, %s, %%f20;", l, l);
        E("setp.gt.f32 %%p14, %s, " ZERO_F ";", l);
        E("rcp.rn.f32 %%f%d, %s;", 22 + r, l);
        E("selp.f32 %%f%d, %%f%d, " ZERO_F ", %%p14;", 22 + r, 22 + r);
    }
    const char *cv = p->cfg.dtype == FA3_DTYPE_FP16 ? "f16x2" : "bf16x2";
    if (p->o_stage) {
        /* TMA-store epilogue (when the runtime found O TMA-aligned): the warpgroup writes O/l
           into its staging boxes in the 128B-swizzle layout (16-byte chunk c of row r at chunk
           c ^ (r mod 8)), fences the writes to the async proxy, and its thread 0 stores the
           boxes with cp.async.bulk.tensor; rows past seqlen_q and columns past head_dim_v are
           clipped by the tensor map. Before writing, thread 0 waits until the previous tile's
           store has read the staging buffer. */
        /* staging box b of consumer cw: own buffer (o_stage 1), or the cw's rows of Q chunk b
           (o_stage 2) */
        const int st_base = p->o_stage == 2 ? p->smem_q : p->smem_o;
        const int st_wg = p->o_stage == 2 ? 8192 : p->smem_o_wg;
        const int st_box = p->o_stage == 2 ? p->block_m * 128 : 8192;
        int lab = new_label(g);
        param_ld(g, "u32", "%r62", FA3P_OFF_O_TMA);
        E("setp.eq.u32 %%p15, %%r62, 0;");
        if (p->o_stage == 2) /* an empty tile has no Q of its own to stage in */
            E("setp.le.or.s32 %%p15, %%niters, 0, %%p15;");
        E("@%%p15 bra $Lepi_gmem%d;", lab);
        E("and.b32 %%r62, %%thr, 127;");
        E("setp.eq.u32 %%p13, %%r62, 0;");
        E("@%%p13 cp.async.bulk.wait_group.read 0;");
        E("add.u32 %%r63, %%r40, %d;", BAR_WG_FIRST + 3); /* this warpgroup's own barrier */
        E("bar.sync %%r63, 128;");
        /* %r60 = staging row base of row 16·warp + lane/4, XOR-ed with its swizzle (lane/4)<<4 */
        E("mad.lo.u32 %%r60, %%r40, %d, %%sbase;", st_wg);
        E("add.u32 %%r60, %%r60, %d;", st_base);
        E("shr.u32 %%r62, %%lane, 2;");
        E("shl.b32 %%r61, %%warp, 4;");
        E("add.u32 %%r61, %%r61, %%r62;");
        E("shl.b32 %%r61, %%r61, 7;");
        E("add.u32 %%r60, %%r60, %%r61;");
        E("and.b32 %%r61, %%lane, 3;");
        E("shl.b32 %%r61, %%r61, 2;");
        E("add.u32 %%r60, %%r60, %%r61;");
        E("shl.b32 %%r62, %%r62, 4;");
        E("xor.b32 %%r60, %%r60, %%r62;");
        for (int c = 0; c < 8; c++) {
            E("xor.b32 %%r61, %%r60, %d;", c << 4);
            for (int b = 0; b < p->hdv_chunks; b++)
                for (int rr = 0; rr < 2; rr++) {
                    int i = 4 * (8 * b + c) + 2 * rr; /* registers of row rr, columns 8j.. */
                    E("mul.f32 %%f24, %%o%d, %%f%d;", i, 22 + rr);
                    E("mul.f32 %%f25, %%o%d, %%f%d;", i + 1, 22 + rr);
                    E("cvt.rn.%s.f32 %%r62, %%f25, %%f24;", cv);
                    E("st.shared.b32 [%%r61+%d], %%r62;", b * st_box + rr * 1024);
                }
        }
        E("fence.proxy.async.shared::cta;");
        E("bar.sync %%r63, 128;");
        E("mov.b64 %%rd16, fa3_params;");
        E("cvta.param.u64 %%rd16, %%rd16;");
        E("add.s64 %%rd16, %%rd16, %d;", FA3P_OFF_TMAP_O);
        E("mad.lo.u32 %%r61, %%r40, 64, %%m0;"); /* first row of this warpgroup */
        E("mad.lo.u32 %%r60, %%r40, %d, %%sbase;", st_wg);
        E("add.u32 %%r60, %%r60, %d;", st_base);
        for (int b = 0; b < p->hdv_chunks; b++) {
            E("add.u32 %%r62, %%r60, %d;", b * st_box);
            E("@%%p13 cp.async.bulk.tensor.4d.global.shared::cta.bulk_group "
              "[%%rd16, {%d, %%r61, %%head, %%batch}], [%%r62];", b * 64);
        }
        E("@%%p13 cp.async.bulk.commit_group;");
        if (p->o_stage == 2) {
            /* Q (the staging) is free once the store has read it: release it for the warpgroup's
               four warps */
            E("@%%p13 cp.async.bulk.wait_group.read 0;");
            emit_qempty_addr(g, "%r62");
            E("@%%p13 mbarrier.arrive.shared::cta.b64 _, [%%r62], 4;");
        }
        E("bra.uni $Lepi_lse;");
        fa3_emitf(g->b, "$Lepi_gmem%d:\n", lab);
    }
    /* base address of the thread's two O rows at column 2·(lane%4) */
    param_ld(g, "u64", "%rd4", FA3P_OFF_O_PTR);
    param_ld(g, "s64", "%rd5", FA3P_OFF_O_BATCH_STRIDE);
    param_ld(g, "s64", "%rd6", FA3P_OFF_O_ROW_STRIDE);
    param_ld(g, "s64", "%rd7", FA3P_OFF_O_HEAD_STRIDE);
    E("cvt.u64.u32 %%rd8, %%batch;");
    E("mul.lo.s64 %%rd9, %%rd8, %%rd5;");
    E("cvt.u64.u32 %%rd8, %%head;");
    E("mad.lo.s64 %%rd9, %%rd8, %%rd7, %%rd9;");
    E("shl.b32 %%r60, %%lane, 1;");
    E("and.b32 %%r60, %%r60, 6;");
    E("cvt.u64.u32 %%rd8, %%r60;");
    E("add.s64 %%rd9, %%rd9, %%rd8;");
    for (int r = 0; r < 2; r++) {
        const char *row = r ? "%r43" : "%r41";
        E("cvt.s64.s32 %%rd8, %s;", row);
        E("mad.lo.s64 %%rd%d, %%rd8, %%rd6, %%rd9;", 10 + r);
        E("shl.b64 %%rd%d, %%rd%d, 1;", 10 + r, 10 + r);
        E("add.s64 %%rd%d, %%rd%d, %%rd4;", 10 + r, 10 + r);
    }
    if (p->dbg_no_o_store)
        E("setp.eq.u64 %%p14, %%rd4, 1;");
    for (int r = 0; r < 2; r++) {
        const char *row = r ? "%r43" : "%r41";
        int lab = new_label(g);
        E("setp.ge.s32 %%p15, %s, %%sq;", row);
        E("@%%p15 bra $Lskiprow%d;", lab);
        for (int i = 0; i < no; i += 2) {
            /* columns 8·(i/4) .. +7 of this group; padding beyond head_dim_v is not stored */
            if (acc_row(i) != r || 8 * (i >> 2) >= p->cfg.head_dim_v)
                continue;
            E("mul.f32 %%f24, %%o%d, %%f%d;", i, 22 + r);
            E("mul.f32 %%f25, %%o%d, %%f%d;", i + 1, 22 + r);
            E("cvt.rn.%s.f32 %%r61, %%f25, %%f24;", cv);
            /* dbg_no_o_store: the store is predicated on o_ptr == 1 (never true at run time),
               so O is still computed (an unconditional skip lets ptxas delete the PV GEMMs) */
            E("%sst.global.b32 [%%rd%d+%d], %%r61;", p->dbg_no_o_store ? "@%p14 " : "", 10 + r,
              2 * acc_col(i));
        }
        fa3_emitf(g->b, "$Lskiprow%d:\n", lab);
    }
    if (p->o_stage == 2) {
        /* stored from registers: release Q (lane 0 of each warp) if this tile loaded one */
        E("setp.eq.u32 %%p13, %%lane, 0;");
        E("setp.gt.and.s32 %%p13, %%niters, 0, %%p13;");
        emit_qempty_addr(g, "%r62");
        E("@%%p13 mbarrier.arrive.shared::cta.b64 _, [%%r62];");
    }
    if (p->o_stage)
        fa3_emitf(g->b, "$Lepi_lse:\n");
    /* LSE (natural log): m·lse_mul + ln(l); -inf when the row saw no key. One thread per row. */
    param_ld(g, "u64", "%rd12", FA3P_OFF_LSE_PTR);
    E("setp.eq.u64 %%p15, %%rd12, 0;");
    E("@%%p15 bra $Lepi_end;");
    E("and.b32 %%r62, %%lane, 3;");
    E("setp.ne.u32 %%p15, %%r62, 0;");
    E("@%%p15 bra $Lepi_end;");
    param_ld(g, "u32", "%r63", FA3P_OFF_NUM_HEADS);
    E("mad.lo.u32 %%r63, %%batch, %%r63, %%head;");
    E("cvt.u64.u32 %%rd13, %%r63;");
    E("cvt.u64.u32 %%rd14, %%sq;");
    E("mul.lo.u64 %%rd13, %%rd13, %%rd14;");
    for (int r = 0; r < 2; r++) {
        const char *row = r ? "%r43" : "%r41";
        const char *l = r ? "%l1r" : "%l0r";
        const char *m = r ? "%m1r" : "%m0r";
        int lab = new_label(g);
        E("setp.ge.s32 %%p15, %s, %%sq;", row);
        E("@%%p15 bra $Lskiplse%d;", lab);
        E("lg2.approx.f32 %%f26, %s;", l);
        E("mul.f32 %%f26, %%f26, 0f3F317218;"); /* ln(2) */
        E("fma.rn.f32 %%f26, %s, %%lse_mul, %%f26;", m);
        E("setp.gt.f32 %%p14, %s, " ZERO_F ";", l);
        E("selp.f32 %%f26, %%f26, " NEG_INF ", %%p14;");
        E("cvt.s64.s32 %%rd15, %s;", row);
        E("add.s64 %%rd15, %%rd15, %%rd13;");
        E("shl.b64 %%rd15, %%rd15, 2;");
        E("add.s64 %%rd15, %%rd15, %%rd12;");
        E("st.global.f32 [%%rd15], %%f26;");
        fa3_emitf(g->b, "$Lskiplse%d:\n", lab);
    }
    fa3_emitf(g->b, "$Lepi_end:\n");
    E("add.u32 %%round, %%round, 1;");
    E("bra.uni $Lcons_tile;");
    fa3_emitf(g->b, "$Lcons_exit:\n");
    if (p->o_stage) {
        /* the TMA stores of O must finish before the CTA (and its shared memory) goes away */
        E("and.b32 %%r62, %%thr, 127;");
        E("setp.eq.u32 %%p13, %%r62, 0;");
        E("@%%p13 cp.async.bulk.wait_group 0;");
    }
    {
        E("setp.ne.u32 %%p12, %%r40, 0;");
        E("@%%p12 bra $Ldone;");
        E("bar.sync %d, 256;", BAR_WG_FIRST); /* the last consumer's last arrive */
    }
    E("bra.uni $Ldone;");
}

fa3_status fa3_codegen_ptx(const fa3_plan *plan, char **ptx, size_t *len)
{
    if (!plan || !ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_codegen_ptx: NULL argument");
    fa3_buf buf = {0};
    gen G = {.b = &buf, .p = plan, .label = 0,
             .ab = plan->cfg.dtype == FA3_DTYPE_FP16 ? "f16" : "bf16"};
    gen *g = &G;
    char desc[128];
    fa3_config_describe(&plan->cfg, desc, sizeof desc);

    /* header template with its placeholders filled */
    const char *t = fa3_tmpl_header;
    while (*t) {
        if (!strncmp(t, "@VERSION@", 9)) {
            fa3_emitf(g->b, "%s", FA3JIT_VERSION_STRING);
            t += 9;
        } else if (!strncmp(t, "@GENERATOR@", 11)) {
            fa3_emitf(g->b, "%s", FA3_GENERATOR_VERSION);
            t += 11;
        } else if (!strncmp(t, "@CONFIG@", 8)) {
            fa3_emitf(g->b, "%s", desc);
            if (plan->debug[0]) /* a variant says so (the default plan's header is unchanged) */
                fa3_emitf(g->b, "\n// DEBUG plan, not for production: FA3JIT_PLAN_DEBUG=%s",
                          plan->debug);
            t += 8;
        } else {
            fa3_emitf(g->b, "%c", *t++);
        }
    }
    fa3_emitf(g->b, "\n.extern .shared .align 1024 .b8 fa3_smem[];\n\n");
    fa3_emitf(g->b, ".visible .entry %s(\n\t.param .align 64 .b8 fa3_params[%d]\n)\n",
              FA3_KERNEL_NAME, FA3P_SIZE);
    fa3_emitf(g->b, ".maxntid %d, 1, 1\n.minnctapersm 1\n{\n", plan->threads);
    emit_decls(g);
    emit_prologue(g);
    E("setp.ne.u32 %%p4, %%wg, 0;");
    E("@%%p4 bra $Lconsumer;");
    emit_producer(g);
    fa3_emitf(g->b, "$Lconsumer:\n");
    emit_consumer(g);
    emit_epilogue(g);
    fa3_emitf(g->b, "$Ldone:\n");
    E("ret;");
    fa3_emitf(g->b, "}\n");
    return fa3_buf_finish(&buf, ptx, len);
}
