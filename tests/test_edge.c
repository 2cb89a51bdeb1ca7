/*
 * test_edge: the attention edge cases every release must pass (shared/cases/attention-edge-cases.md,
 * E1–E14), plus GQA ratios and every supported head dimension, on the GPU. Each test needs a CUDA
 * driver and an sm_90 device; without one it prints "SKIP: <reason>" and is skipped (the process
 * exits 77, meson's SKIP, when every GPU test skipped).
 *
 * Rules (as tests/test_gpu.c): O and LSE are pre-filled with NaN so an unwritten element fails;
 * max|O − ref| ≤ 2·max|O_emul − ref| + 1e-3 and |LSE − LSE_ref| ≤ 1e-3, where ref is the library's
 * fp32 NVRTC reference and O_emul the reference that rounds P and O to the kernel's dtype; a row
 * that sees no key must be exactly O = 0, LSE = −inf. Inputs are random from a fresh seed each run
 * (printed; repeat a run with FA3JIT_TEST_SEED=<seed>).
 *
 * Every device tensor lives inside a larger allocation that is NaN everywhere the tensor has no
 * element: guards before and after it, and (for the padded and permuted layouts) the gaps between
 * its rows or heads. A kernel that reads outside a Q/K/V tensor pulls NaN into O (for V even where
 * the key is masked, since 0·NaN = NaN); every O and LSE position outside the tensor must still hold
 * its NaN after the call (nothing written outside).
 *
 * Tests:
 *   e1_tile_boundaries    E1: all 144 (seqlen_q, seqlen_k) pairs of {1, 2, 63, 64, 65, 127, 128,
 *                         129, 191, 255, 257, 1000}, hd128 bf16, none and causal; NaN guards around
 *                         Q/K/V/O/LSE: matches the reference, nothing read or written outside
 *   e2_single_key         E2: seqlen 1/1, hd64 fp16: O = v bit for bit, LSE = q·k·scale
 *   e3_identical_keys     E3: all keys equal → O = mean of the visible v rows, LSE = s + ln(n)
 *   e4_e5_causal_empty    E4/E5: causal 2048/1024 and 8/3: the rows that see no key are exactly
 *                         O = 0, LSE = −inf (and their count is right); the rest match
 *   e6_local_full_window  E6: local (−1, 1<<20) and other all-covering windows, sq 256 > sk 128,
 *                         fp16 hd64 == full attention (within tolerance) and the reference
 *   e7_local_causal       E7: local (−1, 0) == causal, bit for bit, O and LSE
 *   e8_softcap_saturate   E8: softcap 50, scaled scores near ±5000: O finite, matches the tanh
 *                         reference; LSE finite and ≤ 50 + ln(seqlen_k)
 *   e9_bad_head_dim       E9: head_dim 72 and 512, (128, 72): FA3_ERR_BAD_HEAD_DIM(_V) naming the
 *                         value, no kernel, no PTX; with a GPU, a NaN O buffer stays untouched
 *   e10_strided_views     E10: Q/K/V made (b, h, s, d), passed with (b, s, h, d) strides, hd256,
 *                         seqlen 8192, 32 heads == contiguous copies: bitwise (the same kernel on
 *                         the same values; the case's bound is 5e-4, max |ΔO| printed); three row
 *                         blocks vs the reference
 *   e11_kv_head_stride0   E11: K/V broadcast across heads with head stride 0, seqlen_k 289 ==
 *                         materialized copies, bitwise; vs the reference (none and causal)
 *   e12_deterministic     E12: the same inputs twice → bitwise identical O and LSE
 *   e13_large_grids       E13: batch·heads > 65535 at seqlen 1 (1024·80, 1·70000), and causal
 *                         seqlen 131072 (sampled row blocks vs the reference, every row written)
 *   e14_nan_row           E14: NaN in one Q row → that O row all NaN (LSE not finite), every other row
 *                         bitwise equal to the NaN-free run and within tolerance of the reference
 *   gqa_ratios            num_heads 8 with num_heads_k 1, 2, 4, 8 at (128, 128), (1000, 257),
 *                         none and causal
 *   head_dims             64, 96, 128, 192, 256 and (192, 128), bf16 causal, with NaN gaps between
 *                         heads in Q/K/V/O (skipped with a note when this build lacks the size)
 *
 * Environment: FA3JIT_TEST_SEED=<n> repeats a run; FA3JIT_TEST_FILTER=<glob> runs matching tests
 * only (cmocka_set_test_filter, e.g. "test_e1*"); FA3JIT_TEST_SMALL=1 shrinks E10 (seqlen 1024,
 * 4 heads) and the long E13 case (seqlen 8192) for slow emulated drivers.
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
#include <time.h>

#include "fa3jit.h"
#include "gpu_util.h"
#include "check.h"

static fa3_context *g_ctx;
static uint64_t g_seed;
static int g_skipped;
static int g_small;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail_msg("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

/* ------------------------------------------------------------------------------------------- */
/* Device tensors with layouts, guards and NaN gaps. */

typedef enum lay_kind {
    LAY_BSHD = 0,   /* (batch, seqlen, heads, dim), heads padded by pad elements */
    LAY_BHSD = 1,   /* (batch, heads, seqlen, dim) storage, rows padded by pad elements */
    LAY_HEAD_BCAST = 2 /* one head stored, head stride 0 (all heads read it) */
} lay_kind;

typedef struct layout {
    lay_kind kind;
    int pad;          /* NaN elements after each innermost row of dim elements (even; a multiple
                         of 8 for Q/K/V, which TMA reads) */
    size_t pre, post; /* NaN guard elements before and after (even; a multiple of 8 for Q/K/V) */
} layout;

typedef struct tensor16 {
    int b, s, h, d;
    int64_t bs, rs, hs; /* element strides */
    size_t pre, total;  /* guard before; allocation size in elements */
    CUdeviceptr base;
} tensor16;

static void tensor_plan(tensor16 *t, const layout *l, int b, int s, int h, int d)
{
    memset(t, 0, sizeof *t);
    t->b = b;
    t->s = s;
    t->h = h;
    t->d = d;
    int64_t row = (int64_t)d + l->pad;
    switch (l->kind) {
    case LAY_BSHD:
        t->hs = row;
        t->rs = (int64_t)h * row;
        t->bs = (int64_t)s * t->rs;
        break;
    case LAY_BHSD:
        t->rs = row;
        t->hs = (int64_t)s * row;
        t->bs = (int64_t)h * t->hs;
        break;
    case LAY_HEAD_BCAST:
        t->hs = 0;
        t->rs = row;
        t->bs = (int64_t)s * row;
        break;
    }
    assert_true(l->pre % 2 == 0 && l->pad % 2 == 0); /* even: O is written in element pairs */
    size_t span = (size_t)((int64_t)(b - 1) * t->bs + (int64_t)(s - 1) * t->rs +
                           (int64_t)(h - 1) * t->hs + d);
    t->pre = l->pre;
    t->total = l->pre + span + l->post;
}

static size_t tensor_at(const tensor16 *t, int b, int s, int h, int c)
{
    return t->pre + (size_t)((int64_t)b * t->bs + (int64_t)s * t->rs + (int64_t)h * t->hs) +
           (size_t)c;
}

/* Dense host index of (b, s, h, c) in a contiguous (b, s, h, d) array. */
static size_t dense_at(int s_, int h_, int d_, int b, int s, int h, int c)
{
    return (((size_t)b * s_ + s) * h_ + h) * d_ + c;
}

/* Allocates t, writes the dense values at their strided places and NaN everywhere else. */
static void tensor_upload(tensor16 *t, const uint16_t *dense, fa3_dtype dt)
{
    uint16_t *img = xcalloc(t->total, 2);
    uint16_t nan = nan16_bits(dt);
    for (size_t i = 0; i < t->total; i++)
        img[i] = nan;
    for (int b = 0; b < t->b; b++)
        for (int s = 0; s < t->s; s++)
            for (int h = 0; h < t->h; h++) {
                const uint16_t *src = dense + dense_at(t->s, t->h, t->d, b, s, h, 0);
                uint16_t *dst = img + tensor_at(t, b, s, h, 0);
                if (t->hs == 0 && h > 0) { /* broadcast: every head must hold the same values */
                    if (memcmp(dst, src, (size_t)t->d * 2) != 0)
                        fail_msg("test bug: head-broadcast tensor with different heads");
                    continue;
                }
                memcpy(dst, src, (size_t)t->d * 2);
            }
    t->base = gpu_alloc(t->total * 2);
    gpu_upload(t->base, img, t->total * 2);
    free(img);
}

static const void *tensor_ptr(const tensor16 *t)
{
    return (const void *)(uintptr_t)(t->base + t->pre * 2);
}

/* ------------------------------------------------------------------------------------------- */
/* One attention problem: dense host inputs (logical (b, s, h, d) order), device tensors in the
   chosen layouts, the kernel's outputs and the references. */

typedef struct spec {
    int hd, hdv;        /* hdv 0 = hd */
    fa3_dtype dt;
    fa3_mask mask;
    int softcap;        /* config flag */
    float softcap_value;
    int wl, wr;         /* FA3_MASK_LOCAL windows */
    int batch, sq, sk, h, hk;
} spec;

typedef struct prob {
    spec s;
    fa3_config cfg;
    fa3_kernel *kernel;
    int d, dv;
    layout lq, lk, lv, lo;
    size_t lse_pre, lse_post;
    size_t nq, nk, nv, no, nlse;
    uint16_t *q, *k, *v;      /* dense inputs */
    uint16_t *o;              /* dense copy of the kernel's O */
    float *lse;               /* the kernel's LSE */
    float *ref, *ref_lse, *emul;
    uint8_t *ref_rows;        /* query rows the references cover */
    tensor16 tq, tk, tv, to;
    CUdeviceptr dlse;
    size_t lse_total;
    fa3_fwd_args args;
    size_t o_outside_written, lse_outside_written; /* from the last run */
    size_t o_outside_first;
} prob;

/* Seeds each case's generator from the run's seed and the case's identity. */
static void case_rng(host_rng *r, uint64_t salt)
{
    rng_init(r, g_seed ^ (salt * 0x9E3779B97F4A7C15ull));
}

/* Normal inputs (uniform for tensors above 4M elements, where Box–Muller takes seconds). */
static void fill_random(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    if (n > ((size_t)1 << 22))
        fill_uniform(r, dst, n, dt, scale);
    else
        fill_normal(r, dst, n, dt, scale);
}

/* A problem of shape s with random normal Q, K, V from the case's generator (case_rng(salt)),
   default layouts (contiguous, NaN guards around every tensor) that the case may change before
   prob_upload. */
static void prob_init(prob *p, const spec *s, uint64_t salt)
{
    memset(p, 0, sizeof *p);
    p->s = *s;
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = s->hd;
    c.head_dim_v = s->hdv;
    c.dtype = s->dt;
    c.mask = s->mask;
    c.softcap = s->softcap;
    CHECK(fa3_config_canonicalize(&c, &p->cfg));
    CHECK(fa3_jit_get_kernel(g_ctx, &p->cfg, &p->kernel));
    p->d = p->cfg.head_dim;
    p->dv = p->cfg.head_dim_v;
    p->nq = (size_t)s->batch * s->sq * s->h * p->d;
    p->nk = (size_t)s->batch * s->sk * s->hk * p->d;
    p->nv = (size_t)s->batch * s->sk * s->hk * p->dv;
    p->no = (size_t)s->batch * s->sq * s->h * p->dv;
    p->nlse = (size_t)s->batch * s->h * s->sq;
    p->q = xcalloc(p->nq, 2);
    p->k = xcalloc(p->nk, 2);
    p->v = xcalloc(p->nv, 2);
    p->o = xcalloc(p->no, 2);
    p->lse = xcalloc(p->nlse, 4);
    p->ref = xcalloc(p->no, 4);
    p->emul = xcalloc(p->no, 4);
    p->ref_lse = xcalloc(p->nlse, 4);
    p->ref_rows = xcalloc((size_t)s->sq, 1);
    /* default layouts: contiguous, with NaN guards around every tensor */
    p->lq = p->lk = p->lv = (layout){LAY_BSHD, 0, 256, 2048};
    p->lo = (layout){LAY_BSHD, 0, 256, 4096};
    p->lse_pre = 64;
    p->lse_post = 1024;
    host_rng r;
    case_rng(&r, salt);
    fill_random(&r, p->q, p->nq, s->dt, 1.0);
    fill_random(&r, p->k, p->nk, s->dt, 1.0);
    fill_random(&r, p->v, p->nv, s->dt, 1.0);
}

static void prob_free_device(prob *p)
{
    gpu_free(p->tq.base);
    gpu_free(p->tk.base);
    gpu_free(p->tv.base);
    gpu_free(p->to.base);
    gpu_free(p->dlse);
    p->tq.base = p->tk.base = p->tv.base = p->to.base = p->dlse = 0;
}

/* (Re)creates the device tensors in the current layouts from the dense inputs; sets args. */
static void prob_upload(prob *p)
{
    const spec *s = &p->s;
    prob_free_device(p);
    tensor_plan(&p->tq, &p->lq, s->batch, s->sq, s->h, p->d);
    tensor_plan(&p->tk, &p->lk, s->batch, s->sk, s->hk, p->d);
    tensor_plan(&p->tv, &p->lv, s->batch, s->sk, s->hk, p->dv);
    tensor_plan(&p->to, &p->lo, s->batch, s->sq, s->h, p->dv);
    assert_true(p->lo.kind != LAY_HEAD_BCAST || s->h == 1);
    tensor_upload(&p->tq, p->q, s->dt);
    tensor_upload(&p->tk, p->k, s->dt);
    tensor_upload(&p->tv, p->v, s->dt);
    p->to.base = gpu_alloc(p->to.total * 2);
    p->lse_total = p->lse_pre + p->nlse + p->lse_post;
    p->dlse = gpu_alloc(p->lse_total * 4);

    fa3_fwd_args *a = &p->args;
    fa3_fwd_args_init(a);
    a->q = tensor_ptr(&p->tq);
    a->k = tensor_ptr(&p->tk);
    a->v = tensor_ptr(&p->tv);
    a->o = (void *)(uintptr_t)tensor_ptr(&p->to);
    a->lse = (float *)(uintptr_t)(p->dlse + p->lse_pre * 4);
    a->batch = s->batch;
    a->seqlen_q = s->sq;
    a->seqlen_k = s->sk;
    a->num_heads = s->h;
    a->num_heads_k = s->hk;
    a->q_batch_stride = p->tq.bs;
    a->q_row_stride = p->tq.rs;
    a->q_head_stride = p->tq.hs;
    a->k_batch_stride = p->tk.bs;
    a->k_row_stride = p->tk.rs;
    a->k_head_stride = p->tk.hs;
    a->v_batch_stride = p->tv.bs;
    a->v_row_stride = p->tv.rs;
    a->v_head_stride = p->tv.hs;
    a->o_batch_stride = p->to.bs;
    a->o_row_stride = p->to.rs;
    a->o_head_stride = p->to.hs;
    a->softcap = s->softcap ? s->softcap_value : 0.0f;
    if (s->mask == FA3_MASK_LOCAL) {
        a->window_size_left = s->wl;
        a->window_size_right = s->wr;
    }
}

/* Fills O's and LSE's whole allocations with NaN, runs fa3_fwd, reads O (dense) and LSE back and
   counts positions outside the tensors that no longer hold their NaN. Returns fa3_fwd's status
   (outputs are read back either way). */
static fa3_status prob_run(prob *p)
{
    const fa3_dtype dt = p->s.dt;
    gpu_fill_nan16(p->to.base, p->to.total, dt);
    gpu_fill_nan32(p->dlse, p->lse_total);
    gpu_sync();
    fa3_status st = fa3_fwd(p->kernel, &p->args, NULL);
    gpu_sync();

    uint16_t *img = xcalloc(p->to.total, 2);
    gpu_download(img, p->to.base, p->to.total * 2);
    const uint16_t nan = nan16_bits(dt);
    for (int b = 0; b < p->s.batch; b++)
        for (int i = 0; i < p->s.sq; i++)
            for (int h = 0; h < p->s.h; h++) {
                uint16_t *src = img + tensor_at(&p->to, b, i, h, 0);
                memcpy(p->o + dense_at(p->s.sq, p->s.h, p->dv, b, i, h, 0), src,
                       (size_t)p->dv * 2);
                for (int c = 0; c < p->dv; c++)
                    src[c] = nan; /* so that only positions outside O remain to be checked */
            }
    p->o_outside_written = 0;
    p->o_outside_first = (size_t)-1;
    for (size_t i = 0; i < p->to.total; i++)
        if (img[i] != nan && p->o_outside_written++ == 0)
            p->o_outside_first = i;
    free(img);

    float *limg = xcalloc(p->lse_total, 4);
    gpu_download(limg, p->dlse, p->lse_total * 4);
    memcpy(p->lse, limg + p->lse_pre, p->nlse * 4);
    p->lse_outside_written = 0;
    for (size_t i = 0; i < p->lse_total; i++) {
        if (i >= p->lse_pre && i < p->lse_pre + p->nlse)
            continue;
        uint32_t u;
        memcpy(&u, &limg[i], 4);
        p->lse_outside_written += u != NAN32_BITS;
    }
    free(limg);
    return st;
}

#define RUN_OK(p)                                                                        \
    do {                                                                                 \
        fa3_status st_ = prob_run(p);                                                    \
        if (st_ != FA3_OK)                                                               \
            fail_msg("fa3_fwd: %s: %s", fa3_strerror(st_), fa3_last_error_message());    \
    } while (0)

/* References for query rows [r0, r0 + n) (all batches and heads). Rows are cut out as a view:
   q advanced by r0 rows, seqlen_q = n, and for the causal mask seqlen_k = r0 + n + sk − sq keys,
   which keeps every row's bottom-right-aligned diagonal where it was (rows that would see no key
   at all are filled in as O = 0, LSE = −inf without a call). */
static void prob_reference_rows(prob *p, int r0, int n)
{
    const spec *s = &p->s;
    assert_true(r0 >= 0 && n >= 1 && r0 + n <= s->sq);
    fa3_fwd_args a = p->args;
    a.q = (const char *)a.q + (size_t)r0 * (size_t)a.q_row_stride * 2;
    a.seqlen_q = n;
    int empty = 0;
    if (s->mask == FA3_MASK_CAUSAL) {
        int64_t skv = (int64_t)r0 + n + s->sk - s->sq;
        if (skv < 1)
            empty = 1;
        else
            a.seqlen_k = (int)skv;
    } else if (s->mask == FA3_MASK_LOCAL && (r0 != 0 || n != s->sq)) {
        fail_msg("test bug: row-block references support the none and causal masks only");
    }
    size_t vo = (size_t)s->batch * n * s->h * p->dv, vl = (size_t)s->batch * s->h * n;
    float *ho = xcalloc(vo, 4), *he = xcalloc(vo, 4), *hl = xcalloc(vl, 4);
    if (empty) {
        for (size_t i = 0; i < vl; i++)
            hl[i] = -INFINITY;
    } else {
        CUdeviceptr dref = gpu_alloc(vo * 4), demu = gpu_alloc(vo * 4), dl = gpu_alloc(vl * 4);
        gpu_fill_nan32(dref, vo);
        gpu_fill_nan32(demu, vo);
        gpu_fill_nan32(dl, vl);
        CHECK(fa3_reference_fwd_ex(g_ctx, &p->cfg, &a, (float *)(uintptr_t)dref,
                                   (float *)(uintptr_t)dl, 0, NULL));
        CHECK(fa3_reference_fwd_ex(g_ctx, &p->cfg, &a, (float *)(uintptr_t)demu, NULL, 1, NULL));
        gpu_sync();
        gpu_download(ho, dref, vo * 4);
        gpu_download(he, demu, vo * 4);
        gpu_download(hl, dl, vl * 4);
        gpu_free(dref);
        gpu_free(demu);
        gpu_free(dl);
    }
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < s->h; h++) {
                size_t src = dense_at(n, s->h, p->dv, b, i, h, 0);
                size_t dst = dense_at(s->sq, s->h, p->dv, b, r0 + i, h, 0);
                memcpy(p->ref + dst, ho + src, (size_t)p->dv * 4);
                memcpy(p->emul + dst, he + src, (size_t)p->dv * 4);
                p->ref_lse[((size_t)b * s->h + h) * s->sq + r0 + i] =
                    hl[((size_t)b * s->h + h) * n + i];
            }
    for (int i = 0; i < n; i++)
        p->ref_rows[r0 + i] = 1;
    free(ho);
    free(he);
    free(hl);
}

static void prob_reference(prob *p)
{
    prob_reference_rows(p, 0, p->s.sq);
}

static void prob_free(prob *p)
{
    prob_free_device(p);
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o);
    free(p->lse);
    free(p->ref);
    free(p->emul);
    free(p->ref_lse);
    free(p->ref_rows);
    memset(p, 0, sizeof *p);
}

/* Visible keys [lo, hi] of query row i (bottom-right aligned); empty when lo > hi. */
static void row_range(const spec *s, int i, int64_t *lo, int64_t *hi)
{
    int64_t diag = (int64_t)i + s->sk - s->sq;
    *lo = 0;
    *hi = s->sk - 1;
    if (s->mask == FA3_MASK_CAUSAL) {
        if (diag < *hi)
            *hi = diag;
    } else if (s->mask == FA3_MASK_LOCAL) {
        if (s->wl >= 0 && diag - s->wl > *lo)
            *lo = diag - s->wl;
        if (s->wr >= 0 && diag + s->wr < *hi)
            *hi = diag + s->wr;
    }
}

static float o_at(const prob *p, int b, int i, int h, int c)
{
    return dtype_to_f32(p->s.dt, p->o[dense_at(p->s.sq, p->s.h, p->dv, b, i, h, c)]);
}

static size_t lse_at(const prob *p, int b, int h, int i)
{
    return ((size_t)b * p->s.h + h) * p->s.sq + i;
}

typedef struct check_res {
    tol_acc acc; /* the measures of tools/common/tolerance.h */
    double tol;  /* tol_o_bound(&acc) */
    size_t rows_ref, rows_empty, rows_total;
    int failed;
} check_res;

/*
 * The case file's rule over every (b, i, h) row except (xb, xi, xh) (−1s for none):
 *   - nothing written outside O or LSE (the NaN guards and gaps are intact);
 *   - a row that sees no key: O exactly 0 and LSE −inf;
 *   - every other row: every O element and the LSE finite;
 *   - rows the references cover: the tolerance rule (tools/common/tolerance.h),
 *     max|O−ref| ≤ 2·max|emul−ref| + 1e-3, |LSE−ref| ≤ 1e-3.
 * Prints one line (always if verbose, else only on failure) and every failure with its first
 * offending index. Returns the number of failed conditions.
 */
static int prob_check(const prob *p, const char *what, int xb, int xi, int xh, int verbose,
                      check_res *out)
{
    const spec *s = &p->s;
    check_res r;
    memset(&r, 0, sizeof r);
    char first[512] = "";
#define NOTE_FIRST(...)                                                   \
    do {                                                                  \
        if (!first[0])                                                    \
            snprintf(first, sizeof first, __VA_ARGS__);                   \
    } while (0)
    size_t bad_empty = 0, nonfinite = 0, nonfinite_lse = 0, ref_bad = 0;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < s->sq; i++) {
            int64_t lo, hi;
            row_range(s, i, &lo, &hi);
            for (int h = 0; h < s->h; h++) {
                if (b == xb && i == xi && h == xh)
                    continue;
                r.rows_total++;
                size_t li = lse_at(p, b, h, i);
                if (lo > hi) {
                    r.rows_empty++;
                    int bad = !(isinf(p->lse[li]) && p->lse[li] < 0);
                    for (int c = 0; c < p->dv && !bad; c++)
                        bad = o_at(p, b, i, h, c) != 0.0f;
                    if (bad) {
                        bad_empty++;
                        NOTE_FIRST("row b%d i%d h%d sees no key but O[0] = %g, LSE = %g (want 0, "
                                   "-inf)", b, i, h, (double)o_at(p, b, i, h, 0),
                                   (double)p->lse[li]);
                    }
                    if (p->ref_rows[i] && !(isinf(p->ref_lse[li]) && p->ref_lse[li] < 0))
                        ref_bad++;
                    continue;
                }
                if (!isfinite(p->lse[li])) {
                    nonfinite_lse++;
                    NOTE_FIRST("LSE b%d h%d i%d = %g (row sees keys %lld..%lld)", b, h, i,
                               (double)p->lse[li], (long long)lo, (long long)hi);
                }
                for (int c = 0; c < p->dv; c++) {
                    float x = o_at(p, b, i, h, c);
                    if (!isfinite(x)) {
                        nonfinite++;
                        NOTE_FIRST("O[b%d i%d h%d c%d] = %g (unwritten or not finite)", b, i, h,
                                   c, (double)x);
                    }
                }
                if (!p->ref_rows[i])
                    continue;
                r.rows_ref++;
                if (!isfinite(p->ref_lse[li]))
                    ref_bad++;
                tol_add_lse(&r.acc, li, p->lse[li], p->ref_lse[li]);
                for (int c = 0; c < p->dv; c++) {
                    size_t oi = dense_at(s->sq, s->h, p->dv, b, i, h, c);
                    float x = dtype_to_f32(s->dt, p->o[oi]);
                    if (!isfinite(p->ref[oi]) || !isfinite(p->emul[oi])) {
                        ref_bad++;
                        continue;
                    }
                    if (!isfinite(x))
                        continue; /* counted above */
                    tol_add_o(&r.acc, oi, x, p->ref[oi], p->emul[oi]);
                }
            }
        }
    r.tol = tol_o_bound(&r.acc);
    const size_t worst = r.acc.worst_o, worst_lse = r.acc.worst_lse;
    int fails = 0;
    char msg[2048];
    size_t n = 0;
#define ADD(...) n += (size_t)snprintf(msg + n, n < sizeof msg ? sizeof msg - n : 0, __VA_ARGS__)
    msg[0] = 0;
    if (p->o_outside_written) {
        fails++;
        ADD("; %zu O positions outside the tensor were written (first at element %zu of the "
            "allocation, %zu guard elements before O)", p->o_outside_written, p->o_outside_first,
            p->to.pre);
    }
    if (p->lse_outside_written) {
        fails++;
        ADD("; %zu LSE guard values were written", p->lse_outside_written);
    }
    if (bad_empty) {
        fails++;
        ADD("; %zu rows that see no key are not O = 0, LSE = -inf", bad_empty);
    }
    if (nonfinite || nonfinite_lse) {
        fails++;
        ADD("; %zu O elements and %zu LSE values not finite (unwritten, NaN read from a guard, or "
            "overflow)", nonfinite, nonfinite_lse);
    }
    if (ref_bad) {
        fails++;
        ADD("; the reference is not finite in %zu places (test bug?)", ref_bad);
    }
    if (!tol_o_ok(&r.acc)) {
        fails++;
        ADD("; max|O-ref| = %.4g at %zu (%g vs %g) exceeds 2*%.4g + 1e-3", r.acc.err_o, worst,
            (double)dtype_to_f32(s->dt, p->o[worst]), (double)p->ref[worst], r.acc.err_emul);
    }
    if (!tol_lse_ok(&r.acc)) {
        fails++;
        ADD("; max|LSE-ref| = %.4g at %zu (%g vs %g) exceeds 1e-3", r.acc.err_lse, worst_lse,
            (double)p->lse[worst_lse], (double)p->ref_lse[worst_lse]);
    }
#undef ADD
#undef NOTE_FIRST
    if (verbose || fails) {
        char line[256];
        printf("  %s%s: %s; %zu rows, %zu vs reference, %zu see no key\n", fails ? "FAIL " : "",
               what, tol_format(&r.acc, line, sizeof line), r.rows_total, r.rows_ref,
               r.rows_empty);
    }
    if (fails)
        printf("    %s%s%s\n", msg + 2, first[0] ? "; first: " : "", first);
    r.failed = fails;
    if (out)
        *out = r;
    return fails;
}

#define EXPECT_PASS(p, what)                                              \
    do {                                                                  \
        if (prob_check((p), (what), -1, -1, -1, 1, NULL) != 0)            \
            fail_msg("%s: failed (see above)", (what));                   \
    } while (0)

/* Differences between two runs' outputs (dense O and LSE): count of bitwise differences and the
   largest absolute difference (inf where exactly one is NaN; −inf = −inf). */
typedef struct diff_res {
    size_t o_bits, lse_bits;
    double o_max, lse_max;
} diff_res;

static double value_diff(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0.0 : INFINITY;
    if (a == b)
        return 0.0; /* also ±inf = ±inf */
    return fabs(a - b);
}

static diff_res outputs_diff(fa3_dtype dt, const uint16_t *o1, const uint16_t *o2, size_t no,
                             const float *l1, const float *l2, size_t nl)
{
    diff_res d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; i < no; i++) {
        if (o1[i] == o2[i])
            continue;
        d.o_bits++;
        double e = value_diff(dtype_to_f32(dt, o1[i]), dtype_to_f32(dt, o2[i]));
        if (!(e <= d.o_max))
            d.o_max = e;
    }
    for (size_t i = 0; i < nl; i++) {
        if (memcmp(&l1[i], &l2[i], 4) == 0)
            continue;
        d.lse_bits++;
        double e = value_diff(l1[i], l2[i]);
        if (!(e <= d.lse_max))
            d.lse_max = e;
    }
    return d;
}

/* Copies of a run's outputs. */
typedef struct saved {
    uint16_t *o;
    float *lse;
} saved;

static saved save_outputs(const prob *p)
{
    saved s = {xcalloc(p->no, 2), xcalloc(p->nlse, 4)};
    memcpy(s.o, p->o, p->no * 2);
    memcpy(s.lse, p->lse, p->nlse * 4);
    return s;
}

static void saved_free(saved *s)
{
    free(s->o);
    free(s->lse);
    s->o = NULL;
    s->lse = NULL;
}

static spec make_spec(int hd, fa3_dtype dt, fa3_mask mask, int batch, int sq, int sk, int h,
                      int hk)
{
    spec s;
    memset(&s, 0, sizeof s);
    s.hd = hd;
    s.dt = dt;
    s.mask = mask;
    s.wl = s.wr = -1;
    s.batch = batch;
    s.sq = sq;
    s.sk = sk;
    s.h = h;
    s.hk = hk;
    return s;
}

/* ------------------------------------------------------------------------------------------- */
/* E1 */

static const int e1_lens[] = {1, 2, 63, 64, 65, 127, 128, 129, 191, 255, 257, 1000};
#define E1_N ((int)(sizeof e1_lens / sizeof e1_lens[0]))

static void test_e1_tile_boundaries(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const double t0 = now_s();
    int cases = 0, failed = 0;
    for (int m = 0; m < 2; m++) {
        fa3_mask mask = m ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
        double worst = 0, worst_ratio = 0, worst_lse = 0;
        for (int qi = 0; qi < E1_N; qi++)
            for (int ki = 0; ki < E1_N; ki++) {
                const int sq = e1_lens[qi], sk = e1_lens[ki];
                spec s = make_spec(128, FA3_DTYPE_BF16, mask, 1, sq, sk, 2, 2);
                prob p;
                prob_init(&p, &s, 0xE1000000u + (uint64_t)m * 1000000 + (uint64_t)sq * 1000 + sk);
                /* Guards: two full 128-row tiles of NaN after Q/K/V (a tensor map or loop that
                   rounds seqlen up to a tile would read them), some before; after O and LSE. */
                layout g = {LAY_BSHD, 0, 4096, (size_t)2 * 128 * 2 * 128};
                p.lq = p.lk = p.lv = g;
                p.lo = (layout){LAY_BSHD, 0, 4096, 4096};
                p.lse_pre = 1024;
                p.lse_post = 1024;
                prob_upload(&p);
                fa3_status st = prob_run(&p);
                char what[128];
                snprintf(what, sizeof what, "E1 hd128 bf16 %s sq=%d sk=%d", m ? "causal" : "none",
                         sq, sk);
                cases++;
                if (st != FA3_OK) {
                    printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st),
                           fa3_last_error_message());
                    failed++;
                    prob_free(&p);
                    continue;
                }
                prob_reference(&p);
                check_res cr;
                failed += prob_check(&p, what, -1, -1, -1, 0, &cr) != 0;
                if (cr.acc.err_o > worst)
                    worst = cr.acc.err_o;
                if (cr.acc.err_o / cr.tol > worst_ratio)
                    worst_ratio = cr.acc.err_o / cr.tol;
                if (cr.acc.err_lse > worst_lse)
                    worst_lse = cr.acc.err_lse;
                prob_free(&p);
            }
        printf("  E1 %s: %d pairs; worst max|O-ref| = %.3g, worst err/tol = %.2f, worst "
               "max|LSE-ref| = %.3g\n", m ? "causal" : "none", E1_N * E1_N, worst, worst_ratio,
               worst_lse);
    }
    printf("  E1: %d cases, %d failed, %.1f s\n", cases, failed, now_s() - t0);
    if (failed)
        fail_msg("E1: %d of %d (seqlen_q, seqlen_k, mask) cases failed", failed, cases);
}

/* ------------------------------------------------------------------------------------------- */
/* E2 */

static void test_e2_single_key(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (int m = 0; m < 2; m++) {
        spec s = make_spec(64, FA3_DTYPE_FP16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 3, 1, 1, 4,
                           2);
        prob p;
        prob_init(&p, &s, 0xE2 + (uint64_t)m);
        prob_upload(&p);
        RUN_OK(&p);
        double scale = 1.0 / sqrt(64.0), worst_lse = 0;
        size_t mismatched = 0;
        for (int b = 0; b < s.batch; b++)
            for (int h = 0; h < s.h; h++) {
                int hk = h / (s.h / s.hk);
                const uint16_t *q = p.q + dense_at(1, s.h, 64, b, 0, h, 0);
                const uint16_t *k = p.k + dense_at(1, s.hk, 64, b, 0, hk, 0);
                const uint16_t *v = p.v + dense_at(1, s.hk, 64, b, 0, hk, 0);
                const uint16_t *o = p.o + dense_at(1, s.h, 64, b, 0, h, 0);
                double dot = 0;
                for (int c = 0; c < 64; c++) {
                    dot += (double)fp16_to_f32(q[c]) * fp16_to_f32(k[c]);
                    if (o[c] != v[c] && mismatched++ == 0)
                        printf("  E2: b%d h%d O[%d] = 0x%04x (%g), want v = 0x%04x (%g)\n", b, h,
                               c, o[c], (double)fp16_to_f32(o[c]), v[c],
                               (double)fp16_to_f32(v[c]));
                }
                double want = dot * scale, got = p.lse[lse_at(&p, b, h, 0)];
                double e = fabs(got - want);
                if (!(e <= worst_lse))
                    worst_lse = e;
            }
        printf("  E2 %s: %zu O elements differ from v; max|LSE - q.k.scale| = %.3g\n",
               m ? "causal" : "none", mismatched, worst_lse);
        if (p.o_outside_written || p.lse_outside_written)
            fail_msg("E2: wrote outside O/LSE");
        prob_free(&p);
        if (mismatched)
            fail_msg("E2: %zu O elements are not exactly v", mismatched);
        if (!(worst_lse <= 1e-3))
            fail_msg("E2: LSE differs from q.k.scale by %g (> 1e-3)", worst_lse);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* E3 */

static void e3_case(int hd, fa3_dtype dt, fa3_mask mask, int sq, int sk, uint64_t salt)
{
    spec s = make_spec(hd, dt, mask, 2, sq, sk, 2, 2);
    prob p;
    prob_init(&p, &s, salt);
    for (int b = 0; b < s.batch; b++) /* every key row equal to row 0 of its (b, head) */
        for (int j = 1; j < sk; j++)
            for (int h = 0; h < s.hk; h++)
                memcpy(p.k + dense_at(sk, s.hk, hd, b, j, h, 0),
                       p.k + dense_at(sk, s.hk, hd, b, 0, h, 0), (size_t)hd * 2);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "E3 hd%d %s %s sq=%d sk=%d", hd,
             dt == FA3_DTYPE_FP16 ? "fp16" : "bf16", mask ? "causal" : "none", sq, sk);
    EXPECT_PASS(&p, what);

    /* O = mean of the visible v rows (prefix sums in double), to one ulp of the dtype. */
    const double ulp = dt == FA3_DTYPE_FP16 ? 0x1p-10 : 0x1p-7;
    const double scale = 1.0 / sqrt((double)hd);
    double worst = 0, worst_rel = 0, worst_lse = 0;
    double *prefix = xcalloc((size_t)(sk + 1) * hd, sizeof(double));
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            int hk = h / (s.h / s.hk);
            for (int j = 0; j < sk; j++)
                for (int c = 0; c < hd; c++)
                    prefix[(size_t)(j + 1) * hd + c] =
                        prefix[(size_t)j * hd + c] +
                        dtype_to_f32(dt, p.v[dense_at(sk, s.hk, hd, b, j, hk, c)]);
            const uint16_t *k0 = p.k + dense_at(sk, s.hk, hd, b, 0, hk, 0);
            for (int i = 0; i < sq; i++) {
                int64_t lo, hi;
                row_range(&s, i, &lo, &hi);
                if (lo > hi)
                    continue;
                double cnt = (double)(hi - lo + 1), dot = 0;
                const uint16_t *qr = p.q + dense_at(sq, s.h, hd, b, i, h, 0);
                for (int c = 0; c < hd; c++) {
                    double mean = (prefix[(size_t)(hi + 1) * hd + c] -
                                   prefix[(size_t)lo * hd + c]) / cnt;
                    double x = o_at(&p, b, i, h, c);
                    double e = fabs(x - mean), allowed = ulp * fabs(mean) + 1e-5;
                    if (!(e <= worst))
                        worst = e;
                    if (!(e / allowed <= worst_rel))
                        worst_rel = e / allowed;
                    if (!(e <= allowed)) {
                        free(prefix);
                        fail_msg("%s: O[b%d i%d h%d c%d] = %.7g, mean of the %g visible v rows = "
                                 "%.7g (allowed %.3g)", what, b, i, h, c, x, cnt, mean, allowed);
                    }
                    dot += (double)dtype_to_f32(dt, qr[c]) * dtype_to_f32(dt, k0[c]);
                }
                double want_lse = dot * scale + log(cnt);
                double el = fabs((double)p.lse[lse_at(&p, b, h, i)] - want_lse);
                if (!(el <= worst_lse))
                    worst_lse = el;
            }
        }
    free(prefix);
    printf("  %s: max|O - mean(v)| = %.3g (%.2f of one ulp), max|LSE - (s + ln n)| = %.3g\n", what,
           worst, worst_rel, worst_lse);
    if (!(worst_lse <= 1e-3))
        fail_msg("%s: LSE differs from q.k0.scale + ln(n) by %g (> 1e-3)", what, worst_lse);
    prob_free(&p);
}

static void test_e3_identical_keys(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e3_case(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 300, 1000, 0xE30);
    e3_case(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 300, 1000, 0xE31);
    e3_case(64, FA3_DTYPE_FP16, FA3_MASK_NONE, 129, 257, 0xE32);
}

/* ------------------------------------------------------------------------------------------- */
/* E4, E5 */

static void causal_empty_case(const char *id, int batch, int sq, int sk, int h, int hk,
                              size_t want_empty)
{
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, batch, sq, sk, h, hk);
    prob p;
    prob_init(&p, &s, 0xE4000000u + (uint64_t)sq * 4096 + sk);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "%s causal sq=%d sk=%d b%d h%d/%d", id, sq, sk, batch, h, hk);
    check_res cr;
    int f = prob_check(&p, what, -1, -1, -1, 1, &cr);
    prob_free(&p);
    if (f)
        fail_msg("%s: failed (see above)", what);
    if (cr.rows_empty != want_empty)
        fail_msg("%s: %zu rows see no key, expected %zu", what, cr.rows_empty, want_empty);
}

static void test_e4_e5_causal_empty_rows(void **state)
{
    (void)state;
    REQUIRE_GPU();
    /* E4: rows 0..1023 of each (batch, head) see no key */
    causal_empty_case("E4", 1, 2048, 1024, 2, 2, (size_t)1024 * 2);
    /* E5: the first 5 rows see no key */
    causal_empty_case("E5", 2, 8, 3, 2, 1, (size_t)5 * 2 * 2);
    /* the boundary one tile further: sq − sk = 128 (one whole query tile empty) and 129 */
    causal_empty_case("E4b", 1, 384, 256, 2, 2, (size_t)128 * 2);
    causal_empty_case("E4c", 1, 385, 256, 2, 2, (size_t)129 * 2);
}

/* ------------------------------------------------------------------------------------------- */
/* E6, E7: one problem, two kernels (different configs), same device inputs. */

/* Runs p with the kernel of another mask (and its windows) on the same inputs. */
static void run_with_mask(prob *p, fa3_mask mask, int wl, int wr)
{
    fa3_config c = p->cfg;
    c.mask = mask;
    c.block_n = 0;
    c.stages = 0;
    CHECK(fa3_config_canonicalize(&c, &p->cfg));
    CHECK(fa3_jit_get_kernel(g_ctx, &p->cfg, &p->kernel));
    p->s.mask = mask;
    p->s.wl = wl;
    p->s.wr = wr;
    p->args.window_size_left = mask == FA3_MASK_LOCAL ? wl : -1;
    p->args.window_size_right = mask == FA3_MASK_LOCAL ? wr : -1;
    RUN_OK(p);
}

static void test_e6_local_full_window(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int sq = 256, sk = 128;
    spec s = make_spec(64, FA3_DTYPE_FP16, FA3_MASK_NONE, 2, sq, sk, 3, 3);
    prob p;
    prob_init(&p, &s, 0xE6);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    EXPECT_PASS(&p, "E6 full attention (mask none) hd64 fp16 sq=256 sk=128");
    saved full = save_outputs(&p);
    /* (-1, 1<<20) is what the case names (fa3_fwd turns a right window >= seqlen_q into -1);
       (-1, sq-1) and (sk-1, sq-1) reach every key without that shortcut. */
    static const int win[][2] = {{-1, 1 << 20}, {-1, sq - 1}, {sk - 1, sq - 1}, {sk - 1, -1}};
    int failed = 0;
    for (size_t w = 0; w < sizeof win / sizeof win[0]; w++) {
        run_with_mask(&p, FA3_MASK_LOCAL, win[w][0], win[w][1]);
        char what[128];
        snprintf(what, sizeof what, "E6 local(%d,%d) hd64 fp16 sq=256 sk=128", win[w][0],
                 win[w][1]);
        check_res cr;
        failed += prob_check(&p, what, -1, -1, -1, 1, &cr) != 0;
        diff_res d = outputs_diff(s.dt, full.o, p.o, p.no, full.lse, p.lse, p.nlse);
        printf("    vs full attention: %zu O elements differ (max %.3g), %zu LSE values (max "
               "%.3g)\n", d.o_bits, d.o_max, d.lse_bits, d.lse_max);
        if (!(d.o_max <= cr.tol) || !(d.lse_max <= 1e-3)) {
            printf("  FAIL %s: differs from full attention by %.3g in O (tol %.3g), %.3g in LSE\n",
                   what, d.o_max, cr.tol, d.lse_max);
            failed++;
        }
    }
    saved_free(&full);
    prob_free(&p);
    if (failed)
        fail_msg("E6: %d windows failed (see above)", failed);
}

static void test_e7_local_equals_causal(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int shapes[][2] = {{256, 256}, {1000, 257}, {257, 1000}, {8, 3}, {129, 129}};
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int sq = shapes[i][0], sk = shapes[i][1];
        spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, sq, sk, 4, 2);
        prob p;
        prob_init(&p, &s, 0xE7000000u + (uint64_t)sq * 4096 + sk);
        prob_upload(&p);
        RUN_OK(&p);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "E7 causal hd128 bf16 sq=%d sk=%d", sq, sk);
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        saved causal = save_outputs(&p);
        run_with_mask(&p, FA3_MASK_LOCAL, -1, 0);
        snprintf(what, sizeof what, "E7 local(-1,0) hd128 bf16 sq=%d sk=%d", sq, sk);
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        diff_res d = outputs_diff(s.dt, causal.o, p.o, p.no, causal.lse, p.lse, p.nlse);
        printf("    local(-1,0) vs causal: %zu O elements and %zu LSE values differ (max %.3g, "
               "%.3g)\n", d.o_bits, d.lse_bits, d.o_max, d.lse_max);
        if (d.o_bits || d.lse_bits) {
            printf("  FAIL %s: not bitwise equal to causal\n", what);
            failed++;
        }
        saved_free(&causal);
        prob_free(&p);
    }
    if (failed)
        fail_msg("E7: %d checks failed (see above)", failed);
}

/* ------------------------------------------------------------------------------------------- */
/* E8 */

static void test_e8_softcap_saturation(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const float cap = 50.0f;
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 300, 300, 2, 2);
    s.softcap = 1;
    s.softcap_value = cap;
    prob p;
    prob_init(&p, &s, 0xE8);
    /* Per (batch, head): key j0 = c·(query row i0) gives row i0 a scaled score near +5000, key j1
       = −c·(row i0) one near −5000; the other rows see ±hundreds from those two keys. */
    const double scale = 1.0 / sqrt(128.0);
    double top = 0;
    int inj[2][2][3];
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            int i0 = (37 * b + 101 * h + 5) % s.sq, j0 = (53 * b + 29 * h + 7) % s.sk;
            int j1 = (j0 + s.sk / 2) % s.sk;
            const uint16_t *qr = p.q + dense_at(s.sq, s.h, 128, b, i0, h, 0);
            double qq = 0;
            for (int c = 0; c < 128; c++)
                qq += (double)bf16_to_f32(qr[c]) * bf16_to_f32(qr[c]);
            double cf = 5000.0 / (qq * scale);
            for (int c = 0; c < 128; c++) {
                float x = (float)(cf * bf16_to_f32(qr[c]));
                p.k[dense_at(s.sk, s.hk, 128, b, j0, h, c)] = f32_to_bf16(x);
                p.k[dense_at(s.sk, s.hk, 128, b, j1, h, c)] = f32_to_bf16(-x);
            }
            double dot = 0;
            for (int c = 0; c < 128; c++)
                dot += (double)bf16_to_f32(qr[c]) *
                       bf16_to_f32(p.k[dense_at(s.sk, s.hk, 128, b, j0, h, c)]);
            if (dot * scale > top)
                top = dot * scale;
            inj[b][h][0] = i0;
            inj[b][h][1] = j0;
            inj[b][h][2] = j1;
            if (!(dot * scale > 4000.0))
                fail_msg("test bug: injected score %g is not near 5000", dot * scale);
        }
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    EXPECT_PASS(&p, "E8 softcap 50 hd128 bf16 s300, scores near +-5000");
    /* LSE: finite everywhere (checked above) and at most cap + ln(seqlen_k): the capped scores are
       within ±cap; the rows with the +5000 key have LSE within [cap − 1e-3, cap + ln(sk)]. */
    double max_lse = -INFINITY;
    for (size_t i = 0; i < p.nlse; i++)
        if (p.lse[i] > max_lse)
            max_lse = p.lse[i];
    printf("  E8: largest raw scaled score %.0f; largest LSE %.4f (cap %g + ln %d = %.4f)\n", top,
           max_lse, (double)cap, s.sk, cap + log((double)s.sk));
    if (!(max_lse <= cap + log((double)s.sk) + 1e-3))
        fail_msg("E8: LSE %g above cap + ln(seqlen_k): scores were not capped", max_lse);
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            double l = p.lse[lse_at(&p, b, h, inj[b][h][0])];
            if (!(l >= cap - 1e-3 && l <= cap + log((double)s.sk) + 1e-3))
                fail_msg("E8: row b%d h%d i%d (score +5000 at key %d) has LSE %g, want about %g",
                         b, h, inj[b][h][0], inj[b][h][1], l, (double)cap);
        }
    prob_free(&p);
}

/* ------------------------------------------------------------------------------------------- */
/* E9 (runs without a GPU too: configs are validated before anything touches the driver) */

static void expect_bad_config(int hd, int hdv, fa3_status want, int named)
{
    fa3_config c, out;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.head_dim_v = hdv;
    fa3_config_init(&out);
    fa3_config before = out;
    char val[32];
    snprintf(val, sizeof val, "%d", named);

    fa3_status st = fa3_config_canonicalize(&c, &out);
    const char *msg = fa3_last_error_message();
    printf("  E9 (%d, %d): canonicalize: %s: %s\n", hd, hdv, fa3_strerror(st), msg);
    if (st != want)
        fail_msg("E9: canonicalize(head_dim %d, head_dim_v %d) returned %s, expected %s", hd, hdv,
                 fa3_strerror(st), fa3_strerror(want));
    if (!strstr(msg, val) || !strstr(msg, want == FA3_ERR_BAD_HEAD_DIM ? "head_dim" : "head_dim_v"))
        fail_msg("E9: message \"%s\" does not name the field and %s", msg, val);
    if (memcmp(&out, &before, sizeof out) != 0)
        fail_msg("E9: canonicalize changed out on error");

    fa3_kernel *k = NULL;
    st = fa3_jit_get_kernel(g_ctx, &c, &k);
    msg = fa3_last_error_message();
    if (st != want || k != NULL || !strstr(msg, val))
        fail_msg("E9: fa3_jit_get_kernel(head_dim %d, head_dim_v %d) returned %s (kernel %p), "
                 "message \"%s\"; expected %s naming %s", hd, hdv, fa3_strerror(st), (void *)k,
                 msg, fa3_strerror(want), val);

    char *ptx = NULL;
    size_t len = 12345;
    st = fa3_emit_ptx(&c, &ptx, &len);
    if (st != want || ptx != NULL)
        fail_msg("E9: fa3_emit_ptx(head_dim %d) returned %s and %s PTX; expected %s and none", hd,
                 fa3_strerror(st), ptx ? "some" : "no", fa3_strerror(want));
}

static void test_e9_bad_head_dim(void **state)
{
    (void)state;
    CUdeviceptr o = 0;
    const size_t n = 4096;
    int gpu = gpu_available(NULL, 0);
    if (gpu) {
        o = gpu_alloc(n * 2);
        gpu_fill_nan16(o, n, FA3_DTYPE_BF16);
        gpu_sync();
    }
    expect_bad_config(72, 0, FA3_ERR_BAD_HEAD_DIM, 72);
    expect_bad_config(512, 0, FA3_ERR_BAD_HEAD_DIM, 512);
    expect_bad_config(128, 72, FA3_ERR_BAD_HEAD_DIM_V, 72);
    if (gpu) {
        uint16_t *h = xcalloc(n, 2);
        gpu_sync();
        gpu_download(h, o, n * 2);
        size_t touched = 0;
        for (size_t i = 0; i < n; i++)
            touched += h[i] != nan16_bits(FA3_DTYPE_BF16);
        free(h);
        gpu_free(o);
        printf("  E9: O buffer after the refused calls: %zu of %zu elements changed\n", touched, n);
        if (touched)
            fail_msg("E9: the output buffer was written");
    } else {
        printf("  E9: no GPU: configuration checks only\n");
    }
}

/* ------------------------------------------------------------------------------------------- */
/* E10 */

static void test_e10_strided_views(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int sq = g_small ? 1024 : 8192, h = g_small ? 4 : 32;
    const double t0 = now_s();
    spec s = make_spec(256, FA3_DTYPE_BF16, FA3_MASK_NONE, 1, sq, sq, h, h);
    prob p;
    prob_init(&p, &s, 0xE10);
    /* (batch, heads, seqlen, head_dim) storage passed with (batch, seqlen, heads, head_dim)
       strides; the host permutes (tensor_upload places each element by its strides). */
    layout bhsd = {LAY_BHSD, 0, 256, 2048};
    p.lq = p.lk = p.lv = bhsd;
    prob_upload(&p);
    printf("  E10: q strides (batch %lld, row %lld, head %lld); inputs made and uploaded in %.1f s\n",
           (long long)p.args.q_batch_stride, (long long)p.args.q_row_stride,
           (long long)p.args.q_head_stride, now_s() - t0);
    RUN_OK(&p);
    /* sampled row blocks against the reference: first, middle, last tile */
    prob_reference_rows(&p, 0, 128);
    prob_reference_rows(&p, sq / 2 - 64, 128);
    prob_reference_rows(&p, sq - 128, 128);
    char what[128];
    snprintf(what, sizeof what, "E10 strided hd256 bf16 s%d h%d (3 row blocks vs reference)", sq,
             h);
    EXPECT_PASS(&p, what);
    saved strided = save_outputs(&p);

    layout contig = {LAY_BSHD, 0, 256, 2048};
    p.lq = p.lk = p.lv = contig;
    prob_upload(&p);
    RUN_OK(&p);
    diff_res d = outputs_diff(s.dt, strided.o, p.o, p.no, strided.lse, p.lse, p.nlse);
    printf("  E10: strided vs contiguous copies: %zu of %zu O elements differ bitwise (max %.3g), "
           "%zu LSE values (max %.3g); %.1f s\n", d.o_bits, p.no, d.o_max, d.lse_bits, d.lse_max,
           now_s() - t0);
    size_t outside = p.o_outside_written + p.lse_outside_written;
    saved_free(&strided);
    prob_free(&p);
    if (outside)
        fail_msg("E10: the contiguous run wrote outside O/LSE");
    if (!(d.o_max <= 5e-4) || !(d.lse_max <= 1e-3))
        fail_msg("E10: strided and contiguous runs differ by %g in O (case bound 5e-4), %g in LSE",
                 d.o_max, d.lse_max);
    /* Same kernel, same values in shared memory, and runs are deterministic (E12): anything but
       bitwise equality means the strided run loaded something else. */
    if (d.o_bits || d.lse_bits)
        fail_msg("E10: %zu O elements and %zu LSE values differ between the strided and the "
                 "contiguous run (max %g): expected bitwise equality", d.o_bits, d.lse_bits,
                 d.o_max);
}

/* ------------------------------------------------------------------------------------------- */
/* E11 */

static void e11_case(fa3_mask mask, uint64_t salt)
{
    const int sk = 32 * 9 + 1; /* 289 */
    spec s = make_spec(128, FA3_DTYPE_BF16, mask, 2, 200, sk, 4, 4);
    prob p;
    prob_init(&p, &s, salt);
    for (int b = 0; b < s.batch; b++) /* the same K/V for every head */
        for (int j = 0; j < sk; j++)
            for (int h = 1; h < s.hk; h++) {
                memcpy(p.k + dense_at(sk, s.hk, 128, b, j, h, 0),
                       p.k + dense_at(sk, s.hk, 128, b, j, 0, 0), 256);
                memcpy(p.v + dense_at(sk, s.hk, 128, b, j, h, 0),
                       p.v + dense_at(sk, s.hk, 128, b, j, 0, 0), 256);
            }
    p.lk = p.lv = (layout){LAY_HEAD_BCAST, 0, 256, 2048};
    prob_upload(&p);
    printf("  E11: k strides (batch %lld, row %lld, head %lld), num_heads_k %d\n",
           (long long)p.args.k_batch_stride, (long long)p.args.k_row_stride,
           (long long)p.args.k_head_stride, s.hk);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "E11 K/V head stride 0 hd128 bf16 %s sq=200 sk=%d",
             mask ? "causal" : "none", sk);
    EXPECT_PASS(&p, what);
    saved bcast = save_outputs(&p);
    p.lk = p.lv = (layout){LAY_BSHD, 0, 256, 2048};
    prob_upload(&p);
    RUN_OK(&p);
    diff_res d = outputs_diff(s.dt, bcast.o, p.o, p.no, bcast.lse, p.lse, p.nlse);
    printf("  %s vs materialized copies: %zu O elements differ bitwise (max %.3g), %zu LSE (max "
           "%.3g)\n", what, d.o_bits, d.o_max, d.lse_bits, d.lse_max);
    saved_free(&bcast);
    prob_free(&p);
    if (d.o_bits || d.lse_bits) /* same kernel, same values: bitwise (see E10) */
        fail_msg("%s: %zu O elements and %zu LSE values differ from the materialized copies "
                 "(max %g, %g)", what, d.o_bits, d.lse_bits, d.o_max, d.lse_max);
}

static void test_e11_kv_head_stride0(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e11_case(FA3_MASK_NONE, 0xE110);
    e11_case(FA3_MASK_CAUSAL, 0xE111);
}

/* ------------------------------------------------------------------------------------------- */
/* E12 */

static void e12_case(fa3_mask mask, int sq, int sk, int wl, int wr, uint64_t salt)
{
    spec s = make_spec(128, FA3_DTYPE_BF16, mask, 2, sq, sk, 4, 2);
    s.wl = wl;
    s.wr = wr;
    prob p;
    prob_init(&p, &s, salt);
    prob_upload(&p);
    RUN_OK(&p);
    saved first = save_outputs(&p);
    size_t diff_o = 0, diff_l = 0;
    for (int rep = 0; rep < 2; rep++) {
        RUN_OK(&p);
        diff_res d = outputs_diff(s.dt, first.o, p.o, p.no, first.lse, p.lse, p.nlse);
        diff_o += d.o_bits;
        diff_l += d.lse_bits;
    }
    printf("  E12 %s sq=%d sk=%d: over 2 repeats, %zu O elements and %zu LSE values differ from "
           "the first run\n", mask == FA3_MASK_CAUSAL ? "causal" : mask ? "local" : "none", sq, sk,
           diff_o, diff_l);
    saved_free(&first);
    prob_free(&p);
    if (diff_o || diff_l)
        fail_msg("E12: repeated runs are not bitwise identical");
}

static void test_e12_deterministic(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e12_case(FA3_MASK_CAUSAL, 1000, 1000, -1, -1, 0xE120);
    e12_case(FA3_MASK_NONE, 1000, 257, -1, -1, 0xE121);
    e12_case(FA3_MASK_LOCAL, 777, 1000, 64, 32, 0xE122);
}

/* ------------------------------------------------------------------------------------------- */
/* E13 */

/* Runs p; a refusal before launch (status other than OK, a message, O untouched) is accepted as
   the case file allows. Returns 1 if it ran. */
static int run_or_refuse(prob *p, const char *what)
{
    fa3_status st = prob_run(p);
    if (st == FA3_OK)
        return 1;
    const char *msg = fa3_last_error_message();
    size_t written = 0;
    for (size_t i = 0; i < p->no; i++)
        written += p->o[i] != nan16_bits(p->s.dt);
    printf("  NOTE %s: refused before launch: %s: %s (%zu O elements written)\n", what,
           fa3_strerror(st), msg, written);
    if (st == FA3_ERR_CUDA || st == FA3_ERR_INTERNAL || !msg[0] || written ||
        p->o_outside_written)
        fail_msg("%s: failed with %s (\"%s\") after writing %zu O elements: not a clear refusal "
                 "before launch", what, fa3_strerror(st), msg, written);
    return 0;
}

static void test_e13_large_grids(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const double t0 = now_s();
    /* batch·heads above 65535 (a grid's y/z limit) at seqlen 1 */
    static const int bh[][3] = {{1024, 80, 80}, {1, 70000, 7}};
    for (int c = 0; c < 2; c++) {
        spec s = make_spec(64, FA3_DTYPE_BF16, FA3_MASK_NONE, bh[c][0], 1, 1, bh[c][1], bh[c][2]);
        prob p;
        prob_init(&p, &s, 0xE130 + (uint64_t)c);
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "E13 hd64 bf16 s1 batch %d heads %d/%d (%d rows)", bh[c][0],
                 bh[c][1], bh[c][2], bh[c][0] * bh[c][1]);
        if (run_or_refuse(&p, what)) {
            prob_reference(&p);
            EXPECT_PASS(&p, what);
        }
        prob_free(&p);
    }
    /* a long causal sequence: every row written and finite (checked for all rows), row blocks at
       the start, the middle and the end against the reference */
    const int L = g_small ? 8192 : 131072;
    spec s = make_spec(64, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, L, L, 1, 1);
    prob p;
    prob_init(&p, &s, 0xE13F);
    prob_upload(&p);
    char what[128];
    snprintf(what, sizeof what, "E13 hd64 bf16 causal s%d (4 row blocks vs reference)", L);
    const double t1 = now_s();
    if (run_or_refuse(&p, what)) {
        const double t2 = now_s();
        prob_reference_rows(&p, 0, 128);
        prob_reference_rows(&p, L / 2 - 64, 128);
        prob_reference_rows(&p, L - 192, 64);
        prob_reference_rows(&p, L - 128, 128);
        printf("  E13 s%d: fa3_fwd + readback %.2f s, references on 448 rows %.2f s\n", L, t2 - t1,
               now_s() - t2);
        EXPECT_PASS(&p, what);
    }
    prob_free(&p);
    printf("  E13: %.1f s\n", now_s() - t0);
}

/* ------------------------------------------------------------------------------------------- */
/* E14 */

static void test_e14_nan_row(void **state)
{
    (void)state;
    REQUIRE_GPU();
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 200, 300, 2, 2);
    prob p;
    prob_init(&p, &s, 0xE14);
    prob_upload(&p);
    RUN_OK(&p);
    saved clean = save_outputs(&p);

    const int nb = 1, ni = 77, nh = 1;
    p.q[dense_at(s.sq, s.h, 128, nb, ni, nh, 5)] = f32_to_bf16(NAN); /* one element of one row */
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    size_t nan_count = 0;
    for (int c = 0; c < 128; c++)
        nan_count += isnan(o_at(&p, nb, ni, nh, c)) != 0;
    float l = p.lse[lse_at(&p, nb, nh, ni)];
    printf("  E14: %zu of 128 elements of the NaN row are NaN; its LSE = %g\n", nan_count,
           (double)l);
    /* every other row: bitwise what the NaN-free run gave */
    size_t changed = 0, changed_lse = 0;
    for (int b = 0; b < s.batch; b++)
        for (int i = 0; i < s.sq; i++)
            for (int h = 0; h < s.h; h++) {
                if (b == nb && i == ni && h == nh)
                    continue;
                size_t o0 = dense_at(s.sq, s.h, 128, b, i, h, 0);
                changed += memcmp(clean.o + o0, p.o + o0, 256) != 0;
                size_t li = lse_at(&p, b, h, i);
                changed_lse += memcmp(&clean.lse[li], &p.lse[li], 4) != 0;
            }
    printf("  E14: %zu other O rows and %zu other LSE values changed from the NaN-free run\n",
           changed, changed_lse);
    saved_free(&clean);
    int f = prob_check(&p, "E14 other rows vs reference", nb, ni, nh, 1, NULL);
    prob_free(&p);
    if (nan_count != 128)
        fail_msg("E14: only %zu of 128 elements of the NaN row are NaN", nan_count);
    /* the case file asks for the O row; a finite LSE would still be a wrong statistic (NaN, or
       +inf as FlashAttention reports rows whose sum is NaN, are both accepted) */
    if (isfinite(l))
        fail_msg("E14: the NaN row's LSE is %g, a finite value", (double)l);
    if (changed || changed_lse)
        fail_msg("E14: the NaN in one row changed %zu other O rows and %zu LSE values", changed,
                 changed_lse);
    if (f)
        fail_msg("E14: the other rows fail the reference check (see above)");
}

/* ------------------------------------------------------------------------------------------- */
/* GQA ratios, head dims */

static void test_gqa_ratios(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int hks[] = {1, 2, 4, 8};
    static const int seqs[][2] = {{128, 128}, {1000, 257}};
    int failed = 0, n = 0;
    for (int m = 0; m < 2; m++)
        for (int si = 0; si < 2; si++)
            for (int g = 0; g < 4; g++) {
                spec s = make_spec(128, FA3_DTYPE_BF16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2,
                                   seqs[si][0], seqs[si][1], 8, hks[g]);
                prob p;
                prob_init(&p, &s,
                          0x6A000000u + (uint64_t)m * 100 + (uint64_t)si * 10 + (uint64_t)g);
                prob_upload(&p);
                RUN_OK(&p);
                prob_reference(&p);
                char what[128];
                snprintf(what, sizeof what, "GQA h8/%d hd128 bf16 %s sq=%d sk=%d", hks[g],
                         m ? "causal" : "none", seqs[si][0], seqs[si][1]);
                failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
                n++;
                prob_free(&p);
            }
    if (failed)
        fail_msg("GQA: %d of %d cases failed", failed, n);
}

/* O that TMA cannot store (address 4 bytes past a 16-byte boundary, rows padded by 2 elements):
   the kernel falls back to stores from registers, and with head_dim 256 (O staged in Q) still
   releases Q. NaN gaps around every O row catch a write beside the tensor. */
static void test_o_unaligned(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[] = {64, 128, 256};
    int failed = 0;
    for (int m = 0; m < 2; m++)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            spec s = make_spec(dims[i], FA3_DTYPE_BF16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2,
                               300, 500, 4, 2);
            prob p;
            prob_init(&p, &s, 0x0A1000u + (uint64_t)dims[i] * 10 + (uint64_t)m);
            p.lo = (layout){LAY_BSHD, 2, 258, 4096};
            prob_upload(&p);
            RUN_OK(&p);
            prob_reference(&p);
            char what[128];
            snprintf(what, sizeof what, "O unaligned (address %% 16 = 4, row pad 2) hd%d bf16 %s "
                     "sq=300 sk=500 h4/2", dims[i], m ? "causal" : "none");
            failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
            prob_free(&p);
        }
    if (failed)
        fail_msg("O unaligned: %d of 6 cases failed", failed);
}

/* Masked configs walk their tiles in L2 sections of (head, batch) pairs (fwd.c section_hb):
   seqlen_k 4096 at head_dim 128 gives 2 MiB of K/V per KV head, so 16 KV heads (32 query heads
   at 2 per KV head) per section; 2 × 40 heads make sections of 32, 32 and 16 pairs, the last one
   short. Every row is compared with the reference, causal and local. */
static void test_l2_sections(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int failed = 0;
    for (int m = 0; m < 2; m++) {
        spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 1000, 4096, 40, 20);
        prob p;
        prob_init(&p, &s, 0x12500 + (uint64_t)m);
        prob_upload(&p);
        if (m == 0)
            RUN_OK(&p);
        else
            run_with_mask(&p, FA3_MASK_LOCAL, 700, 64);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "L2 sections hd128 bf16 %s b2 h40/20 sq=1000 sk=4096",
                 m ? "local(700,64)" : "causal");
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        prob_free(&p);
    }
    if (failed)
        fail_msg("L2 sections: %d of 2 cases failed", failed);
}

static void test_head_dims(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[][2] = {{64, 0}, {96, 0}, {128, 0}, {192, 0}, {256, 0}, {192, 128}};
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int hd = dims[i][0], hdv = dims[i][1] ? dims[i][1] : hd;
        fa3_config c, canon;
        fa3_config_init(&c);
        c.head_dim = hd;
        c.head_dim_v = dims[i][1];
        c.mask = FA3_MASK_CAUSAL;
        fa3_status st = fa3_config_canonicalize(&c, &canon);
        if (st != FA3_OK) {
            printf("  NOTE: head_dim %d, head_dim_v %d not supported by this build (%s: %s): "
                   "skipped\n", hd, hdv, fa3_strerror(st), fa3_last_error_message());
            continue;
        }
        fa3_kernel *kern = NULL; /* a generator or compiler failure fails this size only */
        st = fa3_jit_get_kernel(g_ctx, &canon, &kern);
        if (st != FA3_OK) {
            printf("  FAIL hd%d hdv%d: fa3_jit_get_kernel: %s: %s\n", hd, hdv, fa3_strerror(st),
                   fa3_last_error_message());
            failed++;
            ran++;
            continue;
        }
        spec s = make_spec(hd, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 300, 500, 4, 2);
        s.hdv = dims[i][1];
        prob p;
        prob_init(&p, &s, 0xD000u + (uint64_t)hd * 1000 + (uint64_t)hdv);
        /* NaN gaps of 32 elements after every head's row in Q/K/V/O: a kernel that rounds the
           head dim up (96 → 128) and reads or writes the neighbour's columns fails */
        layout gap = {LAY_BSHD, 32, 256, 4096};
        p.lq = p.lk = p.lv = p.lo = gap;
        p.lse_post = 1024;
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "hd%d hdv%d bf16 causal sq=300 sk=500 h4/2 (NaN gaps)", hd,
                 hdv);
        st = prob_run(&p);
        if (st != FA3_OK) {
            printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st),
                   fa3_last_error_message());
            failed++;
        } else {
            prob_reference(&p);
            failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        }
        ran++;
        prob_free(&p);
    }
    printf("  head dims: %d ran, %d failed\n", ran, failed);
    if (failed)
        fail_msg("head dims: %d of %d failed", failed, ran);
    if (ran < 3)
        fail_msg("head dims: only %d sizes supported (64, 128 and 256 at least must be)", ran);
}

/* ------------------------------------------------------------------------------------------- */

int main(void)
{
    const char *sm = getenv("FA3JIT_TEST_SMALL");
    g_small = sm && *sm && strcmp(sm, "0") != 0;
    if (g_small)
        printf("FA3JIT_TEST_SMALL: E10 at seqlen 1024 with 4 heads, E13 at seqlen 8192\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e9_bad_head_dim), /* the one test that runs without a GPU */
        cmocka_unit_test(test_e1_tile_boundaries),
        cmocka_unit_test(test_e2_single_key),
        cmocka_unit_test(test_e3_identical_keys),
        cmocka_unit_test(test_e4_e5_causal_empty_rows),
        cmocka_unit_test(test_e6_local_full_window),
        cmocka_unit_test(test_e7_local_equals_causal),
        cmocka_unit_test(test_e8_softcap_saturation),
        cmocka_unit_test(test_e10_strided_views),
        cmocka_unit_test(test_e11_kv_head_stride0),
        cmocka_unit_test(test_e12_deterministic),
        cmocka_unit_test(test_e13_large_grids),
        cmocka_unit_test(test_e14_nan_row),
        cmocka_unit_test(test_gqa_ratios),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_l2_sections),
        cmocka_unit_test(test_o_unaligned),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    const double t0 = now_s();
    /* all but E9 need a GPU */
    int rc = gpu_test_main("edge", tests, n, (int)n - 1, &g_ctx, &g_seed, &g_skipped);
    printf("test_edge: %.1f s\n", now_s() - t0);
    return rc;
}
