/*
 * test_splitkv_args: split-KV's host side without a GPU (fa3jit.h "Split-KV", src/runtime/split.c):
 *   - the config flag split_kv (0/1, canonical, " split" in fa3_config_describe, forward_split);
 *   - fa3_fwd_validate's num_splits rules (0..128, > 1 only with split_kv) and the workspace's
 *     256-byte alignment, on kernels without code (as test_varlen_args);
 *   - fa3_split_resolve: the explicit and chosen split counts, the partials' layout (256-byte
 *     parts, rows as the LSE: rectangular and varlen), a caller's workspace too small (naming
 *     both sizes), rows past 2^31-1;
 *   - fa3_split_heuristic, the num_splits = 0 rule, on hand-computed cases;
 *   - fa3_fwd_workspace_size: 0 for split_kv = 0, the layout's bytes for explicit splits (no
 *     device needed), NULL arguments;
 *   - the cache: two split configs that differ in their mask share one combine entry (3 files:
 *     two forward kernels, one combine), a debug plan's too, and a second context loads every
 *     part from the disk.
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

#include "fa3jit_build_config.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"
#include "fake_kernel.h"
#include "check.h"
#include "test_util.h"

/* A bf16 hd128 kernel with the split_kv / varlen flags, without code; fake_free() it. */
static fa3_kernel *fake_kernel(int split, int varlen)
{
    fa3_config c;
    fa3_config_init(&c);
    c.split_kv = split;
    c.varlen = varlen;
    return fake_kernel_of(&c);
}

#define ADDR(n) FAKE_ADDR(n)
#define HD 128

/* decode-like: batch 2, 1 query row, 4096 keys, 8 heads over 2 KV heads (varlen: 2 sequences
   packed into 3 query rows, max 2, 5000 key rows) */
static fa3_fwd_args good_args(int varlen)
{
    fa3_fwd_args a = fake_args(HD, 2, varlen ? 3 : 1, varlen ? 5000 : 4096, 8, 2);
    if (varlen) {
        a.cu_seqlens_q = (const int32_t *)ADDR(6);
        a.cu_seqlens_k = (const int32_t *)ADDR(7);
        a.max_seqlen_q = 2;
        a.max_seqlen_k = 4096;
    }
    return a;
}

static void test_config_flag(void **state)
{
    (void)state;
    fa3_config c, out;
    fa3_config_init(&c);
    assert_int_equal(c.split_kv, 0);
    c.split_kv = 2;
    expect(fa3_config_canonicalize(&c, &out), FA3_ERR_INVALID_ARGUMENT, "split_kv", "2", NULL);
    c.split_kv = -1;
    expect(fa3_config_canonicalize(&c, &out), FA3_ERR_INVALID_ARGUMENT, "split_kv", "-1", NULL);
    c.split_kv = 1;
    assert_int_equal(fa3_config_canonicalize(&c, &out), FA3_OK);
    assert_int_equal(out.split_kv, 1);
    char d[96];
    assert_int_equal(fa3_config_describe(&out, d, sizeof d), FA3_OK);
    printf("  %s\n", d);
    assert_non_null(strstr(d, " split"));
    assert_string_equal(fa3_op_for_config(&out)->name, "forward_split");
    c.split_kv = 0;
    assert_int_equal(fa3_config_canonicalize(&c, &out), FA3_OK);
    assert_int_equal(fa3_config_describe(&out, d, sizeof d), FA3_OK);
    assert_null(strstr(d, "split"));
    assert_string_equal(fa3_op_for_config(&out)->name, "forward");
}

static void test_num_splits_rules(void **state)
{
    (void)state;
    fa3_kernel *plain = fake_kernel(0, 0), *split = fake_kernel(1, 0);
    fa3_fwd_args a = good_args(0);
    assert_int_equal(fake_validate(plain, &a, NULL), FA3_OK); /* 0: one pass */
    a.num_splits = 1;
    assert_int_equal(fake_validate(plain, &a, NULL), FA3_OK);
    a.num_splits = 4;
    expect(fake_validate(plain, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "num_splits 4", "split_kv",
           NULL);
    assert_int_equal(fake_validate(split, &a, NULL), FA3_OK);
    a.num_splits = -1;
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "num_splits -1", "128", NULL);
    expect(fake_validate(plain, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "num_splits -1", NULL);
    a.num_splits = 129;
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "num_splits 129", "128", NULL);
    a.num_splits = 128;
    assert_int_equal(fake_validate(split, &a, NULL), FA3_OK);
    /* the workspace: 256-byte aligned; ignored by a split_kv = 0 config */
    a.workspace = (void *)(ADDR(9) + 128);
    a.workspace_bytes = 1u << 30;
    expect(fake_validate(split, &a, NULL), FA3_ERR_BAD_ALIGNMENT, "workspace", "256", NULL);
    a.num_splits = 1;
    assert_int_equal(fake_validate(plain, &a, NULL), FA3_OK);
    a.workspace = (void *)ADDR(9);
    assert_int_equal(fake_validate(split, &a, NULL), FA3_OK);
    /* a workspace over a tensor: refused naming it (a split_kv = 0 config ignores it) */
    a.workspace = (void *)ADDR(4); /* o */
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "workspace",
           "overlaps args->o", NULL);
    assert_int_equal(fake_validate(plain, &a, NULL), FA3_OK);
    a.workspace = (void *)ADDR(1); /* q */
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "overlaps args->q", NULL);
    a.workspace = (void *)(ADDR(2) - 256); /* its last 256 bytes... reach into k */
    a.workspace_bytes = 512;
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "overlaps args->k", NULL);
    a.workspace_bytes = 256; /* ... or end where k begins */
    assert_int_equal(fake_validate(split, &a, NULL), FA3_OK);
    a.workspace = (void *)ADDR(5); /* lse */
    a.workspace_bytes = 1u << 30;
    expect(fake_validate(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "overlaps args->lse", NULL);
    a.workspace = (void *)ADDR(9);
    fake_free(plain);
    fake_free(split);
}

static void test_resolve_layout(void **state)
{
    (void)state;
    for (int varlen = 0; varlen <= 1; varlen++) {
        fa3_kernel *k = fake_kernel(1, varlen);
        fa3_fwd_args a = good_args(varlen);
        uint32_t tiles = 0;
        a.num_splits = 7;
        assert_int_equal(fake_validate(k, &a, &tiles), FA3_OK);
        fa3_split_info si;
        assert_int_equal(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_OK);
        const int64_t rows = varlen ? 8 * 3 : 2 * 8 * 1; /* as the LSE output */
        assert_int_equal(si.num_splits, 7);
        assert_int_equal(si.layout.rows, rows);
        const size_t o = (size_t)(7 * rows * HD * 4 + 255) / 256 * 256;
        assert_int_equal(si.layout.lse_offset, o);
        assert_int_equal(si.layout.bytes, o + (size_t)(7 * rows * 4 + 255) / 256 * 256);
        assert_int_equal(si.layout.lse_offset % 256, 0);
        assert_int_equal(si.layout.bytes % 256, 0);
        /* the caller's workspace: exactly enough, one byte short */
        a.workspace = (void *)ADDR(9);
        a.workspace_bytes = si.layout.bytes;
        assert_int_equal(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_OK);
        a.workspace_bytes = si.layout.bytes - 1;
        char have[32], need[32];
        snprintf(have, sizeof have, "%zu", si.layout.bytes - 1);
        snprintf(need, sizeof need, "%zu bytes", si.layout.bytes);
        expect(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_ERR_INVALID_ARGUMENT,
               "workspace_bytes", have, need, "7 splits", NULL);
        /* 0: the library's choice, from the tiles, the key blocks and the SMs */
        a.workspace = NULL;
        a.num_splits = 0;
        assert_int_equal(fa3_split_resolve(k, &a, tiles, 132, &si), FA3_OK);
        const int64_t kb = (4096 + k->plan.block_n - 1) / k->plan.block_n;
        assert_int_equal(si.num_splits, fa3_split_heuristic(tiles, kb, 132));
        printf("  %s: %u tiles, %lld key blocks, 132 SMs: %d splits\n",
               varlen ? "varlen" : "rectangular", tiles, (long long)kb, si.num_splits);
        assert_true(si.num_splits > 1);
        fake_free(k);
    }
    /* rows past 2^31-1: batch 1024 x 64 heads x 32768 queries */
    fa3_kernel *k = fake_kernel(1, 0);
    fa3_fwd_args a = good_args(0);
    a.batch = 1024;
    a.num_heads = a.num_heads_k = 64;
    a.seqlen_q = 32768;
    fa3_fwd_args_set_contiguous(&a, HD, HD);
    a.num_splits = 2;
    fa3_split_info si;
    expect(fa3_split_resolve(k, &a, 1, 132, &si), FA3_ERR_BAD_SHAPE, "2147483648", "rows",
           NULL);
    fake_free(k);
}

static void test_heuristic(void **state)
{
    (void)state;
    /* the tiles fill 80% of the SMs already, or one key block: no split */
    assert_int_equal(fa3_split_heuristic(106, 64, 132), 1);
    assert_int_equal(fa3_split_heuristic(1000, 64, 132), 1);
    assert_int_equal(fa3_split_heuristic(8, 1, 132), 1);
    /* bad arguments */
    assert_int_equal(fa3_split_heuristic(0, 64, 132), 1);
    assert_int_equal(fa3_split_heuristic(8, 0, 132), 1);
    assert_int_equal(fa3_split_heuristic(8, 64, 0), 1);
    /* 32 tiles, 64 key blocks, 132 SMs: s = 4 fills 128 of 132 (97%), the best (s = 33 would be
       100% but leaves splits empty: chunks of 2 blocks make 32) is within 15% */
    assert_int_equal(fa3_split_heuristic(32, 64, 132), 4);
    /* 1 tile: up to the key blocks */
    assert_int_equal(fa3_split_heuristic(1, 16, 132), 16);
    /* 1 tile, 1000 blocks: capped by 128 (the SMs are 132): 112 is the smallest within 85% of
       the best eligible (s = 125: chunks of 8, 125 splits, 125/132) */
    int s = fa3_split_heuristic(1, 1000, 132);
    printf("  1 tile, 1000 key blocks, 132 SMs: %d splits\n", s);
    assert_true(s >= 100 && s <= 128);
    /* never more than the SMs, the key blocks, 128; never an empty split */
    for (int tiles = 1; tiles < 120; tiles += 7)
        for (int kb = 1; kb < 300; kb += 13)
            for (int sms = 1; sms <= 132; sms += 19) {
                const int n = fa3_split_heuristic(tiles, kb, sms);
                assert_true(n >= 1 && n <= 128 && n <= kb && (n == 1 || n <= sms));
                const int chunk = (kb + n - 1) / n;
                assert_int_equal((kb + chunk - 1) / chunk, n);
                if (tiles * 10 >= sms * 8)
                    assert_int_equal(n, 1);
            }
}

static void test_workspace_size(void **state)
{
    (void)state;
    fa3_kernel *plain = fake_kernel(0, 0), *split = fake_kernel(1, 0);
    fa3_fwd_args a = good_args(0);
    size_t bytes = 99;
    assert_int_equal(fa3_fwd_workspace_size(plain, &a, &bytes), FA3_OK);
    assert_int_equal(bytes, 0);
    a.num_splits = 3;
    a.workspace = (void *)(ADDR(9) + 8); /* not looked at */
    assert_int_equal(fa3_fwd_workspace_size(split, &a, &bytes), FA3_OK);
    const size_t rows = 2 * 8 * 1;
    assert_int_equal(bytes, (3 * rows * HD * 4 + 255) / 256 * 256 + (3 * rows * 4 + 255) / 256 * 256);
    expect(fa3_fwd_workspace_size(NULL, &a, &bytes), FA3_ERR_INVALID_ARGUMENT, "kernel", NULL);
    expect(fa3_fwd_workspace_size(split, NULL, &bytes), FA3_ERR_INVALID_ARGUMENT, "args", NULL);
    expect(fa3_fwd_workspace_size(split, &a, NULL), FA3_ERR_INVALID_ARGUMENT, "bytes", NULL);
    a.num_splits = 200; /* validated as fa3_fwd validates */
    expect(fa3_fwd_workspace_size(split, &a, &bytes), FA3_ERR_INVALID_ARGUMENT, "num_splits 200",
           NULL);
    fake_free(plain);
    fake_free(split);
}

static void test_cache_sharing(void **state)
{
    (void)state;
    char dir[] = "/tmp/fa3jit-test-splitkv-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const fa3_backend b = FA3_HAVE_PTX_COMPILER ? FA3_BACKEND_PTX_COMPILER : FA3_BACKEND_NVJITLINK;
    static const fa3_mask masks[2] = {FA3_MASK_NONE, FA3_MASK_CAUSAL};
    for (int pass = 0; pass < 2; pass++) { /* compiled, then from the disk */
        fa3_context *ctx = make_ctx(dir, b, 0);
        for (int m = 0; m < 2; m++) {
            fa3_config c;
            fa3_config_init(&c);
            c.head_dim = 64;
            c.mask = masks[m];
            c.split_kv = 1;
            fa3_kernel *k;
            CHECK(fa3_jit_get_kernel(ctx, &c, &k));
            assert_int_equal(k->num_parts, 2);
            assert_int_equal(k->parts[1].kind, FA3_KERNEL_COMBINE);
            assert_true(k->parts[1].cubin_size > 0);
            assert_int_equal(k->parts[1].spill_store_bytes, 0);
            /* the second config finds the first one's combine kernel on the disk */
            const int want = pass || m ? FA3_SOURCE_DISK : FA3_SOURCE_COMPILED;
            assert_int_equal(k->parts[1].source, want);
            assert_int_equal(k->parts[0].source, pass ? FA3_SOURCE_DISK : FA3_SOURCE_COMPILED);
        }
        fa3_context_free(ctx);
    }
    /* a benchmark variant's forward kernel is its own; the combine kernel ignores the knobs */
    setenv("FA3JIT_PLAN_DEBUG", "dbg_no_softmax=1", 1);
    fa3_context *ctx = make_ctx(dir, b, 0);
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 64;
    c.split_kv = 1;
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(ctx, &c, &k));
    unsetenv("FA3JIT_PLAN_DEBUG");
    assert_int_equal(k->parts[0].source, FA3_SOURCE_COMPILED);
    assert_int_equal(k->parts[1].source, FA3_SOURCE_DISK);
    fa3_context_free(ctx);
    fa3_cache_file *files = NULL;
    size_t n = 0;
    CHECK(fa3_cache_list(dir, &files, &n));
    int combine = 0, entries = 0;
    for (size_t i = 0; i < n; i++)
        if (files[i].kind == FA3_CACHE_FILE_ENTRY) {
            assert_true(files[i].valid);
            entries++;
            if (files[i].view.meta.kind == FA3_KERNEL_COMBINE) {
                combine++;
                assert_int_equal(files[i].view.meta.config.head_dim_v, 64);
                assert_int_equal(files[i].view.meta.config.mask, FA3_MASK_NONE);
                assert_string_equal(files[i].view.meta.plan_debug, "");
            }
        }
    fa3_free(files);
    printf("  %d cache entries, %d of them the combine kernel\n", entries, combine);
    assert_int_equal(entries, 4);
    assert_int_equal(combine, 1);
    rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_flag),
        cmocka_unit_test(test_num_splits_rules),
        cmocka_unit_test(test_resolve_layout),
        cmocka_unit_test(test_heuristic),
        cmocka_unit_test(test_workspace_size),
        cmocka_unit_test(test_cache_sharing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
