/*
 * One varlen / paged-KV case run on the GPU and judged, shared by fa3-gen check --varlen/--paged
 * and test_varlen (varlen_check.c): random inputs from the seed and the case's id, the NVRTC
 * reference checked against a host fp64 attention (sampled rows) and, per sequence, (bitwise)
 * against its own dense path; then the fast kernel against the reference under the tolerance
 * rule (tools/common/tolerance.h; the e4m3 LSE bound of tol_lse_bound), rows that see no key
 * exactly O = 0 / LSE = −inf, rows of Q/O past cu_seqlens_q[batch] and the guard words after O
 * and LSE untouched (every output NaN-prefilled), and (check_dense) the fast kernel against the
 * dense kernel per sequence on the same data (paged: the keys gathered contiguously). Reports a
 * verdict and a message instead of failing: the test turns a failure into a cmocka failure,
 * fa3-gen into its FAIL line.
 */
#ifndef FA3JIT_TOOLS_VARLEN_CHECK_H
#define FA3JIT_TOOLS_VARLEN_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "fa3jit.h"
#include "runtime/tools_api.h"
#include "tools/common/tolerance.h"
#include "tools/common/varlen_case.h"

typedef struct vl_spec {
    const char *id;         /* names the case in messages; seeds its inputs with the run's seed */
    fa3_dtype dtype;        /* bf16, fp16, e4m3 (random descales per (sequence, kv head)) */
    fa3_dtype out_dtype;    /* e4m3: FA3_DTYPE_FP16 for an fp16 O, anything else bf16; bf16 and
                               fp16 configs write their own dtype */
    fa3_mask mask;
    int wl, wr;             /* local windows (-1 unlimited); other masks -1 */
    float softcap;          /* > 0: a softcap config */
    int head_dim, head_dim_v; /* head_dim_v 0: head_dim */
    int block_n, stages;    /* tile overrides of the configs (0: the planner's) */
    int block_m;            /* 64: the decode tile (one consumer warpgroup); 0: the planner's */
    int split_kv;           /* the config's split_kv (num_splits 0: the library's count) */
    int pack_gqa;           /* the config's pack_gqa (rectangular Q only) */
    int num_heads, num_heads_k;
    int varlen;             /* 0: rectangular Q (batch, max_q, ...) with paged K/V */
    int page_size;          /* 0: K/V not paged */
    vl_pattern pattern;
    int batch, max_q, max_k;
    const int *len_q, *len_k; /* the lengths, when given (batch each; pattern unused) */
    int seqused;            /* pass seqused_k */
    int share_pages;        /* prefix sharing in the page table */
    int poison_tail;        /* page-table entries past a sequence's pages are -1 */
    int extra_q_rows;       /* varlen: rows of Q/O past cu_seqlens_q[batch] (E17) */
    int check_dense;        /* also compare with the dense path per sequence */
    int no_descales;        /* e4m3: NULL descales (1.0) instead of random ones */
} vl_spec;

typedef enum vl_verdict {
    VL_PASS = 0,
    VL_FAIL = 1,  /* a check failed, or the library refused the case's kernel (msg says which) */
    VL_ERROR = 2  /* the case could not be run: a CUDA call, the reference, host memory (st) */
} vl_verdict;

typedef struct vl_result {
    vl_verdict verdict;
    fa3_status st;          /* VL_ERROR: the status of the failing call; else FA3_OK */
    char msg[1024];         /* every failure, "; "-separated, each naming the case and stage */
    /* what the case was (set once the case is made) */
    int batch, total_q, total_k, rows_q, max_q, max_k;
    /* the reference against the fp64 host attention (bound VL_REF_BOUND) */
    long long ref_rows;
    double ref_err_o, ref_err_lse;
    int ref_dense_done;     /* the reference against its dense path (bitwise) */
    double ref_dense_o, ref_dense_lse;
    /* the kernel against the reference */
    int kernel_ran;
    tol_acc acc;
    long long empty_bad;    /* rows that see no key with O != 0 or LSE != -inf */
    long long touched;      /* values written past cu_seqlens_q[batch] or into the guards */
    int dense_done;         /* the kernel against the dense kernel per sequence */
    double dense_o, dense_lse, dense_bound;
} vl_result;

#define VL_REF_BOUND 2e-4 /* the fp32 reference against the fp64 host attention (O and LSE) */
#define VL_GUARD 256      /* words after O and LSE that must keep their NaN prefill */

/* Runs and judges case s with ctx (its kernels, the reference) on the current CUDA context of
   drv, inputs from seed (mixed with s->id). Progress lines ("  <id>: ...") go to log (NULL:
   none). Returns r->verdict. */
vl_verdict vl_check_run(fa3_context *ctx, const fa3_driver *drv, uint64_t seed, const vl_spec *s,
                        FILE *log, vl_result *r);

/* The case's configuration (flags 1: varlen / paged_kv as the case says; 0: the dense one). */
fa3_config vl_spec_config(const vl_spec *s, int flags);

#endif
