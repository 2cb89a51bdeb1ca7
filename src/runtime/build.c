/*
 * fa3_jit_get_kernel: canonical config → the context's memory table → the plan, then for each
 * kernel of the config's operation (op.h): the disk cache's index (an entry found without
 * generating the PTX) → PTX from its kind's emitter → cache key → disk cache → compile → store in
 * both, and the index pointed at the entry.
 *
 * Concurrency: the context mutex guards the kernel table. A kernel being built is in the table
 * with ready = 0 so that a second thread asking for the same config waits for it (on the context's
 * condition variable) instead of compiling it again, while other configs build in parallel with
 * the lock released. Between contexts and processes, the per-key file lock of the disk cache
 * (cache.h) makes one of them compile while the others wait and then load its entry.
 *
 * Within one build, the parts that miss the disk compile at once: the first on the calling
 * thread, the others (a split config's combine) on helper threads (compile_all). Everything else,
 * the disk cache included, stays on the calling thread, in part order.
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

/* Compiles part pt's PTX. compile_ms counts from t0: the part's own codegen and disk lookup are
   in it, not the time it waited while other parts were prepared. */
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

/* Stores part pt's entry; 1 when stored. Not an error when it fails: the kernel works from
   memory, the reason becomes the context's warning and no stale message is left for a call that
   succeeds. */
static int store_part(fa3_context *ctx, const fa3_kernel *k, const fa3_part *pt)
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
        return 0;
    }
    return 1;
}

/* One part's build in three steps, so that the compiles of a cold build can overlap: prepare
   (PTX, key, the disk cache, the key's lock when it must compile) and finish (store, release)
   run on the calling thread in part order; the compile runs there or on a helper thread. */
typedef struct part_job {
    fa3_context *ctx;
    const fa3_kernel *k;
    fa3_part *pt;
    double prep_ms;      /* what prepare took (codegen, key, disk): compile_ms counts it */
    int use_disk;        /* the entry may be looked up and stored */
    int compile;         /* 1: missed the disk, to compile; 0: loaded from it */
    fa3_cache_lock lock; /* the key's lock while compiling; fd -1 when not held */
    fa3_status st;       /* the compile's */
    char *msg;           /* the compile's error message (fa3_takeerr) when st != FA3_OK */
    pthread_t thread;    /* the helper compiling it, when on_helper */
    int on_helper;
    int has_ikey;        /* ikey is the part's index key (cache_index.c) */
    char ikey[33];
} part_job;

/* Points j's index file at the entry key of its part, which is on disk (loaded or just stored),
   where the disk takes files. Quietly: the index only saves the next process the codegen. */
static void index_part(part_job *j)
{
    if (!j->has_ikey || atomic_load(&j->ctx->disk_state) != FA3_DISK_OK)
        return;
    if (fa3_cache_index_store(j->ctx->cache_dir, j->ikey, j->pt->key, j->ctx->cache_fsync) !=
        FA3_OK)
        fa3_clearerr();
}

/* Part pt of k (whose plan is made), up to its compile: PTX from its kind's emitter, its cache key,
   then the disk cache; on a miss j->compile = 1, with the key's lock held where the disk takes
   entries (released by finish_part). */
static fa3_status prepare_part(part_job *j)
{
    fa3_context *ctx = j->ctx;
    const fa3_kernel *k = j->k;
    fa3_part *pt = j->pt;
    double t0 = fa3_now_ms();
    fa3_kind_shape(pt->kind, &k->plan, &pt->threads, &pt->smem_bytes);
    fa3_kind_key_config(pt->kind, &k->cfg, &pt->key_config);
    pt->plan_debug = pt->kind == FA3_KERNEL_FWD ? k->plan.debug : "";
    const char *arch = fa3_arch_name(k->cfg.arch);
    const int spoil =
        fa3_test_fail("ptx") || (pt->kind == FA3_KERNEL_COMBINE && fa3_test_fail("ptx-combine"));
    /* The disk cache holds cubins; DRIVER_JIT has none to keep. */
    j->use_disk = ctx->cache_dir && k->backend != FA3_BACKEND_DRIVER_JIT &&
                  atomic_load(&ctx->disk_state) != FA3_DISK_OFF;

    /* First the index (cache.h): the entry of this kind, config and knobs built by this binary,
       loaded without generating its PTX. Not when a test hook spoils the PTX (its key must be the
       spoiled text's). A miss, or an entry that fails load_from_disk's checks, goes on below. */
    if (j->use_disk && !spoil) {
        fa3_cache_index_input ii = {.kind = pt->kind, .config = &k->cfg,
                                    .backend = fa3_backend_name(k->backend),
                                    .backend_version = k->backend_version,
                                    .arch = arch ? arch : ""};
        j->has_ikey = fa3_cache_index_key(&ii, j->ikey);
        if (j->has_ikey && fa3_cache_index_load(ctx->cache_dir, j->ikey, pt->key) &&
            load_from_disk(ctx, k, pt))
            return FA3_OK;
    }

    /* Test hook "codegen": the generator fails (shows that a load through the index skips it). */
    if (fa3_test_fail("codegen"))
        return fa3_seterr(FA3_ERR_INTERNAL, "test hook: the generator fails");
    FA3_TRY(fa3_codegen_kernel(pt->kind, &k->plan, &pt->ptx, &pt->ptx_len));
    if (!pt->ptx || pt->ptx[pt->ptx_len] != '\0')
        return fa3_seterr(FA3_ERR_INTERNAL, "the generator returned no NUL-terminated PTX");
    if (spoil)
        FA3_TRY(spoil_ptx(pt));
    fa3_cache_key_input in = {.kind = pt->kind, .config = &pt->key_config, .ptx = pt->ptx,
                              .ptx_len = pt->ptx_len, .generator = FA3_GENERATOR_VERSION,
                              .backend = fa3_backend_name(k->backend),
                              .backend_version = k->backend_version, .arch = arch ? arch : ""};
    FA3_TRY(fa3_cache_key(&in, pt->key));

    if (j->use_disk) {
        if (load_from_disk(ctx, k, pt)) {
            index_part(j);
            return FA3_OK;
        }
        if (atomic_load(&ctx->disk_state) == FA3_DISK_OK) {
            /* Compile under the key's lock, looking at the disk again once it is held: another
               process (or context) may have just stored the entry while we waited. */
            char why[768];
            switch (fa3_cache_lock_take(ctx->cache_dir, pt->key, ctx->lock_timeout_ms, &j->lock,
                                        why, sizeof why)) {
            case FA3_CACHE_LOCKED:
                if (load_from_disk(ctx, k, pt)) {
                    fa3_cache_lock_release(&j->lock);
                    index_part(j);
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
    j->compile = 1;
    j->prep_ms = fa3_now_ms() - t0;
    return FA3_OK;
}

/* j's compile; a failure's message is taken off the running thread's into j->msg. */
static void run_compile(part_job *j)
{
    j->st = compile_part(j->k, j->pt, fa3_now_ms() - j->prep_ms);
    if (j->st != FA3_OK)
        j->msg = fa3_takeerr();
}

static void *helper_main(void *arg)
{
    run_compile(arg);
    return NULL;
}

/* The ptxas inside the PTX Compiler API runs on the helper's stack: at least a main thread's
   usual 8 MiB, whatever the C library gives new threads (musl: 128 KiB). */
#define HELPER_STACK ((size_t)8 << 20)

/* Starts j's compile on a helper thread (which keeps the caller's signal mask); 0 when none could
   be started, and the caller compiles it. Test hook "pthread_create": as if none could. */
static int start_helper(part_job *j)
{
    if (fa3_test_fail("pthread_create"))
        return 0;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return 0;
    size_t stack = 0;
    int ok = pthread_attr_getstacksize(&attr, &stack) == 0 &&
             (stack >= HELPER_STACK || pthread_attr_setstacksize(&attr, HELPER_STACK) == 0) &&
             pthread_create(&j->thread, &attr, helper_main, j) == 0;
    (void)pthread_attr_destroy(&attr); /* cannot fail on an initialised attr; nothing to undo */
    j->on_helper = ok;
    return ok;
}

/* Compiles the misses of jobs[0..n): the first on the calling thread and, when there are more, each
   other on a helper thread meanwhile (a split config's combine, ~80 ms, under the forward's
   ~0.4-1.2 s); one that gets no helper is compiled on the calling thread afterwards, as before.
   A cold kernel with one miss, or none, starts no thread. compile_part writes only its own part
   and reads k's fields set before (plan, backend); compile.c's header says why fa3_compile_ptx
   may run on two threads at once. A helper's part keeps its key's lock until finish_part, after
   the forward's compile: another process wanting that entry waits a little longer for it. */
static fa3_status compile_all(part_job *jobs, int n)
{
    int misses = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (jobs[i].compile) {
            misses++;
            if (first < 0)
                first = i;
        }
    if (first < 0)
        return FA3_OK;
    /* DRIVER_JIT's compile is a copy: nothing worth a thread. */
    if (misses > 1 && jobs[first].k->backend != FA3_BACKEND_DRIVER_JIT)
        for (int i = first + 1; i < n; i++)
            if (jobs[i].compile)
                (void)start_helper(&jobs[i]); /* 0: compiled below instead */
    run_compile(&jobs[first]);
    fa3_status st = FA3_OK;
    for (int i = first + 1; i < n; i++) {
        if (jobs[i].on_helper) {
            int e = pthread_join(jobs[i].thread, NULL);
            if (e != 0 && st == FA3_OK) /* not for a thread we started and did not detach */
                st = fa3_seterr(FA3_ERR_INTERNAL, "pthread_join failed: %s", strerror(e));
        } else if (jobs[i].compile) {
            run_compile(&jobs[i]);
        }
    }
    return st;
}

/* Stores j's compiled part where the disk takes entries, unless the build has failed (ok = 0:
   as when the parts were built one after the other, a part after the failed one leaves no entry),
   and releases its lock. */
static void finish_part(part_job *j, int ok)
{
    if (!j->compile)
        return;
    if (ok && j->use_disk && j->pt->cubin && atomic_load(&j->ctx->disk_state) == FA3_DISK_OK &&
        store_part(j->ctx, j->k, j->pt))
        index_part(j);
    fa3_cache_lock_release(&j->lock);
}

/* Fills k (whose cfg and parts' kinds are set): the plan, then each kernel of its operation:
   prepared in order until one fails, the misses compiled (compile_all), then finished in order.
   Results, entries and the error are a serial build's: the first failure in part order (a
   prepare's counting after the compiles of the parts before it), with its message, which
   may come from a helper thread. Called without the context lock. */
static fa3_status build_kernel(fa3_context *ctx, fa3_kernel *k)
{
    FA3_TRY(fa3_plan_make(&k->cfg, &k->plan));
    FA3_TRY(fa3_backend_version(k->backend, k->backend_version, sizeof k->backend_version));
    part_job jobs[FA3_OP_MAX_KERNELS];
    memset(jobs, 0, sizeof jobs);
    int n = 0;
    fa3_status prep = FA3_OK;
    char *prep_msg = NULL;
    while (n < k->num_parts) {
        part_job *j = &jobs[n++];
        j->ctx = ctx;
        j->k = k;
        j->pt = &k->parts[n - 1];
        j->lock.fd = -1;
        prep = prepare_part(j);
        if (prep != FA3_OK) {
            prep_msg = fa3_takeerr(); /* the compiles below would overwrite it */
            n--;
            break;
        }
    }
    fa3_status st = compile_all(jobs, n);
    char *msg = st != FA3_OK ? fa3_takeerr() : NULL;
    k->first_source = FA3_SOURCE_DISK;
    for (int i = 0; i < n; i++) {
        part_job *j = &jobs[i];
        if (st == FA3_OK && j->compile && j->st != FA3_OK) {
            st = j->st;
            msg = j->msg;
            j->msg = NULL;
        }
        finish_part(j, st == FA3_OK);
        free(j->msg);
        j->pt->on_helper = j->on_helper;
        if (j->pt->source == FA3_SOURCE_COMPILED)
            k->first_source = FA3_SOURCE_COMPILED;
    }
    if (st == FA3_OK && prep != FA3_OK) {
        st = prep;
        msg = prep_msg;
        prep_msg = NULL;
    }
    free(prep_msg);
    return st == FA3_OK ? FA3_OK : fa3_puterr(st, msg);
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
