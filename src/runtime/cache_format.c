/*
 * The bytes of the disk cache: the cache key (the XXH3-128 of the kernel kind, an explicit
 * little-endian serialization of the canonical config from the field table, never the raw struct
 * with its padding, then the PTX text, the generator version, the backend's name and version and
 * the arch: only what changes the binary, nothing that changes per call), the entry header and
 * the index file (layouts in cache.h): their writers and parsers. Pure: no I/O (cache.c and
 * cache_index.c read and write the files).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"

#define MAGIC FA3_CACHE_MAGIC
#define HDR FA3_CACHE_HEADER_SIZE
#define MAX_ENTRY_BYTES FA3_CACHE_MAX_PART /* refuse to believe in a cubin over 1 GiB */
_Static_assert(FA3_CACHE_PLAN_DEBUG_SIZE == FA3_PLAN_DEBUG_SIZE, "the header holds fa3_plan.debug");
_Static_assert(FA3_CONFIG_MAX_FIELDS == FA3_CACHE_CONFIG_SLOTS &&
               FA3_CACHE_OFF_CONFIG + 4 * FA3_CACHE_CONFIG_SLOTS == FA3_CACHE_OFF_CONFIG_COUNT,
               "the header holds every config field");

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

/* The canonical config as FA3_CONFIG_NUM_FIELDS little-endian 32-bit values in the field
   table's order (config_fields.c): the cache key hashes them, and entry headers store them. */
static void put_config(uint8_t *p, const fa3_config *c)
{
    int32_t v[FA3_CONFIG_NUM_FIELDS];
    fa3_config_to_values(c, v);
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        put_u32(p + 4 * i, (uint32_t)v[i]);
}

static void get_config(const uint8_t *p, fa3_config *c)
{
    int32_t v[FA3_CONFIG_NUM_FIELDS];
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        v[i] = (int32_t)get_u32(p + 4 * i);
    fa3_config_from_values(c, v);
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

fa3_status fa3_cache_key(const fa3_cache_key_input *in, char out[33])
{
    if (!in || !in->config || !in->ptx || !in->generator || !in->backend ||
        !in->backend_version || !in->arch || !out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_key: NULL argument");
    XXH3_state_t *s = XXH3_createState();
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the cache-key hash state");
    if (XXH3_128bits_reset(s) != XXH_OK) {
        XXH3_freeState(s);
        return fa3_seterr(FA3_ERR_INTERNAL, "XXH3_128bits_reset failed");
    }
    static const char domain[] = "fa3jit cache key v2";
    hash_str(s, domain, sizeof domain - 1);
    hash_u32(s, (uint32_t)in->kind);
    /* The canonical config, one fixed-width field at a time (count first: adding a field changes
       every key). */
    hash_u32(s, FA3_CONFIG_NUM_FIELDS);
    uint8_t cb[4 * FA3_CONFIG_NUM_FIELDS];
    put_config(cb, in->config);
    XXH3_128bits_update(s, cb, sizeof cb);
    hash_str(s, in->ptx, in->ptx_len);
    hash_str(s, in->generator, strlen(in->generator));
    hash_str(s, in->backend, strlen(in->backend));
    hash_str(s, in->backend_version, strlen(in->backend_version));
    hash_str(s, in->arch, strlen(in->arch));
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

fa3_status fa3_cache_key_for(const fa3_config *canonical, const char *ptx, size_t len,
                             fa3_backend backend, const char *backend_version, char out[33])
{
    if (!canonical || !ptx || !backend_version || !out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_cache_key_for: NULL argument");
    /* Canonicalizing again is idempotent and makes equal kernels share a key even when a caller
       hands in a config that is not yet canonical. */
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(canonical, &c));
    const char *arch = fa3_arch_name(c.arch);
    fa3_cache_key_input in = {.kind = FA3_KERNEL_FWD, .config = &c, .ptx = ptx, .ptx_len = len,
                              .generator = FA3_GENERATOR_VERSION,
                              .backend = fa3_backend_name(fa3_backend_resolve(backend)),
                              .backend_version = backend_version, .arch = arch ? arch : ""};
    return fa3_cache_key(&in, out);
}

/* ------------------------------------------------------------------ header */

int fa3_cache_hex32(const char *p)
{
    for (int i = 0; i < 32; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    return 1;
}

fa3_status fa3_cache_header_write(uint8_t *h, const char *key, const void *cubin,
                                  size_t cubin_size, const char *log, size_t lsize,
                                  const fa3_cache_meta *meta)
{
    memset(h, 0, HDR);
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
    put_u32(h + FA3_CACHE_OFF_CONFIG_COUNT, FA3_CONFIG_NUM_FIELDS);
    put_u32(h + FA3_CACHE_OFF_KIND, (uint32_t)meta->kind);
    put_u64(h + FA3_CACHE_OFF_CREATED,
            (uint64_t)(meta->created ? meta->created : (int64_t)time(NULL)));
    for (size_t i = 0; i + 1 < FA3_CACHE_PLAN_DEBUG_SIZE && meta->plan_debug[i]; i++) {
        unsigned char ch = (unsigned char)meta->plan_debug[i];
        h[FA3_CACHE_OFF_PLAN_DEBUG + i] = ch >= 0x20 && ch < 0x7f ? ch : '?';
    }
    put_u64(h + FA3_CACHE_OFF_HEADER_SUM, XXH3_64bits(h, FA3_CACHE_OFF_HEADER_SUM));
    return FA3_OK;
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
    if (!fa3_cache_hex32((const char *)h + FA3_CACHE_OFF_KEY))
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
    uint32_t kind = get_u32(h + FA3_CACHE_OFF_KIND);
    if (kind >= FA3_KERNEL_NUM_KINDS)
        BAD("unknown kernel kind");
    if (get_u32(h + FA3_CACHE_OFF_CONFIG_COUNT) != FA3_CONFIG_NUM_FIELDS)
        BAD("config of another field count (written by another fa3jit version)");
    for (uint32_t i = FA3_CONFIG_NUM_FIELDS; i < FA3_CACHE_CONFIG_SLOTS; i++)
        if (get_u32(h + FA3_CACHE_OFF_CONFIG + 4 * i) != 0)
            BAD("malformed config slots");
    fa3_config cfg;
    get_config(h + FA3_CACHE_OFF_CONFIG, &cfg);
    /* Plausibility only (the loader compares with the config it wants): each field in its
       table range. fa3_config_canonicalize would set the thread's message. */
    if (fa3_config_out_of_range(&cfg))
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
    v->meta.kind = (fa3_kernel_kind)kind;
    v->meta.config = cfg;
    v->meta.created = (int64_t)get_u64(h + FA3_CACHE_OFF_CREATED);
    if (why)
        *why = NULL;
    return 1;
}

int fa3_cache_payload_ok(const uint8_t *h, const uint8_t *payload, const fa3_cache_view *v)
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
    if (!fa3_cache_payload_ok(h, payload, v)) {
        memset(v, 0, sizeof *v);
        BAD("payload checksum mismatch");
    }
    v->cubin = payload;
    v->log = (const char *)payload + v->cubin_size;
    return 1;
}

#undef BAD

/* ------------------------------------------------------------------ index file (cache.h) */

#define IDX_OFF_VERSION 8
#define IDX_OFF_SIZE 12
#define IDX_OFF_IKEY 16
#define IDX_OFF_EKEY 48
#define IDX_OFF_SUM 80

void fa3_cache_index_write(uint8_t *out, const char *ikey, const char *ekey)
{
    memset(out, 0, FA3_CACHE_INDEX_SIZE);
    memcpy(out, FA3_CACHE_INDEX_MAGIC, 8);
    put_u32(out + IDX_OFF_VERSION, FA3_CACHE_INDEX_FORMAT);
    put_u32(out + IDX_OFF_SIZE, FA3_CACHE_INDEX_SIZE);
    memcpy(out + IDX_OFF_IKEY, ikey, 32);
    memcpy(out + IDX_OFF_EKEY, ekey, 32);
    put_u64(out + IDX_OFF_SUM, XXH3_64bits(out, IDX_OFF_SUM));
}

int fa3_cache_index_parse(const uint8_t *data, size_t size, const char *ikey, char *ekey)
{
    ekey[0] = '\0';
    if (size != FA3_CACHE_INDEX_SIZE || memcmp(data, FA3_CACHE_INDEX_MAGIC, 8) != 0 ||
        get_u32(data + IDX_OFF_VERSION) != FA3_CACHE_INDEX_FORMAT ||
        get_u32(data + IDX_OFF_SIZE) != FA3_CACHE_INDEX_SIZE ||
        get_u64(data + IDX_OFF_SUM) != XXH3_64bits(data, IDX_OFF_SUM) ||
        !fa3_cache_hex32((const char *)data + IDX_OFF_IKEY) ||
        !fa3_cache_hex32((const char *)data + IDX_OFF_EKEY) ||
        (ikey && memcmp(data + IDX_OFF_IKEY, ikey, 32) != 0))
        return 0;
    memcpy(ekey, data + IDX_OFF_EKEY, 32);
    ekey[32] = '\0';
    return 1;
}
