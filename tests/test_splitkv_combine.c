/*
 * test_splitkv_combine: split-KV's combine kernel alone (FA3_KERNEL_COMBINE, launched through
 * fa3_combine_launch), against an fp64 host merge of random fp32 partials (fresh each run: the
 * seed is printed, FA3JIT_TEST_SEED repeats it). Per row: lse = m + ln Σ exp(LSE_s - m),
 * O = Σ exp(LSE_s - lse)·O_s in the output dtype at strided O (padding columns between heads must
 * stay untouched), LSE to its array. Rows mix: every split -inf (O = 0, LSE = -inf, exactly), one
 * finite split, random -inf splits, LSE values around ±80 (no overflow without the max). Cases:
 * a single split, 4, 33 (past one lane's LSE), 128 splits; bf16 and fp16; head_dim_v 64, 96,
 * 128, 192, 256; rectangular and varlen rows, the varlen rows at or past cu_seqlens_q[batch]
 * (E17) and an empty sequence; LSE NULL. O and LSE are pre-filled with NaN. Skips without an
 * sm_90 device. Environment: FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER (gpu_util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "check.h"
#include "combine_ref.h"

static int g_skipped;
static fa3_context *g_ctx;
static uint64_t g_seed;

typedef struct combine_case {
    const char *id;
    int head_dim_v;
    fa3_dtype dtype; /* the output dtype: bf16 or fp16 */
    int varlen;
    int num_splits;
    int batch, num_heads, seqlen_q; /* varlen: seqlen_q = total_q */
    const int32_t *cu_seqlens_q;    /* varlen: batch + 1 entries (host) */
    int with_lse;
    int all_empty; /* every row sees no key */
    double lse_center, lse_spread; /* LSE_s uniform in center ± spread */
} combine_case;

/* The row's splits: pattern by row number (every split -inf, one finite split, random -inf
   splits with probability 1/4). */
static void fill_row(host_rng *r, const combine_case *c, int row, float *lse_s, int ns)
{
    const int kind = c->all_empty ? 0 : row % 5;
    const int only = (int)(rng_uniform(r) * ns) % ns;
    for (int s = 0; s < ns; s++) {
        double v = c->lse_center + c->lse_spread * (2 * rng_uniform(r) - 1);
        if (kind == 0 || (kind == 1 && s != only) || (kind >= 2 && rng_uniform(r) < 0.25))
            v = -INFINITY;
        lse_s[s] = (float)v;
    }
}

static void run_case(const combine_case *c)
{
    const int hdv = c->head_dim_v, ns = c->num_splits, H = c->num_heads, sq = c->seqlen_q;
    const int rows = c->varlen ? H * sq : c->batch * H * sq;
    host_rng rng;
    rng_init(&rng, g_seed ^ (uint64_t)(hdv * 131 + ns * 7 + c->varlen) * 0x9E3779B97F4A7C15ull);
    printf("%s: hdv %d %s%s, %d splits, %d rows\n", c->id, hdv,
           c->dtype == FA3_DTYPE_FP16 ? "fp16" : "bf16", c->varlen ? " varlen" : "", ns, rows);

    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = cfg.head_dim_v = hdv;
    cfg.dtype = c->dtype;
    cfg.varlen = c->varlen;
    cfg.split_kv = 1;
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &k));

    /* partials */
    const size_t no = (size_t)ns * rows * hdv, nl = (size_t)ns * rows;
    float *op = malloc(no * sizeof *op), *lp = malloc(nl * sizeof *lp), *row_l = malloc(ns * 4);
    assert_true(op && lp && row_l);
    for (int row = 0; row < rows; row++) {
        fill_row(&rng, c, row, row_l, ns);
        for (int s = 0; s < ns; s++) {
            lp[(size_t)s * rows + row] = row_l[s];
            for (int j = 0; j < hdv; j++) /* a split with no key writes O_s = 0 */
                op[((size_t)s * rows + row) * hdv + j] =
                    isinf(row_l[s]) ? 0.0f : (float)rng_normal(&rng);
        }
    }
    /* O: (batch, seqlen_q, heads, hdv) or (total_q, heads, hdv), 6 padding columns per head */
    const int64_t hs = hdv + 6, rs = (int64_t)H * hs, bs = c->varlen ? 0 : (int64_t)sq * rs;
    const size_t o_elems = (size_t)(c->varlen ? 1 : c->batch) * (size_t)sq * (size_t)rs;
    CUdeviceptr d_op = gpu_alloc(no * 4), d_lp = gpu_alloc(nl * 4);
    CUdeviceptr d_o = gpu_alloc(o_elems * 2), d_lse = gpu_alloc((size_t)rows * 4), d_cu = 0;
    gpu_upload(d_op, op, no * 4);
    gpu_upload(d_lp, lp, nl * 4);
    gpu_fill_nan16(d_o, o_elems, c->dtype);
    gpu_fill_nan32(d_lse, (size_t)rows);
    if (c->varlen) {
        d_cu = gpu_alloc((size_t)(c->batch + 1) * 4);
        gpu_upload(d_cu, c->cu_seqlens_q, (size_t)(c->batch + 1) * 4);
    }
    const fa3_combine_call call = {
        .o_partial = (const float *)(uintptr_t)d_op, .lse_partial = (const float *)(uintptr_t)d_lp,
        .o = (void *)(uintptr_t)d_o, .lse = c->with_lse ? (float *)(uintptr_t)d_lse : NULL,
        .o_batch_stride = bs, .o_row_stride = rs, .o_head_stride = hs,
        .cu_seqlens_q = (const int32_t *)(uintptr_t)d_cu, .num_splits = ns, .rows = rows,
        .seqlen_q = sq, .num_heads = H, .batch = c->batch};
    CHECK(fa3_combine_launch(k, &call, NULL));
    gpu_sync();
    uint16_t *o = malloc(o_elems * 2);
    float *lse = malloc((size_t)rows * 4);
    assert_true(o && lse);
    gpu_download(o, d_o, o_elems * 2);
    gpu_download(lse, d_lse, (size_t)rows * 4);

    /* the host merge, in fp64, and the comparison */
    long bad = 0, checked = 0, untouched = 0;
    double worst = 0;
    unsigned char *seen = calloc(o_elems, 1);
    assert_non_null(seen);
    const int end = c->varlen ? c->cu_seqlens_q[c->batch] : sq;
    for (int row = 0; row < rows; row++) {
        const int hb = row / sq, i = row % sq; /* varlen: head, packed row */
        const int h = c->varlen ? hb : hb % H, b = c->varlen ? 0 : hb / H;
        const size_t base = (size_t)((int64_t)b * bs + (int64_t)i * rs + (int64_t)h * hs);
        for (int j = 0; j < hdv; j++)
            seen[base + (size_t)j] = 1;
        if (c->varlen && i >= end) { /* E17: not written */
            for (int j = 0; j < hdv; j++)
                if (!isnan(dtype_to_f32(c->dtype, o[base + (size_t)j])) && bad++ < 5)
                    printf("  row %d (packed %d >= %d) col %d written: %g\n", row, i, end, j,
                           (double)dtype_to_f32(c->dtype, o[base + (size_t)j]));
            if (c->with_lse && !isnan(lse[row]) && bad++ < 5)
                printf("  row %d (packed %d >= %d): LSE written: %g\n", row, i, end,
                       (double)lse[row]);
            untouched++;
            continue;
        }
        const double ref_lse = combine_ref_lse(lp, ns, rows, row);
        const double m = ref_lse; /* -inf exactly when every split is */
        if (c->with_lse) {
            const double d = fabs((double)lse[row] - ref_lse);
            const int ok = m == -INFINITY ? (isinf(lse[row]) && lse[row] < 0)
                                          : d <= 4e-6 * (1 + fabs(ref_lse));
            if (!ok && bad++ < 5)
                printf("  row %d: LSE %.9g, expected %.9g\n", row, (double)lse[row], ref_lse);
        }
        for (int j = 0; j < hdv; j++) {
            double mag;
            const double ref = combine_ref_o(op, lp, ns, rows, hdv, row, j, ref_lse, &mag);
            const double got = dtype_to_f32(c->dtype, o[base + (size_t)j]);
            const double err = fabs(got - ref), tol = combine_tol(c->dtype, ref, mag);
            checked++;
            if (!(err <= tol) && bad++ < 5)
                printf("  row %d col %d: O %.7g, expected %.7g (tolerance %.3g)\n", row, j, got,
                       ref, tol);
            if (m == -INFINITY && got != 0 && bad++ < 5)
                printf("  row %d col %d: no split saw a key, O %g (expected 0)\n", row, j, got);
            if (tol > 0 && err / tol > worst)
                worst = err / tol;
        }
    }
    for (size_t e = 0; e < o_elems; e++) /* padding columns: never written */
        if (!seen[e] && !isnan(dtype_to_f32(c->dtype, o[e])) && bad++ < 5)
            printf("  O element %zu (padding) written: %g\n", e,
                   (double)dtype_to_f32(c->dtype, o[e]));
    printf("  %ld values checked, worst error %.2f of the tolerance, %ld rows untouched, %ld bad\n",
           checked, worst, untouched, bad);
    free(seen);
    free(o);
    free(lse);
    free(op);
    free(lp);
    free(row_l);
    gpu_free(d_op);
    gpu_free(d_lp);
    gpu_free(d_o);
    gpu_free(d_lse);
    gpu_free(d_cu);
    if (bad)
        fail_msg("%s: %ld mismatches", c->id, bad);
}

static void test_rectangular(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const combine_case cs[] = {
        {"rect hdv128 bf16 4 splits", 128, FA3_DTYPE_BF16, 0, 4, 2, 3, 5, NULL, 1, 0, 2, 6},
        {"rect hdv64 fp16 1 split, no LSE", 64, FA3_DTYPE_FP16, 0, 1, 3, 2, 7, NULL, 0, 0, 0, 3},
        {"rect hdv256 bf16 128 splits", 256, FA3_DTYPE_BF16, 0, 128, 1, 2, 3, NULL, 1, 0, 5, 10},
        {"rect hdv96 fp16 33 splits, LSE ~ 80", 96, FA3_DTYPE_FP16, 0, 33, 2, 2, 9, NULL, 1, 0, 80,
         30},
        {"rect hdv192 bf16 LSE ~ -80", 192, FA3_DTYPE_BF16, 0, 6, 1, 4, 11, NULL, 1, 0, -80, 30},
        {"rect hdv128 fp16 every split -inf", 128, FA3_DTYPE_FP16, 0, 5, 2, 2, 3, NULL, 1, 1, 0,
         1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

static void test_varlen_rows(void **state)
{
    (void)state;
    REQUIRE_GPU();
    /* 3 sequences over 20 packed rows, the second empty, rows 15..19 past the last (E17) */
    static const int32_t cu3[] = {0, 7, 7, 15};
    static const int32_t cu1[] = {0, 4};
    static const combine_case cs[] = {
        {"varlen hdv96 fp16 9 splits", 96, FA3_DTYPE_FP16, 1, 9, 3, 4, 20, cu3, 1, 0, 1, 8},
        {"varlen hdv192 bf16 33 splits", 192, FA3_DTYPE_BF16, 1, 33, 3, 2, 20, cu3, 1, 0, 3, 5},
        {"varlen hdv256 fp16 128 splits", 256, FA3_DTYPE_FP16, 1, 128, 1, 3, 6, cu1, 1, 0, 0, 4},
        {"varlen hdv64 bf16 1 split, no LSE", 64, FA3_DTYPE_BF16, 1, 1, 3, 5, 20, cu3, 0, 0, 0,
         2},
        {"varlen hdv128 bf16 every split -inf", 128, FA3_DTYPE_BF16, 1, 3, 3, 2, 20, cu3, 1, 1, 0,
         1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

/* The launch's own checks (no kernel run). */
static void test_launch_checks(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fa3_config cfg;
    fa3_config_init(&cfg);
    fa3_kernel *plain, *split;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &plain));
    cfg.split_kv = 1;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &split));
    fa3_combine_call c = {.o_partial = (const float *)(uintptr_t)0x100000,
                          .lse_partial = (const float *)(uintptr_t)0x200000,
                          .o = (void *)(uintptr_t)0x300000, .num_splits = 2, .rows = 6,
                          .seqlen_q = 3, .num_heads = 2, .batch = 1, .o_row_stride = 256,
                          .o_head_stride = 128};
    assert_int_equal(fa3_combine_launch(plain, &c, NULL), FA3_ERR_INVALID_ARGUMENT);
    printf("  %s\n", fa3_last_error_message());
    c.num_splits = 129;
    assert_int_equal(fa3_combine_launch(split, &c, NULL), FA3_ERR_BAD_SHAPE);
    printf("  %s\n", fa3_last_error_message());
    c.num_splits = 2;
    c.rows = 7;
    assert_int_equal(fa3_combine_launch(split, &c, NULL), FA3_ERR_BAD_SHAPE);
    printf("  %s\n", fa3_last_error_message());
    c.rows = 6;
    c.o_partial = (const float *)(uintptr_t)0x100008;
    assert_int_equal(fa3_combine_launch(split, &c, NULL), FA3_ERR_BAD_ALIGNMENT);
    printf("  %s\n", fa3_last_error_message());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rectangular),
        cmocka_unit_test(test_varlen_rows),
        cmocka_unit_test(test_launch_checks),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_splitkv_combine", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
