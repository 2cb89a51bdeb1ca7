/* Internals of the FP8 quantizer (fa3_quantize_fp8): its kernels' CUDA C source and parameter
   block (quantize_kernel.c, the CUDA C's QuantParams field for field), the argument checks that
   fill it and the no-GPU build hook (quantize.c). */
#ifndef FA3JIT_QUANTIZE_H
#define FA3JIT_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* The CUDA C source of the quantizer's kernels (quantize_kernel.c lists them). */
FA3_INTERNAL extern const char fa3_quant_kernel_src[];

/* Host image of the kernels' QuantParams (same field order and types; 8-byte fields first). */
typedef struct fa3_quant_params {
    uint64_t x, out, descale, signs; /* device addresses; signs 0: from seed */
    uint64_t seed;
    int64_t x_bs, x_rs, x_hs;        /* elements */
    int64_t o_bs, o_rs, o_hs;        /* bytes = elements */
    int64_t total_rows;              /* batch · num_heads · seqlen */
    int64_t rows_per_warp;           /* each warp's run of consecutive rows (set at launch) */
    int64_t num_descales;            /* batch · num_descale_heads */
    int32_t seqlen, num_heads, head_dim;
    int32_t heads_per_descale;       /* num_heads / num_descale_heads */
    int32_t num_descale_heads;
    int32_t is_fp16;
    int32_t rotate_t;                /* hadamard: head_dim / 32 (2, 4, 8); 0: no rotation */
    float row_scale;                 /* 1/sqrt(head_dim) with the rotation */
} fa3_quant_params;
_Static_assert(sizeof(fa3_quant_params) == 14 * 8 + 8 * 4, "fa3_quant_params layout");

#define QUANT_THREADS 256     /* 8 warps per block (the kernels' __launch_bounds__) */
#define QUANT_MAX_BLOCKS 4096 /* row kernels: at most 32768 warps, each a run of rows */
#define QUANT_E4M3_MAX 448.0f /* largest finite e4m3: descale = amax / 448 */

/* Everything about args that needs no GPU (fa3_quantize_fp8's checks, in its order): FA3_OK with
   the kernel parameters (rows_per_warp left 0), else the status and a message naming the field
   and its value. */
FA3_INTERNAL fa3_status fa3_quantize_validate(const fa3_quantize_args *args, fa3_quant_params *p);

/* Compiles the quantizer's kernels with NVRTC for compute capability cc (89 or newer) without the
   driver or any cache (no GPU needed), as fa3_reference_build_image does the reference's. */
FA3_TOOLS_API fa3_status fa3_quantize_build_image(int cc, void **image, size_t *size, int *is_ptx);

#endif
