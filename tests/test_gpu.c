/*
 * test_gpu: the GPU ladder. Each test needs a CUDA driver and an sm_90 device; without one it
 * prints "SKIP: <reason>" and is skipped (the process exits 77, meson's SKIP, when every GPU test
 * skipped). On an H200 it runs the generated kernels for real and compares them with the library's
 * NVRTC reference using FlashAttention's rule:
 *     max|O − ref| ≤ 2.5·max|O_emulated − ref| + 1e-3,   |LSE − LSE_ref| ≤ 1e-3
 * where ref is the fp32 reference and O_emulated the reference that rounds P and O to the kernel's
 * dtype (the error the dtype itself makes). Outputs are NaN-filled before each call, so an element
 * the kernel does not write fails. Inputs are N(0,1) from a fresh seed each run (printed; repeat a
 * run with FA3JIT_TEST_SEED=<seed>).
 *
 * Ladder (ids from shared/cases/attention-edge-cases.md):
 *   host_conversions  bf16/fp16 rounding helpers the comparisons rely on (no GPU needed)
 *   reference_builds  the NVRTC reference kernel compiles for sm_90 (no GPU needed)
 *   a  full attention hd128 bf16, seqlen 128 and 1000 (E1), GQA on the second
 *   b  causal with seqlen_q > seqlen_k: 2048/1024 (E4) and 8/3 (E5): rows that see no key → O = 0,
 *      LSE = −inf
 *   c  hd64 fp16 and hd256 bf16
 *   d  the same inputs twice → bitwise identical outputs (E12)
 *   e  NaN in one Q row → that row NaN, the others finite and correct (E14)
 *   f  seqlen 1, hd64 fp16: O = v exactly, LSE = q·k·scale (E2)
 *   g  bad arguments → the right status, the message names the value, nothing launched (runs
 *      without a GPU too: validation comes before the driver)
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

#include "fa3jit.h"
#include "gpu_util.h"
#include "check.h"

static fa3_context *g_ctx;
static uint64_t g_seed;
static int g_skipped;

/* ------------------------------------------------------------------------------------------- */
/* One attention problem: host inputs, device buffers, kernel output and both references. */

typedef struct attn {
    fa3_config cfg; /* canonical */
    fa3_kernel *kernel;
    int batch, sq, sk, h, hk, d;
    fa3_fwd_args args;
    size_t nq, nk, no, nlse; /* element counts (nv = nk since head_dim_v = head_dim) */
    uint16_t *q, *k, *v;     /* host inputs */
    uint16_t *o;             /* host copy of the kernel's O */
    float *lse;              /* host copy of the kernel's LSE */
    float *ref, *ref_lse, *emul; /* host copies of the references */
    CUdeviceptr dq, dk, dv, dout, dlse, dref, dref_lse, demul;
} attn;

static void attn_init(attn *t, int hd, fa3_dtype dt, fa3_mask mask, int batch, int sq, int sk,
                      int h, int hk)
{
    memset(t, 0, sizeof *t);
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.dtype = dt;
    c.mask = mask;
    CHECK(fa3_config_canonicalize(&c, &t->cfg));
    CHECK(fa3_jit_get_kernel(g_ctx, &t->cfg, &t->kernel));
    t->batch = batch;
    t->sq = sq;
    t->sk = sk;
    t->h = h;
    t->hk = hk;
    t->d = hd;
    t->nq = (size_t)batch * sq * h * hd;
    t->nk = (size_t)batch * sk * hk * hd;
    t->no = t->nq;
    t->nlse = (size_t)batch * h * sq;
    t->q = malloc(t->nq * 2);
    t->k = malloc(t->nk * 2);
    t->v = malloc(t->nk * 2);
    t->o = malloc(t->no * 2);
    t->lse = malloc(t->nlse * 4);
    t->ref = malloc(t->no * 4);
    t->ref_lse = malloc(t->nlse * 4);
    t->emul = malloc(t->no * 4);
    assert_true(t->q && t->k && t->v && t->o && t->lse && t->ref && t->ref_lse && t->emul);
    t->dq = gpu_alloc(t->nq * 2);
    t->dk = gpu_alloc(t->nk * 2);
    t->dv = gpu_alloc(t->nk * 2);
    t->dout = gpu_alloc(t->no * 2);
    t->dlse = gpu_alloc(t->nlse * 4);
    t->dref = gpu_alloc(t->no * 4);
    t->dref_lse = gpu_alloc(t->nlse * 4);
    t->demul = gpu_alloc(t->no * 4);

    fa3_fwd_args *a = &t->args;
    fa3_fwd_args_init(a);
    a->q = (const void *)(uintptr_t)t->dq;
    a->k = (const void *)(uintptr_t)t->dk;
    a->v = (const void *)(uintptr_t)t->dv;
    a->o = (void *)(uintptr_t)t->dout;
    a->lse = (float *)(uintptr_t)t->dlse;
    a->batch = batch;
    a->seqlen_q = sq;
    a->seqlen_k = sk;
    a->num_heads = h;
    a->num_heads_k = hk;
    fa3_fwd_args_set_contiguous(a, hd, hd);
}

static void attn_random(attn *t, host_rng *r)
{
    fill_normal(r, t->q, t->nq, t->cfg.dtype, 1.0);
    fill_normal(r, t->k, t->nk, t->cfg.dtype, 1.0);
    fill_normal(r, t->v, t->nk, t->cfg.dtype, 1.0);
}

static void attn_upload(attn *t)
{
    gpu_upload(t->dq, t->q, t->nq * 2);
    gpu_upload(t->dk, t->k, t->nk * 2);
    gpu_upload(t->dv, t->v, t->nk * 2);
}

/* NaN-fills the outputs, runs the kernel, downloads O and LSE. */
static void attn_run(attn *t)
{
    gpu_fill_nan16(t->dout, t->no, t->cfg.dtype);
    gpu_fill_nan32(t->dlse, t->nlse);
    gpu_sync();
    CHECK(fa3_fwd(t->kernel, &t->args, NULL));
    gpu_sync();
    gpu_download(t->o, t->dout, t->no * 2);
    gpu_download(t->lse, t->dlse, t->nlse * 4);
}

static void attn_reference(attn *t)
{
    gpu_fill_nan32(t->dref, t->no);
    gpu_fill_nan32(t->dref_lse, t->nlse);
    gpu_fill_nan32(t->demul, t->no);
    CHECK(fa3_reference_fwd_ex(g_ctx, &t->cfg, &t->args, (float *)(uintptr_t)t->dref,
                               (float *)(uintptr_t)t->dref_lse, 0, NULL));
    CHECK(fa3_reference_fwd_ex(g_ctx, &t->cfg, &t->args, (float *)(uintptr_t)t->demul, NULL, 1,
                               NULL));
    gpu_sync();
    gpu_download(t->ref, t->dref, t->no * 4);
    gpu_download(t->ref_lse, t->dref_lse, t->nlse * 4);
    gpu_download(t->emul, t->demul, t->no * 4);
}

static void attn_free(attn *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->o);
    free(t->lse);
    free(t->ref);
    free(t->ref_lse);
    free(t->emul);
    gpu_free(t->dq);
    gpu_free(t->dk);
    gpu_free(t->dv);
    gpu_free(t->dout);
    gpu_free(t->dlse);
    gpu_free(t->dref);
    gpu_free(t->dref_lse);
    gpu_free(t->demul);
    memset(t, 0, sizeof *t);
}

static size_t o_index(const attn *t, int b, int i, int h, int c)
{
    return (((size_t)b * t->sq + i) * t->h + h) * t->d + c;
}

static size_t lse_index(const attn *t, int b, int h, int i)
{
    return ((size_t)b * t->h + h) * t->sq + i;
}

/* Number of keys query row i sees under the config's mask (no window: none or causal). */
static int visible_keys(const attn *t, int i)
{
    if (t->cfg.mask != FA3_MASK_CAUSAL)
        return t->sk;
    int last = i + t->sk - t->sq; /* bottom-right aligned */
    if (last < 0)
        return 0;
    return last + 1 < t->sk ? last + 1 : t->sk;
}

/*
 * The tolerance rule (tools/common/tolerance.h) over every (b, i, h) row except skip_row (b, i, h;
 * pass -1s for none). Rows that see no key must be exactly O = 0, LSE = −inf; every other O element
 * finite, and the references finite. Prints the errors and the worst element.
 */
static void attn_check(const attn *t, const char *what, int skip_b, int skip_i, int skip_h)
{
    tol_acc acc = {0};
    size_t nonfinite = 0, first_nonfinite = (size_t)-1;
    int empty_rows = 0;
    for (int b = 0; b < t->batch; b++)
        for (int i = 0; i < t->sq; i++)
            for (int h = 0; h < t->h; h++) {
                if (b == skip_b && i == skip_i && h == skip_h)
                    continue;
                int vis = visible_keys(t, i);
                size_t li = lse_index(t, b, h, i);
                if (vis == 0) {
                    empty_rows++;
                    if (!(isinf(t->lse[li]) && t->lse[li] < 0))
                        fail_msg("%s: row b%d i%d h%d sees no key but LSE = %g (want -inf)", what,
                                 b, i, h, (double)t->lse[li]);
                    for (int c = 0; c < t->d; c++) {
                        float x = dtype_to_f32(t->cfg.dtype, t->o[o_index(t, b, i, h, c)]);
                        if (x != 0.0f)
                            fail_msg("%s: row b%d i%d h%d sees no key but O[%d] = %g (want 0)",
                                     what, b, i, h, c, (double)x);
                    }
                    continue;
                }
                tol_add_lse(&acc, li, t->lse[li], t->ref_lse[li]);
                for (int c = 0; c < t->d; c++) {
                    size_t oi = o_index(t, b, i, h, c);
                    float x = dtype_to_f32(t->cfg.dtype, t->o[oi]);
                    if (!isfinite(x)) {
                        if (nonfinite++ == 0)
                            first_nonfinite = oi;
                        continue;
                    }
                    if (!isfinite(t->ref[oi]) || !isfinite(t->emul[oi]))
                        fail_msg("%s: the reference is not finite at O[%zu]", what, oi);
                    tol_add_o(&acc, oi, x, t->ref[oi], t->emul[oi]);
                }
            }
    char line[256];
    size_t worst = acc.worst_o;
    printf("  %s: %s; worst O[%zu] = %g vs %g; %d rows see no key\n", what,
           tol_format(&acc, line, sizeof line), worst,
           (double)dtype_to_f32(t->cfg.dtype, t->o[worst]), (double)t->ref[worst], empty_rows);
    if (nonfinite)
        fail_msg("%s: %zu output elements not finite (unwritten or NaN), first at index %zu", what,
                 nonfinite, first_nonfinite);
    if (!tol_o_ok(&acc))
        fail_msg("%s: max|O-ref| = %g exceeds 2*%g + 1e-3", what, acc.err_o, acc.err_emul);
    if (!tol_lse_ok(&acc))
        fail_msg("%s: max|LSE-ref| = %g at %zu (%g vs %g) exceeds 1e-3", what, acc.err_lse,
                 acc.worst_lse, (double)t->lse[acc.worst_lse], (double)t->ref_lse[acc.worst_lse]);
}

/* Runs one full case: random inputs, kernel, references, tolerance check. */
static void run_case(const char *what, int hd, fa3_dtype dt, fa3_mask mask, int batch, int sq,
                     int sk, int h, int hk)
{
    attn t;
    host_rng r;
    rng_init(&r, g_seed ^ (uint64_t)(sq * 7919 + sk * 104729 + hd));
    attn_init(&t, hd, dt, mask, batch, sq, sk, h, hk);
    attn_random(&t, &r);
    attn_upload(&t);
    attn_run(&t);
    attn_reference(&t);
    attn_check(&t, what, -1, -1, -1);
    attn_free(&t);
}

/* ------------------------------------------------------------------------------------------- */

static void test_host_conversions(void **state)
{
    (void)state;
    /* exact values */
    assert_int_equal(f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(f32_to_fp16(1.0f), 0x3C00);
    assert_int_equal(f32_to_fp16(-2.0f), 0xC000);
    assert_int_equal(f32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(f32_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(f32_to_fp16(0x1p-14f), 0x0400); /* smallest normal */
    /* ties go to even */
    float t1 = 1.0f + 0x1p-8f; /* halfway between bf16 1.0 and 1.0078125 */
    assert_int_equal(f32_to_bf16(t1), 0x3F80);
    float t2 = 1.0f + 3 * 0x1p-8f; /* halfway between 0x3F81 and 0x3F82 → even 0x3F82 */
    assert_int_equal(f32_to_bf16(t2), 0x3F82);
    assert_int_equal(f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);     /* tie → even */
    assert_int_equal(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie → even */
    assert_int_equal(f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    assert_int_equal(f32_to_fp16(0x1p-25f), 0x0000);              /* tie → even (0) */
    assert_int_equal(f32_to_fp16(3 * 0x1p-25f), 0x0002);          /* tie → even */
    /* overflow, infinities, NaN */
    assert_int_equal(f32_to_fp16(65520.0f), 0x7C00);
    assert_int_equal(f32_to_fp16(-1e30f), 0xFC00);
    assert_int_equal(f32_to_bf16(INFINITY), 0x7F80);
    assert_true(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    assert_true(isnan(fp16_to_f32(f32_to_fp16(NAN))));
    assert_int_equal(f32_to_bf16(3.4e38f), 0x7F80); /* rounds past the largest bf16 */
    /* round trip of every finite fp16 value, and a sweep of bf16 values */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00)
            continue;
        float x = fp16_to_f32((uint16_t)h);
        if (f32_to_fp16(x) != h)
            fail_msg("fp16 0x%04x -> %g -> 0x%04x", h, (double)x, f32_to_fp16(x));
        float y = bf16_to_f32((uint16_t)h);
        if ((h & 0x7F80) != 0x7F80 && f32_to_bf16(y) != h)
            fail_msg("bf16 0x%04x -> %g -> 0x%04x", h, (double)y, f32_to_bf16(y));
    }
    /* the normal generator: mean ≈ 0, variance ≈ 1 */
    host_rng r;
    rng_init(&r, 12345);
    double s = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) {
        double x = rng_normal(&r);
        s += x;
        s2 += x * x;
    }
    assert_true(fabs(s / 100000) < 0.02);
    assert_true(fabs(s2 / 100000 - 1.0) < 0.03);
}

/* The reference kernel (CUDA C through NVRTC) compiles for sm_90 without a GPU. */
static void test_reference_builds(void **state)
{
    (void)state;
    void *image = NULL;
    size_t size = 0;
    int is_ptx = -1;
    fa3_status st = fa3_reference_build_image(90, &image, &size, &is_ptx);
    if (st == FA3_ERR_NO_NVRTC) {
        printf("SKIP: %s\n", fa3_last_error_message());
        skip(); /* no NVRTC on this machine */
    }
    if (st != FA3_OK)
        fail_msg("fa3_reference_build_image: %s: %s", fa3_strerror(st), fa3_last_error_message());
    assert_non_null(image);
    assert_true(size > 16);
    if (is_ptx)
        assert_non_null(strstr((const char *)image, ".target sm_90"));
    else
        assert_memory_equal(image, "\x7f" "ELF", 4);
    printf("  reference kernel: %zu-byte %s\n", size, is_ptx ? "PTX" : "cubin");
    free(image);
}

static void test_a_full_hd128_bf16(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_case("a: hd128 bf16 none s128", 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 128, 128, 4, 4);
    run_case("a: hd128 bf16 none s1000 gqa", 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 1000, 1000, 4,
             2);
}

static void test_b_causal_uneven(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_case("b: hd128 bf16 causal 2048x1024", 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, 2048,
             1024, 2, 2);
    run_case("b: hd128 bf16 causal 8x3", 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 8, 3, 2, 1);
    run_case("b: hd128 bf16 causal 1000x1000", 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, 1000, 1000,
             2, 2);
}

static void test_c_other_head_dims(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_case("c: hd64 fp16 none s257", 64, FA3_DTYPE_FP16, FA3_MASK_NONE, 2, 257, 257, 3, 3);
    run_case("c: hd64 fp16 causal s300x500", 64, FA3_DTYPE_FP16, FA3_MASK_CAUSAL, 1, 300, 500, 2,
             1);
    run_case("c: hd256 bf16 none s255", 256, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 255, 255, 2, 2);
    run_case("c: hd256 bf16 causal s640", 256, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, 640, 640, 2, 2);
}

static void test_d_deterministic(void **state)
{
    (void)state;
    REQUIRE_GPU();
    attn t;
    host_rng r;
    rng_init(&r, g_seed ^ 0xD);
    attn_init(&t, 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 1000, 1000, 4, 4);
    attn_random(&t, &r);
    attn_upload(&t);
    attn_run(&t);
    uint16_t *o1 = malloc(t.no * 2);
    float *l1 = malloc(t.nlse * 4);
    assert_non_null(o1);
    assert_non_null(l1);
    memcpy(o1, t.o, t.no * 2);
    memcpy(l1, t.lse, t.nlse * 4);
    attn_run(&t);
    size_t diff_o = 0, diff_l = 0;
    for (size_t i = 0; i < t.no; i++)
        diff_o += o1[i] != t.o[i];
    diff_l = memcmp(l1, t.lse, t.nlse * 4) != 0;
    printf("  d: %zu of %zu O elements differ between two runs; LSE %s\n", diff_o, t.no,
           diff_l ? "differs" : "identical");
    free(o1);
    free(l1);
    attn_free(&t);
    assert_int_equal(diff_o, 0);
    assert_int_equal(diff_l, 0);
}

static void test_e_nan_row(void **state)
{
    (void)state;
    REQUIRE_GPU();
    attn t;
    host_rng r;
    rng_init(&r, g_seed ^ 0xE);
    attn_init(&t, 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 1, 200, 200, 2, 2);
    attn_random(&t, &r);
    const int nb = 0, ni = 77, nh = 1;
    t.q[o_index(&t, nb, ni, nh, 5)] = f32_to_bf16(NAN); /* one element of one Q row */
    attn_upload(&t);
    attn_run(&t);
    attn_reference(&t);
    size_t nan_count = 0;
    for (int c = 0; c < t.d; c++)
        nan_count += isnan(dtype_to_f32(t.cfg.dtype, t.o[o_index(&t, nb, ni, nh, c)])) != 0;
    printf("  e: %zu of %d elements of the NaN row are NaN\n", nan_count, t.d);
    assert_int_equal(nan_count, (size_t)t.d);
    attn_check(&t, "e: other rows", nb, ni, nh); /* every other row finite and within tolerance */
    attn_free(&t);
}

static void test_f_single_key(void **state)
{
    (void)state;
    REQUIRE_GPU();
    attn t;
    host_rng r;
    rng_init(&r, g_seed ^ 0xF);
    attn_init(&t, 64, FA3_DTYPE_FP16, FA3_MASK_NONE, 2, 1, 1, 4, 2);
    attn_random(&t, &r);
    attn_upload(&t);
    attn_run(&t);
    double scale = 1.0 / sqrt(64.0), worst_lse = 0;
    for (int b = 0; b < t.batch; b++)
        for (int h = 0; h < t.h; h++) {
            int hk = h / (t.h / t.hk);
            size_t qo = o_index(&t, b, 0, h, 0);
            size_t ko = ((size_t)b * t.hk + hk) * t.d; /* seqlen_k = 1 */
            double dot = 0;
            for (int c = 0; c < t.d; c++) {
                dot += (double)fp16_to_f32(t.q[qo + c]) * fp16_to_f32(t.k[ko + c]);
                if (t.o[qo + c] != t.v[ko + c])
                    fail_msg("f: b%d h%d O[%d] = 0x%04x (%g), want v = 0x%04x (%g)", b, h, c,
                             t.o[qo + c], (double)fp16_to_f32(t.o[qo + c]), t.v[ko + c],
                             (double)fp16_to_f32(t.v[ko + c]));
            }
            double want = dot * scale, got = t.lse[lse_index(&t, b, h, 0)];
            if (!(fabs(got - want) <= 1e-3))
                fail_msg("f: b%d h%d LSE = %.6f, want q.k.scale = %.6f", b, h, got, want);
            if (fabs(got - want) > worst_lse)
                worst_lse = fabs(got - want);
        }
    printf("  f: O = v bit for bit; max|LSE - q.k.scale| = %.3g\n", worst_lse);
    attn_free(&t);
}

/* Calls fa3_fwd with args and expects want and a message containing each NULL-terminated word.
   With a GPU (t != NULL) also checks that nothing was written: O is still all NaN. */
static void expect_refused(fa3_kernel *k, attn *t, const fa3_fwd_args *a, fa3_status want, ...)
{
    if (t) {
        gpu_fill_nan16(t->dout, t->no, t->cfg.dtype);
        gpu_sync();
    }
    fa3_status st = fa3_fwd(k, a, NULL);
    const char *msg = fa3_last_error_message();
    printf("  g: %s: %s\n", fa3_strerror(st), msg);
    if (st != want)
        fail_msg("fa3_fwd returned %d (%s), expected %d (%s)", (int)st, fa3_strerror(st),
                 (int)want, fa3_strerror(want));
    va_list ap;
    va_start(ap, want);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, w))
            fail_msg("message \"%s\" does not name \"%s\"", msg, w);
    va_end(ap);
    if (t) {
        gpu_sync();
        gpu_download(t->o, t->dout, t->no * 2);
        for (size_t i = 0; i < t->no; i++)
            if (!isnan(dtype_to_f32(t->cfg.dtype, t->o[i])))
                fail_msg("a refused call wrote O[%zu]", i);
    }
}

/* fa3_fwd validates every argument before it touches the driver, so this runs everywhere: with
   fake (aligned) device addresses when there is no GPU, with real buffers (and the check that
   nothing was written) when there is one. */
static void test_g_bad_arguments(void **state)
{
    (void)state;
    attn t;
    attn *tp = NULL;
    fa3_fwd_args good;
    fa3_kernel *k;
    if (gpu_available(NULL, 0)) {
        attn_init(&t, 128, FA3_DTYPE_BF16, FA3_MASK_NONE, 1, 64, 64, 4, 4);
        tp = &t;
        good = t.args;
        k = t.kernel;
    } else {
        fa3_config c;
        fa3_config_init(&c);
        CHECK(fa3_jit_get_kernel(g_ctx, &c, &k));
        fa3_fwd_args_init(&good);
        good.q = (const void *)(uintptr_t)0x7f0000100000ull; /* never dereferenced */
        good.k = (const void *)(uintptr_t)0x7f0000200000ull;
        good.v = (const void *)(uintptr_t)0x7f0000300000ull;
        good.o = (void *)(uintptr_t)0x7f0000400000ull;
        good.lse = (float *)(uintptr_t)0x7f0000500000ull;
        good.batch = 1;
        good.seqlen_q = good.seqlen_k = 64;
        good.num_heads = good.num_heads_k = 4;
        fa3_fwd_args_set_contiguous(&good, 128, 128);
        printf("  g: no GPU, so fake device addresses (validation only)\n");
    }
    fa3_fwd_args a;

    /* head_dim mismatch: strides laid out for head_dim 64 while the kernel's head_dim is 128, so
       the heads of O would overlap */
    a = good;
    fa3_fwd_args_set_contiguous(&a, 64, 64);
    expect_refused(k, tp, &a, FA3_ERR_BAD_STRIDE, "o_head_stride", "64", NULL);

    /* misaligned pointers (TMA needs 16 bytes) */
    a = good;
    a.q = (const char *)a.q + 2;
    expect_refused(k, tp, &a, FA3_ERR_BAD_ALIGNMENT, "args->q", NULL);
    a = good;
    a.v = (const char *)a.v + 8;
    expect_refused(k, tp, &a, FA3_ERR_BAD_ALIGNMENT, "args->v", NULL);

    /* num_heads not a multiple of num_heads_k */
    a = good;
    a.num_heads = 4;
    a.num_heads_k = 3;
    expect_refused(k, tp, &a, FA3_ERR_BAD_SHAPE, "4", "3", NULL);

    /* a Q row stride that is not a multiple of 16 bytes */
    a = good;
    a.q_row_stride = 4 * 128 + 4;
    expect_refused(k, tp, &a, FA3_ERR_BAD_STRIDE, "q_row_stride", "516", NULL);

    /* softcap value without the softcap config, bad scale, empty batch, window without local */
    a = good;
    a.softcap = 30.0f;
    expect_refused(k, tp, &a, FA3_ERR_BAD_SOFTCAP, "30", NULL);
    a = good;
    a.softmax_scale = -1.0f;
    expect_refused(k, tp, &a, FA3_ERR_BAD_SCALE, "-1", NULL);
    a = good;
    a.batch = 0;
    expect_refused(k, tp, &a, FA3_ERR_BAD_SHAPE, "batch", NULL);
    a = good;
    a.window_size_left = 16;
    expect_refused(k, tp, &a, FA3_ERR_BAD_WINDOW, "16", NULL);
    a = good;
    a.k = NULL;
    expect_refused(k, tp, &a, FA3_ERR_INVALID_ARGUMENT, "k", NULL);
    expect_refused(k, tp, NULL, FA3_ERR_INVALID_ARGUMENT, NULL);
    if (tp)
        attn_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_conversions),
        cmocka_unit_test(test_reference_builds),
        cmocka_unit_test(test_a_full_hd128_bf16),
        cmocka_unit_test(test_b_causal_uneven),
        cmocka_unit_test(test_c_other_head_dims),
        cmocka_unit_test(test_d_deterministic),
        cmocka_unit_test(test_e_nan_row),
        cmocka_unit_test(test_f_single_key),
        cmocka_unit_test(test_g_bad_arguments),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    /* all but the three host tests need a GPU */
    return gpu_test_main("gpu", tests, n, (int)n - 3, &g_ctx, &g_seed, &g_skipped);
}
