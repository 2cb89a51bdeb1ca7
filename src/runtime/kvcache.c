/*
 * The KV-cache append (fa3_kvcache_append): the argument struct's init and size rules, the host
 * checks (every one before the driver or NVRTC is touched, each naming the field and its value),
 * the FA3JIT_DEBUG_VARLEN read-back of the device arrays, and the launch of kvcache_kernel.c's
 * kernel on the caller's stream. The kernels are compiled at the first call through NVRTC
 * (rtc.c: the image per compute capability, the module per CUcontext, for the life of the
 * process, as the quantizer's).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kvcache.h"
#include "runtime/rtc.h"
#include "runtime/runtime.h"

/* The kernels, by copy unit: FN_U16 moves 16 bytes a thread, ... FN_U1 one. */
enum { FN_U16 = 0, FN_U8, FN_U4, FN_U2, FN_U1, FN_COUNT };
static const char *const kv_functions[FN_COUNT] = {
    "fa3_kvcache_append_u16", "fa3_kvcache_append_u8", "fa3_kvcache_append_u4",
    "fa3_kvcache_append_u2", "fa3_kvcache_append_u1"};
static fa3_rtc_program kv_program = {.what = "KV-cache append kernel",
                                     .source = fa3_kvcache_kernel_src,
                                     .file_name = "fa3_kvcache.cu",
                                     .functions = kv_functions,
                                     .num_functions = FN_COUNT,
                                     .min_cc = 0};

static const fa3_struct_kind args_kind = {"fa3_kvcache_append_args",
                                          "fa3_kvcache_append_args_init()",
                                          sizeof(fa3_kvcache_append_args), NULL, 0};
static const fa3_kvcache_append_args args_defaults = {
    .struct_size = sizeof(fa3_kvcache_append_args)};

void fa3_kvcache_append_args_init_sized(fa3_kvcache_append_args *args, size_t struct_size)
{
    if (args)
        fa3_struct_init(&args_kind, args, struct_size, &args_defaults);
}

/* ------------------------------------------------------------------ argument checks */

static int esize_of(fa3_dtype dt)
{
    return dt == FA3_DTYPE_E4M3 ? 1 : 2;
}

static fa3_status check_shape(const char *name, int v, const char *what)
{
    if (v < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "args->%s %d must be at least 1%s", name, v, what);
    return FA3_OK;
}

static fa3_status check_stride(const char *name, int64_t s)
{
    if (s < 0)
        return fa3_seterr(FA3_ERR_BAD_STRIDE, "args->%s %lld is negative", name, (long long)s);
    return FA3_OK;
}

/* A field of the other cache kind, given. */
static fa3_status not_for(const char *field, long long value, const char *kind, const char *why)
{
    return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->%s %lld is given with a %s cache (%s): "
                      "set it to 0", field, value, kind, why);
}

/* One tensor of the call: (batch, rows, heads, dim) elements at p with strides. */
typedef struct kv_tensor {
    const char *name;  /* "k_new" */
    const void *p;
    int batch, rows, heads, dim;
    int64_t bs, rs, hs;
} kv_tensor;

static fa3_byte_range range_of(const kv_tensor *t, int esize)
{
    return fa3_tensor_range(t->p, t->batch, t->rows, t->heads, t->dim, t->bs, t->rs, t->hs, esize);
}

/* The widest copy unit (16..1 bytes) dividing x (bytes), starting from unit. */
static int unit_dividing(int unit, uint64_t x)
{
    while (unit > 1 && x % (uint64_t)unit != 0)
        unit >>= 1;
    return unit;
}

/* A tensor's stride in units; 0 for an axis of one element (never stepped). */
static int64_t in_units(int64_t stride, int extent, int esize, int unit)
{
    return extent > 1 ? stride * esize / unit : 0;
}

fa3_status fa3_kvcache_validate(const fa3_kvcache_append_args *args, fa3_kvcache_params *p)
{
    if (!args)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args is NULL");
    fa3_kvcache_append_args in;
    FA3_TRY(fa3_struct_in(&args_kind, args, &in, &args_defaults));
    const fa3_kvcache_append_args *a = &in;

    if (a->dtype != FA3_DTYPE_BF16 && a->dtype != FA3_DTYPE_FP16 && a->dtype != FA3_DTYPE_E4M3)
        return fa3_seterr(FA3_ERR_BAD_DTYPE,
                          "args->dtype %d is not supported: the cache must be bf16 (%d), fp16 "
                          "(%d) or e4m3 (%d)", (int)a->dtype, (int)FA3_DTYPE_BF16,
                          (int)FA3_DTYPE_FP16, (int)FA3_DTYPE_E4M3);
    const int esize = esize_of(a->dtype);
    if (!a->k_new || !a->v_new || !a->k_cache || !a->v_cache || !a->cache_seqlens)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->%s is NULL%s",
                          !a->k_new ? "k_new" : !a->v_new ? "v_new" : !a->k_cache ? "k_cache"
                          : !a->v_cache ? "v_cache" : "cache_seqlens",
                          a->k_new && a->v_new && a->k_cache && a->v_cache
                              ? " (the rows cached before the append: an int32 device array of "
                                "batch entries)" : "");

    /* shapes */
    FA3_TRY(check_shape("batch", a->batch, ""));
    FA3_TRY(check_shape("seqlen_new", a->seqlen_new, " (the rows to append per sequence)"));
    FA3_TRY(check_shape("num_heads_k", a->num_heads_k, ""));
    if (a->head_dim < 1)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM, "args->head_dim %d must be at least 1",
                          a->head_dim);
    if (a->head_dim_v < 0)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM_V,
                          "args->head_dim_v %d must be at least 1 (0 = head_dim)", a->head_dim_v);
    const int hd_v = a->head_dim_v ? a->head_dim_v : a->head_dim;

    int64_t rows_new, elems;
    if (__builtin_mul_overflow((int64_t)a->batch * a->seqlen_new, (int64_t)a->num_heads_k,
                               &rows_new) ||
        __builtin_mul_overflow(rows_new, (int64_t)a->head_dim + hd_v, &elems) ||
        elems > INT64_MAX >> 5)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "batch %d x seqlen_new %d x num_heads_k %d x (head_dim %d + head_dim_v "
                          "%d) elements to append exceed 2^58", a->batch, a->seqlen_new,
                          a->num_heads_k, a->head_dim, hd_v);

    /* the cache kind */
    const int paged = a->page_table != NULL;
    int slots, rows;
    int64_t capacity;
    if (paged) {
        if (a->cache_batch_idx)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->cache_batch_idx %p is given with a paged cache (page_table "
                              "%p): the page table maps sequences to pages; cache_batch_idx is "
                              "for a contiguous cache only", (const void *)a->cache_batch_idx,
                              (const void *)a->page_table);
        if (a->batch_cache)
            return not_for("batch_cache", a->batch_cache, "paged",
                           "its entries are num_pages pages");
        if (a->seqlen_cache)
            return not_for("seqlen_cache", a->seqlen_cache, "paged",
                           "its rows are page_size rows a page");
        if (a->page_size < 1 || a->page_size > FA3_MAX_PAGE_SIZE)
            return fa3_seterr(FA3_ERR_BAD_SHAPE, "args->page_size %d is out of range (1..%d)",
                              a->page_size, FA3_MAX_PAGE_SIZE);
        FA3_TRY(check_shape("num_pages", a->num_pages, ""));
        FA3_TRY(check_shape("max_pages_per_seq", a->max_pages_per_seq, ""));
        if (a->page_table_stride < a->max_pages_per_seq)
            return fa3_seterr(FA3_ERR_BAD_STRIDE,
                              "args->page_table_stride %lld is below args->max_pages_per_seq %d "
                              "(rows of the page table would overlap)",
                              (long long)a->page_table_stride, a->max_pages_per_seq);
        if (a->page_table_stride > INT32_MAX ||
            (int64_t)(a->batch - 1) * a->page_table_stride + a->max_pages_per_seq > INT32_MAX)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "the page table (batch %d, args->page_table_stride %lld) has more "
                              "than 2^31-1 entries", a->batch, (long long)a->page_table_stride);
        capacity = (int64_t)a->max_pages_per_seq * a->page_size;
        if (capacity > INT32_MAX / 2)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "args->max_pages_per_seq %d * args->page_size %d rows per sequence "
                              "exceeds 2^30", a->max_pages_per_seq, a->page_size);
        slots = a->num_pages;
        rows = a->page_size;
    } else {
        const struct { const char *name; int64_t x; } pf[4] = {
            {"num_pages", a->num_pages}, {"page_size", a->page_size},
            {"max_pages_per_seq", a->max_pages_per_seq},
            {"page_table_stride", a->page_table_stride}};
        for (int i = 0; i < 4; i++)
            if (pf[i].x != 0)
                return not_for(pf[i].name, (long long)pf[i].x, "contiguous",
                               "page_table is NULL");
        FA3_TRY(check_shape("batch_cache", a->batch_cache, " (cache entries)"));
        FA3_TRY(check_shape("seqlen_cache", a->seqlen_cache, " (rows of each cache entry)"));
        if (!a->cache_batch_idx && a->batch_cache < a->batch)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "args->batch_cache %d is below args->batch %d: without "
                              "cache_batch_idx sequence b appends to cache entry b",
                              a->batch_cache, a->batch);
        capacity = a->seqlen_cache;
        slots = a->batch_cache;
        rows = a->seqlen_cache;
    }
    if (a->seqlen_new > capacity)
        return fa3_seterr(FA3_ERR_BAD_SHAPE,
                          "args->seqlen_new %d exceeds the cache's capacity of %lld rows per "
                          "sequence (%s): the new rows cannot fit", a->seqlen_new,
                          (long long)capacity, paged ? "max_pages_per_seq * page_size"
                                                     : "seqlen_cache");

    /* pointers */
    FA3_TRY(fa3_check_aligned("args->k_new", a->k_new, (unsigned)esize));
    FA3_TRY(fa3_check_aligned("args->v_new", a->v_new, (unsigned)esize));
    FA3_TRY(fa3_check_aligned("args->k_cache", a->k_cache, (unsigned)esize));
    FA3_TRY(fa3_check_aligned("args->v_cache", a->v_cache, (unsigned)esize));
    FA3_TRY(fa3_check_aligned("args->cache_seqlens", a->cache_seqlens, 4));
    FA3_TRY(fa3_check_aligned("args->cache_batch_idx", a->cache_batch_idx, 4));
    FA3_TRY(fa3_check_aligned("args->seqused_out", a->seqused_out, 4));
    FA3_TRY(fa3_check_aligned("args->page_table", a->page_table, 4));

    /* strides */
    const kv_tensor t[4] = {
        {"k_new", a->k_new, a->batch, a->seqlen_new, a->num_heads_k, a->head_dim,
         a->k_new_batch_stride, a->k_new_row_stride, a->k_new_head_stride},
        {"v_new", a->v_new, a->batch, a->seqlen_new, a->num_heads_k, hd_v,
         a->v_new_batch_stride, a->v_new_row_stride, a->v_new_head_stride},
        {"k_cache", a->k_cache, slots, rows, a->num_heads_k, a->head_dim,
         a->k_cache_batch_stride, a->k_cache_row_stride, a->k_cache_head_stride},
        {"v_cache", a->v_cache, slots, rows, a->num_heads_k, hd_v,
         a->v_cache_batch_stride, a->v_cache_row_stride, a->v_cache_head_stride},
    };
    char name[64], what[64];
    for (int i = 0; i < 4; i++) {
        static const char *const axis[3] = {"batch", "row", "head"};
        const int64_t s[3] = {t[i].bs, t[i].rs, t[i].hs};
        for (int j = 0; j < 3; j++) {
            snprintf(name, sizeof name, "%s_%s_stride", t[i].name, axis[j]);
            FA3_TRY(check_stride(name, s[j]));
        }
        snprintf(what, sizeof what, "args->%s", t[i].name);
        FA3_TRY(fa3_check_extent(what, t[i].batch, t[i].rows, t[i].heads, t[i].dim, t[i].bs,
                                 t[i].rs, t[i].hs));
    }
    for (int i = 2; i < 4; i++) { /* the caches are written: no element twice */
        char n0[48], n1[48], n2[48];
        snprintf(n0, sizeof n0, "args->%s_head_stride", t[i].name);
        snprintf(n1, sizeof n1, "args->%s_row_stride", t[i].name);
        snprintf(n2, sizeof n2, "args->%s_batch_stride", t[i].name);
        const fa3_axis ax[3] = {{n0, t[i].hs, t[i].heads}, {n1, t[i].rs, t[i].rows},
                                {n2, t[i].bs, t[i].batch}};
        FA3_TRY(fa3_check_disjoint(ax, t[i].dim, i == 2 ? "head_dim" : "head_dim_v",
                                   t[i].name));
    }

    /* overlaps (byte ranges, conservative) */
    if (a->k_cache == a->v_cache)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "args->k_cache and args->v_cache are both %p: K and V would be written "
                          "to the same elements", a->k_cache);
    fa3_byte_range r[4];
    for (int i = 0; i < 4; i++)
        r[i] = range_of(&t[i], esize);
    for (int i = 0; i < 2; i++)
        for (int j = 2; j < 4; j++)
            if (fa3_ranges_meet(r[i], r[j]))
                return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                                  "args->%s (bytes %p..%p) overlaps args->%s (bytes %p..%p): "
                                  "the new rows would be read while the cache is written",
                                  t[i].name, (void *)r[i].lo, (void *)r[i].hi, t[j].name,
                                  (void *)r[j].lo, (void *)r[j].hi);
    const int64_t pt_entries =
        paged ? (int64_t)(a->batch - 1) * a->page_table_stride + a->max_pages_per_seq : 0;
    const struct { const char *name; const void *p; uint64_t bytes; } ints[3] = {
        {"cache_seqlens", a->cache_seqlens, 4 * (uint64_t)a->batch},
        {"cache_batch_idx", a->cache_batch_idx, 4 * (uint64_t)a->batch},
        {"page_table", a->page_table, 4 * (uint64_t)pt_entries}};
    for (int i = 0; i < 3; i++) {
        if (!ints[i].p)
            continue;
        const fa3_byte_range ri = fa3_bytes_range(ints[i].p, ints[i].bytes);
        for (int j = 2; j < 4; j++)
            if (fa3_ranges_meet(ri, r[j]))
                return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                                  "args->%s (%llu bytes at %p) overlaps args->%s (bytes "
                                  "%p..%p), which the call writes", ints[i].name,
                                  (unsigned long long)ints[i].bytes, ints[i].p, t[j].name,
                                  (void *)r[j].lo, (void *)r[j].hi);
        if (a->seqused_out &&
            fa3_ranges_meet(ri, fa3_bytes_range(a->seqused_out, 4 * (uint64_t)a->batch)))
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "args->seqused_out (%d int32 at %p) overlaps args->%s (at %p), "
                              "which the kernel reads while it writes seqused_out", a->batch,
                              (void *)a->seqused_out, ints[i].name, ints[i].p);
    }
    if (a->seqused_out) {
        const fa3_byte_range so = fa3_bytes_range(a->seqused_out, 4 * (uint64_t)a->batch);
        for (int j = 0; j < 4; j++)
            if (fa3_ranges_meet(so, r[j]))
                return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                                  "args->seqused_out (%d int32 at %p) overlaps args->%s (bytes "
                                  "%p..%p)", a->batch, (void *)a->seqused_out, t[j].name,
                                  (void *)r[j].lo, (void *)r[j].hi);
    }

    /* the copy unit: the widest dividing every address, stride (of an axis of more than one
       element) and row, in bytes */
    int unit = 16;
    for (int i = 0; i < 4; i++) {
        unit = unit_dividing(unit, (uint64_t)(uintptr_t)t[i].p);
        unit = unit_dividing(unit, (uint64_t)t[i].dim * (uint64_t)esize);
        if (t[i].batch > 1)
            unit = unit_dividing(unit, (uint64_t)t[i].bs * (uint64_t)esize);
        if (t[i].rows > 1)
            unit = unit_dividing(unit, (uint64_t)t[i].rs * (uint64_t)esize);
        if (t[i].heads > 1)
            unit = unit_dividing(unit, (uint64_t)t[i].hs * (uint64_t)esize);
    }

    *p = (fa3_kvcache_params){0};
    p->k_new = (uint64_t)(uintptr_t)a->k_new;
    p->v_new = (uint64_t)(uintptr_t)a->v_new;
    p->k_cache = (uint64_t)(uintptr_t)a->k_cache;
    p->v_cache = (uint64_t)(uintptr_t)a->v_cache;
    p->cache_seqlens = (uint64_t)(uintptr_t)a->cache_seqlens;
    p->cache_batch_idx = (uint64_t)(uintptr_t)a->cache_batch_idx;
    p->seqused_out = (uint64_t)(uintptr_t)a->seqused_out;
    p->page_table = (uint64_t)(uintptr_t)a->page_table;
    int64_t *st[4][3] = {{&p->kn_bs, &p->kn_rs, &p->kn_hs}, {&p->vn_bs, &p->vn_rs, &p->vn_hs},
                         {&p->kc_bs, &p->kc_rs, &p->kc_hs}, {&p->vc_bs, &p->vc_rs, &p->vc_hs}};
    for (int i = 0; i < 4; i++) {
        *st[i][0] = in_units(t[i].bs, t[i].batch, esize, unit);
        *st[i][1] = in_units(t[i].rs, t[i].rows, esize, unit);
        *st[i][2] = in_units(t[i].hs, t[i].heads, esize, unit);
    }
    p->page_table_stride = paged ? a->page_table_stride : 0;
    p->batch = a->batch;
    p->seqlen_new = a->seqlen_new;
    p->num_heads_k = a->num_heads_k;
    p->k_row_units = a->head_dim * esize / unit;
    p->v_row_units = hd_v * esize / unit;
    p->k_units = rows_new * p->k_row_units;
    p->total_units = p->k_units + rows_new * p->v_row_units;
    p->capacity = (int32_t)capacity;
    p->slots = slots;
    p->page_size = paged ? a->page_size : 0;
    p->unit = unit;
    return FA3_OK;
}

/* ------------------------------------------------------------------ debug read-back */

/* A cache row one new row lands on (slot · rows + row), and whose it is. */
typedef struct kv_target {
    int64_t at;
    int b, i;
} kv_target;

static int target_cmp(const void *x, const void *y)
{
    const kv_target *a = x, *b = y;
    return a->at < b->at ? -1 : a->at > b->at ? 1 : a->b != b->b ? (a->b < b->b ? -1 : 1)
                                                                  : (a->i < b->i ? -1 : 1);
}

/* No two new rows on one cache row (sorted targets t of n new rows): a write race. Of the
 * colliding pairs, the one whose first row comes first in (sequence, row) order is named, so the
 * message does not depend on where the pages lie. */
static fa3_status check_targets(kv_target *t, size_t n, const fa3_kvcache_append_args *a)
{
    qsort(t, n, sizeof *t, target_cmp);
    const int64_t rows = a->page_table ? a->page_size : a->seqlen_cache;
    size_t hit = 0;
    for (size_t k = 1; k < n; k++)
        if (t[k].at == t[k - 1].at &&
            (!hit || t[k - 1].b < t[hit - 1].b ||
             (t[k - 1].b == t[hit - 1].b && t[k - 1].i < t[hit - 1].i)))
            hit = k;
    if (!hit)
        return FA3_OK;
    return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                      "sequence %d's new row %d and sequence %d's new row %d land on the same "
                      "cache row (row %lld of %s %lld): the new rows of two sequences must not "
                      "share a cache row (%s)", t[hit - 1].b, t[hit - 1].i, t[hit].b, t[hit].i,
                      (long long)(t[hit].at % rows), a->page_table ? "page" : "cache entry",
                      (long long)(t[hit].at / rows),
                      a->page_table ? "args->page_table shares the page"
                                    : "args->cache_batch_idx repeats the entry");
}

fa3_status fa3_kvcache_check_arrays(const fa3_kvcache_append_args *args, void *stream)
{
    fa3_kvcache_params p;
    FA3_TRY(fa3_kvcache_validate(args, &p));
    fa3_kvcache_append_args a;
    FA3_TRY(fa3_struct_in(&args_kind, args, &a, &args_defaults));
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    const int paged = a.page_table != NULL;
    /* the pages one sequence's new rows can span: ceil(seqlen_new / page_size) + 1 */
    const size_t span = paged ? (size_t)(a.seqlen_new + a.page_size - 1) / a.page_size + 1 : 0;
    int32_t *buf = malloc((2 * (size_t)a.batch + span) * sizeof *buf);
    if (!buf)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory (reading the KV-cache arrays "
                          "back)");
    int32_t *lens = buf, *idx = buf + a.batch, *pages = buf + 2 * (size_t)a.batch;
    const size_t n_new = (size_t)a.batch * (size_t)a.seqlen_new;
    kv_target *targets = malloc(n_new * sizeof *targets);
    if (!targets) {
        free(buf);
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory (%zu new rows to check)", n_new);
    }
    fa3_status st = fa3_read_ints(d, lens, a.cache_seqlens, (size_t)a.batch, stream, "",
                                  "cache_seqlens");
    if (st == FA3_OK && a.cache_batch_idx)
        st = fa3_read_ints(d, idx, a.cache_batch_idx, (size_t)a.batch, stream, "",
                           "cache_batch_idx");
    for (int b = 0; b < a.batch && st == FA3_OK; b++) {
        const int64_t end = (int64_t)lens[b] + a.seqlen_new;
        if (lens[b] < 0) {
            st = fa3_seterr(FA3_ERR_BAD_SHAPE,
                            "args->cache_seqlens[%d] = %d is out of range (0..%lld): a negative "
                            "count of cached rows", b, lens[b],
                            (long long)p.capacity - a.seqlen_new);
            break;
        }
        if (end > p.capacity) {
            st = fa3_seterr(FA3_ERR_BAD_SHAPE,
                            "args->cache_seqlens[%d] = %d is out of range (0..%lld: with "
                            "seqlen_new %d the rows would end at %lld, past the cache's "
                            "capacity of %d rows, %s)", b, lens[b],
                            (long long)p.capacity - a.seqlen_new, a.seqlen_new,
                            (long long)end, p.capacity,
                            paged ? "max_pages_per_seq * page_size" : "seqlen_cache");
            break;
        }
        if (a.cache_batch_idx && (idx[b] < 0 || idx[b] >= a.batch_cache)) {
            st = fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                            "args->cache_batch_idx[%d] = %d is out of range (0..batch_cache-1 "
                            "= %d)", b, idx[b], a.batch_cache - 1);
            break;
        }
        if (!paged) {
            const int64_t slot = a.cache_batch_idx ? idx[b] : b;
            for (int i = 0; i < a.seqlen_new; i++)
                targets[(size_t)b * a.seqlen_new + i] =
                    (kv_target){slot * a.seqlen_cache + lens[b] + i, b, i};
            continue;
        }
        const int64_t first = lens[b] / a.page_size, last = (end - 1) / a.page_size;
        st = fa3_read_ints(d, pages, a.page_table + (int64_t)b * a.page_table_stride + first,
                           (size_t)(last - first + 1), stream, "", "page_table");
        for (int64_t q = first; q <= last && st == FA3_OK; q++) {
            const int32_t page = pages[q - first];
            if (page < 0 || page >= a.num_pages) {
                const int64_t lo = q * a.page_size > lens[b] ? q * a.page_size : lens[b];
                const int64_t hi = (q + 1) * a.page_size < end ? (q + 1) * a.page_size : end;
                st = fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                                "args->page_table[%d][%lld] = %d is out of range (0..num_pages-1 "
                                "= %d; sequence %d appends rows %lld..%lld through it)", b,
                                (long long)q, page, a.num_pages - 1, b, (long long)lo,
                                (long long)hi - 1);
            }
        }
        for (int i = 0; i < a.seqlen_new && st == FA3_OK; i++) {
            const int64_t pos = (int64_t)lens[b] + i;
            targets[(size_t)b * a.seqlen_new + i] =
                (kv_target){(int64_t)pages[pos / a.page_size - first] * a.page_size +
                                pos % a.page_size, b, i};
        }
    }
    if (st == FA3_OK)
        st = check_targets(targets, n_new, &a);
    free(targets);
    free(buf);
    return st;
}

/* ------------------------------------------------------------------ entry points */

fa3_status fa3_kvcache_append(fa3_context *ctx, const fa3_kvcache_append_args *args,
                              void *stream)
{
    if (!ctx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "ctx is NULL");
    fa3_kvcache_params p;
    FA3_TRY(fa3_kvcache_validate(args, &p));

    const fa3_driver *drv = NULL;
    CUfunction fn[FN_COUNT];
    FA3_TRY(fa3_rtc_functions(&kv_program, &drv, fn));
    if (ctx->debug_varlen) /* FA3JIT_DEBUG_VARLEN=1 */
        FA3_TRY(fa3_kvcache_check_arrays(args, stream));
    const int f = p.unit == 16 ? FN_U16 : p.unit == 8 ? FN_U8 : p.unit == 4 ? FN_U4
                  : p.unit == 2 ? FN_U2 : FN_U1;
    int64_t work = p.total_units > p.batch ? p.total_units : p.batch;
    int64_t blocks = (work + KVCACHE_THREADS - 1) / KVCACHE_THREADS;
    if (blocks > KVCACHE_MAX_BLOCKS)
        blocks = KVCACHE_MAX_BLOCKS;
    void *kparams[] = {&p};
    return FA3_CU(drv, cuLaunchKernel(fn[f], (unsigned)blocks, 1, 1, KVCACHE_THREADS, 1, 1, 0,
                                      (CUstream)stream, kparams, NULL));
}

fa3_status fa3_kvcache_build_image(int cc, void **image, size_t *size, int *is_ptx)
{
    return fa3_rtc_build_image(&kv_program, cc, image, size, is_ptx);
}
