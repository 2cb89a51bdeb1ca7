/*
 * test_splitkv_fwd: split-KV end to end through the public API (fa3jit.h "Split-KV"): fa3_fwd of
 * a split_kv = 1 config (the forward kernel into fp32 partials, then the combine kernel) against
 * the library's reference (tools/common/tolerance.h's rule), on fresh random inputs (the seed is
 * printed), NaN-prefilled O and LSE: decode shapes (one query row, thousands of keys, GQA) and a
 * causal one; num_splits 0 (the library's choice), 1, 5 and 128 (many splits without a key
 * block: -inf partials); the workspace allocated by the library (stream-ordered) and given by
 * the caller (fa3_fwd_workspace_size bytes); a workspace one byte short refused before any
 * launch, O untouched. Needs the split forward kernel (issue 16's forward part): until it lands
 * the forward kernel writes O instead of the partials and these cases fail. Skips without an
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

static int g_skipped;
static fa3_context *g_ctx;
static uint64_t g_seed;

typedef struct split_case {
    const char *id;
    int hd;
    fa3_dtype dt;
    fa3_mask mask;
    int batch, sq, sk, h, hk;
    int num_splits;
    int caller_workspace; /* 1: fa3_fwd_workspace_size bytes of the test's own */
} split_case;

/* Keys row i sees (none or causal, bottom-right aligned). */
static int visible(const split_case *c, int i)
{
    if (c->mask != FA3_MASK_CAUSAL)
        return c->sk;
    const int last = i + c->sk - c->sq;
    return last < 0 ? 0 : last + 1 < c->sk ? last + 1 : c->sk;
}

static void run_case(const split_case *c, int short_workspace)
{
    fa3_config cfg, ref_cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = c->hd;
    cfg.dtype = c->dt;
    cfg.mask = c->mask;
    ref_cfg = cfg;
    cfg.split_kv = 1;
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &k));
    const size_t nq = (size_t)c->batch * c->sq * c->h * c->hd;
    const size_t nk = (size_t)c->batch * c->sk * c->hk * c->hd;
    const size_t nl = (size_t)c->batch * c->h * c->sq;
    uint16_t *q = malloc(nq * 2), *kk = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
    float *lse = malloc(nl * 4), *ref = malloc(nq * 4), *emul = malloc(nq * 4);
    float *ref_lse = malloc(nl * 4);
    assert_true(q && kk && v && o && lse && ref && emul && ref_lse);
    host_rng rng;
    rng_init(&rng, g_seed ^ ((uint64_t)c->sk * 1000003u + (uint64_t)c->num_splits));
    fill_normal(&rng, q, nq, c->dt, 1.0);
    fill_normal(&rng, kk, nk, c->dt, 1.0);
    fill_normal(&rng, v, nk, c->dt, 1.0);
    CUdeviceptr dq = gpu_alloc(nq * 2), dk = gpu_alloc(nk * 2), dv = gpu_alloc(nk * 2);
    CUdeviceptr dout = gpu_alloc(nq * 2), dlse = gpu_alloc(nl * 4), dref = gpu_alloc(nq * 4);
    CUdeviceptr demul = gpu_alloc(nq * 4), dref_lse = gpu_alloc(nl * 4), dws = 0;
    gpu_upload(dq, q, nq * 2);
    gpu_upload(dk, kk, nk * 2);
    gpu_upload(dv, v, nk * 2);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)dq;
    a.k = (const void *)(uintptr_t)dk;
    a.v = (const void *)(uintptr_t)dv;
    a.o = (void *)(uintptr_t)dout;
    a.lse = (float *)(uintptr_t)dlse;
    a.batch = c->batch;
    a.seqlen_q = c->sq;
    a.seqlen_k = c->sk;
    a.num_heads = c->h;
    a.num_heads_k = c->hk;
    fa3_fwd_args_set_contiguous(&a, c->hd, c->hd);
    fa3_fwd_args ra = a; /* the reference: a one-pass config, no split fields */
    CHECK(fa3_reference_fwd_ex(g_ctx, &ref_cfg, &ra, (float *)(uintptr_t)dref,
                               (float *)(uintptr_t)dref_lse, 0, NULL));
    CHECK(fa3_reference_fwd_ex(g_ctx, &ref_cfg, &ra, (float *)(uintptr_t)demul, NULL, 1, NULL));
    a.num_splits = c->num_splits;
    size_t bytes = 0;
    CHECK(fa3_fwd_workspace_size(k, &a, &bytes));
    printf("%s: %d splits asked, workspace %zu bytes (%s)\n", c->id, c->num_splits, bytes,
           c->caller_workspace ? "the caller's" : "the library's");
    assert_true(bytes > 0 && bytes % 256 == 0);
    if (c->caller_workspace || short_workspace) {
        dws = gpu_alloc(bytes);
        a.workspace = (void *)(uintptr_t)dws;
        a.workspace_bytes = short_workspace ? bytes - 1 : bytes;
    }
    gpu_fill_nan16(dout, nq, c->dt);
    gpu_fill_nan32(dlse, nl);
    gpu_sync();
    fa3_status st = fa3_fwd(k, &a, NULL);
    gpu_sync();
    gpu_download(o, dout, nq * 2);
    gpu_download(lse, dlse, nl * 4);
    if (short_workspace) {
        printf("  %s: %s\n", fa3_strerror(st), fa3_last_error_message());
        assert_int_equal(st, FA3_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(fa3_last_error_message(), "workspace_bytes"));
        for (size_t e = 0; e < nq; e++)
            if (!isnan(dtype_to_f32(c->dt, o[e])))
                fail_msg("O[%zu] written by a refused call", e);
    } else {
        if (st != FA3_OK)
            fail_msg("fa3_fwd: %s: %s", fa3_strerror(st), fa3_last_error_message());
        gpu_download(ref, dref, nq * 4);
        gpu_download(emul, demul, nq * 4);
        gpu_download(ref_lse, dref_lse, nl * 4);
        tol_acc acc = {0};
        size_t nonfinite = 0;
        for (int b = 0; b < c->batch; b++)
            for (int i = 0; i < c->sq; i++)
                for (int h = 0; h < c->h; h++) {
                    const size_t li = ((size_t)b * c->h + h) * c->sq + i;
                    const size_t oi = (((size_t)b * c->sq + i) * c->h + h) * c->hd;
                    if (visible(c, i) == 0) {
                        if (!(isinf(lse[li]) && lse[li] < 0))
                            fail_msg("row b%d i%d h%d sees no key, LSE %g", b, i, h,
                                     (double)lse[li]);
                        for (int d = 0; d < c->hd; d++)
                            if (dtype_to_f32(c->dt, o[oi + (size_t)d]) != 0.0f)
                                fail_msg("row b%d i%d h%d sees no key, O[%d] not 0", b, i, h, d);
                        continue;
                    }
                    tol_add_lse(&acc, li, lse[li], ref_lse[li]);
                    for (int d = 0; d < c->hd; d++) {
                        const float x = dtype_to_f32(c->dt, o[oi + (size_t)d]);
                        if (!isfinite(x)) {
                            nonfinite++;
                            continue;
                        }
                        tol_add_o(&acc, oi + (size_t)d, x, ref[oi + (size_t)d],
                                  emul[oi + (size_t)d]);
                    }
                }
        char line[256];
        printf("  %s\n", tol_format(&acc, line, sizeof line));
        if (nonfinite)
            fail_msg("%s: %zu O elements not finite (unwritten or NaN)", c->id, nonfinite);
        if (!tol_o_ok(&acc) || !tol_lse_ok(&acc))
            fail_msg("%s: %s", c->id, line);
    }
    free(q);
    free(kk);
    free(v);
    free(o);
    free(lse);
    free(ref);
    free(emul);
    free(ref_lse);
    gpu_free(dq);
    gpu_free(dk);
    gpu_free(dv);
    gpu_free(dout);
    gpu_free(dlse);
    gpu_free(dref);
    gpu_free(demul);
    gpu_free(dref_lse);
    gpu_free(dws);
}

static const split_case g_cases[] = {
    {"decode hd128 bf16, the library's choice", 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 1, 3000, 8,
     2, 0, 0},
    {"decode hd128 bf16, 5 splits, caller's workspace", 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 1,
     3000, 8, 2, 5, 1},
    {"causal hd128 bf16 sq 7, 128 splits", 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, 7, 1000, 4,
     4, 128, 0},
    {"decode hd64 fp16, 1 split", 64, FA3_DTYPE_FP16, FA3_MASK_NONE, 3, 1, 777, 4, 1, 1, 1},
    {"decode hd256 bf16, the library's choice", 256, FA3_DTYPE_BF16, FA3_MASK_NONE, 1, 2, 5000,
     16, 2, 0, 1},
};

static void test_split_fwd(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++)
        run_case(&g_cases[i], 0);
}

static void test_short_workspace(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_case(&g_cases[1], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_fwd),
        cmocka_unit_test(test_short_workspace),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_splitkv_fwd", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
