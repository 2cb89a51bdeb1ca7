/*
 * The forward call's arguments: fa3_fwd_args_init and the struct's size rules, contiguous
 * strides, the FLOP count, and the validation fa3_fwd runs: first every argument against the
 * kernel's config before anything touches the GPU (fa3_fwd_validate; the varlen / paged-KV
 * field rules and views: varlen.c), each failure naming the field and its value; then, once the
 * device is ready, the e4m3 descale values read back (fa3_fwd_check_descales). fwd.c launches.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

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

/* x · y, or INT64_MAX where the product leaves int64_t (shapes fa3_fwd refuses anyway: its
   stride checks then name the stride). */
static int64_t mul_or_max(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_mul_overflow(x, y, &r) ? INT64_MAX : r;
}

void fa3_fwd_args_set_contiguous(fa3_fwd_args *a, int head_dim, int head_dim_v)
{
    if (!a)
        return;
    if (head_dim_v <= 0)
        head_dim_v = head_dim;
    int64_t hq = a->num_heads, hk = a->num_heads_k, sq = a->seqlen_q, sk = a->seqlen_k;
    a->q_head_stride = head_dim;
    a->q_row_stride = hq * head_dim; /* int · int: no overflow */
    a->q_batch_stride = mul_or_max(sq, a->q_row_stride);
    a->k_head_stride = head_dim;
    a->k_row_stride = hk * head_dim;
    a->k_batch_stride = mul_or_max(sk, a->k_row_stride);
    a->v_head_stride = head_dim_v;
    a->v_row_stride = hk * head_dim_v;
    a->v_batch_stride = mul_or_max(sk, a->v_row_stride);
    a->o_head_stride = head_dim_v;
    a->o_row_stride = hq * head_dim_v;
    a->o_batch_stride = mul_or_max(sq, a->o_row_stride);
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
    if (cfg->varlen || args->seqused_k) /* the lengths are in device memory only */
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

/* O is written, so no two of its elements may share an address (fa3_check_disjoint). */
static fa3_status check_o_disjoint(const fa3_fwd_args *a, int head_dim_v, const fa3_fwd_layout *L)
{
    const fa3_axis ax[3] = {
        {"args->o_head_stride", a->o_head_stride, a->num_heads},
        {"args->o_row_stride", a->o_row_stride, a->seqlen_q},
        {"args->o_batch_stride", a->o_batch_stride, L->q_batch},
    };
    return fa3_check_disjoint(ax, head_dim_v, "head_dim_v", "O");
}

/* The byte range of a descale array: batch · num_heads_k floats. */
static fa3_byte_range descale_range(const float *p, const fa3_fwd_args *a)
{
    return fa3_bytes_range(p, 4 * (uint64_t)a->batch * (uint64_t)a->num_heads_k);
}

/* O and LSE are written while other CTAs still read Q, K, V and the descales: they must not
   overlap K, V, a descale array or each other, nor Q unless O has exactly Q's place and layout
   (each tile reads its own Q rows before writing the same rows of O). Byte ranges (Q/K/V elements
   of es bytes, O elements of os bytes) are a conservative test: interleaved but disjoint layouts
   (e.g. O inside a packed QKV buffer) are refused too. */
static fa3_status check_no_alias(const fa3_fwd_args *a, const fa3_config *c, int es, int os,
                                 const fa3_fwd_layout *L)
{
    fa3_byte_range o = fa3_tensor_range(a->o, L->q_batch, a->seqlen_q, a->num_heads,
                                        c->head_dim_v, a->o_batch_stride, a->o_row_stride,
                                        a->o_head_stride, os);
    fa3_byte_range q = fa3_tensor_range(a->q, L->q_batch, a->seqlen_q, a->num_heads, c->head_dim,
                                        a->q_batch_stride, a->q_row_stride, a->q_head_stride,
                                        es);
    fa3_byte_range k = fa3_tensor_range(a->k, L->k_batch, L->k_rows, a->num_heads_k,
                                        c->head_dim, a->k_batch_stride, a->k_row_stride,
                                        a->k_head_stride, es);
    fa3_byte_range v = fa3_tensor_range(a->v, L->k_batch, L->k_rows, a->num_heads_k,
                                        c->head_dim_v, a->v_batch_stride, a->v_row_stride,
                                        a->v_head_stride, es);
    if (fa3_ranges_meet(o, k) || fa3_ranges_meet(o, v))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->o (bytes %p..%p) overlaps args->%s: the output would be written "
                          "while it is still read", (void *)o.lo, (void *)o.hi,
                          fa3_ranges_meet(o, k) ? "k" : "v");
    int same_as_q = a->o == a->q && a->o_batch_stride == a->q_batch_stride &&
                    a->o_row_stride == a->q_row_stride && a->o_head_stride == a->q_head_stride &&
                    c->head_dim_v == c->head_dim && es == os;
    if (fa3_ranges_meet(o, q) && !same_as_q)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->o overlaps args->q without having exactly q's address, strides "
                          "and element size (in-place output is allowed only that way)");
    fa3_byte_range l = {0, 0};
    if (a->lse) {
        uint64_t n = (uint64_t)L->lse_floats; /* varlen: (num_heads, total_q) */
        l = fa3_bytes_range(a->lse, 4 * n);
        if (fa3_ranges_meet(l, o) || fa3_ranges_meet(l, q) || fa3_ranges_meet(l, k) ||
            fa3_ranges_meet(l, v))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->lse (%llu floats at %p) overlaps args->%s",
                              (unsigned long long)n, (void *)a->lse,
                              fa3_ranges_meet(l, o) ? "o" : fa3_ranges_meet(l, q) ? "q"
                              : fa3_ranges_meet(l, k) ? "k" : "v");
    }
    const struct { const char *name; const float *p; } ds[3] = {
        {"descale_q", a->descale_q}, {"descale_k", a->descale_k}, {"descale_v", a->descale_v}};
    for (int i = 0; i < 3; i++) {
        if (!ds[i].p)
            continue;
        fa3_byte_range d = descale_range(ds[i].p, a);
        if (fa3_ranges_meet(d, o) || (a->lse && fa3_ranges_meet(d, l)))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->%s (%llu floats at %p) overlaps args->%s: the descales would "
                              "be overwritten while they are read", ds[i].name,
                              (unsigned long long)a->batch * (unsigned long long)a->num_heads_k,
                              (const void *)ds[i].p, fa3_ranges_meet(d, o) ? "o" : "lse");
    }
    /* The int32 arrays of varlen / paged calls are read while O and LSE are written. */
    const uint64_t rows = (uint64_t)(a->batch - 1) * (uint64_t)a->page_table_stride +
                          (uint64_t)a->max_pages_per_seq;
    const struct { const char *name; const int32_t *p; uint64_t n; } ia[4] = {
        {"cu_seqlens_q", a->cu_seqlens_q, (uint64_t)a->batch + 1},
        {"cu_seqlens_k", a->cu_seqlens_k, (uint64_t)a->batch + 1},
        {"seqused_k", a->seqused_k, (uint64_t)a->batch},
        {"page_table", a->page_table, rows}};
    for (int i = 0; i < 4; i++) {
        if (!ia[i].p)
            continue;
        fa3_byte_range d = fa3_bytes_range(ia[i].p, 4 * ia[i].n);
        if (fa3_ranges_meet(d, o) || (a->lse && fa3_ranges_meet(d, l)))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->%s (%llu int32 at %p) overlaps args->%s: it would be "
                              "overwritten while it is read", ia[i].name,
                              (unsigned long long)ia[i].n, (const void *)ia[i].p,
                              fa3_ranges_meet(d, o) ? "o" : "lse");
    }
    /* split-KV: the caller's workspace takes the fp32 partials while every other array is in
       use; the whole workspace_bytes are the range (a library-allocated one cannot overlap) */
    if (c->split_kv && a->workspace && a->workspace_bytes) {
        const fa3_byte_range w = fa3_bytes_range(a->workspace, (uint64_t)a->workspace_bytes);
        const char *hit = fa3_ranges_meet(w, q) ? "q" : fa3_ranges_meet(w, k) ? "k"
                          : fa3_ranges_meet(w, v) ? "v" : fa3_ranges_meet(w, o) ? "o"
                          : (a->lse && fa3_ranges_meet(w, l)) ? "lse" : NULL;
        for (int i = 0; i < 3 && !hit; i++)
            if (ds[i].p && fa3_ranges_meet(w, descale_range(ds[i].p, a)))
                hit = ds[i].name;
        for (int i = 0; i < 4 && !hit; i++)
            if (ia[i].p && fa3_ranges_meet(w, fa3_bytes_range(ia[i].p, 4 * ia[i].n)))
                hit = ia[i].name;
        if (hit)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->workspace (%zu bytes at %p) overlaps args->%s: split-KV's "
                              "fp32 partials would be written over it", a->workspace_bytes,
                              a->workspace, hit);
    }
    return FA3_OK;
}

/* The descale fields: all NULL for bf16/fp16; for e4m3 each NULL (1.0) or 4-byte aligned;
   descales_trusted 0 or 1. Their values are read later (fa3_fwd_check_descales). */
static fa3_status check_descale_fields(const fa3_fwd_args *a, const fa3_config *c)
{
    if (a->descales_trusted != 0 && a->descales_trusted != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->descales_trusted %d must be 0 (fa3_fwd reads the descales back "
                          "to check them) or 1 (it does not)", a->descales_trusted);
    const struct { const char *name; const float *p; } ds[3] = {
        {"args->descale_q", a->descale_q}, {"args->descale_k", a->descale_k},
        {"args->descale_v", a->descale_v}};
    for (int i = 0; i < 3; i++) {
        if (!ds[i].p)
            continue;
        if (c->dtype != FA3_DTYPE_E4M3)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "%s %p must be NULL for %s kernel (descales scale e4m3 inputs "
                              "only)", ds[i].name, (const void *)ds[i].p,
                              c->dtype == FA3_DTYPE_FP16 ? "an fp16" : "a bf16");
        FA3_TRY(fa3_check_aligned(ds[i].name, ds[i].p, 4));
    }
    return FA3_OK;
}

/* See runtime.h. */
fa3_status fa3_fwd_validate(const fa3_kernel *k, const fa3_fwd_args *a, float *scale,
                            int *win_left, int *win_right, uint32_t *tiles)
{
    const fa3_config *c = &k->cfg;
    const int es = k->plan.elem_bytes; /* Q, K, V */
    const int os = k->plan.out_bytes;  /* O */
    if (!a->q || !a->k || !a->v || !a->o)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->%s is NULL",
                          !a->q ? "q" : !a->k ? "k" : !a->v ? "v" : "o");

    /* shapes (varlen / paged: fa3_fwd_layout_make) */
    fa3_fwd_layout L;
    FA3_TRY(fa3_fwd_layout_make(c, a, "", &L));
    if (a->num_heads < 1 || a->num_heads_k < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "args->%s %d must be at least 1",
                          a->num_heads < 1 ? "num_heads" : "num_heads_k",
                          a->num_heads < 1 ? a->num_heads : a->num_heads_k);
    if (a->num_heads % a->num_heads_k != 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->num_heads %d is not a multiple of args->num_heads_k %d",
                          a->num_heads, a->num_heads_k);
    /* The kernel forms i + seqlen_k - seqlen_q ± window and key-block bounds (+ block_m,
       + block_n) in 32-bit integers (varlen: row numbers up to total_q and total_k too). */
    const int64_t margin = (int64_t)k->plan.block_m + k->plan.block_n;
    const int64_t kmax = L.paged ? L.capacity : a->seqlen_k;
    if ((int64_t)a->seqlen_q + kmax + margin > INT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->seqlen_q %d + %s %lld exceeds 2^31-1 - %lld (the "
                          "kernel's 32-bit index range)", a->seqlen_q,
                          L.paged ? "the page table's capacity" : "args->seqlen_k",
                          (long long)kmax, (long long)margin);
    /* Tiles: ceil(longest query count / block_m) per (sequence, head); packed GQA: ceil(seqlen_q ·
       ratio / block_m) per (sequence, kv head) */
    int64_t m_blocks = ((int64_t)L.q_bound + k->plan.block_m - 1) / k->plan.block_m;
    int64_t total = m_blocks * a->num_heads; /* ≤ 2^31 · 2^31 / 128: no overflow */
    if (c->pack_gqa) {
        const int ratio = a->num_heads / a->num_heads_k;
        if (k->plan.block_m % ratio != 0)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "pack_gqa: args->num_heads %d / args->num_heads_k %d = %d query "
                              "heads per kv head must divide the kernel's block_m %d (use a "
                              "pack_gqa 0 config for these heads)", a->num_heads,
                              a->num_heads_k, ratio, k->plan.block_m);
        const int64_t rows = (int64_t)a->seqlen_q * ratio; /* the packed rows of a kv head */
        if (rows + margin > INT32_MAX)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "pack_gqa: args->seqlen_q %d * %d query heads per kv head "
                              "exceeds 2^31-1 - %lld (the kernel's 32-bit packed rows)",
                              a->seqlen_q, ratio, (long long)margin);
        m_blocks = (rows + k->plan.block_m - 1) / k->plan.block_m;
        total = m_blocks * a->num_heads_k;
    }
    if (total > INT32_MAX || total * a->batch > INT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "too many tiles: ceil(%s %d / %d) * num_heads %d * batch %d exceeds "
                          "2^31-1", L.varlen ? "max_seqlen_q" : "seqlen_q", L.q_bound,
                          k->plan.block_m, a->num_heads, a->batch);
    total *= a->batch;

    /* pointers */
    FA3_TRY(fa3_check_aligned("args->q", a->q, 16));
    FA3_TRY(fa3_check_aligned("args->k", a->k, 16));
    FA3_TRY(fa3_check_aligned("args->v", a->v, 16));
    FA3_TRY(fa3_check_aligned("args->o", a->o, 4));
    FA3_TRY(fa3_check_aligned("args->lse", a->lse, 4));
    FA3_TRY(check_descale_fields(a, c));

    /* strides (varlen: the q/o batch strides are not used; paged: the k/v batch strides step
       pages, the row strides rows within a page) */
    FA3_TRY(fa3_check_tma_stride("args->q_row_stride", a->q_row_stride, a->seqlen_q, es));
    FA3_TRY(fa3_check_tma_stride("args->q_head_stride", a->q_head_stride, a->num_heads, es));
    FA3_TRY(fa3_check_tma_stride("args->q_batch_stride", a->q_batch_stride, L.q_batch, es));
    FA3_TRY(fa3_check_tma_stride("args->k_row_stride", a->k_row_stride, L.k_rows, es));
    FA3_TRY(fa3_check_tma_stride("args->k_head_stride", a->k_head_stride, a->num_heads_k, es));
    FA3_TRY(fa3_check_tma_stride("args->k_batch_stride", a->k_batch_stride, L.k_batch, es));
    FA3_TRY(fa3_check_tma_stride("args->v_row_stride", a->v_row_stride, L.k_rows, es));
    FA3_TRY(fa3_check_tma_stride("args->v_head_stride", a->v_head_stride, a->num_heads_k, es));
    FA3_TRY(fa3_check_tma_stride("args->v_batch_stride", a->v_batch_stride, L.k_batch, es));
    FA3_TRY(check_o_stride("args->o_row_stride", a->o_row_stride, a->seqlen_q));
    FA3_TRY(check_o_stride("args->o_head_stride", a->o_head_stride, a->num_heads));
    FA3_TRY(check_o_stride("args->o_batch_stride", a->o_batch_stride, L.q_batch));
    FA3_TRY(check_o_disjoint(a, c->head_dim_v, &L));

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
           is; right: wr >= seqlen_q - 1; varlen / seqused_k: against the longest sequence).
           Writing -1 for it keeps the kernel's 32-bit i + seqlen_k - seqlen_q ± window within
           range. */
        if (wl >= L.k_bound)
            wl = -1;
        if (wr >= L.q_bound)
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
    double sl2 = c->softcap ? (double)a->softcap * FA3_LOG2E : (double)s * FA3_LOG2E;
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

    FA3_TRY(check_no_alias(a, c, es, os, &L));
    FA3_TRY(fa3_split_check_args(k, a));
    *tiles = (uint32_t)total;
    return FA3_OK;
}

/* ------------------------------------------------------------------ descale values */

/* Floats read back per copy: bounds the host buffer whatever batch · num_heads_k is. */
#define DESCALE_CHUNK 16384

/* See runtime.h. */
const char *fa3_descale_products_bad(int softcap, float scale_log2, float score_mul, float lse_mul,
                                     float dq, float dk, float dv, double *value)
{
    /* what the kernel forms per tile (softmax.c, kg_descales_tile; epilogue.c): fp32 products */
    const float dqk = dq * dk;
    *value = (double)dqk;
    if (!isfinite(dqk) || !(dqk >= FLT_MIN))
        return "descale_q * descale_k";
    const float a = softcap ? score_mul * dqk : scale_log2 * dqk;
    *value = (double)a;
    if (!isfinite(a) || !(a >= FLT_MIN))
        return softcap ? "softmax_scale / softcap * descale_q * descale_k"
                       : "softmax_scale * log2(e) * descale_q * descale_k";
    if (!softcap) {
        const float l = lse_mul * dqk;
        *value = (double)l;
        if (!isfinite(l) || !(l >= FLT_MIN))
            return "softmax_scale * descale_q * descale_k";
    }
    const float o = dv * 448.0f; /* |O| reaches |V8| ≤ 448 times descale_v */
    *value = (double)o;
    if (!isfinite(o))
        return "448 * descale_v";
    return NULL;
}

fa3_status fa3_fwd_check_descales(const fa3_config *c, const fa3_fwd_args *a, void *stream)
{
    if (c->dtype != FA3_DTYPE_E4M3 || a->descales_trusted == 1)
        return FA3_OK;
    if (!a->descale_q && !a->descale_k && !a->descale_v)
        return FA3_OK;
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    const struct { const char *name; const float *p; } ds[3] = {
        {"args->descale_q", a->descale_q}, {"args->descale_k", a->descale_k},
        {"args->descale_v", a->descale_v}};
    const uint64_t n = (uint64_t)a->batch * (uint64_t)a->num_heads_k;
    const size_t cap = n < DESCALE_CHUNK ? (size_t)n : DESCALE_CHUNK;
    float *host = malloc(3 * cap * sizeof *host); /* one chunk of each array */
    if (!host)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "fa3_fwd: out of memory (%zu bytes to read the "
                          "descales back)", 3 * cap * sizeof *host);
    /* the kernel's per-tile constants (fwd.c), to check the products it will form */
    const float s = a->softmax_scale == 0.0f ? (float)(1.0 / sqrt((double)c->head_dim))
                                             : a->softmax_scale;
    const float sl2 = c->softcap ? (float)((double)a->softcap * FA3_LOG2E)
                                 : (float)((double)s * FA3_LOG2E);
    const float smul = c->softcap ? (float)((double)s / (double)a->softcap) : 1.0f;
    const float lmul = c->softcap ? a->softcap : s;
    fa3_status st = FA3_OK;
    for (uint64_t first = 0; first < n && st == FA3_OK; first += cap) {
        const size_t m = n - first < cap ? (size_t)(n - first) : cap;
        for (int i = 0; i < 3 && st == FA3_OK; i++) {
            float *h = host + (size_t)i * cap;
            if (!ds[i].p) {
                for (size_t j = 0; j < m; j++)
                    h[j] = 1.0f; /* NULL: 1.0 */
                continue;
            }
            const CUdeviceptr src = (CUdeviceptr)(uintptr_t)(ds[i].p + first);
            /* A blocking read on the call's stream: the values seen are those the kernel will
               read (work queued on the stream before this call has written them). */
            if (stream) {
                st = FA3_CU(d, cuMemcpyDtoHAsync(h, src, m * sizeof *h, (CUstream)stream));
                if (st == FA3_OK)
                    st = FA3_CU(d, cuStreamSynchronize((CUstream)stream));
            } else {
                st = FA3_CU(d, cuMemcpyDtoH(h, src, m * sizeof *h));
            }
            if (st != FA3_OK) {
                fa3_appenderr(" (reading %s back: %llu floats at %p; set "
                              "args->descales_trusted = 1 to skip the check)", ds[i].name,
                              (unsigned long long)n, (const void *)ds[i].p);
                break;
            }
            for (size_t j = 0; j < m && st == FA3_OK; j++) {
                const float x = h[j];
                if (isfinite(x) && x > 0.0f)
                    continue;
                const uint64_t idx = first + j;
                st = fa3_seterr(FA3_ERR_BAD_SCALE,
                                "%s[%llu] (batch %llu, kv head %llu) is %g: descales must be "
                                "positive and finite", ds[i].name, (unsigned long long)idx,
                                (unsigned long long)(idx / (uint64_t)a->num_heads_k),
                                (unsigned long long)(idx % (uint64_t)a->num_heads_k), (double)x);
            }
        }
        for (size_t j = 0; j < m && st == FA3_OK; j++) {
            double v = 0;
            const char *what = fa3_descale_products_bad(c->softcap, sl2, smul, lmul, host[j],
                                                        host[cap + j], host[2 * cap + j], &v);
            if (!what)
                continue;
            const uint64_t idx = first + j;
            st = fa3_seterr(FA3_ERR_BAD_SCALE,
                            "descales at [%llu] (batch %llu, kv head %llu): %s = %g in fp32 "
                            "(descale_q %g, descale_k %g, descale_v %g): the kernel's constants "
                            "would overflow or vanish", (unsigned long long)idx,
                            (unsigned long long)(idx / (uint64_t)a->num_heads_k),
                            (unsigned long long)(idx % (uint64_t)a->num_heads_k), what, v,
                            (double)host[j], (double)host[cap + j], (double)host[2 * cap + j]);
        }
    }
    free(host);
    return st;
}
