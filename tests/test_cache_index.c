/*
 * test_cache_index: the disk cache's index (src/runtime/cache_index.c, layout in cache.h), which
 * lets a warm load skip generating the PTX. No GPU; a fresh folder under /tmp, removed at the end.
 * FA3JIT_TEST_FAIL=codegen makes the generator fail, so a load that succeeds under it went through
 * the index, and one that fails did not use it.
 *   warm:     a cold build writes one index file, named by the key fa3_cache_index_key gives and
 *             naming the entry's key; a new context with the generator failing loads the same
 *             cubin from disk, with no PTX; without a build ID (hook "build-id") there is no index
 *             and the same load fails in the generator;
 *   damaged:  a missing, truncated, empty, zero-filled, longer, flipped (key, checksum, magic),
 *             older-format or another key's index file, a directory, FIFO or symbolic link in its
 *             place, an index naming a missing entry, another config's entry or the same config's
 *             entry of another plan (FA3JIT_PLAN_DEBUG): none is used (the load with the
 *             generator failing fails), the load without the fault comes from disk with the
 *             right key and cubin, and a good index file is back afterwards (not over the
 *             directory, which stays: the index store is quiet, the context has no warning);
 *   knobs:    FA3JIT_PLAN_DEBUG is in the index key (set, empty and unset give three keys), and
 *             each plan loads its own entry through its own index file;
 *   parse:    every truncation and single-byte change of a good index file is refused.
 * (16 processes sharing one index: test_concurrency.) The static library: the index is internal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "fa3jit.h"
#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "check.h"
#include "test_util.h"

static char g_root[256];
static int g_seq;

static void fresh_dir(char *out, size_t size, const char *tag)
{
    snprintf(out, size, "%s/%s-%d", g_root, tag, ++g_seq);
}

static fa3_config cfg_hd64(int causal)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 64; /* the quickest kernel to compile */
    c.mask = causal ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
    return c;
}

/* The one file in dir whose name ends with suffix (its name into name[64]); fails otherwise. */
static void only_file(const char *dir, const char *suffix, char *name)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    size_t ns = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl > ns && strcmp(de->d_name + nl - ns, suffix) == 0) {
            snprintf(name, 64, "%s", de->d_name);
            n++;
        }
    }
    closedir(d);
    assert_int_equal(n, 1);
}

/* The index key a context with backend b computes for cfg's forward kernel. */
static void index_key_of(const fa3_config *cfg, fa3_backend b, char out[33])
{
    fa3_config c;
    CHECK(fa3_config_canonicalize(cfg, &c));
    char ver[256];
    fa3_backend r = fa3_backend_resolve(b);
    CHECK(fa3_backend_version(r, ver, sizeof ver));
    fa3_cache_index_input in = {.kind = FA3_KERNEL_FWD, .config = &c,
                                .backend = fa3_backend_name(r), .backend_version = ver,
                                .arch = fa3_arch_name(c.arch)};
    assert_int_equal(fa3_cache_index_key(&in, out), 1);
    assert_int_equal(strspn(out, "0123456789abcdef"), 32);
    assert_int_equal(strlen(out), 32);
}

/* cfg's kernel from a new context on dir: the status; on success its source, key and cubin
   (malloc'd copy; NULL: not wanted) and whether its part kept PTX. */
static fa3_status load(const char *dir, const fa3_config *cfg, fa3_kernel_source *src,
                       char key[33], void **cubin, size_t *size, int *has_ptx)
{
    fa3_context *ctx = make_ctx(dir, FA3_BACKEND_AUTO, 0);
    fa3_kernel *k = NULL;
    fa3_status st = fa3_jit_get_kernel(ctx, cfg, &k);
    if (st == FA3_OK) {
        fa3_kernel_info in;
        CHECK(fa3_kernel_get_info(k, &in));
        *src = in.source;
        snprintf(key, 33, "%s", in.cache_key);
        if (has_ptx)
            *has_ptx = k->parts[0].ptx != NULL;
        if (cubin) {
            const void *c;
            CHECK(fa3_kernel_get_cubin(k, &c, size));
            *cubin = malloc(*size);
            assert_non_null(*cubin);
            memcpy(*cubin, c, *size);
        }
        assert_string_equal(fa3_context_warning(ctx), "");
    }
    fa3_context_free(ctx);
    return st;
}

/* The index file of ikey in dir names ekey. */
static void index_names(const char *dir, const char *ikey, const char *ekey)
{
    char got[33];
    assert_int_equal(fa3_cache_index_load(dir, ikey, got), 1);
    assert_string_equal(got, ekey);
}

static void spit(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_sum(uint8_t *b)
{
    uint64_t v = XXH3_64bits(b, 80);
    for (int i = 0; i < 8; i++)
        b[80 + i] = (uint8_t)(v >> (8 * i));
}

/* ---------------------------------------------------------------- tests */

/* One folder with the hd64 causal kernel built cold: its dir, entry key, index key, cubin. */
static char g_dir[512], g_key[33], g_ikey[33];
static void *g_cubin;
static size_t g_cubin_size;

static void test_warm(void **state)
{
    (void)state;
    const uint8_t *id;
    size_t n = fa3_cache_build_id(&id);
    assert_true(n >= 8 && n <= 64); /* gcc's default: 20 bytes (sha1) */
    printf("  build ID: %zu bytes\n", n);

    fresh_dir(g_dir, sizeof g_dir, "warm");
    fa3_config cfg = cfg_hd64(1);
    fa3_kernel_source src;
    int has_ptx = 0;
    CHECK(load(g_dir, &cfg, &src, g_key, &g_cubin, &g_cubin_size, &has_ptx));
    assert_int_equal(src, FA3_SOURCE_COMPILED);
    assert_int_equal(has_ptx, 1);
    char name[64], want[64];
    index_key_of(&cfg, FA3_BACKEND_AUTO, g_ikey);
    snprintf(want, sizeof want, "%s" FA3_CACHE_INDEX_SUFFIX, g_ikey);
    only_file(g_dir, FA3_CACHE_INDEX_SUFFIX, name);
    assert_string_equal(name, want);
    assert_string_not_equal(g_ikey, g_key);
    index_names(g_dir, g_ikey, g_key);

    /* the generator failing: the kernel still comes from disk, through the index, with no PTX */
    arm("codegen");
    char key[33];
    void *cubin = NULL;
    size_t size = 0;
    fa3_status st = load(g_dir, &cfg, &src, key, &cubin, &size, &has_ptx);
    arm(NULL);
    CHECK(st);
    assert_int_equal(src, FA3_SOURCE_DISK);
    assert_string_equal(key, g_key);
    assert_int_equal(has_ptx, 0);
    assert_int_equal(size, g_cubin_size);
    assert_memory_equal(cubin, g_cubin, size);
    free(cubin);

    /* no build ID: no index, so the generator runs (and fails) */
    arm("codegen,build-id");
    st = load(g_dir, &cfg, &src, key, NULL, NULL, NULL);
    arm(NULL);
    assert_int_equal(st, FA3_ERR_INTERNAL);
    assert_non_null(strstr(fa3_last_error_message(), "the generator fails"));
    /* and without the fault such a process loads through the PTX key, writing no index */
    char other[512];
    fresh_dir(other, sizeof other, "no-build-id");
    arm("build-id");
    CHECK(load(other, &cfg, &src, key, NULL, NULL, &has_ptx));
    assert_int_equal(src, FA3_SOURCE_COMPILED);
    CHECK(load(other, &cfg, &src, key, NULL, NULL, &has_ptx));
    arm(NULL);
    assert_int_equal(src, FA3_SOURCE_DISK);
    assert_int_equal(has_ptx, 1);
    assert_string_equal(key, g_key);
    assert_int_equal(fa3_cache_index_load(other, g_ikey, key), 0);
}

/* Builds cfg (with FA3JIT_PLAN_DEBUG = knobs unless NULL) into dir; its entry key into key. */
static void build_into(const char *dir, const fa3_config *cfg, const char *knobs, char key[33])
{
    if (knobs)
        setenv("FA3JIT_PLAN_DEBUG", knobs, 1);
    fa3_kernel_source src;
    CHECK(load(dir, cfg, &src, key, NULL, NULL, NULL));
    unsetenv("FA3JIT_PLAN_DEBUG");
}

static void test_damaged(void **state)
{
    (void)state;
    assert_true(g_key[0]); /* test_warm ran */
    fa3_config cfg = cfg_hd64(1), other_cfg = cfg_hd64(0);
    char other_key[33], debug_key[33];
    build_into(g_dir, &other_cfg, NULL, other_key);
    build_into(g_dir, &cfg, "dbg_no_softmax=1", debug_key);
    assert_string_not_equal(other_key, g_key);
    assert_string_not_equal(debug_key, g_key);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s" FA3_CACHE_INDEX_SUFFIX, g_dir, g_ikey);
    uint8_t good[FA3_CACHE_INDEX_SIZE];
    fa3_cache_index_write(good, g_ikey, g_key);

    static const char *damage[] = {
        "missing", "truncated", "empty", "zero-filled", "a byte longer", "entry key flipped",
        "checksum flipped", "magic flipped", "older format (checksum fixed)",
        "another index key's file", "a directory", "a FIFO", "a symbolic link to a good copy",
        "naming a missing entry", "naming another config's entry",
        "naming the entry of another plan"};
    for (int d = 0; d < (int)(sizeof damage / sizeof damage[0]); d++) {
        uint8_t b[FA3_CACHE_INDEX_SIZE + 1];
        memcpy(b, good, sizeof good);
        b[FA3_CACHE_INDEX_SIZE] = '\n';
        size_t n = sizeof good;
        unlink(path);
        int kind = 0; /* 0 write b[0..n); 1 nothing; 2 directory; 3 FIFO; 4 symlink */
        switch (d) {
        case 0: kind = 1; break;
        case 1: n = 44; break;
        case 2: n = 0; break;
        case 3: memset(b, 0, n); break;
        case 4: n++; break;
        case 5: b[50] ^= 0x01; break;
        case 6: b[84] ^= 0x20; break;
        case 7: b[0] ^= 0x20; break;
        case 8: put32(b + 8, FA3_CACHE_INDEX_FORMAT - 1); fix_sum(b); break;
        case 9: fa3_cache_index_write(b, "0123456789abcdef0123456789abcdef", g_key); break;
        case 10: kind = 2; break;
        case 11: kind = 3; break;
        case 12: kind = 4; break;
        case 13: fa3_cache_index_write(b, g_ikey, "0123456789abcdef0123456789abcdef"); break;
        case 14: fa3_cache_index_write(b, g_ikey, other_key); break;
        case 15: fa3_cache_index_write(b, g_ikey, debug_key); break;
        }
        char aside[1100];
        snprintf(aside, sizeof aside, "%s.good", path);
        if (kind == 0)
            spit(path, b, n);
        else if (kind == 2)
            assert_int_equal(mkdir(path, 0700), 0);
        else if (kind == 3)
            assert_int_equal(mkfifo(path, 0600), 0);
        else if (kind == 4) {
            spit(aside, good, sizeof good);
            assert_int_equal(symlink(aside, path), 0);
        }
        char key[33];
        fa3_kernel_source src;
        arm("codegen");
        fa3_status st = load(g_dir, &cfg, &src, key, NULL, NULL, NULL);
        arm(NULL);
        if (st != FA3_ERR_INTERNAL)
            fail_msg("%s: the index was used (status %d)", damage[d], (int)st);
        void *cubin = NULL;
        size_t size = 0;
        CHECK(load(g_dir, &cfg, &src, key, &cubin, &size, NULL));
        assert_int_equal(src, FA3_SOURCE_DISK);
        assert_string_equal(key, g_key);
        assert_int_equal(size, g_cubin_size);
        assert_memory_equal(cubin, g_cubin, size);
        free(cubin);
        if (kind == 2) { /* the store could not replace it, quietly */
            struct stat sb;
            assert_int_equal(lstat(path, &sb), 0);
            assert_true(S_ISDIR(sb.st_mode));
            assert_int_equal(rmdir(path), 0);
            CHECK(load(g_dir, &cfg, &src, key, NULL, NULL, NULL));
        }
        unlink(aside);
        index_names(g_dir, g_ikey, g_key);
        printf("  %s: not used, rebuilt\n", damage[d]);
    }
}

static void test_knobs(void **state)
{
    (void)state;
    fa3_config cfg = cfg_hd64(1);
    char unset_key[33], empty_key[33], set_key[33];
    unsetenv("FA3JIT_PLAN_DEBUG");
    index_key_of(&cfg, FA3_BACKEND_AUTO, unset_key);
    setenv("FA3JIT_PLAN_DEBUG", "", 1);
    index_key_of(&cfg, FA3_BACKEND_AUTO, empty_key);
    setenv("FA3JIT_PLAN_DEBUG", "dbg_no_softmax=1", 1);
    index_key_of(&cfg, FA3_BACKEND_AUTO, set_key);
    unsetenv("FA3JIT_PLAN_DEBUG");
    assert_string_not_equal(unset_key, empty_key);
    assert_string_not_equal(unset_key, set_key);
    assert_string_not_equal(empty_key, set_key);

    char dir[512], dkey[33], key[33];
    fresh_dir(dir, sizeof dir, "knobs");
    build_into(dir, &cfg, NULL, key);
    build_into(dir, &cfg, "dbg_no_softmax=1", dkey);
    assert_string_not_equal(dkey, key);
    index_names(dir, unset_key, key);
    index_names(dir, set_key, dkey);
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            setenv("FA3JIT_PLAN_DEBUG", "dbg_no_softmax=1", 1);
        arm("codegen");
        fa3_kernel_source src;
        char got[33];
        fa3_status st = load(dir, &cfg, &src, got, NULL, NULL, NULL);
        arm(NULL);
        unsetenv("FA3JIT_PLAN_DEBUG");
        CHECK(st);
        assert_int_equal(src, FA3_SOURCE_DISK);
        assert_string_equal(got, pass ? dkey : key);
    }
}

static void test_parse(void **state)
{
    (void)state;
    const char *ik = "00112233445566778899aabbccddeeff", *ek = "ffeeddccbbaa99887766554433221100";
    uint8_t b[FA3_CACHE_INDEX_SIZE];
    fa3_cache_index_write(b, ik, ek);
    char got[33];
    assert_int_equal(fa3_cache_index_parse(b, sizeof b, ik, got), 1);
    assert_string_equal(got, ek);
    assert_int_equal(fa3_cache_index_parse(b, sizeof b, NULL, got), 1);
    assert_int_equal(fa3_cache_index_parse(b, sizeof b, ek, got), 0); /* another name */
    for (size_t n = 0; n < sizeof b; n++)
        assert_int_equal(fa3_cache_index_parse(b, n, ik, got), 0);
    for (size_t i = 0; i < sizeof b; i++)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            if (fa3_cache_index_parse(b, sizeof b, ik, got))
                fail_msg("byte %zu bit %d flipped: accepted", i, bit);
            b[i] ^= (uint8_t)(1u << bit);
        }
    assert_int_equal(fa3_cache_index_parse(b, sizeof b, ik, got), 1);
}

static int setup(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("FA3JIT_CACHE_DIR");
    unsetenv("FA3JIT_PLAN_DEBUG");
    unsetenv("FA3JIT_TEST_FAIL");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-index-XXXXXX");
    if (!mkdtemp(g_root)) {
        printf("mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(g_cubin);
    rm_rf(g_root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_warm),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_knobs),
    };
    return cmocka_run_group_tests_name("cache_index", all, setup, teardown);
}
