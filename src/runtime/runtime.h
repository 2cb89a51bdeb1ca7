/*
 * Runtime objects behind the public handles: fa3_context (options, resolved backend, cache
 * directory, the table of kernels) and fa3_kernel (config, plan, the operation and, for each of
 * its kernels, PTX, cubin, compile results and the per-CUcontext modules). Internal functions
 * other runtime files call are declared here.
 */
#ifndef FA3JIT_RUNTIME_H
#define FA3JIT_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "codegen/codegen.h"
#include "runtime/compile.h"
#include "runtime/driver.h"
#include "runtime/op.h"
#include "runtime/split.h"
#include "runtime/tensor.h"

/* One loaded copy of a kernel's module in one CUDA context. */
typedef struct fa3_kernel_module {
    CUcontext cuctx;
    CUmodule module;
    CUfunction function;
} fa3_kernel_module;

/* One remembered section-size choice (schedule.c), per launch shape. */
typedef struct fa3_section_memo {
    int32_t seqlen_q, seqlen_k, wl, wr;
    uint32_t hb, grid, lo, hi, s; /* s = 0: empty entry */
    int32_t ratio;                /* packed GQA: query heads per kv head (else 0) */
} fa3_section_memo;
#define FA3_SECTION_MEMO 16

/* One kernel of an operation (op.h): its code, its compile results and its loaded modules. */
typedef struct fa3_part {
    /* Immutable once the kernel is published. */
    fa3_kernel_kind kind;
    int threads, smem_bytes; /* launch shape (fa3_kind_shape of the plan) */
    char key[33];            /* cache key, 32 lowercase hex digits */
    fa3_config key_config;   /* the config it is keyed and cached under (fa3_kind_key_config) */
    const char *plan_debug;  /* the plan's debug text its entry records: the kernel's plan.debug
                                (FA3_KERNEL_FWD), "" for kinds whose PTX ignores the knobs */
    char *ptx;               /* NUL-terminated generated PTX */
    size_t ptx_len;
    void *cubin;             /* NULL for DRIVER_JIT */
    size_t cubin_size;
    double compile_ms;       /* codegen + compile when compiled by this context, else 0 */
    fa3_kernel_source source; /* COMPILED or DISK */
    int on_helper;           /* compiled on a helper thread of build.c (the tests look) */

    /* Guarded by the kernel's mu (DRIVER_JIT fills these in at the first module load). */
    char *compile_log;       /* never NULL once published; replaced only while "" (DRIVER_JIT) */
    int num_regs, spill_store_bytes, spill_load_bytes, stack_bytes; /* -1 = unknown */
    int has_warning;         /* the compiler log has a warning line */
    fa3_kernel_module *modules;
    size_t num_modules, cap_modules;
} fa3_part;

/* The public handle: the operation one config runs, with its kernels. */
struct fa3_kernel {
    fa3_context *owner;
    /* Immutable once the kernel is published in the context's table (ready). */
    fa3_config cfg;          /* canonical */
    fa3_plan plan;           /* the operation's plan, shared by its kernels */
    const fa3_op *op;
    fa3_backend backend;     /* resolved: PTX_COMPILER, NVJITLINK or DRIVER_JIT */
    char backend_version[96];
    int num_parts;           /* op->num_kernels */
    fa3_part parts[FA3_OP_MAX_KERNELS]; /* in launch order */
    fa3_kernel_source first_source; /* COMPILED (any part compiled) or DISK */
    unsigned long long serial;      /* process-unique id (per-thread "latest source" tracking) */

    /* Guarded by mu: what the parts' comment says, and the section memo. */
    pthread_mutex_t mu;
    fa3_section_memo section_memo[FA3_SECTION_MEMO]; /* recent launch shapes (schedule.c) */
    unsigned section_memo_next;
    struct fa3_kernel *tail_kernel; /* tail.c: the split_kv = 1 kernel of this config (the
                                       owner's), once looked up */
    int tail_failed;                /* tail.c: the lookup failed for good; no tail split */
    char tail_why[256];             /* tail.c: its message */

    /* Guarded by the owner's mu. */
    int ready;               /* 0 while being built by some thread */
    struct fa3_kernel *next; /* context's table */
};

/* Disk-cache state of a context (fa3_context.disk_state). */
enum {
    FA3_DISK_OK = 0,       /* load and store */
    FA3_DISK_READONLY = 1, /* the folder is not writable: load only, compile into memory */
    FA3_DISK_OFF = 2       /* the folder is missing and cannot be created: memory only */
};

struct fa3_context {
    fa3_backend requested;   /* as given in the options */
    fa3_backend backend;     /* AUTO resolved */
    char *cache_dir;         /* NULL = disk cache off */
    int lock_timeout_ms;     /* longest wait for another process's cache lock */
    int cache_fsync;         /* $FA3JIT_CACHE_FSYNC: stores fsync the entry and the folder */
    int debug_varlen;        /* $FA3JIT_DEBUG_VARLEN: fa3_fwd checks the varlen/paged arrays */
    pthread_mutex_t mu;      /* guards kernels, every kernel's ready/next, writing warning */
    pthread_cond_t built;    /* broadcast when a kernel under construction is finished or dropped */
    fa3_kernel *kernels;     /* singly linked; few configs per process, so a list suffices */
    atomic_int disk_state;   /* FA3_DISK_*: only ever moves towards OFF */
    atomic_int warned;       /* 1 once warning is set; it never changes after that */
    char warning[1024];      /* fa3_context_warning: the environment's bad values
                                (creation), else the first disk-cache problem */
};

/* The caller's fa3_fwd_args copied into out (this library's size; what an older struct lacks at
   fa3_fwd_args_init's defaults). Errors: FA3_ERR_INVALID_ARGUMENT for a struct_size this library
   does not know. fwd.c. */
FA3_INTERNAL fa3_status fa3_fwd_args_in(const fa3_fwd_args *args, fa3_fwd_args *out);

/* The launch's divisors as magics in prm->div (kernel_abi.h fa3_div_slot), from prm's
   num_m_blocks, heads_per_kv, section_hb and total_tiles and the decode's heads a pair (heads),
   splits (1 without split_kv) and page size (1 without paged K/V). fwd.c. */
FA3_INTERNAL void fa3_kernel_params_divs(fa3_kernel_params *prm, uint32_t heads, uint32_t splits,
                                         uint32_t page_size);

/* log2(e): softmax constants in base 2. */
#define FA3_LOG2E 1.4426950408889634
/* Everything about args that does not need the GPU, against kernel's config: FA3_OK with the
   normalized values (scale: softmax_scale with 0 resolved; windows as the kernel gets them; the
   tile count), else the status and a message naming the bad field and value. fwd_args.c. */
FA3_INTERNAL fa3_status fa3_fwd_validate(const fa3_kernel *kernel, const fa3_fwd_args *args,
                                         float *scale, int *win_left, int *win_right,
                                         uint32_t *tiles);

/* Split-KV's argument rules that need no GPU (fa3_fwd_validate calls it last): num_splits in
   0..FA3_MAX_SPLITS, at most 1 with a split_kv = 0 config; a split config's workspace, when
   given, 256-byte aligned. split.c. */
/* n int32 of device memory at src into host, blocking (on stream when given: the values a kernel
   on it will read); on failure the message gains "(<who>reading args-><field> back ...)".
   The FA3JIT_DEBUG_VARLEN read-backs (varlen.c, kvcache.c). */
FA3_INTERNAL fa3_status fa3_read_ints(const fa3_driver *d, int32_t *host, const int32_t *src,
                                      size_t n, void *stream, const char *who, const char *field);
FA3_INTERNAL fa3_status fa3_split_check_args(const fa3_kernel *kernel, const fa3_fwd_args *args);

/* A split call's resolved splits and partials' layout. */
typedef struct fa3_split_info {
    int num_splits;          /* 1..FA3_MAX_SPLITS */
    fa3_split_layout layout; /* rows, lse_offset, bytes */
} fa3_split_info;
/* For a split_kv kernel and validated args: num_splits (args', or fa3_split_heuristic of the
   call's tiles, its longest key count in block_n blocks and num_sms), the layout; rows within
   2^31-1 (FA3_ERR_BAD_SHAPE) and a caller's workspace_bytes at least the layout's bytes
   (FA3_ERR_INVALID_ARGUMENT naming both). split.c. */
FA3_INTERNAL fa3_status fa3_split_resolve(const fa3_kernel *kernel, const fa3_fwd_args *args,
                                          uint32_t tiles, int num_sms, fa3_split_info *out);

/* The e4m3 descale values, after fa3_fwd_validate and once the driver and a context are ready
   (before any launch): unless args->descales_trusted is 1, each non-NULL descale array of an e4m3
   config (batch · num_heads_k floats) is read back with a blocking copy on stream (NULL: the
   legacy default stream) and every value must be positive and finite, else FA3_ERR_BAD_SCALE
   naming the array, the index (batch, kv head) and the value. FA3_OK at once for other dtypes,
   trusted or NULL descales. fa3_fwd and the reference call it. fwd_args.c. */
FA3_INTERNAL fa3_status fa3_fwd_check_descales(const fa3_config *cfg, const fa3_fwd_args *args,
                                               void *stream);
/* The fp32 products the e4m3 kernel forms from one (batch, kv head)'s descales (descale_q ·
   descale_k, times the exp2 scale or softcap's pre-tanh factor, and the LSE's; 448 · descale_v):
   NULL when all are finite and (the first three) at least FLT_MIN, else the name of the first
   that is not, its value in *value. fa3_fwd_check_descales refuses such descales. */
FA3_INTERNAL const char *fa3_descale_products_bad(int softcap, float scale_log2, float score_mul,
                                                  float lse_mul, float dq, float dk, float dv,
                                                  double *value);

/* The varlen / paged-KV facts of a call (fa3jit.h "Varlen", "Paged KV"), from
   fa3_fwd_layout_make. */
#define FA3_MAX_PAGE_SIZE 256
typedef struct fa3_fwd_layout {
    int varlen, paged;       /* the config's flags */
    int q_batch;             /* batch extent of the q/o view: 1 when varlen (packed), else batch */
    int k_batch, k_rows;     /* k/v view: (num_pages, page_size) paged, (1, seqlen_k) varlen,
                                else (batch, seqlen_k) */
    int64_t capacity;        /* most keys a sequence can have: max_pages_per_seq * page_size
                                when paged, else seqlen_k */
    int q_bound, k_bound;    /* longest query / key count of a sequence (varlen: max_seqlen_q/k;
                                rectangular: seqlen_q, and seqlen_k or the capacity with
                                seqused_k) */
    int64_t lse_floats;      /* floats of LSE: q_batch * num_heads * seqlen_q */
} fa3_fwd_layout;

/* The host-checkable varlen / paged rules of args against config c (who prefixes messages, e.g.
   "reference: "): with varlen = 0 no cu_seqlens_q/k or max_seqlen_q/k, with neither flag no
   seqused_k, with paged_kv = 0 no page-table field; with varlen both cu_seqlens (never half-way),
   max_seqlen_q in 0..seqlen_q and max_seqlen_k in 0..capacity; with paged_kv a page_table,
   page_size 1..256, num_pages >= 1, max_pages_per_seq >= 1, page_table_stride >=
   max_pages_per_seq, and rectangular seqlen_k <= capacity; int32 arrays 4-byte aligned; batch,
   seqlen_q >= 1, and seqlen_k >= 1 except varlen + paged (where it is not used). Fills L.
   FA3_ERR_INVALID_ARGUMENT, _BAD_SHAPE, _BAD_STRIDE, _BAD_ALIGNMENT naming the field and value.
   varlen.c. */
FA3_INTERNAL fa3_status fa3_fwd_layout_make(const fa3_config *c, const fa3_fwd_args *args,
                                            const char *who, fa3_fwd_layout *L);

/* The contents of the varlen / paged device arrays, read back with blocking copies on stream
   (NULL: the legacy default stream), after fa3_fwd_layout_make's rules: cu_seqlens_q/k start at
   0 and never decrease, cu_seqlens_q ends within seqlen_q rows, cu_seqlens_k within seqlen_k
   (not paged), lengths at most max_seqlen_q/k; seqused_k[b] in 0..capacity (the page table's
   when paged, else the sequence's length) and at most max_seqlen_k (varlen); the page_table
   entries a sequence's keys use in 0..num_pages-1. The first bad entry is named
   (FA3_ERR_BAD_SHAPE; a page index: FA3_ERR_INVALID_ARGUMENT). FA3_OK at once for configs with
   neither flag. Needs the driver and a current context. fa3_fwd (FA3JIT_DEBUG_VARLEN=1) and the
   reference (always). varlen.c. */
FA3_INTERNAL fa3_status fa3_fwd_check_varlen_arrays(const fa3_config *c, const fa3_fwd_args *args,
                                                    const char *who, void *stream);

/* Keeps ctx's first warning (later ones are dropped: reported once). The text is written before
   ctx->warned is set and never changed after, so readers need no lock. context.c. */
FA3_INTERNAL void fa3_context_warn(fa3_context *ctx, const char *fmt, ...) FA3_PRINTF(2, 3);

/* Moves ctx's disk state (FA3_DISK_*) towards OFF, never back. context.c. */
FA3_INTERNAL void fa3_context_degrade_disk(fa3_context *ctx, int state);

/* Unloads kernel's modules (when a driver was ever loaded) and frees it (NULL is ignored).
   kernel.c. */
FA3_INTERNAL void fa3_kernel_free(fa3_kernel *kernel);

/* A new kernel of ctx for a canonical config (not yet built, not in the table), or NULL when out
   of memory. kernel.c. */
FA3_INTERNAL fa3_kernel *fa3_kernel_new(fa3_context *ctx, const fa3_config *canonical);

/* Records that the calling thread's latest fa3_jit_get_kernel call returned kernel from source
   (fa3_kernel_info.source is per thread: matched by serial, not by address, which a freed kernel
   may pass on; another kernel's info shows how the context first obtained it). kernel.c. */
FA3_INTERNAL void fa3_kernel_note_source(const fa3_kernel *kernel, fa3_kernel_source source);
/* The calling thread's record of its last lookup (fa3_kernel_note_source), saved and put back
   around the library's own lookups (tail.c), which are not the caller's. */
typedef struct fa3_kernel_lookup_note {
    unsigned long long serial;
    fa3_kernel_source source;
} fa3_kernel_lookup_note;
FA3_INTERNAL void fa3_kernel_note_save(fa3_kernel_lookup_note *note);
FA3_INTERNAL void fa3_kernel_note_restore(const fa3_kernel_lookup_note *note);

/* Sets part pt's registers, spills, stack and warning flag from a compile (or driver JIT) result.
   kernel.c. */
FA3_INTERNAL void fa3_part_take_resources(fa3_part *pt, const fa3_compile_result *r);

/*
 * The CUfunction of kernel part (its operation's kernel number part) in the calling thread's
 * current CUDA context (made current first with fa3_driver_ensure_context if there is none). The
 * first call per context loads the module: cuModuleLoadData on the cubin, or, for DRIVER_JIT,
 * cuModuleLoadDataEx on the PTX with info/error log buffers (its log and the registers the driver
 * reports then fill the part's info); then sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to
 * the part's smem_bytes. Thread-safe. *dev (may be NULL) receives the context's device.
 * Errors: FA3_ERR_NO_DRIVER, FA3_ERR_CUDA, FA3_ERR_COMPILE (driver JIT failed, log in the message),
 * FA3_ERR_OUT_OF_MEMORY.
 */
FA3_INTERNAL fa3_status fa3_kernel_function(fa3_kernel *kernel, int part, CUfunction *fn,
                                            CUdevice *dev);

/* 1 when every part of kernel has its module loaded in CUDA context cuctx (fa3_kernel_function
   would load nothing), else 0. Loads nothing. Thread-safe. */
FA3_INTERNAL int fa3_kernel_loaded(fa3_kernel *kernel, CUcontext cuctx);

/*
 * Section size for a masked launch (fa3_kernel_params.section_hb), in [lo, hi] (hi clipped to
 * hb, the (head, batch) pairs): the size whose static tile order (as the kernel deals it to grid
 * CTAs, plan p's block_m/block_n, windows wl/wr as the kernel gets them) gives the least
 * busiest-CTA work (key blocks + 1.5 per tile), the smallest of those within 0.3%. Simulates at
 * most 48 sizes and 256k tiles in all (about a millisecond; hi when two sizes do not fit, or out of
 * memory). lo and hi are taken as at least 1; grid is the CTA count (at most the SM count). Pure;
 * never fails; returns at least 1.
 * Implemented in schedule.c.
 */
FA3_INTERNAL uint32_t fa3_section_search(const fa3_plan *p, int seqlen_q, int seqlen_k, int wl,
                                         int wr, uint32_t hb, unsigned grid, uint32_t lo,
                                         uint32_t hi);
/* The same for a packed-GQA plan: hb (kv head, batch) pairs of ceil(seqlen_q · ratio / block_m)
   tiles, each tile's key blocks those of its query rows (codegen/tile_order.h,
   FA3_TILE_RANGE_PACKED); ratio 0: not packed, fa3_section_search. */
FA3_INTERNAL uint32_t fa3_section_search_gqa(const fa3_plan *p, int ratio, int seqlen_q,
                                             int seqlen_k, int wl, int wr, uint32_t hb,
                                             unsigned grid, uint32_t lo, uint32_t hi);

/* The range [*lo, *hi] of section sizes fwd.c's section_hb searches for a masked launch of plan p
   (its config's head dims, dtype and pack_gqa) over hb_total (head, batch) pairs (> 0) with
   seqlen_k keys and num_heads / num_heads_k (> 0) query heads per KV head: sections whose K/V
   fit 32 MiB, at least grid / 4 pairs (grid / plan->l2_floor under that A/B knob), up to all
   pairs when even that floor's K/V overflows the 50 MiB L2; both clipped to hb_total. Pure.
   Implemented in schedule.c. */
FA3_INTERNAL void fa3_section_bounds(const fa3_plan *p, int seqlen_k, int num_heads,
                                     int num_heads_k, uint32_t hb_total, unsigned grid,
                                     uint32_t *lo, uint32_t *hi);

/* dyn_sched plans: 1 when a launch of tiles tiles on grid CTAs takes its tiles from a counter
   (dynamic), with *section the pairs whose K/V fit 32 MiB (1..hb_total; set in every case); 0:
   the static order and sections. dyn_sched 2 always, 3 never; 1 where L2 cuts the pairs into
   sections of at most grid/8 pairs (of at least one KV head; 4 with late_claim=0) and tiles >
   grid. Pure. schedule.c. */
FA3_INTERNAL int fa3_dyn_section(const fa3_plan *p, int seqlen_k, int num_heads, int num_heads_k,
                                 uint32_t hb_total, uint64_t tiles, unsigned grid,
                                 uint32_t *section);

/* The tail split of a dense call (tail.c): the forward kernel's tiles (whole rounds of the
   grid), the tail tiles after them and their splits (2..32). */
typedef struct fa3_tail_plan {
    uint32_t full_tiles, tail_tiles;
    int splits;
} fa3_tail_plan;

/* The cost of one piece's partials in key blocks of a CTA (tail.c's model) for a plan's head dims
   and block_n; 0 for values below 1. Pure. */
FA3_INTERNAL double fa3_tail_piece_cost(int head_dim, int head_dim_v, int block_n);

/* 1 and *out when a launch of tiles equal tiles of key_blocks key blocks each on grid CTAs runs
   faster with its last part round split into pieces of piece_cost each beyond their key blocks
   (tail.c's cost model: a gain of 0.5%, or any part round when force); 0 otherwise (*out
   zeroed). Pure. */
FA3_INTERNAL int fa3_tail_choose(uint64_t tiles, int64_t key_blocks, unsigned grid,
                                 double piece_cost, int force, fa3_tail_plan *out);

/* The rows [*r0, *r1) of a tail split's tiles (tp: fa3_tail_choose's) in the LSE output's row
   numbering ((b·num_heads + h)·seqlen_q + i) of a rectangular non-masked launch of pairs (head,
   batch) pairs: 1, or 0 (both 0) when the plan does not describe such a launch (its tiles are
   not ceil(seqlen_q / block_m)·pairs, no splits) or the rows or pieces exceed 32 bits. Pure. */
FA3_INTERNAL int fa3_tail_rows(const fa3_tail_plan *tp, int seqlen_q, int block_m, uint64_t pairs,
                               uint64_t *r0, uint64_t *r1);

/* The split_kv = 1 kernel of kernel's config from its context (built on the first call; the
   answer, found or not, is kept in kernel), with the same block_m and block_n. With lookup_only,
   only the kept answer (NULL, FA3_ERR_UNSUPPORTED when there is none yet). Thread-safe. */
FA3_INTERNAL fa3_status fa3_tail_kernel(fa3_kernel *kernel, int lookup_only, fa3_kernel **out);

/* fa3_section_search for kernel's plan, remembering the last 16 launch shapes per kernel.
   Thread-safe (kernel->mu). */
FA3_INTERNAL uint32_t fa3_choose_section_hb(fa3_kernel *kernel, const fa3_fwd_args *args, int wl,
                                            int wr, uint32_t hb, unsigned grid, uint32_t lo,
                                            uint32_t hi);

#endif
