/*
 * test_block_m64: the decode tile (config block_m 64: one consumer warpgroup, no ping-pong, the
 * deeper K/V ring) end to end through the public API: fa3_fwd of a block_m 64 config against the
 * library's reference (fa3_reference_fwd_ex, fp32; tools/common/tolerance.h's rule with the
 * dtype-emulating reference as its scale), on fresh random inputs (the seed is printed), O and
 * LSE NaN-prefilled: every element of every row must be written, a row that sees no key exactly
 * O = 0 and LSE = -inf. The kernel's info must say block_m 64 and 256 threads. The same checks
 * cover head_dim 64's two-consumer tile (block_m 128, 384 threads) and head_dim 256's 64-key
 * blocks (block_n 64; the planner's are 80): causal, local softcap GQA, paged, at seqlen_q
 * 1..1000.
 *
 * Cases (one line each): seqlen_q 1, 7, 64, 65, 300 (one tile, a full one, a second tile, many)
 * against seqlen_k 1, 100, 4096; masks none, causal (seqlen_q > seqlen_k: rows that see no key),
 * local; softcap; head_dim 64, 128, 256 and (192, 128); bf16, fp16 and one e4m3 kernel; GQA
 * (heads 8 over 2, 4 over 1); paged K/V (page_size 16, shuffled pages); split-KV with
 * num_splits 1 and 4 (dense and paged). Without a GPU every test skips (exit 77). Environment:
 * FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER (gpu_util.h).
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

/* One kernel (config) and the shapes it runs. */
typedef struct bm_kernel {
    const char *id;
    int hd, hdv;
    fa3_dtype dt;
    fa3_mask mask;
    int wl, wr;          /* local windows */
    int softcap;         /* 1: softcap 30 */
    int page_size;       /* > 0: paged K/V */
    int split;           /* 1: split_kv config */
    int h, hk;           /* query heads, K/V heads */
    int block_m;         /* 0: 64 (the decode tile); 128: head_dim 64's two-consumer tile */
    int block_n;         /* 0: the planner's; 64: head_dim 256's short causal/local key blocks */
} bm_kernel;

typedef struct bm_shape {
    int batch, sq, sk, num_splits;
} bm_shape;

typedef struct bm_bufs {
    CUdeviceptr q, k, v, o, lse, ref, emul, ref_lse, pt;
} bm_bufs;

static void free_bufs(bm_bufs *b)
{
    gpu_free(b->q);
    gpu_free(b->k);
    gpu_free(b->v);
    gpu_free(b->o);
    gpu_free(b->lse);
    gpu_free(b->ref);
    gpu_free(b->emul);
    gpu_free(b->ref_lse);
    gpu_free(b->pt);
}

/* n random elements of dtype dt (N(0,1); e4m3 from the rounded normal values) */
static void *random_elems(host_rng *r, fa3_dtype dt, size_t n)
{
    const size_t es = dt == FA3_DTYPE_E4M3 ? 1 : 2;
    void *p = malloc(n ? n * es : 1);
    assert_non_null(p);
    if (dt == FA3_DTYPE_E4M3)
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)p)[i] = f32_to_e4m3((float)rng_normal(r));
    else
        fill_normal(r, p, n, dt, 1.0);
    return p;
}

static CUdeviceptr upload_new(const void *src, size_t bytes)
{
    CUdeviceptr d = gpu_alloc(bytes);
    gpu_upload(d, src, bytes);
    return d;
}

static void run_shape(const bm_kernel *kc, fa3_kernel *kern, const fa3_config *ref_cfg,
                      const bm_shape *s)
{
    const int B = s->batch, H = kc->h, HK = kc->hk, hd = kc->hd;
    const int hdv = kc->hdv ? kc->hdv : kc->hd;
    const fa3_dtype odt = kc->dt == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : kc->dt;
    const size_t es = kc->dt == FA3_DTYPE_E4M3 ? 1 : 2;
    host_rng rng;
    uint64_t hsh = 1469598103934665603ull; /* FNV-1a of the kernel's id and the shape */
    for (const char *p = kc->id; *p; p++)
        hsh = (hsh ^ (unsigned char)*p) * 1099511628211ull;
    hsh ^= (uint64_t)s->sq * 1000003u + (uint64_t)s->sk * 7919u + (uint64_t)s->num_splits;
    rng_init(&rng, g_seed ^ hsh);
    /* K/V rows: dense (batch · sk), or a pool of pages (a shuffled page table, 2 spare pages) */
    const int ps = kc->page_size, pps = ps ? (s->sk + ps - 1) / ps : 0;
    const int num_pages = ps ? B * pps + 2 : 0;
    const size_t kv_rows = ps ? (size_t)num_pages * ps : (size_t)B * s->sk;
    const size_t nq = (size_t)B * s->sq * H * hd, nk = kv_rows * HK * hd, nv = kv_rows * HK * hdv;
    const size_t no = (size_t)B * s->sq * H * hdv, nl = (size_t)B * H * s->sq;
    void *q = random_elems(&rng, kc->dt, nq), *k = random_elems(&rng, kc->dt, nk);
    void *v = random_elems(&rng, kc->dt, nv);
    bm_bufs d = {0};
    d.q = upload_new(q, nq * es);
    d.k = upload_new(k, nk * es);
    d.v = upload_new(v, nv * es);
    d.o = gpu_alloc(no * 2);
    d.lse = gpu_alloc(nl * 4);
    d.ref = gpu_alloc(no * 4);
    d.emul = gpu_alloc(no * 4);
    d.ref_lse = gpu_alloc(nl * 4);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)d.q;
    a.k = (const void *)(uintptr_t)d.k;
    a.v = (const void *)(uintptr_t)d.v;
    a.o = (void *)(uintptr_t)d.o;
    a.lse = (float *)(uintptr_t)d.lse;
    a.batch = B;
    a.seqlen_q = s->sq;
    a.seqlen_k = s->sk;
    a.num_heads = H;
    a.num_heads_k = HK;
    fa3_fwd_args_set_contiguous(&a, hd, hdv);
    if (kc->mask == FA3_MASK_LOCAL) {
        a.window_size_left = kc->wl;
        a.window_size_right = kc->wr;
    }
    if (kc->softcap)
        a.softcap = 30.0f;
    if (ps) {
        int *tab = malloc(sizeof(int) * (size_t)num_pages);
        assert_non_null(tab);
        for (int p = 0; p < num_pages; p++)
            tab[p] = p;
        for (int p = num_pages - 1; p > 0; p--) { /* Fisher-Yates */
            const int j = (int)(rng_uniform(&rng) * (p + 1)) % (p + 1), t = tab[p];
            tab[p] = tab[j];
            tab[j] = t;
        }
        d.pt = upload_new(tab, sizeof(int) * (size_t)B * pps); /* the first B · pps */
        free(tab);
        a.page_table = (const int32_t *)(uintptr_t)d.pt;
        a.num_pages = num_pages;
        a.page_size = ps;
        a.max_pages_per_seq = pps;
        a.page_table_stride = pps;
        /* (num_pages, page_size, num_heads_k, head_dim) */
        a.k_row_stride = (int64_t)HK * hd;
        a.v_row_stride = (int64_t)HK * hdv;
        a.k_head_stride = hd;
        a.v_head_stride = hdv;
        a.k_batch_stride = (int64_t)ps * HK * hd;
        a.v_batch_stride = (int64_t)ps * HK * hdv;
    }
    const fa3_fwd_args ra = a; /* the reference: a one-pass config, no split fields */
    CHECK(fa3_reference_fwd_ex(g_ctx, ref_cfg, &ra, (float *)(uintptr_t)d.ref,
                               (float *)(uintptr_t)d.ref_lse, 0, NULL));
    CHECK(fa3_reference_fwd_ex(g_ctx, ref_cfg, &ra, (float *)(uintptr_t)d.emul, NULL, 1, NULL));
    a.num_splits = s->num_splits;
    gpu_fill_nan16(d.o, no, odt);
    gpu_fill_nan32(d.lse, nl);
    gpu_sync();
    const fa3_status st = fa3_fwd(kern, &a, NULL);
    if (st != FA3_OK)
        fail_msg("%s sq %d sk %d: fa3_fwd: %s: %s", kc->id, s->sq, s->sk, fa3_strerror(st),
                 fa3_last_error_message());
    gpu_sync();
    uint16_t *o = malloc(no * 2);
    float *lse = malloc(nl * 4), *ref = malloc(no * 4), *emul = malloc(no * 4);
    float *ref_lse = malloc(nl * 4);
    assert_true(o && lse && ref && emul && ref_lse);
    gpu_download(o, d.o, no * 2);
    gpu_download(lse, d.lse, nl * 4);
    gpu_download(ref, d.ref, no * 4);
    gpu_download(emul, d.emul, no * 4);
    gpu_download(ref_lse, d.ref_lse, nl * 4);
    tol_acc acc = {0};
    acc.lse_tol = tol_lse_bound(kc->dt == FA3_DTYPE_E4M3, hd);
    size_t nonfinite = 0, empty_rows = 0, empty_bad = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < s->sq; i++)
            for (int h = 0; h < H; h++) {
                const size_t li = ((size_t)b * H + h) * s->sq + i;
                const size_t oi = (((size_t)b * s->sq + i) * H + h) * hdv;
                if (isinf(ref_lse[li]) && ref_lse[li] < 0) { /* the row sees no key */
                    empty_rows++;
                    int ok = isinf(lse[li]) && lse[li] < 0;
                    for (int x = 0; x < hdv && ok; x++)
                        ok = dtype_to_f32(odt, o[oi + (size_t)x]) == 0.0f;
                    empty_bad += !ok;
                    continue;
                }
                tol_add_lse(&acc, li, lse[li], ref_lse[li]);
                for (int x = 0; x < hdv; x++) {
                    const float y = dtype_to_f32(odt, o[oi + (size_t)x]);
                    if (!isfinite(y)) {
                        nonfinite++;
                        continue;
                    }
                    tol_add_o(&acc, oi + (size_t)x, y, ref[oi + (size_t)x], emul[oi + (size_t)x]);
                }
            }
    char line[256];
    const int ok = !nonfinite && !empty_bad && tol_o_ok(&acc) && tol_lse_ok(&acc);
    printf("  %-28s batch %d sq %4d sk %4d splits %d: %s, %zu empty rows%s\n", kc->id, B, s->sq,
           s->sk, s->num_splits, tol_format(&acc, line, sizeof line), empty_rows,
           ok ? "" : " FAIL");
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(ref);
    free(emul);
    free(ref_lse);
    free_bufs(&d);
    if (nonfinite)
        fail_msg("%s sq %d sk %d: %zu O elements not finite (unwritten or NaN)", kc->id, s->sq,
                 s->sk, nonfinite);
    if (empty_bad)
        fail_msg("%s sq %d sk %d: %zu rows that see no key without O = 0, LSE = -inf", kc->id,
                 s->sq, s->sk, empty_bad);
    if (!tol_o_ok(&acc) || !tol_lse_ok(&acc))
        fail_msg("%s sq %d sk %d: %s (O element %zu, LSE row %zu)", kc->id, s->sq, s->sk, line,
                 acc.worst_o, acc.worst_lse);
}

/* The kernel of kc (block_m 64, or kc->block_m), checked to be that tile (64: the decode tile,
   256 threads; 128: two consumers, 384), then every shape of shapes (batch 0 ends the list). */
static void run_kernel(const bm_kernel *kc, const bm_shape *shapes)
{
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = kc->hd;
    cfg.head_dim_v = kc->hdv;
    cfg.dtype = kc->dt;
    cfg.mask = kc->mask;
    cfg.softcap = kc->softcap;
    cfg.paged_kv = kc->page_size > 0;
    fa3_config ref_cfg = cfg; /* the reference's: one pass, the planner's tile */
    cfg.split_kv = kc->split;
    const int bm = kc->block_m ? kc->block_m : 64;
    cfg.block_m = bm;
    cfg.block_n = kc->block_n;
    fa3_kernel *kern;
    CHECK(fa3_jit_get_kernel(g_ctx, &cfg, &kern));
    fa3_kernel_info info;
    CHECK(fa3_kernel_get_info(kern, &info));
    printf("%s: block_m %d, block_n %d, stages %d, %d threads, %d registers\n", kc->id,
           info.block_m, info.block_n, info.stages, info.threads, info.num_regs);
    assert_int_equal(info.block_m, bm);
    assert_int_equal(info.threads, 128 + 2 * bm);
    assert_int_equal(info.config.block_m, bm);
    if (kc->block_n)
        assert_int_equal(info.block_n, kc->block_n);
    for (const bm_shape *s = shapes; s->batch; s++)
        run_shape(kc, kern, &ref_cfg, s);
}

/* seqlen_q 1, 7, 64, 65, 300 against seqlen_k 1, 100, 4096 */
static const bm_shape shapes_all[] = {
    {2, 1, 1, 0},   {2, 1, 100, 0},  {2, 1, 4096, 0},  {2, 7, 1, 0},    {2, 7, 100, 0},
    {2, 7, 4096, 0}, {2, 64, 1, 0},  {2, 64, 100, 0},  {2, 64, 4096, 0}, {2, 65, 1, 0},
    {2, 65, 100, 0}, {2, 65, 4096, 0}, {1, 300, 1, 0}, {1, 300, 100, 0}, {1, 300, 4096, 0},
    {0, 0, 0, 0}};
static const bm_shape shapes_decode[] = {
    {3, 1, 4096, 0}, {2, 7, 100, 0}, {2, 65, 4096, 0}, {1, 300, 100, 0}, {0, 0, 0, 0}};

static void test_dense(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const bm_kernel none = {"hd128 bf16 none GQA 4", 128, 0, FA3_DTYPE_BF16, FA3_MASK_NONE,
                            -1, -1, 0, 0, 0, 8, 2, 0, 0};
    const bm_kernel causal = {"hd128 bf16 causal GQA 4", 128, 0, FA3_DTYPE_BF16,
                              FA3_MASK_CAUSAL, -1, 0, 0, 0, 0, 8, 2, 0, 0};
    run_kernel(&none, shapes_all);
    run_kernel(&causal, shapes_all); /* sq > sk: rows that see no key */
}

static void test_features(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const bm_kernel ks[] = {
        {"hd128 bf16 local softcap", 128, 0, FA3_DTYPE_BF16, FA3_MASK_LOCAL, 64, 32, 1, 0, 0, 4,
         4, 0, 0},
        {"hd64 bf16 causal MQA", 64, 0, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, 0, 0, 0, 0, 4, 1, 0, 0},
        {"hd256 bf16 none", 256, 0, FA3_DTYPE_BF16, FA3_MASK_NONE, -1, -1, 0, 0, 0, 4, 2, 0, 0},
        {"hd192x128 bf16 causal", 192, 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, 0, 0, 0, 0, 4,
         2, 0, 0},
        {"hd128 fp16 none softcap", 128, 0, FA3_DTYPE_FP16, FA3_MASK_NONE, -1, -1, 1, 0, 0, 8,
         2, 0, 0},
        {"hd128 e4m3 causal", 128, 0, FA3_DTYPE_E4M3, FA3_MASK_CAUSAL, -1, 0, 0, 0, 0, 8, 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        run_kernel(&ks[i], shapes_decode);
}

static void test_paged(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const bm_kernel k = {"hd128 bf16 none paged 16", 128, 0, FA3_DTYPE_BF16, FA3_MASK_NONE, -1,
                         -1, 0, 16, 0, 8, 2, 0, 0};
    static const bm_shape shapes[] = {
        {3, 1, 4096, 0}, {2, 7, 100, 0}, {2, 65, 4096, 0}, {2, 1, 1, 0}, {0, 0, 0, 0}};
    run_kernel(&k, shapes);
}

static void test_split(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const bm_kernel causal = {"hd128 bf16 causal split", 128, 0, FA3_DTYPE_BF16,
                              FA3_MASK_CAUSAL, -1, 0, 0, 0, 1, 8, 2, 0, 0};
    const bm_kernel paged = {"hd64 fp16 local paged 16 split", 64, 0, FA3_DTYPE_FP16,
                             FA3_MASK_LOCAL, 1000, 0, 1, 16, 1, 4, 1, 0, 0};
    static const bm_shape shapes[] = {
        {2, 1, 4096, 1}, {2, 1, 4096, 4}, {2, 7, 4096, 4}, {2, 65, 100, 4}, {1, 300, 4096, 4},
        {2, 7, 1, 4}, {0, 0, 0, 0}};
    run_kernel(&causal, shapes);
    run_kernel(&paged, shapes);
}

/* fa3_fwd_tune's tiles for short causal/local calls, one family a test: head_dim 64's
   two-consumer tile (block_m 128; the planner's is 192) and head_dim 256's 64-key blocks
   (block_n 64; the planner's are 80). Each: causal (sq > sk: rows that see no key), local softcap
   GQA, paged 16. */
static void run_short_tiles(int hd, int block_m, int block_n)
{
    char id[3][64];
    const char *what[3] = {"bf16 causal", "fp16 local softcap GQA", "bf16 causal paged 16"};
    for (int i = 0; i < 3; i++)
        snprintf(id[i], sizeof id[i], "hd%d %s %s%d", hd, what[i], block_n ? "bn" : "bm",
                 block_n ? block_n : block_m);
    const bm_kernel ks[] = {
        {id[0], hd, 0, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, 0, 0, 0, 0, 4, 4, block_m, block_n},
        {id[1], hd, 0, FA3_DTYPE_FP16, FA3_MASK_LOCAL, 100, 20, 1, 0, 0, 8, 2, block_m, block_n},
        {id[2], hd, 0, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, 0, 0, 16, 0, 4, 2, block_m, block_n},
    };
    static const bm_shape shapes[] = {
        {2, 1, 100, 0}, {2, 65, 4096, 0}, {1, 300, 100, 0}, {2, 129, 129, 0}, {1, 1000, 1000, 0},
        {2, 512, 512, 0}, {0, 0, 0, 0}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        run_kernel(&ks[i], shapes);
}

static void test_two_consumer_hd64(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_short_tiles(64, 128, 0);
}

static void test_short_keys_hd256(void **state)
{
    (void)state;
    REQUIRE_GPU();
    run_short_tiles(256, 128, 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_two_consumer_hd64),
        cmocka_unit_test(test_short_keys_hd256),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_block_m64", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
