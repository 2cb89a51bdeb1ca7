/*
 * libFuzzer harness: arbitrary bytes as a cache entry file.
 *   input[0]  mode: bit 0 = fix up both XXH3 checksums first (so mutations of sizes, config and key
 *             reach the checks behind the checksums), bit 1 = also go through the file system
 *             (write <dir>/<key>.fa3k, fa3_cache_load it, list the folder)
 *   input[1:] the file's bytes
 * Checks: fa3_cache_parse either refuses with a reason or returns a view that lies inside the
 * input, sums up to its size and has a well-formed key; fa3_cache_load agrees with the parser byte
 * for byte; nothing reads out of bounds or leaks (ASan/UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "runtime/cache.h"

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "fuzz_cache_load: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                          \
        }                                                                     \
    } while (0)

static char g_dir[64];

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "/tmp/fa3jit-fuzz-cache-XXXXXX");
    if (!mkdtemp(g_dir))
        abort();
    return 0;
}

static void cleanup(void) __attribute__((destructor));
static void cleanup(void)
{
    if (g_dir[0]) {
        size_t n = 0;
        fa3_cache_clear(g_dir, &n, NULL);
        rmdir(g_dir);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    uint8_t *buf = malloc(size ? size : 1); /* exactly size bytes: ASan sees any overread */
    CHECK(buf);
    if (size)
        memcpy(buf, data, size);
    const size_t hdr = FA3_CACHE_HEADER_SIZE;
    if ((mode & 1) && size >= hdr) {
        put_u64(buf + FA3_CACHE_OFF_PAYLOAD_SUM, XXH3_64bits(buf + hdr, size - hdr));
        put_u64(buf + FA3_CACHE_OFF_HEADER_SUM, XXH3_64bits(buf, FA3_CACHE_OFF_HEADER_SUM));
    }

    fa3_cache_view v, h;
    const char *why = NULL;
    int ok = fa3_cache_parse(buf, size, NULL, &v, &why);
    int ok_header = fa3_cache_parse_header(buf, size, NULL, &h, NULL);
    if (ok) {
        CHECK(why == NULL);
        CHECK(ok_header);
        CHECK(v.cubin == buf + hdr);
        CHECK(v.cubin_size > 0 && v.cubin_size + v.log_size == size - hdr);
        CHECK((const uint8_t *)v.log == v.cubin + v.cubin_size);
        CHECK(strlen(v.key) == 32 && strspn(v.key, "0123456789abcdef") == 32);
        CHECK(memcmp(&h.meta, &v.meta, sizeof v.meta) == 0);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < v.cubin_size + v.log_size; i++)
            sink ^= v.cubin[i];
        (void)sink;
        char desc[256];
        CHECK(fa3_config_describe(&v.meta.config, desc, sizeof desc) == FA3_OK);
        char tiny[8]; /* truncation path of describe */
        CHECK(fa3_config_describe(&v.meta.config, tiny, sizeof tiny) == FA3_OK);
        CHECK(strlen(tiny) < sizeof tiny);
    } else {
        CHECK(why != NULL && why[0]);
    }

    if (mode & 2) {
        const char *key = ok_header ? h.key : "0123456789abcdef0123456789abcdef";
        char path[256];
        snprintf(path, sizeof path, "%s/%s.fa3k", g_dir, key);
        FILE *f = fopen(path, "wb");
        CHECK(f);
        CHECK(fwrite(buf, 1, size, f) == size);
        CHECK(fclose(f) == 0);
        void *cubin = NULL;
        size_t cubin_size = 0;
        char *log = NULL;
        fa3_cache_meta meta;
        int hit = fa3_cache_load(g_dir, key, NULL, &cubin, &cubin_size, &log, &meta);
        CHECK(hit == ok); /* the file and the bytes get the same verdict */
        if (hit) {
            CHECK(cubin_size == v.cubin_size && memcmp(cubin, v.cubin, cubin_size) == 0);
            CHECK(strlen(log) <= v.log_size && memcmp(log, v.log, strlen(log)) == 0);
            CHECK(memcmp(&meta, &v.meta, sizeof meta) == 0);
        } else {
            CHECK(cubin == NULL && log == NULL);
        }
        free(cubin);
        free(log);
        fa3_cache_file *files = NULL;
        size_t n = 0;
        CHECK(fa3_cache_list(g_dir, &files, &n) == FA3_OK);
        CHECK(n == 1 && files[0].kind == FA3_CACHE_FILE_ENTRY && files[0].valid == ok);
        fa3_free(files);
        CHECK(unlink(path) == 0);
    }
    free(buf);
    return 0;
}
