/*
 * test_pack_gqa: packed GQA end to end (fa3jit.h fa3_config.pack_gqa): fa3_fwd of pack_gqa = 1
 * configs against the library's reference (tools/common/tolerance.h's rule) and against the same
 * config with pack_gqa = 0, on fresh random inputs (the seed is printed), NaN-prefilled O and LSE.
 * Ratios num_heads / num_heads_k 1, 2, 4, 8, 32 (MQA); seqlen_q 1, 3, 16, 100, 300; seqlen_k 1,
 * 77, 1000, 5000; none / causal (rows that see no key: O = 0, LSE = -inf) / local; softcap; hd 64
 * (block_m 192), 128, 256 and 192x128; e4m3; paged K/V (page_size 16, shuffled pages); split-KV
 * with num_splits 1, 3, 8. O has 3 padding rows after each batch's seqlen_q rows and LSE 64 floats
 * after its end: they must stay NaN. One case has an O that only the register stores can write
 * (4-byte aligned), the others go through the 5-D TMA store where ratio divides 64. A ratio that
 * does not divide block_m (hd64: 32) is refused before any launch, O untouched. One summary line a
 * case. Skips without an sm_90 device. Environment: FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER.
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

#define OPAD 3     /* O rows after each batch's seqlen_q rows, never written */
#define LSE_PAD 64 /* floats after LSE, never written */

typedef struct pcase {
    const char *id;
    int hd, hdv;
    fa3_dtype dt;
    fa3_mask mask;
    int softcap;
    int batch, sq, sk, h, hk;
    int wl, wr;         /* local only */
    int num_splits;     /* 0: split_kv 0; else a split_kv 1 config with these splits */
    int page_size;      /* 0: dense K/V */
    int o_unaligned;    /* 1: O at a 4-byte offset (register stores) */
} pcase;

/* Keys [*first, *last] that query row i sees (first > last: none). */
static void visible(const pcase *c, int i, int *first, int *last)
{
    const int diag = i + c->sk - c->sq;
    int f = 0, l = c->sk - 1;
    if (c->mask == FA3_MASK_CAUSAL)
        l = diag;
    if (c->mask == FA3_MASK_LOCAL) {
        if (c->wl >= 0)
            f = diag - c->wl;
        if (c->wr >= 0)
            l = diag + c->wr;
    }
    *first = f < 0 ? 0 : f;
    *last = l > c->sk - 1 ? c->sk - 1 : l;
}

/* Random dtype inputs of n elements (es bytes each: e4m3 quantized with descale 1). */
static void fill_input(host_rng *rng, uint8_t *dst, size_t n, fa3_dtype dt)
{
    if (dt != FA3_DTYPE_E4M3) {
        fill_normal(rng, (uint16_t *)(void *)dst, n, dt, 1.0);
        return;
    }
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    fill_normal_f32(rng, x, n);
    quantize_e4m3(x, dst, NULL, 1, 1, 1, (int)n, 1);
    free(x);
}

typedef struct bufs {
    CUdeviceptr q, k, v, o_alloc, lse, pt;
    size_t o_elems, lse_elems; /* O buffer (with padding rows), LSE (with its tail) */
} bufs;

/* Runs cfg on args (O/LSE NaN-prefilled first); returns the status, O and LSE downloaded. */
static fa3_status run_fwd(const fa3_config *cfg, fa3_fwd_args *a, const bufs *b, uint16_t *o,
                          float *lse, fa3_dtype odt)
{
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(g_ctx, cfg, &k));
    gpu_fill_nan16(b->o_alloc, b->o_elems, odt);
    gpu_fill_nan32(b->lse, b->lse_elems);
    gpu_sync();
    fa3_status st = fa3_fwd(k, a, NULL);
    gpu_sync();
    gpu_download(o, b->o_alloc, b->o_elems * 2);
    gpu_download(lse, b->lse, b->lse_elems * 4);
    return st;
}

static void run_case(const pcase *c)
{
    const int hdv = c->hdv ? c->hdv : c->hd, es = c->dt == FA3_DTYPE_E4M3 ? 1 : 2;
    const fa3_dtype odt = c->dt == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : c->dt;
    fa3_config cfg, nopack, ref_cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = c->hd;
    cfg.head_dim_v = hdv;
    cfg.dtype = c->dt;
    cfg.mask = c->mask;
    cfg.softcap = c->softcap;
    cfg.paged_kv = c->page_size > 0;
    ref_cfg = cfg;
    cfg.split_kv = c->num_splits > 0;
    nopack = cfg;
    cfg.pack_gqa = 1;
    const size_t nq = (size_t)c->batch * c->sq * c->h * c->hd;
    const size_t nk = (size_t)c->batch * c->sk * c->hk * c->hd;
    const size_t nv = (size_t)c->batch * c->sk * c->hk * hdv;
    const size_t no = (size_t)c->batch * c->sq * c->h * hdv;
    const size_t nl = (size_t)c->batch * c->h * c->sq;
    bufs b = {0};
    b.o_elems = (size_t)c->batch * (c->sq + OPAD) * c->h * hdv + 2;
    b.lse_elems = nl + LSE_PAD;
    uint8_t *q = malloc(nq * es), *kd = malloc(nk * es), *vd = malloc(nv * es);
    uint16_t *o = malloc(b.o_elems * 2), *o0 = malloc(b.o_elems * 2);
    float *lse = malloc(b.lse_elems * 4), *lse0 = malloc(b.lse_elems * 4);
    float *ref = malloc(no * 4), *emul = malloc(no * 4), *ref_lse = malloc(nl * 4);
    assert_true(q && kd && vd && o && o0 && lse && lse0 && ref && emul && ref_lse);
    host_rng rng;
    rng_init(&rng, g_seed ^ ((uint64_t)c->sk * 1000003u + (uint64_t)c->sq * 7919u +
                             (uint64_t)c->h * 31u + (uint64_t)c->hd));
    fill_input(&rng, q, nq, c->dt);
    fill_input(&rng, kd, nk, c->dt);
    fill_input(&rng, vd, nv, c->dt);
    b.q = gpu_alloc(nq * es);
    gpu_upload(b.q, q, nq * es);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.batch = c->batch;
    a.seqlen_q = c->sq;
    a.seqlen_k = c->sk;
    a.num_heads = c->h;
    a.num_heads_k = c->hk;
    fa3_fwd_args_set_contiguous(&a, c->hd, hdv);
    int32_t *pt = NULL;
    if (c->page_size) { /* pages of page_size rows, shuffled, the last page's tail zero */
        const int ps = c->page_size, pps = (c->sk + ps - 1) / ps, np = c->batch * pps;
        const size_t prow_k = (size_t)c->hk * c->hd, prow_v = (size_t)c->hk * hdv;
        uint8_t *kp = calloc((size_t)np * ps * prow_k, es), *vp = calloc((size_t)np * ps * prow_v, es);
        pt = malloc(sizeof *pt * (size_t)np);
        assert_true(kp && vp && pt);
        for (int i = 0; i < np; i++)
            pt[i] = i;
        for (int i = np - 1; i > 0; i--) {
            int j = (int)(rng_uniform(&rng) * (double)(i + 1));
            j = j > i ? i : j;
            const int t = pt[i];
            pt[i] = pt[j];
            pt[j] = t;
        }
        for (int bb = 0; bb < c->batch; bb++)
            for (int j = 0; j < c->sk; j++) {
                const size_t page = (size_t)pt[bb * pps + j / ps], r = (size_t)(j % ps);
                memcpy(kp + ((page * ps + r) * prow_k) * es,
                       kd + (((size_t)bb * c->sk + j) * prow_k) * es, prow_k * es);
                memcpy(vp + ((page * ps + r) * prow_v) * es,
                       vd + (((size_t)bb * c->sk + j) * prow_v) * es, prow_v * es);
            }
        b.k = gpu_alloc((size_t)np * ps * prow_k * es);
        b.v = gpu_alloc((size_t)np * ps * prow_v * es);
        b.pt = gpu_alloc(sizeof *pt * (size_t)np);
        gpu_upload(b.k, kp, (size_t)np * ps * prow_k * es);
        gpu_upload(b.v, vp, (size_t)np * ps * prow_v * es);
        gpu_upload(b.pt, pt, sizeof *pt * (size_t)np);
        free(kp);
        free(vp);
        a.k_batch_stride = (int64_t)ps * (int64_t)prow_k;
        a.v_batch_stride = (int64_t)ps * (int64_t)prow_v;
        a.page_table = (const int32_t *)(uintptr_t)b.pt;
        a.num_pages = np;
        a.page_size = ps;
        a.max_pages_per_seq = pps;
        a.page_table_stride = pps;
    } else {
        b.k = gpu_alloc(nk * es);
        b.v = gpu_alloc(nv * es);
        gpu_upload(b.k, kd, nk * es);
        gpu_upload(b.v, vd, nv * es);
    }
    b.o_alloc = gpu_alloc(b.o_elems * 2);
    b.lse = gpu_alloc(b.lse_elems * 4);
    CUdeviceptr dref = gpu_alloc(no * 4), demul = gpu_alloc(no * 4), dref_lse = gpu_alloc(nl * 4);
    a.q = (const void *)(uintptr_t)b.q;
    a.k = (const void *)(uintptr_t)b.k;
    a.v = (const void *)(uintptr_t)b.v;
    const size_t o_off = c->o_unaligned ? 2 : 0; /* elements: 4 bytes */
    a.o = (void *)(uintptr_t)(b.o_alloc + o_off * 2);
    a.lse = (float *)(uintptr_t)b.lse;
    a.o_batch_stride = (int64_t)(c->sq + OPAD) * c->h * hdv; /* OPAD rows a batch never written */
    if (c->softcap)
        a.softcap = 30.0f;
    if (c->mask == FA3_MASK_LOCAL) {
        a.window_size_left = c->wl;
        a.window_size_right = c->wr;
    }
    fa3_fwd_args ra = a;
    CHECK(fa3_reference_fwd_ex(g_ctx, &ref_cfg, &ra, (float *)(uintptr_t)dref,
                               (float *)(uintptr_t)dref_lse, 0, NULL));
    CHECK(fa3_reference_fwd_ex(g_ctx, &ref_cfg, &ra, (float *)(uintptr_t)demul, NULL, 1, NULL));
    gpu_download(ref, dref, no * 4);
    gpu_download(emul, demul, no * 4);
    gpu_download(ref_lse, dref_lse, nl * 4);
    a.num_splits = c->num_splits;
    fa3_status st = run_fwd(&cfg, &a, &b, o, lse, odt);
    if (st != FA3_OK)
        fail_msg("%s: fa3_fwd (pack_gqa 1): %s: %s", c->id, fa3_strerror(st),
                 fa3_last_error_message());
    st = run_fwd(&nopack, &a, &b, o0, lse0, odt);
    if (st != FA3_OK)
        fail_msg("%s: fa3_fwd (pack_gqa 0): %s: %s", c->id, fa3_strerror(st),
                 fa3_last_error_message());
    tol_acc acc = {0}, acc0 = {0};
    acc.lse_tol = acc0.lse_tol = tol_lse_bound(c->dt == FA3_DTYPE_E4M3, c->hd);
    double d_pack = 0, d_lse = 0; /* pack_gqa 1 against 0 */
    size_t nonfinite = 0, empty_rows = 0;
    for (int bb = 0; bb < c->batch; bb++)
        for (int i = 0; i < c->sq + OPAD; i++)
            for (int h = 0; h < c->h; h++) {
                const size_t oi = o_off + (((size_t)bb * (c->sq + OPAD) + i) * c->h + h) * hdv;
                if (i >= c->sq) { /* padding: never written */
                    for (int d = 0; d < hdv; d++)
                        if (!isnan(dtype_to_f32(odt, o[oi + (size_t)d])))
                            fail_msg("%s: O padding row b%d i%d h%d col %d written", c->id, bb,
                                     i, h, d);
                    continue;
                }
                const size_t li = ((size_t)bb * c->h + h) * c->sq + i;
                const size_t ri = (((size_t)bb * c->sq + i) * c->h + h) * hdv;
                int f, l;
                visible(c, i, &f, &l);
                if (f > l) { /* a row that sees no key */
                    empty_rows++;
                    if (!(isinf(lse[li]) && lse[li] < 0))
                        fail_msg("%s: row b%d i%d h%d sees no key, LSE %g", c->id, bb, i, h,
                                 (double)lse[li]);
                    for (int d = 0; d < hdv; d++)
                        if (dtype_to_f32(odt, o[oi + (size_t)d]) != 0.0f)
                            fail_msg("%s: row b%d i%d h%d sees no key, O[%d] = %g", c->id, bb,
                                     i, h, d, (double)dtype_to_f32(odt, o[oi + (size_t)d]));
                    continue;
                }
                tol_add_lse(&acc, li, lse[li], ref_lse[li]);
                tol_add_lse(&acc0, li, lse0[li], ref_lse[li]);
                const double dl = fabs((double)lse[li] - (double)lse0[li]);
                d_lse = dl > d_lse || isnan(dl) ? dl : d_lse;
                for (int d = 0; d < hdv; d++) {
                    const float x = dtype_to_f32(odt, o[oi + (size_t)d]);
                    const float x0 = dtype_to_f32(odt, o0[oi + (size_t)d]);
                    if (!isfinite(x)) {
                        nonfinite++;
                        continue;
                    }
                    tol_add_o(&acc, ri + (size_t)d, x, ref[ri + (size_t)d], emul[ri + (size_t)d]);
                    tol_add_o(&acc0, ri + (size_t)d, x0, ref[ri + (size_t)d],
                              emul[ri + (size_t)d]);
                    const double dx = fabs((double)x - (double)x0);
                    d_pack = dx > d_pack || isnan(dx) ? dx : d_pack;
                }
            }
    for (size_t e = nl; e < b.lse_elems; e++)
        if (!isnan(lse[e]))
            fail_msg("%s: LSE past its end written at +%zu", c->id, e - nl);
    char line[256], line0[256];
    tol_format(&acc, line, sizeof line);
    tol_format(&acc0, line0, sizeof line0);
    printf("%s: pack %s | max|pack-nopack| O %.3g LSE %.3g | %zu rows without keys\n", c->id,
           line, d_pack, d_lse, empty_rows);
    if (nonfinite)
        fail_msg("%s: %zu O elements not finite (unwritten or NaN)", c->id, nonfinite);
    if (!tol_o_ok(&acc) || !tol_lse_ok(&acc))
        fail_msg("%s: pack_gqa 1 against the reference: %s", c->id, line);
    if (!tol_o_ok(&acc0) || !tol_lse_ok(&acc0))
        fail_msg("%s: pack_gqa 0 against the reference: %s", c->id, line0);
    /* the two kernels differ only in which rows share a tile: within the rule's bound */
    if (!(d_pack <= 2 * tol_o_bound(&acc)) || !(d_lse <= 2 * acc.lse_tol + 2 * TOL_LSE))
        fail_msg("%s: pack_gqa 1 and 0 differ by %g (O) / %g (LSE)", c->id, d_pack, d_lse);
    free(q);
    free(kd);
    free(vd);
    free(o);
    free(o0);
    free(lse);
    free(lse0);
    free(ref);
    free(emul);
    free(ref_lse);
    free(pt);
    gpu_free(b.q);
    gpu_free(b.k);
    gpu_free(b.v);
    gpu_free(b.pt);
    gpu_free(b.o_alloc);
    gpu_free(b.lse);
    gpu_free(dref);
    gpu_free(demul);
    gpu_free(dref_lse);
}

#define BF FA3_DTYPE_BF16
#define FP FA3_DTYPE_FP16
#define E4 FA3_DTYPE_E4M3
#define NONE FA3_MASK_NONE
#define CAUSAL FA3_MASK_CAUSAL
#define LOCAL FA3_MASK_LOCAL
static const pcase g_cases[] = {
    /* id, hd, hdv, dt, mask, softcap, batch, sq, sk, h, hk, wl, wr, splits, page, o_unaligned */
    {"hd128 bf16 none ratio 4 sq 1 sk 1000", 128, 0, BF, NONE, 0, 3, 1, 1000, 32, 8, -1, -1, 0, 0,
     0},
    {"hd128 bf16 none ratio 8 sq 3 sk 77", 128, 0, BF, NONE, 0, 2, 3, 77, 16, 2, -1, -1, 0, 0, 0},
    {"hd128 bf16 none MQA ratio 32 sq 16 sk 5000", 128, 0, BF, NONE, 0, 1, 16, 5000, 32, 1, -1, -1,
     0, 0, 0},
    {"hd128 bf16 none ratio 1 sq 100 sk 1", 128, 0, BF, NONE, 0, 2, 100, 1, 4, 4, -1, -1, 0, 0, 0},
    {"hd128 bf16 none ratio 2 sq 300 sk 1000, O by registers", 128, 0, BF, NONE, 0, 1, 300, 1000,
     8, 4, -1, -1, 0, 0, 1},
    {"hd128 bf16 causal ratio 4 sq 100 sk 77", 128, 0, BF, CAUSAL, 0, 2, 100, 77, 8, 2, -1, -1, 0,
     0, 0},
    {"hd128 bf16 causal ratio 8 sq 300 sk 1000", 128, 0, BF, CAUSAL, 0, 1, 300, 1000, 16, 2, -1,
     -1, 0, 0, 0},
    {"hd128 bf16 causal MQA ratio 32 sq 3 sk 5000", 128, 0, BF, CAUSAL, 0, 2, 3, 5000, 32, 1, -1,
     -1, 0, 0, 0},
    {"hd64 fp16 local 100/0 softcap ratio 2 sq 16 sk 1000", 64, 0, FP, LOCAL, 1, 2, 16, 1000, 4,
     2, 100, 0, 0, 0, 0},
    {"hd64 fp16 local 50/20 softcap ratio 8 sq 300 sk 1000", 64, 0, FP, LOCAL, 1, 1, 300, 1000, 16,
     2, 50, 20, 0, 0, 0},
    {"hd256 bf16 causal ratio 4 sq 16 sk 5000 (O staged in Q)", 256, 0, BF, CAUSAL, 0, 2, 16,
     5000, 8, 2, -1, -1, 0, 0, 0},
    {"hd256 bf16 causal ratio 8 sq 1 sk 5000, 8 splits", 256, 0, BF, CAUSAL, 0, 2, 1, 5000, 16, 2,
     -1, -1, 8, 0, 0},
    {"hd256 bf16 causal ratio 2 sq 100 sk 1000, 1 split", 256, 0, BF, CAUSAL, 0, 1, 100, 1000, 4,
     2, -1, -1, 1, 0, 0},
    {"hd192x128 bf16 none softcap ratio 4 sq 3 sk 1000, 3 splits", 192, 128, BF, NONE, 1, 2, 3,
     1000, 8, 2, -1, -1, 3, 0, 0},
    {"hd128 e4m3 causal ratio 8 sq 16 sk 1000", 128, 0, E4, CAUSAL, 0, 2, 16, 1000, 16, 2, -1, -1,
     0, 0, 0},
    {"hd128 bf16 none paged 16 ratio 4 sq 1 sk 1000, 3 splits", 128, 0, BF, NONE, 0, 3, 1, 1000, 8,
     2, -1, -1, 3, 16, 0},
};

static void test_pack_fwd(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++)
        run_case(&g_cases[i]);
}

/* hd64 (block_m 192) with 5 query heads per kv head (40 / 8; 192 = 6 x 32 takes ratio 32):
   refused before any launch, O untouched. */
static void test_ratio_refused(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = 64;
    cfg.pack_gqa = 1;
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &k));
    const int batch = 1, sq = 4, sk = 100, h = 40, hk = 8, hd = 64;
    const size_t nq = (size_t)batch * sq * h * hd, nk = (size_t)batch * sk * hk * hd;
    CUdeviceptr dq = gpu_alloc(nq * 2), dk = gpu_alloc(nk * 2), dv = gpu_alloc(nk * 2);
    CUdeviceptr dout = gpu_alloc(nq * 2);
    gpu_fill_nan16(dout, nq, FA3_DTYPE_BF16);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)dq;
    a.k = (const void *)(uintptr_t)dk;
    a.v = (const void *)(uintptr_t)dv;
    a.o = (void *)(uintptr_t)dout;
    a.batch = batch;
    a.seqlen_q = sq;
    a.seqlen_k = sk;
    a.num_heads = h;
    a.num_heads_k = hk;
    fa3_fwd_args_set_contiguous(&a, hd, hd);
    fa3_status st = fa3_fwd(k, &a, NULL);
    gpu_sync();
    const char *msg = fa3_last_error_message();
    printf("hd64 ratio 5: %s: %s\n", fa3_strerror(st), msg);
    assert_int_equal(st, FA3_ERR_BAD_SHAPE);
    assert_non_null(strstr(msg, "num_heads 40"));
    assert_non_null(strstr(msg, "num_heads_k 8"));
    assert_non_null(strstr(msg, "block_m 192"));
    uint16_t *o = malloc(nq * 2);
    assert_non_null(o);
    gpu_download(o, dout, nq * 2);
    for (size_t e = 0; e < nq; e++)
        if (!isnan(dtype_to_f32(FA3_DTYPE_BF16, o[e])))
            fail_msg("O[%zu] written by a refused call", e);
    free(o);
    gpu_free(dq);
    gpu_free(dk);
    gpu_free(dv);
    gpu_free(dout);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_fwd),
        cmocka_unit_test(test_ratio_refused),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_pack_gqa", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
