/* Checks of strided device tensors shared by fa3_fwd, the reference and the quantizer (see
   tensor.h). Pure: no GPU, no driver. */
#include <stdint.h>

#include "runtime/tensor.h"

int fa3_tma_stride_ok(int64_t stride, int64_t extent, int esize)
{
    return extent <= 1 ||
           (stride >= 0 && stride < FA3_MAX_TMA_STRIDE / esize && (stride * esize) % 16 == 0);
}

fa3_status fa3_check_tma_stride(const char *name, int64_t stride, int64_t extent, int esize)
{
    if (stride < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "%s %lld is negative", name, (long long)stride);
    if (fa3_tma_stride_ok(stride, extent, esize))
        return FA3_OK;
    if (stride >= FA3_MAX_TMA_STRIDE / esize)
        return fa3_seterr(FA3_ERR_BAD_STRIDE,
                          "%s %lld elements is too large (TMA strides must be below 2^40 bytes)",
                          name, (long long)stride);
    return fa3_seterr(FA3_ERR_BAD_STRIDE,
                      "%s %lld elements = %lld bytes is not a multiple of 16 bytes (TMA)", name,
                      (long long)stride, (long long)(stride * esize));
}

fa3_status fa3_check_aligned(const char *name, const void *p, unsigned align)
{
    if ((uintptr_t)p % align != 0)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "%s %p is not %u-byte aligned", name, p, align);
    return FA3_OK;
}

fa3_status fa3_check_extent(const char *what, int batch, int rows, int heads, int dim, int64_t bs,
                            int64_t rs, int64_t hs)
{
    int64_t a, b, c, sum;
    if (__builtin_mul_overflow((int64_t)(batch - 1), bs, &a) ||
        __builtin_mul_overflow((int64_t)(rows - 1), rs, &b) ||
        __builtin_mul_overflow((int64_t)(heads - 1), hs, &c) ||
        __builtin_add_overflow(a, b, &sum) || __builtin_add_overflow(sum, c, &sum) ||
        __builtin_add_overflow(sum, (int64_t)dim, &sum) || sum > (INT64_MAX >> 1))
        return fa3_seterr(FA3_ERR_BAD_STRIDE,
                          "%s strides (batch %lld, row %lld, head %lld) address beyond 2^62 "
                          "elements", what, (long long)bs, (long long)rs, (long long)hs);
    return FA3_OK;
}

fa3_status fa3_check_disjoint(const fa3_axis axes[3], int dim, const char *dim_name,
                              const char *tensor)
{
    fa3_axis ax[3] = {axes[0], axes[1], axes[2]};
    for (int i = 1; i < 3; i++) /* insertion sort by stride; ties keep the given order */
        for (int j = i; j > 0 && ax[j].stride < ax[j - 1].stride; j--) {
            fa3_axis t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
    int64_t span = dim; /* elements covered by the axes handled so far */
    for (int i = 0; i < 3; i++) {
        if (ax[i].extent <= 1)
            continue;
        if (ax[i].stride < span)
            return fa3_seterr(FA3_ERR_BAD_STRIDE,
                              "%s %lld is smaller than the %lld elements it must step over "
                              "(%s %d): elements of %s would overlap", ax[i].name,
                              (long long)ax[i].stride, (long long)span, dim_name, dim, tensor);
        span = ax[i].stride * (ax[i].extent - 1) + span;
    }
    return FA3_OK;
}

fa3_byte_range fa3_tensor_range(const void *p, int batch, int seqlen, int heads, int dim,
                                int64_t bs, int64_t rs, int64_t hs, int esize)
{
    uint64_t last = (uint64_t)(batch - 1) * (uint64_t)bs + (uint64_t)(seqlen - 1) * (uint64_t)rs +
                    (uint64_t)(heads - 1) * (uint64_t)hs + (uint64_t)(dim - 1);
    return fa3_bytes_range(p, last * (uint64_t)esize + (uint64_t)esize);
}

fa3_byte_range fa3_bytes_range(const void *p, uint64_t n)
{
    fa3_byte_range r = {(uintptr_t)p, (uintptr_t)p + (uintptr_t)(n - 1)};
    return r;
}

int fa3_ranges_meet(fa3_byte_range a, fa3_byte_range b)
{
    return a.lo <= b.hi && b.lo <= a.hi;
}
