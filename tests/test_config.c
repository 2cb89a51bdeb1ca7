/*
 * test_config: the public configuration API without a GPU — defaults, one status code per bad
 * field (with a message naming the field and its value), canonical form, status names, NULL
 * arguments, fa3_emit_ptx's header, the pure helpers of the forward arguments, and the public
 * structs' struct_size rules.
 *
 * Over 600 lines on purpose: one case list per public struct and field, each a few lines; split
 * by struct they would share the same fixtures and checks.
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
#include "kernel_abi.h"
#include "check.h"

/* Fails unless msg contains each of the words of ap (up to a NULL). */
static void expect_words(const char *msg, va_list ap)
{
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;) {
        if (!strstr(msg, w))
            fail_msg("message \"%s\" does not contain \"%s\"", msg, w);
    }
}

/* Asserts that canonicalizing cfg fails with want, leaves out untouched, and that the message
   contains each of the NULL-terminated words (the field and its value). */
static void expect_bad(const fa3_config *cfg, fa3_status want, ...)
{
    fa3_config out;
    memset(&out, 0xA5, sizeof out);
    fa3_config before = out;
    fa3_status st = fa3_config_canonicalize(cfg, &out);
    const char *msg = fa3_last_error_message();
    printf("  status %d (%s): %s\n", (int)st, fa3_strerror(st), msg);
    if (st != want)
        fail_msg("got status %d (%s), expected %d (%s)", (int)st, fa3_strerror(st), (int)want,
                 fa3_strerror(want));
    assert_memory_equal(&out, &before, sizeof out); /* "On error out is left unchanged" */
    assert_non_null(msg);
    va_list ap;
    va_start(ap, want);
    expect_words(msg, ap);
    va_end(ap);
    /* every entry point taking a config reports the same error */
    char *ptx = (char *)0x1;
    assert_int_equal(fa3_emit_ptx(cfg, &ptx, NULL), want);
    assert_ptr_equal(ptx, (char *)0x1);
}

static fa3_config base(void)
{
    fa3_config c;
    fa3_config_init(&c);
    return c;
}

static void test_defaults(void **state)
{
    (void)state;
    fa3_config c;
    memset(&c, 0x5A, sizeof c);
    fa3_config_init(&c);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.head_dim_v, 0);
    assert_int_equal(c.dtype, FA3_DTYPE_BF16);
    assert_int_equal(c.mask, FA3_MASK_NONE);
    assert_int_equal(c.softcap, 0);
    assert_int_equal(c.arch, FA3_ARCH_SM90A);
    assert_int_equal(c.block_n, 0);
    assert_int_equal(c.stages, 0);
    fa3_config_init(NULL); /* ignored, must not crash */

    assert_int_equal(fa3_version_number(), FA3JIT_VERSION_NUMBER);
    assert_string_equal(fa3_version_string(), FA3JIT_VERSION_STRING);
}

static void test_bad_head_dim(void **state)
{
    (void)state;
    fa3_config c = base();
    c.head_dim = 72;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM, "head_dim", "72", NULL);
    c.head_dim = 512;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM, "head_dim", "512", NULL);
    c.head_dim = 0;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM, "head_dim", "0", NULL);
    c.head_dim = -64;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM, "head_dim", "-64", NULL);
}

static void test_bad_head_dim_v(void **state)
{
    (void)state;
    fa3_config c = base();
    c.head_dim = 128;
    c.head_dim_v = 64;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM_V, "head_dim_v", "64", NULL);
    c.head_dim = 64;
    c.head_dim_v = 96;
    expect_bad(&c, FA3_ERR_BAD_HEAD_DIM_V, "head_dim_v", "96", NULL);
}

static void test_bad_dtype(void **state)
{
    (void)state;
    fa3_config c = base();
    c.dtype = (fa3_dtype)3; /* e5m2 would be next: not supported */
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "dtype", "3", "e5m2", NULL);
    c.dtype = FA3_DTYPE_BF16;
    c.out_dtype = FA3_DTYPE_FP16; /* 16-bit inputs give O in their own dtype */
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "out_dtype 1 (fp16)", "dtype bf16", "bf16 = 0", NULL);
    c.dtype = FA3_DTYPE_FP16;
    c.out_dtype = FA3_DTYPE_BF16;
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "out_dtype 0 (bf16)", "dtype fp16", "fp16 = 1", NULL);
    c.out_dtype = (fa3_dtype)9; /* no name: the number alone */
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "out_dtype 9 is not", NULL);
    c.dtype = FA3_DTYPE_E4M3;
    c.out_dtype = FA3_DTYPE_E4M3; /* e4m3 output: not offered */
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "out_dtype 2 (e4m3)", "dtype e4m3", NULL);
    c.out_dtype = (fa3_dtype)-2;
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "out_dtype -2 is not", "-1 = auto", NULL);
    c.out_dtype = FA3_DTYPE_AUTO;
    c.block_n = 96; /* e4m3 tiles: multiples of 64 keys */
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "block_n", "96", "e4m3", NULL);
    c.block_n = 0;
    c.dtype = (fa3_dtype)7;
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "dtype", "7", NULL);
    c.dtype = (fa3_dtype)-1;
    expect_bad(&c, FA3_ERR_BAD_DTYPE, "dtype", "-1", NULL);
}

static void test_bad_mask(void **state)
{
    (void)state;
    fa3_config c = base();
    c.mask = (fa3_mask)3;
    expect_bad(&c, FA3_ERR_BAD_MASK, "mask", "3", NULL);
    c.mask = (fa3_mask)-2;
    expect_bad(&c, FA3_ERR_BAD_MASK, "mask", "-2", NULL);
}

static void test_bad_arch(void **state)
{
    (void)state;
    fa3_config c = base();
    c.arch = (fa3_arch)80;
    expect_bad(&c, FA3_ERR_BAD_ARCH, "arch", "80", NULL);
    c.arch = (fa3_arch)100;
    expect_bad(&c, FA3_ERR_BAD_ARCH, "arch", "100", NULL);
}

static void test_bad_block(void **state)
{
    (void)state;
    fa3_config c = base();
    c.block_n = 24;
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "block_n", "24", NULL);
    c.block_n = 512;
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "block_n", "512", NULL);
    c.block_n = -16;
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "block_n", "-16", NULL);
    c = base();
    c.stages = 1;
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "stages", "1", NULL);
    c.stages = 9;
    expect_bad(&c, FA3_ERR_BAD_BLOCK, "stages", "9", NULL);
}

static void test_bad_softcap_flag(void **state)
{
    (void)state;
    /* softcap is a 0/1 flag in the config (its value goes in fa3_fwd_args): a bad flag is an
       invalid argument (fa3.h: "bad flag"). */
    fa3_config c = base();
    c.softcap = 2;
    expect_bad(&c, FA3_ERR_INVALID_ARGUMENT, "softcap", "2", NULL);
    c.softcap = -1;
    expect_bad(&c, FA3_ERR_INVALID_ARGUMENT, "softcap", "-1", NULL);
    /* the layout flags too */
    c = base();
    c.split_kv = 2;
    expect_bad(&c, FA3_ERR_INVALID_ARGUMENT, "split_kv", "2", NULL);
    c.split_kv = -1;
    expect_bad(&c, FA3_ERR_INVALID_ARGUMENT, "split_kv", "-1", NULL);
}

static void test_error_message_replaced(void **state)
{
    (void)state;
    /* A later failing call replaces the message (it names its own value, not the old one). */
    fa3_config c = base();
    c.head_dim = 72;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_ERR_BAD_HEAD_DIM);
    c = base();
    c.arch = (fa3_arch)80;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_ERR_BAD_ARCH);
    assert_null(strstr(fa3_last_error_message(), "72"));
    assert_non_null(strstr(fa3_last_error_message(), "80"));
}

static void check_canonical(const fa3_config *in)
{
    fa3_config a, b;
    assert_int_equal(fa3_config_canonicalize(in, &a), FA3_OK);
    assert_int_equal(a.head_dim, in->head_dim);
    assert_int_equal(a.head_dim_v, in->head_dim_v ? in->head_dim_v : in->head_dim);
    assert_int_equal(a.dtype, in->dtype);
    assert_int_equal(a.mask, in->mask);
    assert_int_equal(a.softcap, in->softcap);
    assert_int_equal(a.arch, in->arch);
    /* planner values filled, and valid by the library's own rules */
    assert_true(a.block_n >= 16 && a.block_n <= 256 && a.block_n % 16 == 0);
    assert_true(a.stages >= 2 && a.stages <= 8);
    if (in->block_n)
        assert_int_equal(a.block_n, in->block_n);
    if (in->stages)
        assert_int_equal(a.stages, in->stages);
    /* idempotent */
    assert_int_equal(fa3_config_canonicalize(&a, &b), FA3_OK);
    assert_memory_equal(&a, &b, sizeof a);
    /* in place (out == cfg) gives the same */
    fa3_config c = *in;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    assert_memory_equal(&a, &c, sizeof a);
    /* the explicit form of the planner's choice is the same canonical config */
    fa3_config d = *in;
    d.head_dim_v = a.head_dim_v;
    d.block_n = a.block_n;
    d.stages = a.stages;
    assert_int_equal(fa3_config_canonicalize(&d, &d), FA3_OK);
    assert_memory_equal(&a, &d, sizeof a);
}

static void test_canonicalize(void **state)
{
    (void)state;
    static const int hds[] = {64, 128, 256};
    for (int h = 0; h < 3; h++)
        for (int dt = 0; dt < 2; dt++)
            for (int m = 0; m < 3; m++)
                for (int sc = 0; sc < 2; sc++) {
                    fa3_config c = base();
                    c.head_dim = hds[h];
                    c.dtype = (fa3_dtype)dt;
                    c.mask = (fa3_mask)m;
                    c.softcap = sc;
                    fa3_config tmp;
                    fa3_status st = fa3_config_canonicalize(&c, &tmp);
                    if (st != FA3_OK && m == FA3_MASK_LOCAL) {
                        printf("  note: local mask refused: %s\n", fa3_last_error_message());
                        continue;
                    }
                    assert_int_equal(st, FA3_OK);
                    check_canonical(&c);
                }
    /* an explicit valid override is kept */
    fa3_config c = base();
    c.block_n = 64;
    c.stages = 3;
    check_canonical(&c);
    c = base();
    c.head_dim_v = 128;
    check_canonical(&c);
}

static void test_describe(void **state)
{
    (void)state;
    fa3_config c = base();
    c.mask = FA3_MASK_CAUSAL;
    c.dtype = FA3_DTYPE_FP16;
    c.head_dim = 64;
    assert_int_equal(fa3_config_canonicalize(&c, &c), FA3_OK);
    char buf[128];
    assert_int_equal(fa3_config_describe(&c, buf, sizeof buf), FA3_OK);
    printf("  %s\n", buf);
    assert_non_null(strstr(buf, "hd64"));
    assert_non_null(strstr(buf, "fp16"));
    assert_non_null(strstr(buf, "causal"));
    assert_null(strstr(buf, "split"));
    c.split_kv = 1; /* split-KV: " split" at the end */
    assert_int_equal(fa3_config_describe(&c, buf, sizeof buf), FA3_OK);
    assert_true(strlen(buf) > 6 && !strcmp(buf + strlen(buf) - 6, " split"));
    c.split_kv = 0;
    /* a tiny buffer is truncated, still NUL-terminated */
    char small[6];
    memset(small, 'x', sizeof small);
    assert_int_equal(fa3_config_describe(&c, small, sizeof small), FA3_OK);
    assert_true(memchr(small, 0, sizeof small) != NULL);
    assert_int_equal(fa3_config_describe(&c, NULL, 10), FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(fa3_config_describe(&c, buf, 0), FA3_ERR_INVALID_ARGUMENT);
}

static void test_strerror(void **state)
{
    (void)state;
    enum { N = FA3_ERR_NO_NVRTC + 1 };
    const char *names[N];
    for (int i = 0; i < N; i++) {
        names[i] = fa3_strerror((fa3_status)i);
        assert_non_null(names[i]);
        assert_true(strlen(names[i]) > 0);
        assert_string_not_equal(names[i], "unknown status");
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                fail_msg("fa3_strerror(%d) == fa3_strerror(%d) == \"%s\"", i, j, names[i]);
    }
    assert_string_equal(fa3_strerror((fa3_status)N), "unknown status");
    assert_string_equal(fa3_strerror((fa3_status)-1), "unknown status");
    assert_string_equal(fa3_strerror((fa3_status)1000), "unknown status");
}

static void test_null_arguments(void **state)
{
    (void)state;
    fa3_config c = base(), out;
    assert_int_equal(fa3_config_canonicalize(NULL, &out), FA3_ERR_INVALID_ARGUMENT);
    assert_true(strlen(fa3_last_error_message()) > 0);
    assert_int_equal(fa3_config_canonicalize(&c, NULL), FA3_ERR_INVALID_ARGUMENT);
    char *ptx = NULL;
    assert_int_equal(fa3_emit_ptx(NULL, &ptx, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_null(ptx);
    assert_int_equal(fa3_emit_ptx(&c, NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(fa3_config_describe(NULL, (char[8]){0}, 8), FA3_ERR_INVALID_ARGUMENT);

    assert_int_equal(fa3_context_create(NULL, NULL), FA3_ERR_INVALID_ARGUMENT);
    fa3_context *ctx = NULL;
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.disable_disk_cache = 1;
    assert_int_equal(fa3_context_create(&ctx, &o), FA3_OK);
    assert_non_null(ctx);
    fa3_kernel *k = NULL;
    assert_int_equal(fa3_jit_get_kernel(NULL, &c, &k), FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(fa3_jit_get_kernel(ctx, NULL, &k), FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(fa3_jit_get_kernel(ctx, &c, NULL), FA3_ERR_INVALID_ARGUMENT);
    assert_null(k);
    /* a bad config is refused before anything is compiled, with the config's own code */
    fa3_config bad = c;
    bad.head_dim = 72;
    assert_int_equal(fa3_jit_get_kernel(ctx, &bad, &k), FA3_ERR_BAD_HEAD_DIM);
    assert_non_null(strstr(fa3_last_error_message(), "72"));
    assert_null(k);
    fa3_context_free(ctx);

    fa3_kernel_info info;
    assert_int_equal(fa3_kernel_get_info(NULL, &info), FA3_ERR_INVALID_ARGUMENT);
    const void *data;
    size_t size;
    assert_int_equal(fa3_kernel_get_cubin(NULL, &data, &size), FA3_ERR_INVALID_ARGUMENT);
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    assert_int_equal(fa3_fwd(NULL, &a, NULL), FA3_ERR_INVALID_ARGUMENT);
    float dummy;
    assert_int_equal(fa3_reference_fwd(NULL, &c, &a, &dummy, NULL, NULL),
                     FA3_ERR_INVALID_ARGUMENT);
    fa3_context_free(NULL);
    fa3_free(NULL);
}

static void test_context_options(void **state)
{
    (void)state;
    fa3_context_options o;
    memset(&o, 0x7F, sizeof o);
    fa3_context_options_init(&o);
    assert_null(o.cache_dir);
    assert_int_equal(o.disable_disk_cache, 0);
    assert_int_equal(o.backend, FA3_BACKEND_AUTO);
    o.backend = (fa3_backend)42;
    fa3_context *ctx = (fa3_context *)0x1;
    fa3_status st = fa3_context_create(&ctx, &o);
    assert_true(st == FA3_ERR_INVALID_ARGUMENT || st == FA3_ERR_BAD_BACKEND);
    assert_non_null(strstr(fa3_last_error_message(), "42"));

    assert_string_equal(fa3_backend_name(FA3_BACKEND_PTX_COMPILER), "ptx-compiler");
    assert_string_equal(fa3_backend_name(FA3_BACKEND_NVJITLINK), "nvjitlink");
    assert_string_equal(fa3_backend_name(FA3_BACKEND_DRIVER_JIT), "driver-jit");
    assert_string_equal(fa3_backend_name(FA3_BACKEND_AUTO), "auto");
}

static void test_emit_ptx(void **state)
{
    (void)state;
    static const int hds[] = {64, 128, 256};
    for (int h = 0; h < 3; h++)
        for (int m = 0; m < 2; m++) {
            fa3_config c = base();
            c.head_dim = hds[h];
            c.mask = (fa3_mask)m;
            c.dtype = (fa3_dtype)(h & 1);
            char *ptx = NULL;
            size_t len = 0;
            assert_int_equal(fa3_emit_ptx(&c, &ptx, &len), FA3_OK);
            assert_non_null(ptx);
            assert_int_equal(len, strlen(ptx));
            /* the PTX header: comment lines, then .version, .target sm_90a, .address_size 64,
               each before the kernel entry */
            assert_true(strncmp(ptx, "//", 2) == 0 || strncmp(ptx, ".version", 8) == 0);
            const char *ver = strstr(ptx, "\n.version ");
            if (!ver && strncmp(ptx, ".version ", 9) == 0)
                ver = ptx;
            const char *tgt = strstr(ptx, "\n.target sm_90a\n");
            const char *as = strstr(ptx, "\n.address_size 64\n");
            char entry[64];
            snprintf(entry, sizeof entry, ".entry %s(", FA3_KERNEL_NAME);
            const char *ent = strstr(ptx, entry);
            assert_non_null(ver);
            assert_non_null(tgt);
            assert_non_null(as);
            assert_non_null(ent);
            assert_true(ver < tgt && tgt < as && as < ent);
            /* exactly one kernel entry; the ABI's single parameter */
            assert_null(strstr(ent + 1, ".entry "));
            char param[64];
            /* the whole block: the planner's fast_div 2 passes the launch's divisors' magics
               (kernel_abi.h div[]), so every forward kernel declares FA3P_SIZE bytes */
            snprintf(param, sizeof param, "fa3_params[%d]", FA3P_SIZE);
            assert_non_null(strstr(ent, param));
            /* same config, same text */
            char *again = NULL;
            size_t len2 = 0;
            assert_int_equal(fa3_emit_ptx(&c, &again, &len2), FA3_OK);
            assert_int_equal(len, len2);
            assert_memory_equal(ptx, again, len);
            fa3_free(again);
            fa3_free(ptx);
        }
}

/* FA3JIT_PLAN_DEBUG (benchmark knobs): values out of range are ignored (a K/V ring of 0 or 1
   stages would overlap shared memory), in-range ones change the kernel, and three consumer
   warpgroups are not used where their registers would not hold the tile. */
static char *ptx_with(const char *knobs, int head_dim, int block_n)
{
    if (knobs)
        setenv("FA3JIT_PLAN_DEBUG", knobs, 1);
    else
        unsetenv("FA3JIT_PLAN_DEBUG");
    fa3_config c = base();
    c.head_dim = head_dim;
    c.block_n = block_n;
    char *ptx = NULL;
    size_t len = 0;
    assert_int_equal(fa3_emit_ptx(&c, &ptx, &len), FA3_OK);
    unsetenv("FA3JIT_PLAN_DEBUG");
    return ptx;
}

static void test_plan_debug_knobs(void **state)
{
    (void)state;
    char *def = ptx_with(NULL, 128, 0);
    static const char *const ignored[] = {"wg3=2", "wg3=10", "xwg3=0", "wg3=01x", "stages=3",
                                          "arrive_per_warp=0", "q_double=0"}; /* the last three retired */
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
        char *p = ptx_with(ignored[i], 128, 0);
        if (strcmp(p, def) != 0)
            fail_msg("FA3JIT_PLAN_DEBUG=%s changed the kernel (should be ignored)", ignored[i]);
        fa3_free(p);
    }
    char *v = ptx_with("dbg_no_o_store=1", 128, 0);
    assert_true(strcmp(v, def) != 0);
    fa3_free(v);
    fa3_free(def);
    /* head_dim 64: three consumers (512 threads) at block_n 128, two (384) at block_n 192 */
    char *w128 = ptx_with(NULL, 64, 128), *w192 = ptx_with(NULL, 64, 192);
    assert_non_null(strstr(w128, ".maxntid 512,"));
    assert_non_null(strstr(w192, ".maxntid 384,"));
    fa3_free(w128);
    fa3_free(w192);
}

/* A plan that FA3JIT_PLAN_DEBUG changed names the knobs in its PTX header (as set, cut to fit); the
   default plan's header does not, nor that of knobs that leave the plan as it is. */
static void test_debug_plan_marked(void **state)
{
    (void)state;
    static const char mark[] = "\n// DEBUG plan, not for production: FA3JIT_PLAN_DEBUG=";
    char *def = ptx_with(NULL, 128, 0);
    assert_null(strstr(def, "DEBUG"));
    char *same = ptx_with("wg3=1", 128, 0); /* the default value */
    assert_string_equal(same, def);
    char *v = ptx_with("dbg_no_softmax=1", 128, 0);
    char want[128];
    snprintf(want, sizeof want, "%sdbg_no_softmax=1\n", mark);
    assert_non_null(strstr(v, want));
    char knobs[400] = "dbg_no_o_store=1";
    while (strlen(knobs) < 300)
        strcat(knobs, ",dbg_no_o_store=1");
    char *cut = ptx_with(knobs, 128, 0);
    const char *at = strstr(cut, mark);
    assert_non_null(at);
    at += strlen(mark);
    size_t n = strcspn(at, "\n");
    assert_int_equal(n, 255);
    assert_memory_equal(at, knobs, 252);
    assert_memory_equal(at + 252, "...", 3);
    fa3_free(def);
    fa3_free(same);
    fa3_free(v);
    fa3_free(cut);
}

static void test_fwd_args_helpers(void **state)
{
    (void)state;
    fa3_fwd_args a;
    memset(&a, 0x33, sizeof a);
    fa3_fwd_args_init(&a);
    assert_null(a.q);
    assert_null(a.o);
    assert_null(a.lse);
    assert_int_equal(a.batch, 0);
    assert_int_equal(a.window_size_left, -1);
    assert_int_equal(a.window_size_right, -1);
    assert_true(a.softmax_scale == 0.0f);
    assert_true(a.softcap == 0.0f);

    a.batch = 3;
    a.seqlen_q = 5;
    a.seqlen_k = 7;
    a.num_heads = 8;
    a.num_heads_k = 2;
    fa3_fwd_args_set_contiguous(&a, 128, 64);
    /* (batch, seqlen, heads, head_dim) contiguous */
    assert_int_equal(a.q_head_stride, 128);
    assert_int_equal(a.q_row_stride, 8 * 128);
    assert_int_equal(a.q_batch_stride, 5 * 8 * 128);
    assert_int_equal(a.k_head_stride, 128);
    assert_int_equal(a.k_row_stride, 2 * 128);
    assert_int_equal(a.k_batch_stride, 7 * 2 * 128);
    assert_int_equal(a.v_head_stride, 64);
    assert_int_equal(a.v_row_stride, 2 * 64);
    assert_int_equal(a.v_batch_stride, 7 * 2 * 64);
    assert_int_equal(a.o_head_stride, 64);
    assert_int_equal(a.o_row_stride, 8 * 64);
    assert_int_equal(a.o_batch_stride, 5 * 8 * 64);
    /* a batch stride past int64_t (2^31 · 2^31 · 256) saturates instead of overflowing; the
       largest that fits is exact */
    a.seqlen_q = a.seqlen_k = a.num_heads = a.num_heads_k = INT32_MAX;
    fa3_fwd_args_set_contiguous(&a, 256, 256);
    assert_true(a.q_batch_stride == INT64_MAX && a.k_batch_stride == INT64_MAX &&
                a.v_batch_stride == INT64_MAX && a.o_batch_stride == INT64_MAX);
    assert_true(a.q_row_stride == (int64_t)INT32_MAX * 256);
    a.seqlen_q = 1 << 20;
    fa3_fwd_args_set_contiguous(&a, 256, 256);
    assert_true(a.q_batch_stride == ((int64_t)1 << 20) * INT32_MAX * 256);
}

static void test_fwd_flops(void **state)
{
    (void)state;
    fa3_config c = base();
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.batch = 2;
    a.seqlen_q = 1024;
    a.seqlen_k = 1024;
    a.num_heads = 16;
    a.num_heads_k = 16;
    double full = 4.0 * 2 * 16 * 1024 * 1024 * 128;
    double f = fa3_fwd_flops(&c, &a);
    assert_true(f == full);
    c.mask = FA3_MASK_CAUSAL;
    double fc = fa3_fwd_flops(&c, &a);
    /* "halved for causal when seqlen_q == seqlen_k": within the diagonal's share */
    assert_true(fc >= full / 2 && fc <= full / 2 * (1.0 + 2.0 / 1024));
}

/* Asserts that st is FA3_ERR_INVALID_ARGUMENT with a message containing each of the NULL-terminated
   words. */
static void expect_size_refused(fa3_status st, ...)
{
    const char *msg = fa3_last_error_message();
    printf("  %s\n", msg);
    assert_int_equal(st, FA3_ERR_INVALID_ARGUMENT);
    va_list ap;
    va_start(ap, st);
    expect_words(msg, ap);
    va_end(ap);
}

/* "Growing structs" (fa3jit.h): the init macros record the caller's size; a struct_size of 0
   (not initialised), larger than the library's (a newer fa3jit.h) or of no release is refused by
   every function that reads the struct, naming it; functions that fill a struct write the
   caller's size. */
static void test_struct_sizes(void **state)
{
    (void)state;
    fa3_config c = base();
    assert_int_equal(c.struct_size, sizeof c);
    fa3_config canon;
    memset(&canon, 0x5A, sizeof canon);
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    assert_int_equal(canon.struct_size, sizeof canon);

    fa3_config bad = c;
    bad.struct_size = 0;
    expect_size_refused(fa3_config_canonicalize(&bad, &canon), "fa3_config.struct_size", "0",
                        "fa3_config_init", NULL);
    char *ptx = NULL;
    expect_size_refused(fa3_emit_ptx(&bad, &ptx, NULL), "fa3_config.struct_size", NULL);
    assert_null(ptx);
    char desc[64];
    expect_size_refused(fa3_config_describe(&bad, desc, sizeof desc), "fa3_config", NULL);
    bad.struct_size = sizeof bad + 4;
    char larger[16];
    snprintf(larger, sizeof larger, "%zu", sizeof bad + 4);
    expect_size_refused(fa3_config_canonicalize(&bad, &canon), larger, "newer fa3jit.h", NULL);
    bad.struct_size = sizeof bad - 4;
    expect_size_refused(fa3_config_canonicalize(&bad, &canon), "not a size of fa3_config", NULL);

    /* init with a larger size (a newer header's struct): defaults, the rest zeroed, refused when
       used */
    unsigned char big[sizeof(fa3_config) + 16];
    memset(big, 0x77, sizeof big);
    fa3_config_init_sized((fa3_config *)(void *)big, sizeof big);
    fa3_config head;
    memcpy(&head, big, sizeof head);
    assert_int_equal(head.struct_size, sizeof big);
    assert_int_equal(head.head_dim, 128);
    for (size_t i = sizeof(fa3_config); i < sizeof big; i++)
        assert_int_equal(big[i], 0);
    expect_size_refused(fa3_config_canonicalize(&head, &canon), "newer fa3jit.h", NULL);

    /* fa3_supported_configs: the caller's stride and struct_size; the caller's last message
       left in place (its refused candidates are not the caller's errors) */
    {
        fa3_config bad;
        fa3_config_init(&bad);
        bad.head_dim = 100;
        assert_int_equal(fa3_config_canonicalize(&bad, &bad), FA3_ERR_BAD_HEAD_DIM);
        char before[256];
        snprintf(before, sizeof before, "%s", fa3_last_error_message());
        assert_true(fa3_supported_configs(NULL, 0) > 0);
        assert_string_equal(fa3_last_error_message(), before);
    }
    int n = fa3_supported_configs(NULL, 0);
    fa3_config *all = calloc((size_t)n, sizeof *all);
    assert_non_null(all);
    assert_int_equal(fa3_supported_configs(all, n), n);
    for (int i = 0; i < n; i++)
        assert_int_equal(all[i].struct_size, sizeof(fa3_config));
    memset(all, 0, (size_t)n * sizeof *all);
    assert_int_equal(fa3_supported_configs_sized(all, n, sizeof(fa3_config) + 4), -1);
    assert_int_equal(all[0].struct_size, 0); /* nothing written */
    assert_int_equal(fa3_supported_configs_sized(NULL, 0, 0), n); /* counting needs no size */
    free(all);

    /* fa3_fwd_args and fa3_context_options */
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    assert_int_equal(a.struct_size, sizeof a);
    a.batch = a.seqlen_q = a.seqlen_k = a.num_heads = a.num_heads_k = 1;
    assert_true(fa3_fwd_flops(&c, &a) > 0);
    a.struct_size = 0;
    assert_true(fa3_fwd_flops(&c, &a) == 0.0);
    fa3_context_options o;
    fa3_context_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    o.disable_disk_cache = 1;
    fa3_context *ctx = NULL;
    o.struct_size = 0;
    expect_size_refused(fa3_context_create(&ctx, &o), "fa3_context_options.struct_size",
                        "fa3_context_options_init", NULL);
    assert_null(ctx);
    o.struct_size = sizeof o;
    CHECK(fa3_context_create(&ctx, &o));

    /* a kernel: fa3_fwd reads args (refused before any GPU work), get_info fills the caller's */
    c.head_dim = 64;
    fa3_kernel *k = NULL;
    CHECK(fa3_jit_get_kernel(ctx, &c, &k));
    expect_size_refused(fa3_fwd(k, &a, NULL), "fa3_fwd_args.struct_size", "fa3_fwd_args_init",
                        NULL);
    fa3_kernel_info info;
    memset(&info, 0x5A, sizeof info);
    CHECK(fa3_kernel_get_info(k, &info));
    assert_int_equal(info.struct_size, sizeof info);
    assert_int_equal(info.config.struct_size, sizeof info.config);
    assert_int_equal(info.config.head_dim, 64);
    memset(&info, 0x5A, sizeof info);
    expect_size_refused(fa3_kernel_get_info_sized(k, &info, sizeof info + 8), "fa3_kernel_info",
                        "newer fa3jit.h", NULL);
    assert_int_equal(info.struct_size, 0x5A5A5A5Au); /* untouched */
    fa3_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad_head_dim),
        cmocka_unit_test(test_bad_head_dim_v),
        cmocka_unit_test(test_bad_dtype),
        cmocka_unit_test(test_bad_mask),
        cmocka_unit_test(test_bad_arch),
        cmocka_unit_test(test_bad_block),
        cmocka_unit_test(test_bad_softcap_flag),
        cmocka_unit_test(test_error_message_replaced),
        cmocka_unit_test(test_canonicalize),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_context_options),
        cmocka_unit_test(test_emit_ptx),
        cmocka_unit_test(test_plan_debug_knobs),
        cmocka_unit_test(test_debug_plan_marked),
        cmocka_unit_test(test_fwd_args_helpers),
        cmocka_unit_test(test_fwd_flops),
        cmocka_unit_test(test_struct_sizes),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
