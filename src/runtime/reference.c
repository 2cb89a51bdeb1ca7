/*
 * Reference attention for verification: "simple and obviously right".
 *
 * One CUDA C kernel (its source and what it computes: reference_kernel.c) compiled at first use
 * with NVRTC (rtc.c: NVRTC dlopen'd, the per-arch image and per-CUcontext module caches). This
 * file: the argument checks and the launch. Varlen and paged-KV calls take fa3_fwd's field rules
 * (varlen.c), and their device arrays are always read back and checked before the launch.
 *
 * emulate_dtype = 1 reproduces where a flash kernel rounds: the unnormalised p = exp(s − m) is
 * rounded to the dtype (bf16: round-to-nearest-even on the bits; fp16: cvt.rn.f16.f32) before it
 * multiplies V, the row sum uses the unrounded p, and O is rounded to the out_dtype at the end.
 * e4m3 (FlashAttention-3's FP8 path): P is scaled by 2^8 before its rounding to e4m3 (round to
 * nearest even, saturating; the exponent offset that keeps P ≤ 256 in e4m3's range), so the value
 * that multiplies the dequantized V is e4m3(2^8·p) / 2^8; Q, K and V are e4m3 already (nothing to
 * round). What is not emulated: m here is the row's final max, while the fast kernel rounds each
 * key block's P against the running max of the blocks so far and rescales its accumulator, so
 * only the rows' last blocks round exactly alike; the tolerance rule's factor 2.5 on the emulated
 * gap (tools/common/tolerance.h) covers the rest, as in FlashAttention-3's tests.
 *
 * The compiled image and loaded modules live for the process (rtc.h says what that means for
 * applications that destroy CUDA contexts).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"
#include "runtime/reference.h"
#include "runtime/rtc.h"
#include "runtime/runtime.h"

static const int ref_variant_t[REF_NUM_VARIANTS] = {1, 2, 4, 8};
static const char *const ref_functions[REF_NUM_VARIANTS] = {
    "fa3_reference_t1", "fa3_reference_t2", "fa3_reference_t4", "fa3_reference_t8"};
static fa3_rtc_program ref_program = {.what = "reference kernel",
                                      .source = fa3_ref_kernel_src,
                                      .file_name = "fa3_reference.cu",
                                      .functions = ref_functions,
                                      .num_functions = REF_NUM_VARIANTS};

/* ------------------------------------------------------------------ argument checks */

static fa3_status check_stride(const char *name, int64_t s)
{
    if (s < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "reference: %s %lld is negative", name,
                          (long long)s);
    return FA3_OK;
}

static fa3_status check_shape(const char *name, int v)
{
    if (v < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "reference: %s %d must be >= 1", name, v);
    return FA3_OK;
}

static fa3_status check_ptr(const char *name, const void *p, unsigned align)
{
    if (!p)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: %s is NULL", name);
    if ((uintptr_t)p % align != 0)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "reference: %s %p is not %u-byte aligned", name,
                          p, align);
    return FA3_OK;
}

/* Validates everything and fills the kernel parameters (no GPU needed). */
static fa3_status make_params(const fa3_context *ctx, const fa3_config *cfg,
                              const fa3_fwd_args *a, float *o_ref, float *lse_ref,
                              int emulate_dtype, fa3_ref_params *p)
{
    if (!ctx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: ctx is NULL");
    if (!cfg)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: cfg is NULL");
    if (!a)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: args is NULL");
    if (emulate_dtype != 0 && emulate_dtype != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: emulate_dtype %d must be 0 or 1",
                          emulate_dtype);
    fa3_config cfg_in;
    fa3_fwd_args args_in;
    FA3_TRY(fa3_config_in(cfg, &cfg_in));
    FA3_TRY(fa3_fwd_args_in(a, &args_in));
    cfg = &cfg_in;
    a = &args_in;

    /* The config: any head dims up to 256 (a superset of what the fast kernel supports). */
    const int hd = cfg->head_dim;
    const int hdv = cfg->head_dim_v == 0 ? hd : cfg->head_dim_v;
    if (hd < 1 || hd > REF_MAX_HEAD_DIM)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM, "reference: head_dim %d is out of range (1..%d)",
                          hd, REF_MAX_HEAD_DIM);
    if (hdv < 1 || hdv > REF_MAX_HEAD_DIM)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM_V,
                          "reference: head_dim_v %d is out of range (0 = head_dim, or 1..%d)",
                          cfg->head_dim_v, REF_MAX_HEAD_DIM);
    if (cfg->dtype != FA3_DTYPE_BF16 && cfg->dtype != FA3_DTYPE_FP16 &&
        cfg->dtype != FA3_DTYPE_E4M3)
        return fa3_seterr(FA3_ERR_BAD_DTYPE,
                          "reference: dtype %d is not supported (supported: bf16 = 0, fp16 = 1, "
                          "e4m3 = 2)", (int)cfg->dtype);
    const int e4m3 = cfg->dtype == FA3_DTYPE_E4M3;
    FA3_TRY(fa3_check_out_dtype("reference: ", cfg->dtype, cfg->out_dtype));
    const int out_dtype = cfg->out_dtype == FA3_DTYPE_AUTO ? fa3_default_out_dtype(cfg->dtype)
                                                           : (int)cfg->out_dtype;
    if (cfg->mask != FA3_MASK_NONE && cfg->mask != FA3_MASK_CAUSAL && cfg->mask != FA3_MASK_LOCAL)
        return fa3_seterr(FA3_ERR_BAD_MASK, "reference: mask %d is not a valid fa3_mask",
                          (int)cfg->mask);
    if (cfg->softcap != 0 && cfg->softcap != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "reference: softcap flag %d must be 0 or 1",
                          cfg->softcap);

    /* Pointers (16-bit inputs need 2-byte alignment, e4m3 ones 1, the fp32 arrays 4). */
    const unsigned ealign = e4m3 ? 1 : 2;
    FA3_TRY(check_ptr("args->q", a->q, ealign));
    FA3_TRY(check_ptr("args->k", a->k, ealign));
    FA3_TRY(check_ptr("args->v", a->v, ealign));
    FA3_TRY(check_ptr("o_ref", o_ref, 4));
    if (lse_ref)
        FA3_TRY(check_ptr("lse_ref", lse_ref, 4));
    /* Descales as fa3_fwd takes them: none for bf16/fp16; e4m3 NULL (1.0) or aligned arrays,
       whose values fa3_reference_fwd_ex reads back (fa3_fwd_check_descales). */
    if (a->descales_trusted != 0 && a->descales_trusted != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "reference: args->descales_trusted %d must be 0 or 1",
                          a->descales_trusted);
    const struct { const char *name; const float *p; } ds[3] = {
        {"args->descale_q", a->descale_q}, {"args->descale_k", a->descale_k},
        {"args->descale_v", a->descale_v}};
    for (int i = 0; i < 3; i++) {
        if (ds[i].p && !e4m3)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "reference: %s %p must be NULL for dtype %s (descales scale e4m3 "
                              "inputs only)", ds[i].name, (const void *)ds[i].p,
                              cfg->dtype == FA3_DTYPE_FP16 ? "fp16" : "bf16");
        if (ds[i].p)
            FA3_TRY(check_ptr(ds[i].name, ds[i].p, 4));
    }

    /* Shapes, with the varlen / paged fields as fa3_fwd takes them (varlen.c). */
    fa3_fwd_layout L;
    FA3_TRY(fa3_fwd_layout_make(cfg, a, "reference: ", &L));
    FA3_TRY(check_shape("num_heads", a->num_heads));
    FA3_TRY(check_shape("num_heads_k", a->num_heads_k));
    if (a->num_heads % a->num_heads_k != 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "reference: num_heads %d is not a multiple of num_heads_k %d",
                          a->num_heads, a->num_heads_k);

    /* Strides (elements; 0 allowed, e.g. K/V broadcast across heads). */
    FA3_TRY(check_stride("q_batch_stride", a->q_batch_stride));
    FA3_TRY(check_stride("q_row_stride", a->q_row_stride));
    FA3_TRY(check_stride("q_head_stride", a->q_head_stride));
    FA3_TRY(check_stride("k_batch_stride", a->k_batch_stride));
    FA3_TRY(check_stride("k_row_stride", a->k_row_stride));
    FA3_TRY(check_stride("k_head_stride", a->k_head_stride));
    FA3_TRY(check_stride("v_batch_stride", a->v_batch_stride));
    FA3_TRY(check_stride("v_row_stride", a->v_row_stride));
    FA3_TRY(check_stride("v_head_stride", a->v_head_stride));
    FA3_TRY(fa3_check_extent("reference: q", L.q_batch, a->seqlen_q, a->num_heads, hd,
                             a->q_batch_stride, a->q_row_stride, a->q_head_stride));
    FA3_TRY(fa3_check_extent("reference: k", L.k_batch, L.k_rows, a->num_heads_k, hd,
                             a->k_batch_stride, a->k_row_stride, a->k_head_stride));
    FA3_TRY(fa3_check_extent("reference: v", L.k_batch, L.k_rows, a->num_heads_k, hdv,
                             a->v_batch_stride, a->v_row_stride, a->v_head_stride));

    /* Scale and softcap. */
    float scale = a->softmax_scale;
    if (scale == 0.0f)
        scale = (float)(1.0 / sqrt((double)hd));
    else if (!(scale > 0.0f) || !isfinite(scale))
        return fa3_seterr(FA3_ERR_BAD_SCALE,
                          "reference: softmax_scale %g must be positive and finite (0 = "
                          "1/sqrt(head_dim))", (double)a->softmax_scale);
    if (cfg->softcap) {
        if (!(a->softcap > 0.0f) || !isfinite(a->softcap))
            return fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                              "reference: softcap %g must be positive and finite when the config "
                              "has softcap", (double)a->softcap);
    } else if (a->softcap != 0.0f) {
        return fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                          "reference: softcap %g given but the config has no softcap (must be 0)",
                          (double)a->softcap);
    }

    /* Windows, as fa3_fwd checks them: only the local mask has any. */
    if (cfg->mask == FA3_MASK_LOCAL) {
        if (a->window_size_left < -1 || a->window_size_right < -1)
            return fa3_seterr(FA3_ERR_BAD_WINDOW,
                              "reference: args->window_size_%s %d is invalid (-1 = unlimited, "
                              "else >= 0)", a->window_size_left < -1 ? "left" : "right",
                              a->window_size_left < -1 ? a->window_size_left
                                                       : a->window_size_right);
    } else if (a->window_size_left != -1 || a->window_size_right != -1) {
        return fa3_seterr(FA3_ERR_BAD_WINDOW,
                          "reference: args->window_size_left/right %d/%d must be -1/-1 for mask "
                          "%s (only FA3_MASK_LOCAL uses windows)", a->window_size_left,
                          a->window_size_right, cfg->mask == FA3_MASK_CAUSAL ? "causal" : "none");
    }

    *p = (fa3_ref_params){0};
    p->q = (uint64_t)(uintptr_t)a->q;
    p->k = (uint64_t)(uintptr_t)a->k;
    p->v = (uint64_t)(uintptr_t)a->v;
    p->o = (uint64_t)(uintptr_t)o_ref;
    p->lse = (uint64_t)(uintptr_t)lse_ref;
    p->q_bs = a->q_batch_stride;
    p->q_rs = a->q_row_stride;
    p->q_hs = a->q_head_stride;
    p->k_bs = a->k_batch_stride;
    p->k_rs = a->k_row_stride;
    p->k_hs = a->k_head_stride;
    p->v_bs = a->v_batch_stride;
    p->v_rs = a->v_row_stride;
    p->v_hs = a->v_head_stride;
    p->total_rows = (int64_t)L.q_batch * a->num_heads * a->seqlen_q; /* varlen: packed rows */
    p->cu_q = (uint64_t)(uintptr_t)a->cu_seqlens_q;
    p->cu_k = (uint64_t)(uintptr_t)a->cu_seqlens_k;
    p->seqused_k = (uint64_t)(uintptr_t)a->seqused_k;
    p->page_table = (uint64_t)(uintptr_t)a->page_table;
    p->page_table_stride = a->page_table_stride;
    p->varlen = L.varlen;
    p->paged = L.paged;
    p->page_size = a->page_size;
    p->batch = a->batch;
    p->seqlen_q = a->seqlen_q;
    p->seqlen_k = a->seqlen_k;
    p->num_heads = a->num_heads;
    p->heads_per_kv = a->num_heads / a->num_heads_k;
    p->head_dim = hd;
    p->head_dim_v = hdv;
    p->mask = (int32_t)cfg->mask;
    /* -1 = unlimited on that side; the kernel widens to 64 bits before adding a window. */
    p->window_left = cfg->mask == FA3_MASK_LOCAL ? a->window_size_left : -1;
    p->window_right = cfg->mask == FA3_MASK_LOCAL ? a->window_size_right : -1;
    p->descale_q = (uint64_t)(uintptr_t)a->descale_q;
    p->descale_k = (uint64_t)(uintptr_t)a->descale_k;
    p->descale_v = (uint64_t)(uintptr_t)a->descale_v;
    p->dtype = (int32_t)cfg->dtype;
    p->out_fp16 = out_dtype == FA3_DTYPE_FP16;
    p->emulate = emulate_dtype;
    p->use_softcap = cfg->softcap;
    p->scale = scale;
    p->softcap = cfg->softcap ? a->softcap : 1.0f;
    return FA3_OK;
}

/* ------------------------------------------------------------------ entry points */

fa3_status fa3_reference_fwd_ex(fa3_context *ctx, const fa3_config *cfg, const fa3_fwd_args *args,
                                float *o_ref, float *lse_ref, int emulate_dtype, void *stream)
{
    fa3_ref_params p;
    FA3_TRY(make_params(ctx, cfg, args, o_ref, lse_ref, emulate_dtype, &p));

    /* The descale values, as fa3_fwd reads them; the varlen / paged arrays always (the kernel
       below trusts them: a bad offset or page would read out of bounds). */
    if (p.dtype == FA3_DTYPE_E4M3 || p.varlen || p.paged || p.seqused_k) {
        const fa3_driver *d0 = NULL;
        FA3_TRY(fa3_driver_get(&d0));
        FA3_TRY(fa3_driver_ensure_context(NULL, NULL));
        fa3_config c;
        fa3_fwd_args a;
        FA3_TRY(fa3_config_in(cfg, &c));
        FA3_TRY(fa3_fwd_args_in(args, &a));
        FA3_TRY(fa3_fwd_check_descales(&c, &a, stream));
        FA3_TRY(fa3_fwd_check_varlen_arrays(&c, &a, "reference: ", stream));
    }
    int widest = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
    int variant = 0;
    while (32 * ref_variant_t[variant] < widest)
        ++variant; /* widest ≤ 256 = 32·8, so this stops at the last variant at most */
    const fa3_driver *drv = NULL;
    CUfunction fns[REF_NUM_VARIANTS];
    FA3_TRY(fa3_rtc_functions(&ref_program, &drv, fns));
    CUfunction fn = fns[variant];

    /* One warp per row, grid-stride over rows: any row count fits in the grid limit. */
    const int64_t warps_per_block = REF_THREADS / 32;
    int64_t blocks = (p.total_rows + warps_per_block - 1) / warps_per_block;
    if (blocks > (1 << 20))
        blocks = 1 << 20;
    void *kparams[] = {&p};
    CUstream s = (CUstream)stream;
    FA3_TRY(FA3_CU(drv, cuLaunchKernel(fn, (unsigned)blocks, 1, 1, REF_THREADS, 1, 1, 0, s,
                                       kparams, NULL)));
    return FA3_CU(drv, cuStreamSynchronize(s));
}

fa3_status fa3_reference_fwd(fa3_context *ctx, const fa3_config *cfg, const fa3_fwd_args *args,
                             float *o_ref, float *lse_ref, void *stream)
{
    return fa3_reference_fwd_ex(ctx, cfg, args, o_ref, lse_ref, 0, stream);
}

fa3_status fa3_reference_build_image(int cc, void **image, size_t *size, int *is_ptx)
{
    return fa3_rtc_build_image(&ref_program, cc, image, size, is_ptx);
}
