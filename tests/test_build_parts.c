/*
 * test_build_parts: how a kernel's parts are built (build.c).
 *   carry:   fa3_takeerr / fa3_puterr move a thread's message to another thread intact.
 * The static library: the error carry is internal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fa3jit.h"
#include "fa3jit_build_config.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"
#include "check.h"
#include "test_util.h"

static char g_root[256];

static void *set_long_message(void *arg)
{
    /* longer than the 256-byte first buffer and the 512-byte fallback */
    fa3_seterr(FA3_ERR_COMPILE, "from the helper: %0600d", 7);
    fa3_appenderr(" -- appended");
    *(char **)arg = fa3_takeerr();
    return NULL;
}

static void test_carry_message(void **state)
{
    (void)state;
    char *m = NULL;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_long_message, &m), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_non_null(m);
    assert_int_equal(strlen(m), strlen("from the helper: ") + 600 + strlen(" -- appended"));
    fa3_seterr(FA3_ERR_INTERNAL, "this thread's own message");
    char *copy = strdup(m);
    assert_non_null(copy);
    assert_int_equal(fa3_puterr(FA3_ERR_COMPILE, m), FA3_ERR_COMPILE); /* takes m over */
    assert_string_equal(fa3_last_error_message(), copy);
    free(copy);
    /* taking leaves the thread's message empty; with none, "" */
    char *t = fa3_takeerr();
    assert_non_null(t);
    assert_int_equal(strncmp(t, "from the helper: 000", 20), 0);
    assert_string_equal(fa3_last_error_message(), "");
    free(t);
    t = fa3_takeerr();
    assert_string_equal(t, "");
    free(t);
    /* fa3_seterr after a take starts a fresh buffer */
    fa3_seterr(FA3_ERR_INTERNAL, "again %d", 2);
    assert_string_equal(fa3_last_error_message(), "again 2");
    fa3_clearerr();
}

static int disarm(void **state)
{
    (void)state;
    unsetenv("FA3JIT_TEST_FAIL");
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("FA3JIT_TEST_FAIL");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-build-parts-XXXXXX");
    return mkdtemp(g_root) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rm_rf(g_root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_carry_message, disarm),
    };
    return cmocka_run_group_tests_name("build_parts", tests, group_setup, group_teardown);
}
