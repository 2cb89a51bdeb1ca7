/* Internals of the KV-cache append (fa3_kvcache_append): its kernel's CUDA C source and parameter
   block (kvcache_kernel.c, the CUDA C's KvParams field for field), the argument checks that fill
   it, the debug read-back of the device arrays and the no-GPU build hook (kvcache.c). */
#ifndef FA3JIT_KVCACHE_H
#define FA3JIT_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* The CUDA C source of the append kernels (kvcache_kernel.c lists them). */
FA3_INTERNAL extern const char fa3_kvcache_kernel_src[];

/* Host image of the kernels' KvParams (same field order and types; 8-byte fields first). The
   copy moves units of `unit` bytes (16, 8, 4, 2 or 1: the widest dividing every pointer, stride
   and row); strides are in units. */
typedef struct fa3_kvcache_params {
    uint64_t k_new, v_new, k_cache, v_cache;                 /* device addresses */
    uint64_t cache_seqlens, cache_batch_idx, seqused_out, page_table; /* 0: not given */
    int64_t kn_bs, kn_rs, kn_hs, vn_bs, vn_rs, vn_hs;        /* units */
    int64_t kc_bs, kc_rs, kc_hs, vc_bs, vc_rs, vc_hs;        /* units; bs steps entries/pages */
    int64_t page_table_stride;                               /* int32 entries */
    int64_t k_units;                                         /* batch·seqlen_new·heads·k_row */
    int64_t total_units;                                     /* k_units + V's */
    int32_t batch, seqlen_new, num_heads_k;
    int32_t k_row_units, v_row_units;                        /* units per row of K / V */
    int32_t capacity;                                        /* rows a sequence can hold */
    int32_t slots;                                           /* batch_cache, or num_pages */
    int32_t page_size;                                       /* 0: contiguous cache */
    int32_t unit;                                            /* bytes: 16, 8, 4, 2, 1 */
    int32_t pad_;
} fa3_kvcache_params;
_Static_assert(sizeof(fa3_kvcache_params) == 23 * 8 + 10 * 4, "fa3_kvcache_params layout");

#define KVCACHE_THREADS 256     /* the kernels' __launch_bounds__ */
#define KVCACHE_MAX_BLOCKS 8192 /* grid-stride beyond */

/* Everything about args that needs no GPU (fa3_kvcache_append's checks, in its order): FA3_OK
   with the kernel parameters, else the status and a message naming the field and its value. */
FA3_INTERNAL fa3_status fa3_kvcache_validate(const fa3_kvcache_append_args *args,
                                             fa3_kvcache_params *p);

/* The contents of cache_seqlens, cache_batch_idx and the page-table entries the new rows land
   in, read back with blocking copies on stream (after fa3_kvcache_validate): the first entry
   that breaks fa3jit.h's contract is named (cache_seqlens FA3_ERR_BAD_SHAPE, cache_batch_idx and
   pages FA3_ERR_INVALID_ARGUMENT). fa3_kvcache_append under FA3JIT_DEBUG_VARLEN=1. Needs the
   driver and a current context. */
FA3_INTERNAL fa3_status fa3_kvcache_check_arrays(const fa3_kvcache_append_args *args,
                                                 void *stream);

/* Compiles the append kernels with NVRTC for compute capability cc without the driver or any
   cache (no GPU needed), as fa3_quantize_build_image does the quantizer's. */
FA3_INTERNAL fa3_status fa3_kvcache_build_image(int cc, void **image, size_t *size, int *is_ptx);

#endif
