/*
 * Contexts and kernels: fa3_jit_get_kernel's path (canonical config → memory table → PTX from the
 * generator → cache key → disk cache → compile → store in both), kernel info and cubin access, and
 * the lazy per-CUcontext module load that fa3_fwd uses.
 *
 * Concurrency: the context mutex guards the kernel table. A kernel being built is in the table
 * with ready = 0 so that a second thread asking for the same config waits for it (on the context's
 * condition variable) instead of compiling it again, while other configs build in parallel with
 * the lock released. Each kernel's own mutex guards its module list and what the driver JIT fills
 * in late. Between contexts and processes, the per-key file lock of the disk cache (cache.h) makes
 * one of them compile while the others wait and then load its entry.
 *
 * Disk-cache problems never fail a call: the context keeps working from memory (a folder that
 * cannot be created: memory only; a folder that is not writable: entries already there are still
 * loaded) and keeps the first problem as its warning (fa3_context_warning).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel_abi.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------ helpers */

/* fa3_kernel_info.source is per thread: the source of this thread's latest fa3_jit_get_kernel
   call if that call returned the kernel asked about (matched by serial, not by address, which a
   freed kernel may pass on), else how the kernel was first obtained. */
static atomic_ullong g_next_serial = 1;
static _Thread_local unsigned long long tls_last_serial;
static _Thread_local fa3_kernel_source tls_last_source;

static void note_source(const fa3_kernel *k, fa3_kernel_source s)
{
    tls_last_serial = k->serial;
    tls_last_source = s;
}


/* Keeps the context's first warning (later ones are dropped: reported once). The text
   is written before warned is set and never changed after, so readers need no lock. */
static void set_warning(fa3_context *ctx, const char *fmt, ...) FA3_PRINTF(2, 3);
static void set_warning(fa3_context *ctx, const char *fmt, ...)
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
static void degrade_disk(fa3_context *ctx, int state)
{
    int cur = atomic_load(&ctx->disk_state);
    while (cur < state && !atomic_compare_exchange_weak(&ctx->disk_state, &cur, state)) {
    }
}

/* Unloads kernel's modules (when a driver was ever loaded) and frees it. */
static void kernel_free(fa3_kernel *k)
{
    if (!k)
        return;
    if (k->num_modules && fa3_driver_loaded()) {
        const fa3_driver *d = NULL;
        if (fa3_driver_get(&d) == FA3_OK) {
            /* cuModuleUnload works on the current context: visit each module's context, then put
               the caller's back. Errors are ignored (nothing useful to do while freeing). */
            CUcontext saved = NULL;
            int have_saved = d->cuCtxGetCurrent(&saved) == CUDA_SUCCESS;
            CUcontext cur = saved;
            for (size_t i = 0; i < k->num_modules; i++) {
                fa3_kernel_module *m = &k->modules[i];
                if (m->cuctx != cur && d->cuCtxSetCurrent(m->cuctx) == CUDA_SUCCESS)
                    cur = m->cuctx;
                if (cur == m->cuctx)
                    (void)d->cuModuleUnload(m->module);
            }
            if (have_saved && cur != saved)
                (void)d->cuCtxSetCurrent(saved);
        }
    }
    free(k->modules);
    free(k->ptx);
    free(k->cubin);
    free(k->compile_log);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ------------------------------------------------------------------ public: context */

void fa3_context_options_init(fa3_context_options *opts)
{
    if (opts)
        memset(opts, 0, sizeof *opts);
}

fa3_status fa3_context_create(fa3_context **out, const fa3_context_options *opts)
{
    if (!out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_context_create: NULL ctx");
    *out = NULL;
    fa3_context_options o;
    fa3_context_options_init(&o);
    if (opts)
        o = *opts;
    if ((int)o.backend < FA3_BACKEND_AUTO || (int)o.backend > FA3_BACKEND_DRIVER_JIT)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "backend %d is not a valid fa3_backend",
                          (int)o.backend);
    fa3_backend resolved = fa3_backend_resolve(o.backend);
    if (!fa3_backend_available(resolved))
        return fa3_seterr(FA3_ERR_BAD_BACKEND,
                          "backend %s is not built into this library (rebuild with the PTX Compiler "
                          "API: meson -Dptx_compiler_dir=<folder of libnvptxcompiler_static.a>)",
                          fa3_backend_name(resolved));

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
        kernel_free(k);
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

/* ------------------------------------------------------------------ supported configurations */

int fa3_supported_configs(fa3_config *out, int max)
{
    /* Candidates; fa3_config_canonicalize decides, so the list follows the generator. */
    static const int heads[][2] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256},
                                   {192, 128}};
    static const fa3_dtype dtypes[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16};
    static const fa3_mask masks[] = {FA3_MASK_NONE, FA3_MASK_CAUSAL, FA3_MASK_LOCAL};
    int n = 0;
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
            for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++)
                for (int sc = 0; sc <= 1; sc++) {
                    fa3_config c, canon;
                    fa3_config_init(&c);
                    c.head_dim = heads[h][0];
                    c.head_dim_v = heads[h][1];
                    c.dtype = dtypes[d];
                    c.mask = masks[m];
                    c.softcap = sc;
                    if (fa3_config_canonicalize(&c, &canon) != FA3_OK)
                        continue;
                    if (out && n < max)
                        out[n] = canon;
                    n++;
                }
    fa3_clearerr(); /* the refused candidates are not the caller's error */
    return n;
}

/* ------------------------------------------------------------------ building a kernel */

/* Joins the two compiler logs into the kernel's log. */
static char *join_logs(const char *info, const char *error)
{
    size_t ni = info ? strlen(info) : 0, ne = error ? strlen(error) : 0;
    char *s = malloc(ni + ne + 2);
    if (!s)
        return NULL;
    size_t n = 0;
    if (ni) {
        memcpy(s, info, ni);
        n = ni;
    }
    if (ne) {
        if (n && s[n - 1] != '\n')
            s[n++] = '\n';
        memcpy(s + n, error, ne);
        n += ne;
    }
    s[n] = '\0';
    return s;
}

/* Fills k from the disk cache entry of k->key; 1 on a hit. */
static int load_from_disk(fa3_context *ctx, fa3_kernel *k)
{
    fa3_cache_meta meta;
    char *log = NULL;
    if (!fa3_cache_load(ctx->cache_dir, k->key, &k->cfg, &k->cubin, &k->cubin_size, &log, &meta))
        return 0;
    /* The key covers both (the PTX header names the plan's knobs): a forged or damaged entry. */
    if (meta.backend != k->backend || strcmp(meta.plan_debug, k->plan.debug) != 0) {
        free(k->cubin);
        free(log);
        k->cubin = NULL;
        k->cubin_size = 0;
        return 0;
    }
    k->compile_log = log;
    k->num_regs = meta.num_regs;
    k->spill_store_bytes = meta.spill_store_bytes;
    k->spill_load_bytes = meta.spill_load_bytes;
    k->stack_bytes = meta.stack_bytes;
    k->has_warning = meta.has_warning;
    k->first_source = FA3_SOURCE_DISK;
    k->compile_ms = 0;
    return 1;
}

/* Compiles k's PTX into k. t0: when the build started (compile_ms counts codegen too). */
static fa3_status compile_kernel(fa3_kernel *k, double t0)
{
    fa3_compile_result r;
    fa3_status st = fa3_compile_ptx(k->ptx, k->ptx_len, k->cfg.arch, k->backend, &r);
    if (st != FA3_OK) {
        fa3_compile_result_free(&r);
        return st;
    }
    k->compile_ms = fa3_now_ms() - t0;
    k->cubin = r.cubin;
    k->cubin_size = r.cubin_size;
    r.cubin = NULL;
    k->num_regs = r.num_regs;
    k->spill_store_bytes = r.spill_store_bytes;
    k->spill_load_bytes = r.spill_load_bytes;
    k->stack_bytes = r.stack_bytes;
    k->has_warning = r.has_warning;
    k->first_source = FA3_SOURCE_COMPILED;
    if (k->backend != FA3_BACKEND_DRIVER_JIT) {
        k->compile_log = fa3_test_fail("oom-log") ? NULL : join_logs(r.info_log, r.error_log);
        if (!k->compile_log) {
            fa3_compile_result_free(&r);
            return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the compiler log");
        }
    } /* DRIVER_JIT: the log arrives with the first module load (compile_log stays NULL). */
    fa3_compile_result_free(&r);
    return FA3_OK;
}

/* Test hook "ptx": makes the generated text invalid, so that the compile fails with a log. */
static fa3_status spoil_ptx(fa3_kernel *k)
{
    static const char junk[] = "\n.this_is_not_ptx %r0, garbage;\n";
    char *p = realloc(k->ptx, k->ptx_len + sizeof junk);
    if (!p)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(p + k->ptx_len, junk, sizeof junk);
    k->ptx = p;
    k->ptx_len += sizeof junk - 1;
    return FA3_OK;
}

/* Fills k (whose cfg is set) from the disk cache or by generating and compiling. Called without
   the context lock. */
static fa3_status build_kernel(fa3_context *ctx, fa3_kernel *k)
{
    double t0 = fa3_now_ms();
    FA3_TRY(fa3_plan_make(&k->cfg, &k->plan));
    FA3_TRY(fa3_codegen_ptx(&k->plan, &k->ptx, &k->ptx_len));
    if (!k->ptx || k->ptx[k->ptx_len] != '\0')
        return fa3_seterr(FA3_ERR_INTERNAL, "the generator returned no NUL-terminated PTX");
    if (fa3_test_fail("ptx"))
        FA3_TRY(spoil_ptx(k));
    FA3_TRY(fa3_backend_version(k->backend, k->backend_version, sizeof k->backend_version));
    FA3_TRY(fa3_cache_key_for(&k->cfg, k->ptx, k->ptx_len, k->backend, k->backend_version, k->key));

    /* The disk cache holds cubins; DRIVER_JIT has none to keep. */
    int use_disk = ctx->cache_dir && k->backend != FA3_BACKEND_DRIVER_JIT &&
                   atomic_load(&ctx->disk_state) != FA3_DISK_OFF;
    fa3_cache_lock lock;
    lock.fd = -1;
    if (use_disk) {
        if (load_from_disk(ctx, k))
            return FA3_OK;
        if (atomic_load(&ctx->disk_state) == FA3_DISK_OK) {
            /* Compile under the key's lock, looking at the disk again once it is held: another
               process (or context) may have just stored the entry while we waited. */
            char why[768];
            switch (fa3_cache_lock_take(ctx->cache_dir, k->key, ctx->lock_timeout_ms, &lock, why,
                                        sizeof why)) {
            case FA3_CACHE_LOCKED:
                if (load_from_disk(ctx, k)) {
                    fa3_cache_lock_release(&lock);
                    return FA3_OK;
                }
                break;
            case FA3_CACHE_LOCK_NODIR:
                degrade_disk(ctx, FA3_DISK_OFF);
                set_warning(ctx, "%s: kernels are kept in memory only", why);
                break;
            case FA3_CACHE_LOCK_READONLY:
                degrade_disk(ctx, FA3_DISK_READONLY);
                set_warning(ctx, "cache directory %s is not writable (%s): new kernels are kept in "
                            "memory only", ctx->cache_dir, why);
                break;
            case FA3_CACHE_LOCK_UNAVAILABLE:
                set_warning(ctx, "%s: compiling without the cache lock", why);
                break;
            }
        }
    }

    fa3_status st = compile_kernel(k, t0);
    if (st == FA3_OK && use_disk && k->cubin &&
        atomic_load(&ctx->disk_state) == FA3_DISK_OK) {
        fa3_cache_meta meta;
        memset(&meta, 0, sizeof meta);
        meta.num_regs = k->num_regs;
        meta.spill_store_bytes = k->spill_store_bytes;
        meta.spill_load_bytes = k->spill_load_bytes;
        meta.stack_bytes = k->stack_bytes;
        meta.has_warning = k->has_warning;
        meta.backend = k->backend;
        meta.config = k->cfg;
        snprintf(meta.plan_debug, sizeof meta.plan_debug, "%s", k->plan.debug);
        int e = 0;
        if (fa3_cache_store(ctx->cache_dir, k->key, k->cubin, k->cubin_size, k->compile_log,
                            &meta, &e) != FA3_OK) {
            /* Not an error: the kernel works from memory. Keep the reason as the warning and
               leave no stale message behind for a call that succeeds. */
            if (fa3_cache_errno_readonly(e))
                degrade_disk(ctx, FA3_DISK_READONLY);
            set_warning(ctx, "%s (the kernel is kept in memory)", fa3_last_error_message());
            fa3_clearerr();
        }
    }
    fa3_cache_lock_release(&lock);
    return st;
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
        note_source(k, FA3_SOURCE_MEMORY);
        *kernel = k;
        return FA3_OK;
    }
    k = fa3_test_fail("oom-kernel") ? NULL : calloc(1, sizeof *k);
    if (!k || pthread_mutex_init(&k->mu, NULL) != 0) {
        pthread_mutex_unlock(&ctx->mu);
        free(k);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for a kernel");
    }
    k->owner = ctx;
    k->serial = atomic_fetch_add(&g_next_serial, 1);
    k->cfg = c;
    k->backend = ctx->backend;
    k->num_regs = k->spill_store_bytes = k->spill_load_bytes = k->stack_bytes = -1;
    k->ready = 0;
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
        kernel_free(k);
        return st;
    }
    note_source(k, k->first_source);
    *kernel = k;
    return FA3_OK;
}

/* ------------------------------------------------------------------ public: kernel */

fa3_status fa3_kernel_get_info(const fa3_kernel *kernel, fa3_kernel_info *info)
{
    if (!kernel || !info)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_get_info: NULL %s",
                          !kernel ? "kernel" : "info");
    fa3_kernel *k = (fa3_kernel *)kernel; /* the mutex is the only thing changed */
    memset(info, 0, sizeof *info);
    info->config = k->cfg;
    info->backend = k->backend;
    memcpy(info->cache_key, k->key, sizeof info->cache_key);
    info->shared_bytes = k->plan.smem_bytes;
    info->threads = k->plan.threads;
    info->block_m = k->plan.block_m;
    info->block_n = k->plan.block_n;
    info->stages = k->plan.stages;
    info->compile_ms = k->compile_ms;
    info->cubin_size = k->cubin ? k->cubin_size : 0;
    pthread_mutex_lock(&k->mu);
    info->num_regs = k->num_regs;
    info->spill_store_bytes = k->spill_store_bytes;
    info->spill_load_bytes = k->spill_load_bytes;
    info->stack_bytes = k->stack_bytes;
    info->source = tls_last_serial == k->serial ? tls_last_source : k->first_source;
    info->compile_log = k->compile_log ? k->compile_log : "";
    pthread_mutex_unlock(&k->mu);
    return FA3_OK;
}

const char *fa3_kernel_plan_debug(const fa3_kernel *kernel)
{
    return kernel ? kernel->plan.debug : ""; /* immutable once the kernel is published */
}

int fa3_kernel_has_warning(const fa3_kernel *kernel)
{
    if (!kernel)
        return 0;
    fa3_kernel *k = (fa3_kernel *)kernel;
    pthread_mutex_lock(&k->mu);
    int w = k->has_warning;
    pthread_mutex_unlock(&k->mu);
    return w;
}

fa3_status fa3_kernel_get_cubin(const fa3_kernel *kernel, const void **data, size_t *size)
{
    if (!kernel || !data || !size)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_get_cubin: NULL %s",
                          !kernel ? "kernel" : !data ? "data" : "size");
    if (!kernel->cubin) {
        *data = NULL;
        *size = 0;
        return fa3_seterr(FA3_ERR_UNSUPPORTED,
                          "kernel has no cubin: backend %s compiles the PTX when it is loaded",
                          fa3_backend_name(kernel->backend));
    }
    *data = kernel->cubin;
    *size = kernel->cubin_size;
    return FA3_OK;
}

/* ------------------------------------------------------------------ module loading */

#define JIT_LOG_SIZE (64 * 1024)

/* Loads the module in the current context; for DRIVER_JIT also records the JIT's results in k.
   Called with k->mu held. */
static fa3_status load_module(const fa3_driver *d, fa3_kernel *k, CUmodule *mod)
{
    if (k->cubin)
        return FA3_CU(d, cuModuleLoadData(mod, k->cubin));

    char *info = calloc(1, JIT_LOG_SIZE), *error = calloc(1, JIT_LOG_SIZE);
    if (!info || !error) {
        free(info);
        free(error);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the JIT log buffers");
    }
    CUjit_option opt[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_LOG_VERBOSE};
    void *val[] = {info, (void *)(uintptr_t)JIT_LOG_SIZE, error, (void *)(uintptr_t)JIT_LOG_SIZE,
                   (void *)(uintptr_t)1};
    CUresult r = d->cuModuleLoadDataEx(mod, k->ptx, (unsigned)(sizeof opt / sizeof opt[0]), opt,
                                       val);
    info[JIT_LOG_SIZE - 1] = error[JIT_LOG_SIZE - 1] = '\0';
    if (r != CUDA_SUCCESS) {
        fa3_status st = fa3_cu_check(r, "cuModuleLoadDataEx(PTX, driver JIT)");
        if (r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
            r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND || r == CUDA_ERROR_JIT_COMPILATION_DISABLED ||
            r == CUDA_ERROR_NO_BINARY_FOR_GPU)
            st = fa3_seterr(FA3_ERR_COMPILE, "%s", fa3_last_error_message());
        if (error[0])
            fa3_appenderr("\n--- error log ---\n%s", error);
        if (info[0])
            fa3_appenderr("\n--- info log ---\n%s", info);
        free(info);
        free(error);
        return st;
    }
    if (!k->compile_log) {
        fa3_compile_result pr;
        memset(&pr, 0, sizeof pr);
        pr.num_regs = pr.spill_store_bytes = pr.spill_load_bytes = pr.stack_bytes = -1;
        fa3_parse_ptxas_log(info, &pr);
        fa3_parse_ptxas_log(error, &pr);
        k->compile_log = join_logs(info, error); /* NULL on OOM: info shows "" */
        k->has_warning = pr.has_warning;
        k->spill_store_bytes = pr.spill_store_bytes;
        k->spill_load_bytes = pr.spill_load_bytes;
        k->stack_bytes = pr.stack_bytes;
        k->num_regs = pr.num_regs;
    }
    free(info);
    free(error);
    return FA3_OK;
}

fa3_status fa3_kernel_function(fa3_kernel *k, CUfunction *fn, CUdevice *dev)
{
    if (!k || !fn)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_function: NULL argument");
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    CUcontext cuctx = NULL;
    CUdevice cudev = 0;
    FA3_TRY(fa3_driver_ensure_context(&cuctx, &cudev));
    if (dev)
        *dev = cudev;

    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < k->num_modules; i++) {
        if (k->modules[i].cuctx == cuctx) {
            *fn = k->modules[i].function;
            pthread_mutex_unlock(&k->mu);
            return FA3_OK;
        }
    }
    fa3_status st = FA3_OK;
    if (k->num_modules == k->cap_modules) {
        size_t cap = k->cap_modules ? 2 * k->cap_modules : 4;
        fa3_kernel_module *m = realloc(k->modules, cap * sizeof *m);
        if (!m)
            st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the module table");
        else {
            k->modules = m;
            k->cap_modules = cap;
        }
    }
    CUmodule mod = NULL;
    CUfunction f = NULL;
    if (st == FA3_OK)
        st = load_module(d, k, &mod);
    if (st == FA3_OK)
        st = FA3_CU(d, cuModuleGetFunction(&f, mod, FA3_KERNEL_NAME));
    if (st == FA3_OK)
        st = FA3_CU(d, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          k->plan.smem_bytes));
    if (st == FA3_OK && k->backend == FA3_BACKEND_DRIVER_JIT) {
        /* The driver knows the final register count even when its log did not say. */
        int regs = -1, local = -1;
        if (d->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_SUCCESS &&
            regs >= 0)
            k->num_regs = regs;
        if (k->stack_bytes < 0 &&
            d->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) == CUDA_SUCCESS &&
            local >= 0)
            k->stack_bytes = local;
    }
    if (st != FA3_OK) {
        if (mod)
            (void)d->cuModuleUnload(mod);
        pthread_mutex_unlock(&k->mu);
        return st;
    }
    k->modules[k->num_modules++] = (fa3_kernel_module){cuctx, mod, f};
    pthread_mutex_unlock(&k->mu);
    *fn = f;
    return FA3_OK;
}
