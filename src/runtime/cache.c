/*
 * The disk cache (layout in cache.h) and the cache key. The key is the XXH3-128 of an explicit
 * little-endian serialization of the canonical config (field by field, never the raw struct with
 * its padding), the PTX text, the generator version, the backend's name and version and the arch —
 * only what changes the binary, nothing that changes per call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <xxhash.h>

#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

#define MAGIC "FA3JITK\0"
#define MAX_ENTRY_BYTES ((uint64_t)1 << 30) /* refuse to believe in a cubin over 1 GiB */

/* ------------------------------------------------------------------ little-endian helpers */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ------------------------------------------------------------------ key */

static void hash_u32(XXH3_state_t *s, uint32_t v)
{
    uint8_t b[4];
    put_u32(b, v);
    XXH3_128bits_update(s, b, sizeof b);
}

/* Length-prefixed, so that adjacent strings cannot run into each other. */
static void hash_str(XXH3_state_t *s, const char *p, size_t n)
{
    uint8_t b[8];
    put_u64(b, (uint64_t)n);
    XXH3_128bits_update(s, b, sizeof b);
    if (n)
        XXH3_128bits_update(s, p, n);
}

fa3_status fa3_cache_key_for(const fa3_config *canonical, const char *ptx, size_t len,
                             fa3_backend backend, const char *backend_version, char out[33])
{
    if (!canonical || !ptx || !backend_version || !out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_key_for: NULL argument");
    /* Canonicalizing again is idempotent and makes equal kernels share a key even when a caller
       hands in a config that is not yet canonical. */
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(canonical, &c));
    fa3_backend b = fa3_backend_resolve(backend);
    const char *arch = fa3_arch_name(c.arch);

    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache-key hash state");
    if (XXH3_128bits_reset(s) != XXH_OK) {
        XXH3_freeState(s);
        return fa3_seterr(FA3_ERR_INTERNAL, "XXH3_128bits_reset failed");
    }
    static const char domain[] = "fa3jit cache key v1";
    hash_str(s, domain, sizeof domain - 1);
    /* The canonical config, one fixed-width field at a time (count first: adding a field changes
       every key). */
    hash_u32(s, 8);
    hash_u32(s, (uint32_t)c.head_dim);
    hash_u32(s, (uint32_t)c.head_dim_v);
    hash_u32(s, (uint32_t)c.dtype);
    hash_u32(s, (uint32_t)c.mask);
    hash_u32(s, (uint32_t)c.softcap);
    hash_u32(s, (uint32_t)c.arch);
    hash_u32(s, (uint32_t)c.block_n);
    hash_u32(s, (uint32_t)c.stages);
    hash_str(s, ptx, len);
    hash_str(s, FA3_GENERATOR_VERSION, strlen(FA3_GENERATOR_VERSION));
    const char *bn = fa3_backend_name(b);
    hash_str(s, bn, strlen(bn));
    hash_str(s, backend_version, strlen(backend_version));
    hash_str(s, arch ? arch : "", arch ? strlen(arch) : 0);
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);

    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[canon.digest[i] >> 4];
        out[2 * i + 1] = hex[canon.digest[i] & 15];
    }
    out[32] = '\0';
    return FA3_OK;
}

/* ------------------------------------------------------------------ directory */

static int env_set(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

static char *join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    while (na > 1 && a[na - 1] == '/')
        na--;
    char *s = malloc(na + 1 + nb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, na);
    s[na] = '/';
    memcpy(s + na + 1, b, nb + 1);
    return s;
}

fa3_status fa3_cache_dir_resolve(const char *opt_dir, int disable, char **dir, char *warn,
                                 size_t warn_size)
{
    *dir = NULL;
    if (warn && warn_size)
        warn[0] = '\0';
    if (disable || env_set("FA3JIT_CACHE_DISABLE"))
        return FA3_OK;
    const char *env;
    char *d = NULL;
    if (opt_dir && opt_dir[0])
        d = strdup(opt_dir);
    else if ((env = getenv("FA3JIT_CACHE_DIR")) && env[0])
        d = strdup(env);
    else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')
        d = join(env, "fa3jit");
    else if ((env = getenv("HOME")) && env[0])
        d = join(env, ".cache/fa3jit");
    else {
        if (warn && warn_size)
            snprintf(warn, warn_size, "disk cache off: none of FA3JIT_CACHE_DIR, XDG_CACHE_HOME, "
                                      "HOME is set");
        return FA3_OK;
    }
    if (!d)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache directory name");
    *dir = d;
    return FA3_OK;
}

/* mkdir -p with mode 0700 for what it creates. 0 on success, else -1 with errno. */
static int mkdir_p(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? 0 : (errno = ENOTDIR, -1);
    char *tmp = strdup(path);
    if (!tmp)
        return errno = ENOMEM, -1;
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
                int e = errno;
                free(tmp);
                return errno = e, -1;
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    free(tmp);
    if (stat(path, &sb) != 0)
        return -1;
    return S_ISDIR(sb.st_mode) ? 0 : (errno = ENOTDIR, -1);
}

fa3_status fa3_cache_entry_path(const char *dir, const char *key, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s%s", dir, key, FA3_CACHE_SUFFIX);
    if (n < 0 || (size_t)n >= size)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s/%s%s", dir, key,
                          FA3_CACHE_SUFFIX);
    return FA3_OK;
}

static int valid_key(const char *key)
{
    if (!key)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return 0;
    return key[32] == '\0';
}

/* ------------------------------------------------------------------ load */

/* Reads exactly n bytes; 0 on success. */
static int read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int fa3_cache_load(const char *dir, const char *key, void **cubin, size_t *cubin_size, char **log,
                   fa3_cache_meta *meta)
{
    *cubin = NULL;
    *cubin_size = 0;
    *log = NULL;
    if (!dir || !valid_key(key))
        return 0;
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s%s", dir, key, FA3_CACHE_SUFFIX);
    if (n < 0 || (size_t)n >= sizeof path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int hit = 0;
    uint8_t *payload = NULL;
    char *text = NULL;
    uint8_t h[FA3_CACHE_HEADER_SIZE];
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < (off_t)FA3_CACHE_HEADER_SIZE)
        goto out;
    if (read_all(fd, h, sizeof h) != 0)
        goto out;
    if (memcmp(h, MAGIC, 8) != 0 || get_u32(h + 8) != FA3_CACHE_FORMAT ||
        get_u32(h + 12) != FA3_CACHE_HEADER_SIZE || memcmp(h + 16, key, 32) != 0)
        goto out;
    if (XXH3_64bits(h, 104) != get_u64(h + 104))
        goto out;
    uint64_t csize = get_u64(h + 48), lsize = get_u64(h + 56), psize = get_u64(h + 64);
    if (csize == 0 || csize > MAX_ENTRY_BYTES || lsize > MAX_ENTRY_BYTES || psize != csize + lsize ||
        (uint64_t)sb.st_size != FA3_CACHE_HEADER_SIZE + psize)
        goto out;
    payload = malloc((size_t)psize);
    text = malloc((size_t)lsize + 1);
    if (!payload || !text)
        goto out;
    if (read_all(fd, payload, (size_t)psize) != 0)
        goto out;
    if (XXH3_64bits(payload, (size_t)psize) != get_u64(h + 72))
        goto out;
    memcpy(text, payload + csize, (size_t)lsize);
    text[lsize] = '\0';
    meta->num_regs = (int32_t)get_u32(h + 80);
    meta->spill_store_bytes = (int32_t)get_u32(h + 84);
    meta->spill_load_bytes = (int32_t)get_u32(h + 88);
    meta->stack_bytes = (int32_t)get_u32(h + 92);
    meta->has_warning = (int)(get_u32(h + 96) & 1u);
    /* Shrink the payload to the cubin alone (keeping it if realloc declines). */
    uint8_t *shrunk = realloc(payload, (size_t)csize);
    *cubin = shrunk ? shrunk : payload;
    payload = NULL;
    *cubin_size = (size_t)csize;
    *log = text;
    text = NULL;
    hit = 1;
out:
    free(payload);
    free(text);
    close(fd);
    return hit;
}

/* ------------------------------------------------------------------ store */

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

fa3_status fa3_cache_store(const char *dir, const char *key, const void *cubin, size_t cubin_size,
                           const char *log, const fa3_cache_meta *meta)
{
    if (!dir || !valid_key(key) || !cubin || cubin_size == 0 || !meta)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_store: bad argument");
    size_t lsize = log ? strlen(log) : 0;
    if ((uint64_t)cubin_size > MAX_ENTRY_BYTES || (uint64_t)lsize > MAX_ENTRY_BYTES)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache entry too large (%zu + %zu bytes)", cubin_size,
                          lsize);
    char path[4096], tmp[4096];
    FA3_TRY(fa3_cache_entry_path(dir, key, path, sizeof path));
    int n = snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, key);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s", dir);
    if (mkdir_p(dir) != 0)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create cache directory %s: %s", dir,
                          strerror(errno));

    uint8_t h[FA3_CACHE_HEADER_SIZE];
    memset(h, 0, sizeof h);
    memcpy(h, MAGIC, 8);
    put_u32(h + 8, FA3_CACHE_FORMAT);
    put_u32(h + 12, FA3_CACHE_HEADER_SIZE);
    memcpy(h + 16, key, 32);
    put_u64(h + 48, cubin_size);
    put_u64(h + 56, lsize);
    put_u64(h + 64, (uint64_t)cubin_size + lsize);
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache checksum state");
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, cubin, cubin_size);
    if (lsize)
        XXH3_64bits_update(s, log, lsize);
    put_u64(h + 72, XXH3_64bits_digest(s));
    XXH3_freeState(s);
    put_u32(h + 80, (uint32_t)meta->num_regs);
    put_u32(h + 84, (uint32_t)meta->spill_store_bytes);
    put_u32(h + 88, (uint32_t)meta->spill_load_bytes);
    put_u32(h + 92, (uint32_t)meta->stack_bytes);
    put_u32(h + 96, meta->has_warning ? 1u : 0u);
    put_u32(h + 100, 0);
    put_u64(h + 104, XXH3_64bits(h, 104));

    int fd = mkstemp(tmp);
    if (fd < 0)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create a temporary file in %s: %s", dir,
                          strerror(errno));
    const char *failed = NULL;
    if (write_all(fd, h, sizeof h) != 0 || write_all(fd, cubin, cubin_size) != 0 ||
        (lsize && write_all(fd, log, lsize) != 0))
        failed = "write";
    else if (fsync(fd) != 0)
        failed = "fsync";
    int e = errno;
    if (close(fd) != 0 && !failed) {
        failed = "close";
        e = errno;
    }
    if (!failed && rename(tmp, path) != 0) {
        failed = "rename";
        e = errno;
    }
    if (failed) {
        unlink(tmp);
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache store %s: %s failed: %s", path, failed,
                          strerror(e));
    }
    /* Make the rename itself durable (best effort: some file systems refuse fsync on a dir). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return FA3_OK;
}
