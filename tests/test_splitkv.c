/*
 * test_splitkv: split-KV's forward kernel (config split_kv = 1) on the GPU, its fp32 partials
 * checked split by split against an fp64 host attention over that split's keys. The kernel runs
 * alone (fa3_tools_fwd_partials, runtime/tools_api.h), so the partials are seen before any
 * combine: for row i of tile m (rows m·block_m .. +block_m-1) with key blocks [nmin, nmax) (the
 * blocks the tile's rows see, bottom-right aligned, fa3jit.h's masks), split s takes blocks
 * [nmin + s·chunk, min(nmax, nmin + (s+1)·chunk)), chunk = ceil((nmax - nmin) / num_splits)
 * (issue 16's interface). Its partials: O_s = Σ p·v / l_s over the keys of those blocks the row
 * sees, LSE_s = ln Σ exp(score) (the scaled, capped scores); a row that sees none of them: O_s = 0
 * and LSE_s = -inf exactly. Rows are indexed as the LSE output: (b·num_heads + h)·seqlen_q + i,
 * varlen h·total_q + packed row.
 *
 * Each case: fresh random inputs (seed printed), partials NaN-prefilled (every row < the
 * sequence's length must be written by every split; varlen rows past cu_seqlens_q[batch] must
 * stay NaN), num_splits 1, 2, 3, 7 and more splits than the longest tile has key blocks; the
 * tolerance rule of tools/common/tolerance.h with the dtype emulated on P (P rounded to the
 * dtype before PV; e4m3: P·2^8 to e4m3) for O, TOL_LSE (e4m3: tol_lse_bound) for LSE.
 *
 * Tests: dense (hd64/128, bf16, none and causal, decode and prefill shapes, seqlen_q > seqlen_k
 * with rows that see no key), features (fp16 local softcap, e4m3 causal), paged (shuffled pages,
 * seqused_k, causal), varlen (random lengths, an empty sequence, rows past the end).
 * Without a GPU every test skips (exit 77). Environment: FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER.
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

typedef struct sk_case {
    const char *id;
    int head_dim;
    fa3_dtype dtype;
    fa3_mask mask;
    int wl, wr;       /* local windows */
    int softcap;      /* 1: softcap 30 */
    int batch, seqlen_q, seqlen_k, num_heads, num_heads_k;
    int page_size;    /* > 0: paged K/V (shuffled pages, seqused_k random per sequence) */
    int varlen;       /* 1: packed sequences of random lengths up to seqlen_q / seqlen_k */
} sk_case;

/* The host side of one case: inputs as the device has them, each sequence's bounds. */
typedef struct sk_data {
    const sk_case *c;
    int bm, bn, es, hd;
    size_t q_elems, kv_rows;   /* Q elements, K/V rows (of num_heads_k · head_dim) */
    void *q, *k, *v;           /* host copies of the device inputs (dtype elements) */
    float *qf, *kf, *vf;       /* the same as floats (exact) */
    int *qoff, *sq, *sk;       /* per sequence: first packed Q row, query rows, keys */
    int *koff;                 /* non-paged: first K/V row */
    int *pages;                /* paged: (batch, pages_per_seq) page table */
    int pages_per_seq, num_pages;
    int total_q, rows;         /* packed Q rows (varlen: the tensor's, past cu[batch] too);
                                  partial rows of one split */
} sk_data;

/* The n elements of buf (dtype) as floats (exact) into a new array. */
static float *to_floats(const sk_data *d, const void *buf, size_t n)
{
    float *f = malloc(sizeof *f * (n ? n : 1));
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = d->c->dtype == FA3_DTYPE_E4M3 ? e4m3_to_f32(((const uint8_t *)buf)[i])
                                             : dtype_to_f32(d->c->dtype,
                                                            ((const uint16_t *)buf)[i]);
    return f;
}

/* K/V row of key j of sequence b (in rows of num_heads_k · head_dim elements). */
static size_t kv_row(const sk_data *d, int b, int j)
{
    if (d->c->page_size > 0) {
        const int ps = d->c->page_size;
        return (size_t)d->pages[(size_t)b * d->pages_per_seq + j / ps] * ps + j % ps;
    }
    return (size_t)d->koff[b] + j;
}

/* P as the kernel rounds it before PV (the emulated reference). */
static double round_p(fa3_dtype dt, double p)
{
    if (dt == FA3_DTYPE_E4M3)
        return e4m3_to_f32(f32_to_e4m3((float)(p * 256.0))) / 256.0;
    return dtype_to_f32(dt, f32_to_dtype(dt, (float)p));
}

static void fill_inputs(host_rng *r, const sk_data *d, void *buf, size_t n)
{
    if (d->c->dtype == FA3_DTYPE_E4M3) {
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)buf)[i] = f32_to_e4m3((float)rng_normal(r));
        return;
    }
    fill_normal(r, buf, n, d->c->dtype, 1.0);
}

/* The key blocks [*nmin, *nmax) of the tile of rows m0 .. m0+bm-1 in a sequence of sq rows and
   sk keys (fa3jit.h's bottom-right aligned windows; -1 unlimited). */
static void tile_blocks(const sk_data *d, int m0, int sq, int sk, int *nmin, int *nmax)
{
    const int wl = d->c->wl, wr = d->c->wr, diag = sk - sq;
    int kend = sk; /* one past the last key the tile's last row sees */
    if (wr >= 0 && m0 + d->bm - 1 + diag + wr + 1 < kend)
        kend = m0 + d->bm - 1 + diag + wr + 1;
    *nmax = kend > 0 ? (kend + d->bn - 1) / d->bn : 0;
    const int kfirst = wl >= 0 ? m0 + diag - wl : 0;
    *nmin = kfirst > 0 ? kfirst / d->bn : 0;
}

/* Runs one num_splits and judges every partial; fails the test on the first bad case. */
static void run_splits(const sk_data *d, fa3_kernel *kern, fa3_fwd_args *a, int ns)
{
    const sk_case *c = d->c;
    const int hd = d->hd, H = c->num_heads, HK = c->num_heads_k;
    const size_t no = (size_t)ns * d->rows * hd, nl = (size_t)ns * d->rows;
    CUdeviceptr op = gpu_alloc(no * 4), lp = gpu_alloc(nl * 4);
    gpu_fill_nan32(op, no);
    gpu_fill_nan32(lp, nl);
    CHECK(fa3_tools_fwd_partials(kern, a, ns, (void *)(uintptr_t)op, (void *)(uintptr_t)lp,
                                 NULL));
    gpu_sync();
    float *o = malloc(no * 4), *lse = malloc(nl * 4);
    assert_non_null(o);
    assert_non_null(lse);
    gpu_download(o, op, no * 4);
    gpu_download(lse, lp, nl * 4);
    gpu_free(op);
    gpu_free(lp);

    const double scale = 1.0 / sqrt((double)hd), cap = c->softcap ? 30.0 : 0.0;
    tol_acc acc = {0};
    acc.lse_tol = tol_lse_bound(c->dtype == FA3_DTYPE_E4M3, hd);
    int bad = 0, empty_rows = 0;
    char why[512] = "";
    double *sc = malloc(sizeof *sc * (size_t)(c->seqlen_k > 0 ? c->seqlen_k : 1));
    double *acc_o = malloc(sizeof *acc_o * hd), *acc_e = malloc(sizeof *acc_e * hd);
    assert_true(sc && acc_o && acc_e);
    unsigned char *written = calloc(nl, 1);
    assert_non_null(written);
    for (int b = 0; b < c->batch; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < d->sq[b]; i++) {
                const int sq = d->sq[b], sk = d->sk[b], kh = h / (H / HK), m0 = i / d->bm * d->bm;
                int nmin, nmax;
                tile_blocks(d, m0, sq, sk, &nmin, &nmax);
                const int niters = nmax > nmin ? nmax - nmin : 0;
                const int chunk = (niters + ns - 1) / ns;
                const size_t row = c->varlen ? (size_t)h * d->total_q + d->qoff[b] + i
                                             : ((size_t)b * H + h) * sq + i;
                const int diag = sk - sq;
                const int lo_vis = c->wl >= 0 ? i + diag - c->wl : 0;
                const int hi_vis = c->wr >= 0 ? i + diag + c->wr : sk - 1;
                const size_t qi = ((size_t)(d->qoff[b] + i) * H + h) * hd;
                for (int s = 0; s < ns; s++) {
                    const size_t pr = (size_t)s * d->rows + row;
                    written[pr] = 1;
                    int k0 = (nmin + s * chunk) * d->bn, k1 = (nmin + (s + 1) * chunk) * d->bn;
                    if (k1 > nmax * d->bn)
                        k1 = nmax * d->bn;
                    if (k0 < lo_vis)
                        k0 = lo_vis;
                    if (k1 > hi_vis + 1)
                        k1 = hi_vis + 1;
                    if (k1 > sk)
                        k1 = sk;
                    if (k0 < 0)
                        k0 = 0;
                    const float *os = o + pr * hd;
                    if (k0 >= k1) { /* no key of this split: exactly O = 0, LSE = -inf */
                        empty_rows++;
                        int ok = isinf(lse[pr]) && lse[pr] < 0;
                        for (int x = 0; x < hd && ok; x++)
                            ok = os[x] == 0.0f;
                        if (!ok && bad++ == 0)
                            snprintf(why, sizeof why, "split %d, b %d h %d row %d sees no key: "
                                     "LSE %g (want -inf), O[0] %g (want 0)", s, b, h, i,
                                     (double)lse[pr], (double)os[0]);
                        continue;
                    }
                    double mx = -INFINITY;
                    for (int j = k0; j < k1; j++) {
                        const size_t ki = (kv_row(d, b, j) * HK + kh) * hd;
                        double dot = 0;
                        for (int x = 0; x < hd; x++)
                            dot += (double)d->qf[qi + x] * d->kf[ki + x];
                        double sv = dot * scale;
                        if (cap > 0)
                            sv = cap * tanh(sv / cap);
                        sc[j - k0] = sv;
                        mx = sv > mx ? sv : mx;
                    }
                    double l = 0;
                    for (int x = 0; x < hd; x++)
                        acc_o[x] = acc_e[x] = 0;
                    for (int j = k0; j < k1; j++) {
                        const double p = exp(sc[j - k0] - mx), pe = round_p(c->dtype, p);
                        l += p;
                        const size_t vi = (kv_row(d, b, j) * HK + kh) * hd;
                        for (int x = 0; x < hd; x++) {
                            const double vv = d->vf[vi + x];
                            acc_o[x] += p * vv;
                            acc_e[x] += pe * vv;
                        }
                    }
                    for (int x = 0; x < hd; x++)
                        tol_add_o(&acc, pr * hd + x, os[x], acc_o[x] / l, acc_e[x] / l);
                    tol_add_lse(&acc, pr, lse[pr], mx + log(l));
                }
            }
    /* rows no sequence owns (varlen: past cu_seqlens_q[batch]) keep the NaN prefill */
    for (size_t pr = 0; pr < nl; pr++)
        if (!written[pr] && !isnan(lse[pr]) && bad++ == 0)
            snprintf(why, sizeof why, "partial row %zu (no sequence's) was written: LSE %g", pr,
                     (double)lse[pr]);
    char line[256];
    printf("  %s num_splits %d: %s, %d empty split rows%s%s\n", c->id, ns,
           tol_format(&acc, line, sizeof line), empty_rows, bad ? ": " : "", why);
    free(written);
    free(sc);
    free(acc_o);
    free(acc_e);
    free(o);
    free(lse);
    if (bad)
        fail_msg("%s num_splits %d: %d bad empty-split or stray rows; first: %s", c->id, ns, bad,
                 why);
    if (!tol_o_ok(&acc) || !tol_lse_ok(&acc))
        fail_msg("%s num_splits %d: %s (O element %zu, LSE row %zu)", c->id, ns, line,
                 acc.worst_o, acc.worst_lse);
}

/* Builds the case's inputs and kernel, then runs every num_splits of splits[] (0-terminated). */
static void run_case(const sk_case *c, const int *splits)
{
    host_rng r;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the case's id: its own inputs */
    for (const char *p = c->id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    rng_init(&r, g_seed ^ h);
    sk_data d = {.c = c, .hd = c->head_dim};
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = c->head_dim;
    cfg.dtype = c->dtype;
    cfg.mask = c->mask;
    cfg.softcap = c->softcap;
    cfg.varlen = c->varlen;
    cfg.paged_kv = c->page_size > 0;
    cfg.split_kv = 1;
    fa3_kernel *kern;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &kern));
    fa3_kernel_info info;
    CHECK(fa3_kernel_get_info(kern, &info));
    d.bm = info.block_m;
    d.bn = info.block_n;
    d.es = c->dtype == FA3_DTYPE_E4M3 ? 1 : 2;
    const int B = c->batch, H = c->num_heads, HK = c->num_heads_k, hd = c->head_dim;
    d.qoff = calloc((size_t)B + 1, sizeof(int));
    d.koff = calloc((size_t)B + 1, sizeof(int));
    d.sq = calloc((size_t)B, sizeof(int));
    d.sk = calloc((size_t)B, sizeof(int));
    assert_true(d.qoff && d.koff && d.sq && d.sk);
    int max_sq = 0, max_sk = 0;
    for (int b = 0; b < B; b++) {
        if (c->varlen) { /* random lengths; sequence 1 has no query rows */
            d.sq[b] = b == 1 ? 0 : 1 + (int)(rng_uniform(&r) * c->seqlen_q);
            d.sk[b] = (int)(rng_uniform(&r) * (c->seqlen_k + 1));
        } else {
            d.sq[b] = c->seqlen_q;
            d.sk[b] = c->seqlen_k;
        }
        if (c->page_size > 0) /* seqused_k: this sequence's keys, up to the capacity */
            d.sk[b] = b == 0 ? c->seqlen_k : 1 + (int)(rng_uniform(&r) * c->seqlen_k);
        d.qoff[b + 1] = d.qoff[b] + d.sq[b];
        d.koff[b + 1] = d.koff[b] + d.sk[b];
        max_sq = d.sq[b] > max_sq ? d.sq[b] : max_sq;
        max_sk = d.sk[b] > max_sk ? d.sk[b] : max_sk;
    }
    /* varlen: 7 rows past cu_seqlens_q[batch], which no split may write */
    d.total_q = c->varlen ? d.qoff[B] + 7 : B * c->seqlen_q;
    d.rows = H * d.total_q; /* rectangular: batch·num_heads·seqlen_q */
    if (c->page_size > 0) {
        d.pages_per_seq = (c->seqlen_k + c->page_size - 1) / c->page_size;
        d.num_pages = B * d.pages_per_seq + 3; /* 3 pages no sequence uses */
        d.pages = malloc(sizeof(int) * (size_t)B * d.pages_per_seq);
        int *perm = malloc(sizeof(int) * (size_t)d.num_pages);
        assert_true(d.pages && perm);
        for (int p = 0; p < d.num_pages; p++)
            perm[p] = p;
        for (int p = d.num_pages - 1; p > 0; p--) { /* Fisher-Yates */
            const int q = (int)(rng_uniform(&r) * (p + 1)) % (p + 1), t = perm[p];
            perm[p] = perm[q];
            perm[q] = t;
        }
        memcpy(d.pages, perm, sizeof(int) * (size_t)B * d.pages_per_seq);
        free(perm);
        d.kv_rows = (size_t)d.num_pages * c->page_size;
    } else {
        d.kv_rows = c->varlen ? (size_t)d.koff[B] + 5 : (size_t)B * c->seqlen_k;
    }
    if (d.kv_rows == 0)
        d.kv_rows = 1;
    d.q_elems = (size_t)d.total_q * H * hd;
    const size_t kv_elems = d.kv_rows * HK * hd;
    d.q = malloc(d.q_elems * d.es);
    d.k = malloc(kv_elems * d.es);
    d.v = malloc(kv_elems * d.es);
    assert_true(d.q && d.k && d.v);
    fill_inputs(&r, &d, d.q, d.q_elems);
    fill_inputs(&r, &d, d.k, kv_elems);
    fill_inputs(&r, &d, d.v, kv_elems);
    d.qf = to_floats(&d, d.q, d.q_elems);
    d.kf = to_floats(&d, d.k, kv_elems);
    d.vf = to_floats(&d, d.v, kv_elems);
    CUdeviceptr q = gpu_alloc(d.q_elems * d.es), k = gpu_alloc(kv_elems * d.es);
    CUdeviceptr v = gpu_alloc(kv_elems * d.es), o = gpu_alloc((size_t)d.total_q * H * hd * 2);
    gpu_upload(q, d.q, d.q_elems * d.es);
    gpu_upload(k, d.k, kv_elems * d.es);
    gpu_upload(v, d.v, kv_elems * d.es);
    CUdeviceptr cuq = 0, cuk = 0, used = 0, pt = 0;

    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)q;
    a.k = (const void *)(uintptr_t)k;
    a.v = (const void *)(uintptr_t)v;
    a.o = (void *)(uintptr_t)o;
    a.batch = B;
    a.seqlen_q = c->varlen ? d.total_q : c->seqlen_q;
    a.seqlen_k = c->varlen ? (int)d.kv_rows : c->seqlen_k;
    a.num_heads = H;
    a.num_heads_k = HK;
    fa3_fwd_args_set_contiguous(&a, hd, hd);
    if (c->mask == FA3_MASK_LOCAL) {
        a.window_size_left = c->wl;
        a.window_size_right = c->wr;
    }
    if (c->softcap)
        a.softcap = 30.0f;
    if (c->varlen) {
        cuq = gpu_alloc(sizeof(int) * (size_t)(B + 1));
        cuk = gpu_alloc(sizeof(int) * (size_t)(B + 1));
        gpu_upload(cuq, d.qoff, sizeof(int) * (size_t)(B + 1));
        gpu_upload(cuk, d.koff, sizeof(int) * (size_t)(B + 1));
        a.cu_seqlens_q = (const int32_t *)(uintptr_t)cuq;
        a.cu_seqlens_k = (const int32_t *)(uintptr_t)cuk;
        a.max_seqlen_q = max_sq;
        a.max_seqlen_k = max_sk;
    }
    if (c->page_size > 0) {
        used = gpu_alloc(sizeof(int) * (size_t)B);
        pt = gpu_alloc(sizeof(int) * (size_t)B * d.pages_per_seq);
        gpu_upload(used, d.sk, sizeof(int) * (size_t)B);
        gpu_upload(pt, d.pages, sizeof(int) * (size_t)B * d.pages_per_seq);
        a.seqused_k = (const int32_t *)(uintptr_t)used;
        a.page_table = (const int32_t *)(uintptr_t)pt;
        a.num_pages = d.num_pages;
        a.page_size = c->page_size;
        a.max_pages_per_seq = d.pages_per_seq;
        a.page_table_stride = d.pages_per_seq;
        /* (num_pages, page_size, num_heads_k, head_dim) */
        a.k_row_stride = a.v_row_stride = (int64_t)HK * hd;
        a.k_head_stride = a.v_head_stride = hd;
        a.k_batch_stride = a.v_batch_stride = (int64_t)c->page_size * HK * hd;
    }
    printf("%s: bm %d bn %d, sequences of %d..%d rows, %d keys at most\n", c->id, d.bm, d.bn,
           d.sq[0], max_sq, max_sk);
    for (const int *ns = splits; *ns; ns++)
        run_splits(&d, kern, &a, *ns);
    gpu_free(q);
    gpu_free(k);
    gpu_free(v);
    gpu_free(o);
    gpu_free(cuq);
    gpu_free(cuk);
    gpu_free(used);
    gpu_free(pt);
    free(d.q);
    free(d.k);
    free(d.v);
    free(d.qf);
    free(d.kf);
    free(d.vf);
    free(d.qoff);
    free(d.koff);
    free(d.sq);
    free(d.sk);
    free(d.pages);
}

static sk_case base(const char *id, int hd, fa3_mask mask, int sq, int sk)
{
    sk_case c = {0};
    c.id = id;
    c.head_dim = hd;
    c.dtype = FA3_DTYPE_BF16;
    c.mask = mask;
    c.wl = -1;
    c.wr = mask == FA3_MASK_CAUSAL ? 0 : -1;
    c.batch = 2;
    c.seqlen_q = sq;
    c.seqlen_k = sk;
    c.num_heads = 4;
    c.num_heads_k = 2;
    return c;
}

/* 1, 2, 3, 7 splits and more splits than the tiles have key blocks */
static const int splits_all[] = {1, 2, 3, 7, 24, 0};

static void test_dense(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const sk_case cases[] = {
        base("hd128 none decode", 128, FA3_MASK_NONE, 1, 1000),
        base("hd128 causal prefill", 128, FA3_MASK_CAUSAL, 300, 1000),
        base("hd64 none", 64, FA3_MASK_NONE, 130, 777),
        base("hd64 causal sq > sk", 64, FA3_MASK_CAUSAL, 400, 300), /* rows that see no key */
        base("hd128 causal sq = sk", 128, FA3_MASK_CAUSAL, 640, 640),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], splits_all);
}

static void test_features(void **state)
{
    (void)state;
    REQUIRE_GPU();
    sk_case a = base("hd128 fp16 local softcap", 128, FA3_MASK_LOCAL, 256, 900);
    a.dtype = FA3_DTYPE_FP16;
    a.wl = 200;
    a.wr = 50;
    a.softcap = 1;
    sk_case b = base("hd128 e4m3 causal", 128, FA3_MASK_CAUSAL, 64, 700);
    b.dtype = FA3_DTYPE_E4M3;
    sk_case c = base("hd256 bf16 causal", 256, FA3_MASK_CAUSAL, 130, 500);
    static const int splits[] = {2, 3, 7, 0};
    run_case(&a, splits);
    run_case(&b, splits);
    run_case(&c, splits);
}

static void test_paged(void **state)
{
    (void)state;
    REQUIRE_GPU();
    sk_case a = base("hd128 paged 64 causal decode", 128, FA3_MASK_CAUSAL, 1, 1000);
    a.page_size = 64;
    a.batch = 3;
    sk_case b = base("hd64 paged 16 none", 64, FA3_MASK_NONE, 70, 600);
    b.page_size = 16;
    run_case(&a, splits_all);
    run_case(&b, splits_all);
}

static void test_varlen(void **state)
{
    (void)state;
    REQUIRE_GPU();
    sk_case a = base("hd128 varlen causal", 128, FA3_MASK_CAUSAL, 300, 900);
    a.varlen = 1;
    a.batch = 5;
    sk_case b = base("hd64 varlen none", 64, FA3_MASK_NONE, 200, 500);
    b.varlen = 1;
    b.batch = 4;
    static const int splits[] = {1, 3, 7, 24, 0};
    run_case(&a, splits);
    run_case(&b, splits);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_varlen),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_splitkv", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
