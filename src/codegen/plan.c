/*
 * The planner: every decision about the kernel's shape lives here (tile sizes, pipeline depth,
 * register split, shared-memory layout, barrier table); the emitters (kgen.h lists them) only
 * write what the plan says.
 * Measured reasons for each choice are recorded beside it (bench/RESULTS.md has the runs).
 */
#include <stddef.h>

#include "codegen/codegen.h"
#include "codegen/knobs.h"
#include "codegen/varlen_order.h"

#define SMEM_LIMIT 232448 /* opt-in dynamic shared memory per block on sm_90 */

static void default_tiles(const fa3_config *cfg, int *block_n, int *stages)
{
    /* Measured on the H200 (bf16, FA3 paper sweep batch·seqlen = 16k, heads·hd = 2048; intra-
       warpgroup overlap, ping-pong, persistent grid; probe runs of 2026-11-29, bench/RESULTS.md):
       hd64:  bn128 st2 — 370/278 TFLOP/s (full/causal) at seqlen 1024 vs 343/253 for bn192;
              at 16k the two are within 2% (460 vs 468); 3-4 stages changed nothing (±1%).
       hd128: bn128 st2 — 678 at 16k vs 638 for bn176 (FA3's choice: here it leaves only a few
              registers of headroom and loses); 3 stages ±1%.
       hd256: bn80 st2 — 809 at 16k vs 770 for bn64; 3 stages do not fit in shared memory. */
    int hd = cfg->head_dim, hdv = cfg->head_dim_v ? cfg->head_dim_v : cfg->head_dim;
    if (cfg->dtype == FA3_DTYPE_E4M3) {
        /* e4m3, measured on the H200 (tools/probes/fp8_tiles.sh, 3 rounds rotated, 2026-12-01,
           bench/RESULTS.md), TFLOP/s at seqlen 16k non-causal / 4k causal:
           hd64:  bn192 st2 523 / 438 vs bn128 483 / 425 and bn256 425 / 383;
           hd128: bn192 st2 848 / 732 vs bn128 778 / 697 (3 stages 775 / 687; bn256 needs 224
                  accumulator registers);
           hd256: bn64 st3 841 / 746 vs st2 568 / 589 (bn128 needs 208 registers: the consumers'
                  232 spill, the producer keeping 40 for the V transpose).
           hd96 takes hd128's tiles, hd192 hd256's (not measured). */
        *block_n = hd > 128 ? 64 : 192;
        *stages = hd > 128 ? 3 : 2;
        return;
    }
    /* hd96 runs as hd128 with zero-filled columns (TMA out-of-bounds fill), so it takes hd128's
       tiles; hd192 fits 112 keys (O 96 + S 56 + P 28 registers; 2 stages of K/V = 168 KiB);
       (192, 128) keeps 128 keys (O 64 registers). Not yet tuned by measurement. */
    if (hd <= 128)
        *block_n = 128;
    else if (hd == 192)
        *block_n = hdv <= 128 ? 128 : 112;
    else
        *block_n = 80;
    *stages = 2;
}

static fa3_status plan_build(const fa3_config *cfg, fa3_plan *p, int quiet);

void fa3_plan_default_tiles(const fa3_config *cfg, int *block_n, int *stages)
{
    default_tiles(cfg, block_n, stages);
    if (cfg->block_m != 64)
        return;
    /* block_m 64 (decode: memory-bound): the 64 Q rows leave shared memory for a deeper K/V
       ring, and the planner takes the deepest of at most 4 stages that fits (with the block_n
       given, else the planner's). Not measured yet; the reasoning: at 4.3 TB/s an SM's share
       is ~32 GB/s, ~32 KB a microsecond, so with ~1-2 us of loaded DRAM latency 32-64 KB must
       be in flight per SM. A stage (K + V of one block) is 32 KB at hd64 bn128, 64 KB at
       hd128, 80-84 KB at hd192/256; with S stages about S - 1/2 of them are in flight while
       the consumer waits (V of block j is released only after PV j, in block j+1's body), so
       2 stages cover it on paper at hd >= 128 and 4 at hd64 give 112 KB; the deeper ring is
       the margin against latency spread and against a late release. It comes to: hd64 4 stages,
       hd96/128 3 (with one Q buffer), hd192/256 2 (3 do not fit); e4m3 hd64/96/128 2, hd192/256
       3, (192, 128) 4. */
    fa3_config c = *cfg;
    if (!c.block_n)
        c.block_n = *block_n;
    for (int s = 4; s > *stages; s--) {
        fa3_plan p;
        c.stages = s;
        if (plan_build(&c, &p, 1) == FA3_OK) {
            *stages = s;
            return;
        }
    }
}

/* Consumer warpgroups of the planner's tile (block_m 128 or 192) with wg3 as given. Two
   consumer warpgroups (block_m 128), or three (block_m 192, FA3's choice) for head_dim 64.
   Same-run A/B on the H200 (bench/ab.py, bf16, 2026-11-29, bench/RESULTS.md), wg3=1 vs 0:
   non-causal 2048/4096/16k 502/532/526 vs 428/445/444 TFLOP/s; causal >= 2048 +4-17% (16k 502
   vs 424); loses at causal 512/1024 (198/267 vs 238/300): 192-row tiles put two masked key
   blocks on each diagonal and short rows leave more of a tile idle. One kernel serves every
   seqlen, so the long-sequence win decides. Three consumers have 160 registers each and ptxas
   plans the kernel within 128 (65536 / 512 threads): beyond 128 accumulator registers
   (block_n > 128 at head_dim 64) it spills, so such tiles take two consumers. */
static int planned_consumers(const fa3_config *cfg, int block_n, int wg3)
{
    const int live3 = block_n / 2 + block_n / 4 + 32;
    const int hdv = cfg->head_dim_v ? cfg->head_dim_v : cfg->head_dim;
    return wg3 && cfg->head_dim <= 64 && hdv <= 64 && live3 <= 128 ? 3 : 2;
}

int fa3_plan_default_block_m(const fa3_config *cfg, int block_n)
{
    return 64 * planned_consumers(cfg, block_n, cfg->dtype != FA3_DTYPE_E4M3);
}

/* The kernel's scheduling is fixed (docs/kernel.md); each feature was kept by a same-run A/B on
   the H200 against the kernel without it (bench/RESULTS.md, docs/notes.md "Retired knobs"):
   ping-pong between consumers through named barriers, its order kept across tiles
   (non-causal 512/1024 +3–5%), one release arrive per consumer warp, Q released after the tile's
   last QK, a second Q buffer where shared memory allows (neutral to +2%), the tile's first K
   before its Q with one Q buffer, masked key blocks after the first in their own overlapped loop
   body (causal hd64/128/256 1024: 273/391/446 vs 254/368/398, 16k 492/658/735 vs 492/613/681
   TFLOP/s; costs 30–40% more ptxas time), the TMA-store epilogue (below), L2 sections for
   masked tile orders and their simulated size (runtime/fwd.c, schedule.c). */
fa3_status fa3_plan_make(const fa3_config *cfg, fa3_plan *p)
{
    return plan_build(cfg, p, 0);
}

/* quiet (the stage search above): no FA3JIT_PLAN_DEBUG knobs and no error message, only the
   status. */
#define REFUSE(...) (quiet ? FA3_ERR_BAD_BLOCK : fa3_seterr(FA3_ERR_BAD_BLOCK, __VA_ARGS__))

static fa3_status plan_build(const fa3_config *cfg, fa3_plan *p, int quiet)
{
    *p = (fa3_plan){0};
    p->cfg = *cfg;
    p->fp8 = cfg->dtype == FA3_DTYPE_E4M3;
    p->elem_bytes = p->fp8 ? 1 : 2;
    p->out_bytes = 2;
    p->box_cols = 128 / p->elem_bytes;
    p->block_n = cfg->block_n;
    p->stages = cfg->stages;
    p->wg3 = !p->fp8; /* e4m3: two consumers (not yet measured otherwise) */
    /* The softmax's exponent as one FMA a score (fast_exp) and FA4's conditional O rescale
       (cond_rescale), bf16/fp16 (softmax.c has both and why they stay exact at every
       magnitude). Same-run A/B on the H200 of the committed form (bench/compare.py --variants,
       graph replay, 3 rounds rotated, bf16 + fp16, 2026-12-01 session 9 call 6), default / old
       kernel, median over the sweep's rows: hd64/128/256 1.006/1.011/1.008, at seqlen >= 4096
       1.018/1.012/1.026; default / fast_exp alone (cond_rescale=0) at >= 4096
       1.016/1.012/1.045. The loop body loses 22-23 of 499-559 SASS instructions at
       hd64/128, none at hd256 (there cond_rescale skips the O rescale's 128 multiplies at run
       time). */
    p->fast_exp = p->cond_rescale = !p->fp8;
    /* A warp that keeps every row's max branches over the new max's arithmetic (kept_branch,
       softmax.c; -28 SASS a kept block). Same-run A/B on the H200 (bench/compare.py --variants,
       graph replay, L2 flushed, 3 rounds rotated, bf16, cuDNN in the run, 2026-12-05 session 15
       call 2), kept_branch / old default, median of each group: hd64 non-causal 1.066 / 1.075
       (seqlen < / >= 4096), hd64 causal 1.034 / 1.045, hd128 and hd256 1.000-1.024; all 36 rows
       1.021. The whole GPU ladder passed under it first (calls 3-4; its PTX is this default's). */
    p->kept_branch = p->cond_rescale && p->fast_exp;
    /* FA4's row max over 4 accumulators (tree_reduce) and its P-before-rescale order
       (pack_first), for head_dim > 64, bf16/fp16. Same-run A/B on the H200 (bench/compare.py
       --variants, graph replay, 3 rounds rotated, bf16, 2026-12-01 session 9 call 8), both /
       default, median over the sweep's rows: hd64/128/256 0.989/1.022/1.008 (hd128 1.038 at
       seqlen >= 4096), so hd64 keeps neither. Correct on the H200 with both (session 10 call 1:
       test_magnitude, test_gpu, test_edge; session 9: fa3-gen check).
       pack_first alone at head_dim 64 (session 21): ptxas had left the 32 packs of P after the
       O rescale's branch (SASS 429-465 of hd64's 467-instruction loop, after the last EX2 at
       384), a serial tail in an issue-bound softmax; packed first they spread among the EX2s
       (267-419). Same-run A/B (H100 SXM, bench/compare.py, cuDNN in the run, 5 rounds rotated),
       pack_first / old default, hd64 non-causal < / >= 4096: bf16 1.023 / 1.019, then bf16+fp16
       1.002 / 1.009 (second call); with one body (below) at causal 1.001 / 1.020 and 1.004 /
       1.008. So every 16-bit kernel packs first. */
    p->tree_reduce = !p->fp8 && cfg->head_dim > 64;
    p->pack_first = !p->fp8;
    /* The warpgroup index through shfl.sync, so ptxas keeps the Q descriptor in uniform registers
       and advances it by 32-bit adds (uniform_desc), and V's wait after the QK issue, just before
       the PV (late_v_wait, FA4's order), bf16/fp16. The main loop loses 12/25/48 of 477/534/539
       SASS instructions a key block at hd64/128/256, every R2UR (session 10's SASS diff against
       FA4). Same-run A/B on the H200 (bench/compare.py --variants, graph replay, L2 flushed, 3
       rounds rotated, bf16 + fp16, 72 rows, 2026-12-04 session 11 call 5), both / old default,
       median over each head dim's rows, non-causal / causal: hd64 1.000/1.029, hd128
       1.028/1.016, hd256 1.016/1.001; all rows 1.015 (uniform_desc alone: 1.015, hd256
       1.028/1.011, hd64 causal 1.024: within the rounds' spread of the pair). The pair ran the
       whole GPU ladder first (calls 1-2: every step of tools/gpu-run.sh's correctness list
       passed under FA3JIT_PLAN_DEBUG=uniform_desc=1,late_v_wait=1). e4m3 keeps neither until
       measured. */
    p->uniform_desc = p->late_v_wait = !p->fp8;
    /* FA3's dynamic persistent scheduler for causal/local (dyn_sched 1; applies below to dense
       16-bit masked configs): the kernel takes its tile indices from the producer (a shared-
       memory hand-over), which walks the static order or, where the runtime passes a counter
       (runtime/schedule.c fa3_dyn_section: long sequences, whose K/V fit L2 only in sections too
       small for the static rounds to balance), takes each next tile from it (late_claim: once
       the current tile's loads are issued).
       Same-run A/B on the H200 (session 12, calls 3-4, bf16, cuDNN in the run, 3 rounds
       rotated), variant / old kernel: the counter with sections by L2 alone, causal, hd64
       8192/16384 1.109/1.050 and 1.098/1.079, hd128 4096..16384 1.045-1.075 (the rule's
       choice and its other rows: schedule.c); the rows where the runtime keeps the static
       order through the hand-over 0.972-1.014 (median 0.994), where an identical-kernel
       column of the same run read 0.976-1.020 (median 1.006). The final table's run repeats
       the A/B with FA4 in it (bench/RESULTS.md, session 12). */
    p->dyn_sched = !p->fp8;
    /* With the counter, the producer takes the next tile after issuing the current tile's last
       load (late_claim), not at the tile's start: taken at the start, a CTA holds its next tile
       through the whole current one, so tiles go out by start time instead of finish time and a
       CTA that drew a long tile also holds the next long one. ncu (session 22, H100 SXM, hd256
       causal 8192, bf16): SM active cycles 0.913 of elapsed in ours, 0.971 in FA4, where ours
       spent fewer active cycles than FA4's (1.100M vs 1.133M); a host simulation of the order
       (tiles of key blocks + 1.5, longest first, sections of 4 pairs, 132 CTAs) gives 0.913
       with the early claim and 0.996 with the late one. Same-run A/B (session 22 call 3, H100
       SXM, bench/compare.py, bf16, cuDNN in the run, 5 rounds rotated), late / early, median of
       each group's rows (seqlen < / >= 4096): hd256 causal 1.001 / 1.044 (4096 1.044, 8192
       1.055), hd128 causal 1.001 / 1.006, hd64 causal 0.999 / 1.010; the counter at every
       launch (dyn_sched=2) with the late claim took hd256 causal 16384 from 687 to 726 TFLOP/s
       (1.056), where the early claim had lost (0.943), so runtime/schedule.c's rule no longer
       asks a section for 4 KV heads when the claim is late. */
    p->late_claim = 1;
    /* The last round of a non-masked dense call split into split-KV pieces (runtime/tail.c,
       where its cost model gains 0.5%). Same-run A/B (session 23, H100 SXM, bf16,
       tools/probes/tail_ab.py: 41 back-to-back pairs, graphs, L2 warm), split / not: hd128 16k
       1.019, 8k 1.012, hd256 16k 1.005, hd64 4096 1.019, 2048 1.004; the same pairs without a
       split on both sides 1.000 and 1.000. Shapes the model leaves alone measured 1.000 (hd128
       4096, hd64 16k, hd256 8k). */
    p->tail_split = 1;
    /* The section search prefers, of the sizes as even as its best, one whose tiles fill whole
       rounds of the grid (runtime/schedule.c whole_round_size), so that no round reads two
       sections' K/V. ncu (session 34, H100 SXM, fp16 hd128 causal 512, batch 32 x 16 heads, cold
       L2) read 247.9 MB from DRAM with the plain search's 77 pairs where Q+K+V once is 201.4
       (cuDNN's); session 34's LRU model of the order (tools/probes/l2_order_model.py) gave 242.5
       at 25 MB of L2 for 77 pairs and the floor for 66. Session 35 (H100 SXM, same run): ncu
       246.9 -> 202.3 MB and 123.6 -> 112.8 us; bench/ab.py (3 rounds rotated), whole_rounds /
       not, hd128 causal 512 fp16 328.6 / 276.7 and bf16 330.2 / 276.6 TFLOP/s (1.19x), hd64
       causal 1024 (bm128: 51 -> 66 pairs) 329.3 / 330.0. No other sweep row changes its size
       (the long rows take the counter's L2 sections, fa3_dyn_section). */
    p->whole_rounds = 1;
    /* Integer divisions as a multiply and shifts (codegen/divide.c, src/divmagic.h), the launch's
       divisors' magics passed in fa3_kernel_params.div: ptxas 13.0 lowers div.u32/rem.u32 to a
       float-reciprocal chain of about 15 instructions, and a tile's decode (tile -> m_block,
       section, pair, head, kv head) is up to four of them in a row before its first QK.
       Written before measuring: up to +4% at hd64 causal 512/1024, +1-2% at the other 512/1024
       rows, 0 at 16k. Same-run A/B (session 25, H100 SXM, bf16, tools/probes/tail_ab.py: 21
       back-to-back pairs, graphs, L2 warm), fast_div=2 / 0: causal hd64 512/1024/2048
       1.065/1.042/1.024, hd128 512/1024 1.002/1.044, hd256 512/1024 1.007/1.012, hd128 16k
       1.002; non-causal hd64 512/1024 1.024/1.014, hd128 512/1024 1.020/1.011, hd256 512/1024
       1.002/1.002, hd64 2048 1.002, hd128 16k 1.001. No row lost. */
    p->fast_div = 2;
    /* The consumers' ring barrier addresses as stage·8 + bars and K/V descriptors as stage 0's
       word plus the stage's 16-byte units (ring_addr), and Q's descriptors of the first 8 QK
       k-steps built once a tile (q_desc_tile; 16-bit only): knobs.c has what each removes from
       the loop's SASS (hd64/128/256 kept block 431/445/374 -> 381/387/317 with kept_branch).
       Same-run A/B (session 26 call 5, H200, bf16, tools/probes/tail_ab.py: 21 back-to-back
       pairs, graphs, L2 warm), both / neither, non-causal | causal: hd64 512 1.004 | 1.007,
       hd128 512 1.008 | 1.000, hd128 4096 1.003 | 1.008, hd64 16k 1.011 | 1.015, hd128 16k
       1.003 | 1.008, hd256 16k 0.999 | 1.000. No row lost; ctasim bitwise equal and
       test_ptxas's cases without a spill under both (session 26). */
    p->ring_addr = 1;
    p->q_desc_tile = 1;
    /* The tile's first QK and last PV issued by the key-block loop's own wgmmas (merge_ends,
       mainloop.c merged_loop; 16-bit, one loop body) where head_dim > 128: ptxas's time follows
       the wgmmas' total width (docs/notes.md, session 15), and this removes two of the
       consumer's three GEMM copies. Cold JIT (session 27, 2-core machine, bench/jit_cost, bf16):
       hd256's 24 configs median 380 -> 273 ms, over 300 ms 24 -> 4; hd64/128 were all under
       300 ms already. Written before measuring: 0 to -1% at 16k, up to -2% at 512. Measured
       (session 28, H100 SXM, bf16): tools/probes/tail_ab.py (21 back-to-back pairs, graphs, L2
       warm), merge_ends=0 / 1: hd256 16k 1.000 non-causal, 1.000 causal, but hd64 512 1.046 /
       1.040 causal, hd64 16k 1.041, hd128 512 1.025 / 1.011, hd128 4096 1.013 / 1.015, hd128 16k
       1.012 / 1.011; the three-library run's variant column (3 rounds rotated, bf16 + fp16, 6
       rows a group) the same way: hd256 < 4096 1.006 / 1.007 causal, >= 4096 0.993 / 0.999, hd64
       and hd128 1.015-1.044 except causal >= 4096 (1.002, 0.990). So hd64/128 keep the loop's
       ends apart, and hd192/256 (where cold JIT passed 300 ms) merge them; hd192 and (192,128)
       follow hd256 without an A/B of their own (a key block's GEMMs about as long: block_n
       112/128 against 80). */
    /* e4m3 (session 29, H100 SXM, bench/ab.py --dtype e4m3, 3 rounds, 12 shapes a head dim,
       causal and not, 512-16k): merged / apart (both with one body), median (min .. max)
       hd64 0.991 (0.980 .. 1.004), hd128 0.997 (0.979 .. 1.015), hd256 0.987 (0.976 .. 1.005).
       Cold JIT with one body (jit_cost --fp8, 2-core machine), apart: hd128 16 of 20 configs
       over 300 ms (max 340), hd96 varlen paged 317-326; hd64, hd192 and hd256 all under 265;
       merged: hd128 max 291, hd96 271-284. So cold JIT needs them merged at head_dim 96/128
       only, and apart would be about 1% faster at 64 and >= 192; but that kernel (one body, ends
       apart) has not yet run a GPU check in e4m3 (only the A/B above, and the CPU emulator's
       bitwise equality), while the merged one passed them all (fp8_knob_check.sh, test_fp8,
       racecheck over check --all): merged at every head dim until it has. */
    p->merge_ends = p->cfg.head_dim > 128 || p->fp8;
    /* Where the ends are merged, the tile's first key block takes the loop body's softmax too
       (first_in_loop, mainloop.c merged_loop): one softmax copy in the PTX instead of two.
       Cold JIT (session 30, 2-core machine, bench/jit_cost --all, 1144 configs, one run each):
       the default before / this default: over 300 ms 118 / 17 (the 17: 16-bit hd96/128,
       ends apart), median 249 / 218 ms; median ratio where the ends merge: 16-bit hd192 0.895,
       hd192x128 0.796, hd256 0.865, e4m3 hd64 / 128 / 256 0.750 / 0.789 / 0.919 (with
       merge_ends=1,first_in_loop=1 everywhere: 2 over, hd256 bf16 causal and none varlen
       paged, 335 / 317 ms). Written before measuring: no speed change beyond noise
       (the loop's SASS between the PV's wait and the back edge is 488 vs 490 instructions at
       hd256 causal; the first block pays the body's mask branch and vote). Same-run A/B
       (session 30 call 3, H100 SXM, bench/ab.py, 6 rounds rotated, 12 shapes 512-16k causal
       and not), first_in_loop=1 / default: bf16 hd256 median 1.000 (0.957 .. 1.010); e4m3
       hd64 1.010 (0.995 .. 1.036), hd128 1.020 (0.983 .. 1.048) (hd256 did not finish in
       the call's time); over merge_ends=1 at bf16 hd64 / 128 (not the default there): 1.001 /
       0.996, where merge_ends=1 / default read 0.975 / 0.977 again. A first A/B (call 2, 3
       rounds, fa3-gen bench) read 0.985 at hd256 (0.940 .. 0.998) with a kernel whose first
       pass still multiplied O (zeros) by alpha = 0; the pass now skips it (rescale and
       !first), and 6 rounds read 1.000: whether that multiply or the noise of 3 short rounds
       made the difference was not measured apart. O and LSE bitwise equal on ctasim's
       cases; on the GPU (calls 1 and 3, under the knob) knob_check.sh and the e4m3 checks of
       fp8_knob_check.sh it reached, test_fp8, test_edge, test_gpu, test_magnitude, racecheck
       and synccheck. Again beside the peers (session 31 call 2, H100, compare.py, 3 rounds,
       bf16 + fp16), first_in_loop=0 / default at hd256, median of each group's 6 rows:
       non-causal < / >= 4096 1.006 / 0.981, causal 1.000 / 0.989. */
    p->first_in_loop = -1; /* the planner's choice (merge_ends, below), unless a knob sets it */
    /* O staged in the last key block's ring slots where it would go to Q (ring_stage, applied
       below: one Q buffer, two consumers, head_dim 192/256), so Q is released after the tile's
       last QK and the next tile's Q load overlaps this tile's end. ncu (session 13, hd256
       causal 512): 18% of the warps' samples waited for Q at the tile start. Same-run A/B on
       the H200 (session 13 call 5, bf16 hd256, cuDNN in the run, 4 rounds rotated), ring /
       Q staging: non-causal 512/1024/2048/4096 1.094/1.062/1.010/1.038, causal 512/1024/2048
       1.036/1.036/1.023, 8192-16384 0.98-1.03. Repeated in the three-library run (call 7, bf16 +
       fp16, FA4 and cuDNN in it), Q staging / ring, median of each group's rows: non-causal
       0.959 (< 4096) and 0.967, causal 0.969 and 0.995; 512 non-causal 0.921 in both dtypes. */
    p->ring_stage = !p->fp8;
    /* The consumers' GEMM turns: everywhere but e4m3 hd128 (knob pingpong=0 drops them, =1
       keeps them). Written before measuring:
       FA3 and FlashInfer keep them for 16-bit head_dim <= 128 and e4m3 >= 128, FA4 drops them at
       hd256, so a gain was looked for at 16-bit hd256. Measured (session 32, H100 SXM at 1980
       MHz max): beside cuDNN and FA4 (call 3, bench/compare.py, 3 rounds rotated, bf16 + fp16),
       pingpong=0 / default, median of each group's 6 rows: hd64 non-causal < / >= 4096 0.912 /
       0.888, causal 0.981 / 0.977; hd128 non-causal 0.981 / 0.967, causal 0.999 / 1.004; hd256
       non-causal 0.983 / 0.968, causal 0.996 / 0.985: the turns stay at 16-bit. e4m3 (bench/ab.py,
       fa3-gen bench, rotated): hd64 even (0.99-1.03), hd256 0.91-0.98, but hd128 1.00-1.01 below
       4096 and 1.019-1.032 at 8192/16384 in two runs (3 and 4 rounds: full 16384 684.8 / 663.4,
       causal 8192 676.3 / 659.6 TFLOP/s). Session 33 (H100 SXM): e4m3 hd128 (head_dim_v 128)
       drops them. Its library passed
       fp8_knob_check.sh "" (every head dim and mask, varlen, paged 64/16, split-KV, packed GQA,
       block_m 64, several tiles a CTA, test_fp8 21/21, racecheck and synccheck), racecheck of
       hd128 local/varlen/paged 16/split-KV, pytest (1048 passed), memcheck and synccheck over
       check --all (2040 cases each, 0 errors). A third same-run A/B, default / pingpong=1, 3
       rounds rotated: 1.007-1.012 below 4096 (causal 1024 0.997), 1.015 / 1.014 at 4096,
       1.017 / 1.039 at 8192, 1.032 / 1.012 at 16384 (non-causal / causal). */
    p->pingpong = !(p->fp8 && cfg->head_dim == 128 && cfg->head_dim_v == 128); /* canonical */
    /* One key-block loop body for causal/local (mask_branch, mainloop.c): its softmax applies
       the mask under a warp-uniform branch on the block's need, so the body's GEMMs are in the
       PTX once and ptxas, whose time follows the wgmma instructions' total width (docs/notes.md
       session 14), compiles masked kernels in about two thirds of the time (hd128/256 causal
       430/622 -> 305/439 ms). An unmasked block executes 1-2 SASS instructions fewer than the
       separate unmasked body's (tools/probes/sass_loop.py --unmasked: hd128 causal 426 vs 428,
       hd256 354 vs 355, hd64 413 vs 414). Same-run A/B (session 20, H100 SXM,
       bench/compare.py, bf16, cuDNN in the run, 5 rounds rotated), two bodies / one, median of
       each group's rows (seqlen < / >= 4096): hd128 causal 1.006 / 0.997, hd256 causal 0.997 /
       0.995, where the non-causal rows, identical PTX, read 0.996-1.002. hd64 causal lost with
       one body, 1.007 / 1.029 and 1.008 / 1.020 in two calls, because its P packs sank below
       the rescale branch; packed first (pack_first, above) they do not, and one body with
       pack_first / two bodies without (session 21, H100 SXM, 5 rounds) read 1.001 / 1.020 (bf16)
       and 1.004 / 1.008 (bf16+fp16, a second call). So every 16-bit masked kernel has one body
       (head_dim 96 and 192 follow without their own A/B). The whole GPU ladder ran with one
       body at every head dim (session 20, H100, calls 1-2): every step passed but one pytest
       case of the FP8 quantizer, a test tolerance since fixed (test_quantize). */
    /* e4m3 too (session 29): jit_cost --fp8's 60 e4m3 configs (2-core machine), two bodies /
       mask_branch=1 / with merge_ends where above: median 319 / 246 / 208 ms, over 300 ms 37 /
       16 / 0 (hd128 causal 445-499 ms with two bodies: three GEMM copies at block_n 192). Same
       run A/B (H100 SXM, bench/ab.py --dtype e4m3, 3 rounds, ends apart in both), one body /
       two: median hd64 1.002, hd128 0.996, hd256 1.002. O and LSE bitwise equal to the two-body
       kernel's on the CPU emulator (tests/ctasim.sh, 22 shapes); on the GPU fa3-gen check of
       every head dim, mask and layout, test_fp8 and racecheck under one body with merged ends
       (tools/probes/fp8_knob_check.sh), racecheck over check --all. */
    p->mask_branch = 1;
    p->diag_half = -1; /* the planner's choice, below, unless a knob sets it */
    /* L2 eviction priorities on TMA transfers (knobs.c has the bits): masked 16-bit kernels load
       Q and store O evict_first (l2_hint 6), so that a tile's Q, read once, and its O, written
       once, leave L2 before the K/V blocks that the pair's other tiles read again.
       Session 37 (H100 SXM, 1980 MHz max) had kept every hint off: K/V evict_last alone (=1)
       lost 3-6% at causal 1024-8192 in bench/ab.py (fa3-gen bench, back to back, L2 warm; hd128
       causal 4096 622.4 / 595.3, hd256 causal 2048 581.7 / 550.4 TFLOP/s), and =7 (all three)
       sat within -3.5% .. +3.6%; ncu of hd256 causal 512 from a cold L2 read 220.6 / 219.9 /
       207.4 MB (default / =1 / =7) in 124.7 / 125.1 / 125.1 us.
       Session 38 (H100 SXM, the table's protocol: bench/compare.py, each call from a CUDA graph
       after do_bench's L2 flush, cuDNN in the run). Written before measuring: if the flush's dirty
       lines are what our causal 512 rows lose to cuDNN (tools/probes/kernel_times.py, bf16
       causal 512 kernel time after a writing / a reading flush: hd128 107.2 / 99.4 us against
       cuDNN's 103.6 / 98.4, hd256 109.9 / 102.3 against 107.0 / 100.6), hints that evict the
       streamed Q and O first move those rows 1-3%, and nothing where K/V reuse is small.
       Measured, variant / default, 5 rounds rotated (hd128/256, 512-1024, bf16+fp16): =4 (O
       alone) 0.999-1.003 in every group, =6 hd128 causal 1.015, hd256 causal 1.016. Then all 72
       rows, 3 rounds rotated, median of each group's 6 rows (seqlen < / >= 4096), =2 (Q alone)
       and =6: hd128 causal 1.020 / 1.027 and 1.026 / 1.023, hd256 causal 1.014 / 1.021 and
       1.019 / 1.024, hd64 causal 1.006 / 0.999 and 1.004 / 1.002, non-causal 0.995-1.006 at every
       head dim. Causal 512 against cuDNN, default -> =6: bf16 hd128 0.973 -> 1.000, hd256 0.973 ->
       0.996, fp16 hd128 0.984 -> 1.010, hd256 0.976 -> 0.995. So Q is the bit that pays, O adds a
       little at short rows, and K/V evict_last is what lost in session 37. The whole GPU ladder
       that the hints touch passed under l2_hint=6 (call 13-15: test_gpu, test_edge, fa3-gen check
       234 cases, pytest 1048, test_varlen and pytest_varlen). Non-masked calls stay off
       (neutral above; their PTX unchanged).
       e4m3, session 41 (H100 SXM; bench/compare_fp8.py --masks causal, graphs after do_bench's
       flush, one process per variant, 5 rounds with the order rotated, FA3JIT_PLAN_DEBUG
       l2_hint=0 / =6). Written before: e4m3 reads half the K/V bytes of bf16, so Q and O weigh
       more in L2 and the gain should be at least bf16's (+1-2.5% at hd128/256, 0 at hd64).
       Measured, median over rounds of =6 / =0 per row (512-8192): hd128 1.014 1.003 1.000 1.006
       1.009, hd256 1.000 1.009 1.011 1.002 1.009, hd64 1.008 1.001 0.992 0.998 1.001 (2048 below
       1 in 4 of 5 rounds). Smaller than bf16's, but on no hd128/256 row below 1: on for masked
       e4m3 at head_dim >= 128, off at hd64. */
    p->l2_hint = cfg->mask != FA3_MASK_NONE && (!p->fp8 || cfg->head_dim >= 128)
                     ? FA3_L2_Q | FA3_L2_O
                     : 0;
    if (!quiet)
        fa3_knobs_apply_env(p); /* FA3JIT_PLAN_DEBUG (benchmark variants) */
    if (p->fp8) /* e4m3 takes neither, whatever the knobs: its P offset (2^8) leaves no headroom
                   for a kept max, and its exponent keeps the (s - m)·c form */
        p->fast_exp = p->cond_rescale = p->early_pack = 0;
    /* dyn_sched (knob): masked dense 16-bit configs only (varlen, paged and split-KV keep their
       own tile walks; e4m3's producer threads all work) */
    if (cfg->mask == FA3_MASK_NONE || cfg->varlen || cfg->paged_kv || cfg->split_kv ||
        cfg->pack_gqa || p->fp8)
        p->dyn_sched = 0;
    /* tail_split (runtime/tail.c): non-masked dense 16-bit calls only */
    if (cfg->mask != FA3_MASK_NONE || cfg->varlen || cfg->paged_kv || cfg->split_kv ||
        cfg->pack_gqa || p->fp8)
        p->tail_split = 0;
    if (p->fp8 && p->block_n % 64)
        return REFUSE("block_n %d is invalid for e4m3 (a multiple of 64: the V transpose gives "
                      "each producer warp 16-key groups)", p->block_n);
    /* block_m 64: one consumer warpgroup (the decode tile); 128: two (the short causal tile of
       head_dim 64, whose planner's tile is 192: fa3_fwd_tune); else the planner's two or three
       (planned_consumers; the wg3 knob may make a canonical block_m 192 run as 128: the plan's
       block_m is what the runtime uses) */
    p->num_consumer_wg = cfg->block_m == 64    ? 1
                         : cfg->block_m == 128 ? 2
                                               : planned_consumers(cfg, p->block_n, p->wg3);
    p->block_m = 64 * p->num_consumer_wg;
    if (p->num_consumer_wg < 2)
        p->pingpong = 0; /* no partner to take turns with */
    /* A consumer whose rows see only the first half of the tile's first key block (or none of
       it) takes a QK and softmax of that half (or neither): diag_half, mainloop.c. In a causal
       192-row tile on 128-key blocks, 2 or 3 of the 3 consumers do on every diagonal. Same-run
       A/B (session 17, tools/probes/tile_ab.sh, fa3-gen bench, bf16 hd64 causal, batch x
       seqlen 16k, 32 heads, rounds rotated; H100 SXM), diag_half / default: block_m 192
       1024/2048/4096/8192 1.072/1.042/1.027/1.018 (4 rounds; the half copy alone, without the
       empty one: 1.049/1.034/1.023/1.016 in 3). Where two consumers take turns (block_m 128)
       the other consumer's full block sets the pace: hd64 bm128 512/1024/2048/4096
       1.004/0.993/1.002/0.997, hd128 causal 2048 1.009, hd256 causal 2048/8192 1.003/1.001
       (half copy alone): off there, as it is without a mask (only a key tail could take it).
       Confirmed on the H200 in the three-library run (call 7, bf16 + fp16, 3 rounds rotated),
       diag_half=0 / default over the 8 rows it changes (hd64 causal 2048-16384): median 0.986
       (0.964-1.001; 2048: 0.975 / 0.972); over the 64 rows where both kernels are the same
       kernel: median 0.999, quartiles 0.990 / 1.005 (the run's noise). Both copies at two
       consumers (diag_half=1; session 20, H100, bf16, cuDNN in the run, 5 rounds rotated),
       knob / default: hd128 causal 1.001 / 0.993 (seqlen < / >= 4096), hd256 causal 1.008 /
       0.992, all 36 rows 1.000: nothing to take. */
    if (p->diag_half < 0)
        p->diag_half = p->num_consumer_wg == 3 && cfg->mask != FA3_MASK_NONE;
    if (p->fp8 || p->dbg_no_softmax || p->block_n % 16) /* the half QK's m64n{bn/2}: 8 | bn/2 */
        p->diag_half = 0;
    /* merge_ends (mainloop.c merged_loop): one loop body (no mask, or mask_branch without
       one_body), no half copy of the first block, and key blocks of at least 64 (the last
       pass's k-step reads 64 and block_n rows of the V stage) */
    if (p->block_n < 64 || p->diag_half ||
        (cfg->mask != FA3_MASK_NONE && (!p->mask_branch || p->one_body)))
        p->merge_ends = 0;
    /* first_in_loop: where the ends merge; elsewhere a knob (mainloop.c split_joined: the
       first block's QK a copy of its own inside the loop, under the pass's branch), not with
       diag_half's copies or two loop bodies. Written before measuring the split loop's: even
       or up to +1% at hd64/128 (5-11 SASS instructions fewer a kept unmasked block), and
       0 of 1144 configs over 300 ms cold (jit_cost --all, session 30). Measured (session 31
       call 2, H100 SXM at 1770 MHz, bench/compare.py beside cuDNN and FA4, 3 rounds rotated,
       the library with first_in_loop=1 everywhere and first_in_loop=0 as the variant column:
       the default kernel at hd64/128), first_in_loop=0 / 1, median of each group's 6 rows:
       hd64 non-causal < / >= 4096 1.039 / 1.030, causal 1.052 / 0.999; hd128 non-causal
       1.021 / 1.007, causal 1.020 / 1.013. The SASS count did not predict it (what ptxas
       did with the loop's second way in was not looked at), so the ends apart keep the
       first block's own softmax: the cold-JIT cut there costs 1-5%. */
    if (p->first_in_loop < 0)
        p->first_in_loop = p->merge_ends;
    if (!p->merge_ends &&
        (p->diag_half || (cfg->mask != FA3_MASK_NONE && (!p->mask_branch || p->one_body))))
        p->first_in_loop = 0;
    p->threads = 128 * (1 + p->num_consumer_wg);
    p->entry_regs = (65536 / p->threads) & ~7; /* 168 for 384 threads, 128 for 512 */
    /* FA3's splits: two consumers 128×24 + 256×240 = 64512, three 128×24 + 384×160 = 64512
       (of 65536). */
    /* e4m3: 40 for the V transpose (32 spilled); 40 x 128 + 232 x 256 = 64512 too */
    p->producer_regs = p->fp8 ? 40 : 24;
    p->consumer_regs = p->num_consumer_wg == 3 ? 160 : p->fp8 ? 232 : 240;
    /* One consumer (256 threads): the launch gives 256 registers a thread (65536 / 256), so the
       consumer keeps them all (setmaxnreg.inc may not ask for fewer than it holds) and the
       producer's 24-56 are left over: 24 x 128 + 256 x 128 = 35840 of 65536 (FA3's one-MMA-
       warpgroup split is 56/256). */
    if (p->num_consumer_wg == 1)
        p->consumer_regs = 256;
    /* paged K/V: the producer's first warp also walks the page table; at 24 (and e4m3's 40)
       registers it spilled 16-24 bytes, so 8 more, taken from the consumers where the CTA's
       registers are all given out (32 x 128 + 232 x 256 = 48 x 128 + 224 x 256 = 63488; three
       consumers: 32 x 128 + 160 x 384 = 65536 is over the 64512 of the launch). e4m3 varlen:
       the tile walk's cursor spilled 16 bytes of the transposing producer: 8 more again. */
    const int extra = 8 * ((cfg->paged_kv != 0) + (p->fp8 && cfg->varlen));
    p->producer_regs += extra;
    if (p->num_consumer_wg == 2)
        p->consumer_regs -= extra;
    /* Head dims are padded to whole 64-column (128-byte) swizzle boxes; the padding is read as
       zeros (TMA fills columns beyond the tensor map's head_dim) and never stored. */
    p->hd_chunks = (cfg->head_dim + p->box_cols - 1) / p->box_cols;
    p->hdv_chunks = (cfg->head_dim_v + 63) / 64;
    p->qk_steps = p->fp8 ? (cfg->head_dim + 31) / 32 : p->hd_chunks * 4;
    p->v_boxes = p->fp8 ? (p->hdv_chunks * 64 + 127) / 128 : p->hdv_chunks;
    p->vt_boxes = p->fp8 ? (p->block_n + 127) / 128 : 0;
    p->vt_rows = p->fp8 ? 128 * p->v_boxes : 0;

    /* Registers live in a consumer thread: S (block_n/2), P (block_n/4, e4m3 block_n/8), O
       (padded hdv/2). e4m3 hd256 (208) is FA3's 128 x 128 tile. */
    int live = p->block_n / 2 + p->block_n / (p->fp8 ? 8 : 4) + p->hdv_chunks * 32;
    const int live_max = p->fp8 ? 192 : 200;
    if (live > live_max)
        return REFUSE("block_n %d needs %d accumulator registers per thread with head_dim_v %d "
                      "(limit %d)", p->block_n, live, cfg->head_dim_v, live_max);

    /* Shared memory, in order of preference (the first that fits):
       - an O staging buffer (o_stage: one box of 64 rows × 64 columns per consumer warpgroup and
         64-column chunk of head_dim_v) for the TMA-store epilogue. Timed without the O stores
         (stores predicated off at run time, dbg_no_o_store), the kernel ran hd128 512/1024 at
         587/668 instead of 484/601 TFLOP/s and hd256 at 629/743 instead of 477/630: the
         register-to-global stores were most of the per-tile cost;
       - a second Q buffer (q_bufs 2): the producer loads the next tile's Q while this one runs.
         Measured neutral to +2% at seqlen ≥ 4096, within noise (±3%) below (q_double=0). */
    static const int tries[4][2] = {{2, 1}, {1, 1}, {2, 0}, {1, 0}}; /* {q_bufs, o_stage} */
    for (int t = 0; t < 4; t++) {
        p->q_bufs = tries[t][0];
        p->o_stage = tries[t][1];
        if (p->o_stage && p->dbg_no_o_store)
            continue; /* the knob times the register-to-global stores, predicated off */
        if (p->o_stage && cfg->split_kv)
            continue; /* split-KV stores fp32 partials from registers (epilogue.c) */
        int off = 0;
        p->smem_q = off;
        p->smem_q_buf = p->hd_chunks * p->block_m * 128;
        off += p->q_bufs * p->smem_q_buf;
        p->smem_k = off;
        p->smem_k_stage = p->hd_chunks * p->block_n * 128;
        off += p->stages * p->smem_k_stage;
        p->smem_v = off;
        p->smem_v_stage = p->v_boxes * p->block_n * 128;
        off += p->stages * p->smem_v_stage;
        p->smem_vt = off;
        p->smem_vt_stage = p->vt_boxes * p->vt_rows * 128;
        off += p->stages * p->smem_vt_stage;
        p->smem_o = off;
        p->smem_o_wg = p->o_stage ? p->hdv_chunks * 64 * 128 : 0;
        off += p->num_consumer_wg * p->smem_o_wg;
        p->smem_bar = off;
        off += p->fp8 ? 8 * (4 + 6 * p->stages) : 8 * (2 * p->q_bufs + 4 * p->stages);
        p->smem_tile = p->dyn_sched ? off : 0;
        off += p->dyn_sched ? 4 * 8 + 8 : 0; /* tile_full/empty pairs, then the two slots */
        p->smem_bytes = off + 1024; /* slack to align the base to 1024 B (128B swizzle atoms) */
        if (p->smem_bytes <= SMEM_LIMIT)
            break;
    }
    /* No room for a staging buffer (head_dim 192, 256): stage O in the tile's Q buffer instead
       (o_stage 2), each warpgroup in its own Q rows, which only its own QK reads. Q is then
       released after the TMA store has read the staging (not after the last QK), so the next
       tile's Q load waits for the epilogue. */
    if (!p->o_stage && !p->dbg_no_o_store && p->q_bufs == 1 && p->hdv_chunks <= p->hd_chunks &&
        !p->fp8 && !cfg->split_kv)
        p->o_stage = 2;
    /* ring_stage: O staged in the tile's last key block's ring slots instead (o_stage 3; two
       consumers, each slot at least a warpgroup's 64 rows of O): Q is then released after the
       last QK, and only the producer's load that wraps back to that stage (2 stages: the next
       tile's second block) waits for the epilogue (measured above) */
    if (p->ring_stage && p->o_stage == 2 && p->num_consumer_wg == 2 &&
        p->smem_k_stage >= p->hdv_chunks * 8192 && p->smem_v_stage >= p->hdv_chunks * 8192)
        p->o_stage = 3;
    else
        p->ring_stage = 0;
    /* varlen: the longest-first tile order's table (varlen_order.h) after the barriers, where it
       fits beside the layout chosen above (it never costs a Q buffer or the O staging); else
       smem_vtab 0 and the kernel walks the sequences in their own order. */
    p->smem_vtab = 0;
    if (cfg->varlen && p->smem_bytes + 16 + FA3_VT_BYTES <= SMEM_LIMIT) {
        p->smem_vtab = (p->smem_bytes - 1024 + 15) & ~15;
        p->smem_bytes = p->smem_vtab + FA3_VT_BYTES + 1024;
    }
    /* The barrier table (layout as described at smem_bar). */
    p->bar_q_full[0] = 0;
    p->bar_k_full = 8;
    p->bar_v_full = 8 + 8 * p->stages;
    p->bar_k_empty = 8 + 16 * p->stages;
    p->bar_v_empty = 8 + 24 * p->stages;
    p->bar_q_empty[0] = 8 + 32 * p->stages;
    p->bar_q_full[1] = p->bar_q_empty[0] + 8;
    p->bar_q_empty[1] = p->bar_q_empty[0] + 16;
    p->bar_vt_full = p->fp8 ? p->bar_q_empty[0] + 24 : 0;
    p->bar_vraw_empty = p->fp8 ? p->bar_vt_full + 8 * p->stages : 0;
    p->bar_producer_count = 128;
    if (p->dyn_sched) { /* after the table above; the slots after them */
        p->bar_tile_full = p->smem_tile - p->smem_bar;
        p->bar_tile_empty = p->bar_tile_full + 16;
        p->smem_tile += 32;
    }
    p->bar_full_count = 1;
    p->bar_release_count = 4 * p->num_consumer_wg;
    p->nb_pingpong = 1;
    p->nb_epilogue = 4;
    p->nb_ring = 7;
    if (p->smem_bytes > SMEM_LIMIT)
        return REFUSE("block_n %d with %d stages needs %d bytes of shared memory (limit %d)",
                      p->block_n, p->stages, p->smem_bytes, SMEM_LIMIT);
    return FA3_OK;
}
