/*
 * Section size of the masked tile order (runtime/schedule.c): the choice must lie in [lo, hi]
 * and give static rounds no less even than any other size in the range. The loads are
 * recomputed here the long way (per CTA: its tiles round by round, each tile's key blocks from
 * its rows' visible keys), not with schedule.c's code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "codegen/knobs.h"
#include "runtime/runtime.h"

/* Busiest CTA / mean, tile cost = key blocks holding a visible key of some row + 1.5. */
static double imbalance(int bm, int bn, int sq, int sk, int causal, uint32_t hb, unsigned grid,
                        uint32_t s)
{
    const int M = (sq + bm - 1) / bm;
    const long ntiles = (long)M * hb;
    double *load = calloc(grid, sizeof *load), total = 0;
    for (unsigned cta = 0; cta < grid; cta++) {
        for (long round = 0;; round++) {
            long t = round * grid + ((round & 1) ? grid - 1 - cta : cta);
            if (round * grid >= ntiles)
                break;
            if (t >= ntiles)
                continue;
            /* section of s pairs; inside it pairs fastest, m_block from the last row block down */
            long sec = t / ((long)s * M), first = sec * s, w = t - first * M;
            long pairs = (long)hb - first < (long)s ? (long)hb - first : (long)s;
            int m = M - 1 - (int)(w / pairs);
            int blocks = 0;
            for (int n = 0; n * bn < sk; n++) { /* a block counts if any row sees any of its keys */
                int seen = 0;
                for (int i = m * bm; i < m * bm + bm && !seen; i++)
                    seen = !causal || n * bn <= i + sk - sq;
                blocks += seen;
            }
            load[cta] += blocks + 1.5;
        }
        total += load[cta];
    }
    double mx = 0;
    for (unsigned i = 0; i < grid; i++)
        mx = load[i] > mx ? load[i] : mx;
    free(load);
    return mx / (total / grid);
}

static fa3_plan plan_for(int head_dim)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = c.head_dim_v = head_dim;
    c.mask = FA3_MASK_CAUSAL;
    fa3_config canon;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    fa3_plan p;
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    return p;
}

/* The case ncu found (hd128 causal seqlen 1024, 16 heads × 16 batch on 132 SMs: SMs idle 21%
   of the kernel with 64 pairs per section): the choice is in range and as even as the best. */
static void test_section_search_balances(void **state)
{
    (void)state;
    static const struct { int hd, sq; uint32_t hb, lo, hi; } cases[] = {
        {128, 1024, 256, 33, 64}, {64, 1024, 512, 33, 128}, {256, 1024, 128, 33, 33},
        {128, 2048, 128, 33, 33}, {64, 8192, 64, 33, 64}, {256, 1000, 40, 33, 40},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fa3_plan p = plan_for(cases[k].hd);
        uint32_t s = fa3_section_search(&p, cases[k].sq, cases[k].sq, -1, 0, cases[k].hb, 132,
                                        cases[k].lo, cases[k].hi);
        assert_in_range(s, cases[k].lo, cases[k].hi);
        double got = imbalance(p.block_m, p.block_n, cases[k].sq, cases[k].sq, 1, cases[k].hb, 132,
                               s);
        double best = 1e9;
        for (uint32_t t = cases[k].lo; t <= cases[k].hi; t++) {
            double v = imbalance(p.block_m, p.block_n, cases[k].sq, cases[k].sq, 1, cases[k].hb,
                                 132, t);
            best = v < best ? v : best;
        }
        printf("  hd%d sq %d hb %u: section %u, busiest CTA %.3f x mean (best in [%u, %u]: "
               "%.3f)\n", cases[k].hd, cases[k].sq, cases[k].hb, s, got, cases[k].lo,
               cases[k].hi, best);
        assert_true(got <= best * 1.01);
    }
    /* the measured case must leave the 1.19x of 64 pairs behind */
    fa3_plan p = plan_for(128);
    uint32_t s = fa3_section_search(&p, 1024, 1024, -1, 0, 256, 132, 33, 64);
    assert_true(imbalance(128, 128, 1024, 1024, 1, 256, 132, s) < 1.05);
    assert_true(imbalance(128, 128, 1024, 1024, 1, 256, 132, 64) > 1.10);
}

/* whole_rounds (the default since session 35): hd128 causal seqlen 512, 32 batch x 16 heads on
   132 SMs (the ncu shape: 202 MB read with 66 pairs, 247 with 77): a size whose 4 x size tiles
   fill whole rounds (66: the 77 of the plain search, whole_rounds=0, does not), as even as the
   best in range; the other cases keep a size in range and as even. */
static void test_section_search_whole_rounds(void **state)
{
    (void)state;
    fa3_plan p = plan_for(128);
    assert_int_equal(p.whole_rounds, 1); /* the planner's default */
    p.whole_rounds = 0;
    const uint32_t plain = fa3_section_search(&p, 512, 512, -1, 0, 512, 132, 33, 128);
    printf("  whole_rounds=0: hd128 causal 512, 512 pairs: section %u\n", plain);
    assert_int_not_equal(4 * plain % 132, 0); /* the plain search mixes sections in a round */
    p.whole_rounds = 1;
    uint32_t s = fa3_section_search(&p, 512, 512, -1, 0, 512, 132, 33, 128);
    printf("  whole_rounds: hd128 causal 512, 512 pairs: section %u\n", s);
    assert_int_equal(s, 66);
    assert_int_equal(4 * s % 132, 0);
    double best = 1e9;
    for (uint32_t t = 33; t <= 128; t++) {
        double v = imbalance(128, 128, 512, 512, 1, 512, 132, t);
        best = v < best ? v : best;
    }
    assert_true(imbalance(128, 128, 512, 512, 1, 512, 132, s) <= best * 1.01);
    /* where no whole-round size is as even (hd128 causal 1024: 33 is one round), the same */
    uint32_t s2 = fa3_section_search(&p, 1024, 1024, -1, 0, 256, 132, 33, 64);
    p.whole_rounds = 0;
    assert_int_equal(s2, fa3_section_search(&p, 1024, 1024, -1, 0, 256, 132, 33, 64));
}

/* Degenerate ranges and shapes answer hi without simulating. */
static void test_section_search_edges(void **state)
{
    (void)state;
    fa3_plan p = plan_for(128);
    assert_int_equal(fa3_section_search(&p, 1024, 1024, -1, 0, 256, 132, 40, 40), 40);
    assert_int_equal(fa3_section_search(&p, 1024, 1024, -1, 0, 30, 132, 33, 64), 30);
    assert_int_equal(fa3_section_search(&p, 0, 1024, -1, 0, 256, 132, 33, 64), 64);
    assert_int_equal(fa3_section_search(&p, 1024, 1024, -1, 0, 256, 0, 33, 64), 64);
    /* more tiles than the step budget simulates for two sizes: the largest, at once */
    assert_int_equal(fa3_section_search(&p, 1, 1, -1, 0, 1u << 20, 132, 33, 1u << 20), 1u << 20);
    assert_int_equal(fa3_section_search(&p, 2000000000, 2000000000, -1, 0, 4, 132, 1, 4), 4);
    /* lo 0 is taken as 1 (a size of 0 would divide by zero); no pairs still give a size >= 1 */
    uint32_t s = fa3_section_search(&p, 1, 1, -1, 0, 5, 132, 0, 5);
    assert_in_range(s, 1, 5);
    assert_int_equal(fa3_section_search(&p, 1024, 1024, -1, 0, 0, 132, 0, 0), 1);
}

/* fa3_section_bounds on 132 SMs gives [lo, hi]. */
static void expect_bounds(const fa3_plan *p, int seqlen_k, int num_heads, int num_heads_k,
                          uint32_t hb_total, uint32_t lo, uint32_t hi)
{
    uint32_t l = 0, h = 0;
    fa3_section_bounds(p, seqlen_k, num_heads, num_heads_k, hb_total, 132, &l, &h);
    assert_int_equal(l, lo);
    assert_int_equal(h, hi);
}

/* The range fwd.c searches (fa3_section_bounds): K/V within 32 MiB, at least grid / 4 pairs, all
   pairs when that floor's K/V overflows L2; the knob l2_floor moves the floor. The byte counts
   are written out here: seqlen_k x (head_dim + head_dim_v) x 2 bytes a KV head. */
static void test_section_bounds(void **state)
{
    (void)state;
    fa3_plan p = plan_for(64);
    /* hd64 causal 8192: 2 MiB a head, 16 fit 32 MiB; the floor 33 holds 66 MiB > L2: up to all */
    expect_bounds(&p, 8192, 32, 32, 64, 33, 64);
    /* l2_floor=8: floor 17 (34 MiB, fits L2): exactly 17 */
    assert_int_equal(fa3_knobs_parse("l2_floor=8", &p, NULL, 0), 0);
    expect_bounds(&p, 8192, 32, 32, 64, 17, 17);
    /* l2_floor=16: floor 9, the 32 MiB budget 16 */
    assert_int_equal(fa3_knobs_parse("l2_floor=16", &p, NULL, 0), 0);
    expect_bounds(&p, 8192, 32, 32, 64, 9, 16);
    /* fewer pairs than the floor: both clipped to them */
    expect_bounds(&p, 8192, 32, 32, 5, 5, 5);
    /* hd128 causal 1024 (0.5 MiB a head): budget 64 pairs, floor 33 */
    p = plan_for(128);
    expect_bounds(&p, 1024, 16, 16, 256, 33, 64);
    /* GQA 4: a KV head serves 4 pairs: 4 MiB a head at 8192, 8 heads = 32 pairs fit the budget,
       floor 33 pairs = 9 KV heads = 36 MiB, within L2: hi 33 */
    expect_bounds(&p, 8192, 32, 8, 256, 33, 33);
    /* no keys: no bytes, all pairs */
    expect_bounds(&p, 0, 16, 16, 100, 33, 100);
}

/* fa3_dyn_section on 132 SMs (16 heads, no GQA, unless said): whether a launch of tiles tiles
   takes the counter, and its section (pairs of at most grid/8, at least one KV head's). */
static void expect_dyn_gqa(const fa3_plan *p, int seqlen_k, int heads_k, uint32_t hb_total,
                           uint64_t tiles, int dyn, uint32_t sec)
{
    uint32_t s = 0;
    assert_int_equal(fa3_dyn_section(p, seqlen_k, 16, heads_k, hb_total, tiles, 132, &s), dyn);
    assert_int_equal(s, sec);
}

static void expect_dyn(const fa3_plan *p, int seqlen_k, uint32_t hb_total, int dyn, uint32_t sec)
{
    expect_dyn_gqa(p, seqlen_k, 16, hb_total, 100000, dyn, sec);
}

/* The runtime's choice of the dynamic scheduler (dyn_sched 1: L2 cuts the pairs into sections
   of at most grid/8 pairs, at least one KV head (4 with late_claim=0), more than one round of
   tiles), and the knob's
   other values. Bytes a KV head: seqlen_k x 2·head_dim x 2. */
static void test_dyn_section(void **state)
{
    (void)state;
    fa3_plan p = plan_for(128);
    assert_int_equal(p.dyn_sched, 1); /* the planner's choice for masked bf16 */
    expect_dyn(&p, 16384, 16, 1, 4);   /* 8 MiB a head: 4 pairs */
    expect_dyn(&p, 4096, 64, 1, 16);   /* 2 MiB: 16 = 132/8 */
    expect_dyn(&p, 2048, 128, 0, 32);  /* 1 MiB: 32 pairs, the static rounds balance */
    expect_dyn(&p, 4096, 8, 0, 8);     /* all 8 pairs fit L2: no section to cut */
    expect_dyn(&p, 4096, 3, 0, 3);
    expect_dyn_gqa(&p, 16384, 16, 16, 132, 0, 4); /* one round of tiles: nothing to balance */
    expect_dyn_gqa(&p, 16384, 16, 16, 133, 1, 4);
    /* GQA 8: 4 KV heads fit, 32 query pairs: over grid/8 */
    expect_dyn_gqa(&p, 16384, 2, 64, 100000, 0, 32);
    p = plan_for(256);
    expect_dyn(&p, 16384, 8, 1, 2);    /* 16 MiB: 2 pairs, one KV head is enough (late claim) */
    expect_dyn(&p, 8192, 16, 1, 4);
    expect_dyn(&p, 40000, 8, 1, 1);    /* 39 MiB a KV head: sections of one pair */
    assert_int_equal(fa3_knobs_parse("late_claim=0", &p, NULL, 0), 0);
    expect_dyn(&p, 16384, 8, 0, 2);    /* the early claim: 4 KV heads (it lost at 2) */
    expect_dyn(&p, 8192, 16, 1, 4);
    assert_int_equal(fa3_knobs_parse("late_claim=1", &p, NULL, 0), 0);
    expect_dyn_gqa(&p, 16384, 2, 16, 100000, 0, 16); /* GQA 8: all 16 pairs fit, no cut */
    expect_dyn_gqa(&p, 16384, 2, 64, 100000, 1, 16); /* GQA 8, 64 pairs: 2 KV heads a section */
    expect_dyn_gqa(&p, 40000, 8, 64, 100000, 1, 2);  /* GQA 2, 39 MiB a KV head: one KV head */
    assert_int_equal(fa3_knobs_parse("dyn_sched=2", &p, NULL, 0), 0);
    expect_dyn(&p, 16384, 8, 1, 2);    /* 2: the counter always */
    expect_dyn_gqa(&p, 16384, 16, 8, 8, 1, 2);
    assert_int_equal(fa3_knobs_parse("dyn_sched=3", &p, NULL, 0), 0);
    expect_dyn(&p, 8192, 16, 0, 4);    /* 3: never */
    assert_int_equal(fa3_knobs_parse("dyn_sched=0", &p, NULL, 0), 0);
    expect_dyn(&p, 8192, 16, 0, 4);
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = c.head_dim_v = 128; /* no mask: the planner leaves it off */
    fa3_config canon;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    assert_int_equal(p.dyn_sched, 0);
    assert_int_equal(p.smem_tile, 0);
}

/* fa3_tail_choose: the benchmark sweep's non-causal shapes on 132 SMs, and the edges. */
static void test_tail_choose(void **state)
{
    (void)state;
    fa3_tail_plan t;
    const double pc128 = fa3_tail_piece_cost(128, 128, 128), pc256 = fa3_tail_piece_cost(256, 256, 80);
    const double pc64 = fa3_tail_piece_cost(64, 64, 128);
    assert_true(pc128 > 0.02 && pc128 < 0.03); /* 64 KiB of partials against a 1.7 us key block */
    assert_true(pc256 > pc128);
    assert_true(fa3_tail_piece_cost(0, 128, 128) == 0);
    /* hd128 16k: 2048 tiles of 128 key blocks, 15 whole rounds and 68 tiles */
    assert_int_equal(fa3_tail_choose(2048, 128, 132, pc128, 0, &t), 1);
    assert_int_equal(t.full_tiles, 1980);
    assert_int_equal(t.tail_tiles, 68);
    /* few pieces: the partials' trip weighs (k = 13 measured a third of the model's gain) */
    assert_true(t.splits >= 3 && t.splits <= 7);
    /* its pieces take fewer than one whole tile's time: ceil(68 k / 132) · ceil(128 / k) < 128 */
    assert_true((68 * t.splits + 131) / 132 * ((128 + t.splits - 1) / t.splits) < 128 - 8);
    const int chunk = (128 + t.splits - 1) / t.splits; /* no piece without key blocks */
    assert_int_equal((128 + chunk - 1) / chunk, t.splits);
    /* without the partials' cost more pieces win (the first model's k = 13 or so) */
    fa3_tail_plan t0;
    assert_int_equal(fa3_tail_choose(2048, 128, 132, 0, 0, &t0), 1);
    assert_true(t0.splits >= t.splits);
    /* hd128 8k splits, 4096 not (32 key blocks: the model's gain is under 0.5%); forced it does */
    assert_int_equal(fa3_tail_choose(2048, 64, 132, pc128, 0, &t), 1);
    assert_int_equal(fa3_tail_choose(2048, 32, 132, pc128, 0, &t), 0);
    assert_int_equal(t.splits, 0);
    assert_int_equal(fa3_tail_choose(2048, 32, 132, pc128, 1, &t), 1);
    assert_int_equal(t.full_tiles + t.tail_tiles, 2048);
    /* hd256 (block_n 80): 16k splits (1024 tiles of 205 blocks), 8k not (measured 1.000) */
    assert_int_equal(fa3_tail_choose(1024, 205, 132, pc256, 0, &t), 1);
    assert_int_equal(t.full_tiles, 924);
    assert_int_equal(t.tail_tiles, 100);
    assert_int_equal(fa3_tail_choose(1024, 103, 132, pc256, 0, &t), 0);
    /* hd64 16k (block_m 192: 2752 tiles, the last round 85% full): not (measured 1.000) */
    assert_int_equal(fa3_tail_choose(2752, 128, 132, pc64, 0, &t), 0);
    /* whole rounds, one round or less, one key block, no grid: never, even forced */
    assert_int_equal(fa3_tail_choose(264, 128, 132, pc128, 1, &t), 0);
    assert_int_equal(fa3_tail_choose(132, 128, 132, pc128, 1, &t), 0);
    assert_int_equal(fa3_tail_choose(100, 128, 132, pc128, 1, &t), 0);
    assert_int_equal(fa3_tail_choose(200, 1, 132, pc128, 1, &t), 0);
    assert_int_equal(fa3_tail_choose(200, 128, 0, pc128, 1, &t), 0);
    /* the tail's rows: hd128 16k, 16 heads: m_blocks 60..127 of the last head */
    uint64_t r0, r1;
    fa3_tail_plan rp = {1980, 68, 5};
    assert_int_equal(fa3_tail_rows(&rp, 16384, 128, 16, &r0, &r1), 1);
    assert_true(r0 == 15ull * 16384 + 60 * 128 && r1 == 16ull * 16384 && r1 - r0 == 68 * 128);
    /* seqlen_q 300 (3 m_blocks, the last of 44 rows), 6 pairs: from pair 5's second m_block */
    rp = (fa3_tail_plan){16, 2, 3};
    assert_int_equal(fa3_tail_rows(&rp, 300, 128, 6, &r0, &r1), 1);
    assert_true(r0 == 5 * 300 + 128 && r1 == 1800 && r1 - r0 == 128 + 44);
    /* from a pair's first row (a batch boundary at 3 heads) */
    rp = (fa3_tail_plan){9, 9, 2};
    assert_int_equal(fa3_tail_rows(&rp, 300, 128, 6, &r0, &r1), 1);
    assert_true(r0 == 900 && r1 == 1800);
    /* tiles that are not this launch's, no splits, rows past 32 bits: none */
    rp = (fa3_tail_plan){16, 3, 3};
    assert_int_equal(fa3_tail_rows(&rp, 300, 128, 6, &r0, &r1), 0);
    assert_true(r0 == 0 && r1 == 0);
    rp = (fa3_tail_plan){16, 2, 0};
    assert_int_equal(fa3_tail_rows(&rp, 300, 128, 6, &r0, &r1), 0);
    rp = (fa3_tail_plan){(1u << 25) - 1, 1, 2}; /* 4096 pairs of 2^20 rows: 2^32 rows */
    assert_int_equal(fa3_tail_rows(&rp, 1 << 20, 128, 4096, &r0, &r1), 0);
    rp = (fa3_tail_plan){(1u << 21) - 1, 1, 2}; /* 256 pairs of 2^20 rows: 2^28, fine */
    assert_int_equal(fa3_tail_rows(&rp, 1 << 20, 128, 256, &r0, &r1), 1);
    /* the plan: on for non-masked dense 16-bit configs, off for the others */
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = c.head_dim_v = 128;
    fa3_config canon;
    fa3_plan p;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    assert_int_equal(p.tail_split, 1);
    c.mask = FA3_MASK_CAUSAL;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    assert_int_equal(p.tail_split, 0);
    c.mask = FA3_MASK_NONE;
    c.split_kv = 1;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    assert_int_equal(p.tail_split, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_section_search_balances),
        cmocka_unit_test(test_section_search_edges),
        cmocka_unit_test(test_section_search_whole_rounds),
        cmocka_unit_test(test_section_bounds),
        cmocka_unit_test(test_dyn_section),
        cmocka_unit_test(test_tail_choose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
