/*
 * Split-KV (config split_kv = 1, fa3jit.h "Split-KV"): the number of splits (the library's
 * choice for num_splits = 0), the checks of num_splits and the workspace, and the combine
 * kernel's launch (split.c). The forward kernel's side of a split call (the partials it writes)
 * is fwd.c's fwd_kernel_params.
 */
#ifndef FA3JIT_SPLIT_H
#define FA3JIT_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "kernel_abi.h"

/* The splits for num_splits = 0 (fa3jit.h's rule): 1 when tiles query tiles fill 80% of num_sms
   or key_blocks is 1, else among s in 1..min(key_blocks, num_sms, FA3_MAX_SPLITS) whose chunks
   of ceil(key_blocks / s) blocks leave no split empty, the smallest with a wave efficiency
   tiles·s / (ceil(tiles·s / num_sms) · num_sms) of at least 85% of the best. 1 for arguments
   below 1. Pure. */
FA3_TOOLS_API int fa3_split_heuristic(int64_t tiles, int64_t key_blocks, int num_sms);

/* One combine launch: the partials (fp32, kernel_abi.h's layout) and where O and LSE go. */
typedef struct fa3_combine_call {
    const float *o_partial, *lse_partial;
    void *o;                 /* out_dtype, 4-byte aligned, even strides */
    float *lse;              /* rows floats, or NULL */
    int64_t o_batch_stride, o_row_stride, o_head_stride; /* elements */
    const int32_t *cu_seqlens_q; /* varlen configs: batch + 1 entries (device) */
    int num_splits;          /* 1..FA3_MAX_SPLITS */
    int rows;                /* partial rows: batch·num_heads·seqlen_q, varlen num_heads·total_q */
    int seqlen_q;            /* varlen: total_q */
    int num_heads, batch;
    uint32_t row_base;       /* rectangular: partial row r is output row row_base + r (a dense
                                call's tail split, tail.c; else 0) */
} fa3_combine_call;

/* The combine kernel's parameter block and grid (CTAs of FA3_COMBINE_WARPS rows) for c. */
FA3_INTERNAL void fa3_combine_params_fill(const fa3_combine_call *c, fa3_combine_params *prm,
                                          unsigned *grid);

/* Launches kernel's combine kernel (a split_kv config's second part) alone on stream, for the
   tests: c checked for its counts (num_splits 1..128, rows, seqlen_q, num_heads, batch >= 1, rows
   consistent with the shape) and pointers (non-NULL partials and o, 16-byte aligned partials,
   4-byte o and lse), not for overlaps. FA3_ERR_INVALID_ARGUMENT for a kernel without a combine
   part, _BAD_SHAPE, _BAD_ALIGNMENT, _NO_DRIVER, _CUDA. Asynchronous. */
FA3_TOOLS_API fa3_status fa3_combine_launch(fa3_kernel *kernel, const fa3_combine_call *c,
                                            void *stream);

#endif
