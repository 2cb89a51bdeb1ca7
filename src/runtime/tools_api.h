/*
 * What fa3jit's own programs may use beyond include/fa3jit.h, and why: fa3-gen (tools/fa3gen/),
 * the host helpers (tools/common/) and the GPU tests (test_gpu, test_edge, test_magnitude). They
 * link libfa3jit.so, so they reach only what it exports: the fa3_ API, and the entry points marked
 * FA3_TOOLS_API (src/common.h: exported for these programs, not in fa3jit.h, no stability promise).
 * This is the one src/ header they include; when the runtime's internals change, this header is
 * the one place that follows them.
 *
 *   driver table (runtime/driver.h)   fa3_driver_get, fa3_driver_ensure_context, fa3_cu_check and
 *       FA3_CU: device memory, copies, memsets, events and synchronisation for fa3-gen check and
 *       bench and the GPU tests (the public API launches kernels but allocates nothing).
 *   fa3_env_warnings (runtime/env.h)  the environment's bad values, which fa3-gen prints once at
 *       start (every context repeats them in fa3_context_warning).
 *   fa3_log_line_is_diagnostic (runtime/compile.h)  fa3-gen --info prints the compile log's
 *       warning lines, chosen by the rule CI uses.
 *   fa3_tools_cache_list (below, over runtime/cache.h's fa3_cache_list) and fa3_cache_clear:
 *       fa3-gen cache ls, clear and warm.
 *   fa3_reference_build_image (runtime/reference.h)  test_gpu compiles the reference without a GPU.
 *   fa3_quantize_build_image (runtime/quantize.h)  test_quantize compiles the FP8 quantizer's
 *       kernels without a GPU.
 *   fa3_tools_emit_ptx_named (codegen/codegen.h)  fa3-gen --emit-ptx --named-registers: the
 *       kernel with its registers named, for reading.
 *   fa3_combine_launch, fa3_split_heuristic (runtime/split.h)  test_splitkv_combine runs the
 *       split-KV combine kernel alone on partials it made.
 *   fa3_tools_fwd_partials (runtime/fwd.c, below)  test_splitkv runs a split-KV config's
 *       forward kernel alone and checks its fp32 partials per split.
 *   FA3_PRINTF, FA3_TRY (src/common.h)  printf-format checking and status forwarding.
 * fa3_driver_loaded and fa3_cache_file_kind_of are marked FA3_TOOLS_API too, but no tool uses
 * them (the library and test_cache do). A program that needs more adds it here with its reason,
 * and marks it FA3_TOOLS_API where it is declared. Linking libfa3jit.so enforces the rest: its
 * hidden internals do not link.
 */
#ifndef FA3JIT_TOOLS_API_H
#define FA3JIT_TOOLS_API_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fa3jit.h"
#include "common.h"
#include "codegen/codegen.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/driver.h"
#include "runtime/env.h"
#include "runtime/quantize.h"
#include "runtime/reference.h"
#include "runtime/split.h"

/* Split-KV's forward kernel alone (test_splitkv checks its partials; fa3_fwd runs it with the
   combine): kernel of a split_kv config, args as fa3_fwd takes them (o is validated but not
   written), num_splits in 1..FA3_TOOLS_MAX_SPLITS, o_partial (num_splits, rows, head_dim_v) and
   lse_partial (num_splits, rows) fp32 device arrays, rows = batch·num_heads·seqlen_q (varlen:
   num_heads·total_q), indexed as the LSE output. Asynchronous on stream. */
#define FA3_TOOLS_MAX_SPLITS 128
FA3_TOOLS_API fa3_status fa3_tools_fwd_partials(fa3_kernel *kernel, const fa3_fwd_args *args,
                                                int num_splits, void *o_partial,
                                                void *lse_partial, void *stream);

/* One file of a cache folder as the tools show it: a copy of what fa3_cache_list found, so that
   they do not depend on the cache's own structs. */
typedef struct fa3_tools_cache_item {
    char name[64];            /* file name within the folder */
    fa3_cache_file_kind kind; /* FA3_CACHE_FILE_ENTRY, _LOCK, _TEMP or _INDEX */
    uint64_t file_size;
    int64_t mtime;            /* Unix seconds */
    int valid;                /* entry: checks out as the loader checks it (checksums included) */
    const char *why;          /* entry, not valid: static reason */
    /* entry, valid: */
    char key[33];             /* 32 lowercase hex digits */
    fa3_config config;        /* canonical config it was built for */
    fa3_backend backend;      /* resolved backend that built it */
    int64_t created;          /* Unix seconds when stored */
    char plan_debug[FA3_CACHE_PLAN_DEBUG_SIZE]; /* FA3JIT_PLAN_DEBUG of a benchmark variant, or "" */
    fa3_kernel_kind kernel_kind; /* which kernel of its config's operation (kernel_abi.h) */
} fa3_tools_cache_item;

/* fa3_cache_list (fa3jit's files in dir, sorted by name; a missing dir gives none) as items:
   *items is malloc'd (free()), *count its length. Errors: FA3_ERR_CACHE_IO (opendir failed,
   named), FA3_ERR_OUT_OF_MEMORY. */
static inline fa3_status fa3_tools_cache_list(const char *dir, fa3_tools_cache_item **items,
                                              size_t *count)
{
    fa3_cache_file *files = NULL;
    size_t n = 0;
    *items = NULL;
    *count = 0;
    FA3_TRY(fa3_cache_list(dir, &files, &n));
    fa3_tools_cache_item *it = calloc(n ? n : 1, sizeof *it);
    if (!it) {
        fa3_free(files);
        return FA3_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; ++i) {
        const fa3_cache_file *f = &files[i];
        memcpy(it[i].name, f->name, sizeof it[i].name);
        it[i].kind = f->kind;
        it[i].file_size = f->file_size;
        it[i].mtime = f->mtime;
        it[i].valid = f->valid;
        it[i].why = f->why;
        if (f->kind == FA3_CACHE_FILE_ENTRY && f->valid) {
            memcpy(it[i].key, f->view.key, sizeof it[i].key);
            it[i].config = f->view.meta.config;
            it[i].backend = f->view.meta.backend;
            it[i].created = f->view.meta.created;
            memcpy(it[i].plan_debug, f->view.meta.plan_debug, sizeof it[i].plan_debug);
            it[i].kernel_kind = f->view.meta.kind;
        }
    }
    fa3_free(files);
    *items = it;
    *count = n;
    return FA3_OK;
}

#endif
