/*
 * Code generator interface: plan (decide) then emit (write), as in tinygrad's renderer.
 *   fa3_plan_make   — tile sizes, pipeline depth, register split, shared-memory layout, barrier ids;
 *   fa3_codegen_ptx — writes the sm_90a PTX of the forward kernel for a plan; decides nothing.
 */
#ifndef FA3JIT_CODEGEN_H
#define FA3JIT_CODEGEN_H

#include <stddef.h>
#include "common.h"
#include "codegen/config_fields.h"

/* Bumped whenever generated PTX may change for the same config: part of every cache key. */
#define FA3_GENERATOR_VERSION "fa3jit-codegen-2"

#define FA3_MAX_STAGES 8 /* the K/V ring depth config.c accepts at most */

/* Bytes of fa3_plan.debug, the NUL included. */
#define FA3_PLAN_DEBUG_SIZE 256

/* fa3_plan.l2_hint's bits */
enum { FA3_L2_KV = 1, FA3_L2_Q = 2, FA3_L2_O = 4 };

typedef struct fa3_plan {
    fa3_config cfg;        /* canonical config */
    int elem_bytes;        /* Q/K/V element size: 2 for bf16/fp16, 1 for e4m3 */
    int out_bytes;         /* O's element size (out_dtype): 2 */
    int fp8;               /* e4m3: k32 wgmmas with both operands K-major, so the producer
                              warpgroup transposes each V stage into smem_vt (producer.c) */
    int box_cols;          /* elements per 128-byte TMA box row: 64 (16-bit), 128 (e4m3) */
    int qk_steps;          /* k-steps of one QK: hd_chunks·4 k16 steps (16-bit, padded columns
                              included), ceil(head_dim/32) k32 steps (e4m3) */
    int block_m;           /* query rows per CTA = 64 · num_consumer_wg (config block_m 64: one
                              consumer, no ping-pong partner) */
    int block_n;           /* keys per K/V tile */
    int stages;            /* K/V ring depth */
    int num_consumer_wg;   /* consumer warpgroups (each owns 64 query rows) */
    int threads;           /* 128 · (1 + num_consumer_wg) */
    int producer_regs;     /* setmaxnreg.dec target of the producer warpgroup */
    int consumer_regs;     /* setmaxnreg.inc target of the consumer warpgroups */
    int entry_regs;        /* register cap at entry (65536 / threads, rounded down to 8) */
    int dbg_no_o_store;    /* timing only (O not written): no TMA store, and the stores from
                              registers predicated off at run time */
    int wg3;               /* 1: three consumer warpgroups (block_m 192) for head_dim 64 */
    int dbg_no_vt;         /* e4m3, timing only (wrong results): no V transpose work */
    int cond_rescale;      /* bf16/fp16 (FA4's choice; default 1): a warp keeps its rows' max, and
                              skips O's rescale, while no row's max grows by more than 2^8 in
                              the exp2 domain (P then stays below 2^8) */
    int fast_exp;          /* bf16/fp16 (default 1): p = 2^fma(s, c_r, -off) (one FMA a score) with
                              the offset's rounding carried exactly (softmax.c) */
    int pack_first;        /* A/B knob: P packed before O's rescale (FA4's order), not after */
    int mask_branch;       /* causal/local A/B knob: one key-block loop body, whose softmax
                              applies the mask under a branch taken per block (mainloop.c) */
    int fast_div;          /* planner: 2 (session 25's A/B, plan.c); integer divisions as
                              multiply and shifts
                              (divmagic.h, codegen/divide.c): 1 those by a plan constant
                              (block_n, block_m, consumers), 2 also the launch's divisors (the
                              tile decode's num_m_blocks, heads, sections, splits; packed GQA's
                              ratio; the page size), passed in fa3_kernel_params.div; 0 ptxas's
                              generic division everywhere */
    int one_body;          /* causal/local A/B knob: every key block after the first takes the
                              masked body (the mask is a no-op inside the window); the PTX holds
                              one loop body instead of two: ~30% less ptxas time (issue 17) */
    int ex2_emu;           /* A/B knob (fast_exp): the last ex2_emu exponentials of each row's
                              block_n/4 in a thread, in unmasked blocks, by an FMA-pipe
                              polynomial instead of MUFU.EX2 (FA4's Blackwell trick) */
    int uniform_desc;      /* bf16/fp16 (default 1): the warpgroup index through shfl (warp-uniform
                              to ptxas) and the Q descriptor advanced by 32-bit adds: no R2UR per
                              QK wgmma (issue 17's SASS diff against FA4) */
    int late_v_wait;       /* bf16/fp16 (default 1): an overlapped block waits for V between its
                              QK and PV issues (FA4's order), not before the QK */
    int early_pack;        /* A/B knob, not yet measured (16-bit): FA4's order in an overlapped
                              block: the PV's wait after the first 10 exponentials and each P
                              pair packed right after its second exponential (softmax.c), not
                              the wait after the softmax and the 32 packs at the block's end;
                              2: the same with the K release just before the wait, which keeps
                              ptxas from hoisting the wait above the exponentials */
    int ring_stage;        /* 16-bit (default 1): where O would be staged in Q (o_stage 2, one Q buffer,
                              two consumers), stage it in the last key block's ring slots
                              instead (o_stage 3), so Q is released after the tile's last QK
                              and the next tile's Q load overlaps this tile's end */
    int pingpong;          /* A/B knob (default 1 where two or three consumers): the consumers take
                              turns issuing their GEMMs through named barriers (FA3's scheduler
                              barrier, mainloop.c pp_sync); 0: each issues when ready (FA3 and
                              FlashInfer drop it for 16-bit head_dim > 128, FP8 < 128). Without
                              it o_stage 3's consumer 0 syncs its ring barrier at its last PV,
                              not in its epilogue (mainloop.c last_v_release) */
    int l2_floor;          /* A/B knob (runtime, masked configs): the L2 section's floor is grid /
                              l2_floor pairs (0: 4, the default; runtime/fwd.c section_hb) */
    int section;           /* A/B knob (runtime, masked configs): N > 0 pairs a section, instead of
                              the search's choice (runtime/fwd.c section_hb); 0 the default */
    int l2_hint;           /* bit mask (FA3_L2_*; default plan.c: Q | O for masked 16-bit, else
                              0; knob l2_hint): TMA loads and stores with an L2 eviction priority
                              (.L2::cache_hint, the policy an immediate): 1 K/V evict_last, 2 Q
                              evict_first, 4 O's store evict_first (producer.c, epilogue.c) */
    int whole_rounds;      /* runtime, masked configs (default 1, plan.c): the section search
                              prefers, of the sizes as even as its best, one whose tiles fill
                              whole rounds (runtime/schedule.c); 0 its plain choice (A/B) */
    int dyn_sched;         /* causal/local, dense 16-bit (default 1): the producer hands each
                              tile index to the consumers through shared memory, and takes it
                              from a global counter where the runtime passes one
                              (FA3's dynamic persistent scheduler, sections sized by L2 alone);
                              knob 2: a counter at every launch, 3: never; 0: each role walks
                              the static order itself, and where it does not apply (producer.c,
                              runtime/schedule.c fa3_dyn_section) */
    int late_claim;        /* dyn_sched with a counter: the producer takes the next tile after
                              issuing the current tile's last load (1, the default) instead of
                              at its start (0), so a CTA holds no claimed tile while it runs a
                              long one */
    int tail_split;        /* runtime (non-masked dense 16-bit calls; default 1): where the tiles
                              leave the persistent grid's last round part full, run the tiles
                              of the whole rounds in this kernel, the rest as split-KV
                              partials of the split_kv = 1 kernel, and combine them
                              (runtime/tail.c); 2: whenever it leaves a part round, 0: never */
    int ring_addr;         /* A/B knob: a ring barrier's address as stage·8 + bars, then its
                              table offset, which ptxas folds into the SYNCS address
                              (pipeline.c kg_ring_bar); the consumers' K/V descriptors as
                              stage·(stage bytes / 16) + the ring's descriptor word
                              (mainloop.c ring_wait_desc) */
    int q_desc_tile;       /* A/B knob (16-bit): Q's descriptor of every QK k-step built once a
                              tile, not in each QK (mainloop.c) */
    int merge_ends;        /* cold JIT (default: 16-bit with head_dim > 128; a knob elsewhere):
                              the tile's first QK and last PV issued by the key-block loop's
                              own wgmmas, under warp-uniform branches, not by copies of their
                              own (mainloop.c merged_loop) */
    int first_in_loop;     /* cold JIT (with merge_ends; the default wherever the ends merge,
                              session 30): the tile's first key block takes the
                              loop body's softmax (its mask under the body's branch, no PV
                              released) instead of a copy of its own (mainloop.c merged_loop) */
    int kept_branch;       /* bf16/fp16 (cond_rescale with fast_exp; default 1): a warp that
                              keeps its rows' maxima branches over the new max's arithmetic
                              (softmax.c) */
    int diag_half;         /* 16-bit (default: three consumers with a mask): in the tile's first
                              key block a consumer whose rows all end before its middle key
                              takes a QK and softmax of block_n/2 columns, one whose rows end
                              before it neither (mainloop.c) */
    int wait_hint;         /* A/B knob: every mbarrier try_wait with a 10 ms suspend-time hint
                              (CUTLASS's), not the system's default limit (pipeline.c) */
    int tree_reduce;       /* A/B knob: row max and (fast_exp) row sums over 4 accumulators each
                              (FA4's max), not one chain */
    int dbg_no_softmax;    /* timing only (wrong results): P = S, no softcap/mask/max/exp/sum/
                              rescale */
    int o_stage;           /* O staged in shared memory and stored with TMA when the runtime finds
                              O TMA-aligned (else st.global from registers): 0 never, 1 in its
                              own buffer (smem_o), 2 in the tile's Q buffer (Q released after),
                              3 in the ring stage of the tile's last key block: consumer 0 in
                              its K slot, consumer 1 in its V slot (ring_stage; each releases
                              that slot after the store read it, not after its GEMM) */
    int q_bufs;            /* Q buffers: 2 lets the producer load tile t+1's Q during tile t */
    int hd_chunks;         /* 128-byte swizzle boxes per Q/K row: ceil(head_dim / box_cols) */
    int hdv_chunks;        /* ceil(head_dim_v / 64): 64-column chunks of O (and of V, 16-bit) */
    int v_boxes;           /* 128-byte boxes per V row as loaded: hdv_chunks (16-bit),
                              ceil(hdv_chunks·64 / 128) (e4m3) */
    int vt_boxes;          /* e4m3: boxes of transposed V per stage, ceil(block_n / 128), each
                              vt_rows rows (O columns) × 128 keys; 0 for 16-bit */
    int vt_rows;           /* e4m3: 128·v_boxes (the loaded boxes' columns, zero-filled past
                              head_dim_v, transposed whole) */
    /* dynamic shared memory layout, byte offsets from a 1024-aligned base */
    int smem_q;            /* Q tiles: q_bufs × hd_chunks boxes of block_m × 128 B */
    int smem_q_buf;        /* bytes per Q buffer */
    int smem_k;            /* K ring: stages × hd_chunks boxes of block_n × 128 B */
    int smem_k_stage;      /* bytes per K stage */
    int smem_v;            /* V ring: stages × hdv_chunks boxes of block_n × 128 B */
    int smem_v_stage;      /* bytes per V stage */
    int smem_vt;           /* e4m3: transposed V ring, stages × smem_vt_stage (K-major for the PV
                              wgmma, 128B swizzle, keys permuted within each 32: producer.c) */
    int smem_vt_stage;
    int smem_o;            /* O staging: num_consumer_wg × smem_o_wg bytes */
    int smem_o_wg;         /* hdv_chunks boxes of 64 rows × 128 B per consumer warpgroup */
    int smem_bar;          /* mbarriers: q_full[0], k_full[st], v_full[st], k_empty[st],
                              v_empty[st], q_empty[0], (q_full[1], q_empty[1]) */
    int smem_vtab;         /* varlen: the tile order's table (varlen_order.h, FA3_VT_BYTES);
                              0: none (no room), the kernel walks the sequences in batch order */
    int smem_bytes;        /* dynamic shared memory to request (includes 1024 B alignment slack) */
    /* The barrier table. mbarriers, as byte offsets from smem_bar: one per Q buffer, and the K/V
       ring groups (stage 0 given; stage s at +8·s). Arrival counts per phase: a "full" barrier
       completes on the producer's one arrive.expect_tx plus the TMA bytes; a release ("empty")
       barrier on one arrive per consumer warp. */
    int bar_q_full[2], bar_q_empty[2];
    int bar_k_full, bar_v_full, bar_k_empty, bar_v_empty;
    int bar_full_count;    /* 1 */
    int bar_release_count; /* 4 · num_consumer_wg */
    /* e4m3 only: vt_full (the transposed stage is written: one arrive per producer thread,
       consumers wait on it instead of v_full) and vraw_empty (the producer threads have read
       the loaded V stage: thread 0 waits before loading into it again), stage s at +8·s;
       v_empty then releases the transposed stage. */
    int bar_vt_full, bar_vraw_empty;
    int bar_producer_count; /* 128 */
    /* dyn_sched only: tile_full[2] (the producer's one arrive after writing the slot) and
       tile_empty[2] (one arrive per consumer warp after reading it), slot s at +8·s, and the two
       u32 slots of the tile index at smem_tile (byte offsets: barriers from smem_bar, the slots
       from the base) */
    int bar_tile_full, bar_tile_empty, smem_tile;
    /* Named barriers: consumer g's "may issue" (ping-pong) barrier is nb_pingpong + g, synced by
       g and arrived on by the consumer before it (2 × 128 threads); its own epilogue barrier is
       nb_epilogue + g (128 threads); id 0 is the whole CTA. o_stage 3: nb_ring + g (2 × 128
       threads) is synced by consumer g before it stages O in the last block's slot and arrived
       on by the other consumer once its GEMMs have read that slot (consumer 1 after its last
       QK: the K slot consumer 0 stages in; consumer 0 after its last PV: the V slot). */
    int nb_pingpong, nb_epilogue, nb_ring;
    /* "" for the default plan; else the FA3JIT_PLAN_DEBUG value that changed it (printable
       ASCII, other bytes as '?', cut to fit with "..."): a benchmark variant, not for production
       (some knobs give wrong results on purpose). Named in the PTX header, the kernel
       (fa3_kernel_plan_debug) and its cache entry. */
    char debug[FA3_PLAN_DEBUG_SIZE];
} fa3_plan;

/* Planner's tile choice for a validated (not yet canonical) config: block_n and stages (with
   block_m 64 the deepest ring of at most 4 stages that fits, for cfg's block_n if it has one). */
FA3_INTERNAL void fa3_plan_default_tiles(const fa3_config *cfg, int *block_n, int *stages);
/* The planner's block_m for a config with this block_n: 192 (three consumer warpgroups) or 128;
   64 (one consumer) is only ever asked for. */
FA3_INTERNAL int fa3_plan_default_block_m(const fa3_config *cfg, int block_n);

/* Builds the plan of a canonical config. Errors: FA3_ERR_BAD_BLOCK (smem/registers don't fit). */
FA3_INTERNAL fa3_status fa3_plan_make(const fa3_config *cfg, fa3_plan *plan);

/* Writes the PTX for plan into a malloc'd NUL-terminated string. */
/* Bytes of fa3_kernel_params the forward kernel of plan declares (kernel_abi.h): FA3P_SIZE with
   fast_div >= 2, else FA3P_SIZE_SPLIT (split-KV), FA3P_SIZE_VARLEN (varlen or paged K/V) or
   FA3P_SIZE_DENSE. */
FA3_INTERNAL int fa3_fwd_param_bytes(const fa3_plan *plan);
FA3_INTERNAL fa3_status fa3_codegen_ptx(const fa3_plan *plan, char **ptx, size_t *len);
/* The same kernel with each scalar register printed by its name (%tile_7 for %r7), for reading
   (fa3-gen --emit-ptx --named-registers, through generate.c's fa3_tools_emit_ptx_named); a
   different text, so not what the library compiles or caches. */
FA3_INTERNAL fa3_status fa3_codegen_ptx_named(const fa3_plan *plan, char **ptx, size_t *len);
FA3_TOOLS_API fa3_status fa3_tools_emit_ptx_named(const fa3_config *cfg, char **ptx, size_t *len);

#endif
