/*
 * test_varlen_args: fa3_fwd's and the reference's argument checks for varlen and paged-KV calls
 * (fa3jit.h "Varlen", "Paged KV"; src/runtime/varlen.c), on kernels without code: the plan of
 * the dense config of the same shape with the varlen / paged_kv flags set (the generator does not
 * generate them yet), no parts, so fa3_fwd validates, opens the device, runs the debug read-back
 * and launches nothing.
 *   CPU: each field given with a config that does not use it, or missing (half-way varlen), the
 *        ranges (max_seqlen_q/k, page_size 1..256, num_pages, max_pages_per_seq,
 *        page_table_stride), int32 alignment, the packed / paged views (batch strides unused by
 *        varlen Q/O, page strides, LSE (num_heads, total_q) in the overlap check, the int32
 *        arrays against O/LSE), and good calls of each kind accepted; the reference's rules;
 *   GPU: FA3JIT_DEBUG_VARLEN=1 reads the arrays back and names the first bad entry (cu_seqlens
 *        not starting at 0, decreasing, past the rows, longer than max_seqlen; seqused_k over
 *        capacity; a page index negative or out of range), off by default; the reference always
 *        checks. Skipped, with the reason, where there is no sm_90 device.
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

#include "runtime/runtime.h"
#include "gpu_util.h"

/* A bf16 hd128 kernel (mask) with the varlen / paged_kv flags, without code; fake_free() it. */
static fa3_kernel *fake_kernel(int varlen, int paged, fa3_mask mask, fa3_context *owner)
{
    fa3_kernel *k = calloc(1, sizeof *k);
    assert_non_null(k);
    fa3_config c;
    fa3_config_init(&c);
    c.mask = mask;
    assert_int_equal(fa3_config_canonicalize(&c, &k->cfg), FA3_OK);
    assert_int_equal(fa3_plan_make(&k->cfg, &k->plan), FA3_OK);
    k->cfg.varlen = varlen;
    k->cfg.paged_kv = paged;
    k->plan.cfg = k->cfg;
    k->op = fa3_op_for_config(&k->cfg);
    assert_non_null(k->op);
    k->num_parts = 0; /* nothing to launch */
    k->owner = owner;
    pthread_mutex_init(&k->mu, NULL);
    return k;
}

static void fake_free(fa3_kernel *k)
{
    pthread_mutex_destroy(&k->mu);
    free(k);
}

#define ADDR(n) ((uintptr_t)0x7f0000000000ull + (uintptr_t)(n) * 0x1000000ull)
#define HD 128

/* varlen 3 sequences, 100 packed query rows, 120 key rows, 4 heads over 2 KV heads; paged:
   K/V (num_pages 40, page_size 16) with a (3, 8) page table (stride 8). */
static fa3_fwd_args good_args(int varlen, int paged)
{
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)ADDR(1);
    a.k = (const void *)ADDR(2);
    a.v = (const void *)ADDR(3);
    a.o = (void *)ADDR(4);
    a.lse = (float *)ADDR(5);
    a.batch = 3;
    a.seqlen_q = varlen ? 100 : 64;
    a.seqlen_k = varlen ? 120 : 64;
    a.num_heads = 4;
    a.num_heads_k = 2;
    fa3_fwd_args_set_contiguous(&a, HD, HD);
    if (varlen) {
        a.cu_seqlens_q = (const int32_t *)ADDR(6);
        a.cu_seqlens_k = (const int32_t *)ADDR(7);
        a.max_seqlen_q = 60;
        a.max_seqlen_k = 80;
        a.q_batch_stride = a.o_batch_stride = 12345; /* not used by packed Q/O */
    }
    if (paged) {
        a.page_table = (const int32_t *)ADDR(8);
        a.num_pages = 40;
        a.page_size = 16;
        a.max_pages_per_seq = 8;
        a.page_table_stride = 8;
        a.k_batch_stride = a.v_batch_stride = 16 * 2 * HD; /* page stride */
        if (varlen)
            a.seqlen_k = 0; /* not used by varlen + paged */
    }
    return a;
}

static fa3_status validate(const fa3_kernel *k, const fa3_fwd_args *a)
{
    float scale;
    int wl, wr;
    uint32_t tiles;
    return fa3_fwd_validate(k, a, &scale, &wl, &wr, &tiles);
}

/* fa3_fwd_validate(k, a) returns want, the message naming every word (NULL-terminated). */
static void expect_refused(const fa3_kernel *k, const fa3_fwd_args *a, fa3_status want, ...)
{
    fa3_status st = validate(k, a);
    const char *msg = fa3_last_error_message();
    printf("  %s: %s\n", fa3_strerror(st), msg);
    if (st != want)
        fail_msg("fa3_fwd_validate returned %s, expected %s (%s)", fa3_strerror(st),
                 fa3_strerror(want), msg);
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

/* Good calls of every kind pass; their tile counts follow max_seqlen_q. */
static void test_good_calls(void **state)
{
    (void)state;
    for (int varlen = 0; varlen < 2; varlen++)
        for (int paged = 0; paged < 2; paged++) {
            fa3_kernel *k = fake_kernel(varlen, paged, FA3_MASK_CAUSAL, NULL);
            fa3_fwd_args a = good_args(varlen, paged);
            expect_ok(k, &a, "good");
            a.seqused_k = (const int32_t *)ADDR(9);
            if (varlen || paged)
                expect_ok(k, &a, "with seqused_k");
            if (varlen) {
                float scale;
                int wl, wr;
                uint32_t tiles;
                assert_int_equal(fa3_fwd_validate(k, &a, &scale, &wl, &wr, &tiles), FA3_OK);
                assert_int_equal(tiles, 1u * 4 * 3); /* ceil(60 / 128) * heads * batch */
                a.max_seqlen_q = 0; /* nothing to compute: valid */
                a.max_seqlen_k = 0;
                expect_ok(k, &a, "max_seqlen 0");
                /* E15: fewer tokens than sequences */
                a.seqlen_q = a.seqlen_k = 1;
                a.max_seqlen_q = 1;
                a.max_seqlen_k = paged ? 5 : 1;
                a.batch = 4;
                a.lse = (float *)ADDR(10);
                expect_ok(k, &a, "one row, four sequences");
            }
            fake_free(k);
        }
}

/* Fields of a feature the config does not have; varlen half-way. */
static void test_fields_need_their_flag(void **state)
{
    (void)state;
    fa3_kernel *dense = fake_kernel(0, 0, FA3_MASK_NONE, NULL);
    fa3_fwd_args a = good_args(0, 0);
    a.cu_seqlens_q = (const int32_t *)ADDR(6);
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "varlen = 0", NULL);
    a = good_args(0, 0);
    a.cu_seqlens_k = (const int32_t *)ADDR(6);
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_k", "varlen = 0", NULL);
    a = good_args(0, 0);
    a.max_seqlen_k = 7;
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "max_seqlen_k 7", "varlen = 0", NULL);
    a = good_args(0, 0);
    a.seqused_k = (const int32_t *)ADDR(6);
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "seqused_k", "paged_kv = 0", NULL);
    a = good_args(0, 0);
    a.page_table = (const int32_t *)ADDR(6);
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "page_table", "paged_kv = 0", NULL);
    a = good_args(0, 0);
    a.page_size = 16;
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "page_size 16", "paged_kv = 0", NULL);
    a = good_args(0, 0);
    a.page_table_stride = 3;
    expect_refused(dense, &a, FA3_ERR_INVALID_ARGUMENT, "page_table_stride 3", NULL);
    fake_free(dense);

    fa3_kernel *vl = fake_kernel(1, 0, FA3_MASK_NONE, NULL);
    a = good_args(1, 0);
    a.cu_seqlens_k = NULL;
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_k is NULL",
                   "cu_seqlens_q is given", NULL);
    a = good_args(1, 0);
    a.cu_seqlens_q = NULL;
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_q is NULL", NULL);
    a = good_args(1, 0);
    a.cu_seqlens_q = a.cu_seqlens_k = NULL;
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_q is NULL", "cu_seqlens_k",
                   NULL);
    a = good_args(1, 0);
    a.num_pages = 4;
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "num_pages 4", "paged_kv = 0", NULL);
    fake_free(vl);

    fa3_kernel *pg = fake_kernel(0, 1, FA3_MASK_NONE, NULL);
    a = good_args(0, 1);
    a.page_table = NULL;
    expect_refused(pg, &a, FA3_ERR_INVALID_ARGUMENT, "page_table is NULL", NULL);
    a = good_args(0, 1);
    a.cu_seqlens_q = (const int32_t *)ADDR(6);
    a.cu_seqlens_k = (const int32_t *)ADDR(7);
    expect_refused(pg, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "varlen = 0", NULL);
    fake_free(pg);
}

/* Ranges and alignment, each named with its value. */
static void test_ranges(void **state)
{
    (void)state;
    fa3_kernel *vl = fake_kernel(1, 0, FA3_MASK_CAUSAL, NULL);
    fa3_fwd_args a = good_args(1, 0);
    a.max_seqlen_q = -1;
    expect_refused(vl, &a, FA3_ERR_BAD_SHAPE, "max_seqlen_q -1", NULL);
    a = good_args(1, 0);
    a.max_seqlen_q = 101;
    expect_refused(vl, &a, FA3_ERR_BAD_SHAPE, "max_seqlen_q 101", "seqlen_q 100", NULL);
    a = good_args(1, 0);
    a.max_seqlen_k = 121;
    expect_refused(vl, &a, FA3_ERR_BAD_SHAPE, "max_seqlen_k 121", "0..120", NULL);
    a = good_args(1, 0);
    a.cu_seqlens_k = (const int32_t *)(ADDR(7) + 2);
    expect_refused(vl, &a, FA3_ERR_BAD_ALIGNMENT, "cu_seqlens_k", "4-byte", NULL);
    a = good_args(1, 0);
    a.seqused_k = (const int32_t *)(ADDR(9) + 1);
    expect_refused(vl, &a, FA3_ERR_BAD_ALIGNMENT, "seqused_k", NULL);
    a = good_args(1, 0);
    a.seqlen_q = 0;
    expect_refused(vl, &a, FA3_ERR_BAD_SHAPE, "seqlen_q 0", "total_q", NULL);
    a = good_args(1, 0);
    a.seqlen_k = 0;
    expect_refused(vl, &a, FA3_ERR_BAD_SHAPE, "seqlen_k 0", "total_k", NULL);
    fake_free(vl);

    fa3_kernel *pg = fake_kernel(0, 1, FA3_MASK_NONE, NULL);
    static const int bad_sizes[] = {0, -1, 257, 1024};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        a = good_args(0, 1);
        a.page_size = bad_sizes[i];
        char want[32];
        snprintf(want, sizeof want, "page_size %d", bad_sizes[i]);
        expect_refused(pg, &a, FA3_ERR_BAD_SHAPE, want, "1..256", NULL);
    }
    static const int good_sizes[] = {1, 7, 16, 64, 100, 256};
    for (size_t i = 0; i < sizeof good_sizes / sizeof good_sizes[0]; i++) {
        a = good_args(0, 1);
        a.page_size = good_sizes[i];
        a.seqlen_k = good_sizes[i] * a.max_pages_per_seq; /* the full capacity */
        a.k_batch_stride = a.v_batch_stride = (int64_t)good_sizes[i] * 2 * HD;
        expect_ok(pg, &a, "page size");
    }
    a = good_args(0, 1);
    a.num_pages = 0;
    expect_refused(pg, &a, FA3_ERR_BAD_SHAPE, "num_pages 0", NULL);
    a = good_args(0, 1);
    a.max_pages_per_seq = 0;
    expect_refused(pg, &a, FA3_ERR_BAD_SHAPE, "max_pages_per_seq 0", NULL);
    a = good_args(0, 1);
    a.page_table_stride = 7;
    expect_refused(pg, &a, FA3_ERR_BAD_STRIDE, "page_table_stride 7", "max_pages_per_seq 8",
                   NULL);
    a = good_args(0, 1);
    a.page_table = (const int32_t *)(ADDR(8) + 2);
    expect_refused(pg, &a, FA3_ERR_BAD_ALIGNMENT, "page_table", NULL);
    a = good_args(0, 1);
    a.seqlen_k = 129; /* capacity 8 * 16 = 128 */
    expect_refused(pg, &a, FA3_ERR_BAD_SHAPE, "seqlen_k 129", "capacity", "128", NULL);
    a = good_args(0, 1);
    a.page_table_stride = (int64_t)1 << 31;
    expect_refused(pg, &a, FA3_ERR_BAD_SHAPE, "page_table_stride", NULL);
    /* page strides: TMA's rule (multiples of 16 bytes), with num_pages as the extent */
    a = good_args(0, 1);
    a.k_batch_stride = 16 * 2 * HD + 4;
    expect_refused(pg, &a, FA3_ERR_BAD_STRIDE, "k_batch_stride", NULL);
    a = good_args(0, 1);
    a.v_row_stride = 2 * HD + 3;
    expect_refused(pg, &a, FA3_ERR_BAD_STRIDE, "v_row_stride", NULL);
    fake_free(pg);

    fa3_kernel *both = fake_kernel(1, 1, FA3_MASK_LOCAL, NULL);
    a = good_args(1, 1);
    a.max_seqlen_k = 129; /* capacity 128 */
    expect_refused(both, &a, FA3_ERR_BAD_SHAPE, "max_seqlen_k 129", "capacity", NULL);
    a = good_args(1, 1);
    a.max_seqlen_k = 128;
    a.window_size_left = 5000;
    expect_ok(both, &a, "a window wider than every sequence");
    fake_free(both);
}

/* Packed Q/O ignore their batch strides; LSE is (num_heads, total_q); the int32 arrays must not
   meet O or LSE; paged K/V span num_pages pages. */
static void test_views_and_overlap(void **state)
{
    (void)state;
    fa3_kernel *vl = fake_kernel(1, 0, FA3_MASK_NONE, NULL);
    fa3_fwd_args a = good_args(1, 0);
    a.o_batch_stride = 3; /* odd, would be refused by a dense call */
    a.q_batch_stride = 5;
    expect_ok(vl, &a, "batch strides unused");
    /* LSE right after O's last byte is fine; one float earlier overlaps */
    const uintptr_t o_bytes = (uintptr_t)100 * 4 * HD * 2;
    a = good_args(1, 0);
    a.lse = (float *)(ADDR(4) + o_bytes);
    expect_ok(vl, &a, "lse after o");
    a.lse = (float *)(ADDR(4) + o_bytes - 4);
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "lse", "overlaps", NULL);
    /* cu_seqlens_q just past LSE's 4 * 100 floats: fine; inside it: refused */
    a = good_args(1, 0);
    a.cu_seqlens_q = (const int32_t *)(ADDR(5) + 4 * 4 * 100);
    expect_ok(vl, &a, "cu_seqlens_q after lse");
    a.cu_seqlens_q = (const int32_t *)(ADDR(5) + 4 * 4 * 100 - 4);
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "cu_seqlens_q", "overlaps args->lse", NULL);
    a = good_args(1, 0);
    a.seqused_k = (const int32_t *)(ADDR(4) + 64);
    expect_refused(vl, &a, FA3_ERR_INVALID_ARGUMENT, "seqused_k", "overlaps args->o", NULL);
    fake_free(vl);

    fa3_kernel *pg = fake_kernel(0, 1, FA3_MASK_NONE, NULL);
    /* K spans 40 pages of 16 rows: O right before K's last page overlaps it */
    a = good_args(0, 1);
    a.o = (void *)(ADDR(2) + (uintptr_t)39 * 16 * 2 * HD * 2);
    expect_refused(pg, &a, FA3_ERR_INVALID_ARGUMENT, "args->o", "overlaps args->k", NULL);
    a = good_args(0, 1);
    a.page_table = (const int32_t *)(ADDR(5) + 8); /* inside LSE */
    expect_refused(pg, &a, FA3_ERR_INVALID_ARGUMENT, "page_table", "overlaps args->lse", NULL);
    fake_free(pg);
}

/* FLOPs are unknown on the host when the lengths live on the device. */
static void test_flops(void **state)
{
    (void)state;
    fa3_config c;
    fa3_config_init(&c);
    fa3_fwd_args a = good_args(0, 1);
    c.paged_kv = 1;
    assert_true(fa3_fwd_flops(&c, &a) > 0); /* every sequence has seqlen_k keys */
    a.seqused_k = (const int32_t *)ADDR(9);
    assert_true(fa3_fwd_flops(&c, &a) == 0.0);
    c.varlen = 1;
    a = good_args(1, 0);
    assert_true(fa3_fwd_flops(&c, &a) == 0.0);
}

/* The reference takes the same rules (its messages say "reference: "). */
static void test_reference_rules(void **state)
{
    (void)state;
    fa3_context *ctx = NULL;
    assert_int_equal(fa3_context_create(&ctx, NULL), FA3_OK);
    fa3_config c;
    fa3_config_init(&c);
    c.varlen = 1;
    fa3_fwd_args a = good_args(1, 0);
    a.cu_seqlens_k = NULL;
    float *o_ref = (float *)ADDR(20);
    assert_int_equal(fa3_reference_fwd(ctx, &c, &a, o_ref, NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "reference: args->cu_seqlens_k is NULL"));
    c.varlen = 0;
    c.paged_kv = 1;
    a = good_args(0, 1);
    a.page_size = 300;
    assert_int_equal(fa3_reference_fwd(ctx, &c, &a, o_ref, NULL, NULL), FA3_ERR_BAD_SHAPE);
    assert_non_null(strstr(fa3_last_error_message(), "reference: args->page_size 300"));
    c.paged_kv = 0;
    a = good_args(0, 0);
    a.seqused_k = (const int32_t *)ADDR(9);
    assert_int_equal(fa3_reference_fwd(ctx, &c, &a, o_ref, NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "seqused_k"));
    fa3_context_free(ctx);
}

/* ------------------------------------------------------------------------------------------- */
/* GPU: the device arrays read back (FA3JIT_DEBUG_VARLEN=1, and the reference always) */

#define REQUIRE_GPU_HERE()                          \
    do {                                            \
        char why_[1024];                            \
        if (!gpu_available(why_, sizeof why_)) {    \
            printf("SKIP: %s\n", why_);             \
            skip();                                 \
        }                                           \
    } while (0)

typedef struct dev_arrays {
    CUdeviceptr cu_q, cu_k, used, pages;
} dev_arrays;

/* good_args(1, paged)'s arrays: 3 sequences of 40/0/60 queries (100 rows), 50/30/40 keys
   (120 rows; paged: seqused_k 50/30/40 over 4/2/3 pages of 16 from a shuffled table). */
static const int32_t good_cu_q[4] = {0, 40, 40, 100}, good_cu_k[4] = {0, 50, 80, 120};
static const int32_t good_used[3] = {50, 30, 40};
static const int32_t good_pages[24] = {5, 39, 0, 7, -1, -1, -1, -1, /* -1: never read */
                                       12, 5, 99, 99, 99, 99, 99, 99, 33, 2, 21, 0, 0, 0, 0, 0};

static void arrays_upload(dev_arrays *d, const int32_t cu_q[4], const int32_t cu_k[4],
                          const int32_t used[3], const int32_t pages[24])
{
    gpu_upload(d->cu_q, cu_q, 16);
    gpu_upload(d->cu_k, cu_k, 16);
    gpu_upload(d->used, used, 12);
    gpu_upload(d->pages, pages, 96);
}

/* fa3_fwd (debug on) and the reference must both refuse with want, naming the words. */
static void both_refuse(fa3_kernel *k, fa3_context *ctx, const fa3_fwd_args *a, fa3_status want,
                        const char *w1, const char *w2)
{
    for (int ref = 0; ref < 2; ref++) {
        fa3_status st = ref ? fa3_reference_fwd(ctx, &k->cfg, a, (float *)ADDR(20), NULL, NULL)
                            : fa3_fwd(k, a, NULL);
        const char *msg = fa3_last_error_message();
        printf("  %s: %s: %s\n", ref ? "reference" : "fa3_fwd", fa3_strerror(st), msg);
        if (st != want)
            fail_msg("%s returned %s, expected %s (%s)", ref ? "reference" : "fa3_fwd",
                     fa3_strerror(st), fa3_strerror(want), msg);
        if (!strstr(msg, w1) || (w2 && !strstr(msg, w2)))
            fail_msg("message \"%s\" does not name \"%s\" / \"%s\"", msg, w1, w2 ? w2 : "");
        if (ref && !strstr(msg, "reference: "))
            fail_msg("the reference's message \"%s\" does not say \"reference: \"", msg);
    }
}

static void test_gpu_debug_read_back(void **state)
{
    (void)state;
    REQUIRE_GPU_HERE();
    setenv("FA3JIT_DEBUG_VARLEN", "1", 1);
    fa3_context *dbg = NULL;
    assert_int_equal(fa3_context_create(&dbg, NULL), FA3_OK);
    unsetenv("FA3JIT_DEBUG_VARLEN");
    fa3_context *off = NULL;
    assert_int_equal(fa3_context_create(&off, NULL), FA3_OK);
    assert_int_equal(dbg->debug_varlen, 1);
    assert_int_equal(off->debug_varlen, 0);
    dev_arrays d = {gpu_alloc(16), gpu_alloc(16), gpu_alloc(12), gpu_alloc(96)};
    for (int paged = 0; paged < 2; paged++) {
        fa3_kernel *k = fake_kernel(1, paged, FA3_MASK_CAUSAL, dbg);
        fa3_kernel *k_off = fake_kernel(1, paged, FA3_MASK_CAUSAL, off);
        fa3_fwd_args a = good_args(1, paged);
        a.cu_seqlens_q = (const int32_t *)(uintptr_t)d.cu_q;
        a.cu_seqlens_k = (const int32_t *)(uintptr_t)d.cu_k;
        a.seqused_k = (const int32_t *)(uintptr_t)d.used;
        if (paged)
            a.page_table = (const int32_t *)(uintptr_t)d.pages;
        a.max_seqlen_q = 60;
        a.max_seqlen_k = 50;
        arrays_upload(&d, good_cu_q, good_cu_k, good_used, good_pages);
        if (fa3_fwd(k, &a, NULL) != FA3_OK)
            fail_msg("good arrays refused: %s", fa3_last_error_message());
        void *stream = (void *)(uintptr_t)2; /* CU_STREAM_PER_THREAD */
        if (fa3_fwd(k, &a, stream) != FA3_OK)
            fail_msg("good arrays refused on a stream: %s", fa3_last_error_message());

        const int32_t start1[4] = {1, 40, 40, 100}, decr[4] = {0, 50, 40, 100},
                      past[4] = {0, 40, 40, 101}, longq[4] = {0, 70, 80, 100};
        arrays_upload(&d, start1, good_cu_k, good_used, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "cu_seqlens_q[0] is 1", "start at 0");
        assert_int_equal(fa3_fwd(k_off, &a, NULL), FA3_OK); /* off: not read */
        arrays_upload(&d, decr, good_cu_k, good_used, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "cu_seqlens_q[2] = 40", "decrease");
        arrays_upload(&d, past, good_cu_k, good_used, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "cu_seqlens_q[3] = 101", "100 rows");
        arrays_upload(&d, longq, good_cu_k, good_used, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "sequence 0 has 70 rows", "max_seqlen_q 60");
        const int32_t used_big[3] = {50, paged ? 129 : 31, 40};
        arrays_upload(&d, good_cu_q, good_cu_k, used_big, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, paged ? "seqused_k[1] = 129" : "seqused_k[1] = 31",
                    paged ? "capacity" : "length");
        const int32_t used_neg[3] = {50, -1, 40};
        arrays_upload(&d, good_cu_q, good_cu_k, used_neg, good_pages);
        both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "seqused_k[1] = -1", NULL);
        if (!paged) {
            const int32_t kpast[4] = {0, 50, 80, 121};
            arrays_upload(&d, good_cu_q, kpast, good_used, good_pages);
            both_refuse(k, dbg, &a, FA3_ERR_BAD_SHAPE, "cu_seqlens_k[3] = 121", "120 rows");
        } else {
            int32_t pages[24];
            memcpy(pages, good_pages, sizeof pages);
            pages[2 * 8 + 2] = 40; /* sequence 2's third page: keys 32..39 */
            arrays_upload(&d, good_cu_q, good_cu_k, good_used, pages);
            both_refuse(k, dbg, &a, FA3_ERR_INVALID_ARGUMENT, "page_table[2][2] = 40",
                        "keys 32..39");
            pages[2 * 8 + 2] = -3;
            arrays_upload(&d, good_cu_q, good_cu_k, good_used, pages);
            both_refuse(k, dbg, &a, FA3_ERR_INVALID_ARGUMENT, "page_table[2][2] = -3", NULL);
            assert_int_equal(fa3_fwd(k_off, &a, NULL), FA3_OK);
            /* seqused_k 0: no page read at all */
            const int32_t used0[3] = {50, 30, 0};
            arrays_upload(&d, good_cu_q, good_cu_k, used0, pages);
            assert_int_equal(fa3_fwd(k, &a, NULL), FA3_OK);
        }
        fake_free(k);
        fake_free(k_off);
    }
    gpu_free(d.cu_q);
    gpu_free(d.cu_k);
    gpu_free(d.used);
    gpu_free(d.pages);
    fa3_context_free(dbg);
    fa3_context_free(off);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_calls),
        cmocka_unit_test(test_fields_need_their_flag),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_views_and_overlap),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_reference_rules),
        cmocka_unit_test(test_gpu_debug_read_back),
    };
    char why[1024];
    if (!gpu_available(why, sizeof why))
        printf("test_varlen_args: no GPU, the CPU tests only (%s)\n", why);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
