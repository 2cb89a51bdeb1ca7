/*
 * test_o_stage: where the planner stages O for the TMA store, without a GPU. bf16/fp16 head_dim
 * 192/256 (one Q buffer, two consumers) stage it in the last key block's ring slots (o_stage 3,
 * plan ring_stage): each slot holds a warpgroup's 64 rows of O, 1024-byte aligned for the 128B
 * swizzle, and the PTX has the slot handshake (named barriers 7 and 8, 2 x 128 threads) and the
 * count-4 releases after the store. FA3JIT_PLAN_DEBUG=ring_stage=0 keeps the Q staging
 * (o_stage 2); e4m3 never stages in the ring; head_dim <= 128 keeps its own buffer (o_stage 1);
 * split-KV stores partials from registers (o_stage 0). The GPU checks are tools/gpu-run.sh's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "fa3jit.h"

/* The plan of (head_dim, head_dim_v, dtype, mask, kind bits: 1 varlen, 2 paged, 4 split) after
   canonicalization; 0 where the config is not supported. */
static int plan_of(int hd, int hdv, fa3_dtype dt, fa3_mask mask, int kind, fa3_plan *p)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.head_dim_v = hdv;
    c.dtype = dt;
    c.mask = mask;
    c.varlen = !!(kind & 1);
    c.paged_kv = !!(kind & 2);
    c.split_kv = !!(kind & 4);
    if (fa3_config_canonicalize(&c, &c) != FA3_OK)
        return 0;
    assert_int_equal(fa3_plan_make(&c, p), FA3_OK);
    return 1;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *at = strstr(s, what); at; at = strstr(at + 1, what))
        n++;
    return n;
}

static void test_ring_for_192_256(void **state)
{
    (void)state;
    static const int dims[][2] = {{192, 192}, {192, 128}, {256, 256}};
    int n = 0;
    for (int d = 0; d < 3; d++)
        for (int dt = FA3_DTYPE_BF16; dt <= FA3_DTYPE_FP16; dt++)
            for (int m = FA3_MASK_NONE; m <= FA3_MASK_LOCAL; m++)
                for (int kind = 0; kind < 4; kind++) {
                    fa3_plan p;
                    if (!plan_of(dims[d][0], dims[d][1], (fa3_dtype)dt, (fa3_mask)m, kind, &p))
                        continue;
                    n++;
                    assert_int_equal(p.q_bufs, 1);
                    assert_int_equal(p.num_consumer_wg, 2);
                    assert_int_equal(p.ring_stage, 1);
                    assert_int_equal(p.o_stage, 3);
                    /* each slot holds a warpgroup's staging: hdv_chunks boxes of 64 x 128 B */
                    assert_true(p.smem_k_stage >= p.hdv_chunks * 8192);
                    assert_true(p.smem_v_stage >= p.hdv_chunks * 8192);
                    for (int s = 0; s < p.stages; s++) {
                        assert_int_equal((p.smem_k + s * p.smem_k_stage) % 1024, 0);
                        assert_int_equal((p.smem_v + s * p.smem_v_stage) % 1024, 0);
                    }
                    char *ptx = NULL;
                    size_t len = 0;
                    assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
                    /* consumer 1 after its last QK, consumer 0 after its last PV; each syncs
                       on its own (7 + cw) before staging */
                    assert_true(count(ptx, "bar.arrive 7, 256;") >= 1);
                    assert_int_equal(count(ptx, "bar.arrive 8, 256;"), 1);
                    /* the slot's release after the store read it (TMA path) and after the
                       register stores (fallback), thread 0 for its warpgroup's four warps */
                    assert_true(count(ptx, "], 4;") >= 2);
                    free(ptx);
                }
    printf("  %d configs stage O in the ring\n", n);
    assert_true(n >= 3 * 2 * 3 * 2); /* at least dense and varlen of every dim, dtype, mask */
}

static void test_ring_stage_0_keeps_q(void **state)
{
    (void)state;
    assert_int_equal(setenv("FA3JIT_PLAN_DEBUG", "ring_stage=0", 1), 0);
    fa3_plan p;
    assert_true(plan_of(256, 256, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 0, &p));
    assert_int_equal(unsetenv("FA3JIT_PLAN_DEBUG"), 0);
    assert_int_equal(p.ring_stage, 0);
    assert_int_equal(p.o_stage, 2);
    char *ptx = NULL;
    size_t len = 0;
    assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
    assert_int_equal(count(ptx, "bar.arrive 7, 256;"), 0);
    assert_int_equal(count(ptx, "bar.arrive 8, 256;"), 0);
    free(ptx);
}

static void test_others(void **state)
{
    (void)state;
    fa3_plan p;
    /* e4m3: no ring staging (its consumers' V is the transposed stage) */
    if (plan_of(256, 256, FA3_DTYPE_E4M3, FA3_MASK_CAUSAL, 0, &p))
        assert_int_not_equal(p.o_stage, 3);
    /* head_dim <= 128: the staging's own buffer */
    for (int hd = 64; hd <= 128; hd *= 2) {
        assert_true(plan_of(hd, hd, FA3_DTYPE_BF16, FA3_MASK_NONE, 0, &p));
        assert_int_equal(p.o_stage, 1);
    }
    /* split-KV: fp32 partials from registers */
    assert_true(plan_of(256, 256, FA3_DTYPE_BF16, FA3_MASK_NONE, 4, &p));
    assert_int_equal(p.o_stage, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_for_192_256),
        cmocka_unit_test(test_ring_stage_0_keeps_q),
        cmocka_unit_test(test_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
