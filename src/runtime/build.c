/*
 * fa3_jit_get_kernel: canonical config → the context's memory table → the plan, then for each
 * kernel of the config's operation (op.h): PTX from its kind's emitter → cache key → disk cache →
 * compile → store in both.
 *
 * Concurrency: the context mutex guards the kernel table. A kernel being built is in the table
 * with ready = 0 so that a second thread asking for the same config waits for it (on the context's
 * condition variable) instead of compiling it again, while other configs build in parallel with
 * the lock released. Between contexts and processes, the per-key file lock of the disk cache
 * (cache.h) makes one of them compile while the others wait and then load its entry.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/generate.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------ building a kernel */

/* Fills part pt of k from the disk cache entry of pt->key; 1 on a hit. */
static int load_from_disk(fa3_context *ctx, const fa3_kernel *k, fa3_part *pt)
{
    fa3_cache_meta meta;
    char *log = NULL;
    if (!fa3_cache_load(ctx->cache_dir, pt->key, &pt->key_config, &pt->cubin, &pt->cubin_size,
                        &log, &meta))
        return 0;
    /* The key covers these (the PTX header names the plan's knobs): a forged or damaged entry. */
    if (meta.backend != k->backend || meta.kind != pt->kind ||
        strcmp(meta.plan_debug, pt->plan_debug) != 0) {
        free(pt->cubin);
        free(log);
        pt->cubin = NULL;
        pt->cubin_size = 0;
        return 0;
    }
    pt->compile_log = log;
    pt->num_regs = meta.num_regs;
    pt->spill_store_bytes = meta.spill_store_bytes;
    pt->spill_load_bytes = meta.spill_load_bytes;
    pt->stack_bytes = meta.stack_bytes;
    pt->has_warning = meta.has_warning;
    pt->source = FA3_SOURCE_DISK;
    pt->compile_ms = 0;
    return 1;
}

/* Compiles part pt's PTX. t0: when its build started (compile_ms counts codegen too). */
static fa3_status compile_part(const fa3_kernel *k, fa3_part *pt, double t0)
{
    fa3_compile_result r;
    fa3_status st = fa3_compile_ptx(pt->ptx, pt->ptx_len, k->cfg.arch, k->backend, &r);
    if (st != FA3_OK) {
        fa3_compile_result_free(&r);
        return st;
    }
    pt->compile_ms = fa3_now_ms() - t0;
    pt->cubin = r.cubin;
    pt->cubin_size = r.cubin_size;
    r.cubin = NULL;
    fa3_part_take_resources(pt, &r);
    pt->source = FA3_SOURCE_COMPILED;
    if (k->backend != FA3_BACKEND_DRIVER_JIT) {
        pt->compile_log =
            fa3_test_fail("oom-log") ? NULL : fa3_compile_join_logs(r.info_log, r.error_log);
        if (!pt->compile_log) {
            fa3_compile_result_free(&r);
            return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the compiler log");
        }
    } /* DRIVER_JIT: the log arrives with the first module load (compile_log stays NULL). */
    fa3_compile_result_free(&r);
    return FA3_OK;
}

/* Test hook "ptx": makes the generated text invalid, so that the compile fails with a log. */
static fa3_status spoil_ptx(fa3_part *pt)
{
    static const char junk[] = "\n.this_is_not_ptx %r0, garbage;\n";
    char *p = realloc(pt->ptx, pt->ptx_len + sizeof junk);
    if (!p)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(p + pt->ptx_len, junk, sizeof junk);
    pt->ptx = p;
    pt->ptx_len += sizeof junk - 1;
    return FA3_OK;
}

/* Stores part pt's entry. Not an error when it fails: the kernel works from memory, the reason
   becomes the context's warning and no stale message is left for a call that succeeds. */
static void store_part(fa3_context *ctx, const fa3_kernel *k, const fa3_part *pt)
{
    fa3_cache_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.num_regs = pt->num_regs;
    meta.spill_store_bytes = pt->spill_store_bytes;
    meta.spill_load_bytes = pt->spill_load_bytes;
    meta.stack_bytes = pt->stack_bytes;
    meta.has_warning = pt->has_warning;
    meta.backend = k->backend;
    meta.kind = pt->kind;
    meta.config = pt->key_config;
    snprintf(meta.plan_debug, sizeof meta.plan_debug, "%s", pt->plan_debug);
    int e = 0;
    if (fa3_cache_store(ctx->cache_dir, pt->key, pt->cubin, pt->cubin_size, pt->compile_log, &meta,
                        ctx->cache_fsync, &e) != FA3_OK) {
        if (fa3_cache_errno_readonly(e))
            fa3_context_degrade_disk(ctx, FA3_DISK_READONLY);
        fa3_context_warn(ctx, "%s (the kernel is kept in memory)", fa3_last_error_message());
        fa3_clearerr();
    }
}

/* Fills part pt of k (whose plan is made): PTX from its kind's emitter, its cache key, then the
   disk cache or a compile (stored). Called without the context lock. */
static fa3_status build_part(fa3_context *ctx, const fa3_kernel *k, fa3_part *pt)
{
    double t0 = fa3_now_ms();
    fa3_kind_shape(pt->kind, &k->plan, &pt->threads, &pt->smem_bytes);
    fa3_kind_key_config(pt->kind, &k->cfg, &pt->key_config);
    pt->plan_debug = pt->kind == FA3_KERNEL_FWD ? k->plan.debug : "";
    FA3_TRY(fa3_codegen_kernel(pt->kind, &k->plan, &pt->ptx, &pt->ptx_len));
    if (!pt->ptx || pt->ptx[pt->ptx_len] != '\0')
        return fa3_seterr(FA3_ERR_INTERNAL, "the generator returned no NUL-terminated PTX");
    if (fa3_test_fail("ptx"))
        FA3_TRY(spoil_ptx(pt));
    const char *arch = fa3_arch_name(k->cfg.arch);
    fa3_cache_key_input in = {.kind = pt->kind, .config = &pt->key_config, .ptx = pt->ptx,
                              .ptx_len = pt->ptx_len, .generator = FA3_GENERATOR_VERSION,
                              .backend = fa3_backend_name(k->backend),
                              .backend_version = k->backend_version, .arch = arch ? arch : ""};
    FA3_TRY(fa3_cache_key(&in, pt->key));

    /* The disk cache holds cubins; DRIVER_JIT has none to keep. */
    int use_disk = ctx->cache_dir && k->backend != FA3_BACKEND_DRIVER_JIT &&
                   atomic_load(&ctx->disk_state) != FA3_DISK_OFF;
    fa3_cache_lock lock;
    lock.fd = -1;
    if (use_disk) {
        if (load_from_disk(ctx, k, pt))
            return FA3_OK;
        if (atomic_load(&ctx->disk_state) == FA3_DISK_OK) {
            /* Compile under the key's lock, looking at the disk again once it is held: another
               process (or context) may have just stored the entry while we waited. */
            char why[768];
            switch (fa3_cache_lock_take(ctx->cache_dir, pt->key, ctx->lock_timeout_ms, &lock, why,
                                        sizeof why)) {
            case FA3_CACHE_LOCKED:
                if (load_from_disk(ctx, k, pt)) {
                    fa3_cache_lock_release(&lock);
                    return FA3_OK;
                }
                break;
            case FA3_CACHE_LOCK_NODIR:
                fa3_context_degrade_disk(ctx, FA3_DISK_OFF);
                fa3_context_warn(ctx, "%s: kernels are kept in memory only", why);
                break;
            case FA3_CACHE_LOCK_READONLY:
                fa3_context_degrade_disk(ctx, FA3_DISK_READONLY);
                fa3_context_warn(ctx, "cache directory %s is not writable (%s): new kernels are kept "
                                 "in memory only", ctx->cache_dir, why);
                break;
            case FA3_CACHE_LOCK_UNAVAILABLE:
                fa3_context_warn(ctx, "%s: compiling without the cache lock", why);
                break;
            }
        }
    }

    fa3_status st = compile_part(k, pt, t0);
    if (st == FA3_OK && use_disk && pt->cubin && atomic_load(&ctx->disk_state) == FA3_DISK_OK)
        store_part(ctx, k, pt);
    fa3_cache_lock_release(&lock);
    return st;
}

/* Fills k (whose cfg and parts' kinds are set): the plan, then each kernel of its operation.
   Called without the context lock. */
static fa3_status build_kernel(fa3_context *ctx, fa3_kernel *k)
{
    FA3_TRY(fa3_plan_make(&k->cfg, &k->plan));
    FA3_TRY(fa3_backend_version(k->backend, k->backend_version, sizeof k->backend_version));
    k->first_source = FA3_SOURCE_DISK;
    for (int i = 0; i < k->num_parts; i++) {
        FA3_TRY(build_part(ctx, k, &k->parts[i]));
        if (k->parts[i].source == FA3_SOURCE_COMPILED)
            k->first_source = FA3_SOURCE_COMPILED;
    }
    return FA3_OK;
}

fa3_status fa3_jit_get_kernel(fa3_context *ctx, const fa3_config *cfg, fa3_kernel **kernel)
{
    if (!ctx || !cfg || !kernel)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_jit_get_kernel: NULL %s",
                          !ctx ? "ctx" : !cfg ? "cfg" : "kernel");
    *kernel = NULL;
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(cfg, &c));

    pthread_mutex_lock(&ctx->mu);
    fa3_kernel *k;
    for (;;) {
        for (k = ctx->kernels; k; k = k->next)
            if (fa3_config_equal(&k->cfg, &c))
                break;
        if (!k || k->ready)
            break;
        pthread_cond_wait(&ctx->built, &ctx->mu); /* another thread is building it */
    }
    if (k) {
        pthread_mutex_unlock(&ctx->mu);
        fa3_kernel_note_source(k, FA3_SOURCE_MEMORY);
        *kernel = k;
        return FA3_OK;
    }
    k = fa3_kernel_new(ctx, &c);
    if (!k) {
        pthread_mutex_unlock(&ctx->mu);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for a kernel");
    }
    k->next = ctx->kernels;
    ctx->kernels = k;
    pthread_mutex_unlock(&ctx->mu);

    fa3_status st = build_kernel(ctx, k);

    pthread_mutex_lock(&ctx->mu);
    if (st == FA3_OK) {
        k->ready = 1;
    } else {
        fa3_kernel **pp = &ctx->kernels;
        while (*pp != k)
            pp = &(*pp)->next;
        *pp = k->next;
    }
    pthread_cond_broadcast(&ctx->built);
    pthread_mutex_unlock(&ctx->mu);
    if (st != FA3_OK) {
        fa3_kernel_free(k);
        return st;
    }
    fa3_kernel_note_source(k, k->first_source);
    *kernel = k;
    return FA3_OK;
}
