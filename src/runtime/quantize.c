/*
 * The FP8 quantizer (fa3_quantize_fp8) and its random signs (fa3_hadamard_signs): the argument
 * struct's init and size rules, the checks (every one before the driver or NVRTC is touched, each
 * naming the field and its value), and the launches of quantize_kernel.c's kernels on the
 * caller's stream: zero the descale array, pass 1 (amax per group), amax -> descale, pass 2
 * (e4m3 out). The kernels are compiled at the first call through NVRTC (rtc.c: the image per
 * compute capability, the module per CUcontext, for the life of the process, as the reference's).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/quantize.h"
#include "runtime/rtc.h"
#include "runtime/tensor.h"

/* The kernels, in the order of quant_functions. */
enum { FN_AMAX = 0, FN_STORE = 4, FN_DESCALE = 8, FN_COUNT = 9 };
static const char *const quant_functions[FN_COUNT] = {
    "fa3_quant_amax_t0",  "fa3_quant_amax_t2",  "fa3_quant_amax_t4",  "fa3_quant_amax_t8",
    "fa3_quant_store_t0", "fa3_quant_store_t2", "fa3_quant_store_t4", "fa3_quant_store_t8",
    "fa3_quant_descale"};
static fa3_rtc_program quant_program = {.what = "quantizer kernel",
                                        .source = fa3_quant_kernel_src,
                                        .file_name = "fa3_quantize.cu",
                                        .functions = quant_functions,
                                        .num_functions = FN_COUNT,
                                        .min_cc = 89}; /* cvt ... e4m3x2: sm_89 and newer */

static const fa3_struct_kind args_kind = {"fa3_quantize_args", "fa3_quantize_args_init()",
                                          sizeof(fa3_quantize_args), NULL, 0};
static const fa3_quantize_args args_defaults = {.struct_size = sizeof(fa3_quantize_args)};

void fa3_quantize_args_init_sized(fa3_quantize_args *args, size_t struct_size)
{
    if (args)
        fa3_struct_init(&args_kind, args, struct_size, &args_defaults);
}

/* ------------------------------------------------------------------ the signs */

/* One step of splitmix64 from the state z (the kernel's splitmix64 is the same function). */
static uint64_t splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

fa3_status fa3_hadamard_signs(uint64_t seed, int head_dim, float *out)
{
    if (!out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_hadamard_signs: out is NULL");
    if (head_dim < 1)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM, "fa3_hadamard_signs: head_dim %d must be at "
                          "least 1", head_dim);
    for (int i = 0; i < head_dim; i++)
        out[i] = (splitmix64(seed + (uint64_t)i) & 1u) ? -1.0f : 1.0f;
    return FA3_OK;
}

/* ------------------------------------------------------------------ argument checks */

static fa3_status check_shape(const char *name, int v)
{
    if (v < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "args->%s %d must be at least 1", name, v);
    return FA3_OK;
}

static fa3_status check_x_stride(const char *name, int64_t s)
{
    if (s < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "args->%s %lld is negative", name, (long long)s);
    return FA3_OK;
}

/* The written arrays (out, descale) must not overlap anything else the call reads or writes:
   byte ranges, a conservative test. */
static fa3_status check_no_alias(const fa3_quantize_args *a, int num_descale_heads)
{
    fa3_byte_range x = fa3_tensor_range(a->x, a->batch, a->seqlen, a->num_heads, a->head_dim,
                                        a->x_batch_stride, a->x_row_stride, a->x_head_stride, 2);
    fa3_byte_range o = fa3_tensor_range(a->out, a->batch, a->seqlen, a->num_heads, a->head_dim,
                                        a->out_batch_stride, a->out_row_stride,
                                        a->out_head_stride, 1);
    fa3_byte_range d = fa3_bytes_range(a->descale,
                                       4 * (uint64_t)a->batch * (uint64_t)num_descale_heads);
    if (fa3_ranges_meet(o, x))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->out (bytes %p..%p) overlaps args->x (bytes %p..%p): the output "
                          "would be written while x is still read", (void *)o.lo, (void *)o.hi,
                          (void *)x.lo, (void *)x.hi);
    if (fa3_ranges_meet(o, d) || fa3_ranges_meet(d, x))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->descale (%d x %d floats at %p) overlaps args->%s", a->batch,
                          num_descale_heads, (const void *)a->descale,
                          fa3_ranges_meet(o, d) ? "out" : "x");
    if (a->hadamard && a->signs) {
        fa3_byte_range s = fa3_bytes_range(a->signs, 4 * (uint64_t)a->head_dim);
        if (fa3_ranges_meet(s, o) || fa3_ranges_meet(s, d))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->signs (%d floats at %p) overlaps args->%s", a->head_dim,
                              (const void *)a->signs, fa3_ranges_meet(s, o) ? "out" : "descale");
    }
    return FA3_OK;
}

fa3_status fa3_quantize_validate(const fa3_quantize_args *args, fa3_quant_params *p)
{
    if (!args)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args is NULL");
    fa3_quantize_args in;
    FA3_TRY(fa3_struct_in(&args_kind, args, &in, &args_defaults));
    const fa3_quantize_args *a = &in;

    if (a->dtype != FA3_DTYPE_BF16 && a->dtype != FA3_DTYPE_FP16)
        return fa3_seterr(FA3_ERR_BAD_DTYPE,
                          "args->dtype %d is not supported: x must be bf16 (%d) or fp16 (%d)",
                          (int)a->dtype, (int)FA3_DTYPE_BF16, (int)FA3_DTYPE_FP16);
    if (!a->x || !a->out || !a->descale)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->%s is NULL",
                          !a->x ? "x" : !a->out ? "out" : "descale");

    /* shapes */
    FA3_TRY(check_shape("batch", a->batch));
    FA3_TRY(check_shape("seqlen", a->seqlen));
    FA3_TRY(check_shape("num_heads", a->num_heads));
    if (a->head_dim < 1)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM, "args->head_dim %d must be at least 1",
                          a->head_dim);
    int ndh = a->num_descale_heads;
    if (ndh < 0 || (ndh > 0 && a->num_heads % ndh != 0))
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->num_descale_heads %d must divide args->num_heads %d (0 = "
                          "num_heads)", ndh, a->num_heads);
    if (ndh == 0)
        ndh = a->num_heads;
    int64_t rows, elems;
    if (__builtin_mul_overflow((int64_t)a->batch * a->seqlen, (int64_t)a->num_heads, &rows) ||
        __builtin_mul_overflow(rows, (int64_t)a->head_dim, &elems) || elems > INT64_MAX >> 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "batch %d x seqlen %d x num_heads %d x head_dim %d elements exceed "
                          "2^62", a->batch, a->seqlen, a->num_heads, a->head_dim);

    /* the rotation */
    if (a->hadamard != 0 && a->hadamard != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->hadamard %d must be 0 or 1",
                          a->hadamard);
    if (a->hadamard && a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM,
                          "args->head_dim %d cannot be rotated: hadamard = 1 needs a head_dim "
                          "of 64, 128 or 256", a->head_dim);

    /* pointers */
    FA3_TRY(fa3_check_aligned("args->x", a->x, 2));
    FA3_TRY(fa3_check_aligned("args->out", a->out, 16));
    FA3_TRY(fa3_check_aligned("args->descale", a->descale, 4));
    if (a->hadamard)
        FA3_TRY(fa3_check_aligned("args->signs", a->signs, 4));

    /* strides: x any non-negative ones; out TMA's (fa3_fwd reads it), and no element twice */
    FA3_TRY(check_x_stride("x_batch_stride", a->x_batch_stride));
    FA3_TRY(check_x_stride("x_row_stride", a->x_row_stride));
    FA3_TRY(check_x_stride("x_head_stride", a->x_head_stride));
    FA3_TRY(fa3_check_tma_stride("args->out_batch_stride", a->out_batch_stride, a->batch, 1));
    FA3_TRY(fa3_check_tma_stride("args->out_row_stride", a->out_row_stride, a->seqlen, 1));
    FA3_TRY(fa3_check_tma_stride("args->out_head_stride", a->out_head_stride, a->num_heads, 1));
    FA3_TRY(fa3_check_extent("args->x", a->batch, a->seqlen, a->num_heads, a->head_dim,
                             a->x_batch_stride, a->x_row_stride, a->x_head_stride));
    FA3_TRY(fa3_check_extent("args->out", a->batch, a->seqlen, a->num_heads, a->head_dim,
                             a->out_batch_stride, a->out_row_stride, a->out_head_stride));
    const fa3_axis out_axes[3] = {
        {"args->out_head_stride", a->out_head_stride, a->num_heads},
        {"args->out_row_stride", a->out_row_stride, a->seqlen},
        {"args->out_batch_stride", a->out_batch_stride, a->batch},
    };
    FA3_TRY(fa3_check_disjoint(out_axes, a->head_dim, "head_dim", "out"));
    FA3_TRY(check_no_alias(a, ndh));

    *p = (fa3_quant_params){0};
    p->x = (uint64_t)(uintptr_t)a->x;
    p->out = (uint64_t)(uintptr_t)a->out;
    p->descale = (uint64_t)(uintptr_t)a->descale;
    p->signs = a->hadamard ? (uint64_t)(uintptr_t)a->signs : 0;
    p->seed = a->seed;
    p->x_bs = a->x_batch_stride;
    p->x_rs = a->x_row_stride;
    p->x_hs = a->x_head_stride;
    p->o_bs = a->out_batch_stride;
    p->o_rs = a->out_row_stride;
    p->o_hs = a->out_head_stride;
    p->total_rows = rows;
    p->num_descales = (int64_t)a->batch * ndh;
    p->seqlen = a->seqlen;
    p->num_heads = a->num_heads;
    p->head_dim = a->head_dim;
    p->heads_per_descale = a->num_heads / ndh;
    p->num_descale_heads = ndh;
    p->is_fp16 = a->dtype == FA3_DTYPE_FP16;
    p->rotate_t = a->hadamard ? a->head_dim / 32 : 0;
    p->row_scale = a->hadamard ? (float)(1.0 / sqrt((double)a->head_dim)) : 1.0f;
    return FA3_OK;
}

/* ------------------------------------------------------------------ entry points */

static fa3_status launch(const fa3_driver *drv, CUfunction fn, int64_t blocks, CUstream s,
                         fa3_quant_params *p)
{
    void *kparams[] = {p};
    return FA3_CU(drv, cuLaunchKernel(fn, (unsigned)blocks, 1, 1, QUANT_THREADS, 1, 1, 0, s,
                                      kparams, NULL));
}

fa3_status fa3_quantize_fp8(fa3_context *ctx, const fa3_quantize_args *args, void *stream)
{
    if (!ctx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "ctx is NULL");
    fa3_quant_params p;
    FA3_TRY(fa3_quantize_validate(args, &p));

    const fa3_driver *drv = NULL;
    CUfunction fn[FN_COUNT];
    FA3_TRY(fa3_rtc_functions(&quant_program, &drv, fn));
    const int variant = p.rotate_t == 0 ? 0 : p.rotate_t == 2 ? 1 : p.rotate_t == 4 ? 2 : 3;

    /* Row kernels: a warp per run of rows_per_warp rows, at most QUANT_MAX_BLOCKS blocks. */
    const int64_t wpb = QUANT_THREADS / 32;
    int64_t blocks = (p.total_rows + wpb - 1) / wpb;
    if (blocks > QUANT_MAX_BLOCKS)
        blocks = QUANT_MAX_BLOCKS;
    p.rows_per_warp = (p.total_rows + blocks * wpb - 1) / (blocks * wpb);
    blocks = ((p.total_rows + p.rows_per_warp - 1) / p.rows_per_warp + wpb - 1) / wpb;
    int64_t descale_blocks = (p.num_descales + QUANT_THREADS - 1) / QUANT_THREADS;
    if (descale_blocks > QUANT_MAX_BLOCKS)
        descale_blocks = QUANT_MAX_BLOCKS;

    CUstream s = (CUstream)stream;
    FA3_TRY(FA3_CU(drv, cuMemsetD32Async((CUdeviceptr)p.descale, 0, (size_t)p.num_descales, s)));
    FA3_TRY(launch(drv, fn[FN_AMAX + variant], blocks, s, &p));
    FA3_TRY(launch(drv, fn[FN_DESCALE], descale_blocks, s, &p));
    return launch(drv, fn[FN_STORE + variant], blocks, s, &p);
}

fa3_status fa3_quantize_build_image(int cc, void **image, size_t *size, int *is_ptx)
{
    if (cc < quant_program.min_cc)
        return fa3_seterr(FA3_ERR_UNSUPPORTED, "%s: compute capability %d is older than %d",
                          quant_program.what, cc, quant_program.min_cc);
    return fa3_rtc_build_image(&quant_program, cc, image, size, is_ptx);
}
