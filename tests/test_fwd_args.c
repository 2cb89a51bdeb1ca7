/*
 * test_fwd_args: fa3_fwd's argument checks for the FP8 (e4m3) path, on kernels without code: the
 * config and plan fa3_jit_get_kernel would give and no kernel parts, so fa3_fwd validates, opens
 * the device, reads the descales back and launches nothing. (Until the planner plans e4m3, an
 * e4m3 kernel here is the bf16 plan of the same shape with e4m3's element sizes.)
 *   CPU: every check that needs no GPU (fa3_fwd_validate: strides and alignment in e4m3 bytes,
 *        O in out_dtype bytes, aliasing with mixed element sizes, the descale fields), the
 *        descale read skipped where it must be, fa3_fwd_flops independent of the dtype, the
 *        reference's e4m3 argument checks;
 *   GPU: the descale values read back (fa3_fwd_check_descales through fa3_fwd): NaN, inf,
 *        negative, zero and negative zero refused with the array, index, batch, kv head and
 *        value named; descales_trusted = 1 skips the read; the NULL and a non-NULL stream.
 *        Skipped, with the reason, where there is no sm_90 device.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "gpu_util.h"

/* ------------------------------------------------------------------------------------------- */

/* A kernel of (hd, dt, mask, softcap) without code (see the file comment); free() it. */
static fa3_kernel *fake_kernel(int hd, fa3_dtype dt, fa3_mask mask, int softcap)
{
    fa3_kernel *k = calloc(1, sizeof *k);
    assert_non_null(k);
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.dtype = dt;
    c.mask = mask;
    c.softcap = softcap;
    if (fa3_config_canonicalize(&c, &k->cfg) == FA3_OK) {
        assert_int_equal(fa3_plan_make(&k->cfg, &k->plan), FA3_OK);
    } else {
        assert_int_equal(dt, FA3_DTYPE_E4M3); /* only e4m3 may be refused (not planned yet) */
        c.dtype = FA3_DTYPE_BF16;
        assert_int_equal(fa3_config_canonicalize(&c, &k->cfg), FA3_OK);
        assert_int_equal(fa3_plan_make(&k->cfg, &k->plan), FA3_OK);
        k->cfg.dtype = FA3_DTYPE_E4M3;
        k->cfg.out_dtype = FA3_DTYPE_BF16;
        k->plan.cfg = k->cfg;
        k->plan.elem_bytes = 1;
        k->plan.out_bytes = 2;
    }
    assert_int_equal(k->plan.elem_bytes, dt == FA3_DTYPE_E4M3 ? 1 : 2);
    assert_int_equal(k->plan.out_bytes, 2);
    k->op = fa3_op_for_config(&k->cfg);
    assert_non_null(k->op);
    k->num_parts = 0; /* nothing to launch */
    pthread_mutex_init(&k->mu, NULL);
    return k;
}

static void fake_free(fa3_kernel *k)
{
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* Fake device addresses (never dereferenced by the pure checks), far apart. */
#define ADDR(n) ((uintptr_t)0x7f0000000000ull + (uintptr_t)(n) * 0x1000000ull)

/* batch 2, seqlen 64/64, 4 heads over 2 KV heads, contiguous for head_dim hd. */
static fa3_fwd_args good_args(int hd)
{
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)ADDR(1);
    a.k = (const void *)ADDR(2);
    a.v = (const void *)ADDR(3);
    a.o = (void *)ADDR(4);
    a.lse = (float *)ADDR(5);
    a.batch = 2;
    a.seqlen_q = a.seqlen_k = 64;
    a.num_heads = 4;
    a.num_heads_k = 2;
    fa3_fwd_args_set_contiguous(&a, hd, hd);
    return a;
}

static fa3_status validate(const fa3_kernel *k, const fa3_fwd_args *a)
{
    float scale;
    int wl, wr;
    uint32_t tiles;
    return fa3_fwd_validate(k, a, &scale, &wl, &wr, &tiles);
}

/* fa3_fwd(k, a) must return want with a message naming every word (a NULL-terminated list).
   Refusals of the pure checks come before the driver, so this holds with or without a GPU. */
static void expect_refused(fa3_kernel *k, const fa3_fwd_args *a, fa3_status want, ...)
{
    fa3_status st = fa3_fwd(k, a, NULL);
    const char *msg = fa3_last_error_message();
    printf("  %s: %s\n", fa3_strerror(st), msg);
    if (st != want)
        fail_msg("fa3_fwd returned %s, expected %s (%s)", fa3_strerror(st), fa3_strerror(want),
                 msg);
    va_list ap;
    va_start(ap, want);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, w))
            fail_msg("message \"%s\" does not name \"%s\"", msg, w);
    va_end(ap);
}

static void expect_ok(const fa3_kernel *k, const fa3_fwd_args *a, const char *what)
{
    fa3_status st = validate(k, a);
    if (st != FA3_OK)
        fail_msg("%s: fa3_fwd_validate refused: %s: %s", what, fa3_strerror(st),
                 fa3_last_error_message());
}

/* ------------------------------------------------------------------------------------------- */
/* CPU */

/* Q/K/V strides count e4m3 elements of one byte: multiples of 16 elements; bf16 needs 8. */
static void test_e4m3_strides_in_bytes(void **state)
{
    (void)state;
    fa3_kernel *k8 = fake_kernel(128, FA3_DTYPE_E4M3, FA3_MASK_NONE, 0);
    fa3_kernel *k16 = fake_kernel(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 0);
    fa3_fwd_args a = good_args(128);
    expect_ok(k8, &a, "contiguous e4m3");
    /* 520 elements: 1040 bytes in bf16 (a multiple of 16), 520 in e4m3 (not) */
    a.q_row_stride = 4 * 128 + 8;
    a.q_batch_stride = 64 * a.q_row_stride;
    expect_ok(k16, &a, "bf16 q_row_stride 520");
    expect_refused(k8, &a, FA3_ERR_BAD_STRIDE, "q_row_stride", "520", "16 bytes", NULL);
    a.q_row_stride = 4 * 128 + 16;
    a.q_batch_stride = 64 * a.q_row_stride;
    expect_ok(k8, &a, "e4m3 q_row_stride 528");
    a = good_args(128);
    a.k_head_stride = 136;
    a.k_row_stride = 2 * 136;
    a.k_batch_stride = 64 * a.k_row_stride;
    expect_ok(k16, &a, "bf16 k_head_stride 136");
    expect_refused(k8, &a, FA3_ERR_BAD_STRIDE, "k_head_stride", "136", NULL);
    a = good_args(128);
    a.v_batch_stride += 8;
    expect_refused(k8, &a, FA3_ERR_BAD_STRIDE, "v_batch_stride", NULL);
    /* strides of 0 (broadcast) and of extent-1 axes stay free */
    a = good_args(128);
    a.k_head_stride = a.v_head_stride = 0;
    expect_ok(k8, &a, "e4m3 K/V head stride 0");
    a = good_args(128);
    a.batch = 1;
    a.q_batch_stride = 3;
    expect_ok(k8, &a, "e4m3 batch 1 with an odd batch stride");
    /* addresses: 16 bytes whatever the element size */
    a = good_args(128);
    a.k = (const char *)a.k + 8;
    expect_refused(k8, &a, FA3_ERR_BAD_ALIGNMENT, "args->k", "16-byte", NULL);
    a = good_args(128);
    a.q = (const char *)a.q + 16;
    expect_ok(k8, &a, "e4m3 q at +16 bytes");
    fake_free(k8);
    fake_free(k16);
}

/* O holds out_dtype (2-byte) elements: its stride rules and its overlap test use 2 bytes while
   Q/K/V use 1. */
static void test_e4m3_o_in_out_dtype(void **state)
{
    (void)state;
    fa3_kernel *k8 = fake_kernel(128, FA3_DTYPE_E4M3, FA3_MASK_CAUSAL, 0);
    fa3_fwd_args a = good_args(128);
    a.o_row_stride += 1;
    expect_refused(k8, &a, FA3_ERR_BAD_STRIDE, "o_row_stride", "odd", NULL);
    a = good_args(128);
    fa3_fwd_args_set_contiguous(&a, 64, 64); /* heads of O 64 apart: they overlap */
    expect_refused(k8, &a, FA3_ERR_BAD_STRIDE, "o_head_stride", "64", NULL);
    /* O 4-byte aligned, any even strides (the register path) */
    a = good_args(128);
    a.o = (char *)a.o + 4;
    a.o_head_stride = 130;
    a.o_row_stride = 4 * 130;
    a.o_batch_stride = 64 * a.o_row_stride;
    expect_ok(k8, &a, "e4m3 O at +4 bytes with padded rows");

    /* Q's e4m3 bytes end where O begins: no overlap in bytes, though one in elements of 2 */
    const size_t nq = (size_t)2 * 64 * 4 * 128, no = nq;
    a = good_args(128);
    a.o = (void *)((uintptr_t)a.q + nq);
    expect_ok(k8, &a, "O right after Q's e4m3 bytes");
    /* K right after O's first half: O's bf16 bytes (2·no) overlap it */
    a = good_args(128);
    a.k = (const void *)((uintptr_t)a.o + no);
    expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->o", "overlaps args->k", NULL);
    a.k = (const void *)((uintptr_t)a.o + 2 * no);
    expect_ok(k8, &a, "K right after O's bf16 bytes");
    /* in place: O at Q's address cannot be Q's layout (2-byte elements over 1-byte ones) */
    a = good_args(128);
    a.o = (void *)(uintptr_t)a.q;
    a.o_batch_stride = a.q_batch_stride;
    a.o_row_stride = a.q_row_stride;
    a.o_head_stride = a.q_head_stride;
    expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->q", "element size", NULL);
    /* LSE against Q's e4m3 bytes */
    a = good_args(128);
    a.lse = (float *)((uintptr_t)a.q + nq);
    expect_ok(k8, &a, "LSE right after Q's e4m3 bytes");
    a.lse = (float *)((uintptr_t)a.q + nq - 4);
    expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->lse", "overlaps args->q", NULL);
    fake_free(k8);
}

/* bf16/fp16 kernels take no descales; descales_trusted is 0 or 1 for every dtype. */
static void test_descale_fields(void **state)
{
    (void)state;
    fa3_kernel *kb = fake_kernel(64, FA3_DTYPE_BF16, FA3_MASK_NONE, 0);
    fa3_kernel *kh = fake_kernel(64, FA3_DTYPE_FP16, FA3_MASK_LOCAL, 1);
    fa3_kernel *k8 = fake_kernel(64, FA3_DTYPE_E4M3, FA3_MASK_NONE, 1);
    fa3_fwd_args a = good_args(64);
    a.descale_k = (const float *)ADDR(8);
    expect_refused(kb, &a, FA3_ERR_INVALID_ARGUMENT, "args->descale_k", "NULL", "bf16", NULL);
    a = good_args(64);
    a.softcap = 30.0f;
    a.descale_q = (const float *)ADDR(8);
    expect_refused(kh, &a, FA3_ERR_INVALID_ARGUMENT, "args->descale_q", "NULL", "fp16", NULL);
    a.descale_q = NULL;
    a.descale_v = (const float *)ADDR(8);
    expect_refused(kh, &a, FA3_ERR_INVALID_ARGUMENT, "args->descale_v", NULL);
    a.descale_v = NULL;
    expect_ok(kh, &a, "fp16 without descales");

    static const int bad_trusted[] = {2, -1, 1000};
    for (int i = 0; i < 3; i++) {
        char val[16];
        snprintf(val, sizeof val, "%d", bad_trusted[i]);
        a = good_args(64);
        a.descales_trusted = bad_trusted[i];
        expect_refused(kb, &a, FA3_ERR_INVALID_ARGUMENT, "args->descales_trusted", val, NULL);
        a.softcap = 30.0f;
        expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->descales_trusted", val, NULL);
    }
    a = good_args(64);
    a.descales_trusted = 1;
    expect_ok(kb, &a, "bf16 with descales_trusted 1");

    /* e4m3: each descale 4-byte aligned */
    a = good_args(64);
    a.softcap = 30.0f;
    a.descale_q = (const float *)ADDR(8);
    a.descale_k = (const float *)ADDR(9);
    a.descale_v = (const float *)ADDR(10);
    expect_ok(k8, &a, "e4m3 with three descales");
    a.descale_v = (const float *)(ADDR(10) + 2);
    expect_refused(k8, &a, FA3_ERR_BAD_ALIGNMENT, "args->descale_v", "4-byte", NULL);
    a.descale_v = (const float *)(ADDR(10) + 4);
    a.descale_k = (const float *)(ADDR(9) + 1);
    expect_refused(k8, &a, FA3_ERR_BAD_ALIGNMENT, "args->descale_k", NULL);
    fake_free(kb);
    fake_free(kh);
    fake_free(k8);
}

/* Descales are read while O and LSE are written: no overlap with those (Q/K/V are fine). */
static void test_descale_aliasing(void **state)
{
    (void)state;
    fa3_kernel *k8 = fake_kernel(128, FA3_DTYPE_E4M3, FA3_MASK_NONE, 0);
    const size_t no_bytes = (size_t)2 * 64 * 4 * 128 * 2, nlse_bytes = (size_t)2 * 4 * 64 * 4;
    fa3_fwd_args a = good_args(128);
    /* the last float of O */
    a.descale_q = (const float *)((uintptr_t)a.o + no_bytes - 4);
    expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->descale_q", "overlaps args->o",
                   "4 floats", NULL); /* batch 2 · num_heads_k 2 */
    a.descale_q = (const float *)((uintptr_t)a.o + no_bytes);
    expect_ok(k8, &a, "descale_q right after O");
    /* the 4 floats end on LSE's first */
    a = good_args(128);
    a.descale_v = (const float *)((uintptr_t)a.lse - 12);
    expect_refused(k8, &a, FA3_ERR_INVALID_ARGUMENT, "args->descale_v", "overlaps args->lse",
                   NULL);
    a.descale_v = (const float *)((uintptr_t)a.lse - 16);
    expect_ok(k8, &a, "descale_v right before LSE");
    a.descale_v = (const float *)((uintptr_t)a.lse + nlse_bytes);
    expect_ok(k8, &a, "descale_v right after LSE");
    a.lse = NULL;
    a.descale_v = (const float *)ADDR(5);
    expect_ok(k8, &a, "no LSE");
    /* inside Q, K and V, and all three the same array: read-only, allowed */
    a = good_args(128);
    a.descale_q = (const float *)a.q;
    a.descale_k = (const float *)a.k;
    a.descale_v = (const float *)a.k;
    expect_ok(k8, &a, "descales inside Q and K");
    fake_free(k8);
}

/* fa3_fwd_check_descales reads only what it must: nothing for bf16, trusted or NULL descales
   (so no driver is needed for those), and tries the driver otherwise. */
static void test_descale_read_skipped(void **state)
{
    (void)state;
    fa3_kernel *kb = fake_kernel(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 0);
    fa3_kernel *k8 = fake_kernel(128, FA3_DTYPE_E4M3, FA3_MASK_NONE, 0);
    fa3_fwd_args a = good_args(128);
    assert_int_equal(fa3_fwd_check_descales(&kb->cfg, &a, NULL), FA3_OK);
    assert_int_equal(fa3_fwd_check_descales(&k8->cfg, &a, NULL), FA3_OK); /* all NULL */
    a.descale_q = a.descale_k = a.descale_v = (const float *)ADDR(8);
    a.descales_trusted = 1;
    assert_int_equal(fa3_fwd_check_descales(&k8->cfg, &a, NULL), FA3_OK);
    if (!gpu_available(NULL, 0)) {
        a.descales_trusted = 0;
        fa3_status st = fa3_fwd_check_descales(&k8->cfg, &a, NULL);
        printf("  no GPU, descales to read: %s: %s\n", fa3_strerror(st),
               fa3_last_error_message());
        assert_true(st == FA3_ERR_NO_DRIVER || st == FA3_ERR_CUDA);
    }
    fake_free(kb);
    fake_free(k8);
}

/* The FLOP count does not depend on the dtype. */
static void test_flops_dtype_independent(void **state)
{
    (void)state;
    static const fa3_mask masks[] = {FA3_MASK_NONE, FA3_MASK_CAUSAL, FA3_MASK_LOCAL};
    for (int m = 0; m < 3; m++) {
        fa3_config cb, c8;
        fa3_config_init(&cb);
        cb.head_dim = 192;
        cb.head_dim_v = 128;
        cb.mask = masks[m];
        c8 = cb;
        c8.dtype = FA3_DTYPE_E4M3;
        c8.out_dtype = FA3_DTYPE_FP16;
        fa3_fwd_args a = good_args(192);
        a.seqlen_q = 1000;
        a.seqlen_k = 777;
        if (masks[m] == FA3_MASK_LOCAL) {
            a.window_size_left = 100;
            a.window_size_right = 7;
        }
        double fb = fa3_fwd_flops(&cb, &a), f8 = fa3_fwd_flops(&c8, &a);
        printf("  mask %d: bf16 %.6g, e4m3 %.6g FLOP\n", (int)masks[m], fb, f8);
        assert_true(fb > 0);
        assert_true(fb == f8);
    }
}

/* The reference takes e4m3 configs with fa3_fwd's descale conventions; its argument checks come
   before the driver. */
static void test_reference_args(void **state)
{
    (void)state;
    fa3_context_options opts;
    fa3_context_options_init(&opts);
    opts.disable_disk_cache = 1;
    fa3_context *ctx = NULL;
    assert_int_equal(fa3_context_create(&ctx, &opts), FA3_OK);
    CUdeviceptr fake = ADDR(20);
    float *o_ref = (float *)(uintptr_t)fake, *lse_ref = (float *)(uintptr_t)(fake + 0x100000);
    fa3_config cb, c8;
    fa3_config_init(&cb);
    c8 = cb;
    c8.dtype = FA3_DTYPE_E4M3;
    fa3_fwd_args a = good_args(128);
    struct { const fa3_config *c; fa3_fwd_args a; fa3_status want; const char *w1, *w2; } t[8];
    int n = 0;
    t[n] = (__typeof__(t[0])){&cb, a, FA3_ERR_INVALID_ARGUMENT, "args->descale_v", "bf16"};
    t[n++].a.descale_v = (const float *)ADDR(8);
    t[n] = (__typeof__(t[0])){&c8, a, FA3_ERR_BAD_ALIGNMENT, "args->descale_q", "4-byte"};
    t[n++].a.descale_q = (const float *)(ADDR(8) + 2);
    t[n] = (__typeof__(t[0])){&c8, a, FA3_ERR_INVALID_ARGUMENT, "descales_trusted", "3"};
    t[n++].a.descales_trusted = 3;
    fa3_config cbo = cb, c8o = c8;
    cbo.out_dtype = FA3_DTYPE_FP16;
    c8o.out_dtype = FA3_DTYPE_E4M3;
    t[n++] = (__typeof__(t[0])){&cbo, a, FA3_ERR_BAD_DTYPE, "out_dtype 1 (fp16)", "dtype bf16"};
    t[n++] = (__typeof__(t[0])){&c8o, a, FA3_ERR_BAD_DTYPE, "out_dtype 2 (e4m3)", "fp16 = 1"};
    for (int i = 0; i < n; i++) {
        fa3_status st = fa3_reference_fwd_ex(ctx, t[i].c, &t[i].a, o_ref, lse_ref, 1, NULL);
        const char *msg = fa3_last_error_message();
        printf("  reference: %s: %s\n", fa3_strerror(st), msg);
        if (st != t[i].want || !strstr(msg, t[i].w1) || !strstr(msg, t[i].w2))
            fail_msg("reference case %d: %s \"%s\", expected %s naming %s and %s", i,
                     fa3_strerror(st), msg, fa3_strerror(t[i].want), t[i].w1, t[i].w2);
    }
    if (!gpu_available(NULL, 0)) {
        /* accepted up to the driver: e4m3 inputs at odd addresses, out_dtype fp16, descales */
        a.q = (const char *)a.q + 1;
        a.descale_k = (const float *)ADDR(8);
        c8o.out_dtype = FA3_DTYPE_FP16;
        fa3_status st = fa3_reference_fwd_ex(ctx, &c8o, &a, o_ref, NULL, 0, NULL);
        printf("  reference e4m3, no GPU: %s: %s\n", fa3_strerror(st), fa3_last_error_message());
        assert_true(st == FA3_ERR_NO_DRIVER);
    }
    fa3_context_free(ctx);
}

/* ------------------------------------------------------------------------------------------- */
/* GPU: the values read back */

static int g_skipped;

#define REQUIRE_GPU_HERE()                          \
    do {                                            \
        char why_[1024];                            \
        if (!gpu_available(why_, sizeof why_)) {    \
            printf("SKIP: %s\n", why_);             \
            g_skipped++;                            \
            skip();                                 \
        }                                           \
    } while (0)

/* Real device buffers for good_args' shapes (hd 128), descales of batch 2 · 2 KV heads. */
typedef struct dev_args {
    fa3_fwd_args a;
    CUdeviceptr q, k, v, o, lse, dq, dk, dv;
} dev_args;

static void dev_args_make(dev_args *d)
{
    memset(d, 0, sizeof *d);
    const size_t n = (size_t)2 * 64 * 4 * 128;
    d->q = gpu_alloc(n);
    d->k = gpu_alloc(n / 2);
    d->v = gpu_alloc(n / 2);
    d->o = gpu_alloc(2 * n);
    d->lse = gpu_alloc((size_t)2 * 4 * 64 * 4);
    d->dq = gpu_alloc(16);
    d->dk = gpu_alloc(16);
    d->dv = gpu_alloc(16);
    d->a = good_args(128);
    d->a.q = (const void *)(uintptr_t)d->q;
    d->a.k = (const void *)(uintptr_t)d->k;
    d->a.v = (const void *)(uintptr_t)d->v;
    d->a.o = (void *)(uintptr_t)d->o;
    d->a.lse = (float *)(uintptr_t)d->lse;
    d->a.descale_q = (const float *)(uintptr_t)d->dq;
    d->a.descale_k = (const float *)(uintptr_t)d->dk;
    d->a.descale_v = (const float *)(uintptr_t)d->dv;
    /* a subnormal is positive too; descale_k's last entry keeps descale_q * descale_k a
       normal float (a vanishing product is refused: fa3_descale_products_bad) */
    const float ones[4] = {1.0f, 0.5f, 2.0f, 0x1p-130f};
    const float k_ones[4] = {1.0f, 0.5f, 2.0f, 0x1p100f};
    gpu_upload(d->dq, ones, sizeof ones);
    gpu_upload(d->dk, k_ones, sizeof k_ones);
    gpu_upload(d->dv, ones, sizeof ones);
}

static void dev_args_free(dev_args *d)
{
    CUdeviceptr *p[] = {&d->q, &d->k, &d->v, &d->o, &d->lse, &d->dq, &d->dk, &d->dv};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        gpu_free(*p[i]);
}

static void test_gpu_descale_values(void **state)
{
    (void)state;
    REQUIRE_GPU_HERE();
    fa3_kernel *k8 = fake_kernel(128, FA3_DTYPE_E4M3, FA3_MASK_NONE, 0);
    dev_args d;
    dev_args_make(&d);
    void *const streams[] = {NULL, (void *)(uintptr_t)2 /* CU_STREAM_PER_THREAD */};
    for (int si = 0; si < 2; si++) {
        printf("  stream %p\n", streams[si]);
        fa3_status st = fa3_fwd(k8, &d.a, streams[si]);
        if (st != FA3_OK)
            fail_msg("good descales refused: %s: %s", fa3_strerror(st), fa3_last_error_message());
        const float bad[] = {NAN, INFINITY, -INFINITY, -1.0f, 0.0f, -0.0f};
        const char *const shown[] = {"nan", "inf", "-inf", "-1", "0", "-0"};
        const struct { CUdeviceptr p; const char *name; } arr[3] = {
            {d.dq, "args->descale_q"}, {d.dk, "args->descale_k"}, {d.dv, "args->descale_v"}};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            const int at = (int)((b + (size_t)si) % 4); /* batch at / 2, kv head at % 2 */
            const int which = (int)(b % 3);
            float vals[4] = {1.0f, 0.5f, 2.0f, 0.25f};
            vals[at] = bad[b];
            gpu_upload(arr[which].p, vals, sizeof vals);
            char idx[32], bh[64], val[32];
            snprintf(idx, sizeof idx, "[%d]", at);
            snprintf(bh, sizeof bh, "batch %d, kv head %d", at / 2, at % 2);
            snprintf(val, sizeof val, "is %s:", shown[b]);
            fa3_status want = FA3_ERR_BAD_SCALE;
            st = fa3_fwd(k8, &d.a, streams[si]);
            const char *msg = fa3_last_error_message();
            printf("  %s at %d: %s: %s\n", shown[b], at, fa3_strerror(st), msg);
            if (st != want || !strstr(msg, arr[which].name) || !strstr(msg, idx) ||
                !strstr(msg, bh) || !strstr(msg, val))
                fail_msg("descale %s at %d of %s: got %s \"%s\", expected %s naming %s%s, %s and "
                         "%s", shown[b], at, arr[which].name, fa3_strerror(st), msg,
                         fa3_strerror(want), arr[which].name, idx, bh, val);
            /* trusted: not read, so not refused */
            d.a.descales_trusted = 1;
            st = fa3_fwd(k8, &d.a, streams[si]);
            d.a.descales_trusted = 0;
            if (st != FA3_OK)
                fail_msg("descales_trusted = 1 still refused: %s: %s", fa3_strerror(st),
                         fa3_last_error_message());
            /* NULL instead of the bad array: accepted */
            const float *keep = which == 0 ? d.a.descale_q : which == 1 ? d.a.descale_k
                                                                        : d.a.descale_v;
            if (which == 0) d.a.descale_q = NULL;
            if (which == 1) d.a.descale_k = NULL;
            if (which == 2) d.a.descale_v = NULL;
            st = fa3_fwd(k8, &d.a, streams[si]);
            if (which == 0) d.a.descale_q = keep;
            if (which == 1) d.a.descale_k = keep;
            if (which == 2) d.a.descale_v = keep;
            if (st != FA3_OK)
                fail_msg("NULL %s refused: %s: %s", arr[which].name, fa3_strerror(st),
                         fa3_last_error_message());
            const float good[4] = {1.0f, 0.5f, 2.0f, 0.25f};
            gpu_upload(arr[which].p, good, sizeof good);
        }
    }
    /* a bad value beyond the first chunk of the read (16384 floats): batch 3 · 8192 KV heads */
    fa3_kernel *k64 = fake_kernel(64, FA3_DTYPE_E4M3, FA3_MASK_NONE, 0);
    const size_t nd = (size_t)3 * 8192;
    float *vals = malloc(nd * sizeof *vals);
    assert_non_null(vals);
    for (size_t i = 0; i < nd; i++)
        vals[i] = 1.0f + (float)(i % 7);
    vals[nd - 2] = -3.0f;
    CUdeviceptr big = gpu_alloc(nd * 4), q = gpu_alloc(nd * 64), kv = gpu_alloc(nd * 64),
                o = gpu_alloc(nd * 128);
    gpu_upload(big, vals, nd * 4);
    free(vals);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)q;
    a.k = a.v = (const void *)(uintptr_t)kv;
    a.o = (void *)(uintptr_t)o;
    a.batch = 3;
    a.seqlen_q = a.seqlen_k = 1;
    a.num_heads = a.num_heads_k = 8192;
    fa3_fwd_args_set_contiguous(&a, 64, 64);
    a.descale_v = (const float *)(uintptr_t)big;
    fa3_status st = fa3_fwd(k64, &a, NULL);
    printf("  %zu descales, -3 at %zu: %s: %s\n", nd, nd - 2, fa3_strerror(st),
           fa3_last_error_message());
    assert_int_equal(st, FA3_ERR_BAD_SCALE);
    assert_non_null(strstr(fa3_last_error_message(), "args->descale_v[24574] (batch 2, kv head "
                                                     "8190) is -3"));
    gpu_free(big);
    gpu_free(q);
    gpu_free(kv);
    gpu_free(o);
    fake_free(k64);
    dev_args_free(&d);
    fake_free(k8);
}

/* The products the kernel forms from one (batch, kv head)'s descales: each descale may be valid
   while a product overflows or vanishes in fp32 (found by a helper breaking the inputs). */
static void test_descale_products(void **state)
{
    (void)state;
    const float sl2 = 0.088388f * 1.442695f, lmul = 0.088388f; /* hd128's default scale */
    double v = 0;
    assert_null(fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1.0f, 1.0f, 1.0f, &v));
    assert_null(fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1e-3f, 2e-2f, 5.0f, &v));
    const char *w = fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1e30f, 1e30f, 1.0f, &v);
    assert_non_null(w); /* 1e60: inf */
    assert_non_null(strstr(w, "descale_q * descale_k"));
    assert_true(isinf(v));
    w = fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1e-30f, 1e-20f, 1.0f, &v);
    assert_non_null(w); /* 1e-50: 0 in fp32 */
    assert_non_null(strstr(w, "descale_q * descale_k"));
    w = fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1e-19f, 1e-19f, 1.0f, &v);
    assert_non_null(w); /* dqk 1e-38 is normal-ish, times the scale it underflows */
    w = fa3_descale_products_bad(0, sl2, 1.0f, lmul, 1.0f, 1.0f, 1e37f, &v);
    assert_non_null(w); /* 448e37: inf */
    assert_non_null(strstr(w, "descale_v"));
    /* softcap: the pre-tanh factor instead of the exp2 scale; the LSE's factor is softcap */
    assert_null(fa3_descale_products_bad(1, 30.0f * 1.442695f, 0.088388f / 30.0f, 30.0f, 2.0f,
                                         3.0f, 1.0f, &v));
    w = fa3_descale_products_bad(1, 30.0f * 1.442695f, 1e-30f, 30.0f, 1e-5f, 1e-5f, 1.0f, &v);
    assert_non_null(w);
    assert_non_null(strstr(w, "softcap"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_strides_in_bytes),
        cmocka_unit_test(test_e4m3_o_in_out_dtype),
        cmocka_unit_test(test_descale_fields),
        cmocka_unit_test(test_descale_aliasing),
        cmocka_unit_test(test_descale_read_skipped),
        cmocka_unit_test(test_descale_products),
        cmocka_unit_test(test_flops_dtype_independent),
        cmocka_unit_test(test_reference_args),
        cmocka_unit_test(test_gpu_descale_values),
    };
    char why[1024];
    printf("test_fwd_args: %s\n", gpu_available(why, sizeof why) ? why : "no GPU: the CPU tests "
           "only");
    if (!gpu_available(NULL, 0))
        printf("  (%s)\n", why);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
