/*
 * test_env: the environment variables the library reads (rules in src/runtime/env.h), through
 * fa3_context_create and fa3_context_warning, and the plan for FA3JIT_PLAN_DEBUG. No GPU, no
 * compile, no disk writes (every context here only names its folder). For each variable:
 *   - accepted values take effect and leave no warning;
 *   - each refused value leaves the documented default in force and a warning that names the
 *     variable and the value (FA3JIT_CACHE_LOCK_TIMEOUT: abc, -5, 1e9, 0.5, 86401, " 30", 30s,
 *     0x10; FA3JIT_CACHE_DISABLE, FA3JIT_CACHE_FSYNC, FA3JIT_DEBUG_VARLEN: yes, true, 2, " 1";
 *     relative FA3JIT_CACHE_DIR, XDG_CACHE_HOME,
 *     HOME: ignored, the next folder in the chain used);
 *   - FA3JIT_PLAN_DEBUG: exact names (xwg3=1 does not hide wg3=0), values in range, each
 *     refused item named while the rest still applies;
 *   - several bad variables: every one named in the one warning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3jit.h"
#include "codegen/codegen.h"
#include "runtime/runtime.h"
#include "check.h"
#include "test_util.h"

static const char *const g_vars[] = {"FA3JIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
                                     "FA3JIT_CACHE_DISABLE", "FA3JIT_CACHE_LOCK_TIMEOUT",
                                     "FA3JIT_PLAN_DEBUG", "FA3JIT_DEBUG_VARLEN",
                                     "FA3JIT_CACHE_FSYNC"};

static int clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof g_vars / sizeof g_vars[0]; i++)
        unsetenv(g_vars[i]);
    setenv("HOME", "/tmp/fa3jit-test-env-home", 1); /* named, never created */
    return 0;
}

/* A context made with the default folder under $name=value (NULL: unset). */
static fa3_context *ctx_with(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    fa3_context *c = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    unsetenv(name);
    return c;
}

/* The warning names every string given (NULL-terminated), or is "" when none is given. */
static void warning_names(const fa3_context *c, const char *what, ...)
{
    const char *w = fa3_context_warning(c);
    va_list ap;
    va_start(ap, what);
    int any = 0;
    for (const char *s = what; s; s = va_arg(ap, const char *)) {
        any = 1;
        if (!strstr(w, s))
            fail_msg("warning \"%s\" does not name \"%s\"", w, s);
    }
    va_end(ap);
    if (!any && w[0])
        fail_msg("unexpected warning \"%s\"", w);
}

static void test_lock_timeout(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        int ms;
    } good[] = {{NULL, 300000}, {"", 300000}, {"0", 0}, {"45", 45000}, {"86400", 86400000}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fa3_context *c = ctx_with("FA3JIT_CACHE_LOCK_TIMEOUT", good[i].value);
        assert_int_equal(c->lock_timeout_ms, good[i].ms);
        warning_names(c, NULL);
        fa3_context_free(c);
    }
    static const char *const bad[] = {"abc", "-5", "1e9", "0.5", "86401", " 30", "30s", "0x10",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa3_context *c = ctx_with("FA3JIT_CACHE_LOCK_TIMEOUT", bad[i]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        assert_int_equal(c->lock_timeout_ms, 300000); /* the default */
        warning_names(c, "FA3JIT_CACHE_LOCK_TIMEOUT", quoted, "300", NULL);
        fa3_context_free(c);
    }
}

static void test_cache_disable(void **state)
{
    (void)state;
    fa3_context *c = ctx_with("FA3JIT_CACHE_DISABLE", "1");
    assert_null(fa3_context_cache_dir(c));
    warning_names(c, NULL);
    fa3_context_free(c);
    c = ctx_with("FA3JIT_CACHE_DISABLE", "0");
    assert_non_null(fa3_context_cache_dir(c));
    warning_names(c, NULL);
    fa3_context_free(c);
    static const char *const bad[] = {"yes", "true", "2", " 1", "1 ", "01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = ctx_with("FA3JIT_CACHE_DISABLE", bad[i]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        assert_non_null(fa3_context_cache_dir(c)); /* the default: disk cache on */
        warning_names(c, "FA3JIT_CACHE_DISABLE", quoted, NULL);
        fa3_context_free(c);
    }
}

/* A 0/1 flag variable: unset, "", "0" and "1" taken (the context's int at offset off), other
   values ignored with a warning naming the variable, the value quoted and the words what1 and
   what2 (NULL: none), the flag left at 0 */
static void check_flag(const char *var, size_t off, const char *what1, const char *what2)
{
    static const struct {
        const char *value;
        int on;
    } good[] = {{NULL, 0}, {"", 0}, {"0", 0}, {"1", 1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fa3_context *c = ctx_with(var, good[i].value);
        assert_int_equal(*(const int *)(const void *)((const char *)c + off), good[i].on);
        warning_names(c, NULL);
        fa3_context_free(c);
    }
    static const char *const bad[] = {"yes", "true", "on", "2", " 1", "1 ", "01", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fa3_context *c = ctx_with(var, bad[i]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        assert_int_equal(*(const int *)(const void *)((const char *)c + off), 0); /* default */
        warning_names(c, var, quoted, what1, what2, NULL);
        fa3_context_free(c);
    }
}

static void test_cache_fsync(void **state)
{
    (void)state;
    check_flag("FA3JIT_CACHE_FSYNC", offsetof(fa3_context, cache_fsync), "not 0 or 1",
               "not fsync'd");
}

static void test_debug_varlen(void **state)
{
    (void)state;
    check_flag("FA3JIT_DEBUG_VARLEN", offsetof(fa3_context, debug_varlen), NULL, NULL);
}

static void test_relative_folders(void **state)
{
    (void)state;
    /* FA3JIT_CACHE_DIR relative: ignored, then $XDG_CACHE_HOME/fa3jit */
    setenv("XDG_CACHE_HOME", "/tmp/fa3jit-test-env-xdg", 1);
    fa3_context *c = ctx_with("FA3JIT_CACHE_DIR", "relative/cache");
    assert_string_equal(fa3_context_cache_dir(c), "/tmp/fa3jit-test-env-xdg/fa3jit");
    warning_names(c, "FA3JIT_CACHE_DIR", "'relative/cache'", "absolute", NULL);
    fa3_context_free(c);
    c = ctx_with("FA3JIT_CACHE_DIR", "/tmp/fa3jit-test-env-abs");
    assert_string_equal(fa3_context_cache_dir(c), "/tmp/fa3jit-test-env-abs");
    warning_names(c, NULL);
    fa3_context_free(c);
    /* XDG_CACHE_HOME relative: ignored (the XDG rule), then $HOME/.cache/fa3jit, with a warning */
    c = ctx_with("XDG_CACHE_HOME", "xdg");
    assert_string_equal(fa3_context_cache_dir(c), "/tmp/fa3jit-test-env-home/.cache/fa3jit");
    warning_names(c, "XDG_CACHE_HOME", "'xdg'", NULL);
    fa3_context_free(c);
    /* HOME relative: no folder at all */
    c = ctx_with("HOME", "home");
    assert_null(fa3_context_cache_dir(c));
    warning_names(c, "HOME", "'home'", "disk cache off", NULL);
    fa3_context_free(c);
    /* the cache_dir option is the caller's own path: a relative one is used as given */
    c = make_ctx("relative-option", FA3_BACKEND_NVJITLINK, 0);
    assert_string_equal(fa3_context_cache_dir(c), "relative-option");
    warning_names(c, NULL);
    fa3_context_free(c);
}

/* The plan of the default config under FA3JIT_PLAN_DEBUG=knobs. */
static fa3_plan plan_with(const char *knobs)
{
    fa3_config cfg, canon;
    fa3_config_init(&cfg);
    CHECK(fa3_config_canonicalize(&cfg, &canon));
    setenv("FA3JIT_PLAN_DEBUG", knobs, 1);
    fa3_plan p;
    fa3_status st = fa3_plan_make(&canon, &p);
    unsetenv("FA3JIT_PLAN_DEBUG");
    assert_int_equal(st, FA3_OK);
    return p;
}

static void test_plan_debug(void **state)
{
    (void)state;
    fa3_plan def = plan_with("");
    assert_int_equal(def.wg3, 1);
    assert_int_equal(def.dbg_no_softmax, 0);
    assert_int_equal(def.dbg_no_o_store, 0);
    /* names match exactly: a longer name that ends in one does not hide it */
    fa3_plan p = plan_with("xwg3=1,wg3=0");
    assert_int_equal(p.wg3, 0);
    p = plan_with("wg3=0,dbg_no_o_store=1,dbg_no_softmax=1");
    assert_int_equal(p.wg3, 0);
    assert_int_equal(p.dbg_no_o_store, 1);
    assert_int_equal(p.dbg_no_softmax, 1);
    p = plan_with("dbg_no_softmax=9,wg3=0"); /* the bad item is skipped, the rest applies */
    assert_int_equal(p.dbg_no_softmax, 0);
    assert_int_equal(p.wg3, 0);
    p = plan_with("wg3=1,wg3=0"); /* the later one wins */
    assert_int_equal(p.wg3, 0);

    fa3_context *c = ctx_with("FA3JIT_PLAN_DEBUG", "wg3=0,dbg_no_softmax=1");
    warning_names(c, NULL);
    fa3_context_free(c);
    static const struct {
        const char *knobs, *named;
    } bad[] = {
        {"xwg3=1,wg3=0", "'xwg3=1' (unknown knob)"},
        {"dbg_no_softmax=9", "'dbg_no_softmax=9' (dbg_no_softmax takes 0..1)"},
        {"wg3=2", "'wg3=2' (wg3 takes 0..1)"},
        {"wg3=-1", "'wg3=-1'"},
        {"wg3= 0", "'wg3= 0'"},
        {"wg3=", "'wg3='"},
        {"wg3", "'wg3' (not name=value)"},
        {"wg3=0,,dbg_no_softmax=1", "'' (an empty item)"},
        {"Wg3=0", "'Wg3=0' (unknown knob)"},
        {"arrive_per_warp=0", "'arrive_per_warp=0' (unknown knob)"}, /* retired: settled by A/B */
        {"stages=3", "'stages=3' (unknown knob)"},     /* a config field (fa3_config.stages) */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = ctx_with("FA3JIT_PLAN_DEBUG", bad[i].knobs);
        char quoted[96];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i].knobs);
        warning_names(c, "FA3JIT_PLAN_DEBUG", quoted, bad[i].named, NULL);
        fa3_context_free(c);
    }
    /* both refused items named; the known names listed for an unknown one */
    c = ctx_with("FA3JIT_PLAN_DEBUG", "wg4=0,dbg_no_o_store=2,wg3=0");
    warning_names(c, "'wg4=0' (unknown knob)", "'dbg_no_o_store=2'", "dbg_no_softmax", NULL);
    assert_null(strstr(fa3_context_warning(c), "'wg3=0' ("));
    fa3_context_free(c);
}

static void test_several(void **state)
{
    (void)state;
    setenv("FA3JIT_CACHE_LOCK_TIMEOUT", "soon", 1);
    setenv("FA3JIT_CACHE_DISABLE", "maybe", 1);
    setenv("FA3JIT_PLAN_DEBUG", "nope=1", 1);
    setenv("FA3JIT_CACHE_FSYNC", "always", 1);
    fa3_context *c = ctx_with("FA3JIT_CACHE_DIR", "cache");
    warning_names(c, "FA3JIT_CACHE_LOCK_TIMEOUT='soon'", "FA3JIT_CACHE_DISABLE='maybe'",
                  "FA3JIT_CACHE_FSYNC='always'", "FA3JIT_PLAN_DEBUG='nope=1'",
                  "FA3JIT_CACHE_DIR='cache'", NULL);
    printf("  warning: %s\n", fa3_context_warning(c));
    fa3_context_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_lock_timeout, clean_env),
        cmocka_unit_test_setup(test_cache_disable, clean_env),
        cmocka_unit_test_setup(test_cache_fsync, clean_env),
        cmocka_unit_test_setup(test_debug_varlen, clean_env),
        cmocka_unit_test_setup(test_relative_folders, clean_env),
        cmocka_unit_test_setup(test_plan_debug, clean_env),
        cmocka_unit_test_setup(test_several, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
