/*
 * test_faults: every failure the runtime can meet on the CPU side, injected through
 * $FA3JIT_TEST_FAIL (common.h: fa3_test_fail), and what the caller sees: a status and a message
 * naming the value or the failing call (with the compiler's log for compile failures), or, for disk
 * cache problems, success from memory with the problem kept as the context's warning.
 *   disk:    mkdir fails, the folder is read-only (open fails), disk full (write: ENOSPC), fsync
 *            (with FA3JIT_CACHE_FSYNC=1; never called without it), rename, read (a miss), flock
 *            refused (NFS without locks), lock held past the timeout
 *   compile: bad PTX through fa3_compile_ptx (both backends), bad generated PTX through
 *            fa3_jit_get_kernel, nvJitLinkCreate / nvPTXCompilerCreate fail
 *   memory:  context, kernel, cubin, compiler log, cache load
 *   driver:  dlopen of libcuda fails (in a child process: the driver is loaded once)
 * Runs in a fresh folder under /tmp, removed at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa3jit.h"
#include "fa3jit_build_config.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/driver.h"
#include "runtime/runtime.h"
#include "check.h"
#include "test_util.h"

static char g_root[256];
static int g_seq;

/* The message must contain each of the NULL-terminated needles. */
static void msg_has(const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    const char *needle;
    while ((needle = va_arg(ap, const char *)) != NULL)
        if (!strstr(msg, needle))
            fail_msg("message lacks \"%s\": %s", needle, msg);
    va_end(ap);
}

/* A new, not yet existing folder under the test root. */
static void fresh_dir(char *out, size_t size, const char *tag)
{
    snprintf(out, size, "%s/%s-%d", g_root, tag, ++g_seq);
}

/* Files in dir whose name ends with suffix ("" = all but . and ..); -1 if dir is missing. */
static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    size_t ns = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        size_t nl = strlen(de->d_name);
        if (nl >= ns && strcmp(de->d_name + nl - ns, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static fa3_config cfg_hd(int hd)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.mask = FA3_MASK_CAUSAL;
    return c;
}

static fa3_kernel_source get_source(fa3_context *ctx, const fa3_config *cfg, fa3_kernel **out)
{
    fa3_kernel *k = NULL;
    CHECK(fa3_jit_get_kernel(ctx, cfg, &k));
    fa3_kernel_info in;
    CHECK(fa3_kernel_get_info(k, &in));
    const void *cubin;
    size_t n;
    CHECK(fa3_kernel_get_cubin(k, &cubin, &n));
    assert_true(n > 64);
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    if (out)
        *out = k;
    return in.source;
}

/* A small fake entry for direct fa3_cache_store calls. */
static fa3_cache_meta fake_meta(void)
{
    fa3_cache_meta m;
    memset(&m, 0, sizeof m);
    m.num_regs = m.spill_store_bytes = m.spill_load_bytes = m.stack_bytes = -1;
    m.backend = FA3_BACKEND_NVJITLINK;
    fa3_config c = cfg_hd(64);
    CHECK(fa3_config_canonicalize(&c, &m.config));
    return m;
}

static const char KEY[] = "0123456789abcdef0123456789abcdef";
static const char CUBIN[] = "\x7f" "ELF fake cubin bytes";

/* ---------------------------------------------------------------- disk */

static void test_mkdir_fails(void **state)
{
    (void)state;
    char dir[512];
    fresh_dir(dir, sizeof dir, "mkdir");
    fa3_cache_meta m = fake_meta();
    arm("mkdir");
    int e = 0;
    assert_int_equal(fa3_cache_store(dir, KEY, CUBIN, sizeof CUBIN, "log", &m, 0, &e),
                     FA3_ERR_CACHE_IO);
    msg_has(fa3_last_error_message(), "cannot create cache directory", dir, "mkdir",
            "Permission denied", NULL);
    assert_int_equal(e, EACCES);

    /* through a context: compiled, used from memory, one warning for the whole context */
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_string_equal(fa3_context_warning(ctx), "");
    fa3_config a = cfg_hd(64), b = cfg_hd(128);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
    const char *w = fa3_context_warning(ctx);
    msg_has(w, "cannot create cache directory", dir, "mkdir", "memory only", NULL);
    char first[1024];
    snprintf(first, sizeof first, "%s", w);
    assert_int_equal(get_source(ctx, &b, NULL), FA3_SOURCE_COMPILED);
    assert_ptr_equal(fa3_context_warning(ctx), w); /* reported once: the same text */
    assert_string_equal(fa3_context_warning(ctx), first);
    fa3_context_free(ctx);
    arm(NULL);
    assert_int_equal(count_files(dir, ""), -1); /* nothing created */
    printf("  warning: %s\n", first);
}

/* A folder that exists but where nothing can be created (as a read-only mount). */
static void test_readonly_dir(void **state)
{
    (void)state;
    char dir[512];
    fresh_dir(dir, sizeof dir, "readonly");
    fa3_config a = cfg_hd(64), b = cfg_hd(128);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED); /* entry for a on disk */
    fa3_context_free(ctx);
    assert_int_equal(count_files(dir, ".fa3k"), 1);

    arm("open");
    fa3_cache_meta m = fake_meta();
    int e = 0;
    assert_int_equal(fa3_cache_store(dir, KEY, CUBIN, sizeof CUBIN, NULL, &m, 0, &e),
                     FA3_ERR_CACHE_IO);
    msg_has(fa3_last_error_message(), "temporary file", dir, "mkstemp",
            "Read-only file system", NULL);
    assert_int_equal(e, EROFS);

    ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_DISK);     /* still read */
    assert_string_equal(fa3_context_warning(ctx), "");
    assert_int_equal(get_source(ctx, &b, NULL), FA3_SOURCE_COMPILED); /* kept in memory */
    msg_has(fa3_context_warning(ctx), "not writable", dir, ".lock", "Read-only file system",
            NULL);
    printf("  warning: %s\n", fa3_context_warning(ctx));
    fa3_context_free(ctx);
    arm(NULL);
    /* a's entry and its index: no entry for b, no lock, no temporary */
    assert_int_equal(count_files(dir, ".fa3x"), 1);
    assert_int_equal(count_files(dir, ""), 2);

    /* really read-only (only meaningful when not root: root writes anyway) */
    if (geteuid() != 0) {
        char ro[512];
        fresh_dir(ro, sizeof ro, "chmod");
        assert_int_equal(mkdir(ro, 0500), 0);
        ctx = make_ctx(ro, FA3_BACKEND_NVJITLINK, 0);
        assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
        msg_has(fa3_context_warning(ctx), "not writable", ro, NULL);
        fa3_context_free(ctx);
        chmod(ro, 0700);
    }
}

/* A cache folder under a regular file: missing and uncreatable for real (ENOTDIR). */
static void test_uncreatable_dir(void **state)
{
    (void)state;
    char file[512], dir[600];
    fresh_dir(file, sizeof file, "file");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/cache", file);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    fa3_config a = cfg_hd(64);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_MEMORY);
    msg_has(fa3_context_warning(ctx), dir, "Not a directory", "memory only", NULL);
    fa3_context_free(ctx);
}

/* Disk full, fsync and rename failures: the store fails cleanly (no temporary file left), the
   context compiles and warns. fsync is called only for a durable store (FA3JIT_CACHE_FSYNC=1):
   there its failure fails the store; armed without it, the store succeeds (it never called
   fsync). */
static void test_store_failures(void **state)
{
    (void)state;
    static const struct {
        const char *site, *call, *reason;
        int durable;
    } cases[] = {
        {"write", "write failed", "No space left on device", 0},
        {"fsync", "fsync failed", "Input/output error", 1},
        {"rename", "rename failed", "Permission denied", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512];
        fresh_dir(dir, sizeof dir, cases[i].site);
        fa3_cache_meta m = fake_meta();
        arm(cases[i].site);
        assert_int_equal(fa3_cache_store(dir, KEY, CUBIN, sizeof CUBIN, "log", &m,
                                         cases[i].durable, NULL),
                         FA3_ERR_CACHE_IO);
        msg_has(fa3_last_error_message(), "cache store", dir, KEY, cases[i].call,
                cases[i].reason, NULL);
        assert_int_equal(count_files(dir, ""), 0); /* the temporary file is gone */

        if (cases[i].durable)
            setenv("FA3JIT_CACHE_FSYNC", "1", 1); /* read by fa3_context_create */
        fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
        unsetenv("FA3JIT_CACHE_FSYNC");
        fa3_config a = cfg_hd(64);
        assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
        assert_string_equal(fa3_last_error_message(), "");
        msg_has(fa3_context_warning(ctx), cases[i].call, cases[i].reason, "kept in memory", NULL);
        printf("  %s: %s\n", cases[i].site, fa3_context_warning(ctx));
        fa3_context_free(ctx);
        arm(NULL);
        assert_int_equal(count_files(dir, ""), 0); /* no entry, lock or temporary */
    }

    /* fsync armed, the default (not durable): nothing calls it, the entry is stored. */
    char dir[512];
    fresh_dir(dir, sizeof dir, "fsync-off");
    fa3_cache_meta m = fake_meta();
    arm("fsync");
    CHECK(fa3_cache_store(dir, KEY, CUBIN, sizeof CUBIN, "log", &m, 0, NULL));
    assert_int_equal(count_files(dir, FA3_CACHE_SUFFIX), 1);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    fa3_config a = cfg_hd(64);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
    assert_string_equal(fa3_context_warning(ctx), "");
    fa3_context_free(ctx);
    arm(NULL);
    assert_int_equal(count_files(dir, FA3_CACHE_SUFFIX), 2);
    assert_int_equal(count_files(dir, FA3_CACHE_INDEX_SUFFIX), 1); /* a's (KEY is a fake's) */
    assert_int_equal(count_files(dir, ""), 3); /* no lock or temporary */
    ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_DISK);
    fa3_context_free(ctx);
}

static void test_read_fails(void **state)
{
    (void)state;
    char dir[512];
    fresh_dir(dir, sizeof dir, "read");
    fa3_config a = cfg_hd(64);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    get_source(ctx, &a, NULL);
    fa3_context_free(ctx);
    static const char *sites[] = {"read", "oom-cache-load"};
    for (int i = 0; i < 2; i++) {
        arm(sites[i]);
        ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
        /* a miss, not an error: rebuilt (the store works) */
        assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
        assert_string_equal(fa3_context_warning(ctx), "");
        fa3_context_free(ctx);
        arm(NULL);
    }
    ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_DISK);
    fa3_context_free(ctx);
}

static void test_lock_failures(void **state)
{
    (void)state;
    char dir[512];
    fresh_dir(dir, sizeof dir, "lock");
    fa3_config a = cfg_hd(64), b = cfg_hd(128);

    /* flock refused (NFS without lockd): compiled without the lock, still stored */
    arm("lock");
    fa3_cache_lock lk;
    char why[1024];
    assert_int_equal(fa3_cache_lock_take(dir, KEY, 1000, &lk, why, sizeof why),
                     FA3_CACHE_LOCK_UNAVAILABLE);
    msg_has(why, "flock", ".lock", "No locks available", NULL);
    assert_int_equal(lk.fd, -1);
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
    msg_has(fa3_context_warning(ctx), "flock", "No locks available", "without the cache lock",
            NULL);
    fa3_context_free(ctx);
    arm(NULL);
    assert_int_equal(count_files(dir, ".fa3k"), 1);

    /* held by someone else past the timeout: compiled anyway */
    fa3_kernel_info in;
    char key[33];
    {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.disable_disk_cache = 1;
        o.backend = FA3_BACKEND_NVJITLINK;
        fa3_context *mem = NULL;
        CHECK(fa3_context_create(&mem, &o));
        fa3_kernel *k;
        CHECK(fa3_jit_get_kernel(mem, &b, &k));
        CHECK(fa3_kernel_get_info(k, &in));
        memcpy(key, in.cache_key, sizeof key);
        fa3_context_free(mem);
    }
    assert_int_equal(fa3_cache_lock_take(dir, key, 1000, &lk, why, sizeof why), FA3_CACHE_LOCKED);
    fa3_cache_lock lk2;
    assert_int_equal(fa3_cache_lock_take(dir, key, 100, &lk2, why, sizeof why),
                     FA3_CACHE_LOCK_UNAVAILABLE); /* another descriptor: excluded */
    msg_has(why, "still held", NULL);
    setenv("FA3JIT_CACHE_LOCK_TIMEOUT", "1", 1); /* whole seconds */
    ctx = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    unsetenv("FA3JIT_CACHE_LOCK_TIMEOUT");
    assert_int_equal(get_source(ctx, &b, NULL), FA3_SOURCE_COMPILED);
    msg_has(fa3_context_warning(ctx), "still held", "without the cache lock", NULL);
    fa3_context_free(ctx);
    fa3_cache_lock_release(&lk);
    assert_int_equal(count_files(dir, ".lock"), 0); /* the holder removes its lock file */
    assert_int_equal(count_files(dir, ".fa3k"), 2);
}

/* ---------------------------------------------------------------- compile */

static void test_bad_ptx(void **state)
{
    (void)state;
    static const char bad[] = ".version 8.5\n.target sm_90a\n.address_size 64\n"
                              ".visible .entry broken() {\n  mov.u32 %r1, 1;\n  this is wrong;\n}\n";
    fa3_backend backends[2] = {FA3_BACKEND_NVJITLINK, FA3_BACKEND_PTX_COMPILER};
    for (int i = 0; i < (FA3_HAVE_PTX_COMPILER ? 2 : 1); i++) {
        fa3_compile_result r;
        fa3_status st = fa3_compile_ptx(bad, sizeof bad - 1, FA3_ARCH_SM90A, backends[i], &r);
        const char *msg = fa3_last_error_message();
        printf("  %s: %s: %.200s...\n", fa3_backend_name(backends[i]), fa3_strerror(st), msg);
        if (backends[i] == FA3_BACKEND_NVJITLINK) {
            assert_int_equal(st, FA3_ERR_LINK);
            msg_has(msg, "nvJitLinkAddData(PTX)", "NVJITLINK_ERROR_PTX_COMPILE", "error log", NULL);
        } else {
            assert_int_equal(st, FA3_ERR_COMPILE);
            msg_has(msg, "nvPTXCompilerCompile", "NVPTXCOMPILE_ERROR_COMPILATION_FAILURE",
                    "error log", NULL);
        }
        assert_non_null(r.error_log);
        assert_true(strlen(r.error_log) > 0);
        msg_has(msg, r.error_log, NULL); /* the compiler's own log is in the message */
        assert_null(r.cubin);
        fa3_compile_result_free(&r);
    }
    /* no text, not NUL-terminated */
    fa3_compile_result r;
    assert_int_equal(fa3_compile_ptx(bad, 5, FA3_ARCH_SM90A, FA3_BACKEND_NVJITLINK, &r),
                     FA3_ERR_INVALID_ARGUMENT);
    msg_has(fa3_last_error_message(), "not NUL-terminated", NULL);
    fa3_compile_result_free(&r);
    assert_int_equal(fa3_compile_ptx(bad, sizeof bad - 1, (fa3_arch)80, FA3_BACKEND_NVJITLINK, &r),
                     FA3_ERR_BAD_ARCH);
    msg_has(fa3_last_error_message(), "arch 80", NULL);
    fa3_compile_result_free(&r);
}

/* Generated PTX spoiled (site "ptx"): fa3_jit_get_kernel fails with the log; nothing is kept,
   and the same context builds the kernel once the fault is gone. */
static void test_get_kernel_compile_error(void **state)
{
    (void)state;
    fa3_backend backends[2] = {FA3_BACKEND_NVJITLINK, FA3_BACKEND_PTX_COMPILER};
    for (int i = 0; i < (FA3_HAVE_PTX_COMPILER ? 2 : 1); i++) {
        char dir[512];
        fresh_dir(dir, sizeof dir, "spoiled");
        fa3_context *ctx = make_ctx(dir, backends[i], 0);
        fa3_config a = cfg_hd(64);
        fa3_kernel *k = (fa3_kernel *)1;
        arm("ptx");
        fa3_status st = fa3_jit_get_kernel(ctx, &a, &k);
        arm(NULL);
        assert_int_equal(st, backends[i] == FA3_BACKEND_NVJITLINK ? FA3_ERR_LINK
                                                                  : FA3_ERR_COMPILE);
        assert_null(k);
        msg_has(fa3_last_error_message(),
                backends[i] == FA3_BACKEND_NVJITLINK ? "nvJitLinkAddData" : "nvPTXCompilerCompile",
                "error log", "this_is_not_ptx", NULL);
        assert_int_equal(count_files(dir, ".fa3k") > 0, 0);
        assert_int_equal(count_files(dir, ".lock") > 0, 0); /* released on the error path */
        assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED);
        fa3_context_free(ctx);
    }
}

static void test_compiler_create_fails(void **state)
{
    (void)state;
    static const char ptx[] = ".version 8.5\n.target sm_90a\n.address_size 64\n";
    fa3_compile_result r;
    arm("nvJitLinkCreate");
    assert_int_equal(fa3_compile_ptx(ptx, sizeof ptx - 1, FA3_ARCH_SM90A, FA3_BACKEND_NVJITLINK,
                                     &r), FA3_ERR_LINK);
    msg_has(fa3_last_error_message(), "nvJitLinkCreate", "-arch=sm_90a", "NVJITLINK_ERROR_INTERNAL",
            NULL);
    fa3_compile_result_free(&r);
    /* through a context */
    fa3_context *ctx = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    fa3_config a = cfg_hd(64);
    fa3_kernel *k;
    assert_int_equal(fa3_jit_get_kernel(ctx, &a, &k), FA3_ERR_LINK);
    msg_has(fa3_last_error_message(), "nvJitLinkCreate", NULL);
    fa3_context_free(ctx);
    arm(NULL);
#if FA3_HAVE_PTX_COMPILER
    arm("nvPTXCompilerCreate");
    assert_int_equal(fa3_compile_ptx(ptx, sizeof ptx - 1, FA3_ARCH_SM90A,
                                     FA3_BACKEND_PTX_COMPILER, &r), FA3_ERR_COMPILE);
    msg_has(fa3_last_error_message(), "nvPTXCompilerCreate", "NVPTXCOMPILE_ERROR_OUT_OF_MEMORY",
            NULL);
    fa3_compile_result_free(&r);
    arm(NULL);
#endif
}

/* ---------------------------------------------------------------- memory */

static void test_out_of_memory(void **state)
{
    (void)state;
    fa3_context *ctx = (fa3_context *)1;
    arm("oom-context");
    assert_int_equal(fa3_context_create(&ctx, NULL), FA3_ERR_OUT_OF_MEMORY);
    assert_null(ctx);
    msg_has(fa3_last_error_message(), "out of memory for a context", NULL);
    arm(NULL);

    fa3_backend backends[2] = {FA3_BACKEND_NVJITLINK, FA3_BACKEND_PTX_COMPILER};
    for (int i = 0; i < (FA3_HAVE_PTX_COMPILER ? 2 : 1); i++) {
        char dir[512];
        fresh_dir(dir, sizeof dir, "oom");
        ctx = make_ctx(dir, backends[i], 0);
        fa3_config a = cfg_hd(64);
        static const struct {
            const char *site, *text;
        } cases[] = {
            {"oom-kernel", "out of memory for a kernel"},
            {"oom-cubin", "-byte cubin"},
            {"oom-log", "out of memory for the compiler log"},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fa3_kernel *k = (fa3_kernel *)1;
            arm(cases[c].site);
            assert_int_equal(fa3_jit_get_kernel(ctx, &a, &k), FA3_ERR_OUT_OF_MEMORY);
            arm(NULL);
            assert_null(k);
            msg_has(fa3_last_error_message(), cases[c].text, NULL);
        }
        assert_int_equal(count_files(dir, ".fa3k") > 0, 0);
        assert_int_equal(get_source(ctx, &a, NULL), FA3_SOURCE_COMPILED); /* recovers */
        fa3_context_free(ctx);
    }
}

/* ---------------------------------------------------------------- driver */

static void test_no_driver(void **state)
{
    (void)state;
    /* A kernel to launch (compiled in this process: the child only launches). */
    fa3_context *ctx = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    fa3_config a = cfg_hd(64);
    fa3_kernel *k;
    CHECK(fa3_jit_get_kernel(ctx, &a, &k));
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The driver is loaded once per process: arm the fault before the first use. */
        setenv("FA3JIT_TEST_FAIL", "dlopen", 1);
        const fa3_driver *d = NULL;
        fa3_status st = fa3_driver_get(&d);
        int ok = st == FA3_ERR_NO_DRIVER && d == NULL &&
                 strstr(fa3_last_error_message(), "dlopen(\"libcuda.so.1\")") != NULL;
        fa3_fwd_args args;
        fa3_fwd_args_init(&args);
        args.q = (const void *)(uintptr_t)0x10000000;
        args.k = (const void *)(uintptr_t)0x20000000;
        args.v = (const void *)(uintptr_t)0x30000000;
        args.o = (void *)(uintptr_t)0x40000000;
        args.batch = 1;
        args.seqlen_q = args.seqlen_k = 128;
        args.num_heads = args.num_heads_k = 1;
        fa3_fwd_args_set_contiguous(&args, 64, 64);
        st = fa3_fwd(k, &args, NULL);
        printf("  fa3_fwd without libcuda: %s: %s\n", fa3_strerror(st), fa3_last_error_message());
        ok = ok && st == FA3_ERR_NO_DRIVER &&
             strstr(fa3_last_error_message(), "libcuda.so.1") != NULL;
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    expect_child_ok(pid);
    fa3_context_free(ctx);
}

/* Each test starts with no fault armed (a failed test must not leave one behind). */
static int disarm(void **state)
{
    (void)state;
    unsetenv("FA3JIT_TEST_FAIL");
    unsetenv("FA3JIT_CACHE_LOCK_TIMEOUT");
    unsetenv("FA3JIT_CACHE_FSYNC");
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("FA3JIT_CACHE_DIR");
    unsetenv("FA3JIT_TEST_FAIL");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-faults-XXXXXX");
    if (!mkdtemp(g_root))
        return -1;
    setenv("FA3JIT_CACHE_DIR", g_root, 1); /* contexts made with a NULL folder land here */
    return 0;
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
        cmocka_unit_test_setup(test_mkdir_fails, disarm),
        cmocka_unit_test_setup(test_readonly_dir, disarm),
        cmocka_unit_test_setup(test_uncreatable_dir, disarm),
        cmocka_unit_test_setup(test_store_failures, disarm),
        cmocka_unit_test_setup(test_read_fails, disarm),
        cmocka_unit_test_setup(test_lock_failures, disarm),
        cmocka_unit_test_setup(test_bad_ptx, disarm),
        cmocka_unit_test_setup(test_get_kernel_compile_error, disarm),
        cmocka_unit_test_setup(test_compiler_create_fails, disarm),
        cmocka_unit_test_setup(test_out_of_memory, disarm),
        cmocka_unit_test_setup(test_no_driver, disarm),
    };
    return cmocka_run_group_tests_name("faults", tests, group_setup, group_teardown);
}
