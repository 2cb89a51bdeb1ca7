/*
 * Reference attention for verification: "simple and obviously right".
 *
 * One CUDA C kernel (its source and what it computes: reference_kernel.c) compiled at first use
 * with NVRTC, which is dlopen'd ("libnvrtc.so.13", then "libnvrtc.so", then the toolkit's lib64)
 * so that the library has no link-time dependency on it. This file: NVRTC, the per-arch image
 * and per-CUcontext module caches, the argument checks and the launch.
 *
 * emulate_dtype = 1 reproduces where a flash kernel rounds: the unnormalised p = exp(s − m) is
 * rounded to the dtype (bf16: round-to-nearest-even on the bits; fp16: cvt.rn.f16.f32) before it
 * multiplies V, the row sum uses the unrounded p, and O is rounded to the out_dtype at the end.
 * e4m3 (FlashAttention-3's FP8 path): P is scaled by 2^8 before its rounding to e4m3 (round to
 * nearest even, saturating; the exponent offset that keeps P ≤ 256 in e4m3's range), so the value
 * that multiplies the dequantized V is e4m3(2^8·p) / 2^8; Q, K and V are e4m3 already (nothing to
 * round). What is not emulated: m here is the row's final max, while the fast kernel rounds each
 * key block's P against the running max of the blocks so far and rescales its accumulator, so
 * only the rows' last blocks round exactly alike; the tolerance rule's factor 2 on the emulated
 * gap (tools/common/tolerance.h) covers the rest, as in FlashAttention-3's tests.
 *
 * The compiled image is kept per compute capability for the life of the process, the loaded
 * module per CUcontext (a process-wide table under a mutex). Modules are never unloaded; a
 * CUcontext destroyed by the application and a new one created at the same address would reuse a
 * stale entry, so applications that destroy contexts should not call the reference afterwards.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "fa3jit_build_config.h"
#include "runtime/driver.h"
#include "runtime/reference.h"
#include "runtime/runtime.h"

static const int ref_variant_t[REF_NUM_VARIANTS] = {1, 2, 4, 8};

/* ------------------------------------------------------------------ NVRTC, dlopen'd */

typedef struct nvrtc_api {
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *); /* NULL before NVRTC 11.1 */
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
} nvrtc_api;

static pthread_mutex_t ref_lock = PTHREAD_MUTEX_INITIALIZER;
static int nvrtc_tried;          /* under ref_lock */
static nvrtc_api nvrtc;          /* valid when nvrtc_ok */
static int nvrtc_ok;
static char nvrtc_why[512];      /* why loading failed (repeated in every later error) */

#define LOAD_SYM(h, field, name, required)                                                  \
    do {                                                                                    \
        void *sym_ = dlsym((h), (name));                                                    \
        memcpy(&nvrtc.field, &sym_, sizeof sym_);                                           \
        if (!sym_ && (required)) {                                                          \
            snprintf(nvrtc_why, sizeof nvrtc_why, "%s has no symbol %s", lib_used, (name)); \
            return 0;                                                                       \
        }                                                                                   \
    } while (0)

/* Called with ref_lock held. Returns 1 if NVRTC is usable. */
static int nvrtc_load_locked(void)
{
    if (nvrtc_tried)
        return nvrtc_ok;
    nvrtc_tried = 1;
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so",
                                        FA3_CUDA_DIR "/lib64/libnvrtc.so.13",
                                        FA3_CUDA_DIR "/lib64/libnvrtc.so"};
    void *h = NULL;
    const char *lib_used = NULL;
    char first_err[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; ++i) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            lib_used = names[i];
        } else if (!first_err[0]) {
            const char *e = dlerror();
            snprintf(first_err, sizeof first_err, "%s", e ? e : names[i]);
        }
    }
    if (!h) {
        snprintf(nvrtc_why, sizeof nvrtc_why,
                 "NVRTC could not be loaded (tried libnvrtc.so.13, libnvrtc.so and %s/lib64): %s; "
                 "install the CUDA NVRTC runtime or add its folder to LD_LIBRARY_PATH",
                 FA3_CUDA_DIR, first_err);
        return 0;
    }
    LOAD_SYM(h, GetErrorString, "nvrtcGetErrorString", 1);
    LOAD_SYM(h, Version, "nvrtcVersion", 1);
    LOAD_SYM(h, CreateProgram, "nvrtcCreateProgram", 1);
    LOAD_SYM(h, DestroyProgram, "nvrtcDestroyProgram", 1);
    LOAD_SYM(h, CompileProgram, "nvrtcCompileProgram", 1);
    LOAD_SYM(h, GetProgramLogSize, "nvrtcGetProgramLogSize", 1);
    LOAD_SYM(h, GetProgramLog, "nvrtcGetProgramLog", 1);
    LOAD_SYM(h, GetPTXSize, "nvrtcGetPTXSize", 1);
    LOAD_SYM(h, GetPTX, "nvrtcGetPTX", 1);
    LOAD_SYM(h, GetCUBINSize, "nvrtcGetCUBINSize", 0);
    LOAD_SYM(h, GetCUBIN, "nvrtcGetCUBIN", 0);
    if (!nvrtc.GetCUBINSize || !nvrtc.GetCUBIN)
        nvrtc.GetCUBINSize = NULL, nvrtc.GetCUBIN = NULL;
    nvrtc_ok = 1; /* the handle stays open for the life of the process */
    return 1;
}

static fa3_status nvrtc_fail(nvrtcResult r, const char *call, const char *arch_opt)
{
    return fa3_seterr(r == NVRTC_ERROR_OUT_OF_MEMORY ? FA3_ERR_OUT_OF_MEMORY : FA3_ERR_COMPILE,
                      "reference kernel: %s (%s) failed: %s (%d)", call, arch_opt,
                      nvrtc.GetErrorString(r), (int)r);
}

/* Compiles the reference source for compute capability cc (e.g. 90) into a cubin (or PTX if
   this NVRTC cannot make cubins). Called with ref_lock held. */
static fa3_status nvrtc_compile_locked(int cc, void **image, size_t *size, int *is_ptx)
{
    char arch_opt[64];
    int ptx = nvrtc.GetCUBIN == NULL;
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", cc);
    const char *opts[] = {arch_opt, "--std=c++17"};

    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtc.CreateProgram(&prog, fa3_ref_kernel_src, "fa3_reference.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(r, "nvrtcCreateProgram", arch_opt);
    fa3_status st = FA3_OK;
    r = nvrtc.CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(r, "nvrtcCompileProgram", arch_opt);
        size_t log_size = 0;
        if (nvrtc.GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
            char *log = malloc(log_size);
            if (log && nvrtc.GetProgramLog(prog, log) == NVRTC_SUCCESS)
                fa3_appenderr("\nNVRTC log:\n%s", log);
            free(log);
        }
        nvrtc.DestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    r = ptx ? nvrtc.GetPTXSize(prog, &n) : nvrtc.GetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(r, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", arch_opt);
    } else if (n == 0) {
        st = fa3_seterr(FA3_ERR_COMPILE, "reference kernel: NVRTC returned an empty %s (%s)",
                        ptx ? "PTX" : "cubin", arch_opt);
    } else {
        char *buf = malloc(n);
        if (!buf) {
            st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "reference kernel: out of memory (%zu bytes)",
                            n);
        } else {
            r = ptx ? nvrtc.GetPTX(prog, buf) : nvrtc.GetCUBIN(prog, buf);
            if (r != NVRTC_SUCCESS) {
                free(buf);
                st = nvrtc_fail(r, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", arch_opt);
            } else {
                *image = buf;
                *size = n;
                *is_ptx = ptx;
            }
        }
    }
    r = nvrtc.DestroyProgram(&prog);
    if (st == FA3_OK && r != NVRTC_SUCCESS) {
        free(*image);
        *image = NULL;
        st = nvrtc_fail(r, "nvrtcDestroyProgram", arch_opt);
    }
    return st;
}

/* ------------------------------------------------------------------ process-wide caches */

typedef struct ref_image {
    int cc;
    int is_ptx;
    void *data;
    size_t size;
} ref_image;

typedef struct ref_module {
    CUcontext ctx;
    CUmodule module;
    CUfunction fn[REF_NUM_VARIANTS];
} ref_module;

static ref_image *ref_images; /* under ref_lock */
static int ref_num_images;
static ref_module *ref_modules; /* under ref_lock */
static int ref_num_modules;

/* The image for compute capability cc, compiling it on first use. ref_lock held. */
static fa3_status image_for_cc_locked(int cc, const ref_image **out)
{
    for (int i = 0; i < ref_num_images; ++i) {
        if (ref_images[i].cc == cc) {
            *out = &ref_images[i];
            return FA3_OK;
        }
    }
    if (!nvrtc_load_locked())
        return fa3_seterr(FA3_ERR_NO_NVRTC, "reference kernel: %s", nvrtc_why);
    ref_image *grown = realloc(ref_images, (size_t)(ref_num_images + 1) * sizeof *grown);
    if (!grown)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "reference kernel: out of memory");
    ref_images = grown;
    ref_image img = {.cc = cc};
    FA3_TRY(nvrtc_compile_locked(cc, &img.data, &img.size, &img.is_ptx));
    ref_images[ref_num_images] = img;
    *out = &ref_images[ref_num_images++];
    return FA3_OK;
}

/* Loads the image into the current context cuctx (device dev). ref_lock held. */
static fa3_status module_for_context_locked(const fa3_driver *drv, CUcontext cuctx, CUdevice dev,
                                            const ref_module **out)
{
    for (int i = 0; i < ref_num_modules; ++i) {
        if (ref_modules[i].ctx == cuctx) {
            *out = &ref_modules[i];
            return FA3_OK;
        }
    }
    int major = 0, minor = 0;
    FA3_TRY(FA3_CU(drv, cuDeviceGetAttribute(&major,
                                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)));
    FA3_TRY(FA3_CU(drv, cuDeviceGetAttribute(&minor,
                                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)));
    const ref_image *img = NULL;
    FA3_TRY(image_for_cc_locked(major * 10 + minor, &img));

    ref_module *grown = realloc(ref_modules, (size_t)(ref_num_modules + 1) * sizeof *grown);
    if (!grown)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "reference kernel: out of memory");
    ref_modules = grown;
    ref_module m = {.ctx = cuctx};
    if (img->is_ptx) {
        char log[4096] = "";
        CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
        void *val[2] = {log, (void *)(uintptr_t)sizeof log};
        fa3_status st = FA3_CU(drv, cuModuleLoadDataEx(&m.module, img->data, 2, opt, val));
        if (st != FA3_OK) {
            if (log[0])
                fa3_appenderr("\nJIT log:\n%s", log);
            return st;
        }
    } else {
        FA3_TRY(FA3_CU(drv, cuModuleLoadData(&m.module, img->data)));
    }
    for (int v = 0; v < REF_NUM_VARIANTS; ++v) {
        char name[64];
        snprintf(name, sizeof name, "fa3_reference_t%d", ref_variant_t[v]);
        fa3_status st = FA3_CU(drv, cuModuleGetFunction(&m.fn[v], m.module, name));
        if (st != FA3_OK) {
            drv->cuModuleUnload(m.module); /* already failing: keep the first error */
            return st;
        }
    }
    ref_modules[ref_num_modules] = m;
    *out = &ref_modules[ref_num_modules++];
    return FA3_OK;
}

/* ------------------------------------------------------------------ argument checks */

/* Largest element offset a (batch, rows, heads, dim) view can address must fit in int64. */
static fa3_status check_extent(const char *t, int batch, int rows, int heads, int dim,
                               int64_t bs, int64_t rs, int64_t hs)
{
    int64_t a, b, c, sum;
    if (__builtin_mul_overflow((int64_t)(batch - 1), bs, &a) ||
        __builtin_mul_overflow((int64_t)(rows - 1), rs, &b) ||
        __builtin_mul_overflow((int64_t)(heads - 1), hs, &c) ||
        __builtin_add_overflow(a, b, &sum) || __builtin_add_overflow(sum, c, &sum) ||
        __builtin_add_overflow(sum, (int64_t)dim, &sum) || sum > (INT64_MAX >> 1))
        return fa3_seterr(FA3_ERR_BAD_STRIDE,
                          "reference: %s strides (batch %lld, row %lld, head %lld) address beyond "
                          "2^62 elements", t, (long long)bs, (long long)rs, (long long)hs);
    return FA3_OK;
}

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
    int out_dtype = cfg->out_dtype == FA3_DTYPE_AUTO ? fa3_default_out_dtype(cfg->dtype)
                                                     : (int)cfg->out_dtype;
    if (out_dtype != fa3_default_out_dtype(cfg->dtype) && !(e4m3 && out_dtype == FA3_DTYPE_FP16))
        return fa3_seterr(FA3_ERR_BAD_DTYPE,
                          "reference: out_dtype %d is not supported with dtype %d (supported: %s)",
                          (int)cfg->out_dtype, (int)cfg->dtype,
                          e4m3 ? "-1 = auto, bf16 = 0, fp16 = 1" : "-1 = auto, or the dtype itself");
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

    /* Shapes. */
    FA3_TRY(check_shape("batch", a->batch));
    FA3_TRY(check_shape("seqlen_q", a->seqlen_q));
    FA3_TRY(check_shape("seqlen_k", a->seqlen_k));
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
    FA3_TRY(check_extent("q", a->batch, a->seqlen_q, a->num_heads, hd, a->q_batch_stride,
                         a->q_row_stride, a->q_head_stride));
    FA3_TRY(check_extent("k", a->batch, a->seqlen_k, a->num_heads_k, hd, a->k_batch_stride,
                         a->k_row_stride, a->k_head_stride));
    FA3_TRY(check_extent("v", a->batch, a->seqlen_k, a->num_heads_k, hdv, a->v_batch_stride,
                         a->v_row_stride, a->v_head_stride));

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
    p->total_rows = (int64_t)a->batch * a->num_heads * a->seqlen_q;
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

    const fa3_driver *drv = NULL;
    FA3_TRY(fa3_driver_get(&drv));
    CUcontext cuctx = NULL;
    CUdevice dev = 0;
    FA3_TRY(fa3_driver_ensure_context(&cuctx, &dev));
    if (p.dtype == FA3_DTYPE_E4M3) { /* the descale values, as fa3_fwd reads them */
        fa3_config c;
        fa3_fwd_args a;
        FA3_TRY(fa3_config_in(cfg, &c));
        FA3_TRY(fa3_fwd_args_in(args, &a));
        FA3_TRY(fa3_fwd_check_descales(&c, &a, stream));
    }

    CUfunction fn = NULL;
    int widest = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
    int variant = 0;
    while (32 * ref_variant_t[variant] < widest)
        ++variant; /* widest ≤ 256 = 32·8, so this stops at the last variant at most */

    if (pthread_mutex_lock(&ref_lock) != 0)
        return fa3_seterr(FA3_ERR_INTERNAL, "reference: pthread_mutex_lock failed");
    const ref_module *mod = NULL;
    fa3_status st = module_for_context_locked(drv, cuctx, dev, &mod);
    if (st == FA3_OK)
        fn = mod->fn[variant];
    pthread_mutex_unlock(&ref_lock);
    if (st != FA3_OK)
        return st;

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
    if (!image || !size || !is_ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_reference_build_image: NULL argument");
    if (cc < 10 || cc > 999)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "fa3_reference_build_image: compute capability %d is invalid", cc);
    *image = NULL;
    *size = 0;
    if (pthread_mutex_lock(&ref_lock) != 0)
        return fa3_seterr(FA3_ERR_INTERNAL, "reference: pthread_mutex_lock failed");
    fa3_status st = nvrtc_load_locked()
                        ? nvrtc_compile_locked(cc, image, size, is_ptx)
                        : fa3_seterr(FA3_ERR_NO_NVRTC, "reference kernel: %s", nvrtc_why);
    pthread_mutex_unlock(&ref_lock);
    return st;
}
