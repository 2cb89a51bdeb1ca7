/*
 * The kernel object: making one, its info and cubin, the lazy per-CUcontext module load that
 * fa3_fwd uses, and freeing it (modules unloaded in their own contexts). Each kernel's mutex
 * guards its module list and what the driver JIT fills in at the first load.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/compile.h"
#include "runtime/runtime.h"

/* ------------------------------------------------------------------ the object */

/* fa3_kernel_info.source is per thread (fa3_kernel_note_source). */
static atomic_ullong g_next_serial = 1;
static _Thread_local unsigned long long tls_last_serial;
static _Thread_local fa3_kernel_source tls_last_source;

void fa3_kernel_note_source(const fa3_kernel *k, fa3_kernel_source s)
{
    tls_last_serial = k->serial;
    tls_last_source = s;
}

void fa3_kernel_note_save(fa3_kernel_lookup_note *note)
{
    note->serial = tls_last_serial;
    note->source = tls_last_source;
}

void fa3_kernel_note_restore(const fa3_kernel_lookup_note *note)
{
    tls_last_serial = note->serial;
    tls_last_source = note->source;
}

fa3_kernel *fa3_kernel_new(fa3_context *ctx, const fa3_config *canonical)
{
    fa3_kernel *k = fa3_test_fail("oom-kernel") ? NULL : calloc(1, sizeof *k);
    if (!k || pthread_mutex_init(&k->mu, NULL) != 0) {
        free(k);
        return NULL;
    }
    k->owner = ctx;
    k->serial = atomic_fetch_add(&g_next_serial, 1);
    k->cfg = *canonical;
    k->op = fa3_op_for_config(canonical);
    k->backend = ctx->backend;
    k->num_parts = k->op->num_kernels;
    for (int i = 0; i < k->num_parts; i++) {
        fa3_part *pt = &k->parts[i];
        pt->kind = k->op->kinds[i];
        pt->num_regs = pt->spill_store_bytes = pt->spill_load_bytes = pt->stack_bytes = -1;
    }
    k->ready = 0;
    return k;
}

/* Unloads part's modules, each in its own CUDA context, putting the caller's back. Errors are
   ignored (nothing useful to do while freeing). */
static void unload_modules(const fa3_driver *d, fa3_part *pt)
{
    CUcontext saved = NULL;
    int have_saved = d->cuCtxGetCurrent(&saved) == CUDA_SUCCESS;
    CUcontext cur = saved;
    for (size_t i = 0; i < pt->num_modules; i++) {
        fa3_kernel_module *m = &pt->modules[i];
        if (m->cuctx != cur && d->cuCtxSetCurrent(m->cuctx) == CUDA_SUCCESS)
            cur = m->cuctx;
        if (cur == m->cuctx)
            (void)d->cuModuleUnload(m->module);
    }
    if (have_saved && cur != saved)
        (void)d->cuCtxSetCurrent(saved);
}

void fa3_kernel_free(fa3_kernel *k)
{
    if (!k)
        return;
    for (int i = 0; i < k->num_parts; i++) {
        fa3_part *pt = &k->parts[i];
        const fa3_driver *d = NULL;
        if (pt->num_modules && fa3_driver_loaded() && fa3_driver_get(&d) == FA3_OK)
            unload_modules(d, pt);
        free(pt->modules);
        free(pt->ptx);
        free(pt->cubin);
        free(pt->compile_log);
    }
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ------------------------------------------------------------------ public: kernel */

static const fa3_struct_kind info_kind = {"fa3_kernel_info",
                                          "fa3_kernel_get_info(), which passes its sizeof",
                                          sizeof(fa3_kernel_info), NULL, 0};

fa3_status fa3_kernel_get_info_sized(const fa3_kernel *kernel, fa3_kernel_info *out,
                                     size_t struct_size)
{
    if (!kernel || !out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_get_info: NULL %s",
                          !kernel ? "kernel" : "info");
    FA3_TRY(fa3_struct_check(&info_kind, struct_size));
    fa3_kernel *k = (fa3_kernel *)kernel; /* the mutex is the only thing changed */
    const fa3_part *pt = &k->parts[0];   /* the operation's first kernel */
    fa3_kernel_info full, *info = &full;
    memset(info, 0, sizeof *info);
    info->config = k->cfg;
    info->backend = k->backend;
    memcpy(info->cache_key, pt->key, sizeof info->cache_key);
    info->shared_bytes = pt->smem_bytes;
    info->threads = pt->threads;
    info->block_m = k->plan.block_m;
    info->block_n = k->plan.block_n;
    info->stages = k->plan.stages;
    for (int i = 0; i < k->num_parts; i++)
        info->compile_ms += k->parts[i].compile_ms;
    info->cubin_size = pt->cubin ? pt->cubin_size : 0;
    pthread_mutex_lock(&k->mu);
    info->num_regs = pt->num_regs;
    info->spill_store_bytes = pt->spill_store_bytes;
    info->spill_load_bytes = pt->spill_load_bytes;
    info->stack_bytes = pt->stack_bytes;
    info->source = tls_last_serial == k->serial ? tls_last_source : k->first_source;
    info->compile_log = pt->compile_log ? pt->compile_log : "";
    pthread_mutex_unlock(&k->mu);
    return fa3_struct_out(&info_kind, out, struct_size, info);
}

const char *fa3_kernel_plan_debug(const fa3_kernel *kernel)
{
    return kernel ? kernel->plan.debug : ""; /* immutable once the kernel is published */
}

fa3_status fa3_kernel_get_cubin(const fa3_kernel *kernel, const void **data, size_t *size)
{
    if (!kernel || !data || !size)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_get_cubin: NULL %s",
                          !kernel ? "kernel" : !data ? "data" : "size");
    const fa3_part *pt = &kernel->parts[0]; /* the operation's first kernel */
    if (!pt->cubin) {
        *data = NULL;
        *size = 0;
        return fa3_seterr(FA3_ERR_UNSUPPORTED,
                          "kernel has no cubin: backend %s compiles the PTX when it is loaded",
                          fa3_backend_name(kernel->backend));
    }
    *data = pt->cubin;
    *size = pt->cubin_size;
    return FA3_OK;
}

void fa3_part_take_resources(fa3_part *pt, const fa3_compile_result *r)
{
    pt->num_regs = r->num_regs;
    pt->spill_store_bytes = r->spill_store_bytes;
    pt->spill_load_bytes = r->spill_load_bytes;
    pt->stack_bytes = r->stack_bytes;
    pt->has_warning = r->has_warning;
}

/* ------------------------------------------------------------------ module loading */

#define JIT_LOG_SIZE (64 * 1024)

/* Loads part's module in the current context; for DRIVER_JIT also records the JIT's results in
   it. Called with the kernel's mu held. */
static fa3_status load_module(const fa3_driver *d, fa3_part *pt, CUmodule *mod)
{
    if (pt->cubin)
        return FA3_CU(d, cuModuleLoadData(mod, pt->cubin));

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
    CUresult r = d->cuModuleLoadDataEx(mod, pt->ptx, (unsigned)(sizeof opt / sizeof opt[0]), opt,
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
    if (!pt->compile_log) {
        fa3_compile_result pr;
        memset(&pr, 0, sizeof pr);
        pr.num_regs = pr.spill_store_bytes = pr.spill_load_bytes = pr.stack_bytes = -1;
        fa3_parse_ptxas_log(info, &pr);
        fa3_parse_ptxas_log(error, &pr);
        pt->compile_log = fa3_compile_join_logs(info, error); /* NULL on OOM: info shows "" */
        fa3_part_take_resources(pt, &pr);
    }
    free(info);
    free(error);
    return FA3_OK;
}

int fa3_kernel_loaded(fa3_kernel *kernel, CUcontext cuctx)
{
    int all = 1;
    pthread_mutex_lock(&kernel->mu);
    for (int p = 0; p < kernel->num_parts && all; p++) {
        const fa3_part *pt = &kernel->parts[p];
        int here = 0;
        for (size_t i = 0; i < pt->num_modules && !here; i++)
            here = pt->modules[i].cuctx == cuctx;
        all = here;
    }
    pthread_mutex_unlock(&kernel->mu);
    return all;
}

fa3_status fa3_kernel_function(fa3_kernel *kernel, int part, CUfunction *fn, CUdevice *dev)
{
    if (!kernel || !fn || part < 0 || part >= kernel->num_parts)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_kernel_function: bad argument");
    fa3_part *pt = &kernel->parts[part];
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    CUcontext cuctx = NULL;
    CUdevice cudev = 0;
    FA3_TRY(fa3_driver_ensure_context(&cuctx, &cudev));
    if (dev)
        *dev = cudev;

    pthread_mutex_lock(&kernel->mu);
    for (size_t i = 0; i < pt->num_modules; i++) {
        if (pt->modules[i].cuctx == cuctx) {
            *fn = pt->modules[i].function;
            pthread_mutex_unlock(&kernel->mu);
            return FA3_OK;
        }
    }
    fa3_status st = FA3_OK;
    if (pt->num_modules == pt->cap_modules) {
        size_t cap = pt->cap_modules ? 2 * pt->cap_modules : 4;
        fa3_kernel_module *m = realloc(pt->modules, cap * sizeof *m);
        if (!m)
            st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for the module table");
        else {
            pt->modules = m;
            pt->cap_modules = cap;
        }
    }
    CUmodule mod = NULL;
    CUfunction f = NULL;
    if (st == FA3_OK)
        st = load_module(d, pt, &mod);
    if (st == FA3_OK)
        st = FA3_CU(d, cuModuleGetFunction(&f, mod, fa3_kind_get(pt->kind)->entry));
    if (st == FA3_OK)
        st = FA3_CU(d, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          pt->smem_bytes));
    if (st == FA3_OK && kernel->backend == FA3_BACKEND_DRIVER_JIT) {
        /* The driver knows the final register count even when its log did not say. */
        int regs = -1, local = -1;
        if (d->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_SUCCESS &&
            regs >= 0)
            pt->num_regs = regs;
        if (pt->stack_bytes < 0 &&
            d->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) == CUDA_SUCCESS &&
            local >= 0)
            pt->stack_bytes = local;
    }
    if (st != FA3_OK) {
        if (mod)
            (void)d->cuModuleUnload(mod);
        pthread_mutex_unlock(&kernel->mu);
        return st;
    }
    pt->modules[pt->num_modules++] = (fa3_kernel_module){cuctx, mod, f};
    pthread_mutex_unlock(&kernel->mu);
    *fn = f;
    return FA3_OK;
}
