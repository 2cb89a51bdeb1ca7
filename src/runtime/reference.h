/* Internals of the reference attention: its kernel's source and parameter block
   (reference_kernel.c, the CUDA C's RefParams field for field) and a hook for tests
   (reference.c). */
#ifndef FA3JIT_REFERENCE_H
#define FA3JIT_REFERENCE_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"

/* The CUDA C source of the reference kernels fa3_reference_t1/t2/t4/t8. */
FA3_INTERNAL extern const char fa3_ref_kernel_src[];

/* Host image of the kernel's RefParams (same field order and types; all 8-byte fields first). */
typedef struct fa3_ref_params {
    uint64_t q, k, v, o, lse;
    uint64_t descale_q, descale_k, descale_v; /* e4m3: fp32 (batch, num_heads_k), 0 = 1.0 */
    int64_t q_bs, q_rs, q_hs;
    int64_t k_bs, k_rs, k_hs;
    int64_t v_bs, v_rs, v_hs;
    int64_t total_rows;
    /* varlen / paged KV (fa3jit.h): int32 device arrays, 0 = not given */
    uint64_t cu_q, cu_k, seqused_k, page_table;
    int64_t page_table_stride;
    int32_t batch, seqlen_q, seqlen_k, num_heads, heads_per_kv;
    int32_t head_dim, head_dim_v;
    int32_t mask;
    int32_t window_left, window_right;
    int32_t dtype;    /* of Q/K/V: 0 bf16, 1 fp16, 2 e4m3 */
    int32_t out_fp16; /* emulation: O rounded to fp16 (1) or bf16 (0) */
    int32_t emulate, use_softcap;
    int32_t varlen, paged, page_size, pad_;
    float scale, softcap;
} fa3_ref_params;
_Static_assert(sizeof(fa3_ref_params) == 23 * 8 + 20 * 4, "fa3_ref_params layout");

#define REF_THREADS 128  /* 4 warps per block (the kernel's __launch_bounds__) */
#define REF_MAX_HEAD_DIM 256
#define REF_NUM_VARIANTS 4 /* fa3_reference_t1/t2/t4/t8: 32·T ≥ max(head_dim, head_dim_v) */

/*
 * Compiles the reference kernel's CUDA C source with NVRTC for compute capability cc (90 for
 * sm_90) without touching the driver or any cache: needs no GPU. *image receives a malloc'd
 * cubin (*is_ptx = 0), or PTX text if this NVRTC cannot emit cubins (*is_ptx = 1); free() it.
 * Errors: FA3_ERR_NO_NVRTC, FA3_ERR_COMPILE (NVRTC log in the message), FA3_ERR_OUT_OF_MEMORY.
 */
FA3_TOOLS_API fa3_status fa3_reference_build_image(int cc, void **image, size_t *size, int *is_ptx);

#endif
