/* Runs and judges one test_varlen case (see varlen_run.h). */
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
#include "varlen_run.h"

fa3_context *g_vl_ctx;
uint64_t g_vl_seed;

/* Host and device copies of one case. */
typedef struct vl_data {
    vl_case c;
    int rows_q;             /* rows of Q/O: total_q + extra (varlen) or batch · max_q */
    int64_t rows_k;         /* rows of the K/V storage */
    int sq_rect;            /* rectangular Q: queries per sequence */
    int es;                 /* bytes per Q/K/V element */
    float *q, *k, *v;       /* the values the kernel sees, dequantized (no descale) */
    float *ds_q, *ds_k, *ds_v; /* e4m3: (batch, num_heads_k); else NULL */
    CUdeviceptr dq, dk, dv, dcu_q, dcu_k, dused, dpages, dds_q, dds_k, dds_v;
} vl_data;

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail_msg("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

/* Rounds n values to the dtype (in place, so the host sees what the kernel sees) and uploads. */
static CUdeviceptr upload_values(float *x, size_t n, fa3_dtype dt)
{
    const size_t es = dt == FA3_DTYPE_E4M3 ? 1 : 2;
    void *h = xcalloc(n, es);
    for (size_t i = 0; i < n; i++) {
        if (dt == FA3_DTYPE_E4M3) {
            ((uint8_t *)h)[i] = f32_to_e4m3(x[i]);
            x[i] = e4m3_to_f32(((uint8_t *)h)[i]);
        } else {
            ((uint16_t *)h)[i] = f32_to_dtype(dt, x[i]);
            x[i] = dtype_to_f32(dt, ((uint16_t *)h)[i]);
        }
    }
    CUdeviceptr d = gpu_alloc(n * es);
    gpu_upload(d, h, n * es);
    free(h);
    return d;
}

static CUdeviceptr upload_ints(const int32_t *x, size_t n)
{
    if (!x)
        return 0;
    CUdeviceptr d = gpu_alloc(n * 4);
    gpu_upload(d, x, n * 4);
    return d;
}

static void data_make(vl_data *D, const vl_spec *s, host_rng *r)
{
    memset(D, 0, sizeof *D);
    if (!s->varlen && !s->seqused && s->pattern != VL_EQUAL)
        fail_msg("%s: a rectangular case without seqused_k needs pattern VL_EQUAL", s->id);
    if ((s->len_q ? vl_case_make_lengths(&D->c, r, s->batch, s->len_q, s->len_k, s->seqused,
                                         s->page_size, s->share_pages, s->poison_tail)
                  : vl_case_make(&D->c, r, s->pattern, s->batch, s->max_q, s->max_k, s->seqused,
                                 s->page_size, s->share_pages, s->poison_tail)) != 0)
        fail_msg("%s: out of memory", s->id);
    vl_case *c = &D->c;
    if (!s->varlen) /* rectangular Q: every sequence has max_q queries */
        for (int b = 0; b < c->batch; b++)
            c->len_q[b] = s->max_q;
    D->sq_rect = s->max_q;
    D->rows_q = s->varlen ? c->total_q + s->extra_q_rows : c->batch * s->max_q;
    if (D->rows_q < 1)
        D->rows_q = 1;
    D->rows_k = vl_key_rows(c);
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim;
    const size_t nq = (size_t)D->rows_q * H * d, nk = (size_t)D->rows_k * Hk * d;
    D->q = xcalloc(nq, sizeof(float));
    D->k = xcalloc(nk, sizeof(float));
    D->v = xcalloc(nk, sizeof(float));
    fill_normal_f32(r, D->q, nq);
    fill_normal_f32(r, D->k, nk);
    fill_normal_f32(r, D->v, nk);
    D->es = s->dtype == FA3_DTYPE_E4M3 ? 1 : 2;
    D->dq = upload_values(D->q, nq, s->dtype);
    D->dk = upload_values(D->k, nk, s->dtype);
    D->dv = upload_values(D->v, nk, s->dtype);
    D->dcu_q = s->varlen ? upload_ints(c->cu_q, (size_t)c->batch + 1) : 0;
    D->dcu_k = s->varlen ? upload_ints(c->cu_k, (size_t)c->batch + 1) : 0;
    D->dused = upload_ints(c->seqused, (size_t)c->batch);
    D->dpages = upload_ints(c->page_table, (size_t)c->batch * (size_t)c->max_pages_per_seq);
    if (s->dtype == FA3_DTYPE_E4M3) {
        float **ds[3] = {&D->ds_q, &D->ds_k, &D->ds_v};
        CUdeviceptr *dds[3] = {&D->dds_q, &D->dds_k, &D->dds_v};
        const size_t n = (size_t)c->batch * Hk;
        for (int i = 0; i < 3; i++) {
            *ds[i] = xcalloc(n, sizeof(float));
            for (size_t j = 0; j < n; j++)
                (*ds[i])[j] = (float)(0.5 + 1.5 * rng_uniform(r));
            *dds[i] = gpu_alloc(n * 4);
            gpu_upload(*dds[i], *ds[i], n * 4);
        }
    }
}

static void data_free(vl_data *D)
{
    CUdeviceptr p[] = {D->dq, D->dk, D->dv, D->dcu_q, D->dcu_k, D->dused, D->dpages,
                       D->dds_q, D->dds_k, D->dds_v};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        gpu_free(p[i]);
    free(D->q);
    free(D->k);
    free(D->v);
    free(D->ds_q);
    free(D->ds_k);
    free(D->ds_v);
    vl_case_free(&D->c);
}

static fa3_config spec_config(const vl_spec *s, int flags)
{
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = s->head_dim;
    cfg.dtype = s->dtype;
    cfg.mask = s->mask;
    cfg.softcap = s->softcap > 0;
    cfg.varlen = flags ? s->varlen : 0;
    cfg.paged_kv = flags ? s->page_size > 0 : 0;
    return cfg;
}

/* The case's varlen / paged arguments over D (o, lse: set by the caller). */
static fa3_fwd_args spec_args(const vl_spec *s, const vl_data *D)
{
    const vl_case *c = &D->c;
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim;
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)D->dq;
    a.k = (const void *)(uintptr_t)D->dk;
    a.v = (const void *)(uintptr_t)D->dv;
    a.batch = c->batch;
    a.num_heads = H;
    a.num_heads_k = Hk;
    a.seqlen_q = s->varlen ? D->rows_q : D->sq_rect;
    a.q_row_stride = a.o_row_stride = (int64_t)H * d;
    a.q_head_stride = a.o_head_stride = d;
    a.q_batch_stride = a.o_batch_stride = s->varlen ? 0 : (int64_t)D->sq_rect * H * d;
    a.k_row_stride = a.v_row_stride = (int64_t)Hk * d;
    a.k_head_stride = a.v_head_stride = d;
    if (s->page_size) {
        a.k_batch_stride = a.v_batch_stride = (int64_t)s->page_size * Hk * d;
        a.page_table = (const int32_t *)(uintptr_t)D->dpages;
        a.num_pages = c->num_pages;
        a.page_size = s->page_size;
        a.max_pages_per_seq = c->max_pages_per_seq;
        a.page_table_stride = c->max_pages_per_seq;
        /* rectangular: every sequence's keys, or the capacity when seqused_k gives them */
        a.seqlen_k = !s->varlen && !s->seqused ? s->max_k
                                               : c->max_pages_per_seq * s->page_size;
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

/* The packed row of query i of sequence b (O rows, LSE columns). */
static int64_t q_row(const vl_spec *s, const vl_data *D, int b, int i)
{
    return s->varlen ? (int64_t)D->c.cu_q[b] + i : (int64_t)b * D->sq_rect + i;
}

/* fp64 attention of row i, head h of sequence b into o (head_dim) and *lse. */
static void host_row(const vl_spec *s, const vl_data *D, int b, int i, int h, double *o,
                     double *lse)
{
    const vl_case *c = &D->c;
    const int Hk = s->num_heads_k, d = s->head_dim, hk = h / (s->num_heads / Hk);
    const int sq = c->len_q[b], sk = c->len_k[b];
    const double scale = 1.0 / sqrt((double)d);
    const double dq = D->ds_q ? D->ds_q[b * Hk + hk] : 1, dk = D->ds_k ? D->ds_k[b * Hk + hk] : 1;
    const double dv = D->ds_v ? D->ds_v[b * Hk + hk] : 1;
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
    memset(o, 0, (size_t)d * sizeof *o);
    *lse = -INFINITY;
    if (lo > hi)
        return;
    const float *q = D->q + (q_row(s, D, b, i) * s->num_heads + h) * d;
    double *sc = xcalloc((size_t)(hi - lo + 1), sizeof(double));
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
        const float *v = D->v + (vl_key_row(c, b, (int)j) * Hk + hk) * d;
        double p = exp(sc[j - lo] - m);
        l += p;
        for (int t = 0; t < d; t++)
            o[t] += p * (double)v[t] * dv;
    }
    for (int t = 0; t < d; t++)
        o[t] /= l;
    *lse = m + log(l);
    free(sc);
}

static int is_nan_bits32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u == NAN32_BITS;
}

/* The reference (fp32) against the fp64 host attention; rows past cu_seqlens_q[batch] unwritten. */
static void check_reference(const vl_spec *s, const vl_data *D, const float *o_ref,
                            const float *lse_ref)
{
    const int H = s->num_heads, d = s->head_dim;
    double *o = xcalloc((size_t)d, sizeof(double)), lse, worst = 0, worst_lse = 0;
    long long rows = 0;
    for (int b = 0; b < D->c.batch; b++)
        for (int i = 0; i < D->c.len_q[b]; i++)
            for (int h = 0; h < H; h++) {
                /* sample rows of long sequences: the first, the last and every 7th */
                if (i > 2 && i < D->c.len_q[b] - 2 && i % 7 != 0)
                    continue;
                host_row(s, D, b, i, h, o, &lse);
                const int64_t r = q_row(s, D, b, i);
                const float *got = o_ref + (r * H + h) * d;
                for (int t = 0; t < d; t++) {
                    double e = fabs(got[t] - o[t]);
                    if (!(e <= worst))
                        worst = e;
                }
                const double gl = lse_ref[(int64_t)h * D->rows_q + r];
                double el = isinf(lse) ? (gl == lse ? 0 : INFINITY) : fabs(gl - lse);
                if (!(el <= worst_lse))
                    worst_lse = el;
                rows++;
            }
    free(o);
    printf("  %s: reference vs fp64 host: %lld rows, max|dO| %.2e, max|dLSE| %.2e\n", s->id,
           rows, worst, worst_lse);
    if (!(worst <= 2e-4) || !(worst_lse <= 2e-4))
        fail_msg("%s: the reference differs from the fp64 host attention: max|dO| %.3g, "
                 "max|dLSE| %.3g (bound 2e-4)", s->id, worst, worst_lse);
    if (s->varlen)
        for (int64_t r = D->c.total_q; r < D->rows_q; r++)
            for (int h = 0; h < H; h++)
                if (!is_nan_bits32(o_ref[(r * H + h) * d]) ||
                    !is_nan_bits32(lse_ref[(int64_t)h * D->rows_q + r]))
                    fail_msg("%s: the reference wrote row %lld past cu_seqlens_q[batch] = %d", s->id,
                             (long long)r, D->c.total_q);
}

/* Runs the reference (emulate 0/1) or, kernel given, fa3_fwd on args with fresh NaN-filled
   outputs; the O and LSE read back as floats into o (rows_q · H · d) and lse (H · rows_q). */
static void run_once(const vl_spec *s, const vl_data *D, fa3_kernel *kernel, const fa3_config *cfg,
                     fa3_fwd_args a, int emulate, float *o, float *lse, int rows_q)
{
    const int H = s->num_heads, d = s->head_dim;
    const size_t no = (size_t)rows_q * H * d, nl = (size_t)H * rows_q;
    const fa3_dtype odt = s->dtype == FA3_DTYPE_FP16 ? FA3_DTYPE_FP16 : FA3_DTYPE_BF16;
    CUdeviceptr dl = gpu_alloc(nl * 4), dout = gpu_alloc(no * (kernel ? 2 : 4));
    gpu_fill_nan32(dl, nl);
    if (kernel)
        gpu_fill_nan16(dout, no, odt);
    else
        gpu_fill_nan32(dout, no);
    (void)D;
    if (kernel) {
        a.o = (void *)(uintptr_t)dout;
        a.lse = (float *)(uintptr_t)dl;
        CHECK(fa3_fwd(kernel, &a, NULL));
        gpu_sync();
        uint16_t *h = xcalloc(no, 2);
        gpu_download(h, dout, no * 2);
        for (size_t i = 0; i < no; i++)
            o[i] = dtype_to_f32(odt, h[i]);
        for (size_t i = 0; i < no; i++) /* keep NaN-prefill bits recognisable */
            if (h[i] == nan16_bits(odt))
                memcpy(&o[i], &(uint32_t){NAN32_BITS}, 4);
        free(h);
    } else {
        CHECK(fa3_reference_fwd_ex(g_vl_ctx, cfg, &a, (float *)(uintptr_t)dout,
                                   (float *)(uintptr_t)dl, emulate, NULL));
        gpu_download(o, dout, no * 4);
    }
    gpu_download(lse, dl, nl * 4);
    gpu_free(dl);
    gpu_free(dout);
}

/* Sequence b alone as a dense (batch 1) call: Q rows and the gathered keys, fresh buffers. */
static void dense_of(const vl_spec *s, const vl_data *D, int b, fa3_fwd_args *a, CUdeviceptr bufs[3])
{
    const vl_case *c = &D->c;
    const int H = s->num_heads, Hk = s->num_heads_k, d = s->head_dim;
    const int sq = c->len_q[b], sk = c->len_k[b];
    const size_t nq = (size_t)sq * H * d, nk = (size_t)sk * Hk * d;
    float *q = xcalloc(nq, 4), *k = xcalloc(nk, 4), *v = xcalloc(nk, 4);
    memcpy(q, D->q + q_row(s, D, b, 0) * H * d, nq * 4);
    for (int j = 0; j < sk; j++) {
        memcpy(k + (size_t)j * Hk * d, D->k + vl_key_row(c, b, j) * Hk * d, (size_t)Hk * d * 4);
        memcpy(v + (size_t)j * Hk * d, D->v + vl_key_row(c, b, j) * Hk * d, (size_t)Hk * d * 4);
    }
    bufs[0] = upload_values(q, nq, s->dtype); /* already representable: unchanged */
    bufs[1] = upload_values(k, nk, s->dtype);
    bufs[2] = upload_values(v, nk, s->dtype);
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
    fa3_fwd_args_set_contiguous(a, d, d);
    a->softcap = s->softcap;
    a->window_size_left = s->mask == FA3_MASK_LOCAL ? s->wl : -1;
    a->window_size_right = s->mask == FA3_MASK_LOCAL ? s->wr : -1;
    if (D->dds_q) { /* sequence b's descales */
        a->descale_q = (const float *)(uintptr_t)D->dds_q + (size_t)b * Hk;
        a->descale_k = (const float *)(uintptr_t)D->dds_k + (size_t)b * Hk;
        a->descale_v = (const float *)(uintptr_t)D->dds_v + (size_t)b * Hk;
    }
}

/* Per sequence, the dense path (the reference when kernel is NULL: bitwise; else the dense kernel:
   within bound) against the varlen result o / lse. */
static void check_dense(const vl_spec *s, const vl_data *D, fa3_kernel *kernel, const float *o,
                        const float *lse, double bound)
{
    const int H = s->num_heads, d = s->head_dim;
    fa3_config dense = spec_config(s, 0);
    double worst = 0, worst_lse = 0;
    for (int b = 0; b < D->c.batch; b++) {
        const int sq = D->c.len_q[b], sk = D->c.len_k[b];
        if (sq == 0 || sk == 0)
            continue; /* no dense call of that shape; its rows are checked as empty */
        fa3_fwd_args a;
        CUdeviceptr bufs[3];
        dense_of(s, D, b, &a, bufs);
        float *od = xcalloc((size_t)sq * H * d, 4), *ld = xcalloc((size_t)H * sq, 4);
        run_once(s, D, kernel, &dense, a, 0, od, ld, sq);
        for (int i = 0; i < sq; i++)
            for (int h = 0; h < H; h++) {
                const int64_t r = q_row(s, D, b, i);
                for (int t = 0; t < d; t++) {
                    double e = fabs(od[((int64_t)i * H + h) * d + t] - o[(r * H + h) * d + t]);
                    if (!(e <= worst))
                        worst = e;
                }
                const double l1 = ld[(int64_t)h * sq + i], l2 = lse[(int64_t)h * D->rows_q + r];
                double el = l1 == l2 ? 0 : fabs(l1 - l2);
                if (!(el <= worst_lse))
                    worst_lse = el;
            }
        free(od);
        free(ld);
        for (int i = 0; i < 3; i++)
            gpu_free(bufs[i]);
    }
    printf("  %s: varlen vs dense %s per sequence: max|dO| %.2e, max|dLSE| %.2e\n", s->id,
           kernel ? "kernel" : "reference", worst, worst_lse);
    if (!kernel ? (worst != 0 || worst_lse != 0) : (!(worst <= bound) ||
                                                 !(worst_lse <= tol_lse_bound(s->dtype ==
                                                                              FA3_DTYPE_E4M3))))
        fail_msg("%s: the varlen %s differs from its dense path per sequence: max|dO| %.3g, "
                 "max|dLSE| %.3g (%s)", s->id, kernel ? "kernel" : "reference", worst, worst_lse,
                 kernel ? "bound: the tolerance rule" : "must be bitwise equal");
}

void vl_run(const vl_spec *s)
{
    host_rng r;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the id: each case its own inputs */
    for (const char *p = s->id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    rng_init(&r, g_vl_seed ^ h);
    vl_data D;
    data_make(&D, s, &r);
    const int H = s->num_heads, d = s->head_dim;
    printf("  %s: batch %d, %s, total_q %d (rows %d), total_k %d, max %d/%d%s%s\n", s->id,
           D.c.batch, vl_pattern_name(s->pattern), D.c.total_q, D.rows_q, D.c.total_k, D.c.max_q,
           D.c.max_k, s->page_size ? ", paged" : "", s->seqused ? ", seqused_k" : "");
    const fa3_config cfg = spec_config(s, 1);
    const fa3_fwd_args a = spec_args(s, &D);
    const size_t no = (size_t)D.rows_q * H * d, nl = (size_t)H * D.rows_q;
    float *o_ref = xcalloc(no, 4), *o_emu = xcalloc(no, 4), *o = xcalloc(no, 4);
    float *l_ref = xcalloc(nl, 4), *l_emu = xcalloc(nl, 4), *l = xcalloc(nl, 4);
    run_once(s, &D, NULL, &cfg, a, 0, o_ref, l_ref, D.rows_q);
    run_once(s, &D, NULL, &cfg, a, 1, o_emu, l_emu, D.rows_q);
    check_reference(s, &D, o_ref, l_ref);
    if (s->check_dense)
        check_dense(s, &D, NULL, o_ref, l_ref, 0);

    fa3_kernel *kernel = NULL;
    fa3_status st = fa3_jit_get_kernel(g_vl_ctx, &cfg, &kernel);
    if (st != FA3_OK) {
        const char *msg = fa3_last_error_message();
        char desc[64];
        fa3_config_describe(&cfg, desc, sizeof desc);
        fail_msg("%s: the library refuses the %s kernel: %s: %s%s", s->id, desc,
                 fa3_strerror(st), msg,
                 strstr(msg, "not generated yet") ? " (the varlen/paged kernel is not generated "
                                                    "yet: this test fails until it is)" : "");
    }
    run_once(s, &D, kernel, &cfg, a, 0, o, l, D.rows_q);
    tol_acc acc = {0};
    acc.lse_tol = tol_lse_bound(s->dtype == FA3_DTYPE_E4M3);
    long long bad = 0;
    for (int b = 0; b < D.c.batch; b++)
        for (int i = 0; i < D.c.len_q[b]; i++)
            for (int h = 0; h < H; h++) {
                const int64_t row = q_row(s, &D, b, i), li = (int64_t)h * D.rows_q + row;
                const float *go = o + (row * H + h) * d, *ro = o_ref + (row * H + h) * d;
                const float *eo = o_emu + (row * H + h) * d;
                if (isinf(l_ref[li])) { /* sees no key: exactly O = 0, LSE = -inf */
                    for (int t = 0; t < d; t++)
                        bad += go[t] != 0.0f;
                    bad += !(isinf(l[li]) && l[li] < 0);
                    continue;
                }
                for (int t = 0; t < d; t++)
                    tol_add_o(&acc, (size_t)((row * H + h) * d + t), go[t], ro[t], eo[t]);
                tol_add_lse(&acc, (size_t)li, l[li], l_ref[li]);
            }
    long long touched = 0; /* E17: rows past cu_seqlens_q[batch] keep their contents */
    if (s->varlen)
        for (int64_t row = D.c.total_q; row < D.rows_q; row++)
            for (int h = 0; h < H; h++) {
                touched += !is_nan_bits32(l[(int64_t)h * D.rows_q + row]);
                for (int t = 0; t < d; t++)
                    touched += !is_nan_bits32(o[(row * H + h) * d + t]);
            }
    char line[256];
    printf("  %s: kernel vs reference: %s, empty-row errors %lld, rows past the end touched %lld\n",
           s->id, tol_format(&acc, line, sizeof line), bad, touched);
    if (!tol_o_ok(&acc) || !tol_lse_ok(&acc) || bad || touched)
        fail_msg("%s: kernel vs reference: %s (worst O element %zu, LSE %zu); %lld wrong "
                 "empty-row values; %lld values written past cu_seqlens_q[batch]", s->id, line,
                 acc.worst_o, acc.worst_lse, bad, touched);
    if (s->check_dense) {
        fa3_kernel *dk = NULL;
        const fa3_config dcfg = spec_config(s, 0);
        CHECK(fa3_jit_get_kernel(g_vl_ctx, &dcfg, &dk));
        check_dense(s, &D, dk, o, l, tol_o_bound(&acc));
    }
    free(o_ref);
    free(o_emu);
    free(o);
    free(l_ref);
    free(l_emu);
    free(l);
    data_free(&D);
}
