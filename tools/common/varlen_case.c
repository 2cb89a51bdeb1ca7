/* Host-side varlen / paged-KV cases (see varlen_case.h). */
#include <stdlib.h>
#include <string.h>

#include "tools/common/varlen_case.h"

const char *vl_pattern_name(vl_pattern p)
{
    static const char *const names[VL_NUM_PATTERNS] = {"random", "long+tiny", "with-empty",
                                                       "short-k", "equal"};
    return p >= 0 && p < VL_NUM_PATTERNS ? names[p] : "?";
}

/* Uniform in lo..hi. */
static int uniform_int(host_rng *r, int lo, int hi)
{
    int v = lo + (int)(rng_uniform(r) * (double)(hi - lo + 1));
    return v > hi ? hi : v;
}

static void lengths(vl_case *c, host_rng *r, vl_pattern p, int max_q, int max_k)
{
    for (int b = 0; b < c->batch; b++) {
        int q = uniform_int(r, 1, max_q), k = uniform_int(r, 1, max_k);
        switch (p) {
        case VL_LONG_AND_TINY:
            q = b == 0 ? max_q : uniform_int(r, 0, 3);
            k = b == 0 ? max_k : uniform_int(r, 0, 3);
            break;
        case VL_WITH_EMPTY:
            if (b % 3 == 1)
                q = 0;
            if (b % 4 == 2)
                k = 0;
            break;
        case VL_SHORT_K:
            q = uniform_int(r, max_q - max_q / 8, max_q);
            k = uniform_int(r, 0, max_k / 16 + 1);
            break;
        case VL_EQUAL:
            q = max_q;
            k = max_k;
            break;
        default:
            break;
        }
        c->len_q[b] = q;
        c->len_k[b] = k;
    }
}

static int make(vl_case *c, host_rng *r, vl_pattern p, int batch, const int *len_q,
                const int *len_k, int max_q, int max_k, int use_seqused, int page_size,
                int share_pages, int poison_tail)
{
    memset(c, 0, sizeof *c);
    c->batch = batch;
    c->len_q = calloc((size_t)batch, sizeof(int));
    c->len_k = calloc((size_t)batch, sizeof(int));
    c->cu_q = calloc((size_t)batch + 1, sizeof(int32_t));
    c->cu_k = calloc((size_t)batch + 1, sizeof(int32_t));
    if (!c->len_q || !c->len_k || !c->cu_q || !c->cu_k)
        goto oom;
    if (len_q) {
        memcpy(c->len_q, len_q, (size_t)batch * sizeof(int));
        memcpy(c->len_k, len_k, (size_t)batch * sizeof(int));
    } else {
        lengths(c, r, p, max_q, max_k);
    }
    if (use_seqused && !(c->seqused = calloc((size_t)batch, sizeof(int32_t))))
        goto oom;
    for (int b = 0; b < batch; b++) {
        /* seqused_k without pages: the stored segment is longer than the keys in use */
        int stored = c->len_k[b] + (use_seqused && page_size == 0 ? uniform_int(r, 0, 5) : 0);
        c->cu_q[b + 1] = c->cu_q[b] + c->len_q[b];
        c->cu_k[b + 1] = c->cu_k[b] + stored;
        if (c->seqused)
            c->seqused[b] = c->len_k[b];
        if (c->len_q[b] > c->max_q)
            c->max_q = c->len_q[b];
        if (c->len_k[b] > c->max_k)
            c->max_k = c->len_k[b];
    }
    c->total_q = c->cu_q[batch];
    c->total_k = c->cu_k[batch] > 0 ? c->cu_k[batch] : 1;
    if (page_size <= 0)
        return 0;

    c->page_size = page_size;
    int mpps = 1, need = 0;
    for (int b = 0; b < batch; b++) {
        int n = (c->len_k[b] + page_size - 1) / page_size;
        mpps = n > mpps ? n : mpps;
        need += n;
    }
    c->max_pages_per_seq = mpps + 1; /* one entry more than any sequence uses */
    c->num_pages = need + 3;         /* a few pages nobody uses */
    int *perm = malloc((size_t)c->num_pages * sizeof(int));
    c->page_table = malloc((size_t)batch * (size_t)c->max_pages_per_seq * sizeof(int32_t));
    if (!perm || !c->page_table) {
        free(perm);
        goto oom;
    }
    for (int i = 0; i < c->num_pages; i++)
        perm[i] = i;
    for (int i = c->num_pages - 1; i > 0; i--) { /* Fisher–Yates */
        int j = uniform_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int next = 0;
    for (int b = 0; b < batch; b++) {
        int32_t *row = c->page_table + (size_t)b * (size_t)c->max_pages_per_seq;
        int n = (c->len_k[b] + page_size - 1) / page_size;
        for (int i = 0; i < c->max_pages_per_seq; i++)
            row[i] = i < n ? perm[next++] : (poison_tail ? -1 : 0);
        /* prefix sharing: sequence 0's first page also starts every other sequence */
        if (share_pages && b > 0 && b % 2 == 0 && n > 0 && c->len_k[0] > 0)
            row[0] = c->page_table[0];
    }
    free(perm);
    return 0;
oom:
    vl_case_free(c);
    return -1;
}

int vl_case_make(vl_case *c, host_rng *r, vl_pattern p, int batch, int max_q, int max_k,
                 int use_seqused, int page_size, int share_pages, int poison_tail)
{
    return make(c, r, p, batch, NULL, NULL, max_q, max_k, use_seqused, page_size, share_pages,
                poison_tail);
}

int vl_case_make_lengths(vl_case *c, host_rng *r, int batch, const int *len_q, const int *len_k,
                         int use_seqused, int page_size, int share_pages, int poison_tail)
{
    return make(c, r, VL_RANDOM, batch, len_q, len_k, 0, 0, use_seqused, page_size, share_pages,
                poison_tail);
}

void vl_case_free(vl_case *c)
{
    free(c->len_q);
    free(c->len_k);
    free(c->cu_q);
    free(c->cu_k);
    free(c->seqused);
    free(c->page_table);
    memset(c, 0, sizeof *c);
}

int64_t vl_key_row(const vl_case *c, int b, int j)
{
    if (c->page_size > 0) {
        int32_t page = c->page_table[(size_t)b * (size_t)c->max_pages_per_seq +
                                     (size_t)(j / c->page_size)];
        return (int64_t)page * c->page_size + j % c->page_size;
    }
    return (int64_t)c->cu_k[b] + j;
}

int64_t vl_key_rows(const vl_case *c)
{
    return c->page_size > 0 ? (int64_t)c->num_pages * c->page_size : c->total_k;
}

double vl_visible_pairs(const vl_case *c, int mask, int wl, int wr)
{
    double pairs = 0;
    for (int b = 0; b < c->batch; b++) {
        const int64_t sq = c->len_q[b], sk = c->len_k[b];
        for (int64_t i = 0; i < sq; i++) {
            const int64_t diag = i + sk - sq;
            int64_t lo = 0, hi = sk - 1;
            if (mask == 1 && diag < hi)
                hi = diag;
            if (mask == 2) {
                if (wl >= 0 && diag - wl > lo)
                    lo = diag - wl;
                if (wr >= 0 && diag + wr < hi)
                    hi = diag + wr;
            }
            if (hi >= lo)
                pairs += (double)(hi - lo + 1);
        }
    }
    return pairs;
}
