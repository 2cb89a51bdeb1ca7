/*
 * The disk cache's index (layout in cache.h): <dir>/<index key>.fa3x names the entry key of one
 * kernel, where the index key is a hash of what the PTX is made from (the kernel kind, the
 * canonical config, FA3JIT_PLAN_DEBUG, the backend, the arch) and of this library binary's ELF
 * build ID, which stands for the generator's code. A process that finds it loads the entry
 * without generating the PTX first: the generator is about 2-3 of a warm load's 3 ms
 * (docs/notes.md, session 34). Without a build ID (a binary linked with --build-id=none) there is
 * no index and every load generates the PTX, as before.
 *
 * The index only saves time, never decides what is loaded: the entry it names is checked as any
 * other (its key, checksums, its config, kernel kind and plan knobs against the ones wanted), and
 * a missing, damaged or stale index file, or one naming a missing or unfit entry, sends the load
 * back to the PTX-keyed path, which then writes a fresh index file.
 */
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/knobs.h"
#include "runtime/cache.h"

/* ------------------------------------------------------------------ build ID */

#define MAX_BUILD_ID 64

static uint8_t g_build_id[MAX_BUILD_ID];
static size_t g_build_id_len; /* 0: none found */
static pthread_once_t g_build_id_once = PTHREAD_ONCE_INIT;

/* The GNU build-ID note (NT_GNU_BUILD_ID, name "GNU") among the notes at p[0..size). */
static void find_build_id_note(const uint8_t *p, size_t size)
{
    size_t off = 0;
    while (off + sizeof(ElfW(Nhdr)) <= size) {
        const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(p + off);
        size_t name_off = off + sizeof *nh;
        size_t desc_off = name_off + ((nh->n_namesz + 3u) & ~3u);
        size_t next = desc_off + ((nh->n_descsz + 3u) & ~3u);
        if (next > size || next <= off)
            return;
        if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
            memcmp(p + name_off, "GNU", 4) == 0 && nh->n_descsz > 0 &&
            nh->n_descsz <= MAX_BUILD_ID) {
            memcpy(g_build_id, p + desc_off, nh->n_descsz);
            g_build_id_len = nh->n_descsz;
            return;
        }
        off = next;
    }
}

/* dl_iterate_phdr callback: the object whose loaded segments hold this function's code (the
   shared library, or the program that linked the static one) gives its build-ID note. */
static int visit_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const uintptr_t self = (uintptr_t)data;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && self >= lo && self - lo < ph->p_memsz;
    }
    if (!mine)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && !g_build_id_len; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_NOTE)
            find_build_id_note((const uint8_t *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz);
    }
    return 1;
}

static void read_build_id(void)
{
    (void)dl_iterate_phdr(visit_object, (void *)(uintptr_t)&read_build_id);
}

size_t fa3_cache_build_id(const uint8_t **id)
{
    pthread_once(&g_build_id_once, read_build_id);
    *id = g_build_id;
    /* Test hook "build-id": as if the binary had none. */
    return fa3_test_fail("build-id") ? 0 : g_build_id_len;
}

/* ------------------------------------------------------------------ the index key */

int fa3_cache_index_key(const fa3_cache_index_input *in, char out[33])
{
    const uint8_t *id;
    size_t id_len = fa3_cache_build_id(&id);
    if (!id_len)
        return 0;
    /* What the PTX is made from besides the config and the kind, as text in the place of the
       PTX in fa3_cache_key (the two keys share one serialization): the generator's binary and
       the knobs the planner reads. Unset and empty knobs differ (a debug plan's text is built
       from the value). */
    const char *knobs = getenv(FA3_KNOBS_ENV);
    size_t cap = 64 + 2 * MAX_BUILD_ID + (knobs ? strlen(knobs) : 0);
    char *desc = malloc(cap);
    if (!desc)
        return 0;
    int n = snprintf(desc, cap, "fa3jit index v1\nbuild-id ");
    for (size_t i = 0; i < id_len; i++)
        n += snprintf(desc + n, cap - (size_t)n, "%02x", id[i]);
    n += snprintf(desc + n, cap - (size_t)n, "\nknobs %s%s\n", knobs ? "set " : "unset",
                  knobs ? knobs : "");
    int ok = n > 0 && (size_t)n < cap;
    fa3_cache_key_input k = {.kind = in->kind, .config = in->config, .ptx = desc,
                             .ptx_len = ok ? (size_t)n : 0, .generator = FA3_GENERATOR_VERSION,
                             .backend = in->backend, .backend_version = in->backend_version,
                             .arch = in->arch};
    if (ok && fa3_cache_key(&k, out) != FA3_OK) {
        fa3_clearerr();
        ok = 0;
    }
    free(desc);
    return ok;
}

/* ------------------------------------------------------------------ the file */

int fa3_cache_index_load(const char *dir, const char *ikey, char *ekey)
{
    ekey[0] = '\0';
    char path[4096];
    uint8_t b[FA3_CACHE_INDEX_SIZE];
    return dir && fa3_cache_valid_key(ikey) &&
           fa3_cache_join_path(path, sizeof path, dir, ikey, FA3_CACHE_INDEX_SUFFIX) == 0 &&
           fa3_cache_read_file(path, b, sizeof b) && fa3_cache_index_parse(b, sizeof b, ikey, ekey);
}

fa3_status fa3_cache_index_store(const char *dir, const char *ikey, const char *ekey, int durable)
{
    if (!dir || !fa3_cache_valid_key(ikey) || !fa3_cache_valid_key(ekey))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_index_store: bad argument");
    /* Already there and right (the usual case after a load through the PTX key of a kernel
       another process indexed): no write. */
    char have[33];
    if (fa3_cache_index_load(dir, ikey, have) && strcmp(have, ekey) == 0)
        return FA3_OK;
    char path[4096];
    if (fa3_cache_join_path(path, sizeof path, dir, ikey, FA3_CACHE_INDEX_SUFFIX) != 0)
        return fa3_seterr(FA3_ERR_CACHE_IO, "cache path too long: %s", dir);
    uint8_t b[FA3_CACHE_INDEX_SIZE];
    fa3_cache_index_write(b, ikey, ekey);
    const void *parts[] = {b};
    const size_t sizes[] = {sizeof b};
    return fa3_cache_write_file(dir, ikey, path, parts, sizes, 1, durable, NULL);
}
