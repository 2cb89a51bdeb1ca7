/*
 * test_concurrency: many callers asking for the same kernel at once, on one empty cache folder.
 *   processes:         16 cache_worker processes released together: every one gets a valid kernel
 *                      with the same cache key and the same cubin bytes, at least one compiled it,
 *                      the others compiled it too or loaded it from disk, and the folder ends with
 *                      exactly one entry file and one index file naming it (no lock or temporary
 *                      files left); then 16 more with the generator failing all load it from disk
 *                      through that index;
 *   processes_nolock:  the same with the cache lock refused (FA3JIT_TEST_FAIL=lock, as on NFS
 *                      without locks): each compiles, the atomic rename still leaves one good entry;
 *   threads_contexts:  16 threads, one context each, same folder (the file lock between threads);
 *   threads_shared:    16 threads, one shared context: exactly one build, 15 MEMORY hits.
 * argv[1]: the cache_worker program. Public API only (the shared library, as a user links it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa3jit.h"
#include "check.h"
#include "test_util.h"

#define N 16

static const char *g_worker;
static char g_root[256];
static int g_seq;

static void fresh_dir(char *out, size_t size, const char *tag)
{
    snprintf(out, size, "%s/%s-%d", g_root, tag, ++g_seq);
    assert_int_equal(mkdir(out, 0700), 0);
}

/* Checks that dir holds exactly two files: <key>.fa3k and one index file, <32 hex>.fa3x, of 88
   bytes naming key at its offset 48 (the layout in src/runtime/cache.h). */
static void entry_and_index(const char *dir, const char *key)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int entries = 0, indexes = 0;
    struct dirent *de;
    char want[64];
    snprintf(want, sizeof want, "%s.fa3k", key);
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        size_t n = strlen(de->d_name);
        if (!strcmp(de->d_name, want)) {
            entries++;
        } else if (n == 37 && !strcmp(de->d_name + 32, ".fa3x") &&
                   strspn(de->d_name, "0123456789abcdef") == 32) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            size_t size = 0;
            unsigned char *b = slurp(path, &size);
            assert_int_equal(size, 88);
            assert_memory_equal(b + 48, key, 32);
            free(b);
            indexes++;
        } else {
            fail_msg("unexpected file in the cache folder: %s", de->d_name);
        }
    }
    closedir(d);
    assert_int_equal(entries, 1);
    assert_int_equal(indexes, 1);
}

/* Starts N workers on dir at the same moment (FA3JIT_TEST_FAIL=fail_sites unless NULL); checks
   that each got a valid cubin, all the same one, under one key (key[0] set: that key; else it
   receives it), and counts their sources. */
static void run_workers(const char *dir, const char *fail_sites, char key[33], int *compiled,
                        int *disk)
{
    char out[N][600];
    int start[2];
    assert_int_equal(pipe(start), 0);
    pid_t pids[N];
    int outs[N];
    for (int i = 0; i < N; i++) {
        snprintf(out[i], sizeof out[i], "%s.worker%d.cubin", dir, i);
        int p[2];
        assert_int_equal(pipe(p), 0);
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            dup2(start[0], STDIN_FILENO);
            dup2(p[1], STDOUT_FILENO);
            close(start[0]);
            close(start[1]);
            close(p[0]);
            close(p[1]);
            for (int j = 0; j < i; j++)
                close(outs[j]);
            if (fail_sites)
                setenv("FA3JIT_TEST_FAIL", fail_sites, 1);
            execl(g_worker, g_worker, dir, out[i], (char *)NULL);
            perror(g_worker);
            _exit(127);
        }
        close(p[1]);
        pids[i] = pid;
        outs[i] = p[0];
    }
    close(start[0]);
    close(start[1]); /* go */

    *compiled = *disk = 0;
    unsigned char *first = NULL;
    size_t first_size = 0;
    for (int i = 0; i < N; i++) {
        char line[2048];
        size_t n = 0;
        ssize_t r;
        while (n < sizeof line - 1 && (r = read(outs[i], line + n, sizeof line - 1 - n)) > 0)
            n += (size_t)r;
        line[n] = '\0';
        close(outs[i]);
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("worker %d failed (status %d): %s", i, status, line);
        char k[64] = "", src[32] = "";
        size_t size = 0;
        if (sscanf(line, "key=%40s source=%31s size=%zu", k, src, &size) != 3)
            fail_msg("worker %d printed: %s", i, line);
        if (!key[0])
            snprintf(key, 33, "%s", k);
        assert_string_equal(k, key);
        if (!strcmp(src, "COMPILED"))
            (*compiled)++;
        else if (!strcmp(src, "DISK"))
            (*disk)++;
        else
            fail_msg("worker %d: source %s", i, src);
        size_t got = 0;
        unsigned char *bytes = slurp(out[i], &got);
        assert_int_equal(got, size);
        assert_memory_equal(bytes, "\x7f" "ELF", 4);
        if (!first) {
            first = bytes;
            first_size = got;
        } else {
            assert_int_equal(got, first_size);
            assert_memory_equal(bytes, first, got);
            free(bytes);
        }
        unlink(out[i]);
    }
    free(first);
}

/* N workers on one empty folder, then N more on it with the generator failing
   (FA3JIT_TEST_FAIL=codegen): the second round loads the entry through the index the first wrote,
   all of them from disk. */
static void run_processes(const char *fail_sites, int *compiled_out)
{
    char dir[512], key[33] = "";
    fresh_dir(dir, sizeof dir, fail_sites ? "procs-nolock" : "procs");
    int compiled = 0, disk = 0;
    run_workers(dir, fail_sites, key, &compiled, &disk);
    printf("  %d processes%s: %d compiled, %d from disk, key %s\n", N,
           fail_sites ? " without the lock" : "", compiled, disk, key);
    assert_true(compiled >= 1);
    assert_int_equal(compiled + disk, N);
    entry_and_index(dir, key);
    *compiled_out = compiled;

    char sites[64];
    snprintf(sites, sizeof sites, "%s%scodegen", fail_sites ? fail_sites : "",
             fail_sites ? "," : "");
    run_workers(dir, sites, key, &compiled, &disk);
    printf("  %d more, the generator failing: %d from disk through the index\n", N, disk);
    assert_int_equal(compiled, 0);
    assert_int_equal(disk, N);
    entry_and_index(dir, key);
}

static void test_processes(void **state)
{
    (void)state;
    int compiled = 0;
    run_processes(NULL, &compiled);
    /* With the lock, the waiters load the holder's entry: exactly one compile. */
    assert_int_equal(compiled, 1);
}

static void test_processes_nolock(void **state)
{
    (void)state;
    int compiled = 0;
    run_processes("lock", &compiled);
}

/* ---------------------------------------------------------------- threads */

typedef struct job {
    fa3_context *ctx; /* shared, or NULL: make one on dir */
    const char *dir;
    pthread_barrier_t *go;
    fa3_status st;
    char msg[512];
    fa3_kernel_info info;
    const void *cubin;
    size_t size;
    fa3_context *own;
} job;

static void *thread_main(void *arg)
{
    job *j = arg;
    fa3_context *ctx = j->ctx;
    j->st = FA3_OK;
    if (!ctx) {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.cache_dir = j->dir;
        j->st = fa3_context_create(&j->own, &o);
        ctx = j->own;
    }
    pthread_barrier_wait(j->go);
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = 64;
    cfg.mask = FA3_MASK_CAUSAL;
    fa3_kernel *k = NULL;
    if (j->st == FA3_OK)
        j->st = fa3_jit_get_kernel(ctx, &cfg, &k);
    if (j->st == FA3_OK)
        j->st = fa3_kernel_get_info(k, &j->info); /* source: this thread's call */
    if (j->st == FA3_OK)
        j->st = fa3_kernel_get_cubin(k, &j->cubin, &j->size);
    if (j->st != FA3_OK)
        snprintf(j->msg, sizeof j->msg, "%s", fa3_last_error_message());
    return NULL;
}

static void run_threads(int shared)
{
    char dir[512];
    fresh_dir(dir, sizeof dir, shared ? "threads-shared" : "threads");
    fa3_context *ctx = NULL;
    if (shared) {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.cache_dir = dir;
        assert_int_equal(fa3_context_create(&ctx, &o), FA3_OK);
    }
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    job jobs[N];
    pthread_t th[N];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N; i++) {
        jobs[i].ctx = ctx;
        jobs[i].dir = dir;
        jobs[i].go = &go;
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    int count[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].st != FA3_OK)
            fail_msg("thread %d: %s: %s", i, fa3_strerror(jobs[i].st), jobs[i].msg);
        assert_string_equal(jobs[i].info.cache_key, jobs[0].info.cache_key);
        assert_int_equal(jobs[i].size, jobs[0].size);
        assert_memory_equal(jobs[i].cubin, jobs[0].cubin, jobs[0].size);
        count[jobs[i].info.source % 3]++;
    }
    printf("  %d threads, %s: %d compiled, %d from disk, %d from memory\n", N,
           shared ? "one context" : "a context each", count[0], count[1], count[2]);
    if (shared) {
        assert_int_equal(count[FA3_SOURCE_COMPILED], 1);
        assert_int_equal(count[FA3_SOURCE_MEMORY], N - 1);
    } else {
        assert_int_equal(count[FA3_SOURCE_COMPILED], 1); /* the file lock works between threads */
        assert_int_equal(count[FA3_SOURCE_DISK], N - 1);
    }
    for (int i = 0; i < N; i++)
        fa3_context_free(jobs[i].own);
    fa3_context_free(ctx);
    pthread_barrier_destroy(&go);
    entry_and_index(dir, jobs[0].info.cache_key);
}

static void test_threads_contexts(void **state)
{
    (void)state;
    run_threads(0);
}

static void test_threads_shared(void **state)
{
    (void)state;
    run_threads(1);
}

static int group_setup(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("FA3JIT_TEST_FAIL");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-concurrency-XXXXXX");
    return mkdtemp(g_root) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rm_rf(g_root);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_concurrency CACHE_WORKER\n");
        return 2;
    }
    g_worker = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_processes_nolock),
        cmocka_unit_test(test_threads_contexts),
        cmocka_unit_test(test_threads_shared),
    };
    return cmocka_run_group_tests_name("concurrency", tests, group_setup, group_teardown);
}
