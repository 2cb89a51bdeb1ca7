/*
 * Helpers for the GPU tests: a device probe that says why it cannot run, device memory through
 * the library's dlopen'd driver table, a seeded normal random source (Box–Muller), bf16/fp16
 * conversion with round-to-nearest-even, NaN fills and error measures.
 * Failing driver calls end the current cmocka test (fail_msg) naming the call.
 */
#ifndef FA3JIT_TESTS_GPU_UTIL_H
#define FA3JIT_TESTS_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fa3jit.h"
#include "runtime/tools_api.h"

/* 1 if a CUDA driver and an sm_90 device (compute capability 9.x) are usable; else 0 with the
   reason (the library's message) in why. Probes once per process. */
int gpu_available(char *why, size_t why_size);
const fa3_driver *gpu_driver(void);

CUdeviceptr gpu_alloc(size_t bytes); /* zero-filled, rounded up to 4 bytes; fails the test on error */
void gpu_free(CUdeviceptr p);        /* 0 ignored */
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes);
void gpu_download(void *dst, CUdeviceptr src, size_t bytes);
void gpu_sync(void);
/* Fills with quiet NaNs: n elements of 2 bytes (dtype bf16/fp16) or 4 bytes (fp32). */
void gpu_fill_nan16(CUdeviceptr p, size_t n, fa3_dtype dtype);
/* The quiet-NaN bit pattern gpu_fill_nan32 writes. */
#define GPU_NAN32_BITS 0x7FC00000u
void gpu_fill_nan32(CUdeviceptr p, size_t n);

/* ---- host side (no GPU needed) */
typedef struct test_rng {
    uint64_t s;
    int have_spare;
    double spare;
} test_rng;

/* Seed: $FA3JIT_TEST_SEED if set, else fresh (time, pid, address entropy). */
uint64_t test_seed(void);
void rng_init(test_rng *r, uint64_t seed);
double rng_uniform(test_rng *r); /* (0, 1) */
double rng_normal(test_rng *r);  /* N(0, 1), Box–Muller */

uint16_t f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
uint16_t f32_to_fp16(float x); /* round to nearest even, overflow → inf, subnormals */
float bf16_to_f32(uint16_t h);
float fp16_to_f32(uint16_t h);
uint16_t f32_to_dtype(fa3_dtype dt, float x);
float dtype_to_f32(fa3_dtype dt, uint16_t h);

/* Fills n values with N(0,1)·scale rounded to dtype. */
void fill_normal(test_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale);
/* Fills n values uniform in (-sqrt(3), sqrt(3))·scale (mean 0, variance scale²) rounded to dtype:
   several times faster than fill_normal, for tensors of tens of millions of elements. */
void fill_uniform(test_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale);
/* The quiet-NaN bit pattern gpu_fill_nan16 writes for dtype (0x7FC0 bf16, 0x7E00 fp16). */
uint16_t nan16_bits(fa3_dtype dt);

/* Prints whether a GPU is usable (and why not), then creates the tests' context: disk cache off,
   so every kernel is compiled by today's generator. NULL (message printed) on failure. */
fa3_context *gpu_test_context(void);

/* The GPU test programs' main (include <cmocka.h> before this header to use it): the run's seed
   (test_seed, printed) into *seed and the tests' context into *ctx before the tests, freed after;
   FA3JIT_TEST_FILTER (a cmocka test-name pattern) picks tests. Returns cmocka's failure count, or
   77 (meson's SKIP) when nothing failed and *skipped (the tests' REQUIRE_GPU count) reached
   gpu_tests. */
#ifdef cmocka_unit_test
int gpu_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int gpu_tests,
                  fa3_context **ctx, uint64_t *seed, const int *skipped);
#endif

#endif
