/*
 * test_build_parts: a split config's cold build compiles its two kernels at once (the combine on a
 * helper thread of build.c) and ends as the serial build does. FA3JIT_TEST_FAIL=pthread_create
 * (no helper can be started) compiles them one after the other, as every build did before:
 *   same:    per part the same key, cubin bytes, log and resources, and the same cache entries
 *            (read back with fa3_cache_load: all but the creation time), both compile backends;
 *   warm:    a context on the warmed folder loads both parts from disk through the index (no PTX
 *            generated) and starts no helper;
 *   errors:  the combine's compile failing (ptx-combine) and both compiles failing (ptx): the same
 *            status and the same whole message as the serial build (the forward's error first),
 *            the same entries (the forward's only / none), no lock file left; with the fault gone
 *            the folder's forward entry loads and the combine alone compiles, on the calling thread;
 *   carry:   fa3_takeerr / fa3_puterr move a thread's message to another thread intact.
 * The static library: the kernel's parts and the cache loader are internal.
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
static int g_seq;

static void fresh_dir(char *out, size_t size, const char *tag)
{
    snprintf(out, size, "%s/%s-%d", g_root, tag, ++g_seq);
}

/* Files in dir whose name ends with suffix; -1 if dir is missing. first (may be NULL): the name of
   one of them. */
static int count_files(const char *dir, const char *suffix, char *first, size_t size)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    size_t ns = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl >= ns && strcmp(de->d_name + nl - ns, suffix) == 0 && strcmp(de->d_name, ".") &&
            strcmp(de->d_name, "..")) {
            if (first && n == 0)
                snprintf(first, size, "%s", de->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static fa3_config split_cfg(int head_dim, fa3_mask mask)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = head_dim;
    c.mask = mask;
    c.split_kv = 1;
    return c;
}

static const char *backend_label(fa3_backend b)
{
    return fa3_backend_name(fa3_backend_resolve(b));
}

/* The backends that compile (DRIVER_JIT has no cubin to compare). */
static int compile_backends(fa3_backend out[2])
{
    int n = 0;
    if (FA3_HAVE_PTX_COMPILER)
        out[n++] = FA3_BACKEND_PTX_COMPILER;
    out[n++] = FA3_BACKEND_NVJITLINK;
    return n;
}

/* A cold build of cfg into dir: the context (kept: it owns the kernel) and its kernel. */
static fa3_kernel *build(const char *dir, fa3_backend b, const fa3_config *cfg, const char *sites,
                         fa3_context **ctx)
{
    *ctx = make_ctx(dir, b, 0);
    fa3_kernel *k = NULL;
    arm(sites);
    fa3_status st = fa3_jit_get_kernel(*ctx, cfg, &k);
    arm(NULL);
    if (st != FA3_OK)
        fail_msg("fa3_jit_get_kernel (%s): %s", sites ? sites : "no fault",
                 fa3_last_error_message());
    assert_non_null(k);
    assert_int_equal(k->num_parts, 2);
    assert_int_equal(k->parts[0].kind, FA3_KERNEL_FWD);
    assert_int_equal(k->parts[1].kind, FA3_KERNEL_COMBINE);
    return k;
}

/* Compiler logs a and b equal but for ptxas's "Compile time = ... ms" lines. */
static void same_log(const char *a, const char *b)
{
    for (;;) {
        size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        const char *t = "Compile time = ";
        int timed = strstr(a, t) && (size_t)(strstr(a, t) - a) < na && strstr(b, t) &&
                    (size_t)(strstr(b, t) - b) < nb;
        if (!timed && (na != nb || memcmp(a, b, na) != 0))
            fail_msg("logs differ at \"%.*s\" / \"%.*s\"", (int)na, a, (int)nb, b);
        a += na;
        b += nb;
        if (!*a || !*b)
            break;
        a++;
        b++;
    }
    assert_true(!*a && !*b);
}

/* a and b agree; a's PTX too unless a was loaded through the disk cache's index (no PTX). */
static void same_part(const fa3_part *a, const fa3_part *b)
{
    assert_string_equal(a->key, b->key);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->smem_bytes, b->smem_bytes);
    if (a->ptx) {
        assert_int_equal(a->ptx_len, b->ptx_len);
        assert_memory_equal(a->ptx, b->ptx, a->ptx_len);
    }
    assert_non_null(a->cubin);
    assert_int_equal(a->cubin_size, b->cubin_size);
    assert_memory_equal(a->cubin, b->cubin, a->cubin_size);
    same_log(a->compile_log, b->compile_log);
    assert_int_equal(a->num_regs, b->num_regs);
    assert_int_equal(a->spill_store_bytes, b->spill_store_bytes);
    assert_int_equal(a->spill_load_bytes, b->spill_load_bytes);
    assert_int_equal(a->stack_bytes, b->stack_bytes);
    assert_int_equal(a->has_warning, b->has_warning);
}

/* pt's entry in dir a and in dir b: the same bytes but for the creation time, and pt's own. */
static void same_entry(const char *a, const char *b, const fa3_part *pt)
{
    void *cubin[2];
    size_t size[2];
    char *log[2];
    fa3_cache_meta m[2];
    const char *dirs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (!fa3_cache_load(dirs[i], pt->key, &pt->key_config, &cubin[i], &size[i], &log[i], &m[i]))
            fail_msg("no entry %s in %s", pt->key, dirs[i]);
        assert_int_equal(size[i], pt->cubin_size);
        assert_memory_equal(cubin[i], pt->cubin, size[i]);
        same_log(log[i], pt->compile_log);
        assert_int_equal(m[i].kind, pt->kind);
    }
    assert_int_equal(m[0].num_regs, m[1].num_regs);
    assert_int_equal(m[0].spill_store_bytes, m[1].spill_store_bytes);
    assert_int_equal(m[0].spill_load_bytes, m[1].spill_load_bytes);
    assert_int_equal(m[0].stack_bytes, m[1].stack_bytes);
    assert_int_equal(m[0].has_warning, m[1].has_warning);
    assert_int_equal(m[0].backend, m[1].backend);
    assert_true(fa3_config_equal(&m[0].config, &m[1].config));
    assert_string_equal(m[0].plan_debug, m[1].plan_debug);
    for (int i = 0; i < 2; i++) {
        free(cubin[i]);
        free(log[i]);
    }
}

/* ---------------------------------------------------------------- same, warm */

static void check_same(fa3_backend b, const fa3_config *cfg)
{
    char par[512], ser[512];
    fresh_dir(par, sizeof par, "parallel");
    fresh_dir(ser, sizeof ser, "serial");
    fa3_context *cp, *cs;
    fa3_kernel *kp = build(par, b, cfg, NULL, &cp);
    fa3_kernel *ks = build(ser, b, cfg, "pthread_create", &cs);
    printf("  %s hd%d%s: forward %.0f ms, combine %.0f ms on a helper\n", backend_label(b),
           cfg->head_dim, cfg->mask == FA3_MASK_CAUSAL ? " causal" : "", kp->parts[0].compile_ms,
           kp->parts[1].compile_ms);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kp->parts[i].source, FA3_SOURCE_COMPILED);
        assert_int_equal(ks->parts[i].source, FA3_SOURCE_COMPILED);
        assert_int_equal(ks->parts[i].on_helper, 0); /* no helper could be started */
        same_part(&kp->parts[i], &ks->parts[i]);
        same_entry(par, ser, &kp->parts[i]);
    }
    assert_int_equal(kp->parts[0].on_helper, 0); /* the forward on the calling thread */
    assert_int_equal(kp->parts[1].on_helper, 1); /* the combine meanwhile on a helper */
    assert_int_equal(kp->first_source, FA3_SOURCE_COMPILED);
    for (int d = 0; d < 2; d++) {
        assert_int_equal(count_files(d ? ser : par, ".fa3k", NULL, 0), 2);
        assert_int_equal(count_files(d ? ser : par, ".fa3x", NULL, 0), 2); /* an index each */
        assert_int_equal(count_files(d ? ser : par, ".lock", NULL, 0), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_non_null(kp->parts[i].ptx);

    /* warm: both parts from disk through the index (no PTX generated), no helper */
    fa3_context *cw = make_ctx(par, b, 0);
    fa3_kernel *kw = NULL;
    CHECK(fa3_jit_get_kernel(cw, cfg, &kw));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kw->parts[i].source, FA3_SOURCE_DISK);
        assert_int_equal(kw->parts[i].on_helper, 0);
        assert_null(kw->parts[i].ptx);
        same_part(&kw->parts[i], &kp->parts[i]);
    }
    assert_int_equal(kw->first_source, FA3_SOURCE_DISK);
    fa3_context_free(cw);
    fa3_context_free(cp);
    fa3_context_free(cs);
    rm_rf(par);
    rm_rf(ser);
}

static void test_same_as_serial(void **state)
{
    (void)state;
    fa3_backend bs[2];
    int nb = compile_backends(bs);
    fa3_config c = split_cfg(128, FA3_MASK_NONE);
    for (int i = 0; i < nb; i++)
        check_same(bs[i], &c);
    c = split_cfg(64, FA3_MASK_CAUSAL);
    check_same(FA3_BACKEND_AUTO, &c);
}

/* ---------------------------------------------------------------- errors */

/* A cold build of cfg into a fresh folder with sites armed, which must fail: its status, its
   message (malloc'd) and the folder (dir). */
static fa3_status build_fails(fa3_backend b, const fa3_config *cfg, const char *sites, char **msg,
                              char *dir, size_t size)
{
    fresh_dir(dir, size, "fails");
    fa3_context *ctx = make_ctx(dir, b, 0);
    fa3_kernel *k = (fa3_kernel *)1;
    arm(sites);
    fa3_status st = fa3_jit_get_kernel(ctx, cfg, &k);
    arm(NULL);
    assert_int_not_equal(st, FA3_OK);
    assert_null(k);
    *msg = strdup(fa3_last_error_message());
    assert_non_null(*msg);
    fa3_context_free(ctx);
    assert_int_equal(count_files(dir, ".lock", NULL, 0) > 0, 0); /* released on the error path */
    return st;
}

static void test_errors_as_serial(void **state)
{
    (void)state;
    fa3_backend bs[2];
    int nb = compile_backends(bs);
    fa3_config c = split_cfg(64, FA3_MASK_NONE);
    for (int i = 0; i < nb; i++) {
        fa3_status want = bs[i] == FA3_BACKEND_NVJITLINK ? FA3_ERR_LINK : FA3_ERR_COMPILE;
        char par[512], ser[512], name[2][300];
        char *mp, *ms;

        /* the combine's compile fails (on the helper): its message, the forward's entry stored */
        assert_int_equal(build_fails(bs[i], &c, "ptx-combine", &mp, par, sizeof par), want);
        assert_int_equal(build_fails(bs[i], &c, "ptx-combine,pthread_create", &ms, ser,
                                     sizeof ser), want);
        printf("  %s, combine fails: %.160s...\n", backend_label(bs[i]), mp);
        assert_string_equal(mp, ms);
        assert_non_null(strstr(mp, "this_is_not_ptx"));
        assert_non_null(strstr(mp, "error log"));
        assert_int_equal(count_files(par, ".fa3k", name[0], sizeof name[0]), 1);
        assert_int_equal(count_files(ser, ".fa3k", name[1], sizeof name[1]), 1);
        assert_string_equal(name[0], name[1]);
        /* the one entry is the forward's: a context without the fault loads it and compiles the
           combine alone, on the calling thread */
        fa3_context *ctx = make_ctx(par, bs[i], 0);
        fa3_kernel *k = NULL;
        CHECK(fa3_jit_get_kernel(ctx, &c, &k));
        assert_int_equal(k->parts[0].source, FA3_SOURCE_DISK);
        assert_int_equal(k->parts[1].source, FA3_SOURCE_COMPILED);
        assert_int_equal(k->parts[1].on_helper, 0);
        assert_true(strncmp(name[0], k->parts[0].key, 32) == 0);
        fa3_context_free(ctx);
        assert_int_equal(count_files(par, ".fa3k", NULL, 0), 2);
        char *combine_msg = mp;
        free(ms);

        /* both fail: the forward's error (a serial build stops there), no entry */
        assert_int_equal(build_fails(bs[i], &c, "ptx", &mp, par, sizeof par), want);
        assert_int_equal(build_fails(bs[i], &c, "ptx,pthread_create", &ms, ser, sizeof ser),
                         want);
        assert_string_equal(mp, ms);
        assert_non_null(strstr(mp, "this_is_not_ptx"));
        assert_string_not_equal(mp, combine_msg);
        assert_int_equal(count_files(par, ".fa3k", NULL, 0) > 0, 0);
        assert_int_equal(count_files(ser, ".fa3k", NULL, 0) > 0, 0);
        free(mp);
        free(ms);
        free(combine_msg);
    }
}

/* ---------------------------------------------------------------- carry */

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
        cmocka_unit_test_setup(test_same_as_serial, disarm),
        cmocka_unit_test_setup(test_errors_as_serial, disarm),
    };
    return cmocka_run_group_tests_name("build_parts", tests, group_setup, group_teardown);
}
