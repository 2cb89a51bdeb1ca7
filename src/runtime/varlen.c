/*
 * The varlen and paged-KV arguments of a forward call (fa3jit.h, "Varlen" and "Paged KV"): the
 * host-checkable field rules shared by fa3_fwd and the reference (fa3_fwd_layout_make: which
 * fields a config needs or forbids, their ranges and alignment, and the extents of the Q/O, K/V
 * and LSE views they imply), and the read-back check of the device arrays' contents
 * (fa3_fwd_check_varlen_arrays: cu_seqlens, seqused_k, page_table), which fa3_fwd runs under
 * FA3JIT_DEBUG_VARLEN=1 and the reference always runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

/* ------------------------------------------------------------------ fields */

/* A varlen field given with a config that does not use it. */
static fa3_status not_for(const char *who, const char *field, const char *value, const char *flag)
{
    return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                      "%sargs->%s %s is given but the kernel's config has %s = 0 (set it to %s)",
                      who, field, value, flag, strcmp(field, "max_seqlen_q") == 0 ||
                      strcmp(field, "max_seqlen_k") == 0 || strcmp(field, "num_pages") == 0 ||
                      strcmp(field, "page_size") == 0 || strcmp(field, "max_pages_per_seq") == 0 ||
                      strcmp(field, "page_table_stride") == 0 ? "0" : "NULL");
}

static fa3_status int32_array(const char *who, const char *field, const void *p)
{
    if ((uintptr_t)p % 4 != 0)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "%sargs->%s %p is not 4-byte aligned (int32 array)",
                          who, field, p);
    return FA3_OK;
}

/* See runtime.h. */
fa3_status fa3_fwd_layout_make(const fa3_config *c, const fa3_fwd_args *a, const char *who,
                               fa3_fwd_layout *L)
{
    char v[48];
    memset(L, 0, sizeof *L);
    L->varlen = c->varlen == 1;
    L->paged = c->paged_kv == 1;
    if (a->batch < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->batch %d must be at least 1", who, a->batch);
    if (a->seqlen_q < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->seqlen_q %d must be at least 1%s", who,
                          a->seqlen_q, L->varlen ? " (varlen: total_q, the rows of q and o)" : "");
    /* varlen = 0: none of its fields */
    if (!L->varlen) {
        if (a->cu_seqlens_q || a->cu_seqlens_k) {
            snprintf(v, sizeof v, "%p", a->cu_seqlens_q ? (const void *)a->cu_seqlens_q
                                                        : (const void *)a->cu_seqlens_k);
            return not_for(who, a->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k", v, "varlen");
        }
        if (a->max_seqlen_q || a->max_seqlen_k) {
            snprintf(v, sizeof v, "%d", a->max_seqlen_q ? a->max_seqlen_q : a->max_seqlen_k);
            return not_for(who, a->max_seqlen_q ? "max_seqlen_q" : "max_seqlen_k", v, "varlen");
        }
        if (a->seqused_k && !L->paged)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "%sargs->seqused_k %p is given but the kernel's config has varlen = 0 "
                              "and paged_kv = 0 (seqused_k needs one of them)", who,
                              (const void *)a->seqused_k);
    } else if (!a->cu_seqlens_q || !a->cu_seqlens_k) {
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "%sargs->%s is NULL%s: a varlen config needs both cu_seqlens_q and "
                          "cu_seqlens_k (batch + 1 int32 offsets each)", who,
                          !a->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k",
                          !a->cu_seqlens_q && !a->cu_seqlens_k ? " (and so is cu_seqlens_k)"
                          : !a->cu_seqlens_q ? " while cu_seqlens_k is given"
                                             : " while cu_seqlens_q is given");
    }
    FA3_TRY(int32_array(who, "cu_seqlens_q", a->cu_seqlens_q));
    FA3_TRY(int32_array(who, "cu_seqlens_k", a->cu_seqlens_k));
    FA3_TRY(int32_array(who, "seqused_k", a->seqused_k));

    /* paged_kv = 0: none of its fields */
    if (!L->paged) {
        if (a->page_table) {
            snprintf(v, sizeof v, "%p", (const void *)a->page_table);
            return not_for(who, "page_table", v, "paged_kv");
        }
        const struct { const char *name; int64_t x; } pf[4] = {
            {"num_pages", a->num_pages}, {"page_size", a->page_size},
            {"max_pages_per_seq", a->max_pages_per_seq}, {"page_table_stride", a->page_table_stride}};
        for (int i = 0; i < 4; i++)
            if (pf[i].x != 0) {
                snprintf(v, sizeof v, "%lld", (long long)pf[i].x);
                return not_for(who, pf[i].name, v, "paged_kv");
            }
    } else {
        if (!a->page_table)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                              "%sargs->page_table is NULL: a paged_kv config needs the (batch, "
                              "max_pages_per_seq) int32 page table", who);
        FA3_TRY(int32_array(who, "page_table", a->page_table));
        if (a->page_size < 1 || a->page_size > FA3_MAX_PAGE_SIZE)
            return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->page_size %d is out of range (1..%d)",
                              who, a->page_size, FA3_MAX_PAGE_SIZE);
        if (a->num_pages < 1)
            return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->num_pages %d must be at least 1", who,
                              a->num_pages);
        if (a->max_pages_per_seq < 1)
            return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->max_pages_per_seq %d must be at least 1",
                              who, a->max_pages_per_seq);
        if (a->page_table_stride < a->max_pages_per_seq)
            return fa3_seterr(FA3_ERR_BAD_STRIDE,
                              "%sargs->page_table_stride %lld is below args->max_pages_per_seq %d "
                              "(rows of the page table would overlap)", who,
                              (long long)a->page_table_stride, a->max_pages_per_seq);
        /* The kernel indexes page_table[b * stride + p] and key rows in 32-bit integers. */
        if (a->page_table_stride > INT32_MAX ||
            (int64_t)(a->batch - 1) * a->page_table_stride + a->max_pages_per_seq > INT32_MAX)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sthe page table (batch %d, args->page_table_stride %lld) has more "
                              "than 2^31-1 entries", who, a->batch,
                              (long long)a->page_table_stride);
        L->capacity = (int64_t)a->max_pages_per_seq * a->page_size;
        if (L->capacity > INT32_MAX / 2)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->max_pages_per_seq %d * args->page_size %d keys per sequence "
                              "exceeds 2^30", who, a->max_pages_per_seq, a->page_size);
    }

    /* Keys: the K/V view and the longest key count of a sequence. */
    if (!(L->varlen && L->paged) && a->seqlen_k < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->seqlen_k %d must be at least 1%s", who,
                          a->seqlen_k, L->varlen ? " (varlen: total_k, the rows of k and v)"
                          : L->paged ? " (paged: keys per sequence)" : "");
    if (L->paged) {
        L->k_batch = a->num_pages;
        L->k_rows = a->page_size;
        if (!L->varlen && a->seqlen_k > L->capacity)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->seqlen_k %d exceeds the page table's capacity "
                              "max_pages_per_seq %d * page_size %d = %lld keys", who, a->seqlen_k,
                              a->max_pages_per_seq, a->page_size, (long long)L->capacity);
    } else {
        L->k_batch = L->varlen ? 1 : a->batch;
        L->k_rows = a->seqlen_k;
        L->capacity = a->seqlen_k;
    }
    /* Queries: the Q/O view, LSE's size. */
    L->q_batch = L->varlen ? 1 : a->batch;
    if (L->varlen) {
        if (a->max_seqlen_q < 0 || a->max_seqlen_q > a->seqlen_q)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->max_seqlen_q %d is out of range (0..seqlen_q %d, the rows "
                              "of q; 0: no query, nothing is launched)", who, a->max_seqlen_q,
                              a->seqlen_q);
        if (a->max_seqlen_k < 0 || a->max_seqlen_k > L->capacity)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->max_seqlen_k %d is out of range (0..%lld, %s)", who,
                              a->max_seqlen_k, (long long)L->capacity,
                              L->paged ? "the page table's capacity max_pages_per_seq * page_size"
                                       : "seqlen_k, the rows of k");
        L->q_bound = a->max_seqlen_q;
        L->k_bound = a->max_seqlen_k;
    } else {
        L->q_bound = a->seqlen_q;
        L->k_bound = a->seqused_k ? (int)L->capacity : a->seqlen_k;
    }
    L->lse_floats = (int64_t)L->q_batch * a->num_heads * a->seqlen_q; /* varlen: (H, total_q) */
    return FA3_OK;
}

/* ------------------------------------------------------------------ device arrays */

/* n int32 at src into host (blocking, on stream: the values the kernel will read). */
fa3_status fa3_read_ints(const fa3_driver *d, int32_t *host, const int32_t *src, size_t n,
                         void *stream, const char *who, const char *field)
{
    fa3_status st;
    const CUdeviceptr p = (CUdeviceptr)(uintptr_t)src;
    if (stream) {
        st = FA3_CU(d, cuMemcpyDtoHAsync(host, p, n * 4, (CUstream)stream));
        if (st == FA3_OK)
            st = FA3_CU(d, cuStreamSynchronize((CUstream)stream));
    } else {
        st = FA3_CU(d, cuMemcpyDtoH(host, p, n * 4));
    }
    if (st != FA3_OK)
        fa3_appenderr(" (%sreading args->%s back: %zu int32 at %p)", who, field, n,
                      (const void *)src);
    return st;
}

/* cu (n = batch + 1 entries) starts at 0, never decreases, ends within rows (rows < 0: no
   bound); every length at most max_len (< 0: no bound). */
static fa3_status check_offsets(const int32_t *cu, int batch, int64_t rows, int max_len,
                                const char *who, const char *field, const char *rows_name,
                                const char *max_name)
{
    if (cu[0] != 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "%sargs->%s[0] is %d: the offsets must start at 0",
                          who, field, cu[0]);
    for (int b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->%s[%d] = %d is below args->%s[%d] = %d: the offsets must "
                              "not decrease", who, field, b + 1, cu[b + 1], field, b, cu[b]);
        if (rows >= 0 && cu[b + 1] > rows)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%sargs->%s[%d] = %d is past the tensor's %lld rows (args->%s)",
                              who, field, b + 1, cu[b + 1], (long long)rows, rows_name);
        if (max_len >= 0 && cu[b + 1] - cu[b] > max_len)
            return fa3_seterr(FA3_ERR_BAD_SHAPE,
                              "%ssequence %d has %d rows by args->%s (%d..%d), more than args->%s "
                              "%d", who, b, cu[b + 1] - cu[b], field, cu[b], cu[b + 1],
                              max_name, max_len);
    }
    return FA3_OK;
}

/* See runtime.h. */
fa3_status fa3_fwd_check_varlen_arrays(const fa3_config *c, const fa3_fwd_args *a, const char *who,
                                       void *stream)
{
    fa3_fwd_layout L;
    FA3_TRY(fa3_fwd_layout_make(c, a, who, &L));
    if (!L.varlen && !a->seqused_k && !L.paged)
        return FA3_OK;
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    const int batch = a->batch;
    const size_t per_row = L.paged ? (size_t)a->max_pages_per_seq : 0;
    const size_t n = 3 * ((size_t)batch + 1) + per_row;
    int32_t *buf = malloc(n * sizeof *buf);
    if (!buf)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "%sout of memory (%zu bytes to read the varlen "
                          "arrays back)", who, n * sizeof *buf);
    int32_t *cu_q = buf, *cu_k = buf + batch + 1, *used = buf + 2 * ((size_t)batch + 1);
    int32_t *pages = buf + 3 * ((size_t)batch + 1);
    fa3_status st = FA3_OK;
    if (L.varlen) {
        st = fa3_read_ints(d, cu_q, a->cu_seqlens_q, (size_t)batch + 1, stream, who, "cu_seqlens_q");
        if (st == FA3_OK)
            st = fa3_read_ints(d, cu_k, a->cu_seqlens_k, (size_t)batch + 1, stream, who,
                           "cu_seqlens_k");
        if (st == FA3_OK)
            st = check_offsets(cu_q, batch, a->seqlen_q, a->max_seqlen_q, who, "cu_seqlens_q",
                               "seqlen_q", "max_seqlen_q");
        /* Paged: cu_seqlens_k only gives lengths (no tensor of total_k rows); with seqused_k
           they are bounds and seqused_k is checked against max_seqlen_k instead. */
        if (st == FA3_OK)
            st = check_offsets(cu_k, batch, L.paged ? -1 : a->seqlen_k,
                               a->seqused_k ? -1 : a->max_seqlen_k, who, "cu_seqlens_k",
                               "seqlen_k", "max_seqlen_k");
    }
    if (st == FA3_OK && a->seqused_k)
        st = fa3_read_ints(d, used, a->seqused_k, (size_t)batch, stream, who, "seqused_k");
    for (int b = 0; b < batch && st == FA3_OK; b++) {
        const int64_t len_k = L.varlen ? (int64_t)cu_k[b + 1] - cu_k[b] : a->seqlen_k;
        int64_t keys = len_k;
        if (a->seqused_k) {
            /* Capacity: the sequence's own keys, or its pages when paged. */
            const int64_t cap = L.paged ? L.capacity : len_k;
            keys = used[b];
            if (keys < 0 || keys > cap)
                st = fa3_seterr(FA3_ERR_BAD_SHAPE,
                                "%sargs->seqused_k[%d] = %d is out of range (0..%lld, %s)", who, b,
                                used[b], (long long)cap,
                                L.paged ? "the page table's capacity max_pages_per_seq * page_size"
                                : L.varlen ? "the sequence's length by cu_seqlens_k"
                                           : "seqlen_k");
            else if (L.varlen && keys > a->max_seqlen_k)
                st = fa3_seterr(FA3_ERR_BAD_SHAPE,
                                "%sargs->seqused_k[%d] = %d exceeds args->max_seqlen_k %d", who, b,
                                used[b], a->max_seqlen_k);
        } else if (L.paged && keys > L.capacity) {
            st = fa3_seterr(FA3_ERR_BAD_SHAPE,
                            "%ssequence %d has %lld keys by args->cu_seqlens_k, more than the page "
                            "table's capacity max_pages_per_seq %d * page_size %d", who, b,
                            (long long)keys, a->max_pages_per_seq, a->page_size);
        }
        if (st != FA3_OK || !L.paged || keys == 0)
            continue;
        /* The pages the sequence's keys use (entries past them are never read). */
        const int64_t used_pages = (keys + a->page_size - 1) / a->page_size;
        st = fa3_read_ints(d, pages, a->page_table + (int64_t)b * a->page_table_stride,
                       (size_t)used_pages, stream, who, "page_table");
        for (int64_t p = 0; p < used_pages && st == FA3_OK; p++)
            if (pages[p] < 0 || pages[p] >= a->num_pages)
                st = fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                                "%sargs->page_table[%d][%lld] = %d is out of range (0..num_pages-1 "
                                "= %d; sequence %d reads keys %lld..%lld through it)", who, b,
                                (long long)p, pages[p], a->num_pages - 1, b,
                                (long long)p * a->page_size,
                                (long long)((p + 1) * a->page_size < keys ? (p + 1) * a->page_size
                                                                          : keys) - 1);
    }
    free(buf);
    return st;
}
