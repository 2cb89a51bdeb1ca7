/*
 * One varlen / paged-KV case of test_varlen, run and judged (varlen_run.c): random inputs from
 * the run's seed, the NVRTC reference checked against a host fp64 attention and (bitwise)
 * against its own dense path per sequence, then the fast kernel against the reference under the
 * tolerance rule, rows that see no key exactly O = 0 / LSE = −inf, rows of Q/O past
 * cu_seqlens_q[batch] untouched, and (check_dense) the fast kernel's dense path per sequence.
 * Fails the current cmocka test with the case's id and the worst element.
 */
#ifndef FA3JIT_TESTS_VARLEN_RUN_H
#define FA3JIT_TESTS_VARLEN_RUN_H

#include <stdint.h>

#include "fa3jit.h"
#include "tools/common/varlen_case.h"

typedef struct vl_spec {
    const char *id;
    fa3_dtype dtype;        /* bf16, fp16, e4m3 (random descales per (sequence, kv head)) */
    fa3_mask mask;
    int wl, wr;             /* local windows (-1 unlimited); other masks -1 */
    float softcap;          /* > 0: a softcap config */
    int head_dim, num_heads, num_heads_k;
    int varlen;             /* 0: rectangular Q (batch, max_q, ...) with paged K/V */
    int page_size;          /* 0: K/V not paged */
    vl_pattern pattern;
    int batch, max_q, max_k;
    const int *len_q, *len_k; /* the lengths, when given (batch each; pattern unused) */
    int seqused;            /* pass seqused_k */
    int share_pages;        /* prefix sharing in the page table */
    int poison_tail;        /* page-table entries past a sequence's pages are -1 */
    int extra_q_rows;       /* varlen: rows of Q/O past cu_seqlens_q[batch] (E17) */
    int check_dense;        /* also compare with the dense kernel per sequence */
} vl_spec;

/* The run's context and seed (set by test_varlen's main). */
extern fa3_context *g_vl_ctx;
extern uint64_t g_vl_seed;

void vl_run(const vl_spec *s);

#endif
