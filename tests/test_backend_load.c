/*
 * test_backend_load: libnvJitLink is opened only when the nvjitlink backend is used (compile.c
 * dlopens it), so a process on the default backend never maps it. Read from /proc/self/maps, in
 * this order (the library, once loaded, stays for the life of the process):
 *   default_backend:  nothing maps it at start (so no DT_NEEDED pulls it in), nor after a cold
 *                     compile, a store and a reload on the default backend, nor a driver-jit
 *                     context;
 *   load_failure:     in a child process, with the load made to fail (FA3JIT_TEST_FAIL=
 *                     dlopen-nvJitLink): fa3_context_create on nvjitlink fails with FA3_ERR_LINK,
 *                     the message naming the library, each file tried and dlopen's reason, the
 *                     same again on a second try, while the default backend still compiles;
 *   nvjitlink:        asked for, the backend loads it and compiles a kernel (an ELF cubin, the
 *                     backend recorded in the kernel's info).
 * Public API only (the shared library, as a user links it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa3jit.h"
#include "fa3jit_build_config.h"
#include "check.h"
#include "test_util.h"

static char g_root[256];

/* 1 if a mapping of this process names libnvJitLink. */
static int jitlink_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "libnvJitLink"))
            found = 1;
    fclose(f);
    return found;
}

/* A causal hd64 kernel from ctx: how it was obtained; its backend in *backend. */
static fa3_kernel_source get_hd64(fa3_context *ctx, fa3_backend *backend)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 64;
    c.mask = FA3_MASK_CAUSAL;
    fa3_kernel *k = NULL;
    CHECK(fa3_jit_get_kernel(ctx, &c, &k));
    fa3_kernel_info in;
    CHECK(fa3_kernel_get_info(k, &in));
    const void *cubin = NULL;
    size_t n = 0;
    CHECK(fa3_kernel_get_cubin(k, &cubin, &n));
    assert_true(n > 64);
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    *backend = in.backend;
    return in.source;
}

static void test_default_backend(void **state)
{
    (void)state;
    assert_false(jitlink_mapped()); /* not a DT_NEEDED of libfa3jit.so */
    fa3_context *ctx = make_ctx(NULL, FA3_BACKEND_DRIVER_JIT, 1);
    fa3_context_free(ctx);
    assert_false(jitlink_mapped());
}

/* The default backend compiles, stores and reloads without mapping libnvJitLink (listed only
   where the PTX Compiler API is built in: else the default backend is nvjitlink). */
static void test_default_compiles(void **state)
{
    (void)state;
    fa3_context *ctx;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/default", g_root);
    fa3_backend b = FA3_BACKEND_AUTO;
    ctx = make_ctx(dir, FA3_BACKEND_AUTO, 0);
    assert_int_equal(fa3_context_backend(ctx), FA3_BACKEND_PTX_COMPILER);
    assert_int_equal(get_hd64(ctx, &b), FA3_SOURCE_COMPILED);
    assert_int_equal(b, FA3_BACKEND_PTX_COMPILER);
    fa3_context_free(ctx);
    ctx = make_ctx(dir, FA3_BACKEND_PTX_COMPILER, 0);
    assert_int_equal(get_hd64(ctx, &b), FA3_SOURCE_DISK);
    fa3_context_free(ctx);
    assert_false(jitlink_mapped());
}

static void test_load_failure(void **state)
{
    (void)state;
    if (jitlink_mapped())
        fail_msg("libnvJitLink is mapped already: this test must run before one that loads it");
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The library is opened once per process: arm the fault before the first use. */
        setenv("FA3JIT_TEST_FAIL", "dlopen-nvJitLink", 1);
        int ok = 1;
        for (int i = 0; i < 2; i++) {
            fa3_context_options o;
            fa3_context_options_init(&o);
            o.backend = FA3_BACKEND_NVJITLINK;
            o.disable_disk_cache = 1;
            fa3_context *ctx = NULL;
            fa3_status st = fa3_context_create(&ctx, &o);
            const char *msg = fa3_last_error_message();
            printf("  try %d: %s: %s\n", i + 1, fa3_strerror(st), msg);
            ok = ok && st == FA3_ERR_LINK && ctx == NULL && strstr(msg, "nvJitLink") &&
                 strstr(msg, "dlopen(\"libnvJitLink.so.13\"): injected failure") &&
                 strstr(msg, "dlopen(\"" FA3_CUDA_DIR "/lib64/libnvJitLink.so.13\")") &&
                 strstr(msg, "LD_LIBRARY_PATH");
        }
        ok = ok && !jitlink_mapped();
        if (FA3_HAVE_PTX_COMPILER) {
            unsetenv("FA3JIT_TEST_FAIL");
            fa3_context_options o;
            fa3_context_options_init(&o);
            o.disable_disk_cache = 1;
            fa3_context *ctx = NULL;
            fa3_config c;
            fa3_config_init(&c);
            c.head_dim = 64;
            fa3_kernel *k = NULL;
            ok = ok && fa3_context_create(&ctx, &o) == FA3_OK &&
                 fa3_jit_get_kernel(ctx, &c, &k) == FA3_OK;
            printf("  the default backend without nvJitLink: %s\n", ok ? "compiles" : "failed");
            fa3_context_free(ctx);
        }
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    expect_child_ok(pid);
}

static void test_nvjitlink(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/nvjitlink", g_root);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_true(jitlink_mapped()); /* opened by fa3_context_create */
    fa3_backend b = FA3_BACKEND_AUTO;
    assert_int_equal(get_hd64(ctx, &b), FA3_SOURCE_COMPILED);
    assert_int_equal(b, FA3_BACKEND_NVJITLINK);
    fa3_context_free(ctx);
    ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_hd64(ctx, &b), FA3_SOURCE_DISK);
    assert_int_equal(b, FA3_BACKEND_NVJITLINK);
    fa3_context_free(ctx);
}

int main(void)
{
    unsetenv("FA3JIT_TEST_FAIL");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-backend-load-%d", (int)getpid());
    rm_rf(g_root);
    /* In this order: the last one loads the library for good. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_backend),
#if FA3_HAVE_PTX_COMPILER
        cmocka_unit_test(test_default_compiles),
#endif
        cmocka_unit_test(test_load_failure),
        cmocka_unit_test(test_nvjitlink),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rm_rf(g_root);
    return rc;
}
