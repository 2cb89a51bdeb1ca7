/*
 * FA3JIT_PLAN_DEBUG's parser and knob table (grammar in knobs.h). The planner's defaults and the
 * reasons for them stay in plan.c; this file only reads the overrides.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/knobs.h"

/* Benchmark knobs, not API (bench/ab.py, tools/gpu-run.sh ab): leave-one-stage-out variants and
   the one tile choice still open. The PTX changes, so cache keys do too.
   - wg3=0: two consumer warpgroups for head_dim 64 instead of three (plan.c has the A/B);
   - dbg_no_softmax=1 (timing only, wrong results): P = S, no softcap/mask/max/exp/sum/rescale;
     the GEMMs and the pipeline alone. Fair timing, bf16, 16k non-causal (call 3 of 2026-11-29
     session 4): hd64/128/256 778/769/757 TFLOP/s vs 527/648/725 with the softmax;
   - dbg_no_o_store=1 (timing only, O not written): no TMA store, the register stores
     predicated off at run time;
   - dbg_no_vt=1 (e4m3, timing only, wrong results): the producer threads skip the V transpose's
     loads, permutes and stores (its waits and arrivals stay), the cost of the transpose;
   - cond_rescale=0 (bf16/fp16; e4m3 has neither: its P offset leaves no headroom): without
     FA4's conditional O rescale (softmax.c);
   - fast_exp=0 (bf16/fp16): the exponent as (s - m)·c, a sub and a mul a score, instead of one
     FMA (softmax.c); plan.c has the A/B of both;
   - tree_reduce=0/1: the row max (and with fast_exp the row sums) over 4 accumulators instead
     of one dependent chain (softmax.c);
   - pack_first=0/1: the loop body packs P before it rescales O (FA4's order; with
     cond_rescale the pack then sits before the rescale's branch). tree_reduce is the
     planner's choice for head_dim > 64, pack_first for every 16-bit kernel (head_dim 64 since
     session 21; plan.c has the A/Bs);
   - one_body=1 (causal/local; no effect without a mask): the key-block loop's one body is the
     masked one (mainloop.c): ptxas ~30% cheaper (hd128/256 causal, issue 17), each unmasked
     block pays the mask's compares. Same-run A/B (session 10 call 2, bf16 hd64, compare.py
     --variants, 3 rounds rotated), one_body=1 / default: causal 512..16k 0.95/0.93/0.92/0.90/
     0.92/0.88, non-causal 0.99-1.02: slower, kept as a knob for cold-JIT experiments;
   - ex2_emu=N (bf16/fp16 with fast_exp, 0..16): in unmasked blocks the last N exponentials of
     each row a thread holds by a degree-3 polynomial on the FMA pipe (softmax.c), to unload the
     MUFU pipe where it bounds the loop (hd64 on paper: docs/notes.md session 9). Same run as
     one_body's: ex2_emu=4 / default 0.95-1.03 (median 0.98), ex2_emu=8 0.93-0.99 (median 0.95)
     over hd64's 12 rows: the MUFU pipe does not bound hd64, kept as a knob. Only loop bodies
     without a mask branch take it: none under first_in_loop (the default where the ends merge,
     session 30), whose body always carries the branch;
   - uniform_desc=0/1: the warpgroup index as lane 0 holds it (shfl.sync.idx), so ptxas knows
     it is warp-uniform and keeps the consumer's Q descriptor in uniform registers, and the QK
     steps advance that descriptor by a 32-bit add of its low word (kernel.c, mainloop.c). Main
     loop SASS per thread and key block (nvdisasm, session 10, bf16 non-causal): hd64/128/256
     477/534/539 -> 465/509/491 instructions (FA4's: 418/455/423); causal loop bodies
     1103/1218/1182 -> 1082/1179/1080;
   - early_pack=0/1 (bf16/fp16; not yet on the GPU): FA4's hd64 loop order (session 13's SASS
     comparison, docs/notes.md): in an overlapped block the PV's wait_group 0 after the first 10
     exponentials, each P pair packed right after its second exponential (those before the
     wait right after it), O's rescale after the softmax as before; early_pack=2: the same with
     the block's K release moved to just before the PV's wait, predicated on the row sums so far
     being > -1 or NaN (always), since ptxas hoists the wait above every exponential at hd64
     otherwise and not above an mbarrier arrive: nvdisasm of the hd64 loop puts 12 EX2 before
     the wait (FA4: 12), hd128 54, hd256 30 (early_pack=1: 0 / 8 / 6);
   - ring_stage=0/1 (bf16/fp16, default 1; plan.c has the A/B): where O would be staged in the
     Q buffer (one Q buffer, head_dim 192/256), stage it in the last key block's K (consumer 0)
     and V (consumer 1) ring slots instead (o_stage 3), so Q is released after the last QK;
   - late_v_wait=0/1: an overlapped key block waits for the previous block's V after issuing its
     QK, just before the PV (FA4's order; mainloop.c block_body), so a late V holds up only the
     PV. Both are the planner's choice for bf16/fp16 (plan.c has the A/B, session 11);
   - ring_addr=0/1 (default 1 since session 27, plan.c has the A/B; 0 is the kernel before): the
     consumers' ring barrier addresses as stage·8 + bars
     with the table offset added last, which ptxas folds into the SYNCS address ([UR+0x28]),
     and their K/V descriptors as stage·(stage bytes / 16) plus stage 0's descriptor word, kept
     from the tile loop's start (pipeline.c kg_ring_bar, mainloop.c ring_wait_desc). nvdisasm of
     the bf16 non-causal loops: hd64/128/256 463/509/502 -> 449/494/490 SASS a key block (FA4:
     418/455/423; session 13 counted +7 barrier-address and +4 descriptor instructions at hd64).
     The producer keeps its form: with it, its 24 registers spilled 8-12 bytes at hd192/256
     masked. test_ptxas's 520 cases compile under ring_addr=1,early_pack=2 with no spill
     (FA3JIT_TEST_PTXAS_KNOBS);
   - kept_branch=0/1 (bf16/fp16 with cond_rescale; default 1 since session 15, plan.c has the
     A/B; kept_branch=0 is the kernel before it): a warp whose vote keeps
     every row's max branches over the new max's arithmetic (softmax.c row_new_max: the max,
     the exp2 offset with its large-score guard, the carried rounding e, alpha's exponential),
     whose results would equal the carried ones; alpha = 1 there. The per-row scale and offset
     of the exponent FMA then carry from block to block (the tile's first block computes them
     for every row; not with ex2_emu, whose 2^-inf is not 0). tools/probes/softmax_sim runs
     both kernels' PTX on the same adversarial scores: P, O and LSE bit-identical. nvdisasm of
     the bf16 non-causal loops (tools/probes/sass_loop.py --kept), SASS executed on a block
     whose warp keeps its maxima, hd64/128/256: default 431/445/374, kept_branch=1 403/417/346,
     with ring_addr=1 as well 389/402/333 (FA4's hd64 loop: 413-418); static 463/509/502 ->
     467/513/506. The PV's wait stays where it was. test_ptxas compiles every case under
     kept_branch=1 and kept_branch=1,ring_addr=1 with no spill; with early_pack=2 as well
     hd64's local softcap kernels spill 8 bytes (three consumers, 128 registers);
   - q_desc_tile=0/1 (bf16/fp16; default 1 since session 27 with ring_addr, plan.c has the
     A/B): Q's descriptors of a QK's first 8 k-steps
     built once a tile, after Q's wait, instead of in each QK (mainloop.c q_tile_descs). ptxas
     keeps them in uniform registers, each beside the K descriptor its wgmma pairs it with
     (gdesc[UR40] reads UR40..43: Q's then K's), so such a k-step issues one UIADD3.64 (K's)
     where it issued three (Q's low word, its constant high word, K's). All 12 / 16 k-steps of
     head_dim 192 / 256 did not fit: ptxas kept some (379 -> 387, 317 -> 329 SASS) and hd256's
     masked kernels spilled 4-16 bytes. SASS executed on a kept block (as kept_branch's above),
     hd64/128/192/256: default 431/445/436/374, q_desc_tile=1 423/429/420/359; with
     kept_branch=1,ring_addr=1 as well 381/387/379/317 (those two alone: 389/402/395/333);
   - wait_hint=1: each mbarrier try_wait carries a suspend-time hint of 10 ms (CUTLASS's
     ClusterBarrier::wait), so a waiting thread sleeps until the phase completes instead of
     re-issuing the try_wait and its branch: ncu (session 11, hd128 16k non-causal) counted
     57M SYNCS and 56M BRA warp instructions in ours against FA4's 12M and 9M, most of them the
     wait loops (pipeline.c kg_mbar_wait). Same-run A/B (session 11 call 10, bf16, 36 rows,
     cuDNN in the run): wait_hint=1 / default median 1.004, within the run's noise: a knob
     (test_ptxas compiles it with dyn_sched=0: with the tile hand-over the producer's 24
     registers spill 8 bytes at hd192/256 masked);
   - section=N (runtime only; the PTX differs in its debug header alone): masked configs' tile
     order in sections of N (head, batch) pairs (at most all of them), instead of the size the
     search picks in [grid/4, the L2 budget's] (runtime/schedule.c). ncu (session 34, H100,
     fp16 hd128 causal 512, batch 32 x 16 heads: the search's 77 pairs) read 248 MB from DRAM
     where cuDNN read 201 (Q+K+V once): the knob measures whether smaller sections take the
     extra reads away;
   - whole_rounds=0|1 (runtime only; 1 the default since session 35, plan.c has the A/B): the
     section search, among the sizes whose static rounds are within 0.3% of its most even,
     takes the smallest whose M x size tiles (M query tiles a pair) fill whole rounds of `grid`,
     so that no round mixes two sections' K/V; else (and with 0) its plain choice. hd128 causal
     512 on 132 SMs: 66 pairs read Q+K+V once (ncu 202 MB) where the plain search's 77 read
     1.23x; 66 is as even as 77 but was not among the search's 48 evenly spaced candidates;
   - l2_hint=M (bit mask, 0..7): TMA transfers with an L2 eviction priority, as FA3's K/V loads
     (CUTLASS's EVICT_LAST): 1 K and V loaded evict_last, 2 Q loaded evict_first, 4 O stored
     evict_first (.L2::cache_hint with createpolicy.fractional's value as an immediate;
     pipeline.c kg_l2_policy, used by producer.c and epilogue.c). ncu
     (session 34, H100, fp16 hd256 causal 512) read 222 MB where Q+K+V is 201 and cuDNN read
     201: the knob measures whether K/V kept over the streamed Q and O take the extra reads away.
     Measured (session 37, plan.c): they did not (220.6 -> 219.9 MB; 207.4 with =7, the time
     unchanged), and =1 lost 3-6% at causal 1024-8192. Session 38 timed Q and O evict_first
     in the table's protocol (each call after an L2 flush): causal hd128/256 +1.4-2.7%, so
     masked 16-bit kernels default to 6 (plan.c has the A/B), everything else to 0;
   - l2_floor=D (runtime only; the PTX differs in its debug header alone): masked configs' L2
     sections hold at least grid/D (head, batch) pairs instead of grid/4 (runtime/fwd.c
     section_hb). ncu (session 11, hd64 causal 8192, batch 2, 32 heads): L2 hit rate 39% in ours
     (one section of all 64 pairs: 2 CTAs of a round share a pair's K/V) against FA4's 85%
     (16 heads at a time); D = 8 gives 17 pairs. Session 11 (bench/RESULTS.md): compare.py
     measured hd64 causal 8192 +8.4% (D = 8 and 16) and hd128 causal 4096 +8.5% (D = 16), but
     hd64 16384 / hd256 4096 -5% (D = 16), and fa3-gen bench did not see the hd64 row move:
     undecided, a knob;
   - dyn_sched=0/1/2/3 (causal/local, dense bf16/fp16; elsewhere no effect; 1 is the
     planner's choice, plan.c has the A/B): FA3's dynamic persistent scheduler. The producer
     thread hands each tile index to the consumers through a shared-memory slot guarded by an
     mbarrier pair (producer.c, mainloop.c, tile_order.c), and where the runtime passes a
     counter (atom.add, zeroed before the launch) takes the CTA's next tile from it after
     issuing the current one's loads (late_claim, below). The order is the static one's
     (sections, longest rows first), taken greedily, with sections sized by L2 alone (32 MiB
     of K/V, no floor: the greedy order balances any size). The runtime passes the counter
     (1) where fa3_dyn_section's rule says (runtime/schedule.c), (2) always, (3) never: the
     static order through the same hand-over; 0: the kernel before session 12 (each role
     computes the static order itself). Session 1's version fetched at the tile boundary, in
     front of the Q load, and lost 10-15%; session 12's fetched at the tile's start.
   - late_claim=0/1 (with dyn_sched's counter): the producer takes the next tile from the
     counter after issuing the current tile's last K/V load instead of at the tile's start.
     Taken at the start, each CTA holds a claimed tile while it runs the current one, so the
     greedy order deals tiles by start time, not finish time: ncu (session 22, H100, hd256
     causal 8192) read SM active cycles 0.913 of elapsed in ours against 0.971 in FA4, and a
     host simulation of the order (longest first, sections of 4 pairs, 132 CTAs) gives 0.913
     taken at the start and 0.996 taken at the end. Default 1 (plan.c has the A/B); 0 is the
     kernel before, and with it the runtime keeps 4 KV heads a section for the counter;
   - tail_split=0/1/2 (runtime only, non-masked dense bf16/fp16 calls; the PTX differs in its
     debug header alone): a call whose tiles leave the persistent grid's last round part full
     runs the whole rounds' tiles here and the rest as split-KV partials (the split_kv = 1
     kernel of the same config, then its combine), runtime/tail.c; 1 (default) where tail.c's
     cost model gains 1.5%, 2 whenever there is a part round (the tests), 0 never;
   - diag_half=0/1 (bf16/fp16; default 1 for three consumers with a mask, plan.c has the
     A/B; session 17): in the tile's first key block (the diagonal of a causal tile, or the
     key tail) a consumer whose rows see none of the block's last block_n/2 keys takes a QK of
     block_n/2 columns and a softmax over them, and one whose rows see none of its keys takes
     neither (blockinfo.c kg_first_block_reach, mainloop.c); P's other half is zero, so the
     PV is unchanged;
   - mask_branch=0/1 (causal/local): one key-block loop body, not a masked and an unmasked
     one: its softmax applies the mask under a warp-uniform branch on the block's need
     (blockinfo.c kg_block_needs_mask, decided at the loop top as before). The planner's
     choice for every 16-bit masked kernel (head_dim >= 128 since session 20, 64 and 96 since
     session 21 with pack_first; plan.c has the A/Bs: even or better, and ptxas compiles those
     kernels in about two thirds of the time). mask_branch=0 gives the two bodies of before;
     e4m3 has taken one body too since session 29 (with merged ends, for its cold JIT: jit_cost
     --fp8's 60 e4m3 configs went from 37 over 300 ms to none; plan.c has the A/B);
   - fast_div=0/1/2 (default 2 since session 25; plan.c has the A/B): integer divisions as a
     multiply and shifts (src/divmagic.h, codegen/divide.c) instead of ptxas's generic
     div.u32/rem.u32, which ptxas 13.0 lowers to a float-reciprocal chain (I2F, MUFU.RCP, F2I,
     IMADs: about 15 SASS instructions) even for an immediate power of two. 1: the divisions by
     a plan constant (the tile range's by block_n, the varlen walk's by block_m, the ping-pong
     neighbour's by the consumer count); 2: also those by the launch's divisors, whose magics
     the runtime passes in fa3_kernel_params.div (runtime/fwd.c fa3_kernel_params_divs; the PTX
     then declares all FA3P_SIZE bytes): the tile decode's chain (tile -> m_block and pair by
     num_m_blocks, sections, pair -> head and batch by the heads, kv head by heads_per_kv: up
     to four dependent divisions between a tile's hand-over and its first QK, in every consumer
     at once), split-KV's splits, packed GQA's per-row ratio, paged K/V's page size. nvdisasm,
     bf16 hd64 causal block_m 128 (the short causal tile): 18 -> 6 MUFU.RCP, 12 -> 0 I2F, a
     consumer's tile start to its first HGMMA 289 -> 204 SASS lines. Exact: the tile order's
     interpreter (test_tile_order, fast_div 0..2) and ctasim's cases (bitwise equal O and LSE)
     agree with the default;
   - merge_ends=0/1 (for cold JIT; the default where head_dim > 128 and for e4m3, plan.c): the
     tile's first QK and last PV issued by the key-block loop's own wgmmas (mainloop.c merged_loop): its first pass
     skips the PV and takes the first block's softmax, its last skips the QK and leaves after
     the PV, each by a warp-uniform branch, so the consumer holds one QK and one PV copy fewer;
     ptxas's time follows the wgmmas' total width (docs/notes.md, session 15). In the last
     pass's QK place one k-step of a QK on the V stage the PV reads, into S (not read): with no
     QK group there ptxas serialized the wgmmas (C7514/C7515) however arranged (the branch
     before or after the PV's wait, an empty commit group or guard predicates in the QK's
     place: C7519 as well). Not where diag_half's half copy or two loop bodies (mask_branch=0,
     one_body) are in play. e4m3 (the default since session 29; its masked kernels need
     mask_branch=1 for one body): the k-step is an m64n{bn}k32 on the transposed V stage,
     K-major, whose vt_boxes·vt_rows rows of 128 B are at least block_n (session 27 said the
     stage was too narrow: it read hdv rows for the stage's height, wrong).
     fa3-gen --info --no-cache compile ms (2-core machine), merge_ends=0 -> 1: hd128
     251 -> 187, hd128 causal 266 -> 201, hd256 374 -> 264, hd256 causal 407 -> 283,
     hd192x128 local 320 -> 235 (the first QK alone merged: 216 / 224 / 327 / 352 / 266). O
     and LSE bitwise equal either way on ctasim's cases. Cost (session 28, H100, same-run
     A/B): 1-4% at head_dim 64/128 (a branch or two a key block, one k16 step a tile), even at
     256 (plan.c has the figures);
   - first_in_loop=0/1 (with merge_ends, the default wherever the ends merge since session
     30, plan.c has the A/B; 0 is the merged kernel before): the tile's first key block takes the
     loop body's softmax instead of a copy of its own (mainloop.c merged_loop): its pass waits
     for S with wait_group 0 and joins the body after the PV's wait, its mask under the body's
     branch (the block's need or'ed with the first pass, which is always masked; a kernel
     without a mask gains that branch), its V release predicated off; a warp whose rows see
     none of the block's keys keeps its maxima (kept_branch) with the exponent's scale and
     offset set at the tile's start. O and LSE bitwise equal on ctasim's cases. ptxas holds one
     softmax copy fewer (tanh, mask, max, exponentials, sums): fa3-gen --info --no-cache compile
     ms (2-core machine, two runs each), default -> first_in_loop=1: hd192 fp16 local softcap
     varlen paged 313 -> 264, hd256 fp16 causal varlen paged 306 -> 283, hd128 e4m3 local
     softcap paged 305 -> 237, hd256 causal 283 -> 254. With the ends apart (16-bit head_dim
     <= 128, e4m3 under merge_ends=0; not with diag_half's copies or two loop bodies) the knob
     gives mainloop.c split_joined: the first block enters the loop like any other and takes a
     QK copy of its own under the pass's branch (no wgmma of the body's under a branch), then
     joins the body after the PV's wait as above. O and LSE bitwise equal on ctasim's cases;
     fa3-gen --info --no-cache compile ms hd128 236 -> 209, hd128 causal 250 -> 229, hd128
     fp16 causal softcap varlen paged 313 -> 270, hd96 local softcap varlen paged 319 -> 268,
     hd64 142 -> 124; nvdisasm (sass_loop.py --kept --unmasked, bf16): a kept unmasked block
     executes hd64 381 -> 376, hd128 387 -> 380, hd128 causal 397 -> 386 SASS instructions.
     Slower on the GPU all the same (session 31, plan.c has the A/B: 1-5% at hd64/128), so a
     knob with the ends apart;
   - pingpong=0 (two or three consumers; plan.c has the A/B): no GEMM turns between the
     consumers (FA3's scheduler barrier, on in every kernel since the first): each issues its
     QK and PV when its data is there. FA3's and FlashInfer's Hopper kernels keep the turns
     for 16-bit head_dim <= 128 and e4m3 >= 128 only; FA4 has none at hd256. Without the turns
     the ring staging's named barriers (o_stage 3) could take a second tile's arrive before the
     first's sync, so consumer 0 syncs its own at its last PV, before it arrives on consumer
     1's (mainloop.c last_v_release). ctasim's suite passes under it, O and LSE bitwise equal
     to the default's. Session 32 (H100): 16-bit 0.89-1.00 of the default (hd64 non-causal
     0.89-0.91, hd256 non-causal >= 4096 0.968), e4m3 hd256 0.91-0.98; e4m3 hd128 +1-4% at
     4096-16384 and even below (three runs): the default there since session 33;
   The scheduling switches of earlier sessions (arrive_per_warp, early_q_release,
   l2_sections, pp_continuous, q_double, k_before_q, o_tma_store, o_stage_in_q, masked_overlap,
   section_search, pv_split, stages) are retired: each was settled by a same-run A/B, recorded
   in plan.c and docs/notes.md; stages remains a config field (fa3_config.stages). So is xtile
   (1 and 2: a tile's last PV issued with the next tile's first QK in one ping-pong turn, then
   the tile's epilogue; correct on the GPU and on tools/ctasim, slower in same-run A/Bs on an
   H100, 0.984 and 0.973 of the default over 36 bf16 rows, hd64 causal 512-2048 0.91 under
   xtile=2; sessions 19-20, docs/notes.md; the code is in commit 85f1b3f). */
static const struct knob {
    const char *name;
    size_t off;
    int lo, hi; /* accepted values */
} knobs[] = {
    {"wg3", offsetof(fa3_plan, wg3), 0, 1},
    {"dbg_no_o_store", offsetof(fa3_plan, dbg_no_o_store), 0, 1},
    {"dbg_no_softmax", offsetof(fa3_plan, dbg_no_softmax), 0, 1},
    {"dbg_no_vt", offsetof(fa3_plan, dbg_no_vt), 0, 1},
    {"cond_rescale", offsetof(fa3_plan, cond_rescale), 0, 1},
    {"fast_exp", offsetof(fa3_plan, fast_exp), 0, 1},
    {"tree_reduce", offsetof(fa3_plan, tree_reduce), 0, 1},
    {"pack_first", offsetof(fa3_plan, pack_first), 0, 1},
    {"one_body", offsetof(fa3_plan, one_body), 0, 1},
    {"ex2_emu", offsetof(fa3_plan, ex2_emu), 0, 16},
    {"uniform_desc", offsetof(fa3_plan, uniform_desc), 0, 1},
    {"late_v_wait", offsetof(fa3_plan, late_v_wait), 0, 1},
    {"ring_stage", offsetof(fa3_plan, ring_stage), 0, 1},
    {"early_pack", offsetof(fa3_plan, early_pack), 0, 2},
    {"wait_hint", offsetof(fa3_plan, wait_hint), 0, 1},
    {"ring_addr", offsetof(fa3_plan, ring_addr), 0, 1},
    {"kept_branch", offsetof(fa3_plan, kept_branch), 0, 1},
    {"q_desc_tile", offsetof(fa3_plan, q_desc_tile), 0, 1},
    {"dyn_sched", offsetof(fa3_plan, dyn_sched), 0, 3},
    {"late_claim", offsetof(fa3_plan, late_claim), 0, 1},
    {"l2_floor", offsetof(fa3_plan, l2_floor), 0, 64},
    {"section", offsetof(fa3_plan, section), 0, 65536},
    {"whole_rounds", offsetof(fa3_plan, whole_rounds), 0, 1},
    {"l2_hint", offsetof(fa3_plan, l2_hint), 0, 7},
    {"tail_split", offsetof(fa3_plan, tail_split), 0, 2},
    {"diag_half", offsetof(fa3_plan, diag_half), 0, 1},
    {"mask_branch", offsetof(fa3_plan, mask_branch), 0, 1},
    {"fast_div", offsetof(fa3_plan, fast_div), 0, 2},
    {"merge_ends", offsetof(fa3_plan, merge_ends), 0, 1},
    {"first_in_loop", offsetof(fa3_plan, first_in_loop), 0, 1},
    {"pingpong", offsetof(fa3_plan, pingpong), 0, 1},
};
#define NUM_KNOBS (sizeof knobs / sizeof knobs[0])

static const struct knob *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NUM_KNOBS; i++)
        if (strlen(knobs[i].name) == len && memcmp(knobs[i].name, name, len) == 0)
            return &knobs[i];
    return NULL;
}

int fa3_knobs_parse(const char *text, fa3_plan *plan, char *warn, size_t warn_size)
{
    if (warn && warn_size)
        warn[0] = '\0';
    else
        warn = NULL;
    if (!text || !text[0])
        return 0;
    int bad = 0, unknown = 0;
    size_t n = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        const struct knob *k = eq ? find(p, (size_t)(eq - p)) : NULL;
        long v = -1;
        if (k && fa3_parse_whole(eq + 1, len - (size_t)(eq + 1 - p), k->hi, &v) && v >= k->lo) {
            if (plan)
                *(int *)((char *)plan + k->off) = (int)v;
        } else {
            char pt[201], pi[65]; /* control bytes of the value shown as '?' */
            if (bad)
                fa3_append(warn, warn_size, &n, ", ");
            else
                fa3_append(warn, warn_size, &n, "%s='%s': ignored ", FA3_KNOBS_ENV,
                           fa3_printable(text, -1, pt, sizeof pt));
            fa3_append(warn, warn_size, &n, "'%s' ", fa3_printable(p, (long)len, pi, sizeof pi));
            if (!len)
                fa3_append(warn, warn_size, &n, "(an empty item)");
            else if (!eq)
                fa3_append(warn, warn_size, &n, "(not name=value)");
            else if (!k)
                fa3_append(warn, warn_size, &n, "(unknown knob)");
            else
                fa3_append(warn, warn_size, &n, "(%s takes %d..%d)", k->name, k->lo, k->hi);
            unknown |= len && eq && !k;
            bad++;
        }
        p += len;
        if (!*p)
            break;
        p++;
    }
    if (bad) {
        fa3_append(warn, warn_size, &n, "; the other items apply");
        if (unknown) {
            fa3_append(warn, warn_size, &n, " (knobs:");
            for (size_t i = 0; i < NUM_KNOBS; i++)
                fa3_append(warn, warn_size, &n, "%s %s", i ? "," : "", knobs[i].name);
            fa3_append(warn, warn_size, &n, ")");
        }
    }
    return bad;
}

void fa3_knobs_apply_env(fa3_plan *plan)
{
    const char *env = getenv(FA3_KNOBS_ENV);
    const fa3_plan def = *plan;
    (void)fa3_knobs_parse(env, plan, NULL, 0);
    /* A plan the knobs changed is a debug plan: it carries their text (printable bytes, cut with
       "..."), which the PTX header, the cache entry and fa3-gen show. fa3_plan holds ints and
       chars only, so memcmp compares its values. */
    if (!env || memcmp(&def, plan, sizeof def) == 0)
        return;
    const size_t n = strlen(env), max = sizeof plan->debug - 1;
    fa3_printable(env, -1, plan->debug, sizeof plan->debug);
    if (n > max)
        memcpy(plan->debug + max - 3, "...", 3);
}
