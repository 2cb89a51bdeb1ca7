/*
 * Helpers shared by the CPU tests that work on cache folders (test_cache, test_faults,
 * test_concurrency): public API, libc and cmocka only, so that tests linking the shared library
 * can use them too. Include after <cmocka.h> and "fa3jit.h".
 */
#ifndef FA3JIT_TESTS_TEST_UTIL_H
#define FA3JIT_TESTS_TEST_UTIL_H

#include <stddef.h>

/* Removes path and everything below it (no error if it is missing). */
void rm_rf(const char *path);

/* The whole file at path, malloc'd (one spare byte); *size its length. Fails the test if it
   cannot be read. */
unsigned char *slurp(const char *path, size_t *size);

/* A context on dir (NULL = the default folder) with backend b; disable: memory only. Fails the
   test unless fa3_context_create succeeds. */
fa3_context *make_ctx(const char *dir, fa3_backend b, int disable);

/* Arms the library's fault sites (FA3JIT_TEST_FAIL=sites, comma-separated); NULL disarms. */
void arm(const char *sites);

/* Waits for the child pid and fails the test unless it exited with status 0. */
void expect_child_ok(int pid);

#endif
