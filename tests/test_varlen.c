/*
 * test_varlen: variable-length batches and the paged KV cache on the GPU (issue 15's "Tests that
 * must pass" and the varlen items of shared/cases/attention-edge-cases.md), each case run and
 * judged by tools/common/varlen_check.c (the code fa3-gen check --varlen/--paged runs): the NVRTC
 * reference against a host fp64 attention and against its own dense path per sequence (bitwise),
 * then the fast kernel against the reference (tolerance rule, empty rows exactly O = 0 / LSE =
 * −inf, O/LSE NaN-prefilled, rows past cu_seqlens_q[batch] and past the end untouched) and, where
 * marked, against the dense kernel per sequence. vl_run turns the first failing case of a test
 * into its cmocka failure, with every failed check of that case; without a GPU every test skips
 * (exit 77).
 *
 * Tests:
 *   patterns        varlen bf16 hd128 GQA 8/2, none and causal: random lengths, one long
 *                   sequence among many tiny ones, zero-length q and k segments, keys much
 *                   shorter than queries; == the dense kernel per sequence
 *   e15_few_tokens  E15: cu_seqlens_q = cu_seqlens_k = [0, 0, 0, 0, 1], 21 heads over 7, hd128
 *   e17_past_end    E17: Q/O with rows past cu_seqlens_q[batch]: those keep their contents
 *   e18_local_paged E18: local (256, 0), paged page_size 16, seqlen_k 1000, 4 sequences
 *                   (rectangular and varlen Q)
 *   e19_page_sizes  E19 and the page sizes 1, 16, 64, 256 and 100 (not a power of two):
 *                   shuffled page tables with shared pages == the keys stored contiguously
 *   e21_decode      E21: decode (one query per sequence) over a paged cache with some
 *                   seqused_k 0, and with the page-table entries past each sequence's pages -1
 *   seqused         varlen with seqused_k below the stored segments, causal
 *   features        fp16 and e4m3 (descales per sequence and kv head), softcap, local windows,
 *                   MQA, hd64 and hd256, varlen and paged each alone and together
 *   longest_first   the longest-first tile table's edges: 32 sequences with ties and empty
 *                   ones, 33 (the walk), a masked sequence over the table's 128 m_blocks (the walk)
 *
 * Not here: E16 (CUDA graph replay with changed lengths) is python/tests/test_varlen_torch.py
 * and test_kvcache_torch.py; E22 (KV-cache append) is tests/test_kvcache.c and
 * python/tests/test_kvcache_torch.py; E20 (split-KV) is a feature fa3jit does not have yet.
 * Environment: FA3JIT_TEST_SEED, FA3JIT_TEST_FILTER (gpu_util.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "gpu_util.h"
#include "check.h"
#include "tools/common/varlen_check.h"

static int g_skipped;
static fa3_context *g_vl_ctx;
static uint64_t g_vl_seed;

/* Runs and judges case s (its progress lines on stdout); a failure fails the current test. */
static void vl_run(const vl_spec *s)
{
    vl_result r;
    if (vl_check_run(g_vl_ctx, gpu_driver(), g_vl_seed, s, stdout, &r) != VL_PASS)
        fail_msg("%s", r.msg);
}

/* A bf16 hd128 varlen case of 8 heads over 2, no mask; the callers change what they test. */
static vl_spec base(const char *id)
{
    vl_spec s = {0};
    s.id = id;
    s.dtype = FA3_DTYPE_BF16;
    s.mask = FA3_MASK_NONE;
    s.wl = s.wr = -1;
    s.head_dim = 128;
    s.num_heads = 8;
    s.num_heads_k = 2;
    s.varlen = 1;
    s.pattern = VL_RANDOM;
    s.batch = 12;
    s.max_q = s.max_k = 300;
    return s;
}

static void test_patterns(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const struct { const char *id; vl_pattern p; int batch, max_q, max_k; } P[] = {
        {"random", VL_RANDOM, 12, 300, 300},
        {"long+tiny", VL_LONG_AND_TINY, 40, 1500, 1500},
        {"with-empty", VL_WITH_EMPTY, 13, 200, 260},
        {"short-k", VL_SHORT_K, 8, 700, 700},
    };
    char id[64];
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++)
        for (int causal = 0; causal < 2; causal++) {
            vl_spec s = base(id);
            snprintf(id, sizeof id, "%s %s", P[i].id, causal ? "causal" : "none");
            s.pattern = P[i].p;
            s.batch = P[i].batch;
            s.max_q = P[i].max_q;
            s.max_k = P[i].max_k;
            s.mask = causal ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
            s.check_dense = 1;
            vl_run(&s);
        }
}

static void test_e15_few_tokens(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int lens[4] = {0, 0, 0, 1};
    vl_spec s = base("E15 [0,0,0,0,1] 21/7");
    s.batch = 4;
    s.len_q = s.len_k = lens;
    s.num_heads = 21;
    s.num_heads_k = 7;
    vl_run(&s);
}

static void test_e17_past_end(void **state)
{
    (void)state;
    REQUIRE_GPU();
    vl_spec s = base("E17 rows past the end");
    s.mask = FA3_MASK_CAUSAL;
    s.extra_q_rows = 77;
    vl_run(&s);
    s.id = "E17 rows past the end, paged 16";
    s.page_size = 16;
    vl_run(&s);
}

static void test_e18_local_paged(void **state)
{
    (void)state;
    REQUIRE_GPU();
    vl_spec s = base("E18 local (256, 0) paged 16, rectangular");
    s.mask = FA3_MASK_LOCAL;
    s.wl = 256;
    s.wr = 0;
    s.varlen = 0;
    s.page_size = 16;
    s.pattern = VL_EQUAL;
    s.batch = 4;
    s.max_q = 300;
    s.max_k = 1000;
    s.share_pages = 1;
    s.check_dense = 1;
    vl_run(&s);
    s.id = "E18 local (256, 0) paged 16, varlen";
    s.varlen = 1;
    s.pattern = VL_RANDOM;
    vl_run(&s);
}

static void test_e19_page_sizes(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int sizes[] = {1, 16, 64, 256, 100};
    char id[64];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int varlen = 0; varlen < 2; varlen++) {
            vl_spec s = base(id);
            snprintf(id, sizeof id, "E19 page_size %d %s", sizes[i],
                     varlen ? "varlen" : "rectangular");
            s.varlen = varlen;
            s.page_size = sizes[i];
            s.pattern = varlen ? VL_WITH_EMPTY : VL_EQUAL;
            s.batch = 6;
            s.max_q = 200;
            s.max_k = 600;
            s.mask = varlen ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
            s.share_pages = 1;
            s.check_dense = 1; /* == the same keys stored contiguously */
            vl_run(&s);
        }
}

static void test_e21_decode(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int sizes[] = {1, 16, 64};
    char id[64];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        vl_spec s = base(id);
        snprintf(id, sizeof id, "E21 decode, page_size %d", sizes[i]);
        s.varlen = 0;
        s.page_size = sizes[i];
        s.pattern = VL_WITH_EMPTY; /* every fourth sequence has 0 keys in use */
        s.seqused = 1;
        s.poison_tail = 1;
        s.batch = 16;
        s.max_q = 1;
        s.max_k = 900;
        s.mask = FA3_MASK_CAUSAL;
        s.check_dense = 1;
        vl_run(&s);
    }
}

static void test_seqused(void **state)
{
    (void)state;
    REQUIRE_GPU();
    vl_spec s = base("varlen seqused_k, causal");
    s.mask = FA3_MASK_CAUSAL;
    s.seqused = 1;
    s.pattern = VL_WITH_EMPTY;
    s.check_dense = 1;
    vl_run(&s);
    s.id = "varlen + paged 64, seqused_k";
    s.page_size = 64;
    vl_run(&s);
}

static void test_features(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const struct { const char *id; fa3_dtype dt; fa3_mask mask; int wl, wr; float cap;
                          int hd, h, hk; } F[] = {
        {"fp16 causal", FA3_DTYPE_FP16, FA3_MASK_CAUSAL, -1, -1, 0, 128, 8, 2},
        {"e4m3 none", FA3_DTYPE_E4M3, FA3_MASK_NONE, -1, -1, 0, 128, 8, 2},
        {"e4m3 causal hd64", FA3_DTYPE_E4M3, FA3_MASK_CAUSAL, -1, -1, 0, 64, 4, 4},
        {"bf16 softcap 30 causal", FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, -1, 30.0f, 128, 8, 2},
        {"bf16 local (64, 16)", FA3_DTYPE_BF16, FA3_MASK_LOCAL, 64, 16, 0, 128, 8, 2},
        {"bf16 MQA hd256 causal", FA3_DTYPE_BF16, FA3_MASK_CAUSAL, -1, -1, 0, 256, 6, 1},
        {"fp16 hd64 local (-1, 0)", FA3_DTYPE_FP16, FA3_MASK_LOCAL, -1, 0, 0, 64, 8, 8},
    };
    static const struct { const char *name; int varlen, page_size; } L[] = {
        {"varlen", 1, 0}, {"paged 32", 0, 32}, {"varlen + paged 48", 1, 48}};
    char id[96];
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++)
        for (size_t j = 0; j < sizeof L / sizeof L[0]; j++) {
            vl_spec s = base(id);
            snprintf(id, sizeof id, "%s, %s", F[i].id, L[j].name);
            s.dtype = F[i].dt;
            s.mask = F[i].mask;
            s.wl = F[i].wl;
            s.wr = F[i].wr;
            s.softcap = F[i].cap;
            s.head_dim = F[i].hd;
            s.num_heads = F[i].h;
            s.num_heads_k = F[i].hk;
            s.varlen = L[j].varlen;
            s.page_size = L[j].page_size;
            s.pattern = L[j].varlen ? VL_WITH_EMPTY : VL_EQUAL;
            s.batch = 5;
            s.max_q = 257;
            s.max_k = 321;
            s.check_dense = j == 2;
            vl_run(&s);
        }
}

/* The longest-first tile table (codegen/varlen_order.h) at its edges, each lengths set ascending
   so that the sort moves the sequences: 32 sequences with ties and empty ones (every lane of the
   table), 33 (batch over the table: the walk), and a sequence of 16500 rows, 129 m_blocks of
   128 (masked: over the table's 128 levels, the walk; non-causal keeps the table). */
static void test_longest_first(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static int l32[32], l33[33];
    static const int llong[3] = {90, 300, 16500};
    for (int b = 0; b < 32; b++)
        l32[b] = b % 5 == 0 ? 0 : b % 3 == 0 ? 300 : 40 + 23 * b;
    for (int b = 0; b < 33; b++)
        l33[b] = 20 + 29 * b;
    static const struct { const char *name; fa3_mask mask; int wl, wr; } M[] = {
        {"none", FA3_MASK_NONE, -1, -1},
        {"causal", FA3_MASK_CAUSAL, -1, -1},
        {"local (64, 16)", FA3_MASK_LOCAL, 64, 16}};
    char id[96];
    for (size_t m = 0; m < sizeof M / sizeof M[0]; m++)
        for (int set = 0; set < 3; set++) {
            vl_spec s = base(id);
            snprintf(id, sizeof id, "longest first, %s, %s", set == 0 ? "32 sequences"
                     : set == 1 ? "33 sequences" : "a sequence of 129 m_blocks", M[m].name);
            s.mask = M[m].mask;
            s.wl = M[m].wl;
            s.wr = M[m].wr;
            s.batch = set == 0 ? 32 : set == 1 ? 33 : 3;
            s.len_q = s.len_k = set == 0 ? l32 : set == 1 ? l33 : llong;
            if (set == 2) { /* one head: the host's fp64 rows of 16500 keys stay quick */
                s.num_heads = 1;
                s.num_heads_k = 1;
            }
            s.check_dense = 1;
            vl_run(&s);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_e15_few_tokens),
        cmocka_unit_test(test_e17_past_end),
        cmocka_unit_test(test_e18_local_paged),
        cmocka_unit_test(test_e19_page_sizes),
        cmocka_unit_test(test_e21_decode),
        cmocka_unit_test(test_seqused),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_longest_first),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    return gpu_test_main("test_varlen", tests, n, (int)n, &g_vl_ctx, &g_vl_seed, &g_skipped);
}
