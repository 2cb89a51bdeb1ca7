/*
 * test_kvcache (GPU): fa3_kvcache_append (edge case E22's write half; the attention after it is
 * python/tests/test_kvcache_torch.py's) against the host's copy of the rule, bit for bit, on
 * fresh random bytes each run: caches filled with random bits (any pattern, NaNs included),
 * random cache_seqlens with one sequence at 0 (E21) and one ending exactly at the capacity, then
 * the whole cache downloaded: the new rows at cache_seqlens[b] + i, every other byte untouched,
 * seqused_out = cache_seqlens + seqlen_new.
 *   append            seqlen_new 1 and 5; bf16, fp16, e4m3; contiguous (batch_cache > batch),
 *                     contiguous with a shuffled cache_batch_idx, paged with page sizes 1, 16,
 *                     100 and 256 over a shuffled page table; padded / strided new rows and
 *                     cache rows; odd head dims (5 / 3: the 2-byte copy) and K/V interleaved in
 *                     one cache tensor
 *   contract_broken   cache_seqlens past the capacity or negative, a cache_batch_idx and a page
 *                     index out of range (debug off): those rows are not written, nothing else
 *                     changes, the call succeeds (the kernel never writes out of bounds)
 *   debug_read_back   FA3JIT_DEBUG_VARLEN=1: the same arrays refused before the launch, naming the
 *                     first bad entry, the cache unchanged, and two sequences appending onto one
 *                     cache row (a repeated cache_batch_idx entry, a shared page); good arrays
 *                     accepted
 *   replay            one argument struct launched again after cache_seqlens changed on the
 *                     device: the kernel reads the new values (what a graph replays; the captured
 *                     graph itself is in test_kvcache_torch.py, E16)
 * Environment: FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER (gpu_util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "check.h"

static fa3_context *g_ctx;
static uint64_t g_seed;
static int g_skipped;

typedef struct kvcase {
    const char *id;
    fa3_dtype dt;
    int batch, seqlen_new, heads, hd, hdv;
    int page_size;           /* 0: contiguous */
    int batch_cache;         /* contiguous: cache entries (>= batch without cache_batch_idx) */
    int capacity;            /* rows a sequence can hold (contiguous: seqlen_cache) */
    int use_bidx;            /* contiguous: a shuffled cache_batch_idx */
    int strided_new;         /* new rows with padded head / row / batch strides */
    int padded_cache;        /* cache rows with padded heads */
    int interleaved;         /* K and V in one (slots, rows, 2, heads, hd) tensor (hd == hdv) */
} kvcase;

/* One case's host state: the layout, the arrays, the caches before and (expected) after. */
typedef struct kvstate {
    kvcase c;
    int es, slots, rows, max_pages, num_pages;
    int64_t kn[3], vn[3], kc[3], vc[3]; /* strides (batch, row, head), elements */
    size_t kn_bytes, vn_bytes, cache_bytes; /* cache_bytes: the one buffer of both caches */
    size_t v_off;                       /* V's byte offset in the cache buffer */
    uint8_t *k_new, *v_new, *cache, *want;
    int32_t *lens, *bidx, *table;
} kvstate;

static void *xcalloc(size_t n, size_t size) /* fails the test when out of memory */
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        fail_msg("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

static void fill_bytes(host_rng *r, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_uniform(r) * 256.0);
}

static int uniform(host_rng *r, int lo, int hi) /* inclusive */
{
    int v = lo + (int)(rng_uniform(r) * (double)(hi - lo + 1));
    return v > hi ? hi : v;
}

static void shuffle(host_rng *r, int32_t *a, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = uniform(r, 0, i);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static size_t span_bytes(int b, int r, int h, int d, const int64_t s[3], int es)
{
    return ((size_t)(b - 1) * s[0] + (size_t)(r - 1) * s[1] + (size_t)(h - 1) * s[2] + d) * es;
}

static void state_make(kvstate *S, const kvcase *c, host_rng *r)
{
    memset(S, 0, sizeof *S);
    S->c = *c;
    const int hdv = c->hdv ? c->hdv : c->hd;
    S->es = c->dt == FA3_DTYPE_E4M3 ? 1 : 2;
    if (c->page_size) {
        S->max_pages = (c->capacity + c->page_size - 1) / c->page_size;
        S->c.capacity = S->max_pages * c->page_size; /* the library's: whole pages */
        S->num_pages = c->batch * S->max_pages + 3;
        S->slots = S->num_pages;
        S->rows = c->page_size;
    } else {
        S->slots = c->batch_cache;
        S->rows = c->capacity;
    }
    const int pn = c->strided_new ? 8 : 0, pc = c->padded_cache ? 8 : 0;
    S->kn[2] = c->hd + pn;
    S->kn[1] = c->heads * S->kn[2] + 2 * pn;
    S->kn[0] = c->seqlen_new * S->kn[1] + 4 * pn;
    S->vn[2] = hdv + pn;
    S->vn[1] = c->heads * S->vn[2] + 2 * pn;
    S->vn[0] = c->seqlen_new * S->vn[1] + 4 * pn;
    S->kc[2] = c->hd + pc;
    S->vc[2] = hdv + pc;
    if (c->interleaved) { /* (slots, rows, 2, heads, hd): V one head-block after K */
        S->kc[1] = S->vc[1] = 2 * c->heads * S->kc[2];
        S->v_off = (size_t)c->heads * S->kc[2] * S->es;
    } else {
        S->kc[1] = c->heads * S->kc[2];
        S->vc[1] = c->heads * S->vc[2];
    }
    S->kc[0] = (int64_t)S->rows * S->kc[1]; /* rows: page_size, or the capacity */
    S->vc[0] = (int64_t)S->rows * S->vc[1];
    S->kn_bytes = span_bytes(c->batch, c->seqlen_new, c->heads, c->hd, S->kn, S->es);
    S->vn_bytes = span_bytes(c->batch, c->seqlen_new, c->heads, hdv, S->vn, S->es);
    size_t kb = span_bytes(S->slots, S->rows, c->heads, c->hd, S->kc, S->es);
    if (!c->interleaved)
        S->v_off = (kb + 255) / 256 * 256;
    S->cache_bytes = S->v_off + span_bytes(S->slots, S->rows, c->heads, hdv, S->vc, S->es);
    if (S->cache_bytes < kb)
        S->cache_bytes = kb;
    S->k_new = xcalloc(S->kn_bytes, 1);
    S->v_new = xcalloc(S->vn_bytes, 1);
    S->cache = xcalloc(S->cache_bytes, 1);
    S->want = xcalloc(S->cache_bytes, 1);
    fill_bytes(r, S->k_new, S->kn_bytes);
    fill_bytes(r, S->v_new, S->vn_bytes);
    fill_bytes(r, S->cache, S->cache_bytes);

    S->lens = xcalloc((size_t)c->batch, sizeof(int32_t));
    const int cap = S->c.capacity;
    for (int b = 0; b < c->batch; b++)
        S->lens[b] = b == 0 ? 0 : b == 1 ? cap - c->seqlen_new
                                         : uniform(r, 0, cap - c->seqlen_new);
    if (c->use_bidx) {
        int32_t *perm = xcalloc((size_t)c->batch_cache, sizeof(int32_t));
        for (int i = 0; i < c->batch_cache; i++)
            perm[i] = i;
        shuffle(r, perm, c->batch_cache);
        S->bidx = xcalloc((size_t)c->batch, sizeof(int32_t));
        memcpy(S->bidx, perm, (size_t)c->batch * sizeof(int32_t));
        free(perm);
    }
    if (c->page_size) {
        int32_t *perm = xcalloc((size_t)S->num_pages, sizeof(int32_t));
        for (int i = 0; i < S->num_pages; i++)
            perm[i] = i;
        shuffle(r, perm, S->num_pages);
        S->table = xcalloc((size_t)c->batch * S->max_pages, sizeof(int32_t));
        memcpy(S->table, perm, (size_t)c->batch * S->max_pages * sizeof(int32_t));
        free(perm);
    }
}

static void state_free(kvstate *S)
{
    free(S->k_new);
    free(S->v_new);
    free(S->cache);
    free(S->want);
    free(S->lens);
    free(S->bidx);
    free(S->table);
}

/* The host's rule into S->want: the old cache, the new rows at their positions; rows whose
   position, cache entry or page is out of range are not written (fa3jit.h). */
static void expected(kvstate *S)
{
    const kvcase *c = &S->c;
    const int hdv = c->hdv ? c->hdv : c->hd;
    memcpy(S->want, S->cache, S->cache_bytes);
    for (int b = 0; b < c->batch; b++)
        for (int i = 0; i < c->seqlen_new; i++) {
            const int64_t pos = (int64_t)S->lens[b] + i;
            if (pos < 0 || pos >= c->capacity)
                continue;
            int64_t slot, row;
            if (c->page_size) {
                slot = S->table[(int64_t)b * S->max_pages + pos / c->page_size];
                row = pos % c->page_size;
            } else {
                slot = S->bidx ? S->bidx[b] : b;
                row = pos;
            }
            if (slot < 0 || slot >= S->slots)
                continue;
            for (int h = 0; h < c->heads; h++) {
                memcpy(S->want + (slot * S->kc[0] + row * S->kc[1] + h * S->kc[2]) * S->es,
                       S->k_new + (b * S->kn[0] + i * S->kn[1] + h * S->kn[2]) * S->es,
                       (size_t)c->hd * S->es);
                memcpy(S->want + S->v_off +
                           (slot * S->vc[0] + row * S->vc[1] + h * S->vc[2]) * S->es,
                       S->v_new + (b * S->vn[0] + i * S->vn[1] + h * S->vn[2]) * S->es,
                       (size_t)hdv * S->es);
            }
        }
}

/* The device copies of a case. */
typedef struct kvdev {
    CUdeviceptr k_new, v_new, cache, lens, bidx, table, used;
} kvdev;

static void kv_dev_make(kvdev *D, const kvstate *S)
{
    const int batch = S->c.batch;
    D->k_new = gpu_alloc(S->kn_bytes);
    D->v_new = gpu_alloc(S->vn_bytes);
    D->cache = gpu_alloc(S->cache_bytes);
    D->lens = gpu_alloc((size_t)batch * 4);
    D->used = gpu_alloc((size_t)batch * 4);
    D->bidx = S->bidx ? gpu_alloc((size_t)batch * 4) : 0;
    D->table = S->table ? gpu_alloc((size_t)batch * S->max_pages * 4) : 0;
    gpu_upload(D->k_new, S->k_new, S->kn_bytes);
    gpu_upload(D->v_new, S->v_new, S->vn_bytes);
    gpu_upload(D->cache, S->cache, S->cache_bytes);
}

/* The arrays (S's current values) to the device, seqused_out to -7. */
static void kv_dev_arrays(const kvdev *D, const kvstate *S)
{
    const int batch = S->c.batch;
    gpu_upload(D->lens, S->lens, (size_t)batch * 4);
    if (D->bidx)
        gpu_upload(D->bidx, S->bidx, (size_t)batch * 4);
    if (D->table)
        gpu_upload(D->table, S->table, (size_t)batch * S->max_pages * 4);
    int32_t *m7 = xcalloc((size_t)batch, 4);
    for (int b = 0; b < batch; b++)
        m7[b] = -7;
    gpu_upload(D->used, m7, (size_t)batch * 4);
    free(m7);
}

static void kv_dev_free(kvdev *D)
{
    gpu_free(D->k_new);
    gpu_free(D->v_new);
    gpu_free(D->cache);
    gpu_free(D->lens);
    gpu_free(D->used);
    gpu_free(D->bidx);
    gpu_free(D->table);
}

static fa3_kvcache_append_args args_of(const kvstate *S, const kvdev *D)
{
    const kvcase *c = &S->c;
    fa3_kvcache_append_args a;
    fa3_kvcache_append_args_init(&a);
    a.dtype = c->dt;
    a.k_new = (const void *)(uintptr_t)D->k_new;
    a.v_new = (const void *)(uintptr_t)D->v_new;
    a.k_cache = (void *)(uintptr_t)D->cache;
    a.v_cache = (void *)(uintptr_t)(D->cache + S->v_off);
    a.cache_seqlens = (const int32_t *)(uintptr_t)D->lens;
    a.cache_batch_idx = (const int32_t *)(uintptr_t)D->bidx;
    a.seqused_out = (int32_t *)(uintptr_t)D->used;
    a.batch = c->batch;
    a.seqlen_new = c->seqlen_new;
    a.num_heads_k = c->heads;
    a.head_dim = c->hd;
    a.head_dim_v = c->hdv;
    a.k_new_batch_stride = S->kn[0], a.k_new_row_stride = S->kn[1], a.k_new_head_stride = S->kn[2];
    a.v_new_batch_stride = S->vn[0], a.v_new_row_stride = S->vn[1], a.v_new_head_stride = S->vn[2];
    a.k_cache_batch_stride = S->kc[0], a.k_cache_row_stride = S->kc[1];
    a.k_cache_head_stride = S->kc[2];
    a.v_cache_batch_stride = S->vc[0], a.v_cache_row_stride = S->vc[1];
    a.v_cache_head_stride = S->vc[2];
    if (c->page_size) {
        a.page_table = (const int32_t *)(uintptr_t)D->table;
        a.num_pages = S->num_pages;
        a.page_size = c->page_size;
        a.max_pages_per_seq = S->max_pages;
        a.page_table_stride = S->max_pages;
    } else {
        a.batch_cache = c->batch_cache;
        a.seqlen_cache = c->capacity;
    }
    return a;
}

/* The device's cache against S->want (bit for bit) and seqused_out; 1 (printing the first
   difference) if they differ. */
static int compare(const kvstate *S, const kvdev *D, const char *what)
{
    uint8_t *got = xcalloc(S->cache_bytes, 1);
    gpu_download(got, D->cache, S->cache_bytes);
    int bad = 0;
    for (size_t i = 0; i < S->cache_bytes && !bad; i++)
        if (got[i] != S->want[i]) {
            printf("  FAIL %s %s: cache byte %zu (%s) is 0x%02x, want 0x%02x (old 0x%02x)\n",
                   S->c.id, what, i, i >= S->v_off ? "V" : "K", got[i], S->want[i],
                   S->cache[i]);
            bad = 1;
        }
    int32_t *used = xcalloc((size_t)S->c.batch, 4);
    gpu_download(used, D->used, (size_t)S->c.batch * 4);
    for (int b = 0; b < S->c.batch && !bad; b++)
        if (used[b] != S->lens[b] + S->c.seqlen_new) {
            printf("  FAIL %s %s: seqused_out[%d] = %d, want %d + %d\n", S->c.id, what, b,
                   used[b], S->lens[b], S->c.seqlen_new);
            bad = 1;
        }
    free(used);
    free(got);
    return bad;
}

/* Runs case c on fresh bytes: 1 if it failed. */
static int run_case(const kvcase *c, host_rng *r)
{
    kvstate S;
    state_make(&S, c, r);
    expected(&S);
    kvdev D;
    kv_dev_make(&D, &S);
    kv_dev_arrays(&D, &S);
    fa3_kvcache_append_args a = args_of(&S, &D);
    CHECK(fa3_kvcache_append(g_ctx, &a, NULL));
    gpu_sync();
    int bad = compare(&S, &D, "append");
    if (!bad)
        printf("  ok %s\n", c->id);
    kv_dev_free(&D);
    state_free(&S);
    return bad;
}

static kvcase base(const char *id)
{
    kvcase c = {.id = id, .dt = FA3_DTYPE_BF16, .batch = 6, .seqlen_new = 5, .heads = 2,
                .hd = 128, .batch_cache = 8, .capacity = 300};
    return c;
}

static void test_append(void **state)
{
    (void)state;
    REQUIRE_GPU();
    host_rng r;
    rng_init(&r, g_seed ^ 0x4B56u);
    static const struct { const char *name; int page_size, bidx; } K[] = {
        {"contiguous", 0, 0}, {"contiguous cache_batch_idx", 0, 1}, {"paged 1", 1, 0},
        {"paged 16", 16, 0}, {"paged 100", 100, 0}, {"paged 256", 256, 0}};
    static const fa3_dtype dts[3] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_DTYPE_E4M3};
    char id[160];
    int failed = 0, cases = 0;
    for (size_t k = 0; k < sizeof K / sizeof K[0]; k++)
        for (int d = 0; d < 3; d++)
            for (int n = 0; n < 2; n++)
                for (int layout = 0; layout < 4; layout++) {
                    kvcase c = base(id);
                    c.dt = dts[d];
                    c.seqlen_new = n ? 5 : 1;
                    c.page_size = K[k].page_size;
                    c.use_bidx = K[k].bidx;
                    c.strided_new = layout == 1 || layout == 3;
                    c.padded_cache = layout == 2;
                    c.interleaved = layout == 3;
                    if (layout == 2) { /* odd head dims: the 2-byte (e4m3: 1-byte) copy */
                        c.hd = 5;
                        c.hdv = 3;
                    }
                    if (c.use_bidx && layout == 1)
                        c.batch_cache = c.batch; /* every entry used, shuffled */
                    snprintf(id, sizeof id, "%s %s seqlen_new %d hd %d/%d%s%s%s", K[k].name,
                             dts[d] == FA3_DTYPE_E4M3 ? "e4m3"
                             : dts[d] == FA3_DTYPE_FP16 ? "fp16" : "bf16", c.seqlen_new, c.hd,
                             c.hdv ? c.hdv : c.hd, c.strided_new ? " strided-new" : "",
                             c.padded_cache ? " padded-cache" : "",
                             c.interleaved ? " interleaved-kv" : "");
                    failed += run_case(&c, &r);
                    cases++;
                }
    if (failed)
        fail_msg("%d of %d cases failed (see above)", failed, cases);
}

/* The arrays of contract_broken's and debug_read_back's bad cases, applied to S. */
enum { BAD_LEN_OVER, BAD_LEN_NEG, BAD_BIDX, BAD_PAGE, BAD_COUNT, /* the kernel skips these */
       BAD_DUP = BAD_COUNT, BAD_DEBUG_COUNT };                 /* a race: debug only */

static int apply_bad(kvstate *S, int which)
{
    const kvcase *c = &S->c;
    switch (which) {
    case BAD_LEN_OVER:
        S->lens[2] = c->capacity - c->seqlen_new + 2; /* the last two rows overflow */
        return 1;
    case BAD_LEN_NEG:
        S->lens[3] = -1; /* row 0 at -1 */
        return 1;
    case BAD_BIDX:
        if (!S->bidx)
            return 0;
        S->bidx[4] = c->batch_cache;
        return 1;
    case BAD_PAGE:
        if (!S->table)
            return 0;
        S->lens[4] = c->page_size * 2 - 2; /* rows cross from page 1 into page 2 */
        S->table[4 * S->max_pages + 2] = -1;
        return 1;
    case BAD_DUP: /* sequence 4 appends onto sequence 2's rows */
        if (!S->bidx && !S->table)
            return 0;
        S->lens[4] = S->lens[2];
        if (S->bidx)
            S->bidx[4] = S->bidx[2];
        else
            memcpy(S->table + 4 * S->max_pages, S->table + 2 * S->max_pages,
                   (size_t)S->max_pages * sizeof(int32_t));
        return 1;
    }
    return 0;
}

static void test_contract_broken(void **state)
{
    (void)state;
    REQUIRE_GPU();
    host_rng r;
    rng_init(&r, g_seed ^ 0xBAD0u);
    int failed = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int which = 0; which < BAD_COUNT; which++) {
            kvcase c = base(kind == 0 ? "contiguous" : kind == 1 ? "cache_batch_idx" : "paged 16");
            c.use_bidx = kind == 1;
            c.page_size = kind == 2 ? 16 : 0;
            kvstate S;
            state_make(&S, &c, &r);
            if (!apply_bad(&S, which)) {
                state_free(&S);
                continue;
            }
            expected(&S);
            kvdev D;
            kv_dev_make(&D, &S);
            kv_dev_arrays(&D, &S);
            fa3_kvcache_append_args a = args_of(&S, &D);
            CHECK(fa3_kvcache_append(g_ctx, &a, NULL));
            gpu_sync();
            char what[32];
            snprintf(what, sizeof what, "broken contract %d", which);
            failed += compare(&S, &D, what);
            kv_dev_free(&D);
            state_free(&S);
        }
    if (failed)
        fail_msg("%d cases wrote what they should not have (see above)", failed);
}

static void test_debug_read_back(void **state)
{
    (void)state;
    REQUIRE_GPU();
    setenv("FA3JIT_DEBUG_VARLEN", "1", 1);
    fa3_context *dbg = NULL;
    CHECK(fa3_context_create(&dbg, NULL));
    unsetenv("FA3JIT_DEBUG_VARLEN");
    host_rng r;
    rng_init(&r, g_seed ^ 0xDEB6u);
    for (int kind = 0; kind < 3; kind++) {
        kvcase c = base(kind == 0 ? "contiguous" : kind == 1 ? "cache_batch_idx" : "paged 16");
        c.use_bidx = kind == 1;
        c.page_size = kind == 2 ? 16 : 0;
        for (int which = -1; which < BAD_DEBUG_COUNT; which++) {
            kvstate S;
            state_make(&S, &c, &r);
            if (which >= 0 && !apply_bad(&S, which)) {
                state_free(&S);
                continue;
            }
            kvdev D;
            kv_dev_make(&D, &S);
            kv_dev_arrays(&D, &S);
            fa3_kvcache_append_args a = args_of(&S, &D);
            void *stream = (void *)(uintptr_t)2; /* CU_STREAM_PER_THREAD */
            fa3_status st = fa3_kvcache_append(dbg, &a, which & 1 ? stream : NULL);
            const char *msg = fa3_last_error_message();
            if (which < 0) {
                if (st != FA3_OK)
                    fail_msg("%s: good arrays refused: %s", c.id, msg);
                gpu_sync();
                expected(&S);
                if (compare(&S, &D, "debug, good arrays"))
                    fail_msg("%s: the debug-mode append differs (see above)", c.id);
            } else {
                fa3_status want = which <= BAD_LEN_NEG ? FA3_ERR_BAD_SHAPE
                                                       : FA3_ERR_INVALID_ARGUMENT;
                char w[160];
                const int cap = S.c.capacity;
                if (which == BAD_LEN_OVER)
                    snprintf(w, sizeof w, "args->cache_seqlens[2] = %d is out of range (0..%d: "
                             "with seqlen_new 5 the rows would end at %d, past the cache's "
                             "capacity of %d rows", cap - 3, cap - 5, cap + 2, cap);
                else if (which == BAD_LEN_NEG)
                    snprintf(w, sizeof w, "args->cache_seqlens[3] = -1 is out of range");
                else if (which == BAD_BIDX)
                    snprintf(w, sizeof w, "args->cache_batch_idx[4] = 8 is out of range "
                             "(0..batch_cache-1 = 7)");
                else if (which == BAD_PAGE)
                    snprintf(w, sizeof w, "args->page_table[4][2] = -1 is out of range "
                             "(0..num_pages-1 = %d; sequence 4 appends rows 32..34 through it)",
                             S.num_pages - 1);
                else
                    snprintf(w, sizeof w, "sequence 2's new row 0 and sequence 4's new row 0 land "
                             "on the same cache row (row %d of %s %d)",
                             S.table ? S.lens[2] % c.page_size : S.lens[2],
                             S.table ? "page" : "cache entry",
                             S.table ? S.table[2 * S.max_pages + S.lens[2] / c.page_size]
                                     : S.bidx[2]);
                printf("  %s: %s: %s\n", c.id, fa3_strerror(st), msg);
                if (st != want || !strstr(msg, w))
                    fail_msg("%s: bad array %d: got %s (%s), want %s naming \"%s\"", c.id, which,
                             fa3_strerror(st), msg, fa3_strerror(want), w);
                gpu_sync();
                uint8_t *got = xcalloc(S.cache_bytes, 1);
                gpu_download(got, D.cache, S.cache_bytes);
                if (memcmp(got, S.cache, S.cache_bytes) != 0)
                    fail_msg("%s: a refused append changed the cache", c.id);
                free(got);
            }
            kv_dev_free(&D);
            state_free(&S);
        }
    }
    fa3_context_free(dbg);
}

static void test_replay(void **state)
{
    (void)state;
    REQUIRE_GPU();
    host_rng r;
    rng_init(&r, g_seed ^ 0x5E9Au);
    for (int paged = 0; paged < 2; paged++) {
        kvcase c = base(paged ? "paged 64 replay" : "contiguous replay");
        c.page_size = paged ? 64 : 0;
        kvstate S;
        state_make(&S, &c, &r);
        kvdev D;
        kv_dev_make(&D, &S);
        const fa3_kvcache_append_args a = args_of(&S, &D); /* built once */
        for (int step = 0; step < 3; step++) {
            kv_dev_arrays(&D, &S);
            expected(&S);
            CHECK(fa3_kvcache_append(g_ctx, &a, NULL));
            gpu_sync();
            if (compare(&S, &D, "replay"))
                fail_msg("%s: step %d differs (see above)", c.id, step);
            memcpy(S.cache, S.want, S.cache_bytes); /* the next step appends after these */
            for (int b = 0; b < c.batch; b++)
                S.lens[b] = (S.lens[b] + c.seqlen_new) % (S.c.capacity - c.seqlen_new + 1);
        }
        kv_dev_free(&D);
        state_free(&S);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_contract_broken),
        cmocka_unit_test(test_debug_read_back),
        cmocka_unit_test(test_replay),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_kvcache", tests, n, (int)n, &g_ctx, &g_seed, &g_skipped);
}
