/* Checks of strided (batch, seqlen, heads, dim) device tensors shared by fa3_fwd's validation
   (fwd_args.c), the reference (reference.c) and the quantizer (quantize.c): pointer alignment,
   TMA's stride rule, the addressable extent, writes that would collide, byte ranges that meet.
   Each failure names the tensor or field it is given. tensor.c. */
#ifndef FA3JIT_TENSOR_H
#define FA3JIT_TENSOR_H

#include <stdint.h>

#include "common.h"

/* TMA's limit on a byte stride (exclusive). */
#define FA3_MAX_TMA_STRIDE ((int64_t)1 << 40)

/* TMA's rule for an element stride: any value when the axis has one element (never used: the
   tensor map gets a substitute), else non-negative, × element size esize a multiple of 16 bytes
   and below 2^40 bytes. */
FA3_INTERNAL int fa3_tma_stride_ok(int64_t stride, int64_t extent, int esize);

/* fa3_tma_stride_ok as a check: FA3_ERR_BAD_STRIDE naming name and the stride (negative, too
   large, or not a multiple of 16 bytes). */
FA3_INTERNAL fa3_status fa3_check_tma_stride(const char *name, int64_t stride, int64_t extent,
                                             int esize);

/* FA3_ERR_BAD_ALIGNMENT naming name and p unless p is a multiple of align (NULL passes). */
FA3_INTERNAL fa3_status fa3_check_aligned(const char *name, const void *p, unsigned align);

/* The largest element offset of a (batch, rows, heads, dim) view, plus dim, must stay below
   2^62: FA3_ERR_BAD_STRIDE "<what> strides (...) address beyond 2^62 elements" otherwise.
   Strides non-negative (checked before). */
FA3_INTERNAL fa3_status fa3_check_extent(const char *what, int batch, int rows, int heads, int dim,
                                         int64_t bs, int64_t rs, int64_t hs);

/* One axis of a written tensor for fa3_check_disjoint. */
typedef struct fa3_axis {
    const char *name; /* the stride's field, e.g. "args->o_head_stride" */
    int64_t stride;   /* elements, non-negative */
    int64_t extent;
} fa3_axis;

/* A written tensor's elements must not share an address (a race, not a broadcast): with its three
   axes ordered by stride, each stride must step past everything the smaller axes span, starting
   from the dim contiguous elements of a row; axes of extent 1 are never stepped. Else
   FA3_ERR_BAD_STRIDE naming the axis, "elements of <tensor> would overlap" (dim_name: the field
   that gave dim, e.g. "head_dim_v"). */
FA3_INTERNAL fa3_status fa3_check_disjoint(const fa3_axis axes[3], int dim, const char *dim_name,
                                           const char *tensor);

/* [lo, hi] byte range (inclusive) a strided tensor (batch, seqlen, heads, dim) of esize-byte
   elements can touch (shape ≥ 1, strides non-negative). */
typedef struct fa3_byte_range {
    uintptr_t lo, hi;
} fa3_byte_range;
FA3_INTERNAL fa3_byte_range fa3_tensor_range(const void *p, int batch, int seqlen, int heads,
                                             int dim, int64_t bs, int64_t rs, int64_t hs,
                                             int esize);
/* n bytes at p (n ≥ 1). */
FA3_INTERNAL fa3_byte_range fa3_bytes_range(const void *p, uint64_t n);
FA3_INTERNAL int fa3_ranges_meet(fa3_byte_range a, fa3_byte_range b);

#endif
