/*
 * The disk cache's files (layout in cache.h): the folder's name, loading and storing entries
 * (a temporary file renamed into place; the bytes from cache_format.c) and the
 * per-key lock. Failures are reported for the caller to keep as a warning, never fatal.
 */
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

#include "codegen/codegen.h"
#include "runtime/cache.h"

#define HDR FA3_CACHE_HEADER_SIZE
#define MAX_ENTRY_BYTES FA3_CACHE_MAX_PART

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

int fa3_cache_join_path(char *buf, size_t size, const char *dir, const char *name,
                        const char *suffix)
{
    int n = snprintf(buf, size, "%s/%s%s", dir, name, suffix);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

fa3_status fa3_cache_entry_path(const char *dir, const char *key, char *buf, size_t size)
{
    if (fa3_cache_join_path(buf, size, dir, key, FA3_CACHE_SUFFIX) != 0)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s/%s%s", dir, key,
                          FA3_CACHE_SUFFIX);
    return FA3_OK;
}

int fa3_cache_valid_key(const char *key)
{
    return key && fa3_cache_hex32(key) && key[32] == '\0';
}

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

/* See cache.h. */
int fa3_cache_read_file(const char *path, void *buf, size_t size)
{
    /* O_NONBLOCK: as for entries (fa3_cache_load), a FIFO must not block the open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat sb;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == size &&
             read_all(fd, buf, size) == 0;
    close(fd);
    return ok;
}

#define BAD(reason)        \
    do {                   \
        if (why)           \
            *why = reason; \
        goto out;          \
    } while (0)

/* See cache.h. */
int fa3_cache_read_entry(int fd, const char *key, const fa3_config *expect, fa3_cache_view *v,
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
    if (!fa3_cache_payload_ok(h, buf, v))
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
    if (!dir || !fa3_cache_valid_key(key))
        return 0;
    char path[4096];
    if (fa3_cache_join_path(path, sizeof path, dir, key, FA3_CACHE_SUFFIX) != 0)
        return 0;
    /* O_NONBLOCK: a FIFO planted at the entry's path must not block the open (fstat then
       rejects anything that is not a regular file); it does not affect reads of regular files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    fa3_cache_view v;
    uint8_t *buf = NULL;
    int hit = fa3_cache_read_entry(fd, key, expect, &v, &buf, NULL);
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

/*
 * Why the store does not fsync by default (FA3JIT_CACHE_FSYNC=1 brings both fsyncs back):
 * the rename alone makes a store atomic for every other process, which opens either no file or a
 * complete one; a process that dies mid-store leaves only its temporary file, and what it wrote
 * is in the page cache, which outlives it. fsync adds only durability across a crash of the
 * machine (power loss, kernel panic) in the seconds before the kernel writes the file back. Then
 * the entry may be missing, empty, a prefix of itself, or its size in zeros (ext4's delayed
 * allocation), and none of these can be loaded: the magic, the header's XXH3-64, the sizes
 * against the file's length and the payload's XXH3-64 refuse each (cache_format.c; test_cache's
 * damaged entries, a zero-filled one among them), so the kernel is compiled and stored again.
 * An entry is a copy that can always be rebuilt, so the worst a crash costs is one cold compile,
 * while the two fsyncs (the file's data, then the folder's entry) cost 1-13 ms (median 6 of 9,
 * strace -T) of every store on this project's ext4 machine, more than generating the PTX (1.4-3
 * ms), and more when they queue behind the file system's journal commit. Keep them for a folder
 * that must hold every entry it was given across a crash (one filled ahead by `fa3-gen cache
 * warm` and shipped, where a lost entry is a cold compile in production).
 */
/* See cache.h. */
fa3_status fa3_cache_write_file(const char *dir, const char *key, const char *path,
                                const void *const *parts, const size_t *sizes, int nparts,
                                int durable, int *sys_errno)
{
    if (sys_errno)
        *sys_errno = 0;
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, key);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s", dir);
    if (mkdir_p(dir) != 0) {
        if (sys_errno)
            *sys_errno = errno;
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create cache directory %s: mkdir: %s", dir,
                          strerror(errno));
    }
    int fd = inject("open", EROFS) ? -1 : mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        if (sys_errno)
            *sys_errno = e;
        return fa3_seterr(FA3_ERR_CACHE_IO, "cannot create a temporary file in %s: mkstemp: %s",
                          dir, strerror(e));
    }
    const char *failed = NULL;
    for (int i = 0; i < nparts && !failed; i++)
        if (sizes[i] && write_all(fd, parts[i], sizes[i]) != 0)
            failed = "write";
    if (!failed && durable && (inject("fsync", EIO) || fsync(fd) != 0))
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
    if (!durable)
        return FA3_OK;
    /* Make the rename itself durable (best effort: some file systems refuse fsync on a dir). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return FA3_OK;
}

fa3_status fa3_cache_store(const char *dir, const char *key, const void *cubin, size_t cubin_size,
                           const char *log, const fa3_cache_meta *meta, int durable,
                           int *sys_errno)
{
    if (sys_errno)
        *sys_errno = 0;
    if (!dir || !fa3_cache_valid_key(key) || !cubin || cubin_size == 0 || !meta)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_store: bad argument (%s)",
                          !dir ? "NULL dir" : !fa3_cache_valid_key(key) ? "malformed key"
                          : !cubin || !cubin_size ? "no cubin" : "NULL meta");
    size_t lsize = log ? strlen(log) : 0;
    if ((uint64_t)cubin_size > MAX_ENTRY_BYTES || (uint64_t)lsize > MAX_ENTRY_BYTES)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache entry too large (%zu + %zu bytes)", cubin_size,
                          lsize);
    char path[4096];
    FA3_TRY(fa3_cache_entry_path(dir, key, path, sizeof path));
    uint8_t h[HDR];
    FA3_TRY(fa3_cache_header_write(h, key, cubin, cubin_size, log, lsize, meta));
    const void *parts[] = {h, cubin, log};
    const size_t sizes[] = {sizeof h, cubin_size, lsize};
    return fa3_cache_write_file(dir, key, path, parts, sizes, 3, durable, sys_errno);
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
    if (fa3_cache_join_path(lk->path, sizeof lk->path, dir, key, FA3_CACHE_LOCK_SUFFIX) != 0) {
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
