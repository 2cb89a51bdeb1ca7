/*
 * The forward call: argument helpers, the FLOP count, and fa3_fwd, which validates every argument
 * against the kernel's config (each failure names the field and its value) before anything touches
 * the GPU, then launches the kernels of the forward operation (op.h) in order: for the forward
 * kernel (FA3_KERNEL_FWD) its parameter block (kernel_abi.h: three or four TMA descriptors,
 * O/LSE addresses and strides, shapes, mask window, softmax constants, the L2 section size) and a
 * persistent grid of at most one CTA per SM.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernel_abi.h"
#include "runtime/runtime.h"

#define LOG2E 1.4426950408889634

/* ------------------------------------------------------------------ helpers */

static const fa3_struct_kind args_kind = {"fa3_fwd_args", "fa3_fwd_args_init()",
                                          sizeof(fa3_fwd_args), NULL, 0};
static const fa3_fwd_args args_defaults = {.struct_size = sizeof(fa3_fwd_args),
                                           .window_size_left = -1, .window_size_right = -1};

void fa3_fwd_args_init_sized(fa3_fwd_args *args, size_t struct_size)
{
    if (args)
        fa3_struct_init(&args_kind, args, struct_size, &args_defaults);
}

fa3_status fa3_fwd_args_in(const fa3_fwd_args *args, fa3_fwd_args *out)
{
    return fa3_struct_in(&args_kind, args, out, &args_defaults);
}

void fa3_fwd_args_set_contiguous(fa3_fwd_args *a, int head_dim, int head_dim_v)
{
    if (!a)
        return;
    if (head_dim_v <= 0)
        head_dim_v = head_dim;
    int64_t hq = a->num_heads, hk = a->num_heads_k, sq = a->seqlen_q, sk = a->seqlen_k;
    a->q_head_stride = head_dim;
    a->q_row_stride = hq * head_dim;
    a->q_batch_stride = sq * hq * head_dim;
    a->k_head_stride = head_dim;
    a->k_row_stride = hk * head_dim;
    a->k_batch_stride = sk * hk * head_dim;
    a->v_head_stride = head_dim_v;
    a->v_row_stride = hk * head_dim_v;
    a->v_batch_stride = sk * hk * head_dim_v;
    a->o_head_stride = head_dim_v;
    a->o_row_stride = hq * head_dim_v;
    a->o_batch_stride = sq * hq * head_dim_v;
}

/* Number of (query, key) pairs one (batch, head) sees under the mask; windows as in fa3_mask
   (negative = unlimited). Exact, O(seqlen_q). */
static double visible_pairs(int sq, int sk, int64_t wl, int64_t wr)
{
    double pairs = 0;
    int64_t off = (int64_t)sk - sq;
    for (int64_t i = 0; i < sq; i++) {
        int64_t lo = wl < 0 ? 0 : i + off - wl;
        int64_t hi = wr < 0 ? (int64_t)sk - 1 : i + off + wr;
        if (lo < 0)
            lo = 0;
        if (hi > (int64_t)sk - 1)
            hi = (int64_t)sk - 1;
        if (hi >= lo)
            pairs += (double)(hi - lo + 1);
    }
    return pairs;
}

double fa3_fwd_flops(const fa3_config *config, const fa3_fwd_args *arguments)
{
    fa3_config c;
    fa3_fwd_args a;
    const fa3_config *cfg = &c;
    const fa3_fwd_args *args = &a;
    if (!config || !arguments || fa3_config_in(config, &c) != FA3_OK ||
        fa3_fwd_args_in(arguments, &a) != FA3_OK || args->batch < 1 || args->num_heads < 1 ||
        args->seqlen_q < 1 || args->seqlen_k < 1)
        return 0.0;
    int hd = cfg->head_dim, hdv = cfg->head_dim_v ? cfg->head_dim_v : cfg->head_dim;
    /* QKᵀ: 2·sq·sk·hd, PV: 2·sq·sk·hdv per (batch, head). */
    double per_pair = 2.0 * ((double)hd + (double)hdv);
    double bh = (double)args->batch * (double)args->num_heads;
    double sq = args->seqlen_q, sk = args->seqlen_k;
    switch (cfg->mask) {
    case FA3_MASK_NONE:
        return bh * sq * sk * per_pair;
    case FA3_MASK_CAUSAL:
        if (args->seqlen_q == args->seqlen_k)
            return 0.5 * bh * sq * sk * per_pair; /* FlashAttention's convention */
        return bh * visible_pairs(args->seqlen_q, args->seqlen_k, -1, 0) * per_pair;
    case FA3_MASK_LOCAL:
        return bh *
               visible_pairs(args->seqlen_q, args->seqlen_k, args->window_size_left,
                             args->window_size_right) *
               per_pair;
    }
    return 0.0;
}

/* ------------------------------------------------------------------ validation */

#define MAX_TMA_STRIDE ((int64_t)1 << 40) /* bytes, exclusive */

/* TMA's rule for an element stride: any value when the axis has one element (never used: the
   tensor map gets a substitute), else non-negative, × element size a multiple of 16 bytes and
   below 2^40 bytes. */
static int tma_stride_ok(int64_t stride, int64_t extent, int esize)
{
    return extent <= 1 ||
           (stride >= 0 && stride < MAX_TMA_STRIDE / esize && (stride * esize) % 16 == 0);
}

/* A Q/K/V stride: non-negative, and TMA's rule (tma_stride_ok). */
static fa3_status check_tma_stride(const char *name, int64_t stride, int64_t extent, int esize)
{
    if (stride < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "%s %lld is negative", name, (long long)stride);
    if (tma_stride_ok(stride, extent, esize))
        return FA3_OK;
    if (stride >= MAX_TMA_STRIDE / esize)
        return fa3_seterr(FA3_ERR_BAD_STRIDE,
                          "%s %lld elements is too large (TMA strides must be below 2^40 bytes)",
                          name, (long long)stride);
    return fa3_seterr(FA3_ERR_BAD_STRIDE,
                      "%s %lld elements = %lld bytes is not a multiple of 16 bytes (TMA)", name,
                      (long long)stride, (long long)(stride * esize));
}

static fa3_status check_o_stride(const char *name, int64_t stride, int64_t extent)
{
    if (stride < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "%s %lld is negative", name, (long long)stride);
    if (extent > 1 && stride % 2 != 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE,
                          "%s %lld is odd (O is written two elements at a time: strides must be "
                          "even)", name, (long long)stride);
    if (extent > 1 && stride > (INT64_MAX / 4) / extent)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "%s %lld is too large", name, (long long)stride);
    return FA3_OK;
}

/* O is written, so no two of its elements may share an address (a race, not a broadcast): with
   its axes ordered by stride, each stride must step past everything the smaller axes span, starting
   from the head_dim_v contiguous elements of a row. Axes of extent 1 are never stepped. */
static fa3_status check_o_disjoint(const fa3_fwd_args *a, int head_dim_v)
{
    struct { const char *name; int64_t stride; int64_t extent; } ax[3] = {
        {"args->o_head_stride", a->o_head_stride, a->num_heads},
        {"args->o_row_stride", a->o_row_stride, a->seqlen_q},
        {"args->o_batch_stride", a->o_batch_stride, a->batch},
    };
    for (int i = 1; i < 3; i++) /* insertion sort by stride; ties keep head < row < batch */
        for (int j = i; j > 0 && ax[j].stride < ax[j - 1].stride; j--) {
            __typeof__(ax[0]) t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
    int64_t span = head_dim_v; /* elements covered by the axes handled so far */
    for (int i = 0; i < 3; i++) {
        if (ax[i].extent <= 1)
            continue;
        if (ax[i].stride < span)
            return fa3_seterr(FA3_ERR_BAD_STRIDE,
                              "%s %lld is smaller than the %lld elements it must step over "
                              "(head_dim_v %d): elements of O would overlap", ax[i].name,
                              (long long)ax[i].stride, (long long)span, head_dim_v);
        span = ax[i].stride * (ax[i].extent - 1) + span;
    }
    return FA3_OK;
}

static fa3_status check_aligned(const char *name, const void *p, uintptr_t align)
{
    if ((uintptr_t)p % align != 0)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "%s %p is not %u-byte aligned", name, p,
                          (unsigned)align);
    return FA3_OK;
}

/* [first, last] byte range a strided tensor (batch, seqlen, heads, dim) can touch. */
typedef struct byte_range {
    uintptr_t lo, hi; /* inclusive */
} byte_range;

static byte_range tensor_range(const void *p, int batch, int seqlen, int heads, int dim,
                               int64_t bs, int64_t rs, int64_t hs, int es)
{
    uint64_t last = (uint64_t)(batch - 1) * (uint64_t)bs + (uint64_t)(seqlen - 1) * (uint64_t)rs +
                    (uint64_t)(heads - 1) * (uint64_t)hs + (uint64_t)(dim - 1);
    byte_range r = {(uintptr_t)p, (uintptr_t)p + (uintptr_t)(last * (uint64_t)es + (uint64_t)es - 1)};
    return r;
}

static int ranges_meet(byte_range a, byte_range b)
{
    return a.lo <= b.hi && b.lo <= a.hi;
}

/* O and LSE are written while other CTAs still read Q, K and V: they must not overlap K, V or
   each other, nor Q unless O has exactly Q's place and layout (each tile reads its own Q rows
   before writing the same rows of O). Byte ranges are a conservative test: interleaved but
   disjoint layouts (e.g. O inside a packed QKV buffer) are refused too. */
static fa3_status check_no_alias(const fa3_fwd_args *a, const fa3_config *c, int es)
{
    byte_range o = tensor_range(a->o, a->batch, a->seqlen_q, a->num_heads, c->head_dim_v,
                                a->o_batch_stride, a->o_row_stride, a->o_head_stride, es);
    byte_range q = tensor_range(a->q, a->batch, a->seqlen_q, a->num_heads, c->head_dim,
                                a->q_batch_stride, a->q_row_stride, a->q_head_stride, es);
    byte_range k = tensor_range(a->k, a->batch, a->seqlen_k, a->num_heads_k, c->head_dim,
                                a->k_batch_stride, a->k_row_stride, a->k_head_stride, es);
    byte_range v = tensor_range(a->v, a->batch, a->seqlen_k, a->num_heads_k, c->head_dim_v,
                                a->v_batch_stride, a->v_row_stride, a->v_head_stride, es);
    if (ranges_meet(o, k) || ranges_meet(o, v))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->o (bytes %p..%p) overlaps args->%s: the output would be written "
                          "while it is still read", (void *)o.lo, (void *)o.hi,
                          ranges_meet(o, k) ? "k" : "v");
    int same_as_q = a->o == a->q && a->o_batch_stride == a->q_batch_stride &&
                    a->o_row_stride == a->q_row_stride && a->o_head_stride == a->q_head_stride &&
                    c->head_dim_v == c->head_dim;
    if (ranges_meet(o, q) && !same_as_q)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->o overlaps args->q without having exactly q's address and "
                          "strides (in-place output is allowed only that way)");
    if (a->lse) {
        uint64_t n = (uint64_t)a->batch * (uint64_t)a->num_heads * (uint64_t)a->seqlen_q;
        byte_range l = {(uintptr_t)a->lse, (uintptr_t)a->lse + (uintptr_t)(4 * n - 1)};
        if (ranges_meet(l, o) || ranges_meet(l, q) || ranges_meet(l, k) || ranges_meet(l, v))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->lse (%llu floats at %p) overlaps args->%s",
                              (unsigned long long)n, (void *)a->lse,
                              ranges_meet(l, o) ? "o" : ranges_meet(l, q) ? "q"
                              : ranges_meet(l, k) ? "k" : "v");
    }
    return FA3_OK;
}

/* Everything about args that does not need the GPU. Normalized values come back in the out
   parameters. */
static fa3_status validate(const fa3_kernel *k, const fa3_fwd_args *a, float *scale,
                           int *win_left, int *win_right, uint32_t *tiles)
{
    const fa3_config *c = &k->cfg;
    const int es = k->plan.elem_bytes;
    if (!a->q || !a->k || !a->v || !a->o)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->%s is NULL",
                          !a->q ? "q" : !a->k ? "k" : !a->v ? "v" : "o");

    /* shapes */
    static const char *const shape_names[] = {"batch", "seqlen_q", "seqlen_k", "num_heads",
                                              "num_heads_k"};
    const int shape[] = {a->batch, a->seqlen_q, a->seqlen_k, a->num_heads, a->num_heads_k};
    for (int i = 0; i < 5; i++)
        if (shape[i] < 1)
            return fa3_seterr(FA3_ERR_BAD_SHAPE, "args->%s %d must be at least 1", shape_names[i],
                              shape[i]);
    if (a->num_heads % a->num_heads_k != 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->num_heads %d is not a multiple of args->num_heads_k %d",
                          a->num_heads, a->num_heads_k);
    /* The kernel forms i + seqlen_k - seqlen_q ± window and key-block bounds (+ block_m,
       + block_n) in 32-bit integers. */
    const int64_t margin = (int64_t)k->plan.block_m + k->plan.block_n;
    if ((int64_t)a->seqlen_q + a->seqlen_k + margin > INT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->seqlen_q %d + args->seqlen_k %d exceeds 2^31-1 - %lld (the "
                          "kernel's 32-bit index range)", a->seqlen_q, a->seqlen_k,
                          (long long)margin);
    int64_t m_blocks = ((int64_t)a->seqlen_q + k->plan.block_m - 1) / k->plan.block_m;
    int64_t total = m_blocks * a->num_heads; /* ≤ 2^31 · 2^31 / 128: no overflow */
    if (total > INT32_MAX || total * a->batch > INT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "too many tiles: ceil(seqlen_q %d / %d) * num_heads %d * batch %d exceeds "
                          "2^31-1", a->seqlen_q, k->plan.block_m, a->num_heads, a->batch);
    total *= a->batch;

    /* pointers */
    FA3_TRY(check_aligned("args->q", a->q, 16));
    FA3_TRY(check_aligned("args->k", a->k, 16));
    FA3_TRY(check_aligned("args->v", a->v, 16));
    FA3_TRY(check_aligned("args->o", a->o, 4));
    FA3_TRY(check_aligned("args->lse", a->lse, 4));

    /* strides */
    FA3_TRY(check_tma_stride("args->q_row_stride", a->q_row_stride, a->seqlen_q, es));
    FA3_TRY(check_tma_stride("args->q_head_stride", a->q_head_stride, a->num_heads, es));
    FA3_TRY(check_tma_stride("args->q_batch_stride", a->q_batch_stride, a->batch, es));
    FA3_TRY(check_tma_stride("args->k_row_stride", a->k_row_stride, a->seqlen_k, es));
    FA3_TRY(check_tma_stride("args->k_head_stride", a->k_head_stride, a->num_heads_k, es));
    FA3_TRY(check_tma_stride("args->k_batch_stride", a->k_batch_stride, a->batch, es));
    FA3_TRY(check_tma_stride("args->v_row_stride", a->v_row_stride, a->seqlen_k, es));
    FA3_TRY(check_tma_stride("args->v_head_stride", a->v_head_stride, a->num_heads_k, es));
    FA3_TRY(check_tma_stride("args->v_batch_stride", a->v_batch_stride, a->batch, es));
    FA3_TRY(check_o_stride("args->o_row_stride", a->o_row_stride, a->seqlen_q));
    FA3_TRY(check_o_stride("args->o_head_stride", a->o_head_stride, a->num_heads));
    FA3_TRY(check_o_stride("args->o_batch_stride", a->o_batch_stride, a->batch));
    FA3_TRY(check_o_disjoint(a, c->head_dim_v));

    /* softmax scale */
    float s = a->softmax_scale;
    if (s == 0.0f)
        s = (float)(1.0 / sqrt((double)c->head_dim));
    else if (!isfinite(s) || !(s > 0.0f))
        return fa3_seterr(FA3_ERR_BAD_SCALE,
                          "args->softmax_scale %g must be positive and finite (0 = 1/sqrt(head_dim))",
                          (double)a->softmax_scale);
    *scale = s;

    /* softcap */
    if (c->softcap) {
        if (!isfinite(a->softcap) || !(a->softcap > 0.0f))
            return fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                              "args->softcap %g must be positive and finite for a softcap kernel",
                              (double)a->softcap);
    } else if (a->softcap != 0.0f) {
        return fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                          "args->softcap %g must be 0: the kernel's config has softcap = 0",
                          (double)a->softcap);
    }

    /* windows */
    int wl = a->window_size_left, wr = a->window_size_right;
    if (c->mask == FA3_MASK_LOCAL) {
        if (wl < -1 || wr < -1)
            return fa3_seterr(FA3_ERR_BAD_WINDOW,
                              "args->window_size_%s %d is invalid (-1 = unlimited, else >= 0)",
                              wl < -1 ? "left" : "right", wl < -1 ? wl : wr);
        /* A window that reaches past every key is unlimited (left: wl >= seqlen_k - 1 already
           is; right: wr >= seqlen_q - 1). Writing -1 for it keeps the kernel's 32-bit
           i + seqlen_k - seqlen_q ± window within range. */
        if (wl >= a->seqlen_k)
            wl = -1;
        if (wr >= a->seqlen_q)
            wr = -1;
        *win_left = wl;
        *win_right = wr;
    } else {
        if (wl != -1 || wr != -1)
            return fa3_seterr(FA3_ERR_BAD_WINDOW,
                              "args->window_size_left/right %d/%d must be -1/-1 for mask %s (only "
                              "FA3_MASK_LOCAL uses windows)", wl, wr,
                              c->mask == FA3_MASK_CAUSAL ? "causal" : "none");
        *win_left = -1;
        *win_right = c->mask == FA3_MASK_CAUSAL ? 0 : -1;
    }
    /* The constants the kernel gets must stay finite and non-zero in fp32 (a huge scale or
       softcap would give inf·0 or inf-inf = NaN inside the kernel). */
    double sl2 = c->softcap ? (double)a->softcap * LOG2E : (double)s * LOG2E;
    double smul = c->softcap ? (double)s / (double)a->softcap : 1.0;
    if (!(fabs(sl2) <= FLT_MAX) || (float)sl2 == 0.0f)
        return c->softcap ? fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                                       "args->softcap %g gives softcap*log2(e) = %g, outside "
                                       "the float range", (double)a->softcap, sl2)
                          : fa3_seterr(FA3_ERR_BAD_SCALE,
                                       "args->softmax_scale %g gives softmax_scale*log2(e) = %g, "
                                       "outside the float range", (double)s, sl2);
    if (!(fabs(smul) <= FLT_MAX) || (float)smul == 0.0f)
        return fa3_seterr(FA3_ERR_BAD_SOFTCAP,
                          "softmax_scale / softcap = %g / %g = %g is outside the float range",
                          (double)s, (double)a->softcap, smul);

    FA3_TRY(check_no_alias(a, c, es));
    *tiles = (uint32_t)total;
    return FA3_OK;
}

/* ------------------------------------------------------------------ launch */

/* A byte stride the tensor map accepts for a dimension of extent 1 (whose stride is never used):
   the contiguous stride, i.e. the inner extents' product, rounded up to 16; the row size if that
   would be too large. */
static uint64_t substitute_stride(const uint64_t *dims, int dim, int esize)
{
    uint64_t s = (uint64_t)esize;
    for (int i = 0; i < dim; i++) {
        if (s > (uint64_t)MAX_TMA_STRIDE / (dims[i] ? dims[i] : 1)) {
            s = 0;
            break;
        }
        s *= dims[i];
    }
    s = (s + 15) & ~(uint64_t)15;
    if (s == 0 || s >= (uint64_t)MAX_TMA_STRIDE)
        s = ((uint64_t)esize * dims[0] + 15) & ~(uint64_t)15;
    return s;
}

static fa3_status encode_map(const fa3_driver *d, uint8_t map[128], const char *which,
                             CUtensorMapDataType dtype, int esize, const void *ptr, int head_dim,
                             int seqlen, int heads, int batch, int64_t row_stride,
                             int64_t head_stride, int64_t batch_stride, int rows)
{
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)seqlen, (cuuint64_t)heads,
                                (cuuint64_t)batch};
    const int64_t strides_el[3] = {row_stride, head_stride, batch_stride};
    cuuint64_t strides[3];
    for (int i = 0; i < 3; i++)
        strides[i] = dims[i + 1] > 1 ? (cuuint64_t)strides_el[i] * (cuuint64_t)esize
                                     : (cuuint64_t)substitute_stride(dims, i + 1, esize);
    const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    CUresult r = d->cuTensorMapEncodeTiled((CUtensorMap *)(void *)map, dtype, 4, (void *)ptr, dims,
                                           strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fa3_status st = fa3_cu_check(r, "cuTensorMapEncodeTiled");
        fa3_appenderr(" for %s: dims {%llu, %llu, %llu, %llu}, byte strides {%llu, %llu, %llu}, "
                      "box {64, %d, 1, 1}, address %p", which, (unsigned long long)dims[0],
                      (unsigned long long)dims[1], (unsigned long long)dims[2],
                      (unsigned long long)dims[3], (unsigned long long)strides[0],
                      (unsigned long long)strides[1], (unsigned long long)strides[2], rows, ptr);
        return st;
    }
    return FA3_OK;
}

/* Whether O can be written through a tensor map: 16-byte aligned, strides by TMA's rule. */
static int o_tma_ok(const fa3_fwd_args *a, int es)
{
    return (uintptr_t)a->o % 16 == 0 && tma_stride_ok(a->o_row_stride, a->seqlen_q, es) &&
           tma_stride_ok(a->o_head_stride, a->num_heads, es) &&
           tma_stride_ok(a->o_batch_stride, a->batch, es);
}

/* Compute capability (major·10 + minor) and SM count of a device, read from the driver once per
   device ordinal and kept: fa3_fwd runs once per attention layer and step, so per-call driver
   queries are overhead. Ordinals past the table are queried every time. */
#define FA3_MAX_CACHED_DEVICES 64
static _Atomic int g_dev_props[FA3_MAX_CACHED_DEVICES]; /* 0 = unknown, else cc << 16 | sms */

static fa3_status device_props(const fa3_driver *d, CUdevice dev, int *cc, int *num_sms)
{
    int cached = dev >= 0 && dev < FA3_MAX_CACHED_DEVICES ? g_dev_props[dev] : 0;
    if (cached) {
        *cc = cached >> 16;
        *num_sms = cached & 0xffff;
        return FA3_OK;
    }
    int major = 0, minor = 0, sms = 0;
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev)));
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           dev)));
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)));
    *cc = major * 10 + minor;
    *num_sms = sms;
    if (dev >= 0 && dev < FA3_MAX_CACHED_DEVICES && sms > 0 && sms < 0x10000)
        g_dev_props[dev] = *cc << 16 | sms;
    return FA3_OK;
}

/* Masked configs walk their tiles longest first (m_block reversed, slowest) in rounds of
   `grid` tiles, one per CTA. Over all (head, batch) pairs at once, the K/V a round reads
   belong to `grid` different heads and are gone from L2 when the next round comes back to those
   heads; at seqlen ≤ 2048 causal attention then waits on HBM. So the tiles are cut into sections
   of section_hb pairs whose K/V fit in 32 MiB of the 50 MiB L2 (FlashAttention-3's budget), but
   never fewer than grid/4 pairs (with 16 pairs per section the static rounds were 1.7x
   unbalanced, and the H200 ran hd256 causal seqlen 4096 at 398 instead of 599 TFLOP/s). Within
   [grid/4, that size] the size is the smallest whose static rounds share the work about as
   evenly as the best (schedule.c); up to all pairs when even grid/4 pairs overflow the whole L2
   (then L2 cannot hold a section anyway). Same-run A/B (H200, bf16, session 3 call 7, section_search=0 = the
   largest size that fits): causal hd128 512/1024 356/490 vs 326/411, hd256 512 324 vs 276,
   hd64 1024/8192 296/505 vs 287/482 TFLOP/s, the other causal shapes equal. Letting sections
   grow past the budget whenever the floor exceeded it (call 6) lost hd256 1024 (372 vs 477).
   Non-masked configs ignore it (m_block fastest). */
static uint32_t section_hb(fa3_kernel *k, const fa3_fwd_args *a, int wl, int wr, uint32_t hb_total,
                           unsigned grid)
{
    const fa3_config *c = &k->cfg;
    const fa3_plan *p = &k->plan;
    if (!p->l2_sections || hb_total == 0 || c->mask == FA3_MASK_NONE)
        return hb_total ? hb_total : 1;
    const uint64_t budget = 32ull << 20, l2 = 50ull << 20;
    const uint64_t kv_head = (uint64_t)a->seqlen_k * (uint64_t)(c->head_dim + c->head_dim_v) *
                             (uint64_t)p->elem_bytes;
    const uint64_t gqa = (uint64_t)(a->num_heads / a->num_heads_k); /* query heads per KV head */
    uint64_t s = kv_head ? budget / kv_head * gqa : hb_total;
    const uint64_t floor_ = ((uint64_t)grid + 3) / 4;
    if (s < floor_)
        s = floor_;
    uint64_t hi = s;
    if (kv_head && (floor_ + gqa - 1) / gqa * kv_head > l2) /* KV heads of grid/4 pairs */
        hi = hb_total; /* no section fits L2: balance alone decides */
    if (!p->section_search)
        return s < hb_total ? (uint32_t)s : hb_total;
    uint32_t lo = floor_ < hb_total ? (uint32_t)floor_ : hb_total;
    return fa3_choose_section_hb(k, a, wl, wr, hb_total, grid, lo,
                                 hi < hb_total ? (uint32_t)hi : hb_total);
}

/* One forward call's values, checked and derived from its arguments, for its kernels. */
typedef struct fwd_call {
    const fa3_fwd_args *args;
    const fa3_driver *d;
    float scale;       /* softmax_scale, 0 resolved */
    int wl, wr;        /* windows as the kernel gets them */
    uint32_t tiles;    /* ceil(seqlen_q / block_m) · num_heads · batch */
    int num_sms;
} fwd_call;

/* The parameter block and grid of the forward kernel (FA3_KERNEL_FWD) for call. */
static fa3_status fwd_kernel_params(fa3_kernel *kernel, const fwd_call *call,
                                    fa3_kernel_params *prm, unsigned *grid_out)
{
    const fa3_config *c = &kernel->cfg;
    const fa3_plan *p = &kernel->plan;
    const fa3_fwd_args *args = call->args;
    const fa3_driver *d = call->d;
    const float scale = call->scale;
    const int wl = call->wl, wr = call->wr;
    const uint32_t tiles = call->tiles;
    memset(prm, 0, sizeof *prm);
    const CUtensorMapDataType dt = c->dtype == FA3_DTYPE_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const int es = p->elem_bytes;
    FA3_TRY(encode_map(d, prm->tmap_q, "q", dt, es, args->q, c->head_dim, args->seqlen_q,
                       args->num_heads, args->batch, args->q_row_stride, args->q_head_stride,
                       args->q_batch_stride, p->block_m));
    FA3_TRY(encode_map(d, prm->tmap_k, "k", dt, es, args->k, c->head_dim, args->seqlen_k,
                       args->num_heads_k, args->batch, args->k_row_stride, args->k_head_stride,
                       args->k_batch_stride, p->block_n));
    FA3_TRY(encode_map(d, prm->tmap_v, "v", dt, es, args->v, c->head_dim_v, args->seqlen_k,
                       args->num_heads_k, args->batch, args->v_row_stride, args->v_head_stride,
                       args->v_batch_stride, p->block_n));
    /* O through TMA when the plan staged it and O meets TMA's rules (16-byte aligned address and
       strides); otherwise the kernel stores O from registers (same results). */
    if (p->o_stage && o_tma_ok(args, es)) {
        FA3_TRY(encode_map(d, prm->tmap_o, "o", dt, es, args->o, c->head_dim_v, args->seqlen_q,
                           args->num_heads, args->batch, args->o_row_stride,
                           args->o_head_stride, args->o_batch_stride, 64));
        prm->o_tma = 1;
    }
    prm->o_ptr = (uint64_t)(uintptr_t)args->o;
    prm->lse_ptr = (uint64_t)(uintptr_t)args->lse;
    prm->o_batch_stride = args->o_batch_stride;
    prm->o_row_stride = args->o_row_stride;
    prm->o_head_stride = args->o_head_stride;
    prm->seqlen_q = args->seqlen_q;
    prm->seqlen_k = args->seqlen_k;
    prm->num_heads = args->num_heads;
    prm->heads_per_kv = args->num_heads / args->num_heads_k;
    prm->num_m_blocks = (int32_t)(((int64_t)args->seqlen_q + p->block_m - 1) / p->block_m);
    prm->window_left = wl;
    prm->window_right = wr;
    if (c->softcap) {
        prm->score_mul = (float)((double)scale / (double)args->softcap);
        prm->scale_log2 = (float)((double)args->softcap * LOG2E);
        prm->lse_mul = args->softcap;
    } else {
        prm->score_mul = 1.0f;
        prm->scale_log2 = (float)((double)scale * LOG2E);
        prm->lse_mul = scale;
    }
    prm->total_tiles = tiles;

    /* Persistent kernel: one CTA per SM (the plan uses all of an SM's shared memory), each
       walking tiles ctaid.x, ctaid.x + gridDim.x, ... in the order the kernel defines. */
    unsigned grid = tiles;
    if (call->num_sms > 0 && grid > (unsigned)call->num_sms)
        grid = (unsigned)call->num_sms;
    prm->section_hb = section_hb(kernel, args, wl, wr, tiles / (uint32_t)prm->num_m_blocks, grid);
    *grid_out = grid;
    return FA3_OK;
}

fa3_status fa3_fwd(fa3_kernel *kernel, const fa3_fwd_args *arguments, void *stream)
{
    if (!kernel || !arguments)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_fwd: NULL %s",
                          !kernel ? "kernel" : "args");
    fa3_fwd_args a;
    FA3_TRY(fa3_fwd_args_in(arguments, &a));
    const fa3_fwd_args *args = &a;
    fwd_call call = {.args = args};
    FA3_TRY(validate(kernel, args, &call.scale, &call.wl, &call.wr, &call.tiles));

    /* The device. */
    FA3_TRY(fa3_driver_get(&call.d));
    const fa3_driver *d = call.d;
    CUdevice dev;
    FA3_TRY(fa3_driver_ensure_context(NULL, &dev));
    int cc = 0;
    FA3_TRY(device_props(d, dev, &cc, &call.num_sms));
    if (cc != 90) {
        char name[128] = "?";
        if (d->cuDeviceGetName(name, (int)sizeof name, dev) != CUDA_SUCCESS)
            strcpy(name, "?");
        return fa3_seterr(FA3_ERR_UNSUPPORTED,
                          "device %d (%s) has compute capability %d.%d; fa3jit kernels need 9.0 "
                          "(sm_90a, Hopper)", (int)dev, name, cc / 10, cc % 10);
    }
    const fa3_op_shape shape = {args->batch, args->seqlen_q, args->seqlen_k, args->num_heads,
                                args->num_heads_k};
    size_t workspace = fa3_op_workspace_bytes(kernel->op, &kernel->plan, &shape);
    if (workspace) /* the first operation with a workspace brings its allocation */
        return fa3_seterr(FA3_ERR_INTERNAL, "operation %s needs %zu bytes of workspace: not "
                          "provided in this build", kernel->op->name, workspace);

    /* The operation's kernels, in order, on the stream. */
    for (int i = 0; i < kernel->num_parts; i++) {
        const fa3_part *pt = &kernel->parts[i];
        CUfunction fn;
        FA3_TRY(fa3_kernel_function(kernel, i, &fn, NULL));
        fa3_kernel_param_block params;
        unsigned grid = 0;
        switch (pt->kind) {
        case FA3_KERNEL_FWD:
            FA3_TRY(fwd_kernel_params(kernel, &call, &params.fwd, &grid));
            break;
        case FA3_KERNEL_NUM_KINDS:
            return fa3_seterr(FA3_ERR_INTERNAL, "kernel kind %d has no launch", (int)pt->kind);
        }
        void *kparams[] = {&params};
        FA3_TRY(FA3_CU(d, cuLaunchKernel(fn, grid, 1, 1, (unsigned)pt->threads, 1, 1,
                                         (unsigned)pt->smem_bytes, (CUstream)stream, kparams,
                                         NULL)));
    }
    return FA3_OK;
}
