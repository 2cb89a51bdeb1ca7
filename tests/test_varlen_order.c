/*
 * test_varlen_order: the varlen tile order's host model (codegen/varlen_order.h), the order the
 * kernel's table gives.
 *   - for many random length sets (zero lengths, one sequence, 32 sequences, masked sequences
 *     beyond the table's 128 levels, batch beyond 32), the order decodes its tiles one-to-one
 *     onto the real (sequence, head, m_block) triples, and is longest first: non-masked, the
 *     sequences come by m_blocks descending; masked, the m_blocks descend;
 *   - where the table is invalid, the walk (today's order) is such a permutation too;
 *   - the simulated static balance (mean / busiest CTA, a tile costing its key blocks + 1) of the
 *     bench's lengths (bench/varlen.py, random_lengths(16384, 16, seed 7), 16 heads, hd128
 *     tiles 128 × 128, 132 CTAs), printed for the old order and the new: the new must not lose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/tile_order.h"
#include "codegen/varlen_order.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (uint32_t)(((uint64_t)(rng_state >> 8) * n) >> 24);
}

/* One order: decode every index below the real tile count, check the permutation; longest
   first when lpt. */
static void check_order(int masked, int use_table, uint32_t batch, uint32_t heads,
                        const uint32_t *nmb, int lpt)
{
    uint64_t real = 0;
    uint32_t off[64 + 1] = {0}; /* triple (b, h, m) -> bit off[b] + h·nmb[b] + m */
    for (uint32_t b = 0; b < batch; b++) {
        off[b + 1] = off[b] + heads * nmb[b];
        real += (uint64_t)heads * nmb[b];
    }
    fa3_vtab t;
    if (use_table) {
        fa3_vtab_build(&t, masked, batch, heads, nmb);
        assert_int_equal(t.valid, 1);
        assert_int_equal(t.total, real);
    }
    unsigned char *seen = calloc(real + 1, 1);
    assert_non_null(seen);
    uint32_t prev_len = UINT32_MAX, prev_m = UINT32_MAX, prev_b = UINT32_MAX;
    for (uint32_t tile = 0; tile < real; tile++) {
        uint32_t b = 0, h = 0, m = 0;
        const int ok = use_table ? fa3_vtab_decode(&t, masked, heads, tile, &b, &h, &m)
                                 : fa3_vwalk_decode(masked, batch, heads, nmb, tile, &b, &h, &m);
        assert_true(ok);
        assert_true(b < batch);
        assert_true(h < heads);
        assert_true(m < nmb[b]);
        const uint32_t bit = off[b] + h * nmb[b] + m;
        assert_int_equal(seen[bit], 0);
        seen[bit] = 1;
        if (lpt && !masked) { /* a sequence's tiles together, the sequences by length */
            if (b != prev_b) {
                assert_true(nmb[b] <= prev_len);
                prev_len = nmb[b];
                prev_b = b;
            }
        } else if (lpt) {
            assert_true(m <= prev_m);
            prev_m = m;
        }
    }
    uint32_t b, h, m;
    if (use_table)
        assert_false(fa3_vtab_decode(&t, masked, heads, (uint32_t)real, &b, &h, &m));
    else
        assert_false(fa3_vwalk_decode(masked, batch, heads, nmb, (uint32_t)real, &b, &h, &m));
    free(seen);
}

static void test_permutation(void **state)
{
    (void)state;
    for (int iter = 0; iter < 3000; iter++) {
        const int kind = iter % 6;
        uint32_t batch = kind == 0 ? 1 : kind == 1 ? 32 : kind == 2 ? 33 + rnd(20) : 1 + rnd(32);
        const uint32_t heads = 1 + rnd(iter % 3 ? 4 : 16);
        const uint32_t bm = iter % 2 ? 128 : 192;
        uint32_t nmb[64];
        for (uint32_t b = 0; b < batch; b++) {
            uint32_t len = rnd(4) == 0 ? 0 : rnd(kind == 3 ? 40000 : 4000);
            if (kind == 4 && b == 0) /* a length over the level cap */
                len = FA3_VT_LEVELS * bm + 1 + rnd(3 * bm);
            if (kind == 5 && rnd(2)) /* many equal lengths: ties */
                len = 700;
            nmb[b] = (len + bm - 1) / bm;
        }
        for (int masked = 0; masked < 2; masked++) {
            fa3_vtab t;
            fa3_vtab_build(&t, masked, batch, heads, nmb);
            uint32_t longest = 0;
            for (uint32_t b = 0; b < batch; b++)
                longest = nmb[b] > longest ? nmb[b] : longest;
            const int want = batch <= FA3_VT_BATCH && (!masked || longest <= FA3_VT_LEVELS);
            assert_int_equal(t.valid, want);
            if (want)
                check_order(masked, 1, batch, heads, nmb, 1);
            if (iter % 10 == 0 || !want)
                check_order(masked, 0, batch, heads, nmb, 0);
        }
    }
}

/* The bench's 16 lengths (bench/varlen.py random_lengths(16384, 16, 7)). */
static const int bench_lens[16] = {792, 159, 236, 356, 929, 2834, 686, 477,
                                   1845, 466, 769, 1116, 2791, 1449, 625, 854};

/* Mean / busiest CTA of the static rounds (CTA c: tiles c, c + G, ...; odd rounds reversed
   where the kernel reverses them), a tile costing its key blocks + 1. */
static double balance(int masked, int use_table, uint32_t heads, unsigned grid)
{
    const int bm = 128, bn = 128, n = 16;
    uint32_t nmb[16];
    for (int b = 0; b < n; b++)
        nmb[b] = (uint32_t)((bench_lens[b] + bm - 1) / bm);
    fa3_vtab t;
    fa3_vtab_build(&t, masked, n, heads, nmb);
    double load[256] = {0}, sum = 0, mx = 0;
    for (uint32_t r = 0;; r++) {
        int any = 0;
        for (unsigned c = 0; c < grid; c++) {
            /* the kernel reverses odd rounds for masked configs, and for all with the table */
            const uint32_t tile = fa3_tile_index(masked || use_table, r, c, grid);
            uint32_t b, h, m;
            const int ok = use_table ? fa3_vtab_decode(&t, masked, heads, tile, &b, &h, &m)
                                     : fa3_vwalk_decode(masked, n, heads, nmb, tile, &b, &h, &m);
            if (!ok)
                continue;
            any = 1;
            const int len = bench_lens[b];
            const double cost = 1 + fa3_tile_range(bm, bn, (int)m * bm, len, len, -1,
                                                   masked ? 0 : -1, NULL);
            load[c] += cost;
            sum += cost;
        }
        if (!any)
            break;
    }
    for (unsigned c = 0; c < grid; c++)
        mx = load[c] > mx ? load[c] : mx;
    return sum / grid / mx;
}

static void test_balance(void **state)
{
    (void)state;
    for (int masked = 0; masked < 2; masked++) {
        const double old = balance(masked, 0, 16, 132), lpt = balance(masked, 1, 16, 132);
        print_message("varlen order, bench lengths (seed 7), 16 heads, 132 CTAs, %s: balance "
                      "%.3f walk, %.3f longest first\n", masked ? "causal" : "non-causal", old,
                      lpt);
        assert_true(lpt >= old);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_permutation),
                                       cmocka_unit_test(test_balance)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
