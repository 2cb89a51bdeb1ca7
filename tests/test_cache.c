/*
 * test_cache: cache keys and the disk cache, without a GPU, in a fresh folder under /tmp (removed
 * at the end). For each compile backend of this build (nvJitLink always, the PTX Compiler API when
 * FA3_HAVE_PTX_COMPILER):
 *   - keys: the same config gives the same key (in two contexts, and from fa3_cache_key_for); each
 *     field that changes the binary (head_dim, dtype, mask, softcap, block_n, stages, backend)
 *     gives a different key; configs with equal canonical forms share one;
 *   - first fa3_jit_get_kernel → COMPILED, one entry file and its index file; again in the same context → the same
 *     kernel pointer, MEMORY; a new context on the same folder → DISK with identical cubin bytes;
 *   - a truncated entry, a flipped payload byte, a flipped header byte, a foreign file, an empty
 *     file, a zero-filled one of the entry's size (what a machine crash can leave of an entry
 *     stored without FA3JIT_CACHE_FSYNC), trailing bytes, an older format version, another
 *     key's entry under this name, a header naming another config, an unknown kernel kind or
 *     another config field count (checksums fixed up) → the next new context rebuilds
 *     (COMPILED), gets a valid cubin, and rewrites a good entry (DISK after);
 *   - the kernel kind is part of the key; the config field table covers fa3_config;
 *   - the entry parser on an in-memory entry: every truncation and every single-byte flip is
 *     refused; the header keeps the canonical config, backend, resources and creation time;
 *   - cache file patterns: listing and clearing touch fa3jit's files only;
 *   - a kernel of a FA3JIT_PLAN_DEBUG plan: marked (fa3_kernel_plan_debug, its entry's header),
 *     apart from the default kernel's entry, loaded back with its mark; the default unmarked;
 *   - disable_disk_cache, or $FA3JIT_CACHE_DISABLE=1 → nothing written, no warning;
 *   - the cache folder's resolution from the options and the environment.
 *
 * Over 600 lines on purpose: every damaged-entry and key case runs against each backend through
 * one fixture (the folder, the contexts, the entry reader); split files would repeat it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "fa3jit.h"
#include "fa3jit_build_config.h"
#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "check.h"
#include "test_util.h"

static char g_root[256]; /* the test's temp folder */

/* ---------------------------------------------------------------- helpers */

static int g_count;
static int count_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)sb;
    (void)ftw;
    if (flag == FTW_F || flag == FTW_SL)
        g_count++;
    return 0;
}

/* Regular files under path (0 if path does not exist). */
static int count_files(const char *path)
{
    g_count = 0;
    nftw(path, count_entry, 16, FTW_PHYS);
    return g_count;
}

static void subdir(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", g_root, name);
}

static fa3_config cfg_default(void)
{
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = 64; /* the smallest kernel: quickest to compile */
    c.mask = FA3_MASK_CAUSAL;
    return c;
}

/* Gets cfg's kernel from ctx and checks the source it reports. */
static fa3_kernel *get(fa3_context *ctx, const fa3_config *cfg, fa3_kernel_source want,
                       fa3_kernel_info *info)
{
    fa3_kernel *k = NULL;
    CHECK(fa3_jit_get_kernel(ctx, cfg, &k));
    assert_non_null(k);
    CHECK(fa3_kernel_get_info(k, info));
    static const char *names[] = {"COMPILED", "DISK", "MEMORY"};
    if (info->source != want)
        fail_msg("kernel source %s, expected %s", names[info->source % 3], names[want % 3]);
    return k;
}

static void get_cubin(const fa3_kernel *k, const void **data, size_t *size)
{
    CHECK(fa3_kernel_get_cubin(k, data, size));
    assert_non_null(*data);
    assert_true(*size > 64);
    assert_memory_equal(*data, "\x7f" "ELF", 4); /* a loadable cubin is an ELF image */
}

/* The key fa3_cache_key_for computes for cfg and backend (b resolved like a context does). */
static void key_of(const fa3_config *cfg, fa3_backend b, char key[33])
{
    fa3_config c;
    CHECK(fa3_config_canonicalize(cfg, &c));
    char *ptx = NULL;
    size_t len = 0;
    CHECK(fa3_emit_ptx(&c, &ptx, &len));
    char ver[256];
    CHECK(fa3_backend_version(fa3_backend_resolve(b), ver, sizeof ver));
    CHECK(fa3_cache_key_for(&c, ptx, len, b, ver, key));
    fa3_free(ptx);
    assert_int_equal(strlen(key), 32);
    assert_int_equal(strspn(key, "0123456789abcdef"), 32);
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    fputc(c ^ 0x5A, f);
    assert_int_equal(fclose(f), 0);
}

static void spit(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes the header checksum of an entry image (to forge well-formed but wrong headers). */
static void fix_header_sum(unsigned char *h)
{
    uint64_t v = XXH3_64bits(h, FA3_CACHE_OFF_HEADER_SUM);
    for (int i = 0; i < 8; i++)
        h[FA3_CACHE_OFF_HEADER_SUM + i] = (unsigned char)(v >> (8 * i));
}

/* ---------------------------------------------------------------- tests */

static void test_keys(void **state)
{
    fa3_backend b = *(fa3_backend *)*state;
    fa3_config base = cfg_default();
    char k0[33], k1[33];
    key_of(&base, b, k0);
    key_of(&base, b, k1);
    assert_string_equal(k0, k1); /* stable */

    /* equal canonical forms share a key */
    fa3_config canon;
    CHECK(fa3_config_canonicalize(&base, &canon));
    key_of(&canon, b, k1);
    assert_string_equal(k0, k1);
    fa3_config hv = base;
    hv.head_dim_v = base.head_dim;
    key_of(&hv, b, k1);
    assert_string_equal(k0, k1);

    /* each binary-changing field changes the key; all keys distinct */
    fa3_config variants[9];
    int n = 0;
    variants[n] = base, variants[n++].head_dim = 128;
    variants[n] = base, variants[n++].head_dim = 256;
    variants[n] = base, variants[n++].dtype = FA3_DTYPE_FP16;
    variants[n] = base, variants[n++].mask = FA3_MASK_NONE;
    variants[n] = base, variants[n++].mask = FA3_MASK_LOCAL;
    variants[n] = base, variants[n++].softcap = 1;
    variants[n] = canon, variants[n++].block_n = canon.block_n == 64 ? 128 : 64;
    variants[n] = canon, variants[n++].stages = canon.stages == 2 ? 3 : 2;
    char keys[10][33];
    memcpy(keys[0], k0, 33);
    int nk = 1;
    for (int i = 0; i < n; i++) {
        fa3_config tmp;
        if (fa3_config_canonicalize(&variants[i], &tmp) != FA3_OK) {
            printf("  note: variant %d refused: %s\n", i, fa3_last_error_message());
            assert_int_equal(variants[i].mask, FA3_MASK_LOCAL); /* only local may be refused */
            continue;
        }
        key_of(&variants[i], b, keys[nk]);
        for (int j = 0; j < nk; j++)
            if (strcmp(keys[nk], keys[j]) == 0)
                fail_msg("variant %d has the same key as an earlier config: %s", i, keys[nk]);
        nk++;
    }
    printf("  %s: %d distinct keys, default %s\n", fa3_backend_name(b), nk, k0);

    /* the backend is part of the key */
    if (b != FA3_BACKEND_NVJITLINK) {
        key_of(&base, FA3_BACKEND_NVJITLINK, k1);
        assert_string_not_equal(k0, k1);
    }
}

static void test_roundtrip(void **state)
{
    fa3_backend b = *(fa3_backend *)*state;
    char dir[512], path[1024];
    subdir(dir, sizeof dir, fa3_backend_name(b));
    fa3_config cfg = cfg_default();
    char want_key[33];
    key_of(&cfg, b, want_key);

    /* 1. compiled, stored */
    fa3_context *c1 = make_ctx(dir, b, 0);
    assert_int_equal(fa3_context_backend(c1), b);
    assert_string_equal(fa3_context_cache_dir(c1), dir);
    fa3_kernel_info i1;
    fa3_kernel *k1 = get(c1, &cfg, FA3_SOURCE_COMPILED, &i1);
    assert_int_equal(i1.backend, b);
    assert_string_equal(i1.cache_key, want_key); /* the key the context used is the key_for one */
    assert_true(i1.compile_ms > 0);
    const void *cub1;
    size_t n1;
    get_cubin(k1, &cub1, &n1);
    assert_int_equal(i1.cubin_size, n1);
    printf("  %s: compiled %zu-byte cubin in %.0f ms, key %s, regs %d\n", fa3_backend_name(b), n1,
           i1.compile_ms, i1.cache_key, i1.num_regs);
    CHECK(fa3_cache_entry_path(dir, i1.cache_key, path, sizeof path));
    long entry_size = file_size(path);
    assert_true(entry_size > (long)n1);
    assert_int_equal(count_files(dir), 2); /* the entry and its index file (test_cache_index) */

    /* 2. same context: the same kernel from memory */
    fa3_kernel_info i2;
    fa3_kernel *k2 = get(c1, &cfg, FA3_SOURCE_MEMORY, &i2);
    assert_ptr_equal(k1, k2);
    assert_string_equal(i2.cache_key, i1.cache_key);

    /* 3. new context, same folder: from disk, identical bytes and resources */
    fa3_context *c2 = make_ctx(dir, b, 0);
    fa3_kernel_info i3;
    fa3_kernel *k3 = get(c2, &cfg, FA3_SOURCE_DISK, &i3);
    assert_ptr_not_equal(k3, k1);
    assert_string_equal(i3.cache_key, i1.cache_key);
    assert_int_equal(i3.backend, b);
    const void *cub3;
    size_t n3;
    get_cubin(k3, &cub3, &n3);
    assert_int_equal(n3, n1);
    assert_memory_equal(cub3, cub1, n1);
    assert_int_equal(i3.num_regs, i1.num_regs);
    assert_int_equal(i3.spill_store_bytes, i1.spill_store_bytes);
    assert_int_equal(i3.spill_load_bytes, i1.spill_load_bytes);
    assert_int_equal(i3.stack_bytes, i1.stack_bytes);
    assert_int_equal(i3.shared_bytes, i1.shared_bytes);
    assert_int_equal(i3.threads, i1.threads);
    assert_true(i3.compile_ms == 0);
    fa3_context_free(c2);

    /* 4. damaged entries: each is rebuilt, the result is valid, and a good entry is rewritten */
    /* Another config's entry, to copy under this key's name. */
    fa3_config other = cfg;
    other.head_dim = 128;
    fa3_kernel_info io;
    get(c1, &other, FA3_SOURCE_COMPILED, &io);
    char other_path[1024];
    CHECK(fa3_cache_entry_path(dir, io.cache_key, other_path, sizeof other_path));
    size_t good_size = 0;

    static const char *damage[] = {"truncated", "payload byte flipped", "header byte flipped",
                                   "foreign file", "empty file", "trailing bytes",
                                   "older format version", "another key's entry",
                                   "header naming another config",
                                   "header naming an unknown kernel kind",
                                   "config of another field count",
                                   "zero-filled (written, never flushed)"};
    for (int d = 0; d < (int)(sizeof damage / sizeof damage[0]); d++) {
        switch (d) {
        case 0:
            assert_int_equal(truncate(path, entry_size / 2), 0);
            break;
        case 1:
            flip_byte(path, entry_size - (long)n1 / 2 - 1); /* inside the cubin */
            break;
        case 2:
            flip_byte(path, 20); /* inside the header */
            break;
        case 3: {
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            fputs("not a cache entry\n", f);
            fclose(f);
            break;
        }
        case 4:
            spit(path, "", 0);
            break;
        case 5: {
            unsigned char *p = slurp(path, &good_size);
            p = realloc(p, good_size + 1);
            assert_non_null(p);
            p[good_size] = 'x';
            spit(path, p, good_size + 1);
            free(p);
            break;
        }
        case 6: { /* the previous format with a valid header checksum: refused, not misread */
            unsigned char *p = slurp(path, &good_size);
            put32(p + FA3_CACHE_OFF_VERSION, FA3_CACHE_FORMAT - 1);
            fix_header_sum(p);
            spit(path, p, good_size);
            free(p);
            break;
        }
        case 7: {
            size_t n = 0;
            unsigned char *p = slurp(other_path, &n);
            spit(path, p, n);
            free(p);
            break;
        }
        case 8: { /* right key, checksums valid, but built for head_dim 128 */
            unsigned char *p = slurp(path, &good_size);
            put32(p + FA3_CACHE_OFF_CONFIG, 128);
            fix_header_sum(p);
            spit(path, p, good_size);
            free(p);
            break;
        }
        case 9:    /* checksums valid, a kind this library has no kernel of */
        case 10: { /* checksums valid, written by a library with one config field more */
            unsigned char *p = slurp(path, &good_size);
            if (d == 9)
                put32(p + FA3_CACHE_OFF_KIND, FA3_KERNEL_NUM_KINDS);
            else
                put32(p + FA3_CACHE_OFF_CONFIG_COUNT, FA3_CONFIG_NUM_FIELDS + 1);
            fix_header_sum(p);
            spit(path, p, good_size);
            free(p);
            break;
        }
        case 11: { /* the size in the inode, the blocks never written (ext4 after a crash) */
            unsigned char *p = slurp(path, &good_size);
            memset(p, 0, good_size);
            spit(path, p, good_size);
            free(p);
            break;
        }
        }
        fa3_context *c = make_ctx(dir, b, 0);
        fa3_kernel_info ir;
        fa3_kernel *kr = get(c, &cfg, FA3_SOURCE_COMPILED, &ir);
        const void *cr;
        size_t nr;
        get_cubin(kr, &cr, &nr);
        assert_string_equal(ir.cache_key, i1.cache_key);
        /* the compile is deterministic: the rebuilt cubin is the original one */
        assert_int_equal(nr, n1);
        assert_memory_equal(cr, cub1, n1);
        fa3_context_free(c);
        /* a good entry is back (its size may differ by the compiler log, e.g. timings in it) */
        assert_true(file_size(path) > (long)n1);
        c = make_ctx(dir, b, 0);
        get(c, &cfg, FA3_SOURCE_DISK, &ir);
        fa3_context_free(c);
        printf("  %s: %s entry rebuilt and rewritten\n", fa3_backend_name(b), damage[d]);
    }
    /* the two entries and their index files: no temporary or lock files */
    assert_int_equal(count_files(dir), 4);
    fa3_context_free(c1);
}

/* The parser itself, on an entry written by fa3_cache_store: the header keeps what ls shows;
   every truncation and every single-byte change is refused (and fa3_cache_load refuses the same
   bytes on disk). */
static void test_parse(void **state)
{
    (void)state;
    char dir[512], path[1024];
    subdir(dir, sizeof dir, "parse");
    static const char key[] = "00112233445566778899aabbccddeeff";
    static const unsigned char cubin[] = "\x7f" "ELF not really a cubin, but bytes";
    fa3_cache_meta m;
    memset(&m, 0, sizeof m);
    m.num_regs = 168;
    m.spill_store_bytes = 0;
    m.spill_load_bytes = 4;
    m.stack_bytes = 8;
    m.has_warning = 1;
    m.backend = FA3_BACKEND_NVJITLINK;
    fa3_config c = cfg_default();
    CHECK(fa3_config_canonicalize(&c, &m.config));
    m.created = 1700000000;
    snprintf(m.plan_debug, sizeof m.plan_debug, "wg3=0,\tx"); /* stored as "...,?x" */
    CHECK(fa3_cache_store(dir, key, cubin, sizeof cubin, "info: a log", &m, 0, NULL));
    CHECK(fa3_cache_entry_path(dir, key, path, sizeof path));
    size_t size = 0;
    unsigned char *img = slurp(path, &size);
    assert_int_equal(size, FA3_CACHE_HEADER_SIZE + sizeof cubin + strlen("info: a log"));

    fa3_cache_view v;
    const char *why = "unset";
    assert_true(fa3_cache_parse(img, size, key, &v, &why));
    assert_null(why);
    assert_string_equal(v.key, key);
    assert_int_equal(v.cubin_size, sizeof cubin);
    assert_memory_equal(v.cubin, cubin, sizeof cubin);
    assert_int_equal(v.log_size, strlen("info: a log"));
    assert_memory_equal(v.log, "info: a log", v.log_size);
    assert_int_equal(v.meta.num_regs, 168);
    assert_int_equal(v.meta.spill_load_bytes, 4);
    assert_int_equal(v.meta.stack_bytes, 8);
    assert_int_equal(v.meta.has_warning, 1);
    assert_int_equal(v.meta.backend, FA3_BACKEND_NVJITLINK);
    assert_int_equal(v.meta.kind, FA3_KERNEL_FWD);
    assert_memory_equal(&v.meta.config, &m.config, sizeof m.config);
    assert_int_equal(v.meta.created, 1700000000);
    assert_string_equal(v.meta.plan_debug, "wg3=0,?x");
    /* the plan debug text: printable, then NULs to the end of its field (checksum fixed up) */
    for (int bad = 0; bad < 3; bad++) {
        unsigned char *f = malloc(size);
        assert_non_null(f);
        memcpy(f, img, size);
        unsigned char *t = f + FA3_CACHE_OFF_PLAN_DEBUG;
        if (bad == 0)
            t[3] = '\n';
        else if (bad == 1)
            t[FA3_CACHE_PLAN_DEBUG_SIZE - 1] = 'x'; /* after the NUL */
        else
            memset(t, 'x', FA3_CACHE_PLAN_DEBUG_SIZE); /* no NUL */
        fix_header_sum(f);
        assert_false(fa3_cache_parse(f, size, key, &v, &why));
        assert_string_equal(why, "malformed plan debug text");
        free(f);
    }
    /* the kernel kind and the config's field count (checksum fixed up) */
    for (int bad = 0; bad < 3; bad++) {
        unsigned char *f = malloc(size);
        assert_non_null(f);
        memcpy(f, img, size);
        if (bad == 0)
            put32(f + FA3_CACHE_OFF_KIND, FA3_KERNEL_NUM_KINDS);
        else if (bad == 1)
            put32(f + FA3_CACHE_OFF_CONFIG_COUNT, FA3_CONFIG_NUM_FIELDS - 1);
        else
            put32(f + FA3_CACHE_OFF_CONFIG + 4 * FA3_CONFIG_NUM_FIELDS, 1); /* an unused slot */
        fix_header_sum(f);
        assert_false(fa3_cache_parse(f, size, key, &v, &why));
        static const char *const want[] = {
            "unknown kernel kind",
            "config of another field count (written by another fa3jit version)",
            "malformed config slots"};
        assert_string_equal(why, want[bad]);
        free(f);
    }
    assert_true(fa3_cache_parse(img, size, NULL, &v, NULL)); /* any key (listing) */
    assert_false(fa3_cache_parse(img, size, "ffffffffffffffffffffffffffffffff", &v, &why));
    assert_string_equal(why, "key differs from the file name");

    void *cb;
    size_t cn;
    char *log;
    fa3_cache_meta lm;
    assert_true(fa3_cache_load(dir, key, &m.config, &cb, &cn, &log, &lm));
    assert_int_equal(cn, sizeof cubin);
    assert_memory_equal(cb, cubin, cn);
    assert_string_equal(log, "info: a log");
    free(cb);
    free(log);
    fa3_config wrong = m.config;
    wrong.stages++;
    assert_false(fa3_cache_load(dir, key, &wrong, &cb, &cn, &log, &lm)); /* other config */
    assert_null(cb);

    /* every truncation */
    for (size_t n = 0; n < size; n++) {
        if (fa3_cache_parse(img, n, key, &v, &why))
            fail_msg("a %zu-byte prefix of a %zu-byte entry parsed", n, size);
        assert_non_null(why);
    }
    static const size_t cuts[] = {0, 1, 8, FA3_CACHE_HEADER_SIZE - 1, FA3_CACHE_HEADER_SIZE,
                                  FA3_CACHE_HEADER_SIZE + 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(path, img, cuts[i]);
        assert_false(fa3_cache_load(dir, key, NULL, &cb, &cn, &log, &lm));
    }
    spit(path, img, size - 1);
    assert_false(fa3_cache_load(dir, key, NULL, &cb, &cn, &log, &lm));
    /* every single-byte change (both checksums cover every byte) */
    int refused = 0;
    for (size_t i = 0; i < size; i++) {
        img[i] ^= 0x01;
        if (fa3_cache_parse(img, size, key, &v, &why))
            fail_msg("an entry with byte %zu changed parsed", i);
        refused++;
        img[i] ^= 0x01;
    }
    spit(path, img, size);
    assert_true(fa3_cache_load(dir, key, NULL, &cb, &cn, &log, &lm)); /* restored */
    free(cb);
    free(log);
    printf("  all %zu truncations and %d single-byte flips of a %zu-byte entry refused\n", size,
           refused, size);
    free(img);
}

/* The kernel kind is part of the key: the same config, PTX, backend and arch give another key
   for another kind; fa3_cache_key_for is the forward kernel's key. */
static void test_key_kind(void **state)
{
    (void)state;
    fa3_config c = cfg_default();
    CHECK(fa3_config_canonicalize(&c, &c));
    static const char ptx[] = "// not really PTX";
    fa3_cache_key_input in = {.kind = FA3_KERNEL_FWD, .config = &c, .ptx = ptx,
                              .ptx_len = sizeof ptx - 1, .generator = FA3_GENERATOR_VERSION,
                              .backend = fa3_backend_name(FA3_BACKEND_NVJITLINK),
                              .backend_version = "v", .arch = "sm_90a"};
    char fwd[33], other[33], via_for[33];
    CHECK(fa3_cache_key(&in, fwd));
    CHECK(fa3_cache_key_for(&c, ptx, sizeof ptx - 1, FA3_BACKEND_NVJITLINK, "v", via_for));
    assert_string_equal(fwd, via_for);
    in.kind = (fa3_kernel_kind)1;
    CHECK(fa3_cache_key(&in, other));
    assert_string_not_equal(fwd, other);
    in.config = NULL;
    assert_int_equal(fa3_cache_key(&in, other), FA3_ERR_INVALID_ARGUMENT);
}

/* The field table covers fa3_config: one row per member, each at its own offset; the values
   serialize and come back; describe walks it. */
static void test_config_table(void **state)
{
    (void)state;
    size_t covered = 0;
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++) {
        const fa3_config_field *f = &fa3_config_fields[i];
        for (int j = 0; j < i; j++)
            assert_true(fa3_config_fields[j].offset != f->offset);
        assert_true(f->offset + sizeof(int32_t) <= sizeof(fa3_config));
        assert_true(f->lo <= f->hi);
        covered += sizeof(int32_t);
    }
    assert_int_equal(covered, sizeof(fa3_config) - offsetof(fa3_config, head_dim));
    fa3_config c, back;
    fa3_config_init(&c);
    c.head_dim = 192;
    c.head_dim_v = 128;
    c.dtype = FA3_DTYPE_FP16;
    c.mask = FA3_MASK_LOCAL;
    c.softcap = 1;
    CHECK(fa3_config_canonicalize(&c, &c));
    assert_null(fa3_config_out_of_range(&c));
    int32_t values[FA3_CONFIG_NUM_FIELDS];
    fa3_config_to_values(&c, values);
    assert_int_equal(values[0], 192); /* head_dim first: the cache header's first slot */
    fa3_config_from_values(&back, values);
    assert_memory_equal(&back, &c, sizeof c);
    assert_true(fa3_config_equal(&back, &c));
    back.stages++;
    assert_false(fa3_config_equal(&back, &c));
    char desc[64];
    CHECK(fa3_config_describe(&c, desc, sizeof desc));
    char want[64];
    snprintf(want, sizeof want, "hd192x128 fp16 local softcap sm_90a bn%d st%d", c.block_n,
             c.stages);
    assert_string_equal(desc, want);
    back = c;
    back.stages = 0; /* not canonical: outside the stored range */
    assert_string_equal(fa3_config_out_of_range(&back), "stages");
}

/* fa3jit's file names, and ls/clear touching nothing else. */
/* A kernel whose plan FA3JIT_PLAN_DEBUG changed (a benchmark variant: dbg_no_softmax gives wrong
   results on purpose) is marked as such in the kernel and in its cache entry, and its entry is
   apart from the default kernel's; a default kernel has no mark. */
static void test_debug_plan(void **state)
{
    (void)state;
    char dir[512];
    subdir(dir, sizeof dir, "debug-plan");
    fa3_config cfg = cfg_default();
    fa3_kernel_info def_info, dbg_info;
    unsetenv("FA3JIT_PLAN_DEBUG");
    fa3_context *c = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
    fa3_kernel *def = get(c, &cfg, FA3_SOURCE_COMPILED, &def_info);
    assert_string_equal(fa3_kernel_plan_debug(def), "");
    fa3_context_free(c);

    setenv("FA3JIT_PLAN_DEBUG", "dbg_no_softmax=1", 1);
    for (int pass = 0; pass < 2; pass++) { /* compiled, then from the disk */
        c = make_ctx(dir, FA3_BACKEND_NVJITLINK, 0);
        fa3_kernel *k = get(c, &cfg, pass ? FA3_SOURCE_DISK : FA3_SOURCE_COMPILED, &dbg_info);
        assert_string_equal(fa3_kernel_plan_debug(k), "dbg_no_softmax=1");
        assert_string_not_equal(dbg_info.cache_key, def_info.cache_key);
        fa3_context_free(c);
    }
    unsetenv("FA3JIT_PLAN_DEBUG");
    assert_string_equal(fa3_kernel_plan_debug(NULL), "");

    fa3_cache_file *files = NULL;
    size_t n = 0;
    CHECK(fa3_cache_list(dir, &files, &n));
    assert_int_equal(n, 4); /* two entries, and an index file each: the knobs are in its key */
    int marked = 0, indexes = 0;
    for (size_t i = 0; i < n; i++) {
        if (files[i].kind == FA3_CACHE_FILE_INDEX) {
            indexes++;
            continue;
        }
        assert_int_equal(files[i].kind, FA3_CACHE_FILE_ENTRY);
        assert_true(files[i].valid);
        const char *want = strcmp(files[i].view.key, dbg_info.cache_key) == 0 ? "dbg_no_softmax=1"
                                                                                : "";
        assert_string_equal(files[i].view.meta.plan_debug, want);
        marked += want[0] != '\0';
    }
    assert_int_equal(marked, 1);
    assert_int_equal(indexes, 2);
    fa3_free(files);
}

static void test_listing(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        fa3_cache_file_kind kind;
    } names[] = {
        {"00112233445566778899aabbccddeeff.fa3k", FA3_CACHE_FILE_ENTRY},
        {"00112233445566778899aabbccddeeff.lock", FA3_CACHE_FILE_LOCK},
        {".00112233445566778899aabbccddeeff.tmp.AbC123", FA3_CACHE_FILE_TEMP},
        {"00112233445566778899aabbccddeeff.fa3x", FA3_CACHE_FILE_INDEX},
        {"00112233445566778899AABBCCDDEEFF.fa3x", FA3_CACHE_FILE_OTHER}, /* uppercase */
        {"00112233445566778899aabbccddeeff.fa3x.old", FA3_CACHE_FILE_OTHER},
        {"00112233445566778899AABBCCDDEEFF.fa3k", FA3_CACHE_FILE_OTHER}, /* uppercase */
        {"00112233445566778899aabbccddeef.fa3k", FA3_CACHE_FILE_OTHER},  /* 31 digits */
        {"00112233445566778899aabbccddeeff.fa3k~", FA3_CACHE_FILE_OTHER},
        {".00112233445566778899aabbccddeeff.tmp.AbC12", FA3_CACHE_FILE_OTHER},
        {".00112233445566778899aabbccddeeff.tmp.AbC1-3", FA3_CACHE_FILE_OTHER},
        {"notes.txt", FA3_CACHE_FILE_OTHER},
        {"00112233445566778899aabbccddeeff", FA3_CACHE_FILE_OTHER},
    };
    char dir[512], path[1024];
    subdir(dir, sizeof dir, "listing");
    assert_int_equal(mkdir(dir, 0700), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        assert_int_equal(fa3_cache_file_kind_of(names[i].name), names[i].kind);
        snprintf(path, sizeof path, "%s/%s", dir, names[i].name);
        spit(path, "x", 1);
    }
    fa3_cache_file *files = NULL;
    size_t n = 0;
    CHECK(fa3_cache_list(dir, &files, &n));
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        if (files[i].kind == FA3_CACHE_FILE_ENTRY) {
            assert_false(files[i].valid);
            assert_string_equal(files[i].why, "truncated (shorter than a header)");
        }
        assert_int_equal(files[i].file_size, 1);
    }
    fa3_free(files);
    size_t removed = 0;
    uint64_t bytes = 0;
    CHECK(fa3_cache_clear(dir, &removed, &bytes));
    assert_int_equal(removed, 4);
    assert_int_equal(bytes, 4);
    assert_int_equal(count_files(dir), (int)(sizeof names / sizeof names[0]) - 4);
    /* a missing folder: nothing listed, nothing to clear, no error */
    subdir(dir, sizeof dir, "listing-missing");
    CHECK(fa3_cache_list(dir, &files, &n));
    assert_int_equal(n, 0);
    CHECK(fa3_cache_clear(dir, &removed, NULL));
    assert_int_equal(removed, 0);
}

static void test_disabled(void **state)
{
    fa3_backend b = *(fa3_backend *)*state;
    char dir[512];
    fa3_config cfg = cfg_default();
    fa3_kernel_info info;

    /* option */
    snprintf(dir, sizeof dir, "%s/disabled-%s", g_root, fa3_backend_name(b));
    fa3_context *c = make_ctx(dir, b, 1);
    assert_null(fa3_context_cache_dir(c));
    assert_string_equal(fa3_context_warning(c), ""); /* off on purpose: not a warning */
    get(c, &cfg, FA3_SOURCE_COMPILED, &info);
    get(c, &cfg, FA3_SOURCE_MEMORY, &info); /* the memory table still works */
    fa3_context_free(c);
    assert_int_equal(count_files(dir), 0);
    struct stat sb;
    assert_true(stat(dir, &sb) != 0); /* not even created */

    /* environment */
    snprintf(dir, sizeof dir, "%s/env-disabled-%s", g_root, fa3_backend_name(b));
    setenv("FA3JIT_CACHE_DISABLE", "1", 1);
    c = make_ctx(dir, b, 0);
    unsetenv("FA3JIT_CACHE_DISABLE");
    assert_null(fa3_context_cache_dir(c));
    get(c, &cfg, FA3_SOURCE_COMPILED, &info);
    assert_string_equal(fa3_context_warning(c), "");
    fa3_context_free(c);
    assert_int_equal(count_files(dir), 0);
    assert_true(stat(dir, &sb) != 0);
}

static void test_dir_resolution(void **state)
{
    (void)state;
    char a[512], x[512], want[600];
    subdir(a, sizeof a, "from-env");
    subdir(x, sizeof x, "xdg");
    setenv("FA3JIT_CACHE_DIR", a, 1);
    setenv("XDG_CACHE_HOME", x, 1);
    fa3_context *c = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    assert_string_equal(fa3_context_cache_dir(c), a); /* $FA3JIT_CACHE_DIR first */
    fa3_context_free(c);
    c = make_ctx(g_root, FA3_BACKEND_NVJITLINK, 0);
    assert_string_equal(fa3_context_cache_dir(c), g_root); /* the option beats the environment */
    fa3_context_free(c);
    unsetenv("FA3JIT_CACHE_DIR");
    c = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    snprintf(want, sizeof want, "%s/fa3jit", x);
    assert_string_equal(fa3_context_cache_dir(c), want); /* then $XDG_CACHE_HOME/fa3jit */
    fa3_context_free(c);
    setenv("FA3JIT_CACHE_DISABLE", "0", 1); /* "0" means on */
    c = make_ctx(NULL, FA3_BACKEND_NVJITLINK, 0);
    assert_string_equal(fa3_context_cache_dir(c), want);
    fa3_context_free(c);
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("XDG_CACHE_HOME");
    /* resolving names a folder but creates nothing */
    assert_int_equal(count_files(x), 0);
    struct stat sb;
    assert_true(stat(a, &sb) != 0);
}

static void test_backends(void **state)
{
    (void)state;
    fa3_context *c = make_ctx(g_root, FA3_BACKEND_AUTO, 0);
    fa3_backend want = FA3_HAVE_PTX_COMPILER ? FA3_BACKEND_PTX_COMPILER : FA3_BACKEND_NVJITLINK;
    assert_int_equal(fa3_context_backend(c), want);
    fa3_context_free(c);
    if (!FA3_HAVE_PTX_COMPILER) {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.backend = FA3_BACKEND_PTX_COMPILER;
        c = NULL;
        assert_int_equal(fa3_context_create(&c, &o), FA3_ERR_BAD_BACKEND);
        assert_null(c);
    }
}

static int group_setup(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DISABLE");
    unsetenv("FA3JIT_CACHE_DIR");
    snprintf(g_root, sizeof g_root, "/tmp/fa3jit-test-cache-XXXXXX");
    if (!mkdtemp(g_root)) {
        printf("mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    printf("cache folder: %s\n", g_root);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rm_rf(g_root);
    return 0;
}

static fa3_backend g_nvjitlink = FA3_BACKEND_NVJITLINK;
static fa3_backend g_ptxc = FA3_BACKEND_PTX_COMPILER;

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_backends),
        cmocka_unit_test(test_dir_resolution),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_key_kind),
        cmocka_unit_test(test_config_table),
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_debug_plan),
        {"keys_nvjitlink", test_keys, NULL, NULL, &g_nvjitlink},
        {"roundtrip_nvjitlink", test_roundtrip, NULL, NULL, &g_nvjitlink},
        {"disabled_nvjitlink", test_disabled, NULL, NULL, &g_nvjitlink},
        {"keys_ptx_compiler", test_keys, NULL, NULL, &g_ptxc},
        {"roundtrip_ptx_compiler", test_roundtrip, NULL, NULL, &g_ptxc},
    };
    /* the PTX compiler cases only when the backend is built in */
    size_t n = sizeof all / sizeof all[0] - (FA3_HAVE_PTX_COMPILER ? 0 : 2);
    return _cmocka_run_group_tests("cache", all, n, group_setup, group_teardown);
}
