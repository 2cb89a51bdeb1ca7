/* Helpers for the GPU tests (see gpu_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
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
        fa3_status st = fa3_driver_get(&g_drv);
        if (st != FA3_OK) {
            snprintf(g_why, sizeof g_why, "%s: %s", fa3_strerror(st), fa3_last_error_message());
        } else {
            CUdevice dev;
            st = fa3_driver_ensure_context(NULL, &dev);
            if (st != FA3_OK) {
                snprintf(g_why, sizeof g_why, "%s: %s", fa3_strerror(st),
                         fa3_last_error_message());
            } else {
                int major = 0, minor = 0;
                char name[256] = "?";
                g_drv->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                            dev);
                g_drv->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                            dev);
                g_drv->cuDeviceGetName(name, (int)sizeof name, dev);
                if (major != 9)
                    snprintf(g_why, sizeof g_why,
                             "%s: device 0 (%s) is sm_%d%d; these kernels need sm_90 (Hopper)",
                             fa3_strerror(FA3_ERR_UNSUPPORTED), name, major, minor);
                else {
                    g_ok = 1;
                    snprintf(g_why, sizeof g_why, "device 0: %s (sm_%d%d), driver %d", name,
                             major, minor, g_drv->version);
                }
            }
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

static void cu_ok(CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *name = "?";
    if (g_drv)
        g_drv->cuGetErrorName(r, &name);
    fail_msg("%s failed: %s (%d)", call, name, (int)r);
}

CUdeviceptr gpu_alloc(size_t bytes)
{
    CUdeviceptr p = 0;
    size_t b = (bytes + 3) & ~(size_t)3; /* whole 32-bit words, so the D32 fills stay inside */
    if (b == 0)
        b = 4;
    cu_ok(g_drv->cuMemAlloc(&p, b), "cuMemAlloc");
    cu_ok(g_drv->cuMemsetD32(p, 0, b / 4), "cuMemsetD32");
    return p;
}

void gpu_free(CUdeviceptr p)
{
    if (p)
        g_drv->cuMemFree(p);
}

void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes)
{
    cu_ok(g_drv->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void gpu_download(void *dst, CUdeviceptr src, size_t bytes)
{
    cu_ok(g_drv->cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void gpu_sync(void)
{
    cu_ok(g_drv->cuCtxSynchronize(), "cuCtxSynchronize");
}

void gpu_fill_nan16(CUdeviceptr p, size_t n, fa3_dtype dtype)
{
    uint32_t h = nan16_bits(dtype);
    /* allocations are 4-byte multiples (gpu_alloc rounds up), so an odd count is covered */
    cu_ok(g_drv->cuMemsetD32(p, h | h << 16, (n + 1) / 2), "cuMemsetD32");
}

void gpu_fill_nan32(CUdeviceptr p, size_t n)
{
    cu_ok(g_drv->cuMemsetD32(p, GPU_NAN32_BITS, n), "cuMemsetD32");
}

/* ---------------------------------------------------------------- host side */

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

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_init(test_rng *r, uint64_t seed)
{
    r->s = seed;
    r->have_spare = 0;
    r->spare = 0;
}

double rng_uniform(test_rng *r)
{
    /* 53 random bits, shifted off 0 so log() is finite */
    return ((double)(splitmix64(&r->s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double rng_normal(test_rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    r->spare = rad * sin(th);
    r->have_spare = 1;
    return rad * cos(th);
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb; /* round to nearest, ties to even (overflow rounds to inf) */
    return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_fp16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7E00u; /* NaN */
    if (a >= 0x477FF000u)      /* ≥ 65520 rounds to inf */
        return sign | 0x7C00u;
    if (a < 0x38800000u) {   /* below 2^-14: subnormal half (or zero) */
        if (a < 0x33000000u) /* < 2^-25: rounds to ±0 (2^-25 itself is a tie to 0) */
            return sign;
        uint32_t e = a >> 23;                      /* biased float exponent, 102..112 */
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u;  /* 24-bit significand */
        uint32_t shift = 126 - e;                  /* value = m · 2^(e-150); half ulp 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias exponent 127 → 15, keep 10 mantissa bits, round to nearest even */
    uint32_t r = a - 0x38000000u; /* (e-112) << 23 | mantissa */
    uint32_t q = r >> 13, rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1)))
        q++;
    return sign | (uint16_t)q; /* a carry into the exponent is the right result */
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return bits_f32(sign | 0x7F800000u | m << 13);
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | (e + 112) << 23 | m << 13);
}

uint16_t f32_to_dtype(fa3_dtype dt, float x)
{
    return dt == FA3_DTYPE_FP16 ? f32_to_fp16(x) : f32_to_bf16(x);
}

float dtype_to_f32(fa3_dtype dt, uint16_t h)
{
    return dt == FA3_DTYPE_FP16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

void fill_normal(test_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_dtype(dt, (float)(rng_normal(r) * scale));
}

void fill_uniform(test_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    const double w = 2.0 * sqrt(3.0) * scale;
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_dtype(dt, (float)((rng_uniform(r) - 0.5) * w));
}

uint16_t nan16_bits(fa3_dtype dt)
{
    return dt == FA3_DTYPE_FP16 ? 0x7E00u : 0x7FC0u;
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
