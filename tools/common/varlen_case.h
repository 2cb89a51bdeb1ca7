/*
 * Host-side varlen / paged-KV cases shared by fa3-gen check and the GPU tests: per-sequence
 * lengths in the patterns the issue names (random, one long among many tiny, zero-length q and k
 * segments, keys much shorter than queries), their cu_seqlens, seqused_k, and a shuffled page
 * table with pages shared between sequences; where key j of sequence b lives in the K/V storage
 * (packed rows, or a pool of pages). Pure host code, no GPU.
 */
#ifndef FA3JIT_TOOLS_VARLEN_CASE_H
#define FA3JIT_TOOLS_VARLEN_CASE_H

#include <stdint.h>

#include "tools/common/numerics.h"

typedef enum vl_pattern {
    VL_RANDOM = 0,        /* query and key lengths uniform in 1..max */
    VL_LONG_AND_TINY = 1, /* sequence 0 of max rows, every other of 0..3 */
    VL_WITH_EMPTY = 2,    /* random, every third q segment and every fourth k segment empty */
    VL_SHORT_K = 3,       /* key lengths 0..max_k/16 + 1 against query lengths near max_q */
    VL_EQUAL = 4,         /* every sequence max_q queries and max_k keys */
    VL_NUM_PATTERNS = 5
} vl_pattern;

/* "random", "long+tiny", "with-empty", "short-k", "equal". */
const char *vl_pattern_name(vl_pattern p);

typedef struct vl_case {
    int batch;
    int *len_q, *len_k;   /* batch: query rows, keys in use of each sequence */
    int32_t *cu_q, *cu_k; /* batch + 1 offsets: cu_k counts the stored keys (len_k, plus slack
                             when seqused_k is used without pages) */
    int32_t *seqused;     /* batch: len_k, when the case uses seqused_k; else NULL */
    int total_q, total_k; /* cu_q[batch], cu_k[batch] (total_k at least 1: a row to point at) */
    int max_q, max_k;     /* the longest len_q, len_k */
    /* paged (page_size > 0) */
    int page_size, num_pages, max_pages_per_seq;
    int32_t *page_table;  /* batch × max_pages_per_seq, row stride max_pages_per_seq; entries
                             past a sequence's pages are -1 when poison_tail, else page 0 */
} vl_case;

/* Makes c: batch sequences of pattern p (lengths up to max_q / max_k), seqused_k when
   use_seqused, paged when page_size > 0 (a shuffled page pool with a few spare pages; with
   share_pages every other sequence's first page is sequence 0's, prefix sharing; unused table
   entries -1 when poison_tail). 0, or -1 out of memory. */
int vl_case_make(vl_case *c, host_rng *r, vl_pattern p, int batch, int max_q, int max_k,
                 int use_seqused, int page_size, int share_pages, int poison_tail);
/* vl_case_make with the lengths given (batch each; r shuffles the pages). */
int vl_case_make_lengths(vl_case *c, host_rng *r, int batch, const int *len_q, const int *len_k,
                         int use_seqused, int page_size, int share_pages, int poison_tail);
void vl_case_free(vl_case *c);

/* The storage row of key j of sequence b: paged, page_table[b][j / page_size] · page_size +
   j % page_size (rows of the pool (num_pages · page_size)); else cu_k[b] + j. */
int64_t vl_key_row(const vl_case *c, int b, int j);
/* Rows of the K/V storage: num_pages · page_size, or total_k. */
int64_t vl_key_rows(const vl_case *c);

/* (query, key) pairs the mask shows over all sequences (bottom-right per sequence; mask 0 none,
   1 causal, 2 local with windows wl / wr, -1 unlimited): the FLOP count's pairs. */
double vl_visible_pairs(const vl_case *c, int mask, int wl, int wr);

#endif
