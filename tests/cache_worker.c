/*
 * cache_worker: one process of test_concurrency. Waits until its stdin reaches end of file (the
 * test closes the pipe to start every worker at once), then gets the hd64 bf16 causal kernel from
 * a new context on the cache folder argv[1], writes its cubin to argv[2] and prints one line:
 *   key=<cache key> source=<COMPILED|DISK|MEMORY> size=<cubin bytes> warning=<context warning>
 * Exit status 0 on success, 1 with the library's message on stderr otherwise. Public API only.
 */
#include <stdio.h>
#include <unistd.h>

#include "fa3jit.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cache_worker CACHE_DIR CUBIN_OUT\n");
        return 2;
    }
    char c;
    while (read(STDIN_FILENO, &c, 1) > 0) {
    }
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.cache_dir = argv[1];
    fa3_context *ctx = NULL;
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = 64;
    cfg.mask = FA3_MASK_CAUSAL;
    fa3_kernel *k = NULL;
    fa3_kernel_info in;
    const void *cubin = NULL;
    size_t size = 0;
    fa3_status st = fa3_context_create(&ctx, &o);
    if (st == FA3_OK)
        st = fa3_jit_get_kernel(ctx, &cfg, &k);
    if (st == FA3_OK)
        st = fa3_kernel_get_info(k, &in);
    if (st == FA3_OK)
        st = fa3_kernel_get_cubin(k, &cubin, &size);
    if (st != FA3_OK) {
        fprintf(stderr, "cache_worker: %s: %s\n", fa3_strerror(st), fa3_last_error_message());
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(cubin, 1, size, f) != size || fclose(f) != 0) {
        perror(argv[2]);
        return 1;
    }
    static const char *names[] = {"COMPILED", "DISK", "MEMORY"};
    printf("key=%s source=%s size=%zu warning=%s\n", in.cache_key, names[in.source % 3], size,
           fa3_context_warning(ctx));
    fa3_context_free(ctx);
    return 0;
}
