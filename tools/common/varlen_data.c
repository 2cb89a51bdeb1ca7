/* A varlen_check run's memory layer and case data (see varlen_data.h). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/device.h"
#include "tools/common/varlen_data.h"

static void vnote(vl_result *r, const char *fmt, va_list ap)
{
    size_t n = strlen(r->msg);
    if (n + 3 >= sizeof r->msg)
        return;
    if (n)
        n += (size_t)snprintf(r->msg + n, sizeof r->msg - n, "; ");
    vsnprintf(r->msg + n, sizeof r->msg - n, fmt, ap);
}

/* A failed check: the case fails, the run goes on. */
void vx_note(vx *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vnote(x->r, fmt, ap);
    va_end(ap);
    if (x->r->verdict == VL_PASS)
        x->r->verdict = VL_FAIL;
}

/* The case cannot go on: what failed, and why (the status's name). */
void vx_error_msg(vx *x, fa3_status st, const char *what)
{
    if (x->failed)
        return;
    x->failed = 1;
    char line[700];
    snprintf(line, sizeof line, "%s: %s (%s)", x->s->id, what, fa3_strerror(st));
    size_t n = strlen(x->r->msg);
    snprintf(x->r->msg + n, sizeof x->r->msg - n, "%s%s", n ? "; " : "", line);
    x->r->verdict = VL_ERROR;
    x->r->st = st;
}

/* error_msg with the library's message for the failed call what. */
void vx_error(vx *x, fa3_status st, const char *what)
{
    const char *m = fa3_last_error_message();
    char line[600];
    snprintf(line, sizeof line, "%s: %s", what, m && m[0] ? m : "failed");
    vx_error_msg(x, st, line);
}

void *vx_calloc(vx *x, size_t n, size_t size)
{
    if (x->failed)
        return NULL;
    void *p = calloc(n ? n : 1, size);
    if (!p)
        vx_error_msg(x, FA3_ERR_OUT_OF_MEMORY, "out of host memory");
    return p;
}

CUdeviceptr vx_dalloc(vx *x, size_t bytes)
{
    dev_buf b = {0};
    if (x->failed)
        return 0;
    if (dev_alloc(x->drv, &b, bytes) != FA3_OK) {
        vx_error(x, FA3_ERR_CUDA, "cuMemAlloc");
        return 0;
    }
    return b.p;
}

void vx_dfree(vx *x, CUdeviceptr p)
{
    if (p)
        x->drv->cuMemFree(p);
}

void vx_cu(vx *x, fa3_status st, const char *what)
{
    if (!x->failed && st != FA3_OK)
        vx_error(x, st, what);
}

void vx_up(vx *x, CUdeviceptr d, const void *h, size_t bytes)
{
    if (!x->failed && bytes)
        vx_cu(x, FA3_CU(x->drv, cuMemcpyHtoD(d, h, bytes)), "cuMemcpyHtoD");
}

void vx_down(vx *x, void *h, CUdeviceptr d, size_t bytes)
{
    if (!x->failed && bytes)
        vx_cu(x, FA3_CU(x->drv, cuMemcpyDtoH(h, d, bytes)), "cuMemcpyDtoH");
}

/* Rounds n values to the dtype (in place, so the host sees what the kernel sees), uploads. */
CUdeviceptr vx_upload_values(vx *x, float *v, size_t n, fa3_dtype dt)
{
    const size_t es = dt == FA3_DTYPE_E4M3 ? 1 : 2;
    void *h = vx_calloc(x, n, es);
    if (!h)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (dt == FA3_DTYPE_E4M3) {
            ((uint8_t *)h)[i] = f32_to_e4m3(v[i]);
            v[i] = e4m3_to_f32(((uint8_t *)h)[i]);
        } else {
            ((uint16_t *)h)[i] = f32_to_dtype(dt, v[i]);
            v[i] = dtype_to_f32(dt, ((uint16_t *)h)[i]);
        }
    }
    CUdeviceptr d = vx_dalloc(x, n * es);
    vx_up(x, d, h, n * es);
    free(h);
    return d;
}

static CUdeviceptr upload_ints(vx *x, const int32_t *v, size_t n)
{
    if (!v)
        return 0;
    CUdeviceptr d = vx_dalloc(x, n * 4);
    vx_up(x, d, v, n * 4);
    return d;
}

void vd_make(vx *x, vl_data *D, host_rng *r)
{
    const vl_spec *s = x->s;
    memset(D, 0, sizeof *D);
    if (!s->varlen && (!s->page_size || (!s->seqused && s->pattern != VL_EQUAL))) {
        vx_error_msg(x, FA3_ERR_INVALID_ARGUMENT, "a rectangular-Q case needs paged K/V, and "
                     "seqused_k or pattern VL_EQUAL (every sequence max_k keys)");
        return;
    }
    int mk = s->len_q ? vl_case_make_lengths(&D->c, r, s->batch, s->len_q, s->len_k, s->seqused,
                                             s->page_size, s->share_pages, s->poison_tail)
                      : vl_case_make(&D->c, r, s->pattern, s->batch, s->max_q, s->max_k,
                                     s->seqused, s->page_size, s->share_pages, s->poison_tail);
    if (mk != 0) {
        vx_error_msg(x, FA3_ERR_OUT_OF_MEMORY, "out of host memory making the case");
        return;
    }
    vl_case *c = &D->c;
    if (!s->varlen) /* rectangular Q: every sequence has max_q queries */
        for (int b = 0; b < c->batch; b++)
            c->len_q[b] = s->max_q;
    D->sq_rect = s->max_q;
    D->rows_q = s->varlen ? c->total_q + s->extra_q_rows : c->batch * s->max_q;
    if (D->rows_q < 1)
        D->rows_q = 1;
    D->rows_k = vl_key_rows(c);
    D->hdv = s->head_dim_v ? s->head_dim_v : s->head_dim;
    D->odt = s->dtype == FA3_DTYPE_FP16 ||
                     (s->dtype == FA3_DTYPE_E4M3 && s->out_dtype == FA3_DTYPE_FP16)
                 ? FA3_DTYPE_FP16 : FA3_DTYPE_BF16;
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim;
    const size_t nq = (size_t)D->rows_q * H * d, nk = (size_t)D->rows_k * Hk * d;
    const size_t nv = (size_t)D->rows_k * Hk * D->hdv;
    D->q = vx_calloc(x, nq, sizeof(float));
    D->k = vx_calloc(x, nk, sizeof(float));
    D->v = vx_calloc(x, nv, sizeof(float));
    if (x->failed)
        return;
    fill_normal_f32(r, D->q, nq);
    fill_normal_f32(r, D->k, nk);
    fill_normal_f32(r, D->v, nv);
    D->dq = vx_upload_values(x, D->q, nq, s->dtype);
    D->dk = vx_upload_values(x, D->k, nk, s->dtype);
    D->dv = vx_upload_values(x, D->v, nv, s->dtype);
    D->dcu_q = s->varlen ? upload_ints(x, c->cu_q, (size_t)c->batch + 1) : 0;
    D->dcu_k = s->varlen ? upload_ints(x, c->cu_k, (size_t)c->batch + 1) : 0;
    D->dused = upload_ints(x, c->seqused, (size_t)c->batch);
    D->dpages = upload_ints(x, c->page_table, (size_t)c->batch * (size_t)c->max_pages_per_seq);
    if (s->dtype == FA3_DTYPE_E4M3 && !s->no_descales) {
        float **ds[3] = {&D->ds_q, &D->ds_k, &D->ds_v};
        CUdeviceptr *dds[3] = {&D->dds_q, &D->dds_k, &D->dds_v};
        const size_t n = (size_t)c->batch * Hk;
        for (int i = 0; i < 3 && !x->failed; i++) {
            if (!(*ds[i] = vx_calloc(x, n, sizeof(float))))
                return;
            for (size_t j = 0; j < n; j++)
                (*ds[i])[j] = (float)(0.5 + 1.5 * rng_uniform(r));
            *dds[i] = vx_dalloc(x, n * 4);
            vx_up(x, *dds[i], *ds[i], n * 4);
        }
    }
}

void vd_free(vx *x, vl_data *D)
{
    CUdeviceptr p[] = {D->dq, D->dk, D->dv, D->dcu_q, D->dcu_k, D->dused, D->dpages,
                       D->dds_q, D->dds_k, D->dds_v};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        vx_dfree(x, p[i]);
    free(D->q);
    free(D->k);
    free(D->v);
    free(D->ds_q);
    free(D->ds_k);
    free(D->ds_v);
    vl_case_free(&D->c);
}

fa3_config vl_spec_config(const vl_spec *s, int flags)
{
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = s->head_dim;
    cfg.head_dim_v = s->head_dim_v;
    cfg.dtype = s->dtype;
    cfg.out_dtype = s->dtype == FA3_DTYPE_E4M3 && s->out_dtype == FA3_DTYPE_FP16
                        ? FA3_DTYPE_FP16 : FA3_DTYPE_AUTO;
    cfg.mask = s->mask;
    cfg.softcap = s->softcap > 0;
    cfg.block_n = s->block_n;
    cfg.stages = s->stages;
    cfg.block_m = s->block_m;
    cfg.split_kv = s->split_kv;
    cfg.pack_gqa = s->pack_gqa;
    cfg.varlen = flags ? s->varlen : 0;
    cfg.paged_kv = flags ? s->page_size > 0 : 0;
    return cfg;
}

/* The case's varlen / paged arguments over D (o, lse: set by the caller). */
fa3_fwd_args vd_args(const vl_spec *s, const vl_data *D)
{
    const vl_case *c = &D->c;
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim, dv = D->hdv;
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)D->dq;
    a.k = (const void *)(uintptr_t)D->dk;
    a.v = (const void *)(uintptr_t)D->dv;
    a.batch = c->batch;
    a.num_heads = H;
    a.num_heads_k = Hk;
    a.seqlen_q = s->varlen ? D->rows_q : D->sq_rect;
    a.q_row_stride = (int64_t)H * d;
    a.o_row_stride = (int64_t)H * dv;
    a.q_head_stride = d;
    a.o_head_stride = dv;
    a.q_batch_stride = s->varlen ? 0 : (int64_t)D->sq_rect * H * d;
    a.o_batch_stride = s->varlen ? 0 : (int64_t)D->sq_rect * H * dv;
    a.k_row_stride = (int64_t)Hk * d;
    a.v_row_stride = (int64_t)Hk * dv;
    a.k_head_stride = d;
    a.v_head_stride = dv;
    if (s->page_size) {
        a.k_batch_stride = (int64_t)s->page_size * Hk * d;
        a.v_batch_stride = (int64_t)s->page_size * Hk * dv;
        a.page_table = (const int32_t *)(uintptr_t)D->dpages;
        a.num_pages = c->num_pages;
        a.page_size = s->page_size;
        a.max_pages_per_seq = c->max_pages_per_seq;
        a.page_table_stride = c->max_pages_per_seq;
        /* rectangular: every sequence's keys, or the capacity when seqused_k gives them */
        a.seqlen_k = !s->varlen && !s->seqused ? s->max_k : c->max_pages_per_seq * s->page_size;
    } else {
        a.seqlen_k = c->total_k;
    }
    if (s->varlen) {
        a.cu_seqlens_q = (const int32_t *)(uintptr_t)D->dcu_q;
        a.cu_seqlens_k = (const int32_t *)(uintptr_t)D->dcu_k;
        a.max_seqlen_q = c->max_q;
        a.max_seqlen_k = c->max_k;
    }
    a.seqused_k = (const int32_t *)(uintptr_t)D->dused;
    a.softcap = s->softcap;
    a.window_size_left = s->mask == FA3_MASK_LOCAL ? s->wl : -1;
    a.window_size_right = s->mask == FA3_MASK_LOCAL ? s->wr : -1;
    a.descale_q = (const float *)(uintptr_t)D->dds_q;
    a.descale_k = (const float *)(uintptr_t)D->dds_k;
    a.descale_v = (const float *)(uintptr_t)D->dds_v;
    return a;
}

/* The packed row of query i of sequence b (the O rows). */
int64_t vd_q_row(const vl_spec *s, const vl_data *D, int b, int i)
{
    return s->varlen ? (int64_t)D->c.cu_q[b] + i : (int64_t)b * D->sq_rect + i;
}

/* The LSE index of query i, head h of sequence b: (num_heads, rows_q) varlen, else
   (batch, num_heads, seqlen_q). */
int64_t vd_lse_at(const vl_spec *s, const vl_data *D, int b, int i, int h)
{
    return s->varlen ? (int64_t)h * D->rows_q + D->c.cu_q[b] + i
                     : ((int64_t)b * s->num_heads + h) * D->sq_rect + i;
}

/* fp64 attention of row i, head h of sequence b into o (head_dim_v) and *lse. 0, or -1 out of
   memory. */
int vd_host_row(const vl_spec *s, const vl_data *D, int b, int i, int h, double *o, double *lse)
{
    const vl_case *c = &D->c;
    const int Hk = s->num_heads_k, d = s->head_dim, dv = D->hdv, hk = h / (s->num_heads / Hk);
    const int sq = c->len_q[b], sk = c->len_k[b];
    const double scale = 1.0 / sqrt((double)d);
    const double dq = D->ds_q ? D->ds_q[b * Hk + hk] : 1, dk = D->ds_k ? D->ds_k[b * Hk + hk] : 1;
    const double dsv = D->ds_v ? D->ds_v[b * Hk + hk] : 1;
    const int64_t diag = (int64_t)i + sk - sq;
    int64_t lo = 0, hi = sk - 1;
    if (s->mask == FA3_MASK_CAUSAL && diag < hi)
        hi = diag;
    if (s->mask == FA3_MASK_LOCAL) {
        if (s->wl >= 0 && diag - s->wl > lo)
            lo = diag - s->wl;
        if (s->wr >= 0 && diag + s->wr < hi)
            hi = diag + s->wr;
    }
    memset(o, 0, (size_t)dv * sizeof *o);
    *lse = -INFINITY;
    if (lo > hi)
        return 0;
    const float *q = D->q + (vd_q_row(s, D, b, i) * s->num_heads + h) * d;
    double *sc = calloc((size_t)(hi - lo + 1), sizeof(double));
    if (!sc)
        return -1;
    double m = -INFINITY, l = 0;
    for (int64_t j = lo; j <= hi; j++) {
        const float *k = D->k + (vl_key_row(c, b, (int)j) * Hk + hk) * d;
        double dot = 0;
        for (int t = 0; t < d; t++)
            dot += (double)q[t] * dq * ((double)k[t] * dk);
        double x = dot * scale;
        if (s->softcap > 0)
            x = s->softcap * tanh(x / s->softcap);
        sc[j - lo] = x;
        m = x > m ? x : m;
    }
    for (int64_t j = lo; j <= hi; j++) {
        const float *v = D->v + (vl_key_row(c, b, (int)j) * Hk + hk) * dv;
        double p = exp(sc[j - lo] - m);
        l += p;
        for (int t = 0; t < dv; t++)
            o[t] += p * (double)v[t] * dsv;
    }
    for (int t = 0; t < dv; t++)
        o[t] /= l;
    *lse = m + log(l);
    free(sc);
    return 0;
}

/* Sequence b alone as a dense (batch 1) call: its Q rows and gathered keys in fresh buffers. */
void vd_dense_of(vx *x, const vl_data *D, int b, fa3_fwd_args *a, CUdeviceptr bufs[3])
{
    const vl_spec *s = x->s;
    const vl_case *c = &D->c;
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim, dv = D->hdv;
    const int sq = c->len_q[b], sk = c->len_k[b];
    const size_t nq = (size_t)sq * H * d, nk = (size_t)sk * Hk * d, nv = (size_t)sk * Hk * dv;
    float *q = vx_calloc(x, nq, 4), *k = vx_calloc(x, nk, 4), *v = vx_calloc(x, nv, 4);
    bufs[0] = bufs[1] = bufs[2] = 0;
    if (!x->failed) {
        memcpy(q, D->q + vd_q_row(s, D, b, 0) * H * d, nq * 4);
        for (int j = 0; j < sk; j++) {
            memcpy(k + (size_t)j * Hk * d, D->k + vl_key_row(c, b, j) * Hk * d,
                   (size_t)Hk * d * 4);
            memcpy(v + (size_t)j * Hk * dv, D->v + vl_key_row(c, b, j) * Hk * dv,
                   (size_t)Hk * dv * 4);
        }
        bufs[0] = vx_upload_values(x, q, nq, s->dtype); /* already representable: unchanged */
        bufs[1] = vx_upload_values(x, k, nk, s->dtype);
        bufs[2] = vx_upload_values(x, v, nv, s->dtype);
    }
    free(q);
    free(k);
    free(v);
    fa3_fwd_args_init(a);
    a->q = (const void *)(uintptr_t)bufs[0];
    a->k = (const void *)(uintptr_t)bufs[1];
    a->v = (const void *)(uintptr_t)bufs[2];
    a->batch = 1;
    a->seqlen_q = sq;
    a->seqlen_k = sk;
    a->num_heads = H;
    a->num_heads_k = Hk;
    fa3_fwd_args_set_contiguous(a, d, dv);
    a->softcap = s->softcap;
    a->window_size_left = s->mask == FA3_MASK_LOCAL ? s->wl : -1;
    a->window_size_right = s->mask == FA3_MASK_LOCAL ? s->wr : -1;
    if (D->dds_q) { /* sequence b's descales */
        a->descale_q = (const float *)(uintptr_t)D->dds_q + (size_t)b * Hk;
        a->descale_k = (const float *)(uintptr_t)D->dds_k + (size_t)b * Hk;
        a->descale_v = (const float *)(uintptr_t)D->dds_v + (size_t)b * Hk;
    }
}
