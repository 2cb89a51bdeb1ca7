/*
 * Helpers for the GPU tests: a device probe that says why it cannot run, device memory that ends
 * the current cmocka test (fail_msg, naming the call) when the driver fails, the run's seed and
 * the tests' shared main. The random inputs, dtype conversions and NaN patterns are the host
 * helpers fa3-gen uses too (tools/common/numerics.h), and so is the device layer under these
 * (tools/common/device.h); the accuracy rule is tools/common/tolerance.h.
 */
#ifndef FA3JIT_TESTS_GPU_UTIL_H
#define FA3JIT_TESTS_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "fa3jit.h"
#include "runtime/tools_api.h"
#include "tools/common/device.h"
#include "tools/common/numerics.h"
#include "tools/common/tolerance.h"

/* 1 if a CUDA driver and an sm_90 device (compute capability 9.x) are usable; else 0 with the
   reason (the library's message) in why. Probes once per process. */
int gpu_available(char *why, size_t why_size);
const fa3_driver *gpu_driver(void);

CUdeviceptr gpu_alloc(size_t bytes); /* zero-filled, rounded up to 4 bytes; fails the test on error */
void gpu_free(CUdeviceptr p);        /* 0 ignored */
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes);
void gpu_download(void *dst, CUdeviceptr src, size_t bytes);
void gpu_sync(void);
/* Fills with quiet NaNs (nan16_bits(dtype), NAN32_BITS): n elements of 2 bytes (dtype bf16/fp16)
   or 4 bytes (fp32). */
void gpu_fill_nan16(CUdeviceptr p, size_t n, fa3_dtype dtype);
void gpu_fill_nan32(CUdeviceptr p, size_t n);

/* Seed: $FA3JIT_TEST_SEED if set, else fresh (time, pid, address entropy). */
uint64_t test_seed(void);

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
