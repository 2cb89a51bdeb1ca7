/*
 * fa3-gen check's varlen / paged-KV cases (check --varlen, --paged P, and the varlen part of
 * --all): for each configuration a few batches of the shapes that break varlen kernels — random
 * lengths, one long sequence next to many tiny ones, zero-length q and k segments, keys much
 * shorter than queries, seqused_k below the stored keys; paged: shuffled page tables with pages
 * shared between sequences, table entries past a sequence's pages -1, decode (one query a
 * sequence) — each run and judged by tools/common/varlen_check.c (the code test_varlen runs):
 * the reference against an fp64 host attention and bitwise against its dense path, the kernel
 * against the reference under the tolerance rule, NaN-prefilled O/LSE with rows past
 * cu_seqlens_q[batch] and guards after the end untouched, and the kernel against the dense
 * kernel per sequence on the same data. One line per case, as check's dense cases.
 */
#include <stdio.h>
#include <string.h>

#include "fa3gen.h"

/* One case: its name, pattern, shape and the varlen_check flags. */
typedef struct vcase {
    const char *name;
    vl_pattern pattern;
    int batch, max_q, max_k;
    int seqused, share_pages, poison_tail, in_all;
} vcase;

/* Varlen Q, K/V packed or paged (the paged ones share pages; with-empty also -1 tails). */
static const vcase varlen_cases[] = {
    {"random", VL_RANDOM, 12, 300, 300, 0, 1, 0, 0},
    {"long+tiny", VL_LONG_AND_TINY, 40, 1500, 1500, 0, 1, 0, 1},
    {"with-empty", VL_WITH_EMPTY, 13, 200, 260, 0, 1, 1, 1},
    {"short-k", VL_SHORT_K, 8, 700, 700, 0, 0, 0, 0},
    {"seqused", VL_WITH_EMPTY, 12, 300, 300, 1, 1, 0, 1},
};
/* Rectangular Q over paged K/V. */
static const vcase rect_cases[] = {
    {"equal", VL_EQUAL, 4, 300, 1000, 0, 1, 0, 1},
    {"decode", VL_WITH_EMPTY, 16, 1, 900, 1, 1, 1, 1},
    {"seqused", VL_RANDOM, 6, 200, 600, 1, 1, 0, 0},
};

#define EXTRA_Q_ROWS 29 /* varlen: rows of Q/O past cu_seqlens_q[batch], which must stay NaN */

int check_varlen_cases(const check_cfg *cc, const varlen_opts *v, vl_spec *specs,
                       char names[][48])
{
    const int varlen = cc->cfg.varlen, paged = cc->cfg.paged_kv ? v->page_size : 0;
    const vcase *list = varlen ? varlen_cases : rect_cases;
    const size_t nlist = varlen ? sizeof varlen_cases / sizeof varlen_cases[0]
                                : sizeof rect_cases / sizeof rect_cases[0];
    int n = 0;
    for (size_t i = 0; i < nlist && n < CHECK_MAX_VARLEN_CASES; ++i) {
        const vcase *k = &list[i];
        if ((v->all && !k->in_all) || (v->quick && k->pattern == VL_LONG_AND_TINY))
            continue;
        vl_spec s = {0};
        if (paged)
            snprintf(names[n], 48, "%s paged%d %s", varlen ? "varlen" : "rect", paged, k->name);
        else
            snprintf(names[n], 48, "varlen %s", k->name);
        s.id = names[n];
        s.dtype = cc->cfg.dtype;
        s.out_dtype = check_out_dtype(&cc->cfg);
        s.mask = cc->cfg.mask;
        s.wl = cc->cfg.mask == FA3_MASK_LOCAL ? cc->window_left : -1;
        s.wr = cc->cfg.mask == FA3_MASK_LOCAL ? cc->window_right : -1;
        s.softcap = cc->cfg.softcap ? cc->softcap : 0.0f;
        s.head_dim = cc->cfg.head_dim;
        s.head_dim_v = cc->cfg.head_dim_v;
        s.block_n = cc->cfg.block_n;
        s.stages = cc->cfg.stages;
        s.block_m = cc->cfg.block_m;
        s.split_kv = cc->cfg.split_kv;
        s.pack_gqa = cc->cfg.pack_gqa;
        s.num_heads = cc->num_heads;
        s.num_heads_k = cc->num_heads_k;
        s.varlen = varlen;
        s.page_size = paged;
        s.pattern = k->pattern;
        s.batch = v->batch ? v->batch : k->batch;
        s.max_q = v->max_q ? v->max_q : k->max_q;
        s.max_k = v->max_k ? v->max_k : k->max_k;
        s.seqused = k->seqused;
        s.share_pages = paged && k->share_pages;
        s.poison_tail = paged && k->poison_tail;
        s.extra_q_rows = varlen ? EXTRA_Q_ROWS : 0;
        s.check_dense = 1;
        s.no_descales = v->no_descales;
        specs[n++] = s;
    }
    return n;
}

void check_varlen_list(const check_cfg *cc, const varlen_opts *v)
{
    vl_spec specs[CHECK_MAX_VARLEN_CASES];
    char names[CHECK_MAX_VARLEN_CASES][48];
    int n = check_varlen_cases(cc, v, specs, names);
    for (int i = 0; i < n; ++i)
        printf("%-40s %-26s b%d max_q=%d max_k=%d (%s%s)\n", cc->label, specs[i].id,
               specs[i].batch, specs[i].max_q, specs[i].max_k, vl_pattern_name(specs[i].pattern),
               specs[i].seqused ? ", seqused_k" : "");
}

/* The seed of cc's cases: the run's, mixed with the label, so that configurations differ. */
static uint64_t config_seed(uint64_t seed, const char *label)
{
    uint64_t h = 14695981039346656037ull;
    for (const char *p = label; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return seed ^ (h << 1);
}

static void print_case(const check_cfg *cc, const vl_spec *s, const vl_result *r)
{
    printf("%-40s %-26s b%-3d q=%-6d k=%-6d ", cc->label, s->id, r->batch, r->total_q,
           r->total_k);
    if (r->kernel_ran)
        printf("err_o=%.3e tol=%.3e err_lse=%.3e dense=%.3e ", r->acc.err_o, tol_o_bound(&r->acc),
               r->acc.err_lse, r->dense_done ? r->dense_o : -1.0);
    else
        printf("err_o=-         tol=-         err_lse=-         ");
    if (r->verdict == VL_PASS)
        printf("PASS\n");
    else
        printf("FAIL (%s)\n", r->msg);
    fflush(stdout);
}

int check_varlen_config(fa3_context *ctx, const fa3_driver *drv, uint64_t seed,
                        const check_cfg *cc, const varlen_opts *v, int *passed, int *failed)
{
    vl_spec specs[CHECK_MAX_VARLEN_CASES];
    char names[CHECK_MAX_VARLEN_CASES][48];
    const int n = check_varlen_cases(cc, v, specs, names);
    const uint64_t cseed = config_seed(seed, cc->label);
    for (int i = 0; i < n; ++i) {
        vl_result r;
        vl_verdict vd = vl_check_run(ctx, drv, cseed, &specs[i], NULL, &r);
        print_case(cc, &specs[i], &r);
        if (vd == VL_PASS) {
            (*passed)++;
            continue;
        }
        (*failed)++;
        if (vd == VL_ERROR && (r.st == FA3_ERR_NO_NVRTC || r.st == FA3_ERR_NO_DRIVER))
            return EXIT_NO_GPU;
        if (vd == VL_ERROR && r.st == FA3_ERR_CUDA)
            return EXIT_FAIL;
    }
    return 0;
}
