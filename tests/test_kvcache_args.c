/*
 * test_kvcache_args (CPU): the KV-cache append's argument checks, without a GPU. Every bad input
 * of fa3_kvcache_append is refused with its status and a message naming the field and the value,
 * before the driver or NVRTC is touched (pointers here are made-up addresses that are never
 * dereferenced: a call that got past the checks would fail, or on a GPU machine fault, so valid
 * arguments are checked through fa3_kvcache_validate, which launches nothing, and its kernel
 * parameters: strides in copy units, the widest unit every address, stride and row allows).
 * The append's CUDA C compiles through NVRTC for sm_90 (skipped without NVRTC). The device-side
 * contract (FA3JIT_DEBUG_VARLEN=1) is tests/test_kvcache.c's, on a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fa3jit.h"
#include "runtime/kvcache.h"

static fa3_context *g_ctx;

#define ADDR(n) ((uintptr_t)0x7f0000000000ull + (uintptr_t)(n) * 0x1000000ull)
#define HD 128

/* bf16, 3 sequences appending 5 rows each, 2 kv heads, hd128; the cache contiguous (4, 100, 2,
   128), or paged (40 pages of 16 rows, a (3, 8) page table of row stride 8). */
static fa3_kvcache_append_args good(int paged)
{
    fa3_kvcache_append_args a;
    fa3_kvcache_append_args_init(&a);
    a.dtype = FA3_DTYPE_BF16;
    a.k_new = (const void *)ADDR(1);
    a.v_new = (const void *)ADDR(2);
    a.k_cache = (void *)ADDR(3);
    a.v_cache = (void *)ADDR(4);
    a.cache_seqlens = (const int32_t *)ADDR(5);
    a.seqused_out = (int32_t *)ADDR(6);
    a.batch = 3;
    a.seqlen_new = 5;
    a.num_heads_k = 2;
    a.head_dim = HD;
    a.k_new_head_stride = a.v_new_head_stride = HD;
    a.k_new_row_stride = a.v_new_row_stride = 2 * HD;
    a.k_new_batch_stride = a.v_new_batch_stride = 5 * 2 * HD;
    a.k_cache_head_stride = a.v_cache_head_stride = HD;
    a.k_cache_row_stride = a.v_cache_row_stride = 2 * HD;
    if (paged) {
        a.page_table = (const int32_t *)ADDR(7);
        a.num_pages = 40;
        a.page_size = 16;
        a.max_pages_per_seq = 8;
        a.page_table_stride = 8;
        a.k_cache_batch_stride = a.v_cache_batch_stride = 16 * 2 * HD;
    } else {
        a.batch_cache = 4;
        a.seqlen_cache = 100;
        a.k_cache_batch_stride = a.v_cache_batch_stride = 100 * 2 * HD;
    }
    return a;
}

/* fa3_kvcache_append refuses a with want, its message holding words. */
static void expect_bad(const fa3_kvcache_append_args *a, fa3_status want, const char *words,
                       const char *what)
{
    fa3_status st = fa3_kvcache_append(g_ctx, a, NULL);
    const char *msg = fa3_last_error_message();
    printf("  %s: %s\n", fa3_strerror(st), msg);
    if (st != want || !strstr(msg, words))
        fail_msg("%s: got %s (%s), want %s with \"%s\"", what, fa3_strerror(st), msg,
                 fa3_strerror(want), words);
}

#define BAD(paged, want, words, stmt)                 \
    do {                                              \
        fa3_kvcache_append_args a = good(paged);      \
        stmt;                                         \
        expect_bad(&a, (want), (words), #stmt);       \
    } while (0)

static fa3_kvcache_params expect_ok(const fa3_kvcache_append_args *a, const char *what)
{
    fa3_kvcache_params p;
    fa3_status st = fa3_kvcache_validate(a, &p);
    if (st != FA3_OK)
        fail_msg("%s: refused: %s: %s", what, fa3_strerror(st), fa3_last_error_message());
    return p;
}

static void test_init(void **state)
{
    (void)state;
    fa3_kvcache_append_args a;
    memset(&a, 0x5A, sizeof a);
    fa3_kvcache_append_args_init(&a);
    assert_int_equal(a.struct_size, sizeof a);
    assert_null(a.k_new);
    assert_null(a.page_table);
    assert_null(a.cache_batch_idx);
    assert_null(a.seqused_out);
    assert_int_equal(a.head_dim_v, 0);
    assert_int_equal(a.seqlen_cache, 0);
    assert_true(a.page_table_stride == 0);
    fa3_kvcache_append_args_init(NULL); /* ignored */
}

/* Fields and shapes, either cache kind. */
static void test_bad_common(void **state)
{
    (void)state;
    fa3_kvcache_append_args g = good(0);
    assert_int_equal(fa3_kvcache_append(NULL, &g, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "ctx is NULL"));
    assert_int_equal(fa3_kvcache_append(g_ctx, NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "args is NULL"));
    for (int paged = 0; paged < 2; paged++) {
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "fa3_kvcache_append_args", a.struct_size = 0);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "newer fa3jit.h", a.struct_size = sizeof a + 8);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "fa3_kvcache_append_args.struct_size 216 is not a "
            "size of fa3_kvcache_append_args this library knows", a.struct_size = sizeof a - 8);
        BAD(paged, FA3_ERR_BAD_DTYPE, "args->dtype -1 is not supported", a.dtype = FA3_DTYPE_AUTO);
        BAD(paged, FA3_ERR_BAD_DTYPE, "args->dtype 9", a.dtype = (fa3_dtype)9);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->k_new is NULL", a.k_new = NULL);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->v_new is NULL", a.v_new = NULL);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->k_cache is NULL", a.k_cache = NULL);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->v_cache is NULL", a.v_cache = NULL);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->cache_seqlens is NULL",
            a.cache_seqlens = NULL);
        BAD(paged, FA3_ERR_BAD_SHAPE, "args->batch 0 must be at least 1", a.batch = 0);
        BAD(paged, FA3_ERR_BAD_SHAPE, "args->seqlen_new 0 must be at least 1 (the rows to "
            "append", a.seqlen_new = 0);
        BAD(paged, FA3_ERR_BAD_SHAPE, "args->seqlen_new -3", a.seqlen_new = -3);
        BAD(paged, FA3_ERR_BAD_SHAPE, "args->num_heads_k 0 must be at least 1",
            a.num_heads_k = 0);
        BAD(paged, FA3_ERR_BAD_HEAD_DIM, "args->head_dim 0 must be at least 1", a.head_dim = 0);
        BAD(paged, FA3_ERR_BAD_HEAD_DIM_V, "args->head_dim_v -1", a.head_dim_v = -1);
        BAD(paged, FA3_ERR_BAD_SHAPE, "exceed 2^58",
            (a.batch = 1 << 30, a.seqlen_new = 1 << 20));

        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->k_new 0x7f0001000001 is not 2-byte aligned",
            a.k_new = (const void *)(ADDR(1) + 1));
        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->v_new", a.v_new = (const void *)(ADDR(2) + 1));
        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->k_cache", a.k_cache = (void *)(ADDR(3) + 3));
        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->v_cache", a.v_cache = (void *)(ADDR(4) + 1));
        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->cache_seqlens 0x7f0005000002 is not 4-byte",
            a.cache_seqlens = (const int32_t *)(ADDR(5) + 2));
        BAD(paged, FA3_ERR_BAD_ALIGNMENT, "args->seqused_out",
            a.seqused_out = (int32_t *)(ADDR(6) + 1));

        BAD(paged, FA3_ERR_BAD_STRIDE, "args->k_new_batch_stride -1 is negative",
            a.k_new_batch_stride = -1);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->k_new_row_stride -2 is negative",
            a.k_new_row_stride = -2);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->v_new_head_stride -128 is negative",
            a.v_new_head_stride = -128);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->k_cache_row_stride -256 is negative",
            a.k_cache_row_stride = -256);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->v_cache_batch_stride -1 is negative",
            a.v_cache_batch_stride = -1);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->k_new strides (batch 4611686018427387904",
            a.k_new_batch_stride = (int64_t)1 << 62);
        /* the caches are written: no element twice */
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->k_cache_head_stride 64 is smaller than the 128 "
            "elements it must step over (head_dim 128): elements of k_cache would overlap",
            a.k_cache_head_stride = 64);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->v_cache_row_stride 0 is smaller",
            a.v_cache_row_stride = 0);
        BAD(paged, FA3_ERR_BAD_STRIDE, "args->v_cache_head_stride 100 is smaller than the 128 "
            "elements it must step over (head_dim_v 128)", a.v_cache_head_stride = 100);

        /* overlaps */
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->k_cache and args->v_cache are both",
            a.v_cache = a.k_cache);
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->k_new (bytes 0x7f0003000100",
            a.k_new = (const void *)(ADDR(3) + 256));
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "overlaps args->v_cache",
            a.v_new = (const void *)(ADDR(4)));
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->cache_seqlens (12 bytes at 0x7f0003000040) "
            "overlaps args->k_cache", a.cache_seqlens = (const int32_t *)(ADDR(3) + 64));
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->seqused_out (3 int32 at 0x7f0005000004) "
            "overlaps args->cache_seqlens", a.seqused_out = (int32_t *)(ADDR(5) + 4));
        BAD(paged, FA3_ERR_INVALID_ARGUMENT, "args->seqused_out (3 int32 at 0x7f0001000000) "
            "overlaps args->k_new", a.seqused_out = (int32_t *)ADDR(1));
    }
}

static void test_bad_contiguous(void **state)
{
    (void)state;
    BAD(0, FA3_ERR_INVALID_ARGUMENT, "args->num_pages 40 is given with a contiguous cache "
        "(page_table is NULL): set it to 0", a.num_pages = 40);
    BAD(0, FA3_ERR_INVALID_ARGUMENT, "args->page_size 16 is given with a contiguous",
        a.page_size = 16);
    BAD(0, FA3_ERR_INVALID_ARGUMENT, "args->max_pages_per_seq 2", a.max_pages_per_seq = 2);
    BAD(0, FA3_ERR_INVALID_ARGUMENT, "args->page_table_stride 8", a.page_table_stride = 8);
    BAD(0, FA3_ERR_BAD_SHAPE, "args->batch_cache 0 must be at least 1", a.batch_cache = 0);
    BAD(0, FA3_ERR_BAD_SHAPE, "args->seqlen_cache 0 must be at least 1", a.seqlen_cache = 0);
    BAD(0, FA3_ERR_BAD_SHAPE, "args->batch_cache 2 is below args->batch 3: without "
        "cache_batch_idx", a.batch_cache = 2);
    BAD(0, FA3_ERR_BAD_SHAPE, "args->seqlen_new 101 exceeds the cache's capacity of 100 rows per "
        "sequence (seqlen_cache)", a.seqlen_new = 101);
    BAD(0, FA3_ERR_BAD_ALIGNMENT, "args->cache_batch_idx 0x7f0008000001 is not 4-byte aligned",
        a.cache_batch_idx = (const int32_t *)(ADDR(8) + 1));
    BAD(0, FA3_ERR_INVALID_ARGUMENT, "args->seqused_out (3 int32 at 0x7f0008000000) overlaps "
        "args->cache_batch_idx", (a.cache_batch_idx = (const int32_t *)ADDR(8),
                                  a.seqused_out = (int32_t *)ADDR(8)));
}

static void test_bad_paged(void **state)
{
    (void)state;
    BAD(1, FA3_ERR_INVALID_ARGUMENT, "args->cache_batch_idx 0x7f0008000000 is given with a paged "
        "cache", a.cache_batch_idx = (const int32_t *)ADDR(8));
    BAD(1, FA3_ERR_INVALID_ARGUMENT, "args->batch_cache 4 is given with a paged cache",
        a.batch_cache = 4);
    BAD(1, FA3_ERR_INVALID_ARGUMENT, "args->seqlen_cache 100 is given with a paged cache",
        a.seqlen_cache = 100);
    BAD(1, FA3_ERR_BAD_SHAPE, "args->page_size 0 is out of range (1..256)", a.page_size = 0);
    BAD(1, FA3_ERR_BAD_SHAPE, "args->page_size 257 is out of range", a.page_size = 257);
    BAD(1, FA3_ERR_BAD_SHAPE, "args->num_pages 0 must be at least 1", a.num_pages = 0);
    BAD(1, FA3_ERR_BAD_SHAPE, "args->max_pages_per_seq 0 must be at least 1",
        (a.max_pages_per_seq = 0, a.page_table_stride = 0));
    BAD(1, FA3_ERR_BAD_STRIDE, "args->page_table_stride 4 is below args->max_pages_per_seq 8",
        a.page_table_stride = 4);
    BAD(1, FA3_ERR_BAD_SHAPE, "has more than 2^31-1 entries",
        a.page_table_stride = (int64_t)1 << 30);
    BAD(1, FA3_ERR_BAD_SHAPE, "exceeds 2^30",
        (a.max_pages_per_seq = 1 << 23, a.page_table_stride = 1 << 23, a.page_size = 256,
         a.batch = 1));
    BAD(1, FA3_ERR_BAD_SHAPE, "args->seqlen_new 129 exceeds the cache's capacity of 128 rows "
        "per sequence (max_pages_per_seq * page_size)", a.seqlen_new = 129);
    BAD(1, FA3_ERR_BAD_ALIGNMENT, "args->page_table 0x7f0007000002 is not 4-byte aligned",
        a.page_table = (const int32_t *)(ADDR(7) + 2));
    BAD(1, FA3_ERR_INVALID_ARGUMENT, "args->page_table (96 bytes at 0x7f0004000000) overlaps "
        "args->v_cache", a.page_table = (const int32_t *)ADDR(4));
    BAD(1, FA3_ERR_INVALID_ARGUMENT, "args->seqused_out (3 int32 at 0x7f0007000050) overlaps "
        "args->page_table", a.seqused_out = (int32_t *)(ADDR(7) + 80));
}

/* Good calls and their kernel parameters. */
static void test_valid_arguments(void **state)
{
    (void)state;
    for (int paged = 0; paged < 2; paged++) {
        fa3_kvcache_append_args a = good(paged);
        fa3_kvcache_params p = expect_ok(&a, "good");
        assert_int_equal(p.unit, 16);
        assert_int_equal(p.k_row_units, HD * 2 / 16);
        assert_true(p.kn_rs == 2 * HD * 2 / 16 && p.kc_hs == HD * 2 / 16);
        assert_true(p.k_units == 3 * 5 * 2 * 16 && p.total_units == 2 * p.k_units);
        assert_int_equal(p.capacity, paged ? 128 : 100);
        assert_int_equal(p.slots, paged ? 40 : 4);
        assert_int_equal(p.page_size, paged ? 16 : 0);
        assert_true(p.page_table_stride == (paged ? 8 : 0));
        assert_true(p.seqused_out == ADDR(6) && p.cache_batch_idx == 0);

        /* one append row fills the cache exactly; seqused_out optional */
        a.seqlen_new = paged ? 128 : 100;
        a.k_new_batch_stride = a.v_new_batch_stride = (int64_t)a.seqlen_new * 2 * HD;
        a.seqused_out = NULL;
        expect_ok(&a, "seqlen_new = capacity");

        /* broadcast new rows (stride 0), hd 64 with head_dim_v 32, e4m3 */
        a = good(paged);
        a.k_new_head_stride = 0;
        a.v_new_row_stride = 0;
        expect_ok(&a, "broadcast k_new/v_new");
        a = good(paged);
        a.dtype = FA3_DTYPE_E4M3;
        p = expect_ok(&a, "e4m3"); /* strides in elements = bytes */
        assert_int_equal(p.unit, 16);
        assert_int_equal(p.k_row_units, HD / 16);
        /* the unit follows the narrowest address / stride / row: an odd row of 2-byte elements */
        a = good(paged);
        a.head_dim = 5;
        a.head_dim_v = 3;
        a.k_new_head_stride = a.v_new_head_stride = a.k_cache_head_stride = a.v_cache_head_stride
            = 8;
        p = expect_ok(&a, "hd 5 / 3");
        assert_int_equal(p.unit, 2);
        assert_int_equal(p.k_row_units, 5);
        assert_int_equal(p.v_row_units, 3);
        a = good(paged);
        a.k_new = (const void *)(ADDR(1) + 4);
        p = expect_ok(&a, "k_new 4 bytes past 16");
        assert_int_equal(p.unit, 4);
        a = good(paged);
        a.k_cache_row_stride = 2 * HD + 4;
        a.k_cache_batch_stride = (paged ? 16 : 100) * (2 * HD + 4);
        p = expect_ok(&a, "padded cache rows");
        assert_int_equal(p.unit, 8);
        assert_true(p.kc_rs == (2 * HD + 4) * 2 / 8);
        /* K and V interleaved in one tensor (..., 2, heads, hd): allowed */
        a = good(paged);
        a.v_cache = (void *)(ADDR(3) + 2 * HD * 2);
        a.k_cache_row_stride = a.v_cache_row_stride = 4 * HD;
        a.k_cache_batch_stride = a.v_cache_batch_stride = (paged ? 16 : 100) * 4 * HD;
        expect_ok(&a, "interleaved K/V cache");
    }
    /* contiguous with cache_batch_idx: batch_cache may be below batch */
    fa3_kvcache_append_args a = good(0);
    a.cache_batch_idx = (const int32_t *)ADDR(8);
    a.batch_cache = 1;
    fa3_kvcache_params p = expect_ok(&a, "cache_batch_idx, one cache entry");
    assert_true(p.cache_batch_idx == ADDR(8) && p.slots == 1 && p.kc_bs == 0);
}

/* The kernels' CUDA C compiles for sm_90 (NVRTC, no GPU). */
static void test_kernel_builds(void **state)
{
    (void)state;
    void *image = NULL;
    size_t size = 0;
    int is_ptx = -1;
    fa3_status st = fa3_kvcache_build_image(90, &image, &size, &is_ptx);
    if (st == FA3_ERR_NO_NVRTC) {
        printf("SKIP: %s\n", fa3_last_error_message());
        skip(); /* no NVRTC on this machine */
    }
    if (st != FA3_OK)
        fail_msg("fa3_kvcache_build_image: %s: %s", fa3_strerror(st), fa3_last_error_message());
    assert_non_null(image);
    assert_true(size > 16);
    if (is_ptx)
        assert_non_null(strstr((const char *)image, "fa3_kvcache_append_u16"));
    else
        assert_memory_equal(image, "\x7f" "ELF", 4);
    printf("  KV-cache append kernels: %zu-byte %s\n", size, is_ptx ? "PTX" : "cubin");
    free(image);
}

int main(void)
{
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.disable_disk_cache = 1;
    if (fa3_context_create(&g_ctx, &o) != FA3_OK) {
        fprintf(stderr, "fa3_context_create: %s\n", fa3_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_bad_common),
        cmocka_unit_test(test_bad_contiguous),
        cmocka_unit_test(test_bad_paged),
        cmocka_unit_test(test_valid_arguments),
        cmocka_unit_test(test_kernel_builds),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    fa3_context_free(g_ctx);
    return failed;
}
