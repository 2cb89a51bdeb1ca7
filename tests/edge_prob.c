/*
 * The edge-case tests' problem kit (edge_prob.h): layouts and tensors, problems (e4m3 ones
 * quantized on the host) and their references; the pass rule is edge_check.c.
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
#include "edge_prob.h"

fa3_context *g_ctx;
uint64_t g_seed;
int g_skipped;
int g_small;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail_msg("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

void tensor_plan(tensor16 *t, const layout *l, int b, int s, int h, int d, int es)
{
    memset(t, 0, sizeof *t);
    t->es = es;
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

size_t tensor_at(const tensor16 *t, int b, int s, int h, int c)
{
    return t->pre + (size_t)((int64_t)b * t->bs + (int64_t)s * t->rs + (int64_t)h * t->hs) +
           (size_t)c;
}

/* Dense host index of (b, s, h, c) in a contiguous (b, s, h, d) array. */
size_t dense_at(int s_, int h_, int d_, int b, int s, int h, int c)
{
    return (((size_t)b * s_ + s) * h_ + h) * d_ + c;
}

/* Allocates t, writes the dense values at their strided places and NaN everywhere else. */
void tensor_upload(tensor16 *t, const void *dense, uint16_t nan)
{
    const size_t es = (size_t)t->es;
    unsigned char *img = xcalloc(t->total, es);
    for (size_t i = 0; i < t->total; i++)
        memcpy(img + i * es, &nan, es); /* little-endian: the low byte for es 1 */
    for (int b = 0; b < t->b; b++)
        for (int s = 0; s < t->s; s++)
            for (int h = 0; h < t->h; h++) {
                const unsigned char *src =
                    (const unsigned char *)dense + dense_at(t->s, t->h, t->d, b, s, h, 0) * es;
                unsigned char *dst = img + tensor_at(t, b, s, h, 0) * es;
                if (t->hs == 0 && h > 0) { /* broadcast: every head must hold the same values */
                    if (memcmp(dst, src, (size_t)t->d * es) != 0)
                        fail_msg("test bug: head-broadcast tensor with different heads");
                    continue;
                }
                memcpy(dst, src, (size_t)t->d * es);
            }
    t->base = gpu_alloc(t->total * es);
    gpu_upload(t->base, img, t->total * es);
    free(img);
}

const void *tensor_ptr(const tensor16 *t)
{
    return (const void *)(uintptr_t)(t->base + t->pre * (size_t)t->es);
}

/* Seeds each case's generator from the run's seed and the case's identity. */
void case_rng(host_rng *r, uint64_t salt)
{
    rng_init(r, g_seed ^ (salt * 0x9E3779B97F4A7C15ull));
}

/* Normal inputs (uniform for tensors above 4M elements, where Box–Muller takes seconds). */
void fill_random(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    if (n > ((size_t)1 << 22))
        fill_uniform(r, dst, n, dt, scale);
    else
        fill_normal(r, dst, n, dt, scale);
}

/* The e4m3 inputs of p (spec.descales): normal values (uniform above 4M elements), of a
   magnitude per (batch, kv head) group for descales 1, quantized on the host. */
static void fp8_inputs(prob *p, host_rng *r)
{
    const spec *s = &p->s;
    const size_t n[3] = {p->nq, p->nk, p->nv};
    const int seq[3] = {s->sq, s->sk, s->sk}, heads[3] = {s->h, s->hk, s->hk};
    const int dims[3] = {p->d, p->d, p->dv};
    uint8_t **dst[3] = {&p->q8, &p->k8, &p->v8};
    for (int t = 0; t < 3; t++) {
        float *x = xcalloc(n[t], sizeof(float));
        if (n[t] > ((size_t)1 << 22))
            for (size_t i = 0; i < n[t]; i++)
                x[i] = (float)((rng_uniform(r) - 0.5) * 2.0 * sqrt(3.0));
        else
            fill_normal_f32(r, x, n[t]);
        const int scaled = s->descales == 1 || (s->descales == 2 && t == 1);
        if (s->descales == 1) {
            const int per_group = heads[t] / s->hk;
            for (int b = 0; b < s->batch; b++)
                for (int j = 0; j < seq[t]; j++)
                    for (int h = 0; h < heads[t]; h++) {
                        const int g = h / per_group;
                        const int e = t == 2 ? (b * 2 + g * 3) % 5 - 2
                                    : t == 1 ? (b * 2 + g + 1) % 3 - 1 : (b + g) % 3 - 1;
                        float *row = x + dense_at(seq[t], heads[t], dims[t], b, j, h, 0);
                        for (int c = 0; c < dims[t]; c++)
                            row[c] = ldexpf(row[c], e);
                    }
        }
        *dst[t] = xcalloc(n[t], 1);
        if (scaled)
            p->ds[t] = xcalloc((size_t)s->batch * s->hk, sizeof(float));
        quantize_e4m3(x, *dst[t], p->ds[t], s->batch, seq[t], heads[t], dims[t], s->hk);
        free(x);
    }
}

/* A problem of shape s with random normal Q, K, V from the case's generator (case_rng(salt)),
   default layouts (contiguous, NaN guards around every tensor) that the case may change before
   prob_upload. */
static void prob_setup(prob *p, const spec *s, uint64_t salt, int with_kernel)
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
    c.out_dtype = s->out;
    if (with_kernel) {
        CHECK(fa3_config_canonicalize(&c, &p->cfg));
        CHECK(fa3_jit_get_kernel(g_ctx, &p->cfg, &p->kernel));
    } else { /* the config as given, resolved by hand: the reference takes it so */
        p->cfg = c;
        p->cfg.head_dim_v = s->hdv ? s->hdv : s->hd;
        p->cfg.out_dtype = s->out != FA3_DTYPE_AUTO ? s->out
                           : s->dt == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : s->dt;
    }
    p->d = p->cfg.head_dim;
    p->dv = p->cfg.head_dim_v;
    p->out_dt = p->cfg.out_dtype;
    p->es = s->dt == FA3_DTYPE_E4M3 ? 1 : 2;
    p->nq = (size_t)s->batch * s->sq * s->h * p->d;
    p->nk = (size_t)s->batch * s->sk * s->hk * p->d;
    p->nv = (size_t)s->batch * s->sk * s->hk * p->dv;
    p->no = (size_t)s->batch * s->sq * s->h * p->dv;
    p->nlse = (size_t)s->batch * s->h * s->sq;
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
    if (s->dt == FA3_DTYPE_E4M3) {
        fp8_inputs(p, &r);
        return;
    }
    p->q = xcalloc(p->nq, 2);
    p->k = xcalloc(p->nk, 2);
    p->v = xcalloc(p->nv, 2);
    fill_random(&r, p->q, p->nq, s->dt, 1.0);
    fill_random(&r, p->k, p->nk, s->dt, 1.0);
    fill_random(&r, p->v, p->nv, s->dt, 1.0);
}

void prob_init(prob *p, const spec *s, uint64_t salt)
{
    prob_setup(p, s, salt, 1);
}

void prob_init_no_kernel(prob *p, const spec *s, uint64_t salt)
{
    prob_setup(p, s, salt, 0);
}

void prob_free_device(prob *p)
{
    gpu_free(p->tq.base);
    gpu_free(p->tk.base);
    gpu_free(p->tv.base);
    gpu_free(p->to.base);
    gpu_free(p->dlse);
    p->tq.base = p->tk.base = p->tv.base = p->to.base = p->dlse = 0;
    for (int t = 0; t < 3; t++) {
        gpu_free(p->dds[t]);
        p->dds[t] = 0;
    }
}

/* (Re)creates the device tensors in the current layouts from the dense inputs; sets args. */
void prob_upload(prob *p)
{
    const spec *s = &p->s;
    prob_free_device(p);
    tensor_plan(&p->tq, &p->lq, s->batch, s->sq, s->h, p->d, p->es);
    tensor_plan(&p->tk, &p->lk, s->batch, s->sk, s->hk, p->d, p->es);
    tensor_plan(&p->tv, &p->lv, s->batch, s->sk, s->hk, p->dv, p->es);
    tensor_plan(&p->to, &p->lo, s->batch, s->sq, s->h, p->dv, 2);
    assert_true(p->lo.kind != LAY_HEAD_BCAST || s->h == 1);
    const int e4m3 = s->dt == FA3_DTYPE_E4M3;
    const uint16_t in_nan = e4m3 ? E4M3_NAN_BITS : nan16_bits(s->dt);
    tensor_upload(&p->tq, e4m3 ? (const void *)p->q8 : p->q, in_nan);
    tensor_upload(&p->tk, e4m3 ? (const void *)p->k8 : p->k, in_nan);
    tensor_upload(&p->tv, e4m3 ? (const void *)p->v8 : p->v, in_nan);
    for (int t = 0; t < 3; t++)
        if (p->ds[t]) {
            size_t bytes = (size_t)s->batch * s->hk * sizeof(float);
            p->dds[t] = gpu_alloc(bytes);
            gpu_upload(p->dds[t], p->ds[t], bytes);
        }
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
    a->descale_q = (const float *)(uintptr_t)p->dds[0];
    a->descale_k = (const float *)(uintptr_t)p->dds[1];
    a->descale_v = (const float *)(uintptr_t)p->dds[2];
    if (s->mask == FA3_MASK_LOCAL) {
        a->window_size_left = s->wl;
        a->window_size_right = s->wr;
    }
}

/* Fills O's and LSE's whole allocations with NaN, runs fa3_fwd, reads O (dense) and LSE back and
   counts positions outside the tensors that no longer hold their NaN. Returns fa3_fwd's status
   (outputs are read back either way). */
fa3_status prob_run(prob *p)
{
    const fa3_dtype dt = p->out_dt;
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

/* References for query rows [r0, r0 + n) (all batches and heads). Rows are cut out as a view:
   q advanced by r0 rows, seqlen_q = n, and for the causal mask seqlen_k = r0 + n + sk − sq keys,
   which keeps every row's bottom-right-aligned diagonal where it was (rows that would see no key
   at all are filled in as O = 0, LSE = −inf without a call). */
void prob_reference_rows(prob *p, int r0, int n)
{
    const spec *s = &p->s;
    assert_true(r0 >= 0 && n >= 1 && r0 + n <= s->sq);
    fa3_fwd_args a = p->args;
    a.q = (const char *)a.q + (size_t)r0 * (size_t)a.q_row_stride * (size_t)p->es;
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

void prob_reference(prob *p)
{
    prob_reference_rows(p, 0, p->s.sq);
}

void prob_free(prob *p)
{
    prob_free_device(p);
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->q8);
    free(p->k8);
    free(p->v8);
    for (int t = 0; t < 3; t++)
        free(p->ds[t]);
    free(p->o);
    free(p->lse);
    free(p->ref);
    free(p->emul);
    free(p->ref_lse);
    free(p->ref_rows);
    memset(p, 0, sizeof *p);
}

/* Visible keys [lo, hi] of query row i (bottom-right aligned); empty when lo > hi. */
void row_range(const spec *s, int i, int64_t *lo, int64_t *hi)
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

float o_at(const prob *p, int b, int i, int h, int c)
{
    return dtype_to_f32(p->out_dt, p->o[dense_at(p->s.sq, p->s.h, p->dv, b, i, h, c)]);
}

float in_at(const prob *p, int which, int b, int s, int h, int c)
{
    const spec *sp = &p->s;
    const int seq = which ? sp->sk : sp->sq, heads = which ? sp->hk : sp->h;
    const int dim = which == 2 ? p->dv : p->d;
    const size_t i = dense_at(seq, heads, dim, b, s, h, c);
    if (sp->dt != FA3_DTYPE_E4M3) {
        const uint16_t *src = which == 0 ? p->q : which == 1 ? p->k : p->v;
        return dtype_to_f32(sp->dt, src[i]);
    }
    const uint8_t *src = which == 0 ? p->q8 : which == 1 ? p->k8 : p->v8;
    const int hk = which ? h : h / (sp->h / sp->hk);
    const float d = p->ds[which] ? p->ds[which][(size_t)b * sp->hk + hk] : 1.0f;
    return e4m3_to_f32(src[i]) * d;
}

size_t lse_at(const prob *p, int b, int h, int i)
{
    return ((size_t)b * p->s.h + h) * p->s.sq + i;
}

spec make_spec(int hd, fa3_dtype dt, fa3_mask mask, int batch, int sq, int sk, int h,
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
    s.out = FA3_DTYPE_AUTO;
    s.descales = 1;
    return s;
}

/* Runs p with the kernel of another mask (and its windows) on the same inputs. */
void run_with_mask(prob *p, fa3_mask mask, int wl, int wr)
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
