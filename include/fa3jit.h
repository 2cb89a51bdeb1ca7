/*
 * fa3jit — FlashAttention-3 forward kernels for NVIDIA Hopper (sm_90a), generated as PTX at run
 * time, compiled whole-program into cubins, cached on disk and launched through the CUDA Driver API.
 *
 * Algorithm: FlashAttention's tiled online softmax (Dao et al., arXiv 2205.14135, 2307.08691) with
 * FlashAttention-3's Hopper scheduling (Shah et al., arXiv 2407.08608): a producer warpgroup issuing
 * TMA loads into a shared-memory ring guarded by mbarriers, consumer warpgroups computing QKᵀ and PV
 * with wgmma, setmaxnreg register reallocation, named-barrier ping-pong between consumers.
 *
 * Usage:
 *   fa3_context *ctx;  fa3_context_create(&ctx, NULL);
 *   fa3_config cfg;    fa3_config_init(&cfg); cfg.head_dim = 128; cfg.mask = FA3_MASK_CAUSAL;
 *   fa3_kernel *k;     fa3_jit_get_kernel(ctx, &cfg, &k);     // memory → disk cache → codegen
 *   fa3_fwd_args a;    fa3_fwd_args_init(&a); ...shapes, pointers...;
 *                      fa3_fwd_args_set_contiguous(&a, 128, 128);
 *   fa3_fwd(k, &a, stream);
 *   fa3_context_free(ctx);
 *
 * Errors: every function that can fail returns an fa3_status (pinned values below). On failure a
 * message naming the bad value or the failing call is stored per thread; read it with
 * fa3_last_error_message() in a separate statement after the call (not as another argument of the
 * same printf: argument evaluation order is unspecified). A successful call leaves the previous
 * message in place. The library never aborts and never prints.
 *
 * Growing structs: every public struct starts with uint32_t struct_size, its size in bytes as the
 * caller's fa3jit.h declares it, so that fields can be appended in a later release without
 * breaking programs built against this one (zlib's deflateInit_ scheme, Win32's cbSize):
 *   - fa3_config_init, fa3_context_options_init and fa3_fwd_args_init are macros passing the
 *     caller's sizeof: they set struct_size and the defaults. Initialise every struct with them
 *     (or copy an initialised one) before setting fields;
 *   - a function reading a struct (fa3_config, fa3_context_options, fa3_fwd_args) takes the fields
 *     struct_size covers; fields an older, smaller struct lacks get their init defaults. A
 *     struct_size this library does not know is refused with FA3_ERR_INVALID_ARGUMENT naming the
 *     struct and the size: 0 (never initialised), larger than the library's own (a program built
 *     against a newer fa3jit.h than the library it runs with), or between the sizes of releases;
 *   - a function filling a struct writes only as much as the caller has: fa3_kernel_get_info and
 *     fa3_supported_configs are macros passing the caller's sizeof (the struct need not be
 *     initialised) and set struct_size to it; fa3_config_canonicalize writes cfg->struct_size
 *     bytes to out. Fields are only ever appended; fa3_kernel_info embeds fa3_config, so a larger
 *     fa3_config comes with a new fa3_kernel_info size, whose struct_size tells the library which
 *     layout the caller has. Bindings (python/fa3jit/_lib.py) call the *_sized functions with
 *     their mirror's size.
 *
 * Devices: kernels run on any sm_90 device; each kernel's module is loaded once per CUDA context
 * (the calling thread's current one), so several GPUs can share one fa3_context.
 *
 * Thread-safety: fa3_context and fa3_kernel objects may be used from several threads at once
 * (fa3_jit_get_kernel and fa3_fwd are thread-safe); fa3_context_free must not race with other calls
 * on the same context. Functions without a context are pure and thread-safe.
 */
#ifndef FA3JIT_H
#define FA3JIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA3_API
#elif defined(__GNUC__)
#define FA3_API __attribute__((visibility("default")))
#else
#define FA3_API
#endif

/* ---------------------------------------------------------------- version */
#define FA3JIT_VERSION_MAJOR 0
#define FA3JIT_VERSION_MINOR 1
#define FA3JIT_VERSION_PATCH 0
#define FA3JIT_VERSION_NUMBER \
    (FA3JIT_VERSION_MAJOR * 10000 + FA3JIT_VERSION_MINOR * 100 + FA3JIT_VERSION_PATCH)
#define FA3JIT_VERSION_STRING "0.1.0"

/** @return FA3JIT_VERSION_NUMBER of the library actually linked. */
FA3_API unsigned fa3_version_number(void);
/** @return FA3JIT_VERSION_STRING of the library actually linked (static storage). */
FA3_API const char *fa3_version_string(void);

/* ---------------------------------------------------------------- status codes (pinned) */
typedef enum fa3_status {
    FA3_OK = 0,
    FA3_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, unknown enum value, bad flag */
    FA3_ERR_BAD_HEAD_DIM = 2,     /* head_dim not supported by this build */
    FA3_ERR_BAD_HEAD_DIM_V = 3,   /* head_dim_v not supported with this head_dim */
    FA3_ERR_BAD_DTYPE = 4,        /* dtype not supported */
    FA3_ERR_BAD_MASK = 5,         /* mask kind not supported */
    FA3_ERR_BAD_ARCH = 6,         /* target arch not supported (only sm_90a) */
    FA3_ERR_BAD_SHAPE = 7,        /* batch / seqlen / num_heads out of range or inconsistent */
    FA3_ERR_BAD_STRIDE = 8,       /* a stride is negative, too large, or not TMA compatible */
    FA3_ERR_BAD_ALIGNMENT = 9,    /* a device pointer is not 16-byte aligned */
    FA3_ERR_BAD_SCALE = 10,       /* softmax_scale not a positive finite number */
    FA3_ERR_BAD_SOFTCAP = 11,     /* softcap value inconsistent with the kernel's config */
    FA3_ERR_BAD_WINDOW = 12,      /* window_size_left/right invalid for the mask */
    FA3_ERR_OUT_OF_MEMORY = 13,   /* host allocation failed */
    FA3_ERR_COMPILE = 14,         /* PTX → cubin compile failed (log: fa3_last_error_message) */
    FA3_ERR_LINK = 15,            /* nvJitLink failed (log: fa3_last_error_message) */
    FA3_ERR_NO_DRIVER = 16,       /* libcuda could not be loaded, or no CUDA device */
    FA3_ERR_CUDA = 17,            /* a CUDA Driver API call failed (named in the message) */
    FA3_ERR_CACHE_IO = 18,        /* disk cache failure that could not be worked around */
    FA3_ERR_UNSUPPORTED = 19,     /* valid request this build/device cannot do (e.g. not sm_90) */
    FA3_ERR_BAD_BACKEND = 20,     /* requested compile backend not available in this build */
    FA3_ERR_INTERNAL = 21,        /* generator bug: please report */
    FA3_ERR_BAD_BLOCK = 22,       /* block_m / block_n / stages override invalid */
    FA3_ERR_NO_NVRTC = 23         /* NVRTC (reference kernel) could not be loaded */
} fa3_status;

/** @return a static, one-line English name for a status code ("unknown status" if out of range). */
FA3_API const char *fa3_strerror(fa3_status status);

/**
 * @return the calling thread's message for the last failing fa3 call (naming the bad value, or the
 * failing CUDA/nvJitLink/PTX-compiler call with its log); "" if none. Valid until the next failing
 * fa3 call on the same thread; successful calls leave it unchanged.
 */
FA3_API const char *fa3_last_error_message(void);

/* ---------------------------------------------------------------- kernel configuration */
typedef enum fa3_dtype {
    FA3_DTYPE_BF16 = 0, /* bfloat16 Q/K/V/O */
    FA3_DTYPE_FP16 = 1, /* IEEE half Q/K/V/O */
    /* fp8 e4m3 (OCP FP8, torch.float8_e4m3fn) Q/K/V with fp32 descales (fa3_fwd_args), O in
       out_dtype (bf16 by default). e5m2 is not supported (FA3_ERR_BAD_DTYPE). */
    FA3_DTYPE_E4M3 = 2,
    /* fa3_config.out_dtype only: the default for the input dtype (dtype itself for bf16/fp16,
       bf16 for e4m3) */
    FA3_DTYPE_AUTO = -1
} fa3_dtype;

typedef enum fa3_mask {
    FA3_MASK_NONE = 0,
    /* causal, aligned to the bottom-right corner: query i sees key j iff
       j <= i + seqlen_k - seqlen_q (as FlashAttention 2.1+). */
    FA3_MASK_CAUSAL = 1,
    /* sliding window, bottom-right aligned: query i sees key j iff
       i + seqlen_k - seqlen_q - window_size_left <= j <= i + seqlen_k - seqlen_q + window_size_right
       (a window size of -1 means unlimited on that side; below -1 is FA3_ERR_BAD_WINDOW). */
    FA3_MASK_LOCAL = 2
} fa3_mask;

typedef enum fa3_arch { FA3_ARCH_SM90A = 90 } fa3_arch;

/** Compile backend turning PTX into a loadable kernel. Part of the cache key. */
typedef enum fa3_backend {
    FA3_BACKEND_AUTO = 0,         /* PTX Compiler API if built in, else nvJitLink */
    FA3_BACKEND_PTX_COMPILER = 1, /* nvPTXCompiler, whole-program: keeps setmaxnreg */
    FA3_BACKEND_NVJITLINK = 2,    /* nvJitLink -arch=sm_90a -O3: relocatable, DROPS setmaxnreg,
                                     serializes wgmma (C7509), spills */
    /* Only generates PTX in fa3_jit_get_kernel; the driver compiles it (whole-program) at the
       first fa3_fwd, which needs a GPU. No cubin, not disk-cached; registers/spills are -1
       until the first launch. */
    FA3_BACKEND_DRIVER_JIT = 3
} fa3_backend;

/**
 * Everything that changes the generated binary. Initialise with fa3_config_init(), then set fields.
 * Validated and canonicalised by fa3_config_canonicalize() (done implicitly by every function that
 * takes a config). Two configs with equal canonical forms produce the same kernel.
 */
typedef struct fa3_config {
    uint32_t struct_size; /* sizeof(fa3_config), set by fa3_config_init (see "Growing structs") */
    int head_dim;     /* Q/K head dimension: 64, 96, 128, 192 or 256 (elements) */
    int head_dim_v;   /* V/O head dimension; 0 = same as head_dim; supported: equal to head_dim,
                         or 128 with head_dim 192 (DeepSeek-style) */
    fa3_dtype dtype;  /* element type of Q, K, V and O */
    fa3_mask mask;    /* FA3_MASK_NONE / CAUSAL / LOCAL */
    int softcap;      /* 1: scores s = softmax_scale·q·kᵀ become softcap·tanh(s/softcap) before
                         the softmax (Gemma-2); the softcap value is given per call; 0: not */
    fa3_arch arch;    /* FA3_ARCH_SM90A */
    int block_n;      /* keys per tile; 0 = the planner's choice (recommended; fa3_fwd_tune
                         sets 64 for head_dim 256's short causal/local calls) */
    int stages;       /* K/V shared-memory ring depth; 0 = the planner's choice */
    fa3_dtype out_dtype; /* dtype of O: FA3_DTYPE_AUTO (the default) = dtype for bf16/fp16 and
                            bf16 for e4m3; e4m3 configs also take FA3_DTYPE_FP16; bf16/fp16
                            configs only their own dtype (canonical form: resolved) */
    int varlen;       /* 1: packed variable-length batches (fa3_fwd_args.cu_seqlens_q/k, "Varlen"
                         below); 0: rectangular (batch, seqlen, ...) tensors */
    int paged_kv;     /* 1: K/V in pages addressed through fa3_fwd_args.page_table ("Paged KV"
                         below); 0: K/V contiguous per sequence */
    int split_kv;     /* 1: split-KV (FlashAttention's num_splits, for decode and other calls
                         with few query tiles): each tile's key blocks are cut into
                         fa3_fwd_args.num_splits chunks, each a tile of its own writing fp32
                         partial O and LSE, which a combine kernel merges into O and LSE;
                         0: one pass over all keys */
    int pack_gqa;     /* 1: packed GQA (FlashAttention-3's pack_gqa, for decode with GQA/MQA):
                         a tile holds the rows of all ratio = num_heads / num_heads_k query heads
                         of one (batch, kv head), packed row r = q_index · ratio + (head -
                         kv_head · ratio), so K/V are read once per kv head instead of once per
                         query head; tiles = batch · num_heads_k · ceil(seqlen_q · ratio /
                         block_m). Needs ratio | block_m (fa3_kernel_info.block_m: 128, 192 for
                         head_dim 64): fa3_fwd refuses other head counts with FA3_ERR_BAD_SHAPE
                         naming num_heads, num_heads_k and block_m (use pack_gqa 0 for them).
                         Rectangular Q only (fa3_config_canonicalize refuses varlen 1 with
                         FA3_ERR_INVALID_ARGUMENT for now); dense or
                         paged K/V, split_kv 0 or 1, every head dim, dtype, mask and softcap;
                         same results and tensor layouts as pack_gqa 0. 0: one query head a
                         tile */
    int block_m;      /* query rows per tile; 0 = the planner's choice (128, or 192 with three
                         consumer warpgroups at head_dim 64 bf16/fp16); 64 = one consumer
                         warpgroup, the decode tile: for 1-64 query rows per tile (decode, few
                         rows, packed GQA) it does a half (a third at head_dim 64) of the tensor
                         work per key block, and the planner gives its freed shared memory to a
                         deeper K/V ring. 128 = two consumer warpgroups: at head_dim 64
                         bf16/fp16 (where the planner takes 192) the short causal/local tile,
                         fa3_fwd_tune's choice for seqlen_q, seqlen_k <= 1024; elsewhere it is
                         the planner's. 192 only where the planner chooses it. Canonical form:
                         the planner's value; describe adds " bm64" or " bm128" where the value
                         is not the planner's */
} fa3_config;

/** Sets struct_size and the defaults: head_dim 128, head_dim_v 0, bf16, no mask, no softcap,
 *  sm_90a, planner tiles, out_dtype FA3_DTYPE_AUTO. NULL is ignored. A macro over fa3_config_init_sized. */
#define fa3_config_init(cfg) fa3_config_init_sized((cfg), sizeof(fa3_config))
FA3_API void fa3_config_init_sized(fa3_config *cfg, size_t struct_size);

/**
 * Validates cfg and writes its canonical form to out (out may equal cfg; cfg->struct_size bytes,
 * struct_size included): head_dim_v 0 → head_dim, block_n/stages/block_m 0 → the planner's
 * values.
 * Errors: FA3_ERR_INVALID_ARGUMENT (NULL, or a struct_size this library does not know),
 * FA3_ERR_BAD_HEAD_DIM, _BAD_HEAD_DIM_V, _BAD_DTYPE, _BAD_MASK, _BAD_ARCH, _BAD_BLOCK; the message
 * names the field and its value. On error out is left unchanged.
 */
FA3_API fa3_status fa3_config_canonicalize(const fa3_config *cfg, fa3_config *out);

/**
 * Enumerates the configurations this build supports, in canonical form (the planner's block_n and
 * stages): every head_dim / head_dim_v pair (64, 96, 128, 192, 256 with head_dim_v = head_dim,
 * and 192 with 128) × dtype (bf16, fp16, e4m3 with out_dtype bf16) × mask (none, causal, local)
 * × softcap (0, 1) × varlen (0, 1) × paged_kv (0, 1) × split_kv (0, 1), and the decode
 * configs: pack_gqa 1 with split_kv 1, varlen 0 and block_m 64, head_dim 64's two-consumer
 * tile: block_m 128 for bf16/fp16, causal/local, split_kv 0 (the planner's block_m otherwise),
 * and head_dim 256's short key blocks: block_n 64 for bf16/fp16, causal/local, split_kv 0
 * that fa3_config_canonicalize accepts, in that order. Writes the first min(total, max) of them to out
 * (out may be NULL when max <= 0) and returns the total, so fa3_supported_configs(NULL, 0) gives
 * the count. Pure, thread-safe, needs no GPU. This is the set `fa3-gen cache warm --all`
 * precompiles. A macro passing the caller's sizeof(fa3_config): the array's stride, and each
 * config's struct_size (fa3_supported_configs_sized returns -1, writing nothing, for a size this
 * library does not know; the macro never does).
 */
#define fa3_supported_configs(out, max) \
    fa3_supported_configs_sized((out), (max), sizeof(fa3_config))
FA3_API int fa3_supported_configs_sized(fa3_config *out, int max, size_t struct_size);

/** Short human-readable form of cfg as given (not canonicalised: canonicalise first to see the
 *  planner's tiles), e.g. "hd128 bf16 causal sm_90a bn128 st2" or "hd192x128 fp16 local softcap
 *  sm_90a bn128 st2" (block_m 64 adds " bm64", head_dim 64's block_m 128 " bm128": a block_m
 *  that is not the planner's). Truncates to buf_size (96 bytes suffice for
 *  every canonical config; the longest, e4m3 with fp16 output, varlen or split, paged and bm64,
 *  is near 80) and still returns FA3_OK. */
FA3_API fa3_status fa3_config_describe(const fa3_config *cfg, char *buf, size_t buf_size);

/**
 * Generates the PTX text of cfg's kernel (no GPU, no driver needed).
 * *ptx receives a NUL-terminated malloc'd string to release with fa3_free(); *len (may be NULL)
 * its length without the NUL.
 */
FA3_API fa3_status fa3_emit_ptx(const fa3_config *cfg, char **ptx, size_t *len);

/** Releases memory returned by fa3 functions (NULL is ignored). */
FA3_API void fa3_free(void *p);

/* ---------------------------------------------------------------- context */
typedef struct fa3_context fa3_context;

/*
 * Disk cache: one file <cache_dir>/<key>.fa3k per kernel (a header with magic, format version,
 * key, kernel kind, canonical config, sizes, the plan's debug knobs and XXH3 checksums, then the
 * cubin and the compiler log), and beside it an index file <cache_dir>/<index key>.fa3x naming it
 * for the next process, which then loads the kernel without generating its PTX. A file
 * that fails any check (truncated, corrupted, foreign, older format) is ignored, never loaded, and
 * replaced by a fresh compile. Environment (read when the context is created): FA3JIT_CACHE_DIR
 * (folder, an absolute path), FA3JIT_CACHE_DISABLE (0 or 1: memory only), FA3JIT_CACHE_LOCK_TIMEOUT
 * (whole seconds 0..86400 to wait for another process compiling the same kernel before compiling
 * it too; default 300). A bad value is not used (the default applies) and is named in
 * fa3_context_warning; README.md lists every variable and its accepted values.
 */
typedef struct fa3_context_options {
    uint32_t struct_size;   /* sizeof(fa3_context_options), set by fa3_context_options_init */
    /* Disk cache directory (used as given); NULL = $FA3JIT_CACHE_DIR, else
       $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit (relative values of those are ignored).
       Created (mode 0700) on first write. */
    const char *cache_dir;
    int disable_disk_cache; /* 1: memory only (also when $FA3JIT_CACHE_DISABLE=1) */
    fa3_backend backend;    /* FA3_BACKEND_AUTO recommended */
} fa3_context_options;

/** Zeroes opts and sets struct_size (defaults: env/XDG cache dir, disk cache on, AUTO backend).
 *  NULL is ignored. A macro over fa3_context_options_init_sized. */
#define fa3_context_options_init(opts) \
    fa3_context_options_init_sized((opts), sizeof(fa3_context_options))
FA3_API void fa3_context_options_init_sized(fa3_context_options *opts, size_t struct_size);

/**
 * Creates a context owning an in-memory kernel table and the disk-cache settings. opts may be NULL.
 * Needs no GPU and no driver. Errors: FA3_ERR_INVALID_ARGUMENT, FA3_ERR_OUT_OF_MEMORY,
 * FA3_ERR_BAD_BACKEND (backend not built in), FA3_ERR_LINK (the backend resolves to nvJitLink and
 * libnvJitLink.so.13, opened here at its first use, cannot be loaded: the message says why).
 */
FA3_API fa3_status fa3_context_create(fa3_context **ctx, const fa3_context_options *opts);

/** Frees ctx, its kernels and their loaded modules. NULL is ignored. */
FA3_API void fa3_context_free(fa3_context *ctx);

/** The backend the context resolved AUTO to. */
FA3_API fa3_backend fa3_context_backend(const fa3_context *ctx);
/** The cache directory in use (static for the context's life), or NULL if the disk cache is off. */
FA3_API const char *fa3_context_cache_dir(const fa3_context *ctx);
/**
 * The context's warning, or "" when there is none (never NULL; "" for a NULL ctx). Bad environment
 * values and problems with the disk cache never fail a call: the context carries on (with the
 * variable's default, from memory) and keeps the first problem here, once (later ones are not
 * recorded), with the variable and its value, or the path and the failing call:
 *   - environment values that break their rule (every one of them, "; "-separated, at creation):
 *     e.g. FA3JIT_CACHE_LOCK_TIMEOUT='abc', a relative FA3JIT_CACHE_DIR, an unknown
 *     FA3JIT_PLAN_DEBUG knob;
 *   - the folder is missing and cannot be created: kernels are kept in memory only;
 *   - the folder is not writable: entries already in it are still loaded, new kernels stay in
 *     memory;
 *   - an entry could not be written (e.g. disk full) or the cache lock could not be taken (e.g. NFS
 *     without locks): the kernel is compiled and used anyway;
 *   - no folder could be named (none of FA3JIT_CACHE_DIR, XDG_CACHE_HOME, HOME set to an
 *     absolute path).
 * Set at context creation or during fa3_jit_get_kernel; once non-empty, the string does not change
 * and stays valid until fa3_context_free. Thread-safe. Turning the cache off on purpose
 * (disable_disk_cache, FA3JIT_CACHE_DISABLE=1) is not a warning.
 */
FA3_API const char *fa3_context_warning(const fa3_context *ctx);
/** Name of a backend: "ptx-compiler", "nvjitlink", "driver-jit", "auto". */
FA3_API const char *fa3_backend_name(fa3_backend b);

/* ---------------------------------------------------------------- kernels */
typedef struct fa3_kernel fa3_kernel; /* owned by its context; valid until fa3_context_free */

/**
 * Returns the kernel for cfg: from the context's memory table, else the disk cache, else by
 * generating PTX and compiling it (then stored in both). Needs no GPU (except the DRIVER_JIT
 * backend). Thread-safe: threads asking one context for the same config share one build. Processes
 * (and contexts) sharing a cache folder take a per-kernel file lock around compile-and-store, so one
 * compiles and the others wait and load its entry (a lock that cannot be taken: each compiles;
 * entries are renamed into place whole, so every caller gets a valid kernel either way). Disk cache
 * problems are never errors (see fa3_context_warning). Errors: the config errors of
 * fa3_config_canonicalize, FA3_ERR_COMPILE / FA3_ERR_LINK (naming the failing compiler call, with
 * the compiler's log, in fa3_last_error_message), FA3_ERR_OUT_OF_MEMORY.
 */
FA3_API fa3_status fa3_jit_get_kernel(fa3_context *ctx, const fa3_config *cfg, fa3_kernel **kernel);

typedef enum fa3_kernel_source {
    FA3_SOURCE_COMPILED = 0, /* generated and compiled by this call */
    FA3_SOURCE_DISK = 1,     /* loaded from the disk cache */
    FA3_SOURCE_MEMORY = 2    /* already in the context's table */
} fa3_kernel_source;

typedef struct fa3_kernel_info {
    uint32_t struct_size;    /* the bytes fa3_kernel_get_info filled: the caller's sizeof */
    fa3_config config;       /* canonical config */
    fa3_backend backend;     /* backend that produced the binary */
    char cache_key[33];      /* XXH3-128 of the canonical inputs, 32 lowercase hex digits */
    int num_regs;            /* registers per thread at entry (-1 if unknown) */
    int spill_store_bytes;   /* ptxas "bytes spill stores" (-1 if unknown) */
    int spill_load_bytes;    /* ptxas "bytes spill loads" (-1 if unknown) */
    int stack_bytes;         /* ptxas "bytes stack frame" (-1 if unknown) */
    int shared_bytes;        /* dynamic shared memory per CTA the launch requests (bytes) */
    int threads;             /* threads per CTA */
    int block_m, block_n, stages;   /* tile plan */
    fa3_kernel_source source;       /* how the calling thread's latest fa3_jit_get_kernel call
                                       obtained this kernel (COMPILED, DISK, or MEMORY on a repeat);
                                       if that call returned another kernel: how the context first
                                       obtained this one (COMPILED or DISK) */
    double compile_ms;       /* codegen + compile time if this context compiled it (kept on later
                                MEMORY hits), 0 if it came from the disk cache */
    const char *compile_log; /* compiler info log (NUL-terminated, owned by the kernel) */
    size_t cubin_size;       /* bytes, 0 for DRIVER_JIT */
} fa3_kernel_info;

/** Fills info for kernel (info need not be initialised). For an operation of several kernels the
 *  per-kernel fields (key, resources, log, cubin size) are its first kernel's, compile_ms their sum.
 *  A macro passing the caller's sizeof(fa3_kernel_info). Errors: FA3_ERR_INVALID_ARGUMENT (NULL, or
 *  a size this library does not know). */
#define fa3_kernel_get_info(kernel, info) \
    fa3_kernel_get_info_sized((kernel), (info), sizeof(fa3_kernel_info))
FA3_API fa3_status fa3_kernel_get_info_sized(const fa3_kernel *kernel, fa3_kernel_info *info,
                                             size_t struct_size);

/**
 * "" for a kernel of the default plan. For a kernel whose plan FA3JIT_PLAN_DEBUG changed (the
 * benchmark knobs, README "Kernel variants"): that variable's value as it was when the kernel was
 * planned, e.g. "dbg_no_softmax=1". Such a kernel is a benchmark variant, NOT for production:
 * some knobs give wrong results on purpose. Never NULL ("" for a NULL kernel); owned by the
 * kernel.
 */
FA3_API const char *fa3_kernel_plan_debug(const fa3_kernel *kernel);

/** Points *data and *size at the kernel's cubin (owned by the kernel). FA3_ERR_UNSUPPORTED for
 *  DRIVER_JIT kernels, which have no cubin. */
FA3_API fa3_status fa3_kernel_get_cubin(const fa3_kernel *kernel, const void **data, size_t *size);

/* ---------------------------------------------------------------- forward pass */
/**
 * Arguments of one forward call. Tensors live in device memory, layout (batch, seqlen, heads,
 * head_dim) like flash_attn_func, each with its own element strides (in ELEMENTS, not bytes) for
 * the batch, sequence and head axes; the head_dim axis must be contiguous (stride 1).
 *   q: (batch, seqlen_q, num_heads,   head_dim)    dtype of the config
 *   k: (batch, seqlen_k, num_heads_k, head_dim)    dtype of the config
 *   v: (batch, seqlen_k, num_heads_k, head_dim_v)  dtype of the config
 *   o: (batch, seqlen_q, num_heads,   head_dim_v)  out_dtype of the config (written)
 *   lse: (batch, num_heads, seqlen_q) fp32 contiguous, natural-log sum-exp of the scaled (and
 *        capped) scores of each row; -inf for a row that sees no key. NULL = not written.
 * FP8 (dtype e4m3): q, k, v hold e4m3 values x8; the kernel computes with x8 · descale, each
 * descale an fp32 DEVICE array of shape (batch, num_heads_k), contiguous (element b·num_heads_k +
 * h_k scales batch b, kv head h_k; for q: every query head h of the group h / (num_heads /
 * num_heads_k), FlashAttention-3's convention), or NULL for 1.0. Softmax scale and softcap apply
 * to the dequantized scores q·kᵀ·descale_q·descale_k; O = softmax · (v8·descale_v). Descales must
 * be positive and finite: fa3_fwd reads them back (a blocking device-to-host copy on the call's
 * stream) and refuses others with FA3_ERR_BAD_SCALE naming the array, index and value, unless
 * descales_trusted = 1 (no read: for CUDA graph capture and the lowest latency; a bad value then
 * gives wrong output, not an error). bf16/fp16 configs need all three NULL.
 * TMA requirements: q, k, v 16-byte aligned; their batch/row/head strides × element size multiples
 * of 16 bytes (a stride of 0 broadcasts, e.g. K/V shared by all heads). o must be 4-byte aligned
 * with even strides and must not overlap itself; lse 4-byte aligned. An o that also meets the
 * q/k/v rules (16-byte address and strides) is written by TMA from shared memory; any other o from
 * registers, with the same results but slower when sequences are short (hd128 seqlen 512: ~12%).
 * Aliasing: o and lse must not overlap k, v or each other; o may overlap q only by being exactly q
 * (same address and strides, head_dim_v == head_dim): in-place output.
 * Limits (FA3_ERR_BAD_SHAPE): every extent ≥ 1; seqlen_q + seqlen_k + 256 ≤ 2^31 − 1 (32-bit index
 * arithmetic in the kernel); ceil(seqlen_q / block_m) · num_heads · batch ≤ 2^31 − 1 (block_m:
 * fa3_kernel_info, 128, or 192 for head_dim 64).
 * GQA/MQA: num_heads_k divides num_heads; query head h reads K/V head h / (num_heads/num_heads_k).
 * A query row that sees no key gets O = 0 and lse = -inf.
 */
typedef struct fa3_fwd_args {
    uint32_t struct_size;  /* sizeof(fa3_fwd_args), set by fa3_fwd_args_init */
    const void *q, *k, *v; /* device pointers */
    void *o;               /* device pointer */
    float *lse;            /* device pointer or NULL */
    int batch, seqlen_q, seqlen_k, num_heads, num_heads_k;
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;
    float softmax_scale;   /* 0 = 1/sqrt(head_dim); otherwise positive and finite */
    float softcap;         /* > 0 iff the config has softcap */
    int window_size_left;  /* FA3_MASK_LOCAL: >= 0, or -1 = unlimited; other masks: must be -1 */
    int window_size_right; /* FA3_MASK_LOCAL: >= 0, or -1 = unlimited; other masks: must be -1 */
    /* e4m3 configs: (batch, num_heads_k) fp32 device arrays, NULL = 1.0 (see above) */
    const float *descale_q, *descale_k, *descale_v;
    int descales_trusted;  /* 1: fa3_fwd does not read the descales back to check them */
    /* Varlen (config varlen = 1), FlashAttention's flash_attn_varlen_func: the batch's sequences
       packed end to end. q/o: (total_q, num_heads, head_dim) with seqlen_q = total_q rows (the
       batch strides are ignored), lse: (num_heads, total_q) fp32; k/v: (total_k, num_heads_k,
       head_dim) with seqlen_k = total_k (not paged). cu_seqlens_q/k: int32 DEVICE arrays of
       batch + 1 non-decreasing offsets starting at 0 (sequence b is rows cu[b] .. cu[b+1]-1);
       max_seqlen_q/k: upper bounds of the lengths (the host sizes the grid with them).
       seqused_k: optional int32 DEVICE array (batch): sequence b uses only its first
       seqused_k[b] keys (≤ its length, or its pages' capacity when paged); the K/V rows
       past them up to the sequence's next key block must hold finite values (the kernel
       loads whole blocks; their probabilities are 0, but 0 · NaN is NaN). Masks are
       bottom-right aligned per sequence; a sequence with no query or no key rows is valid (its
       rows see no key: O = 0, LSE = -inf). Rows of q/o past cu_seqlens_q[batch] are neither
       read nor written. Host-checked: both cu_seqlens given (never one alone), 4-byte aligned,
       0 <= max_seqlen_q <= seqlen_q (0: no sequence has a query: fa3_fwd validates and
       launches nothing), 0 <= max_seqlen_k <= seqlen_k (paged: the page table's capacity); the
       descales stay (batch, num_heads_k), b the sequence. The device arrays are the caller's
       contract (not read by the host): cu_seqlens_q/k start at 0, never decrease, end within
       seqlen_q/seqlen_k rows (cu_seqlens_k: not paged), each length (seqused_k[b] where given)
       at most max_seqlen_q/k. FA3JIT_DEBUG_VARLEN=1 (read when the context is created) makes
       fa3_fwd read them (and seqused_k, page_table) back with blocking copies on the call's
       stream before the launch and refuse the first bad entry, naming it (FA3_ERR_BAD_SHAPE; a
       page index FA3_ERR_INVALID_ARGUMENT); not for graph capture. fa3_reference_fwd always
       checks them that way. */
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k;
    int max_seqlen_q, max_seqlen_k;
    /* Paged KV (config paged_kv = 1): k/v are (num_pages, page_size, num_heads_k, head_dim): the
       k/v batch strides step pages, the row strides rows within a page. page_table: int32 DEVICE
       array (batch, max_pages_per_seq) with row stride page_table_stride (elements): key j of
       sequence b is row j % page_size of page page_table[b][j / page_size]. Sequence b has
       seqused_k[b] keys (varlen or not), else seqlen_k (rectangular Q) / its cu_seqlens_k length
       (varlen). Pages may be shared and in any order. page_size 1..256. Host-checked:
       page_table non-NULL and 4-byte aligned, num_pages >= 1, max_pages_per_seq >= 1,
       page_table_stride >= max_pages_per_seq, rectangular seqlen_k <= max_pages_per_seq ·
       page_size (the capacity); varlen + paged: seqlen_k is not used. The k/v strides follow
       the TMA rules above with extents num_pages (batch strides) and page_size (row strides).
       Caller's contract (FA3JIT_DEBUG_VARLEN=1 checks it): seqused_k[b] <= the capacity, and
       the entries page_table[b][0 .. ceil(keys / page_size) - 1] in 0..num_pages-1 (later
       entries are never read), and the rows of a sequence's last page past its keys finite
       (the kernel may load them with the keys before them; their probabilities are 0, but
       0 · NaN is NaN). Without varlen and paged_kv every varlen / paged field must be
       NULL / 0 (FA3_ERR_INVALID_ARGUMENT naming it), seqused_k included. */
    const int32_t *page_table;
    int num_pages, page_size, max_pages_per_seq;
    int64_t page_table_stride;
    /* Split-KV (config split_kv = 1), FlashAttention's num_splits: each query tile's key blocks
       are cut into num_splits chunks of ceil(blocks / num_splits) blocks, each computed by its
       own CTA into fp32 partials (O normalized by its own row sum, and its LSE) in the
       workspace; a second kernel merges them per row into O (out_dtype) and LSE. For decoding
       (few query rows, long keys), where one CTA per query tile leaves most SMs idle.
       num_splits: 1..FA3_MAX_SPLITS explicit, or 0: the library chooses, FlashAttention's rule
       (fill the SMs in few full waves, no more splits than that takes, each split costing a
       partial's write and read): with tiles = batch · num_heads · ceil(seqlen_q / block_m)
       query tiles (varlen: max_seqlen_q; pack_gqa: batch · num_heads_k · ceil(seqlen_q ·
       ratio / block_m)) and key_blocks = ceil(keys / block_n) (keys: the
       longest sequence's, max_seqlen_k / the page table's capacity), 1 when tiles fill 80% of
       the SMs or key_blocks is 1; else, among the s in 1..min(key_blocks, FA3_MAX_SPLITS)
       whose chunks leave no split empty, the smallest whose wave efficiency tiles·s /
       (ceil(tiles·s / SMs) · SMs) is at least 85% of the best. A split_kv = 0 config takes
       only 0 or 1: 1 is one pass, always; 0 lets a dense non-causal call split its last part
       round (fa3_fwd's tail split). workspace: device memory
       of at least fa3_fwd_workspace_size bytes, 256-byte aligned, not overlapping any tensor,
       not used by anything else until the call's kernels are done (stream order), or NULL:
       fa3_fwd allocates it with cuMemAllocAsync and frees it with cuMemFreeAsync on the call's
       stream (stream-ordered, so CUDA graph capture works; needs a driver with memory pools).
       workspace_bytes: the size given (ignored when workspace is NULL). A split_kv = 0 config
       ignores workspace and workspace_bytes. */
    int num_splits;
    void *workspace;
    size_t workspace_bytes;
} fa3_fwd_args;

/* The most splits fa3_fwd_args.num_splits may ask for. */
#define FA3_MAX_SPLITS 128

/** Zeroes args, sets struct_size and the window sizes to -1. NULL is ignored. A macro over
 *  fa3_fwd_args_init_sized. */
#define fa3_fwd_args_init(args) fa3_fwd_args_init_sized((args), sizeof(fa3_fwd_args))
FA3_API void fa3_fwd_args_init_sized(fa3_fwd_args *args, size_t struct_size);

/** Sets all strides for contiguous (batch, seqlen, heads, head_dim) tensors from the shape fields
 *  (batch, seqlen_q/k, num_heads/_k) and the given head dims (a batch stride beyond int64_t is
 *  set to INT64_MAX, which fa3_fwd refuses). */
FA3_API void fa3_fwd_args_set_contiguous(fa3_fwd_args *args, int head_dim, int head_dim_v);

/**
 * Validates args against kernel's config (every check before any launch; the message names the bad
 * field and value), then launches on stream (a CUstream; NULL = legacy default stream) in the
 * calling thread's current CUDA context (device 0's primary context is made current if there is
 * none). Asynchronous. Errors: FA3_ERR_INVALID_ARGUMENT (NULL pointers, aliasing), _BAD_SHAPE,
 * _BAD_STRIDE, _BAD_ALIGNMENT,
 * _BAD_SCALE, _BAD_SOFTCAP, _BAD_WINDOW, _NO_DRIVER, _UNSUPPORTED (device not sm_90), _CUDA (also
 * a split-KV workspace the driver could not allocate: cuMemAllocAsync named). Split-KV configs
 * launch two kernels on stream (forward into the workspace, then the combine). Dense causal/local
 * bf16/fp16 launches of more than one wave of tiles whose K/V fit L2 only in small groups of
 * heads (long sequences: fa3jit's runtime/schedule.c fa3_dyn_section) take their tiles from a
 * 4-byte counter (FlashAttention-3's dynamic persistent scheduler), allocated with
 * cuMemAllocAsync, zeroed with cuMemsetD32Async and freed with cuMemFreeAsync on stream; where the
 * driver cannot allocate it, the launch walks the static tile order instead (same results).
 * Dense non-causal bf16/fp16 launches whose tiles leave the persistent grid's last round part
 * full (fa3jit's runtime/tail.c decides; long keys: e.g. 2048 tiles of 16k keys on 132 SMs) run
 * the whole rounds' tiles in the forward kernel and the remaining tiles as split-KV pieces: the
 * same config with split_kv = 1 (built into the kernel's context on the first such call, then
 * kept), its fp32 partials in memory from cuMemAllocAsync on stream, its combine kernel writing
 * those rows of O and LSE, the memory freed on stream: three kernels, the partials' rounding
 * (O of those rows may differ from a one-kernel launch in the last bit). Where the split-KV
 * kernel or the memory cannot be had, the forward kernel runs every tile (same results); so it
 * does inside a CUDA graph capture until a call outside one has built and loaded that kernel,
 * and always with args->num_splits 1 (one pass: one kernel, no memory allocated).
 * These allocations are stream-ordered, so CUDA graph capture records them; CUDA then allows one
 * executable graph of the captured graph at a time (cuGraphInstantiate: a graph with allocation
 * or free nodes).
 */
FA3_API fa3_status fa3_fwd(fa3_kernel *kernel, const fa3_fwd_args *args, void *stream);

/**
 * Device bytes of workspace fa3_fwd needs for kernel and args (0 for a split_kv = 0 config):
 * for split_kv, 256-byte aligned parts o_partial (num_splits · rows · head_dim_v fp32) and
 * lse_partial (num_splits · rows fp32), rows = batch · num_heads · seqlen_q (varlen: num_heads ·
 * seqlen_q, the packed rows). args is validated as fa3_fwd validates it (every error of fa3_fwd
 * before a launch; workspace and workspace_bytes are not looked at). With num_splits 0 the
 * library's choice needs the device's SM count (the calling thread's current CUDA context, as
 * fa3_fwd): FA3_ERR_NO_DRIVER / _CUDA when there is none.
 */
FA3_API fa3_status fa3_fwd_workspace_size(const fa3_kernel *kernel, const fa3_fwd_args *args,
                                          size_t *bytes);

/**
 * The library's choice of cfg's call-shape fields for a call of args's shape on a device of
 * num_sms SMs (the CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT of the device; the H200 has 132):
 * sets the decode family (pack_gqa 1, block_m 64, split_kv 1: the listed decode configs) where
 * packing the ratio = num_heads / num_heads_k query heads of a kv head into one tile pays by
 * FlashAttention-3's rule (the share of a tile's rows used without packing, seqlen_q /
 * round_up(seqlen_q, block_m), under 0.9 of the share with seqlen_q · ratio rows) or where
 * seqlen_q <= 64 — for rectangular Q and a ratio dividing 64 (then pass num_splits 0: fa3_fwd
 * picks the count, maybe 1); else pack_gqa 0 and split_kv 1 where split-KV pays by
 * fa3_fwd_args.num_splits' rule (the query tiles fill under 80% of the SMs and the keys span
 * more than one block_n block), else 0; and block_m 128 (two consumer warpgroups) for head_dim
 * 64 (head_dim_v 64) bf16/fp16 one-pass calls, causal or local with a finite window on either
 * side, with seqlen_q and seqlen_k (varlen: the max_ values) <= 1024, else 0 (the planner's: 192
 * there); and block_n 64 for head_dim 256 (head_dim_v 256) bf16/fp16 one-pass calls under the
 * same mask and length rule, else 0 (the planner's: 80 there). Reads window_size_left/right for
 * that. A caller who then sets pack_gqa 1 or split_kv 1 itself should reset block_m and block_n
 * to 0 (python/fa3jit/_splits.py does). Reads batch, num_heads,
 * num_heads_k and seqlen_q, seqlen_k (rectangular Q; paged: seqlen_k as fa3_fwd takes it) or
 * max_seqlen_q, max_seqlen_k (varlen configs) of args; the other fields of cfg are canonicalized first (their
 * errors as fa3_config_canonicalize's) and left as given. Fields past cfg->struct_size are not
 * written. Errors: FA3_ERR_INVALID_ARGUMENT (NULL, num_sms outside 1..65535), _BAD_SHAPE (a
 * negative shape field), the config's; on error cfg is unchanged. Pure, thread-safe, no GPU.
 */
FA3_API fa3_status fa3_fwd_tune(fa3_config *cfg, const fa3_fwd_args *args, int num_sms);

/**
 * Floating-point operations of one forward call, counted as FlashAttention does:
 * 2·batch·num_heads·seqlen_q·seqlen_k·(head_dim + head_dim_v) (QKᵀ and PV), halved for causal
 * when seqlen_q == seqlen_k; every other masked case counts the visible (query, key) pairs exactly.
 * Returns 0 for NULL arguments, and for varlen calls or calls with seqused_k (the lengths are in
 * device memory: count them from the host's copy).
 */
FA3_API double fa3_fwd_flops(const fa3_config *cfg, const fa3_fwd_args *args);

/* ---------------------------------------------------------------- FP8 quantizer */
/**
 * Quantizes a bf16/fp16 tensor x of shape (batch, seqlen, num_heads, head_dim) to e4m3 for the FP8
 * forward pass, with one fp32 descale per (batch, descale head): descale head g covers the heads
 * g·(num_heads/num_descale_heads) .. +(num_heads/num_descale_heads)-1 (num_descale_heads divides
 * num_heads: num_heads_k for q, so q's descales have fa3_fwd_args' shape (batch, num_heads_k); and
 * num_heads for k, v). descale = amax / 448 over the group's elements (after the rotation), out =
 * e4m3(x / descale), round to nearest even, saturating; a group of zeros gets descale 1.
 * Optional incoherent processing (FlashAttention-3, arXiv 2407.08608 §3.3): with hadamard = 1
 * every row is rotated first, x ← x · diag(signs) · H / sqrt(head_dim), H the Sylvester
 * Walsh-Hadamard matrix (head_dim a power of two: 64, 128, 256, else FA3_ERR_BAD_HEAD_DIM); apply
 * it to q and k with the same signs and not to v: (q·M)(k·M)ᵀ = q·kᵀ for the orthogonal M.
 * signs: a DEVICE array of head_dim floats, each +1 or -1, or NULL for the signs of `seed`
 * (fa3_hadamard_signs writes them to host memory). Strides in elements, head_dim contiguous; out
 * 16-byte aligned with strides multiples of 16 for fa3_fwd; descale (batch, num_descale_heads)
 * fp32 contiguous. Without the rotation head_dim may be any size >= 1 (signs and seed unused).
 * out and descale must not overlap x, signs or each other. A group holding an inf or NaN gets a
 * non-finite descale (which fa3_fwd refuses). The kernel is CUDA C compiled at the first call
 * through NVRTC (cached for the process per CUDA context, as the reference is). Asynchronous on
 * stream. Errors: FA3_ERR_INVALID_ARGUMENT, _BAD_SHAPE, _BAD_STRIDE, _BAD_ALIGNMENT, _BAD_DTYPE,
 * _BAD_HEAD_DIM (all checked before any driver call), _NO_DRIVER, _UNSUPPORTED (a device older
 * than sm_89), _NO_NVRTC, _COMPILE, _CUDA.
 */
typedef struct fa3_quantize_args {
    uint32_t struct_size;   /* sizeof(fa3_quantize_args), set by fa3_quantize_args_init */
    fa3_dtype dtype;        /* of x: FA3_DTYPE_BF16 or FA3_DTYPE_FP16 */
    const void *x;          /* device, (batch, seqlen, num_heads, head_dim) */
    void *out;              /* device, e4m3, same shape (written) */
    float *descale;         /* device, (batch, num_descale_heads) fp32 (written) */
    int batch, seqlen, num_heads, head_dim;
    int num_descale_heads;  /* 0 = num_heads */
    int64_t x_batch_stride, x_row_stride, x_head_stride;
    int64_t out_batch_stride, out_row_stride, out_head_stride;
    int hadamard;           /* 1: rotate rows by diag(signs)·H/sqrt(head_dim) before quantizing */
    const float *signs;     /* device, head_dim entries of ±1, or NULL: from seed */
    uint64_t seed;          /* the signs when signs is NULL */
} fa3_quantize_args;

#define fa3_quantize_args_init(args) fa3_quantize_args_init_sized((args), sizeof(fa3_quantize_args))
/** Zeroes args and sets struct_size (num_descale_heads 0 = num_heads, no rotation). */
FA3_API void fa3_quantize_args_init_sized(fa3_quantize_args *args, size_t struct_size);
FA3_API fa3_status fa3_quantize_fp8(fa3_context *ctx, const fa3_quantize_args *args, void *stream);
/** The random signs (+1/-1) of seed for head_dim entries, into host memory out[head_dim]:
 *  sign i is bit 0 of splitmix64(seed + i) (1 → -1). Pure, thread-safe. */
FA3_API fa3_status fa3_hadamard_signs(uint64_t seed, int head_dim, float *out);

/* ---------------------------------------------------------------- KV-cache append */
/**
 * Appends seqlen_new new K/V rows per sequence to a KV cache, FlashAttention-3's
 * flash_attn_with_kvcache(k=, v=) before its attention: row i of sequence b is written at cache
 * position cache_seqlens[b] + i. Stream-ordered on stream, no host synchronization: cache_seqlens
 * (and cache_batch_idx, page_table) are read by the kernel at run time, never by the host, so a
 * captured CUDA graph replays the values they hold at replay. Elements are copied bit for bit
 * (any dtype of fa3_dtype but AUTO; e4m3 rows must already be quantized with the cache's descales).
 *   k_new: (batch, seqlen_new, num_heads_k, head_dim), v_new: (..., head_dim_v), strides in
 *          elements, any non-negative values (0 broadcasts), the head_dim axis contiguous;
 *   k_cache / v_cache, either
 *     contiguous (page_table NULL): (batch_cache, seqlen_cache, num_heads_k, head_dim[_v]);
 *            sequence b appends to cache entry cache_batch_idx[b] (int32 DEVICE array (batch),
 *            values in 0..batch_cache-1), or b when cache_batch_idx is NULL (batch_cache >= batch);
 *     or paged (page_table given): (num_pages, page_size, num_heads_k, head_dim[_v]) with the
 *            (batch, max_pages_per_seq) int32 DEVICE page table of row stride page_table_stride,
 *            position j of sequence b in row j % page_size of page page_table[b][j / page_size],
 *            fa3_fwd_args' "Paged KV" layout (page_size 1..256); batch_cache, seqlen_cache 0 and
 *            cache_batch_idx NULL;
 *          the batch strides step cache entries (pages when paged), the row strides rows; the
 *          cache's elements must not overlap each other;
 *   cache_seqlens: int32 DEVICE array (batch): each sequence's cached rows BEFORE the append (not
 *          changed by the call);
 *   seqused_out: NULL, or an int32 DEVICE array (batch) receiving cache_seqlens[b] + seqlen_new:
 *          the seqused_k of the attention that follows (fa3_fwd_args.seqused_k).
 * Host-checked (FA3_ERR_INVALID_ARGUMENT, _BAD_DTYPE, _BAD_HEAD_DIM, _BAD_SHAPE, _BAD_STRIDE,
 * _BAD_ALIGNMENT, naming the field and value, before any driver call): shapes >= 1
 * (seqlen_new >= 1), seqlen_new <= the capacity (seqlen_cache, or max_pages_per_seq · page_size),
 * the fields of the other cache kind 0 / NULL, cache_batch_idx only with a contiguous cache,
 * pointers aligned to the element size (int32 arrays to 4), strides non-negative and within 2^62
 * elements; k_new/v_new must not overlap the caches (byte ranges), k_cache != v_cache (they may
 * interleave, e.g. one (..., 2, num_heads_k, head_dim) tensor), seqused_out must not overlap any
 * other array, and the caches not the int32 arrays.
 * Caller's contract (the device arrays' contents): cache_seqlens[b] >= 0 and cache_seqlens[b] +
 * seqlen_new <= the capacity; cache_batch_idx[b] in 0..batch_cache-1; the page-table entries of
 * the pages the new rows land in in 0..num_pages-1; no two sequences' new rows on one cache row
 * (a shared page or a repeated cache_batch_idx entry: a write race). The kernel writes nothing
 * for a row whose position, entry or page is out of range (never out of bounds; the attention
 * after it then is wrong, not unsafe). For the fa3_fwd that follows, the cache rows past each
 * sequence's keys must be finite (a zeroed cache): the forward kernel may load them with the keys
 * before them (probability 0; 0 · NaN is NaN), as fa3_fwd_args' "Paged KV" rule says of a
 * sequence's last page.
 * FA3JIT_DEBUG_VARLEN=1 (read when ctx was created) makes the call read the arrays back with
 * blocking copies on stream before the launch and refuse the first bad entry, naming it
 * (FA3_ERR_BAD_SHAPE; cache_batch_idx, page indices and two sequences on one cache row
 * FA3_ERR_INVALID_ARGUMENT); not for graph
 * capture. The kernel is CUDA C compiled at the first call through NVRTC (cached for the process
 * per CUDA context, as the quantizer's). Asynchronous. Further errors: _NO_DRIVER, _NO_NVRTC,
 * _COMPILE, _CUDA.
 */
typedef struct fa3_kvcache_append_args {
    uint32_t struct_size;          /* sizeof(fa3_kvcache_append_args), set by the init macro */
    fa3_dtype dtype;               /* of k_new, v_new and the caches: bf16, fp16 or e4m3 */
    const void *k_new, *v_new;     /* device, the rows to append */
    void *k_cache, *v_cache;       /* device (written at the new rows' positions only) */
    const int32_t *cache_seqlens;  /* device (batch), rows cached before the append */
    const int32_t *cache_batch_idx; /* device (batch) or NULL (contiguous cache only) */
    int32_t *seqused_out;          /* device (batch) or NULL: cache_seqlens + seqlen_new */
    int batch, seqlen_new, num_heads_k, head_dim;
    int head_dim_v;                /* 0 = head_dim */
    int batch_cache, seqlen_cache; /* contiguous cache's extents; 0 when paged */
    int64_t k_new_batch_stride, k_new_row_stride, k_new_head_stride;
    int64_t v_new_batch_stride, v_new_row_stride, v_new_head_stride;
    int64_t k_cache_batch_stride, k_cache_row_stride, k_cache_head_stride;
    int64_t v_cache_batch_stride, v_cache_row_stride, v_cache_head_stride;
    /* paged cache (fa3_fwd_args' meaning); all NULL / 0 for a contiguous one */
    const int32_t *page_table;
    int num_pages, page_size, max_pages_per_seq;
    int64_t page_table_stride;
} fa3_kvcache_append_args;

#define fa3_kvcache_append_args_init(args) \
    fa3_kvcache_append_args_init_sized((args), sizeof(fa3_kvcache_append_args))
/** Zeroes args and sets struct_size (head_dim_v 0 = head_dim, a contiguous cache). NULL is
 *  ignored. */
FA3_API void fa3_kvcache_append_args_init_sized(fa3_kvcache_append_args *args, size_t struct_size);
FA3_API fa3_status fa3_kvcache_append(fa3_context *ctx, const fa3_kvcache_append_args *args,
                                      void *stream);

/* ---------------------------------------------------------------- reference (verification) */
/**
 * Plain reference attention: one CUDA C kernel compiled at run time through NVRTC (dlopen'd),
 * fp32 accumulation, two passes over the keys. Same argument conventions as fa3_fwd (cfg says
 * dtype, head dims, mask and softcap; e4m3 inputs are dequantized with the descales); o_ref (DEVICE pointer) is fp32 with layout (batch, seqlen_q, num_heads,
 * head_dim_v) contiguous; lse_ref (DEVICE pointer) fp32 (batch, num_heads, seqlen_q), may be NULL. args->o/lse are
 * ignored. Synchronous. Errors: as fa3_fwd, plus FA3_ERR_NO_NVRTC, FA3_ERR_COMPILE.
 */
FA3_API fa3_status fa3_reference_fwd(fa3_context *ctx, const fa3_config *cfg,
                                     const fa3_fwd_args *args, float *o_ref, float *lse_ref,
                                     void *stream);

/**
 * As fa3_reference_fwd, but with emulate_dtype = 1 the probabilities P are rounded to the config's
 * dtype before the PV product (as the fast kernel does; e4m3: P·2^8 rounded to e4m3, FA3's exponent
 * offset), and O is rounded to the out_dtype at the end:
 * the difference between the two references measures the error the dtype itself makes, which the
 * tests use as the tolerance scale (FlashAttention's testing rule).
 */
FA3_API fa3_status fa3_reference_fwd_ex(fa3_context *ctx, const fa3_config *cfg,
                                        const fa3_fwd_args *args, float *o_ref, float *lse_ref,
                                        int emulate_dtype, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FA3JIT_H */
