/*
 * test_pack_gqa_args: packed GQA's host side without a GPU (fa3jit.h fa3_config.pack_gqa):
 *   - the config flag pack_gqa (0/1, 2 and -1 refused naming it, varlen 1 refused, " packgqa" in
 *     fa3_config_describe, the supported list's pack_gqa entries: split_kv 1, varlen 0 only);
 *   - fa3_fwd_validate on kernels without code: the tile count batch · num_heads_k ·
 *     ceil(seqlen_q · ratio / block_m), a ratio that does not divide block_m refused naming
 *     num_heads, num_heads_k and block_m (hd128: 128, hd64: 192), seqlen_q · ratio past the
 *     32-bit packed rows refused;
 *   - the split-KV partials' layout unchanged (rows batch · num_heads · seqlen_q) and the
 *     num_splits heuristic fed the packed tile count;
 *   - the L2 section search over packed tiles (fa3_section_search_gqa): ratio 1 equals the
 *     unpacked search, and a packed causal shape lands in its [lo, hi].
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/tile_order.h"
#include "runtime/runtime.h"
#include "fake_kernel.h"

/* A bf16 kernel of head_dim hd with the given flags, without code; fake_free() it. */
static fa3_kernel *fake_kernel(int hd, int split, int paged, fa3_mask mask)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.split_kv = split;
    c.paged_kv = paged;
    c.mask = mask;
    c.pack_gqa = 1;
    return fake_kernel_of(&c);
}

#define ADDR(n) FAKE_ADDR(n)

static fa3_fwd_args args_for(int hd, int batch, int sq, int sk, int h, int hk)
{
    return fake_args(hd, batch, sq, sk, h, hk);
}

static void test_config_flag(void **state)
{
    (void)state;
    fa3_config c, out;
    fa3_config_init(&c);
    assert_int_equal(c.pack_gqa, 0);
    c.pack_gqa = 2;
    expect(fa3_config_canonicalize(&c, &out), FA3_ERR_INVALID_ARGUMENT, "pack_gqa", "2", NULL);
    c.pack_gqa = -1;
    expect(fa3_config_canonicalize(&c, &out), FA3_ERR_INVALID_ARGUMENT, "pack_gqa", "-1", NULL);
    c.pack_gqa = 1;
    c.varlen = 1;
    expect(fa3_config_canonicalize(&c, &out), FA3_ERR_INVALID_ARGUMENT, "pack_gqa", "varlen",
           NULL);
    c.varlen = 0;
    for (int split = 0; split <= 1; split++)
        for (int paged = 0; paged <= 1; paged++) {
            c.split_kv = split;
            c.paged_kv = paged;
            assert_int_equal(fa3_config_canonicalize(&c, &out), FA3_OK);
            assert_int_equal(out.pack_gqa, 1);
            char buf[128];
            assert_int_equal(fa3_config_describe(&out, buf, sizeof buf), FA3_OK);
            printf("  %s\n", buf);
            assert_true(strlen(buf) > 8 && !strcmp(buf + strlen(buf) - 8, " packgqa"));
        }
    c.pack_gqa = 0;
    char buf[128];
    assert_int_equal(fa3_config_describe(&c, buf, sizeof buf), FA3_OK);
    assert_null(strstr(buf, "packgqa"));
}

static void test_supported_list(void **state)
{
    (void)state;
    const int n = fa3_supported_configs(NULL, 0);
    fa3_config *all = calloc((size_t)n, sizeof *all);
    assert_non_null(all);
    assert_int_equal(fa3_supported_configs(all, n), n);
    int packed = 0, packed_paged = 0, per_dtype[3] = {0};
    for (int i = 0; i < n; i++) {
        if (!all[i].pack_gqa)
            continue;
        packed++;
        packed_paged += all[i].paged_kv;
        assert_int_equal(all[i].split_kv, 1);
        assert_int_equal(all[i].varlen, 0);
        per_dtype[all[i].dtype]++;
    }
    printf("  %d supported configs, %d packed (%d paged)\n", n, packed, packed_paged);
    assert_int_equal(packed, 216);
    assert_int_equal(packed_paged, 108);
    for (int d = 0; d < 3; d++)
        assert_int_equal(per_dtype[d], 72);
    free(all);
}

static void test_tiles_and_ratio(void **state)
{
    (void)state;
    fa3_kernel *k = fake_kernel(128, 1, 0, FA3_MASK_NONE); /* block_m 128 */
    fa3_kernel *k64 = fake_kernel(64, 0, 0, FA3_MASK_CAUSAL); /* block_m 192 */
    assert_int_equal(k->plan.block_m, 128);
    assert_int_equal(k64->plan.block_m, 192);
    static const struct {
        int batch, sq, h, hk;
        uint32_t tiles128;
    } cases[] = {
        {32, 1, 32, 8, 32 * 8 * 1},     /* ratio 4: 4 packed rows of 128 */
        {8, 4, 32, 8, 8 * 8 * 1},       /* 16 rows */
        {8, 100, 32, 8, 8 * 8 * 4},     /* 400 rows: 4 tiles */
        {2, 300, 32, 1, 2 * 1 * 75},    /* MQA ratio 32: 9600 rows */
        {3, 77, 16, 16, 3 * 16 * 1},    /* ratio 1 = unpacked */
        {1, 1, 64, 8, 8},               /* ratio 8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fa3_fwd_args a = args_for(128, cases[i].batch, cases[i].sq, 1000, cases[i].h,
                                  cases[i].hk);
        uint32_t tiles = 0;
        fa3_status vs = fake_validate(k, &a, &tiles);
        if (vs != FA3_OK)
            fail_msg("case %zu: %s", i, fa3_last_error_message());
        printf("  batch %d seqlen_q %d heads %d/%d: %u tiles\n", cases[i].batch, cases[i].sq,
               cases[i].h, cases[i].hk, tiles);
        assert_int_equal(tiles, cases[i].tiles128);
    }
    /* ratios that do not divide block_m: named with both head counts and block_m */
    fa3_fwd_args a = args_for(128, 2, 4, 1000, 24, 8); /* ratio 3 */
    expect(fake_validate(k, &a, NULL), FA3_ERR_BAD_SHAPE, "num_heads 24", "num_heads_k 8",
           "block_m 128", "pack_gqa", NULL);
    a = args_for(128, 2, 4, 1000, 256, 1); /* ratio 256 > block_m */
    expect(fake_validate(k, &a, NULL), FA3_ERR_BAD_SHAPE, "num_heads 256", "num_heads_k 1",
           "block_m 128", NULL);
    /* hd64 (block_m 192): ratio 3 divides it, 5 does not */
    a = args_for(64, 2, 4, 1000, 24, 8);
    assert_int_equal(fake_validate(k64, &a, NULL), FA3_OK);
    a = args_for(64, 2, 4, 1000, 40, 8); /* ratio 5 */
    expect(fake_validate(k64, &a, NULL), FA3_ERR_BAD_SHAPE, "num_heads 40", "num_heads_k 8",
           "block_m 192", NULL);
    uint32_t tiles = 0;
    a = args_for(64, 1, 100, 1000, 48, 8); /* ratio 6: 600 rows, 4 tiles of 192 */
    assert_int_equal(fake_validate(k64, &a, &tiles), FA3_OK);
    assert_int_equal(tiles, 8 * 4);
    /* the packed rows stay in 32 bits */
    a = args_for(128, 1, 20000000, 1000, 128, 1); /* 2.56e9 rows */
    expect(fake_validate(k, &a, NULL), FA3_ERR_BAD_SHAPE, "seqlen_q 20000000", "128", "2^31", NULL);
    fake_free(k);
    fake_free(k64);
}

static void test_split_layout(void **state)
{
    (void)state;
    fa3_kernel *k = fake_kernel(128, 1, 0, FA3_MASK_CAUSAL);
    fa3_fwd_args a = args_for(128, 4, 2, 8192, 32, 8);
    a.num_splits = 5;
    uint32_t tiles = 0;
    assert_int_equal(fake_validate(k, &a, &tiles), FA3_OK);
    assert_int_equal(tiles, 4 * 8);
    fa3_split_info si;
    assert_int_equal(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_OK);
    assert_int_equal(si.num_splits, 5);
    /* the partials are indexed as the LSE output: batch · num_heads · seqlen_q rows */
    assert_int_equal(si.layout.rows, 4 * 32 * 2);
    /* the library's choice sees the 32 packed tiles (not 128 per-head ones) */
    a.num_splits = 0;
    assert_int_equal(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_OK);
    printf("  32 packed tiles, 64 key blocks, 132 SMs: %d splits\n", si.num_splits);
    assert_int_equal(si.num_splits, fa3_split_heuristic(32, 64, 132));
    assert_true(si.num_splits > 1);
    fake_free(k);
}

static void test_sections(void **state)
{
    (void)state;
    fa3_kernel *k = fake_kernel(128, 0, 0, FA3_MASK_CAUSAL);
    /* ratio 1: the unpacked search exactly */
    for (int sq = 128; sq <= 4096; sq *= 2)
        assert_int_equal(fa3_section_search_gqa(&k->plan, 1, sq, sq, -1, 0, 256, 132, 33, 64),
                         fa3_section_search(&k->plan, sq, sq, -1, 0, 256, 132, 33, 64));
    /* packed: 8 kv heads x 16 batch of ceil(1024 · 4 / 128) = 32 tiles each */
    uint32_t s = fa3_section_search_gqa(&k->plan, 4, 1024, 1024, -1, 0, 128, 132, 33, 128);
    printf("  packed causal 1024, ratio 4, 128 pairs: section of %u pairs\n", s);
    assert_true(s >= 33 && s <= 128);
    /* the packed range: tile m of ratio 4 holds query rows 32m .. 32m + 31 */
    int nmin = -1;
    const int n = fa3_tile_range_packed(128, 128, 128, 4, 1024, 1024, -1, 0, &nmin);
    assert_int_equal(nmin, 0);
    assert_int_equal(n, 1); /* rows 32..63 see keys 0..63: one block */
    assert_int_equal(fa3_tile_range_packed(128, 128, 128 * 31, 4, 1024, 1024, -1, 0, NULL), 8);
    /* local window 16/0: rows 992..1023 see keys 976..1023 */
    assert_int_equal(fa3_tile_range_packed(128, 128, 128 * 31, 4, 1024, 1024, 16, 0, &nmin), 1);
    assert_int_equal(nmin, 7);
    fake_free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_flag),
        cmocka_unit_test(test_supported_list),
        cmocka_unit_test(test_tiles_and_ratio),
        cmocka_unit_test(test_split_layout),
        cmocka_unit_test(test_sections),
    };
    return cmocka_run_group_tests_name("pack_gqa_args", tests, NULL, NULL);
}
