/*
 * test_block_m64_plan: config block_m without a GPU. The refusals (a value that is neither 0, 64,
 * 128 nor the planner's own, named with the planner's value), the canonical form (the planner's
 * 128/192 kept, 64 kept, describe's " bm64" for 64 and " bm128" for head_dim 64's two-consumer
 * tile, nothing for the planner's value), that tile's plan (two consumers, the wg3=0 kernel), the
 * supported list's block_m 64 and 128 entries, and the plan and PTX of every listed block_m 64 config: one consumer warpgroup, 256
 * threads, the register split (consumer 256, producer 24-56, within the launch's 256 a thread),
 * the deeper K/V ring, no ping-pong named barrier, setmaxnreg in the PTX. ptxas's view (0 spills)
 * is test_ptxas's.
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

static fa3_config cfg_of(int hd, int hdv, fa3_dtype dt, int block_m)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.head_dim_v = hdv;
    c.dtype = dt;
    c.block_m = block_m;
    return c;
}

/* canonicalize refuses c with FA3_ERR_BAD_BLOCK, a message naming block_m, its value and the
   planner's (planned), and leaves out untouched */
static void expect_refused(const fa3_config *c, int planned)
{
    fa3_config out;
    memset(&out, 0xA5, sizeof out);
    const fa3_config before = out;
    const fa3_status st = fa3_config_canonicalize(c, &out);
    const char *msg = fa3_last_error_message();
    printf("  block_m %d (hd %d, %s): %s\n", c->block_m, c->head_dim,
           c->dtype == FA3_DTYPE_E4M3 ? "e4m3" : "16-bit", msg);
    assert_int_equal(st, FA3_ERR_BAD_BLOCK);
    assert_memory_equal(&out, &before, sizeof out);
    char want[64];
    snprintf(want, sizeof want, "block_m %d is invalid", c->block_m);
    assert_non_null(strstr(msg, want));
    snprintf(want, sizeof want, "%d here", planned);
    assert_non_null(strstr(msg, want));
    char *ptx = (char *)0x1; /* every entry point taking a config refuses it alike */
    assert_int_equal(fa3_emit_ptx(c, &ptx, NULL), FA3_ERR_BAD_BLOCK);
    assert_ptr_equal(ptx, (char *)0x1);
}

static void test_refusals(void **state)
{
    (void)state;
    static const int bad[] = {32, 96, 1, -64, 256, 65, 4096};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa3_config c = cfg_of(128, 0, FA3_DTYPE_BF16, bad[i]);
        expect_refused(&c, 128);
    }
    /* the other planner's value is not this config's */
    fa3_config c = cfg_of(128, 0, FA3_DTYPE_BF16, 192);
    expect_refused(&c, 128);
    c = cfg_of(64, 0, FA3_DTYPE_BF16, 96); /* hd64 16-bit: three consumers */
    expect_refused(&c, 192);
    c = cfg_of(64, 0, FA3_DTYPE_E4M3, 192); /* e4m3: two */
    expect_refused(&c, 128);
    c = cfg_of(64, 0, FA3_DTYPE_BF16, 192); /* block_n 192 at hd64: two consumers (spills) */
    c.block_n = 192;
    expect_refused(&c, 128);
    c.block_m = 128;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    assert_int_equal(c.block_m, 128);
}

/* block_m 128 at head_dim 64 bf16/fp16 (the planner's 192): two consumers, its own kernel
   (" bm128"); where 128 is the planner's (e4m3 hd64, hd128) it is the planner's kernel. */
static void test_two_consumer_hd64(void **state)
{
    (void)state;
    for (int dt = 0; dt < 2; dt++) {
        fa3_config c = cfg_of(64, 0, (fa3_dtype)dt, 128), zero = cfg_of(64, 0, (fa3_dtype)dt, 0);
        c.mask = zero.mask = FA3_MASK_CAUSAL;
        fa3_config a, b;
        assert_int_equal(fa3_config_canonicalize(&c, &a), FA3_OK);
        assert_int_equal(fa3_config_canonicalize(&zero, &b), FA3_OK);
        assert_int_equal(a.block_m, 128);
        assert_int_equal(b.block_m, 192);
        assert_false(fa3_config_equal(&a, &b));
        char da[128], db[128];
        assert_int_equal(fa3_config_describe(&a, da, sizeof da), FA3_OK);
        assert_int_equal(fa3_config_describe(&b, db, sizeof db), FA3_OK);
        printf("  %-40s | %s\n", db, da);
        assert_true(!strcmp(da + strlen(da) - 6, " bm128"));
        assert_null(strstr(db, "bm"));
        fa3_plan p, q;
        assert_int_equal(fa3_plan_make(&a, &p), FA3_OK);
        assert_int_equal(fa3_plan_make(&b, &q), FA3_OK);
        assert_int_equal(p.num_consumer_wg, 2);
        assert_int_equal(p.block_m, 128);
        assert_int_equal(p.threads, 384);
        assert_int_equal(p.consumer_regs, 240);
        assert_int_equal(q.num_consumer_wg, 3);
        assert_int_equal(p.block_n, q.block_n);
        /* the same kernel as the planner's tile under the wg3=0 knob (the A/B's variant) */
        char *ptx = NULL, *ptx_knob = NULL;
        size_t len = 0, len_knob = 0;
        assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
        setenv("FA3JIT_PLAN_DEBUG", "wg3=0", 1);
        assert_int_equal(fa3_plan_make(&b, &q), FA3_OK);
        unsetenv("FA3JIT_PLAN_DEBUG");
        assert_int_equal(q.num_consumer_wg, 2);
        assert_int_equal(fa3_codegen_ptx(&q, &ptx_knob, &len_knob), FA3_OK);
        /* line for line, past the header's comment lines (the config, the knob) */
        const char *x = ptx, *y = ptx_knob;
        while (!strncmp(x, "//", 2) || *x == '\n')
            x = strchr(x, '\n') + 1;
        while (!strncmp(y, "//", 2) || *y == '\n')
            y = strchr(y, '\n') + 1;
        assert_string_equal(x, y);
        assert_non_null(strstr(ptx, ".maxntid 384, 1, 1"));
        assert_non_null(strstr(ptx, "bar.arrive")); /* the ping-pong */
        free(ptx);
        free(ptx_knob);
    }
    /* the planner's own 128: the same kernel as block_m 0 */
    fa3_config e = cfg_of(64, 0, FA3_DTYPE_E4M3, 128), e0 = cfg_of(64, 0, FA3_DTYPE_E4M3, 0);
    assert_int_equal(fa3_config_canonicalize(&e, &e), FA3_OK);
    assert_int_equal(fa3_config_canonicalize(&e0, &e0), FA3_OK);
    assert_true(fa3_config_equal(&e, &e0));
}

static void test_canonical(void **state)
{
    (void)state;
    static const struct { int hd, hdv; fa3_dtype dt; int planned; } pl[] = {
        {64, 0, FA3_DTYPE_BF16, 192}, {64, 0, FA3_DTYPE_FP16, 192}, {64, 0, FA3_DTYPE_E4M3, 128},
        {96, 0, FA3_DTYPE_BF16, 128}, {128, 0, FA3_DTYPE_BF16, 128},
        {192, 128, FA3_DTYPE_BF16, 128}, {256, 0, FA3_DTYPE_E4M3, 128}};
    for (size_t i = 0; i < sizeof pl / sizeof pl[0]; i++) {
        fa3_config zero = cfg_of(pl[i].hd, pl[i].hdv, pl[i].dt, 0), a, b, m64;
        assert_int_equal(fa3_config_canonicalize(&zero, &a), FA3_OK);
        assert_int_equal(a.block_m, pl[i].planned); /* canonical: the planner's value */
        fa3_config expl = zero;
        expl.block_m = pl[i].planned; /* given explicitly: the same kernel */
        assert_int_equal(fa3_config_canonicalize(&expl, &b), FA3_OK);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(fa3_config_canonicalize(&a, &b), FA3_OK); /* idempotent */
        assert_memory_equal(&a, &b, sizeof a);
        char da[128], d64[128];
        assert_int_equal(fa3_config_describe(&a, da, sizeof da), FA3_OK);
        assert_null(strstr(da, "bm"));
        fa3_config c64 = zero;
        c64.block_m = 64;
        assert_int_equal(fa3_config_canonicalize(&c64, &m64), FA3_OK);
        assert_int_equal(m64.block_m, 64);
        assert_int_equal(m64.block_n, a.block_n); /* the planner's block_n is unchanged */
        assert_true(m64.stages >= a.stages);      /* the ring only gets deeper */
        assert_int_equal(fa3_config_describe(&m64, d64, sizeof d64), FA3_OK);
        printf("  %-40s | %s\n", da, d64);
        assert_true(strlen(d64) > 5 && !strcmp(d64 + strlen(d64) - 5, " bm64"));
    }
    /* an explicit stages count is kept with block_m 64 */
    fa3_config c = cfg_of(128, 0, FA3_DTYPE_BF16, 64);
    c.stages = 2;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    assert_int_equal(c.stages, 2);
    /* and block_n: the ring depth follows it (hd128 bn64: 32 KB a stage, 4 fit) */
    c = cfg_of(128, 0, FA3_DTYPE_BF16, 64);
    c.block_n = 64;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    assert_int_equal(c.stages, 4);
}

/* The stages the planner gives block_m 64 (plan.c, fa3_plan_default_tiles). */
static int expected_stages(const fa3_config *c)
{
    if (c->dtype == FA3_DTYPE_E4M3) /* (192, 128): a 40 KB stage of 64 keys */
        return c->head_dim > 128 ? (c->head_dim_v == 128 ? 4 : 3) : 2;
    return c->head_dim == 64 ? 4 : c->head_dim <= 128 ? 3 : 2;
}

static void test_listed_plans(void **state)
{
    (void)state;
    const int n = fa3_supported_configs(NULL, 0);
    assert_true(n > 0);
    fa3_config *all = calloc((size_t)n, sizeof *all);
    assert_non_null(all);
    assert_int_equal(fa3_supported_configs(all, n), n);
    int n64 = 0, n64_split = 0, n64_paged = 0, n128 = 0;
    for (int i = 0; i < n; i++) {
        const fa3_config *c = &all[i];
        if (c->block_m == 128 && c->head_dim == 64 && c->dtype != FA3_DTYPE_E4M3) {
            n128++; /* head_dim 64's two-consumer tile: causal/local, one pass, not packed */
            assert_int_equal(c->head_dim_v, 64);
            assert_int_not_equal(c->mask, FA3_MASK_NONE);
            assert_int_equal(c->split_kv, 0);
            assert_int_equal(c->pack_gqa, 0);
            continue;
        }
        if (c->block_m != 64) {
            assert_true(c->block_m == 128 || c->block_m == 192);
            continue;
        }
        n64++;
        n64_split += c->split_kv;
        n64_paged += c->paged_kv;
        assert_int_equal(c->varlen, 0); /* listed for rectangular Q only */
        fa3_plan p;
        assert_int_equal(fa3_plan_make(c, &p), FA3_OK);
        assert_int_equal(p.block_m, 64);
        assert_int_equal(p.num_consumer_wg, 1);
        assert_int_equal(p.threads, 256);
        assert_int_equal(p.entry_regs, 256);
        assert_int_equal(p.consumer_regs, 256);
        const int fp8 = c->dtype == FA3_DTYPE_E4M3;
        assert_int_equal(p.producer_regs, (fp8 ? 40 : 24) + 8 * c->paged_kv);
        assert_true(128L * p.producer_regs + 128L * p.consumer_regs <= 256L * p.entry_regs);
        assert_int_equal(p.bar_release_count, 4);
        assert_int_equal(p.stages, expected_stages(c));
        assert_true(p.smem_bytes <= 232448);
        assert_int_equal(p.smem_q_buf, p.hd_chunks * 64 * 128);
        if (c->split_kv)
            assert_int_equal(p.o_stage, 0);
        /* the PTX: 256 threads, the split, no ping-pong barrier (named barriers of 256 threads) */
        char *ptx = NULL;
        size_t len = 0;
        assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
        assert_non_null(strstr(ptx, ".maxntid 256, 1, 1"));
        assert_non_null(strstr(ptx, "setmaxnreg.inc.sync.aligned.u32 256;"));
        char dec[64];
        snprintf(dec, sizeof dec, "setmaxnreg.dec.sync.aligned.u32 %d;", p.producer_regs);
        assert_non_null(strstr(ptx, dec));
        assert_null(strstr(ptx, "bar.arrive"));
        for (const char *b = strstr(ptx, "bar.sync"); b; b = strstr(b + 1, "bar.sync")) {
            const char *nl = strchr(b, '\n'); /* bar.sync 0 (the CTA), epilogue ..., 128 */
            assert_true(!strncmp(b, "bar.sync 0;", 11) || (nl && !strncmp(nl - 5, " 128;", 5)));
        }
        assert_non_null(strstr(ptx, " bm64\n"));
        free(ptx);
    }
    printf("  %d configs listed, %d with block_m 64 (%d split, %d paged), %d with head_dim 64's "
           "block_m 128\n", n, n64, n64_split, n64_paged, n128);
    /* bf16/fp16 x causal/local x softcap x dense/varlen/paged/both */
    assert_int_equal(n128, 32);
    /* the decode family: 6 head-dim pairs x 3 dtypes x 3 masks x softcap x paged, split-KV and
       packed GQA */
    assert_int_equal(n64, 216);
    assert_int_equal(n64_split, 216);
    assert_int_equal(n64_paged, 108);
    free(all);
}

/* The two-consumer kernel keeps its ping-pong (the test above can tell them apart). */
static void test_pingpong_kept(void **state)
{
    (void)state;
    fa3_config c = cfg_of(128, 0, FA3_DTYPE_BF16, 0);
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    fa3_plan p;
    assert_int_equal(fa3_plan_make(&c, &p), FA3_OK);
    assert_int_equal(p.num_consumer_wg, 2);
    char *ptx = NULL;
    size_t len = 0;
    assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
    assert_non_null(strstr(ptx, "bar.arrive"));
    assert_non_null(strstr(ptx, "bar.sync 1, 256;"));
    assert_non_null(strstr(ptx, ".maxntid 384, 1, 1"));
    free(ptx);
}

/* varlen with block_m 64: made by the generator (not listed), one consumer as well. */
static void test_varlen_plan(void **state)
{
    (void)state;
    for (int dt = 0; dt < 3; dt++) {
        fa3_config c = cfg_of(128, 0, (fa3_dtype)dt, 64);
        c.varlen = 1;
        c.mask = FA3_MASK_CAUSAL;
        assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
        fa3_plan p;
        assert_int_equal(fa3_plan_make(&c, &p), FA3_OK);
        assert_int_equal(p.threads, 256);
        assert_int_equal(p.producer_regs, dt == FA3_DTYPE_E4M3 ? 48 : 24);
        assert_true(p.smem_vtab > 0); /* the longest-first table fits beside the deeper ring */
        char *ptx = NULL;
        size_t len = 0;
        assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
        free(ptx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_two_consumer_hd64),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_listed_plans),
        cmocka_unit_test(test_pingpong_kept),
        cmocka_unit_test(test_varlen_plan),
    };
    return cmocka_run_group_tests_name("block-m64-plan", tests, NULL, NULL);
}
