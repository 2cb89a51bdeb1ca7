/*
 * The disk cache (layout in cache.h) and the cache key. The key is the XXH3-128 of an explicit
 * little-endian serialization of the canonical config (field by field, never the raw struct with
 * its padding), the PTX text, the generator version, the backend's name and version and the arch —
 * only what changes the binary, nothing that changes per call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"

#define MAGIC FA3_CACHE_MAGIC
#define HDR FA3_CACHE_HEADER_SIZE
#define MAX_ENTRY_BYTES FA3_CACHE_MAX_PART /* refuse to believe in a cubin over 1 GiB */
_Static_assert(FA3_CACHE_PLAN_DEBUG_SIZE == FA3_PLAN_DEBUG_SIZE, "the header holds fa3_plan.debug");

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

/* The canonical config as 8 little-endian u32 fields (32 bytes): the cache key hashes them, and
   entry headers store them, in this order. */
static void put_config(uint8_t *p, const fa3_config *c)
{
    const int32_t f[8] = {c->head_dim, c->head_dim_v, (int32_t)c->dtype, (int32_t)c->mask,
                          c->softcap, (int32_t)c->arch, c->block_n, c->stages};
    for (int i = 0; i < 8; i++)
        put_u32(p + 4 * i, (uint32_t)f[i]);
}

static void get_config(const uint8_t *p, fa3_config *c)
{
    memset(c, 0, sizeof *c);
    c->head_dim = (int32_t)get_u32(p);
    c->head_dim_v = (int32_t)get_u32(p + 4);
    c->dtype = (fa3_dtype)(int32_t)get_u32(p + 8);
    c->mask = (fa3_mask)(int32_t)get_u32(p + 12);
    c->softcap = (int32_t)get_u32(p + 16);
    c->arch = (fa3_arch)(int32_t)get_u32(p + 20);
    c->block_n = (int32_t)get_u32(p + 24);
    c->stages = (int32_t)get_u32(p + 28);
}

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
    uint8_t cb[32];
    put_config(cb, &c);
    XXH3_128bits_update(s, cb, sizeof cb);
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

fa3_status fa3_cache_dir_resolve(const char *opt_dir, int disable, const fa3_env *env, char **dir,
                                 char *warn, size_t warn_size)
{
    *dir = NULL;
    if (warn && warn_size)
        warn[0] = '\0';
    if (disable || env->cache_disable)
        return FA3_OK;
    char *d = NULL;
    if (opt_dir && opt_dir[0])
        d = strdup(opt_dir);
    else if (env->cache_dir)
        d = strdup(env->cache_dir);
    else if (env->xdg_cache_home)
        d = join(env->xdg_cache_home, "fa3jit");
    else if (env->home)
        d = join(env->home, ".cache/fa3jit");
    else {
        if (warn && warn_size)
            snprintf(warn, warn_size, "disk cache off: none of FA3JIT_CACHE_DIR, XDG_CACHE_HOME, "
                                      "HOME is set to an absolute path");
        return FA3_OK;
    }
    if (!d)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache directory name");
    *dir = d;
    return FA3_OK;
}

/* Fault injection (tests): 1 with errno = err if the site is armed. */
static int inject(const char *site, int err)
{
    if (!fa3_test_fail(site))
        return 0;
    errno = err;
    return 1;
}

/* mkdir -p with mode 0700 for what it creates. 0 on success, else -1 with errno. */
static int mkdir_p(const char *path)
{
    if (inject("mkdir", EACCES))
        return -1;
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

/* buf = "<dir>/<name><suffix>"; 0, or -1 when it does not fit (no error message set). */
static int join_path(char *buf, size_t size, const char *dir, const char *name,
                     const char *suffix)
{
    int n = snprintf(buf, size, "%s/%s%s", dir, name, suffix);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

fa3_status fa3_cache_entry_path(const char *dir, const char *key, char *buf, size_t size)
{
    if (join_path(buf, size, dir, key, FA3_CACHE_SUFFIX) != 0)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s/%s%s", dir, key,
                          FA3_CACHE_SUFFIX);
    return FA3_OK;
}

/* 1 if p[0..32) are lowercase hex digits. */
static int hex32(const char *p)
{
    for (int i = 0; i < 32; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    return 1;
}

static int valid_key(const char *key)
{
    return key && hex32(key) && key[32] == '\0';
}

/* ------------------------------------------------------------------ parse */

#define BAD(reason)        \
    do {                   \
        if (why)           \
            *why = reason; \
        return 0;          \
    } while (0)

int fa3_cache_parse_header(const void *data, size_t size, const char *key, fa3_cache_view *v,
                           const char **why)
{
    memset(v, 0, sizeof *v);
    const uint8_t *h = data;
    if (!h || size < HDR)
        BAD("truncated (shorter than a header)");
    if (memcmp(h, MAGIC, 8) != 0)
        BAD("not an fa3jit cache entry (bad magic)");
    if (get_u32(h + FA3_CACHE_OFF_VERSION) != FA3_CACHE_FORMAT)
        BAD("other cache format version");
    if (get_u32(h + FA3_CACHE_OFF_HEADER_SIZE) != HDR)
        BAD("unexpected header size");
    if (!hex32((const char *)h + FA3_CACHE_OFF_KEY))
        BAD("malformed key");
    if (key && memcmp(h + FA3_CACHE_OFF_KEY, key, 32) != 0)
        BAD("key differs from the file name");
    if (XXH3_64bits(h, FA3_CACHE_OFF_HEADER_SUM) != get_u64(h + FA3_CACHE_OFF_HEADER_SUM))
        BAD("header checksum mismatch");
    uint64_t csize = get_u64(h + FA3_CACHE_OFF_CUBIN_SIZE);
    uint64_t lsize = get_u64(h + FA3_CACHE_OFF_LOG_SIZE);
    uint64_t psize = get_u64(h + FA3_CACHE_OFF_PAYLOAD_SIZE);
    if (csize == 0)
        BAD("empty cubin");
    if (csize > MAX_ENTRY_BYTES || lsize > MAX_ENTRY_BYTES || psize != csize + lsize)
        BAD("inconsistent sizes");
    if ((uint64_t)size - HDR < psize)
        BAD("truncated payload");
    if ((uint64_t)size - HDR > psize)
        BAD("trailing bytes after the payload");
    uint32_t backend = get_u32(h + FA3_CACHE_OFF_BACKEND);
    if (backend != FA3_BACKEND_PTX_COMPILER && backend != FA3_BACKEND_NVJITLINK)
        BAD("unknown backend");
    fa3_config cfg;
    get_config(h + FA3_CACHE_OFF_CONFIG, &cfg);
    /* Plausibility only (the loader compares with the config it wants): enums in range, sizes
       positive and small. fa3_config_canonicalize would set the thread's message. */
    if (cfg.head_dim <= 0 || cfg.head_dim > 4096 || cfg.head_dim_v <= 0 ||
        cfg.head_dim_v > 4096 || (unsigned)cfg.dtype > FA3_DTYPE_E4M3 ||
        (unsigned)cfg.mask > FA3_MASK_LOCAL || (cfg.softcap != 0 && cfg.softcap != 1) ||
        cfg.arch != FA3_ARCH_SM90A || cfg.block_n <= 0 || cfg.block_n > 4096 ||
        cfg.stages <= 0 || cfg.stages > 64)
        BAD("implausible config");

    /* Printable ASCII, then NULs only: the one spelling fa3_cache_store writes. */
    const uint8_t *dbg = h + FA3_CACHE_OFF_PLAN_DEBUG;
    size_t dn = 0;
    while (dn < FA3_CACHE_PLAN_DEBUG_SIZE && dbg[dn] >= 0x20 && dbg[dn] < 0x7f)
        dn++;
    if (dn == FA3_CACHE_PLAN_DEBUG_SIZE)
        BAD("malformed plan debug text");
    for (size_t i = dn; i < FA3_CACHE_PLAN_DEBUG_SIZE; i++)
        if (dbg[i])
            BAD("malformed plan debug text");

    memcpy(v->key, h + FA3_CACHE_OFF_KEY, 32);
    v->key[32] = '\0';
    memcpy(v->meta.plan_debug, dbg, dn + 1);
    v->cubin_size = (size_t)csize;
    v->log_size = (size_t)lsize;
    const uint8_t *r = h + FA3_CACHE_OFF_RESOURCES;
    v->meta.num_regs = (int32_t)get_u32(r);
    v->meta.spill_store_bytes = (int32_t)get_u32(r + 4);
    v->meta.spill_load_bytes = (int32_t)get_u32(r + 8);
    v->meta.stack_bytes = (int32_t)get_u32(r + 12);
    v->meta.has_warning = (int)(get_u32(h + FA3_CACHE_OFF_FLAGS) & 1u);
    v->meta.backend = (fa3_backend)backend;
    v->meta.config = cfg;
    v->meta.created = (int64_t)get_u64(h + FA3_CACHE_OFF_CREATED);
    if (why)
        *why = NULL;
    return 1;
}

/* 1 if the payload (cubin then log, as sized by the parsed header h) matches h's checksum. */
static int payload_ok(const uint8_t *h, const uint8_t *payload, const fa3_cache_view *v)
{
    return XXH3_64bits(payload, v->cubin_size + v->log_size) ==
           get_u64(h + FA3_CACHE_OFF_PAYLOAD_SUM);
}

int fa3_cache_parse(const void *data, size_t size, const char *key, fa3_cache_view *v,
                    const char **why)
{
    if (!fa3_cache_parse_header(data, size, key, v, why))
        return 0;
    const uint8_t *h = data;
    const uint8_t *payload = h + HDR;
    if (!payload_ok(h, payload, v)) {
        memset(v, 0, sizeof *v);
        BAD("payload checksum mismatch");
    }
    v->cubin = payload;
    v->log = (const char *)payload + v->cubin_size;
    return 1;
}

#undef BAD

/* ------------------------------------------------------------------ load */

/* Reads exactly n bytes; 0 on success. */
static int read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    if (inject("read", EIO))
        return -1;
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

#define BAD(reason)        \
    do {                   \
        if (why)           \
            *why = reason; \
        goto out;          \
    } while (0)

/* Reads and checks the entry open on fd (key: the key its file name gives): a regular file of a
   plausible size; the header first, so that sizes are checked before anything large is
   allocated; the config (expect, may be NULL); then the payload (cubin and log, size - HDR bytes
   by the header's checks) against its checksum. Returns 1 with *v filled and *payload (malloc'd,
   v->cubin_size + v->log_size bytes, v's pointers into it); else 0 with *payload NULL and *why
   (may be NULL) a static reason. The one check of an entry on disk: the loader and the listing
   share it. */
static int read_entry(int fd, const char *key, const fa3_config *expect, fa3_cache_view *v,
                      uint8_t **payload, const char **why)
{
    *payload = NULL;
    uint8_t *buf = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        BAD("not a regular file");
    if (sb.st_size < (off_t)HDR)
        BAD("truncated (shorter than a header)");
    if ((uint64_t)sb.st_size > HDR + 2 * MAX_ENTRY_BYTES)
        BAD("inconsistent sizes");
    size_t size = (size_t)sb.st_size;
    uint8_t h[HDR];
    if (read_all(fd, h, HDR) != 0)
        BAD("unreadable");
    if (!fa3_cache_parse_header(h, size, key, v, why))
        goto out;
    if (expect && !fa3_config_equal(&v->meta.config, expect))
        BAD("built for another config");
    buf = fa3_test_fail("oom-cache-load") ? NULL : malloc(size - HDR);
    if (!buf)
        BAD("out of memory reading it");
    if (read_all(fd, buf, size - HDR) != 0)
        BAD("unreadable");
    if (!payload_ok(h, buf, v))
        BAD("payload checksum mismatch");
    v->cubin = buf;
    v->log = (const char *)buf + v->cubin_size;
    *payload = buf;
    if (why)
        *why = NULL;
    return 1;
out:
    free(buf);
    memset(v, 0, sizeof *v);
    return 0;
}

#undef BAD

int fa3_cache_load(const char *dir, const char *key, const fa3_config *expect, void **cubin,
                   size_t *cubin_size, char **log, fa3_cache_meta *meta)
{
    *cubin = NULL;
    *cubin_size = 0;
    *log = NULL;
    if (!dir || !valid_key(key))
        return 0;
    char path[4096];
    if (join_path(path, sizeof path, dir, key, FA3_CACHE_SUFFIX) != 0)
        return 0;
    /* O_NONBLOCK: a FIFO planted at the entry's path must not block the open (fstat then
       rejects anything that is not a regular file); it does not affect reads of regular files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    fa3_cache_view v;
    uint8_t *buf = NULL;
    int hit = read_entry(fd, key, expect, &v, &buf, NULL);
    close(fd);
    if (!hit)
        return 0;
    char *text = fa3_test_fail("oom-cache-load") ? NULL : malloc(v.log_size + 1);
    if (!text) {
        free(buf);
        return 0;
    }
    size_t csize = v.cubin_size;
    memcpy(text, v.log, v.log_size);
    text[v.log_size] = '\0';
    *meta = v.meta;
    /* Keep only the cubin (it comes first): shrink, keeping the block if realloc declines. */
    uint8_t *shrunk = realloc(buf, csize);
    *cubin = shrunk ? shrunk : buf;
    *cubin_size = csize;
    *log = text;
    return 1;
}

/* ------------------------------------------------------------------ store */

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    if (inject("write", ENOSPC))
        return -1;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return errno = EIO, -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

fa3_status fa3_cache_store(const char *dir, const char *key, const void *cubin, size_t cubin_size,
                           const char *log, const fa3_cache_meta *meta, int *sys_errno)
{
    if (sys_errno)
        *sys_errno = 0;
    if (!dir || !valid_key(key) || !cubin || cubin_size == 0 || !meta)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_store: bad argument (%s)",
                          !dir ? "NULL dir" : !valid_key(key) ? "malformed key"
                          : !cubin || !cubin_size ? "no cubin" : "NULL meta");
    size_t lsize = log ? strlen(log) : 0;
    if ((uint64_t)cubin_size > MAX_ENTRY_BYTES || (uint64_t)lsize > MAX_ENTRY_BYTES)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache entry too large (%zu + %zu bytes)", cubin_size,
                          lsize);
    char path[4096], tmp[4096];
    FA3_TRY(fa3_cache_entry_path(dir, key, path, sizeof path));
    int n = snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, key);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s", dir);
    if (mkdir_p(dir) != 0) {
        if (sys_errno)
            *sys_errno = errno;
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create cache directory %s: mkdir: %s", dir,
                          strerror(errno));
    }

    uint8_t h[HDR];
    memset(h, 0, sizeof h);
    memcpy(h, MAGIC, 8);
    put_u32(h + FA3_CACHE_OFF_VERSION, FA3_CACHE_FORMAT);
    put_u32(h + FA3_CACHE_OFF_HEADER_SIZE, HDR);
    memcpy(h + FA3_CACHE_OFF_KEY, key, 32);
    put_u64(h + FA3_CACHE_OFF_CUBIN_SIZE, cubin_size);
    put_u64(h + FA3_CACHE_OFF_LOG_SIZE, lsize);
    put_u64(h + FA3_CACHE_OFF_PAYLOAD_SIZE, (uint64_t)cubin_size + lsize);
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache checksum state");
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, cubin, cubin_size);
    if (lsize)
        XXH3_64bits_update(s, log, lsize);
    put_u64(h + FA3_CACHE_OFF_PAYLOAD_SUM, XXH3_64bits_digest(s));
    XXH3_freeState(s);
    uint8_t *r = h + FA3_CACHE_OFF_RESOURCES;
    put_u32(r, (uint32_t)meta->num_regs);
    put_u32(r + 4, (uint32_t)meta->spill_store_bytes);
    put_u32(r + 8, (uint32_t)meta->spill_load_bytes);
    put_u32(r + 12, (uint32_t)meta->stack_bytes);
    put_u32(h + FA3_CACHE_OFF_FLAGS, meta->has_warning ? 1u : 0u);
    put_u32(h + FA3_CACHE_OFF_BACKEND, (uint32_t)meta->backend);
    put_config(h + FA3_CACHE_OFF_CONFIG, &meta->config);
    put_u64(h + FA3_CACHE_OFF_CREATED,
            (uint64_t)(meta->created ? meta->created : (int64_t)time(NULL)));
    for (size_t i = 0; i + 1 < FA3_CACHE_PLAN_DEBUG_SIZE && meta->plan_debug[i]; i++) {
        unsigned char ch = (unsigned char)meta->plan_debug[i];
        h[FA3_CACHE_OFF_PLAN_DEBUG + i] = ch >= 0x20 && ch < 0x7f ? ch : '?';
    }
    put_u64(h + FA3_CACHE_OFF_HEADER_SUM, XXH3_64bits(h, FA3_CACHE_OFF_HEADER_SUM));

    int fd = inject("open", EROFS) ? -1 : mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        if (sys_errno)
            *sys_errno = e;
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create a temporary file in %s: mkstemp: %s",
                          dir, strerror(e));
    }
    const char *failed = NULL;
    if (write_all(fd, h, sizeof h) != 0 || write_all(fd, cubin, cubin_size) != 0 ||
        (lsize && write_all(fd, log, lsize) != 0))
        failed = "write";
    else if (inject("fsync", EIO) || fsync(fd) != 0)
        failed = "fsync";
    int e = errno;
    if (close(fd) != 0 && !failed) {
        failed = "close";
        e = errno;
    }
    if (!failed && (inject("rename", EACCES) || rename(tmp, path) != 0)) {
        failed = "rename";
        e = errno;
    }
    if (failed) {
        unlink(tmp);
        if (sys_errno)
            *sys_errno = e;
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

/* ------------------------------------------------------------------ lock */

int fa3_cache_errno_readonly(int e)
{
    return e == EROFS || e == EACCES || e == EPERM;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

fa3_cache_lock_result fa3_cache_lock_take(const char *dir, const char *key, int timeout_ms,
                                          fa3_cache_lock *lk, char *why, size_t why_size)
{
    lk->fd = -1;
    lk->path[0] = '\0';
    if (!why)
        why_size = 0;
    if (why_size)
        why[0] = '\0';
    if (join_path(lk->path, sizeof lk->path, dir, key, FA3_CACHE_LOCK_SUFFIX) != 0) {
        snprintf(why, why_size, "cache lock path too long: %s", dir);
        return FA3_CACHE_LOCK_UNAVAILABLE;
    }
    if (mkdir_p(dir) != 0) {
        snprintf(why, why_size, "cannot create cache directory %s: mkdir: %s", dir,
                 strerror(errno));
        return FA3_CACHE_LOCK_NODIR;
    }
    double deadline = fa3_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        int fd = inject("open", EROFS)
                     ? -1
                     : open(lk->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            int e = errno;
            snprintf(why, why_size, "cannot create the cache lock file %s: open: %s", lk->path,
                     strerror(e));
            return fa3_cache_errno_readonly(e) ? FA3_CACHE_LOCK_READONLY
                                               : FA3_CACHE_LOCK_UNAVAILABLE;
        }
        int wait = 1;
        for (;;) {
            int r = inject("lock", ENOLCK) ? -1 : flock(fd, LOCK_EX | LOCK_NB);
            if (r == 0)
                break;
            int e = errno;
            if (e == EINTR)
                continue;
            if (e != EWOULDBLOCK) {
                /* Locks do not work here (e.g. NFS without lockd), so nobody can be holding this
                   file: remove it rather than leave one behind per kernel. */
                snprintf(why, why_size, "cannot lock %s: flock: %s", lk->path, strerror(e));
                (void)unlink(lk->path);
                close(fd);
                return FA3_CACHE_LOCK_UNAVAILABLE;
            }
            if (fa3_now_ms() >= deadline) {
                snprintf(why, why_size, "cannot lock %s: still held by another process after "
                         "%d ms", lk->path, timeout_ms);
                close(fd);
                return FA3_CACHE_LOCK_UNAVAILABLE;
            }
            sleep_ms(wait);
            if (wait < 16)
                wait *= 2;
        }
        /* The previous holder removes the file before releasing it: if the path no longer names
           the file we locked, start over on the current one. */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(lk->path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            lk->fd = fd;
            return FA3_CACHE_LOCKED;
        }
        close(fd);
    }
}

void fa3_cache_lock_release(fa3_cache_lock *lk)
{
    if (!lk || lk->fd < 0)
        return;
    (void)unlink(lk->path); /* while still holding it: see fa3_cache_lock_take */
    close(lk->fd);
    lk->fd = -1;
}

/* ------------------------------------------------------------------ listing */

fa3_cache_file_kind fa3_cache_file_kind_of(const char *name)
{
    if (!name)
        return FA3_CACHE_FILE_OTHER;
    size_t n = strlen(name);
    if (n == 37 && hex32(name)) {
        if (strcmp(name + 32, FA3_CACHE_SUFFIX) == 0)
            return FA3_CACHE_FILE_ENTRY;
        if (strcmp(name + 32, FA3_CACHE_LOCK_SUFFIX) == 0)
            return FA3_CACHE_FILE_LOCK;
        return FA3_CACHE_FILE_OTHER;
    }
    /* ".<key>.tmp.XXXXXX" (mkstemp's six letters or digits) */
    if (n == 44 && name[0] == '.' && hex32(name + 1) && memcmp(name + 33, ".tmp.", 5) == 0) {
        for (size_t i = 38; i < 44; i++)
            if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
                  (name[i] >= '0' && name[i] <= '9')))
                return FA3_CACHE_FILE_OTHER;
        return FA3_CACHE_FILE_TEMP;
    }
    return FA3_CACHE_FILE_OTHER;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const fa3_cache_file *)a)->name, ((const fa3_cache_file *)b)->name);
}

/* Opens the cache directory for listing: *d = NULL (FA3_OK) when it does not exist. */
static fa3_status open_cache_dir(const char *dir, DIR **d)
{
    *d = opendir(dir);
    if (*d || errno == ENOENT)
        return FA3_OK;
    return fa3_seterr(FA3_ERR_CACHE_IO, "cannot list cache directory %s: opendir: %s", dir,
                      strerror(errno));
}

fa3_status fa3_cache_list(const char *dir, fa3_cache_file **files, size_t *count)
{
    if (!dir || !files || !count)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_list: NULL argument");
    *files = NULL;
    *count = 0;
    DIR *d = NULL;
    FA3_TRY(open_cache_dir(dir, &d));
    if (!d)
        return FA3_OK; /* no directory: nothing cached */
    fa3_cache_file *v = NULL;
    size_t nv = 0, cap = 0;
    fa3_status st = FA3_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        fa3_cache_file_kind kind = fa3_cache_file_kind_of(de->d_name);
        if (kind == FA3_CACHE_FILE_OTHER)
            continue;
        if (nv == cap) {
            size_t nc = cap ? 2 * cap : 32;
            fa3_cache_file *m = realloc(v, nc * sizeof *m);
            if (!m) {
                st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory listing %s", dir);
                break;
            }
            v = m;
            cap = nc;
        }
        fa3_cache_file *f = &v[nv];
        memset(f, 0, sizeof *f);
        size_t nl = strlen(de->d_name); /* <= 44 for the kinds above */
        memcpy(f->name, de->d_name, nl < sizeof f->name ? nl + 1 : sizeof f->name);
        f->name[sizeof f->name - 1] = '\0';
        f->kind = kind;
        char path[4096];
        struct stat sb;
        if (join_path(path, sizeof path, dir, de->d_name, "") != 0 || lstat(path, &sb) != 0)
            continue; /* vanished (a concurrent store or clear) */
        f->file_size = (uint64_t)sb.st_size;
        f->mtime = (int64_t)sb.st_mtime;
        nv++;
        if (kind != FA3_CACHE_FILE_ENTRY)
            continue;
        if (!S_ISREG(sb.st_mode)) {
            f->why = "not a regular file";
            continue;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            f->why = "unreadable";
            continue;
        }
        char key[33];
        memcpy(key, de->d_name, 32);
        key[32] = '\0';
        uint8_t *payload = NULL;
        f->valid = read_entry(fd, key, NULL, &f->view, &payload, &f->why);
        close(fd);
        free(payload);
        f->view.cubin = NULL; /* pointed into the payload */
        f->view.log = NULL;
    }
    closedir(d);
    if (st != FA3_OK) {
        free(v);
        return st;
    }
    if (nv)
        qsort(v, nv, sizeof *v, cmp_file);
    *files = v;
    *count = nv;
    return FA3_OK;
}

fa3_status fa3_cache_clear(const char *dir, size_t *removed, uint64_t *bytes)
{
    if (removed)
        *removed = 0;
    if (bytes)
        *bytes = 0;
    if (!dir)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_clear: NULL dir");
    DIR *d = NULL;
    FA3_TRY(open_cache_dir(dir, &d));
    if (!d)
        return FA3_OK; /* no directory: nothing cached */
    fa3_status st = FA3_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (fa3_cache_file_kind_of(de->d_name) == FA3_CACHE_FILE_OTHER)
            continue;
        char path[4096];
        if (join_path(path, sizeof path, dir, de->d_name, "") != 0)
            continue;
        struct stat sb;
        if (lstat(path, &sb) != 0)
            continue;
        if (unlink(path) != 0) {
            if (errno != ENOENT && st == FA3_OK)
                st = fa3_seterr(FA3_ERR_CACHE_IO, "cannot remove %s: unlink: %s", path,
                                strerror(errno));
            continue;
        }
        if (removed)
            (*removed)++;
        if (bytes)
            *bytes += (uint64_t)sb.st_size;
    }
    closedir(d);
    return st;
}
