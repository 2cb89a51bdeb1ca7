/*
 * test_tune: fa3_fwd_tune, the library's choice of a call's shape-dependent config fields, on
 * hand-computed shapes (no GPU): split_kv where the query tiles leave the SMs idle and the keys
 * span several blocks (varlen: by max_seqlen_q/k), never for prefill or one key block; its errors (NULL, num_sms,
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

/* split_kv chosen for cfg (head_dim hd, mask m) and the shape, with 132 SMs */
static int split_for(int hd, fa3_mask m, int batch, int sq, int sk, int h, int hk)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.mask = m;
    c.split_kv = 7; /* overwritten */
    fa3_fwd_args a = shape(batch, sq, sk, h, hk);
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_true(c.split_kv == 0 || c.split_kv == 1);
    assert_int_equal(c.head_dim, hd); /* other fields as given */
    assert_int_equal(c.block_n, 0);
    return c.split_kv;
}

static void test_decode_shapes_split(void **state)
{
    (void)state;
    /* 1 x 64 heads x 1 m_block = 64 tiles < 0.8 x 132, 1024 key blocks: split */
    assert_int_equal(split_for(128, FA3_MASK_NONE, 1, 1, 131072, 64, 8), 1);
    assert_int_equal(split_for(128, FA3_MASK_CAUSAL, 1, 1, 131072, 64, 8), 1);
    /* 8 x 32 = 256 tiles fill the SMs: no split */
    assert_int_equal(split_for(128, FA3_MASK_NONE, 8, 4, 65536, 32, 8), 0);
    /* 105 tiles (< 105.6): split; 106: not */
    assert_int_equal(split_for(128, FA3_MASK_NONE, 105, 1, 4096, 1, 1), 1);
    assert_int_equal(split_for(128, FA3_MASK_NONE, 106, 1, 4096, 1, 1), 0);
    /* head_dim 64: 192-row tiles; seqlen_q 384 is 2 m_blocks: 2 x 40 heads = 80 tiles: split */
    assert_int_equal(split_for(64, FA3_MASK_NONE, 1, 384, 8192, 40, 40), 1);
    assert_int_equal(split_for(64, FA3_MASK_NONE, 1, 385, 8192, 40, 40), 0); /* 3 x 40 */
}

static void test_no_split(void **state)
{
    (void)state;
    /* prefill: 16 x 16 x 8 = 2048 tiles */
    assert_int_equal(split_for(128, FA3_MASK_CAUSAL, 16, 1024, 1024, 16, 16), 0);
    /* the keys fit one block_n block: nothing to split */
    assert_int_equal(split_for(128, FA3_MASK_NONE, 1, 1, 100, 8, 8), 0);
    /* empty shapes */
    assert_int_equal(split_for(128, FA3_MASK_NONE, 0, 1, 4096, 8, 8), 0);
    assert_int_equal(split_for(128, FA3_MASK_NONE, 1, 0, 4096, 8, 8), 0);
    assert_int_equal(split_for(128, FA3_MASK_NONE, 1, 1, 0, 8, 8), 0);
    /* varlen: by max_seqlen_q / max_seqlen_k (seqlen_q is total_q there) */
    fa3_config c;
    fa3_config_init(&c);
    c.varlen = 1;
    fa3_fwd_args a = shape(4, 4, 131072, 16, 8);
    a.max_seqlen_q = 1;
    a.max_seqlen_k = 30000; /* 4 x 16 tiles, 235 key blocks: split */
    assert_int_equal(fa3_fwd_tune(&c, &a, 132), FA3_OK);
    assert_int_equal(c.split_kv, 1);
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
    a = shape(8, 4, 65536, 32, 8); /* 256 tiles */
    assert_int_equal(fa3_fwd_tune(&c, &a, 1000), FA3_OK);
    assert_int_equal(c.split_kv, 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_shapes_split),
        cmocka_unit_test(test_no_split),
        cmocka_unit_test(test_errors_leave_cfg),
        cmocka_unit_test(test_older_struct_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
