/*
 * The varlen tile order, longest first, described once: the table one warp of every CTA builds
 * in shared memory at kernel start from cu_seqlens_q (varlen_order.c writes it in PTX), its
 * layout, and the same build and decode in C (the host's model: test_varlen_order checks that the
 * order is a permutation of the real tiles and longest first, and simulates its balance).
 *
 * The host never sees the lengths (cu_seqlens_q is a device array, and may change between
 * CUDA-graph replays), so the kernel sorts them itself. With batch <= FA3_VT_BATCH (one sequence
 * a lane), each sequence b has nmb_b = ceil(len_b / block_m) m_blocks; the sequences are ranked
 * by nmb descending (ties: the lower index first) and the tiles numbered:
 *   - non-masked: sequence by sequence in that order, each sequence head-major, m_block fastest
 *     (today's order over the sorted list); pre[i] = heads · (m_blocks of sorted 0 .. i-1),
 *     a tile finds its sorted position by a binary search over pre (5 steps);
 *   - masked (causal, local): m-major, m_block descending (the costliest rows first): level m
 *     holds heads · #{b : nmb_b > m} tiles, the sorted sequences present at level m (the first
 *     #{nmb > m} of the sorted list), head fastest. pre[m] = heads · sum_b max(0, nmb_b - m) is
 *     where level m ends (level m starts at pre[m + 1]); a tile finds its level by a binary
 *     search over pre (7 steps), up to FA3_VT_LEVELS levels.
 * The CTAs take the tiles in rounds as in tile_order.h, every odd round reversed here also when
 * not masked (the costs of the sorted sequences' tiles descend from round to round).
 * Beyond either cap (batch > 32; masked with a sequence of more than 128 m_blocks) the table is
 * marked invalid and the kernel walks the sequences in their own order (tile_order.c,
 * varlen_next), as does a plan with no room for the table (plan->smem_vtab 0).
 */
#ifndef FA3JIT_CODEGEN_VARLEN_ORDER_H
#define FA3JIT_CODEGEN_VARLEN_ORDER_H

#include <stddef.h>
#include <stdint.h>

#define FA3_VT_BATCH 32   /* sequences the table sorts (one a lane of warp 0) */
#define FA3_VT_LEVELS 128 /* masked: m_blocks of the longest sequence the table orders */

/* The table, in shared memory at plan->smem_vtab (u32 words). */
typedef struct fa3_vtab {
    uint32_t seq[FA3_VT_BATCH];      /* the sequences, longest first */
    uint32_t nmb[FA3_VT_BATCH];      /* their m_block counts (0 past batch) */
    uint32_t pre[FA3_VT_LEVELS + 1]; /* non-masked: pre[0 .. 32]; masked: pre[0 .. 128] */
    uint32_t valid;                  /* 1: decode from the table; 0: walk the sequences */
    uint32_t total;                  /* the real tiles: heads · sum of nmb */
} fa3_vtab;

#define FA3_VT_SEQ 0
#define FA3_VT_NMB (4 * FA3_VT_BATCH)
#define FA3_VT_PRE (8 * FA3_VT_BATCH)
#define FA3_VT_VALID (FA3_VT_PRE + 4 * (FA3_VT_LEVELS + 1))
#define FA3_VT_TOTAL (FA3_VT_VALID + 4)
#define FA3_VT_BYTES ((FA3_VT_TOTAL + 4 + 15) / 16 * 16)

_Static_assert(offsetof(fa3_vtab, nmb) == FA3_VT_NMB, "vtab layout");
_Static_assert(offsetof(fa3_vtab, pre) == FA3_VT_PRE, "vtab layout");
_Static_assert(offsetof(fa3_vtab, valid) == FA3_VT_VALID, "vtab layout");
_Static_assert(offsetof(fa3_vtab, total) == FA3_VT_TOTAL, "vtab layout");
_Static_assert(sizeof(fa3_vtab) <= FA3_VT_BYTES && FA3_VT_BYTES % 16 == 0, "vtab size");

/* The table of batch sequences with nmb[b] m_blocks each (what the kernel's warp 0 writes). */
static inline void fa3_vtab_build(fa3_vtab *t, int masked, uint32_t batch, uint32_t heads,
                                  const uint32_t *nmb)
{
    *t = (fa3_vtab){0};
    if (batch > FA3_VT_BATCH)
        return;
    uint32_t v[FA3_VT_BATCH];
    for (uint32_t i = 0; i < FA3_VT_BATCH; i++)
        v[i] = i < batch ? nmb[i] : 0;
    for (uint32_t i = 0; i < FA3_VT_BATCH; i++) { /* the lane's rank: who goes before it */
        uint32_t rank = 0;
        for (uint32_t j = 0; j < FA3_VT_BATCH; j++)
            rank += v[j] > v[i] || (v[j] == v[i] && j < i);
        t->seq[rank] = i;
        t->nmb[rank] = v[i];
    }
    if (!masked) {
        for (uint32_t i = 0; i < FA3_VT_BATCH; i++)
            t->pre[i + 1] = t->pre[i] + heads * t->nmb[i];
        t->total = t->pre[FA3_VT_BATCH];
        t->valid = 1;
        return;
    }
    for (uint32_t m = 0; m < FA3_VT_LEVELS; m++) {
        uint32_t a = 0;
        for (uint32_t b = 0; b < FA3_VT_BATCH; b++)
            a += (int32_t)(t->nmb[b] - m) > 0 ? t->nmb[b] - m : 0;
        t->pre[m] = heads * a;
    }
    t->pre[FA3_VT_LEVELS] = 0;
    t->total = t->pre[0];
    t->valid = t->nmb[0] <= FA3_VT_LEVELS;
}

/* Tile of a valid table into (sequence, head, m_block); 0 when tile is past the real tiles.
   The same steps as the kernel's decode (varlen_order.c). */
static inline int fa3_vtab_decode(const fa3_vtab *t, int masked, uint32_t heads, uint32_t tile,
                                  uint32_t *batch, uint32_t *head, uint32_t *mblk)
{
    if (tile >= t->total)
        return 0;
    uint32_t lo = 0;
    if (!masked) { /* the last sorted position whose tiles start at or before tile */
        for (uint32_t step = FA3_VT_BATCH / 2; step; step /= 2)
            if (t->pre[lo + step] <= tile)
                lo += step;
        const uint32_t local = tile - t->pre[lo], n = t->nmb[lo];
        *batch = t->seq[lo];
        *head = local / n;
        *mblk = local - *head * n;
        return 1;
    }
    for (uint32_t step = FA3_VT_LEVELS / 2; step; step /= 2) /* the level whose tiles hold tile */
        if (t->pre[lo + step] > tile)
            lo += step;
    const uint32_t j = tile - t->pre[lo + 1], s = j / heads;
    *batch = t->seq[s];
    *head = j - s * heads;
    *mblk = lo;
    return 1;
}

/* Today's walk (the fallback, and the order before the table): sequence by sequence in batch
   order, head-major, m_block fastest (masked: descending). */
static inline int fa3_vwalk_decode(int masked, uint32_t batch_n, uint32_t heads,
                                   const uint32_t *nmb, uint32_t tile, uint32_t *batch,
                                   uint32_t *head, uint32_t *mblk)
{
    uint32_t base = 0;
    for (uint32_t b = 0; b < batch_n; b++) {
        const uint32_t end = base + nmb[b] * heads;
        if (tile < end) {
            const uint32_t local = tile - base;
            *batch = b;
            *head = local / nmb[b];
            const uint32_t mi = local - *head * nmb[b];
            *mblk = masked ? nmb[b] - 1 - mi : mi;
            return 1;
        }
        base = end;
    }
    return 0;
}

#endif
