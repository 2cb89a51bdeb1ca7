/*
 * test_tune: fa3_fwd_tune, the library's choice of a call's shape-dependent config fields, on
 * hand-computed shapes (no GPU): the decode family (pack_gqa 1, block_m 64, split_kv 1) for
 * issue 16's table and where FA3's pack rule pays or 64 rows fit one tile, not for a ratio not
 * dividing 64, GQA prefill or varlen; split_kv alone where the query tiles leave the SMs idle
 * and the keys span several blocks (varlen: by max_seqlen_q/k), never for prefill or one key
 * block; its errors (NULL, num_sms,
 * negative shapes, a bad config: cfg unchanged); fields past an older struct_size untouched.
 * The expected values follow fa3jit.h's rule with the planner's tiles (block_m 128, 192 at
 * head_dim 64; block_n from fa3_config_canonicalize).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "fa3jit.h"

static fa3_fwd_args shape(int batch, int seqlen_q, int seqlen_k, int num_heads, int num_heads_k)
{
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.batch = batch;
    a.seqlen_q = seqlen_q;
    a.seqlen_k = seqlen_k;
    a.num_heads = num_heads;
    a.num_heads_k = num_heads_k;
    return a;
}

/* the fields chosen for cfg (head_dim hd, mask m) and the shape, with 132 SMs, as a code:
   'd' the decode family (pack_gqa 1, block_m 64, split_kv 1), 's' split-KV alone, '1' one pass,
   'm' one pass with block_m 128 (head_dim 64's short causal/local tile) */
static char choice(int hd, fa3_mask m, int batch, int sq, int sk, int h, int hk)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.mask = m;
    c.split_kv = 7; /* overwritten */
    c.pack_gqa = 5;
    c.block_m = 32;
    fa3_fwd_args a = shape(batch, sq, sk, h, hk);
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.head_dim, hd); /* other fields as given */
    assert_int_equal(c.block_n, 0);
    if (c.pack_gqa) {
        assert_int_equal(c.pack_gqa, 1);
        assert_int_equal(c.block_m, 64);
        assert_int_equal(c.split_kv, 1);
        return 'd';
    }
    if (c.block_m == 128) {
        assert_int_equal(c.split_kv, 0);
        return 'm';
    }
    assert_int_equal(c.block_m, 0);
    assert_true(c.split_kv == 0 || c.split_kv == 1);
    return c.split_kv ? 's' : '1';
}

static void test_decode_shapes(void **state)
{
    (void)state;
    /* issue 16's table: every row the decode family */
    assert_int_equal(choice(128, FA3_MASK_NONE, 32, 1, 32768, 32, 8), 'd');
    assert_int_equal(choice(128, FA3_MASK_NONE, 128, 1, 4096, 32, 8), 'd');
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 8, 4, 65536, 32, 8), 'd');
    assert_int_equal(choice(128, FA3_MASK_NONE, 1, 1, 131072, 64, 8), 'd');
    assert_int_equal(choice(64, FA3_MASK_NONE, 64, 1, 8192, 16, 16), 'd'); /* ratio 1 */
    /* 64 query rows fit one decode tile; 65 without GQA do not */
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 2, 64, 4096, 8, 8), 'd');
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 2, 65, 4096, 8, 8), 's'); /* 16 tiles */
    /* FA3's rule: 100 rows use 0.78 of a 128-row tile, 800 packed 0.96 (> 0.78 / 0.9) */
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 8, 100, 4096, 64, 8), 'd');
    /* 120 rows (0.94) vs 960 packed (1.0): packing does not pay; 8 x 64 tiles fill the SMs */
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 8, 120, 4096, 64, 8), '1');
    /* a ratio not dividing 64 (3): the planner's tile, split where the tiles leave SMs idle */
    assert_int_equal(choice(128, FA3_MASK_NONE, 1, 1, 131072, 24, 8), 's');
    assert_int_equal(choice(128, FA3_MASK_NONE, 8, 100, 4096, 24, 8), '1');
}

static void test_split_only(void **state)
{
    (void)state;
    /* 105 tiles (< 105.6) of 65+ rows: split; 106: not */
    assert_int_equal(choice(128, FA3_MASK_NONE, 105, 65, 4096, 1, 1), 's');
    assert_int_equal(choice(128, FA3_MASK_NONE, 106, 65, 4096, 1, 1), '1');
    /* head_dim 64: 192-row tiles; seqlen_q 384 is 2 m_blocks: 2 x 40 heads = 80 tiles: split */
    assert_int_equal(choice(64, FA3_MASK_NONE, 1, 384, 8192, 40, 40), 's');
    assert_int_equal(choice(64, FA3_MASK_NONE, 1, 385, 8192, 40, 40), '1'); /* 3 x 40 */
    /* prefill: 16 x 16 x 8 = 2048 tiles; GQA prefill does not pack */
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 16, 1024, 1024, 16, 16), '1');
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 4, 4096, 4096, 32, 8), '1');
    /* the keys fit one block: no split (65 rows, so not the decode family) */
    assert_int_equal(choice(128, FA3_MASK_NONE, 1, 65, 100, 8, 8), '1');
    /* empty shapes */
    assert_int_equal(choice(128, FA3_MASK_NONE, 0, 100, 4096, 8, 8), '1');
    assert_int_equal(choice(128, FA3_MASK_NONE, 1, 0, 4096, 8, 8), '1');
    /* varlen: never the decode family (pack_gqa is rectangular); split by max_seqlen_q / _k */
    fa3_config c;
    fa3_config_init(&c);
    c.varlen = 1;
    fa3_fwd_args a = shape(4, 4, 131072, 16, 8);
    a.max_seqlen_q = 1;
    a.max_seqlen_k = 30000; /* 4 x 16 tiles, 235 key blocks: split */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 1);
    assert_int_equal(c.pack_gqa, 0);
    assert_int_equal(c.block_m, 0);
    a.max_seqlen_q = 1000; /* 4 x 16 x 8 tiles */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 0);
    a.max_seqlen_q = 1;
    a.max_seqlen_k = 100; /* one key block */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 0);
    a.max_seqlen_k = -1;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_ERR_BAD_SHAPE);
    /* many SMs make a split of a shape that fills 132 */
    fa3_config_init(&c);
    a = shape(8, 200, 65536, 32, 32); /* 512 tiles */
    assert_int_equal(fa3_fwd_tune(&c, &a, 1000), FA3_OK);
    assert_int_equal(c.split_kv, 1);
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 0);
}

/* head_dim 64 bf16/fp16 causal/local with seqlen_q and seqlen_k <= 1024, one pass: block_m 128 */
static void test_short_causal_tile(void **state)
{
    (void)state;
    /* the sweep's rows: batch x seqlen 16k, 32 heads */
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 32, 512, 512, 32, 32), 'm');
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 16, 1024, 1024, 32, 32), 'm');
    /* local with both windows unlimited: full attention, the planner's tile */
    assert_int_equal(choice(64, FA3_MASK_LOCAL, 16, 1024, 1024, 32, 32), '1');
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 16, 1024, 1025, 32, 32), '1');
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 8, 1025, 1024, 32, 32), '1');
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 8, 2048, 2048, 32, 32), '1');
    assert_int_equal(choice(64, FA3_MASK_NONE, 32, 512, 512, 32, 32), '1'); /* no mask */
    assert_int_equal(choice(128, FA3_MASK_CAUSAL, 32, 512, 512, 32, 32), '1'); /* 128 already */
    /* few tiles: split-KV with the planner's tile (2 x 4 x 1 = 8 tiles, 8 key blocks) */
    assert_int_equal(choice(64, FA3_MASK_CAUSAL, 2, 100, 1000, 4, 4), 's');
    /* e4m3 plans 128 rows already; head_dim_v 64 only; varlen by max_seqlen_q/_k */
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 64;
    c.mask = FA3_MASK_CAUSAL;
    c.dtype = FA3_DTYPE_E4M3;
    fa3_fwd_args a = shape(32, 512, 512, 32, 32);
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.block_m, 0);
    c.dtype = FA3_DTYPE_FP16;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.block_m, 128);
    /* local: a window on either side makes it a masked call */
    fa3_config l = c;
    l.mask = FA3_MASK_LOCAL;
    fa3_fwd_args w = a;
    w.window_size_left = 256;
    assert_int_equal(fa3_fwd_tune(&l, &w, 132), FA3_OK);
    assert_int_equal(l.block_m, 128);
    w.window_size_left = -1;
    w.window_size_right = 0;
    assert_int_equal(fa3_fwd_tune(&l, &w, 132), FA3_OK);
    assert_int_equal(l.block_m, 128);
    w.window_size_right = -1;
    assert_int_equal(fa3_fwd_tune(&l, &w, 132), FA3_OK);
    assert_int_equal(l.block_m, 0);
    c.varlen = 1;
    a.max_seqlen_q = 700;
    a.max_seqlen_k = 1024;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.block_m, 128);
    a.max_seqlen_k = 3000;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.block_m, 0);
    /* the chosen config is one the library lists and compiles */
    c.varlen = 0;
    a.max_seqlen_k = 1024;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    fa3_config canon;
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(canon.block_m, 128);
    char name[160];
    assert_int_equal(fa3_config_describe(&canon, name, sizeof name), FA3_OK);
    assert_non_null(strstr(name, " bm128"));
}

static void test_errors_leave_cfg(void **state)
{
    (void)state;
    fa3_config c, before;
    fa3_config_init(&c);
    fa3_fwd_args a = shape(1, 1, 131072, 64, 8);
    assert_int_equal(fa3_fwd_tune(NULL, &a, 132), FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(fa3_fwd_tune(&c, NULL, 132), FA3_ERR_INVALID_ARGUMENT);
    before = c;
    assert_int_equal(fa3_fwd_tune(&c, &a, 0), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "num_sms 0"));
    assert_int_equal(fa3_fwd_tune(&c, &a, -3), FA3_ERR_INVALID_ARGUMENT);
    a.seqlen_k = -5;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_ERR_BAD_SHAPE);
    assert_non_null(strstr(fa3_last_error_message(), "seqlen_k -5"));
    assert_memory_equal(&c, &before, sizeof c);
    a.seqlen_k = 4096;
    c.head_dim = 100;
    before = c;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_ERR_BAD_HEAD_DIM);
    assert_memory_equal(&c, &before, sizeof c);
}

static void test_args_rules(void **state)
{
    (void)state;
    fa3_config c;
    fa3_config_init(&c);
    /* fa3_fwd_args' struct_size rules, as fa3_fwd's */
    fa3_fwd_args a = shape(1, 1, 131072, 64, 8);
    a.struct_size = 3;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "struct_size"));
    a.struct_size = 0;
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_ERR_INVALID_ARGUMENT);
    /* the largest shapes: no overflow (the counts saturate), one pass or the decode family */
    a = shape(INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX);
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 0);
    a = shape(INT32_MAX, 65, INT32_MAX, INT32_MAX, INT32_MAX);
    assert_int_equal(fa3_fwd_tune(&c, &a, 65535), FA3_OK);
    assert_int_equal(c.split_kv, 0);
    a = shape(1, INT32_MAX, INT32_MAX, 64, 8); /* seqlen_q x 8 packed rows */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(fa3_fwd_tune(NULL, &a, 132), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "cfg is NULL"));
}

static void test_older_struct_size(void **state)
{
    (void)state;
    /* a caller compiled before split_kv existed: its struct ends before the field */
    fa3_config c;
    fa3_config_init(&c);
    c.struct_size = (uint32_t)offsetof(fa3_config, split_kv);
    c.split_kv = 42; /* not the caller's memory: must stay */
    fa3_fwd_args a = shape(1, 1, 131072, 64, 8);
    fa3_status st = fa3_fwd_tune(&c, &a, 132);
    if (st == FA3_OK)
        assert_int_equal(c.split_kv, 42);
    else
        assert_int_equal(st, FA3_ERR_INVALID_ARGUMENT); /* a struct_size this build refuses */
}

/* head_dim 256's short causal/local calls take 64-key blocks (the planner's 80 otherwise); the
   chosen config is a listed one, and every other choice leaves block_n 0 (the planner's) */
static int tuned_block_n(fa3_config c, int batch, int sq, int sk, int wl, int wr)
{
    fa3_fwd_args a = shape(batch, sq, sk, 8, 8);
    a.window_size_left = wl;
    a.window_size_right = wr;
    a.max_seqlen_q = sq;
    a.max_seqlen_k = sk;
    c.block_n = 48; /* overwritten */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    if (c.block_n == 64) { /* one pass, unpacked, the planner's rows */
        assert_int_equal(c.split_kv, 0);
        assert_int_equal(c.pack_gqa, 0);
        assert_int_equal(c.block_m, 0);
        fa3_config canon, list[4096];
        assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
        const int n = fa3_supported_configs(list, 4096);
        assert_in_range(n, 1, 4096);
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = memcmp(&list[i], &canon, sizeof canon) == 0;
        assert_true(found);
    }
    return c.block_n;
}

static void test_hd256_short_keys(void **state)
{
    (void)state;
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 256;
    c.mask = FA3_MASK_CAUSAL;
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 64);
    assert_int_equal(tuned_block_n(c, 16, 1024, 1024, -1, -1), 64);
    assert_int_equal(tuned_block_n(c, 8, 2048, 2048, -1, -1), 0);  /* long: the planner's 80 */
    assert_int_equal(tuned_block_n(c, 16, 1024, 1025, -1, -1), 0);
    assert_int_equal(tuned_block_n(c, 2, 100, 1000, -1, -1), 0);   /* split-KV (few tiles) */
    c.softcap = 1;
    c.dtype = FA3_DTYPE_FP16;
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 64);
    c.dtype = FA3_DTYPE_E4M3; /* plans its own tiles */
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 0);
    c.dtype = FA3_DTYPE_BF16;
    c.mask = FA3_MASK_LOCAL;
    assert_int_equal(tuned_block_n(c, 32, 512, 512, 128, 0), 64);
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 0);    /* no window: full */
    c.mask = FA3_MASK_NONE;
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 0);
    c.mask = FA3_MASK_CAUSAL;
    c.varlen = 1;
    assert_int_equal(tuned_block_n(c, 32, 700, 1024, -1, -1), 64);
    c.varlen = 0;
    c.head_dim = 192; /* not measured: the planner's */
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 0);
    c.head_dim = 128;
    assert_int_equal(tuned_block_n(c, 32, 512, 512, -1, -1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_shapes),
        cmocka_unit_test(test_split_only),
        cmocka_unit_test(test_short_causal_tile),
        cmocka_unit_test(test_hd256_short_keys),
        cmocka_unit_test(test_errors_leave_cfg),
        cmocka_unit_test(test_args_rules),
        cmocka_unit_test(test_older_struct_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
