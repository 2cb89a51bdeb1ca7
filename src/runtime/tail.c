/*
 * The tail split of a dense non-masked call (plan.tail_split; fwd.c launches it). A persistent
 * grid of G CTAs takes the call's equal tiles in rounds of G; where the tiles are not a multiple
 * of G, the last round keeps only some SMs busy (the benchmark sweep's 2048 tiles at hd128 and
 * 1024 at hd256 are 15.5 and 7.8 rounds on 132 SMs: at most 97% of the SMs busy on average). So
 * the forward kernel runs the tiles of the whole rounds, and the last round's T tiles go to the
 * config's split-KV kernel (split_kv = 1, same tile plan) as T·k pieces of about 1/k of their
 * keys each, whose fp32 partials its combine kernel merges into O and LSE. The pieces fill
 * ceil(T·k / G) short rounds instead of one long one.
 *
 * The cost model (in key blocks of one CTA): a tile costs its key blocks plus 1.5 (first QK,
 * last PV, epilogue: schedule.c's TILE_COST), a piece ceil(blocks / k) plus the same, the two
 * extra kernel boundaries 4 blocks, and each piece's fp32 partials (bm·hdv·4 bytes, written,
 * then read by the combine) their time at HBM speed (fa3_tail_piece_cost). A split pays where
 * the model gains 0.5%.
 *
 * Measured (session 23, H100 SXM, bf16, tools/probes/tail_ab.py: 31 back-to-back pairs, split /
 * not): first without the partials' cost, which chose k = 13 at hd128 16k (58 MB of partials,
 * past L2): hd128 16k 1.012, 8k 1.012, hd256 16k 1.005 (k = 5), hd256 8k 1.000, hd128 4096
 * and hd64 16k not split (1.000); the same pairs without a split differ by 1.002 and 1.000. So
 * the partials' trip costs what the model now charges: the smallest k near the best wins.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

#define TAIL_TILE_COST 1.5
#define TAIL_LAUNCH_COST 4.0
#define TAIL_MIN_GAIN 0.005 /* the model's gain a call needs (tail_split 1) */
#define TAIL_MAX_SPLITS 32

double fa3_tail_piece_cost(int head_dim, int head_dim_v, int block_n)
{
    if (head_dim <= 0 || head_dim_v <= 0 || block_n <= 0)
        return 0;
    /* a piece's bm·hdv·4 bytes of partials, written and read back at 3.35 TB/s, over a key
       block's 2·bm·bn·(hd + hdv) flops at 5 TFLOP/s an SM (H100 SXM's HBM; its dense bf16 rate
       over 132 SMs, round): bm cancels */
    return 2.0 * 4.0 * (5.0 / 3.35) * head_dim_v / (2.0 * block_n * (head_dim + head_dim_v));
}

int fa3_tail_choose(uint64_t tiles, int64_t key_blocks, unsigned grid, double piece_cost,
                    int force, fa3_tail_plan *out)
{
    memset(out, 0, sizeof *out);
    if (grid == 0 || tiles <= grid || key_blocks < 2 || tiles > UINT32_MAX)
        return 0;
    const uint64_t rounds = tiles / grid, full = rounds * grid, tail = tiles - full;
    if (tail == 0)
        return 0;
    const double per = (double)key_blocks + TAIL_TILE_COST;
    const double none = (double)(rounds + 1) * per;
    double best = 0;
    int best_k = 0;
    for (int64_t k = 2; k <= TAIL_MAX_SPLITS && k <= key_blocks; k++) {
        const int64_t chunk = (key_blocks + k - 1) / k;
        if ((key_blocks + chunk - 1) / chunk != k)
            continue; /* some piece would get no key block */
        const uint64_t piece_rounds = (tail * (uint64_t)k + grid - 1) / grid;
        const double t = (double)rounds * per +
                         (double)piece_rounds * ((double)chunk + TAIL_TILE_COST) +
                         TAIL_LAUNCH_COST + (double)(tail * (uint64_t)k) * piece_cost;
        if (!best_k || t < best) {
            best = t;
            best_k = (int)k;
        }
    }
    if (!best_k || (!force && best > none * (1.0 - TAIL_MIN_GAIN)))
        return 0;
    out->full_tiles = (uint32_t)full;
    out->tail_tiles = (uint32_t)tail;
    out->splits = best_k;
    return 1;
}

int fa3_tail_rows(const fa3_tail_plan *tp, int seqlen_q, int block_m, uint64_t pairs,
                  uint64_t *r0, uint64_t *r1)
{
    *r0 = *r1 = 0;
    if (seqlen_q <= 0 || block_m <= 0 || pairs == 0 || tp->splits < 2 || tp->tail_tiles == 0)
        return 0;
    /* tile t = m_block + pair·nmb (the non-masked order, m_block fastest): the tail starts at
       pair F / nmb, m_block F % nmb and runs to the last row */
    const uint64_t sq = (uint64_t)seqlen_q, bm = (uint64_t)block_m;
    const uint64_t nmb = (sq + bm - 1) / bm, f = tp->full_tiles;
    *r0 = f / nmb * sq + f % nmb * bm;
    *r1 = pairs * sq;
    if (pairs > INT32_MAX || *r1 > INT32_MAX || *r0 >= *r1 ||
        (uint64_t)f + tp->tail_tiles != nmb * pairs ||
        (uint64_t)tp->tail_tiles * (uint64_t)tp->splits > UINT32_MAX) {
        *r0 = *r1 = 0;
        return 0;
    }
    return 1;
}

fa3_status fa3_tail_kernel(fa3_kernel *kernel, int lookup_only, fa3_kernel **out)
{
    *out = NULL;
    pthread_mutex_lock(&kernel->mu);
    fa3_kernel *t = kernel->tail_kernel;
    const int failed = kernel->tail_failed;
    char why[sizeof kernel->tail_why];
    memcpy(why, kernel->tail_why, sizeof why);
    pthread_mutex_unlock(&kernel->mu);
    if (t || failed || lookup_only) {
        *out = t;
        return t ? FA3_OK
                 : fa3_seterr(FA3_ERR_UNSUPPORTED, "tail split: no split-KV kernel (%s)",
                              failed ? why : "not built yet");
    }
    if (!kernel->owner)
        return fa3_seterr(FA3_ERR_UNSUPPORTED, "tail split: the kernel has no context");
    fa3_config c = kernel->cfg;
    c.split_kv = 1;
    /* the lookup is the library's own: the thread's record of its last lookup (fa3_kernel_info's
       source) stays the caller's */
    fa3_kernel_lookup_note saved;
    fa3_kernel_note_save(&saved);
    fa3_status st = fa3_jit_get_kernel(kernel->owner, &c, &t);
    fa3_kernel_note_restore(&saved);
    /* the same tiles, or the tile numbers would not match */
    if (st == FA3_OK && (t->plan.block_m != kernel->plan.block_m ||
                         t->plan.block_n != kernel->plan.block_n || t->num_parts != 2))
        st = fa3_seterr(FA3_ERR_UNSUPPORTED, "tail split: the split-KV kernel's tiles (%dx%d) "
                        "differ from the kernel's (%dx%d)", t->plan.block_m, t->plan.block_n,
                        kernel->plan.block_m, kernel->plan.block_n);
    /* a compile error or other tiles recur at every call: remembered, with the reason; other
       failures (memory, a cache lock's timeout) may pass: the next call tries again */
    pthread_mutex_lock(&kernel->mu);
    if (st == FA3_OK) {
        kernel->tail_kernel = t;
    } else if (st == FA3_ERR_COMPILE || st == FA3_ERR_UNSUPPORTED) {
        kernel->tail_failed = 1;
        snprintf(kernel->tail_why, sizeof kernel->tail_why, "%s", fa3_last_error_message());
    }
    pthread_mutex_unlock(&kernel->mu);
    *out = st == FA3_OK ? t : NULL;
    return st;
}
