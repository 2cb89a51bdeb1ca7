/* Helpers for the GPU tests (see gpu_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_util.h"

static int g_probed, g_ok;
static char g_why[1024];
static const fa3_driver *g_drv;

int gpu_available(char *why, size_t why_size)
{
    if (!g_probed) {
        g_probed = 1;
        dev_info d;
        fa3_status st = dev_open(&d);
        g_drv = d.drv;
        if (st != FA3_OK)
            snprintf(g_why, sizeof g_why, "%s: %s", fa3_strerror(st), fa3_last_error_message());
        else if (d.major != 9)
            snprintf(g_why, sizeof g_why,
                     "%s: device 0 (%s) is sm_%d%d; these kernels need sm_90 (Hopper)",
                     fa3_strerror(FA3_ERR_UNSUPPORTED), d.name, d.major, d.minor);
        else {
            g_ok = 1;
            snprintf(g_why, sizeof g_why, "device 0: %s (sm_%d%d), driver %d", d.name, d.major,
                     d.minor, g_drv->version);
        }
    }
    if (why && why_size)
        snprintf(why, why_size, "%s", g_why);
    return g_ok;
}

const fa3_driver *gpu_driver(void)
{
    return g_drv;
}

/* Ends the current test when a driver call failed, with the library's message naming it. */
static void dev_ok(fa3_status st)
{
    if (st != FA3_OK)
        fail_msg("%s", fa3_last_error_message());
}

CUdeviceptr gpu_alloc(size_t bytes)
{
    dev_buf b;
    dev_ok(dev_alloc(g_drv, &b, bytes));
    dev_ok(dev_fill32(g_drv, b.p, b.bytes / 4, 0));
    return b.p;
}

void gpu_free(CUdeviceptr p)
{
    dev_buf b = {.p = p};
    dev_free(g_drv, &b);
}

void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes)
{
    dev_ok(FA3_CU(g_drv, cuMemcpyHtoD(dst, src, bytes)));
}

void gpu_download(void *dst, CUdeviceptr src, size_t bytes)
{
    dev_ok(FA3_CU(g_drv, cuMemcpyDtoH(dst, src, bytes)));
}

void gpu_sync(void)
{
    dev_ok(FA3_CU(g_drv, cuCtxSynchronize()));
}

void gpu_fill_nan16(CUdeviceptr p, size_t n, fa3_dtype dtype)
{
    /* allocations are 4-byte multiples (gpu_alloc rounds up), so an odd count is covered */
    dev_ok(dev_fill16(g_drv, p, n, nan16_bits(dtype)));
}

void gpu_fill_nan32(CUdeviceptr p, size_t n)
{
    dev_ok(dev_fill32(g_drv, p, n, NAN32_BITS));
}

/* ---------------------------------------------------------------- the run */

uint64_t test_seed(void)
{
    const char *e = getenv("FA3JIT_TEST_SEED");
    if (e && *e)
        return strtoull(e, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                 (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&ts;
    return s & 0xFFFFFFFFFFFFull; /* short enough to type back in */
}

fa3_context *gpu_test_context(void)
{
    char why[1024];
    if (gpu_available(why, sizeof why))
        printf("GPU: %s\n", why);
    else
        printf("no GPU: %s\n", why);
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.disable_disk_cache = 1; /* compile fresh: the tests exercise today's generator */
    fa3_context *ctx = NULL;
    if (fa3_context_create(&ctx, &o) != FA3_OK) {
        printf("fa3_context_create: %s\n", fa3_last_error_message());
        return NULL;
    }
    return ctx;
}

static fa3_context **main_ctx;
static uint64_t *main_seed;

static int main_setup(void **state)
{
    (void)state;
    *main_seed = test_seed();
    printf("seed = %llu (repeat with FA3JIT_TEST_SEED=%llu)\n", (unsigned long long)*main_seed,
           (unsigned long long)*main_seed);
    *main_ctx = gpu_test_context();
    return *main_ctx ? 0 : -1;
}

static int main_teardown(void **state)
{
    (void)state;
    fa3_context_free(*main_ctx);
    *main_ctx = NULL;
    return 0;
}

int gpu_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int gpu_tests,
                  fa3_context **ctx, uint64_t *seed, const int *skipped)
{
    main_ctx = ctx;
    main_seed = seed;
    const char *filter = getenv("FA3JIT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    int failed = _cmocka_run_group_tests(name, tests, n, main_setup, main_teardown);
    if (failed == 0 && gpu_tests > 0 && *skipped == gpu_tests) {
        printf("all %d GPU tests skipped (no usable GPU)\n", gpu_tests);
        return 77; /* meson: SKIP */
    }
    return failed;
}
