/*
 * Internal interface of the forward kernel's generator: the state one kernel's emitters share and
 * the entry point of each role. The plan (plan.c) decides; these files only write PTX:
 *   kernel.c     the kernel: header, parameters, prologue (barrier init), the roles' dispatch
 *   pipeline.c   mbarriers (the plan's table) and the K/V ring's stage/phase state
 *   tile_order.c the persistent tile loop's index and decode (tile_order.h describes them)
 *   varlen_order.c  varlen: the longest-first tile table, built at kernel start and decoded
 *   producer.c   warpgroup 0: TMA loads of Q, K, V
 *   transpose_v.c  e4m3: warpgroup 0's transpose of each V stage
 *   blockinfo.c  which keys each row sees, which key blocks need the mask
 *   mainloop.c   the consumers: QK and PV wgmmas, their overlap, the ping-pong
 *   softmax.c    softcap, mask, online softmax, O rescale, P fragments
 *   epilogue.c   O (TMA store or st.global) and LSE
 */
#ifndef FA3JIT_CODEGEN_KGEN_H
#define FA3JIT_CODEGEN_KGEN_H

#include "codegen/codegen.h"
#include "codegen/ptx.h"

#define NEG_INF "0fFF800000"
#define ZERO_F "0f00000000"
#define ONE_F "0f3F800000"

/* The K/V ring position of one role: stage index and phase bit (FA4's PipelineState). */
typedef struct pipe_state {
    ptx_r stage, phase;
} pipe_state;

/* Temporaries a role's emitters share and rewrite in place, as the kernel's first, hand-written
   generator did: ptxas schedules the same instruction stream differently when every temporary is
   a fresh register (the hd256 loop ran 3-5% slower that way, same PTX otherwise; docs/notes.md),
   so the hot paths keep this reuse pattern. Each use writes before it reads. */
typedef struct scratch {
    ptx_r pw;         /* mbarrier wait result */
    ptx_r pt;         /* a predicate: lane 0 for releases, the mask's per-element test */
    ptx_r wrap, flip; /* ring advance */
    ptx_r bar;        /* an mbarrier address (also it + 1 in the Q release) */
    /* early_pack 2: while fenced, the consumer's releases also take the predicate fence (true at
       run time, opaque to ptxas), so the PV's wait after them stays where it is emitted */
    ptx_r fence;
    int fenced;
    int ring_addr; /* the plan's ring_addr, in the consumers only (the producer's 24 registers
                      spilled with it at hd192/256 masked) */
} scratch;

/* A tile's coordinates and key-block range (tile_order.c). */
typedef struct tile_info {
    ptx_r tile, mblk, head, batch, kvhead, m0;
    ptx_r split; /* split-KV: this tile's split of its (m_block, head, batch) */
    ptx_r nmin, nmax, niters;
    /* the tile's sequence: its lengths (dense: the parameters seqlen_q/k), and for varlen its
       first rows in the packed Q/O and K/V (qoff, koff), the Q rows' TMA coordinate qrow =
       qoff + m0 and the TMA batch coordinate tbatch (dense: m0 and batch; varlen: 0) */
    ptx_r sq, sk, qoff, koff, qrow, tbatch;
} tile_info;

struct kgen;

/* A consumer warpgroup's state (mainloop.c owns it; blockinfo.c, softmax.c, epilogue.c use it). */
typedef struct cons {
    ptx_r cw;                   /* consumer index 0 .. num_consumer_wg-1 */
    ptx_r ptrue, pfalse;        /* wgmma scale-d operands */
    ptx_r score_mul, scale_log2, lse_mul; /* e4m3: this tile's, with its descales folded in */
    struct {
        ptx_r qp, kp, vp, nhk;             /* descale pointers, num_heads_k */
        ptx_r smul, sl2, lmul;             /* the parameters without descales */
        ptx_r v;                           /* the tile's descale_v (epilogue) */
    } ds;                                  /* e4m3 only */
    pipe_state ps, pps;         /* ring position of this block, and of the previous (its V) */
    ptx_r qc, qbuf;             /* Q uses so far; this tile's Q buffer (two buffers) */
    tile_info t;
    ptx_r it, n;                /* block count within the tile, key block index */
    ptx_r row[2];               /* the thread's two query rows (absolute) */
    ptx_r kfirst[2], klast[2];  /* keys each row sees: [kfirst, klast] */
    ptx_r all_last, all_first;  /* last key every row of the tile sees, first key every row sees */
    ptx_r descq, desck, descv;
    ptx_r qdesc[8];             /* q_desc_tile: Q's descriptors of the first 8 k-steps, per tile */
    ptx_r kdesc0, vdesc0;       /* ring_addr: the low descriptor word of K's and V's stage 0
                                   (vdesc0: 16-bit only; e4m3's transposed V keeps its form) */
    ptx_r pp_own, pp_next;      /* ping-pong barrier ids */
    ptx_r s, a, o;              /* arrays: S then P (fp32), P fragments, O accumulators */
    ptx_r sh;                   /* diag_half: the first block's half S, moved into s */
    ptx_r h[2];                 /* e4m3: the two e4m3x2 halves of a P fragment */
    ptx_r m[2], l[2], alpha[2]; /* row max, partial row sum, rescale factor of each row */
    ptx_r e[2];                 /* fast_exp: the offset's rounding, m·c_r - off (exact) */
    ptx_r own_max;              /* fast_exp: 1.0 in one thread of a row's four, else 0 */
    ptx_r l_lse[2];             /* fast_exp with cond_rescale: l without the P-rounding correction
                                   (softmax.c), for the LSE; otherwise the LSE takes l */
    ptx_r rescale;              /* cond_rescale: a pred, some row of the warp took a new max */
    ptx_r first;                /* first_in_loop: a pred, the key-block loop's pass is the tile's
                                   first (no PV in flight, no V to release); cls 0 otherwise */
    /* early_pack 2: the block's K release, emitted by the softmax just before the PV's wait */
    void (*k_release)(struct kgen *g, struct cons *c);
    int lab_epilogue;
    int half; /* diag_half: the code being emitted covers the block's first block_n/2 columns */
    /* the loop body's temporaries (see scratch) */
    struct {
        ptx_r dq, dk, dv;             /* wgmma descriptors of one k-step */
        ptx_r dlo, dhi;               /* a descriptor's words (desc_add) */
        ptx_r koff, voff, kaddr, vaddr; /* ring offsets and operand addresses */
        ptx_r bmax[2], shf, mnew[2], mz[2], psum[2], nokey; /* softmax */
        ptx_r cr[2], noff[2], enew[2], c2, big, p16; /* fast_exp (kept_branch: cr and noff
                                                        carry from block to block, set in the
                                                        tile's first block and where a max
                                                        moves) */
        ptx_r racc[2][3], sacc[2][3]; /* tree_reduce: the max's and sums' other accumulators */
        ptx_r emu[3], emu_i[2];       /* ex2_emu: the polynomial's temporaries */
        ptx_r col0, lanecol, rlast[2], rfirst[2]; /* mask */
        ptx_r done, need, bk0, bk1, qlast; /* loop control, mask decision, Q release */
    } tmp;
} cons;

typedef struct kgen {
    ptx_fn *f;
    const fa3_plan *p;
    const char *ab;  /* wgmma operand type: "bf16", "f16" or "e4m3" */
    const char *cvt; /* O packing (out_dtype), and P packing for 16-bit: "bf16x2" or "f16x2" */
    /* every thread */
    ptx_r thr, wg, warp, lane, sbase, bars;
    ptx_r sq, sk, wl, wr, ntiles;
    ptx_r round; /* this role's tile round */
    ptx_r dyn_tile; /* dyn_sched: the role's current tile index (kg_tile_index returns it) */
    /* varlen: the tile walk's cursor, a sequence vb whose tiles start at index vbase
       (kg_tile_start) */
    ptx_r vb, vbase;
    scratch sc;  /* this role's shared temporaries */
    int lab_done;
    /* the barrier table (indices into f->mbar), from the plan */
    int mb_q_full[2], mb_q_empty[2];
    int mb_k_full[FA3_MAX_STAGES], mb_v_full[FA3_MAX_STAGES];
    int mb_k_empty[FA3_MAX_STAGES], mb_v_empty[FA3_MAX_STAGES];
    int mb_vt_full[FA3_MAX_STAGES], mb_vraw_empty[FA3_MAX_STAGES]; /* e4m3 */
    int mb_tile_full[2], mb_tile_empty[2]; /* dyn_sched */
} kgen;

#define INS(...) ptx_ins(g->f, __VA_ARGS__)

/* pipeline.c */
ptx_r kg_param(kgen *g, ptx_cls cls, const char *type, int off, const char *name);
void kg_mbar_wait(kgen *g, ptx_r addr, ptx_r parity, int mbar);
/* Address of ring barrier mb[stage] (a group of plan->stages barriers 8 bytes apart), into
   g->sc.bar; off receives stage·8 (not written where g->sc.ring_addr: the consumers under the
   ring_addr knob). */
ptx_r kg_ring_bar(kgen *g, const int *mb, ptx_r stage, ptx_r off);
/* dst = the shared address of a ring stage's slot: sbase + off + stage·stage_bytes (off, stage_bytes:
   the plan's smem_k/smem_k_stage, smem_v/smem_v_stage or smem_vt/smem_vt_stage). */
void kg_ring_slot(kgen *g, ptx_r dst, ptx_r stage, int stage_bytes, int off);
/* The role's shared temporaries. */
void kg_scratch_init(kgen *g);
/* Address of Q barrier mb[buffer] (buf: 0 or 1 in a register; one Q buffer: mb[0]). */
ptx_r kg_q_bar(kgen *g, const int *mb, ptx_r buf);
/* One arrive per consumer warp (lane 0) on the barrier at addr: a release site of mbar. */
void kg_release_warp(kgen *g, ptx_r addr, int mbar, const char *site);
/* The same, no arrive where predicate skip is set. */
void kg_release_warp_unless(kgen *g, ptx_r addr, int mbar, ptx_r skip, const char *site);
/* A new predicate: this thread is thread 0 of its warpgroup (name: the register's). */
ptx_r kg_wg_lead(kgen *g, const char *name);
/* the policy operand of a transfer whose l2_hint bit (codegen.h FA3_L2_*) is `bit` (NULL: no
   hint) */
const char *kg_l2_policy(const kgen *g, int bit);
/* TMA box transfers (five: the packed-GQA 5-D box {c0, 0, a, b, c}), with .L2::cache_hint where
   pol is set */
void kg_tma_load(kgen *g, ptx_r dst, ptx_r tm, int c0, ptx_r a, ptx_r b, ptx_r c, ptx_r bar,
                 const char *pol, int five);
void kg_tma_store(kgen *g, ptx_r lead, ptx_r tm, int c0, ptx_r a, ptx_r b, ptx_r c, ptx_r src,
                  const char *pol, int five);
pipe_state kg_pipe_init(kgen *g);
void kg_pipe_advance(kgen *g, pipe_state *s);
void kg_pipe_assign(kgen *g, pipe_state *dst, pipe_state src);

/* tile_order.c */
ptx_r kg_tile_index(kgen *g);
ptx_r kg_tile_index_static(kgen *g); /* the static order's tile of round g->round */
tile_info kg_tile_decode(kgen *g, ptx_r tile);
tile_info kg_tile_bounds(kgen *g, tile_info t);
/* This round's tile of this CTA, decoded; branches to lab_past when the CTA has no tile left. */
tile_info kg_tile_next(kgen *g, int lab_past);
/* Before a role's tile loop: round 0 (and the varlen cursor at sequence 0). */
void kg_tile_start(kgen *g);
/* dyn_sched: the producer's hand-over of tile index g->dyn_tile (its use number k) to the
   consumers, and a consumer's take of use k into g->dyn_tile (tile_order.c). */
void kg_tile_publish(kgen *g, ptx_r k);
void kg_tile_take(kgen *g, ptx_r k);

/* varlen_order.c: the longest-first table (plan->smem_vtab) */
void kg_vtab_build(kgen *g); /* warp 0, in the prologue before the CTA barrier */
void kg_vtab_decode(kgen *g, ptx_r tile, int lab_past, int lab_walk, tile_info *t);

/* transpose_v.c (e4m3): the transpose of one V stage by the producer's threads */
typedef struct vt_thread {
    ptx_r warp, a, b, sel_a, sel_b;
} vt_thread;
void kg_vt_transpose(kgen *g, pipe_state ps);

/* producer.c, mainloop.c */
void kg_producer(kgen *g);
void kg_consumer(kgen *g);

/* S registers of the block the code covers (block_n/2 a thread; half of that for c->half) */
static inline int kg_ns(const kgen *g, const cons *c)
{
    return (g->p->block_n / 2) >> c->half;
}

/* blockinfo.c */
void kg_rows_init(kgen *g, cons *c);
void kg_first_block_reach(kgen *g, cons *c, ptx_r *half, ptx_r *none);
ptx_r kg_block_needs_mask(kgen *g, cons *c);
void kg_apply_mask(kgen *g, cons *c);

/* softmax.c */
void kg_descales_init(kgen *g, cons *c); /* e4m3: the descale parameters, before the tile loop */
void kg_descales_tile(kgen *g, cons *c); /* e4m3: the tile's constants with its descales */
/* early_pack (kg_early_pack): the softmax packs P as it goes (kg_pack_p is then not called) and,
   with pv_in_flight (the block's PV issued before it), waits for the PV after its first
   EARLY_PACK_WAIT exponentials; early_pack 2 emits c->k_release there first, fenced on the row
   sums of those exponentials, because ptxas otherwise hoists the wait above them (softmax.c). */
#define EARLY_PACK_WAIT 10
static inline int kg_early_pack(const fa3_plan *p)
{
    return p->dbg_no_softmax ? 0 : p->early_pack; /* plan.c: e4m3 never takes it */
}
void kg_softmax(kgen *g, cons *c, int masked, int pv_in_flight);
void kg_rescale_o(kgen *g, cons *c);
void kg_pack_p(kgen *g, cons *c);
void kg_zero_p(kgen *g, cons *c, int from);

/* epilogue.c */
ptx_r kg_q_empty_bar(kgen *g, cons *c); /* address of q_empty of this tile's Q buffer */
void kg_epilogue(kgen *g, cons *c);

/* Row (0 or 1) and column (relative to the thread's base column 2·(lane%4)) of the thread's
   accumulator register i (the wgmma f32 accumulator layout: ../shared/docs/hopper-ptx-facts.md). */
static inline int acc_row(int i)
{
    return (i >> 1) & 1;
}
static inline int acc_col(int i)
{
    return 8 * (i >> 2) + (i & 1);
}

#endif
