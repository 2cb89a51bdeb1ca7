/*
 * Section size of the masked tile order (fa3_kernel_params.section_hb): the kernel walks the
 * tiles of causal/local configs in sections of section_hb (head, batch) pairs, each section
 * longest rows first, dealt to the CTAs in rounds of `grid` tiles that alternate direction
 * (codegen/tile_order.h describes the order once, for the kernel and for this simulation).
 * Small sections keep the K/V that one round reads inside L2; but how evenly the static rounds share the work depends on the section
 * size in a way no simple rule captures (hd128 causal seqlen 1024 on 132 SMs: 64 pairs give a
 * busiest CTA 1.19x the mean, 33 pairs 1.01x; ncu saw the SMs idle 21% of the kernel with 64).
 * So the host simulates the kernel's order for a few candidate sizes and keeps the smallest of
 * the most even ones, and remembers the answer per shape in the kernel object.
 */
#include <stdint.h>
#include <stdlib.h>

#include "codegen/tile_order.h"
#include "runtime/runtime.h"

/* Work of the busiest CTA (in key blocks, plus tile_cost per tile) under the kernel's order:
   the tile index and decode of codegen/tile_order.h, the same description the kernel's PTX is
   written from (test_tile_order checks the two against each other). */
static double makespan(const int *blocks, uint32_t M, uint32_t hb, uint32_t s, unsigned grid,
                       double tile_cost, double *load)
{
    for (unsigned i = 0; i < grid; i++)
        load[i] = 0;
    const uint32_t ntiles = M * hb;
    for (uint32_t r = 0; (uint64_t)r * grid < ntiles; r++)
        for (unsigned c = 0; c < grid; c++) {
            uint32_t t = fa3_tile_index(1, r, c, grid), pair;
            if (t >= ntiles)
                continue;
            load[c] += tile_cost + blocks[fa3_tile_decode(1, t, ntiles, M, s, &pair)];
        }
    double mx = 0;
    for (unsigned i = 0; i < grid; i++)
        mx = load[i] > mx ? load[i] : mx;
    return mx;
}

/* Per-tile cost beyond its key blocks (first QK alone, last PV alone, epilogue), in key blocks:
   an estimate; the choice of section size moves little between 0 and 3. */
#define TILE_COST 1.5
#define MAX_CANDIDATES 48
#define MAX_SIM_STEPS (256u << 10) /* candidates × tiles simulated per new shape (~1 ms) */

/* A size is as even as the best when its busiest CTA is within 0.3% of the best's. */
#define EVEN_TOLERANCE 1.003

/* Knob whole_rounds: of the sizes in [lo, hi] whose M x size tiles fill whole rounds of grid (no
   round mixes two sections' K/V), the smallest whose busiest CTA is within 0.3% of best (the
   evenly spaced candidates' best); otherwise chosen. At most budget sizes are simulated. */
static uint32_t whole_round_size(const int *blocks, uint32_t M, uint32_t hb, unsigned grid,
                                 uint32_t lo, uint32_t hi, uint64_t budget, double *load,
                                 double best, uint32_t chosen)
{
    const uint32_t step = grid / fa3_gcd(M, grid); /* M x step is a multiple of grid */
    for (uint64_t s = ((uint64_t)lo + step - 1) / step * step; s <= hi && budget; s += step) {
        budget--;
        if (makespan(blocks, M, hb, (uint32_t)s, grid, TILE_COST, load) <= best * EVEN_TOLERANCE)
            return (uint32_t)s;
    }
    return chosen;
}

uint32_t fa3_section_search(const fa3_plan *p, int seqlen_q, int seqlen_k, int wl, int wr,
                            uint32_t hb, unsigned grid, uint32_t lo, uint32_t hi)
{
    return fa3_section_search_gqa(p, 0, seqlen_q, seqlen_k, wl, wr, hb, grid, lo, hi);
}

/* ratio 0: not packed (fa3_section_search). */
uint32_t fa3_section_search_gqa(const fa3_plan *p, int ratio, int seqlen_q, int seqlen_k, int wl,
                                int wr, uint32_t hb, unsigned grid, uint32_t lo, uint32_t hi)
{
    if (hb == 0)
        return 1;
    if (hi > hb)
        hi = hb;
    if (hi == 0)
        hi = 1;
    if (lo == 0)
        lo = 1;
    if (lo > hi)
        lo = hi;
    if (lo == hi || grid == 0 || seqlen_q <= 0)
        return hi;
    const int64_t rows = (int64_t)seqlen_q * (ratio > 0 ? ratio : 1); /* packed: q·ratio rows */
    const uint32_t M = (uint32_t)((rows + p->block_m - 1) / p->block_m);
    /* too many tiles to simulate two sizes within the step budget: the largest size */
    const uint64_t cap = MAX_SIM_STEPS / ((uint64_t)M * hb);
    if (cap < 2)
        return hi;
    int *blocks = malloc(sizeof *blocks * M);
    double *load = malloc(sizeof *load * grid);
    uint32_t best_s = hi;
    if (blocks && load) {
        for (uint32_t m = 0; m < M; m++)
            blocks[m] = ratio > 0 ? fa3_tile_range_packed(p->block_m, p->block_n,
                                                          (int)m * p->block_m, ratio, seqlen_q,
                                                          seqlen_k, wl, wr, NULL)
                                  : fa3_tile_range(p->block_m, p->block_n, (int)m * p->block_m,
                                                   seqlen_q, seqlen_k, wl, wr, NULL);
        uint32_t n = hi - lo + 1;
        if (n > MAX_CANDIDATES)
            n = MAX_CANDIDATES;
        if (n > cap)
            n = (uint32_t)cap;
        double ms[MAX_CANDIDATES], best = 0;
        uint32_t ss[MAX_CANDIDATES];
        for (uint32_t i = 0; i < n; i++) {
            /* spread evenly over [lo, hi], both ends included */
            ss[i] = lo + (uint32_t)((uint64_t)(hi - lo) * i / (n - 1));
            ms[i] = makespan(blocks, M, hb, ss[i], grid, TILE_COST, load);
            if (i == 0 || ms[i] < best)
                best = ms[i];
        }
        /* the smallest size within 0.3% of the best: smaller sections keep more of their K/V
           in L2 (hd128 causal 4096 lost 6% with 64 pairs instead of 33, both balanced) */
        for (uint32_t i = n; i-- > 0;)
            if (ms[i] <= best * EVEN_TOLERANCE)
                best_s = ss[i];
        if (p->whole_rounds)
            best_s = whole_round_size(blocks, M, hb, grid, lo, hi, cap - n, load, best, best_s);
    }
    free(blocks);
    free(load);
    return best_s;
}

/* (head, batch) pairs whose K/V fit the 32 MiB budget (of the 50 MiB L2: FlashAttention-3's),
   at least one KV head's (gqa query heads share a KV head); *kv_head: the bytes of one KV
   head's K/V. */
static uint64_t l2_pairs(const fa3_plan *p, int seqlen_k, int num_heads, int num_heads_k,
                         uint32_t hb_total, uint64_t *kv_head, uint64_t *gqa_out)
{
    const fa3_config *c = &p->cfg;
    const uint64_t budget = 32ull << 20;
    *kv_head = (uint64_t)(seqlen_k > 0 ? seqlen_k : 0) * (uint64_t)(c->head_dim + c->head_dim_v) *
               (uint64_t)p->elem_bytes;
    /* query heads per KV head (packed GQA: a pair is a KV head already) */
    const uint64_t gqa = c->pack_gqa || num_heads_k <= 0 || num_heads < num_heads_k
                             ? 1
                             : (uint64_t)(num_heads / num_heads_k);
    *gqa_out = gqa;
    /* at least one KV head's pairs, even where one KV head's K/V exceeds the budget */
    const uint64_t heads = *kv_head ? budget / *kv_head : 0;
    const uint64_t s = *kv_head ? (heads ? heads : 1) * gqa : hb_total;
    return s < 1 ? 1 : s;
}

void fa3_section_bounds(const fa3_plan *p, int seqlen_k, int num_heads, int num_heads_k,
                        uint32_t hb_total, unsigned grid, uint32_t *lo, uint32_t *hi)
{
    const uint64_t l2 = 50ull << 20;
    uint64_t kv_head, gqa;
    uint64_t s = l2_pairs(p, seqlen_k, num_heads, num_heads_k, hb_total, &kv_head, &gqa);
    const uint64_t div = p->l2_floor > 0 ? (uint64_t)p->l2_floor : 4; /* knob l2_floor (A/B) */
    const uint64_t floor_ = ((uint64_t)grid + div - 1) / div;
    if (s < floor_)
        s = floor_;
    uint64_t h = s;
    if (kv_head && (floor_ + gqa - 1) / gqa * kv_head > l2) /* KV heads of the floor's pairs */
        h = hb_total; /* no section fits L2: balance alone decides */
    *lo = floor_ < hb_total ? (uint32_t)floor_ : hb_total;
    *hi = h < hb_total ? (uint32_t)h : hb_total;
}

int fa3_dyn_section(const fa3_plan *p, int seqlen_k, int num_heads, int num_heads_k,
                    uint32_t hb_total, uint64_t tiles, unsigned grid, uint32_t *section)
{
    uint64_t kv_head, gqa;
    const uint64_t s = l2_pairs(p, seqlen_k, num_heads, num_heads_k, hb_total, &kv_head, &gqa);
    *section = s < hb_total ? (uint32_t)s : hb_total;
    if (!p->dyn_sched || p->dyn_sched == 3 || hb_total == 0)
        return 0;
    if (p->dyn_sched == 2)
        return 1;
    /* 1 (the default): where L2 alone cuts the pairs into sections of at most grid/8, which the
       static rounds cannot balance (their floor is grid/4), of at least one KV head (4 with
       late_claim=0), and there is more than one round of tiles. Same-run A/B on the H200 (session 12, calls 3-4, bf16,
       cuDNN in the run, 3 rounds rotated; dynamic with L2 sections / static, causal): hd64
       8192/16384 1.109/1.050 and 1.098/1.079, hd128 4096/8192/16384 1.045/1.068/1.044 and
       1.075/1.053/1.055, hd256 2048/4096 1.014/0.997 and 1.026/1.027, 8192 1.003/0.984; hd256
       16384 (2 KV heads a section) 0.995/0.964, and where L2 holds grid/4 pairs or more
       (seqlen <= 2048 at hd64/128) 0.96-1.01 (the counter's allocation and memset cost a few
       microseconds a call): there the static order stays. GQA: the 4 counts KV heads, as
       measured (untried with GQA). With the late claim (late_claim, plan.c) a section of fewer
       KV heads balances too: session 22 (H100 SXM, same run), the counter at hd256 causal
       16384 (2 KV heads a section) / the static order 1.056, so there one KV head is enough
       (s / gqa >= 1: sections of one KV head's K/V or more). One round (tiles <= grid): every CTA's only tile is
       ctaid.x, a counter would change nothing. */
    const uint64_t min_kv_heads = p->late_claim ? 1 : 4;
    return s < hb_total && s / gqa >= min_kv_heads && s * 8 <= grid && tiles > grid;
}

uint32_t fa3_choose_section_hb(fa3_kernel *k, const fa3_fwd_args *a, int wl, int wr,
                               uint32_t hb, unsigned grid, uint32_t lo, uint32_t hi)
{
    const int ratio = k->cfg.pack_gqa ? a->num_heads / a->num_heads_k : 0;
    pthread_mutex_lock(&k->mu);
    for (int i = 0; i < FA3_SECTION_MEMO; i++) {
        const fa3_section_memo *e = &k->section_memo[i];
        if (e->s && e->seqlen_q == a->seqlen_q && e->seqlen_k == a->seqlen_k && e->wl == wl &&
            e->wr == wr && e->hb == hb && e->grid == grid && e->lo == lo && e->hi == hi &&
            e->ratio == ratio) {
            uint32_t s = e->s;
            pthread_mutex_unlock(&k->mu);
            return s;
        }
    }
    pthread_mutex_unlock(&k->mu);
    uint32_t s = fa3_section_search_gqa(&k->plan, ratio, a->seqlen_q, a->seqlen_k, wl, wr, hb,
                                        grid, lo, hi);
    pthread_mutex_lock(&k->mu);
    fa3_section_memo *e = &k->section_memo[k->section_memo_next++ % FA3_SECTION_MEMO];
    *e = (fa3_section_memo){.seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k, .wl = wl, .wr = wr,
                            .hb = hb, .grid = grid, .lo = lo, .hi = hi, .s = s,
                            .ratio = ratio};
    pthread_mutex_unlock(&k->mu);
    return s;
}
