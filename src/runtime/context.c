/*
 * Contexts: options, creation (backend, cache folder and lock timeout from the options and the
 * environment), the context's one warning, and freeing a context with its kernels. Getting a
 * kernel is build.c, the kernel object kernel.c.
 *
 * Disk-cache problems never fail a call: the context keeps working from memory (a folder that
 * cannot be created: memory only; a folder that is not writable: entries already there are still
 * loaded) and keeps the first problem as its warning (fa3_context_warning).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------ warning, disk state */

/* Keeps the context's first warning (later ones are dropped: reported once). The text
   is written before warned is set and never changed after, so readers need no lock. */
void fa3_context_warn(fa3_context *ctx, const char *fmt, ...)
{
    if (atomic_load_explicit(&ctx->warned, memory_order_acquire))
        return;
    pthread_mutex_lock(&ctx->mu);
    if (!atomic_load_explicit(&ctx->warned, memory_order_relaxed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->warning, sizeof ctx->warning, fmt, ap);
        va_end(ap);
        atomic_store_explicit(&ctx->warned, 1, memory_order_release);
    }
    pthread_mutex_unlock(&ctx->mu);
}

/* Moves the context's disk state towards OFF (never back). */
void fa3_context_degrade_disk(fa3_context *ctx, int state)
{
    int cur = atomic_load(&ctx->disk_state);
    while (cur < state && !atomic_compare_exchange_weak(&ctx->disk_state, &cur, state)) {
    }
}


/* ------------------------------------------------------------------ public: context */

static const fa3_struct_kind options_kind = {"fa3_context_options", "fa3_context_options_init()",
                                             sizeof(fa3_context_options), NULL, 0};
static const fa3_context_options options_defaults = {.struct_size = sizeof(fa3_context_options)};

void fa3_context_options_init_sized(fa3_context_options *opts, size_t struct_size)
{
    if (opts)
        fa3_struct_init(&options_kind, opts, struct_size, &options_defaults);
}

fa3_status fa3_context_create(fa3_context **out, const fa3_context_options *opts)
{
    if (!out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_context_create: NULL ctx");
    *out = NULL;
    fa3_context_options o = options_defaults;
    if (opts)
        FA3_TRY(fa3_struct_in(&options_kind, opts, &o, &options_defaults));
    if ((int)o.backend < FA3_BACKEND_AUTO || (int)o.backend > FA3_BACKEND_DRIVER_JIT)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "backend %d is not a valid fa3_backend",
                          (int)o.backend);
    fa3_backend resolved = fa3_backend_resolve(o.backend);
    if (!fa3_backend_available(resolved))
        return fa3_seterr(FA3_ERR_BAD_BACKEND,
                          "backend %s is not built into this library (rebuild with the PTX Compiler "
                          "API: meson -Dptx_compiler_dir=<folder of libnvptxcompiler_static.a>)",
                          fa3_backend_name(resolved));
    /* nvJitLink is opened here rather than at the first compile, so that a machine without it
       fails at the context, naming the library, before any kernel is asked for (its version
       enters every cache key, so even a warm cache needs it). */
    if (resolved == FA3_BACKEND_NVJITLINK)
        FA3_TRY(fa3_jitlink_load());

    fa3_context *ctx = fa3_test_fail("oom-context") ? NULL : calloc(1, sizeof *ctx);
    if (!ctx)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for a context (%zu bytes)",
                          sizeof *ctx);
    ctx->requested = o.backend;
    ctx->backend = resolved;
    /* The warning starts with the environment's problems (bad values, replaced by defaults),
       then why no cache folder could be named, if so. */
    fa3_env env;
    char dir_warning[256];
    fa3_env_read(&env, ctx->warning, sizeof ctx->warning);
    fa3_status st = fa3_cache_dir_resolve(o.cache_dir, o.disable_disk_cache, &env, &ctx->cache_dir,
                                          dir_warning, sizeof dir_warning);
    if (st != FA3_OK) {
        free(ctx);
        return st;
    }
    size_t n = strlen(ctx->warning);
    if (dir_warning[0])
        fa3_append(ctx->warning, sizeof ctx->warning, &n, "%s%s", n ? "; " : "", dir_warning);
    atomic_init(&ctx->disk_state, FA3_DISK_OK);
    atomic_init(&ctx->warned, ctx->warning[0] != '\0');
    /* How long to wait for another process compiling the same kernel before compiling it too. */
    ctx->lock_timeout_ms = env.lock_timeout_s * 1000;
    ctx->cache_fsync = env.cache_fsync; /* crash durability of stored entries (cache.c) */
    ctx->debug_varlen = env.debug_varlen; /* fa3_fwd: check the varlen/paged arrays (varlen.c) */
    if (pthread_mutex_init(&ctx->mu, NULL) != 0) {
        free(ctx->cache_dir);
        free(ctx);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&ctx->built, NULL) != 0) {
        pthread_mutex_destroy(&ctx->mu);
        free(ctx->cache_dir);
        free(ctx);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "pthread_cond_init failed");
    }
    *out = ctx;
    return FA3_OK;
}

void fa3_context_free(fa3_context *ctx)
{
    if (!ctx)
        return;
    fa3_kernel *k = ctx->kernels;
    while (k) {
        fa3_kernel *next = k->next;
        fa3_kernel_free(k);
        k = next;
    }
    pthread_cond_destroy(&ctx->built);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx->cache_dir);
    free(ctx);
}

fa3_backend fa3_context_backend(const fa3_context *ctx)
{
    return ctx ? ctx->backend : FA3_BACKEND_AUTO;
}

const char *fa3_context_cache_dir(const fa3_context *ctx)
{
    return ctx ? ctx->cache_dir : NULL;
}

const char *fa3_context_warning(const fa3_context *ctx)
{
    if (!ctx)
        return "";
    fa3_context *c = (fa3_context *)ctx; /* atomic load on a const object */
    return atomic_load_explicit(&c->warned, memory_order_acquire) ? c->warning : "";
}
