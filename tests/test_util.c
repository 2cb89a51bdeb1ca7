/* Helpers shared by the cache-folder tests (test_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "fa3jit.h"
#include "check.h"
#include "test_util.h"

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    unsigned char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

fa3_context *make_ctx(const char *dir, fa3_backend b, int disable)
{
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.cache_dir = dir;
    o.backend = b;
    o.disable_disk_cache = disable;
    fa3_context *ctx = NULL;
    CHECK(fa3_context_create(&ctx, &o));
    assert_non_null(ctx);
    return ctx;
}

void expect_child_ok(int pid)
{
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

void arm(const char *sites)
{
    if (sites)
        setenv("FA3JIT_TEST_FAIL", sites, 1);
    else
        unsetenv("FA3JIT_TEST_FAIL");
}
