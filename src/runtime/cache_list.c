/*
 * What `fa3-gen cache ls` and `cache clear` see: fa3jit's file names, the listing (each entry
 * checked whole, as the loader checks it) and the removal of fa3jit's files, never others.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "runtime/cache.h"

/* ------------------------------------------------------------------ listing */

fa3_cache_file_kind fa3_cache_file_kind_of(const char *name)
{
    if (!name)
        return FA3_CACHE_FILE_OTHER;
    size_t n = strlen(name);
    if (n == 37 && fa3_cache_hex32(name)) {
        if (strcmp(name + 32, FA3_CACHE_SUFFIX) == 0)
            return FA3_CACHE_FILE_ENTRY;
        if (strcmp(name + 32, FA3_CACHE_LOCK_SUFFIX) == 0)
            return FA3_CACHE_FILE_LOCK;
        if (strcmp(name + 32, FA3_CACHE_INDEX_SUFFIX) == 0)
            return FA3_CACHE_FILE_INDEX;
        return FA3_CACHE_FILE_OTHER;
    }
    /* ".<key>.tmp.XXXXXX" (mkstemp's six letters or digits) */
    if (n == 44 && name[0] == '.' && fa3_cache_hex32(name + 1) &&
        memcmp(name + 33, ".tmp.", 5) == 0) {
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
        if (fa3_cache_join_path(path, sizeof path, dir, de->d_name, "") != 0 ||
            lstat(path, &sb) != 0)
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
        f->valid = fa3_cache_read_entry(fd, key, NULL, &f->view, &payload, &f->why);
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
        if (fa3_cache_join_path(path, sizeof path, dir, de->d_name, "") != 0)
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

