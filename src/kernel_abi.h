/*
 * What the generated kernels and the runtime agree on: the kernel kinds, and each kind's entry
 * name and one kernel parameter, `.param .align 64 .b8 fa3_params[...]`. The runtime fills the
 * kind's struct (fwd.c for the forward kernel) and passes its address in kernelParams[0]; the
 * code generator reads fields with ld.param at the offsets below (FA3P_OFF_* for the forward
 * kernel), so both sides share this file and the static asserts pin each layout. A new kind adds
 * its enum value, entry name, struct, offsets and asserts here (docs/kernel.md, "Adding a kernel
 * kind").
 */
#ifndef FA3JIT_KERNEL_ABI_H
#define FA3JIT_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "divmagic.h"

/* The kinds of generated kernel: part of every cache key and cache entry header. An operation
   (runtime/op.c) runs an ordered list of them. */
typedef enum fa3_kernel_kind {
    FA3_KERNEL_FWD = 0,  /* the forward kernel: entry FA3_KERNEL_NAME, fa3_kernel_params */
    FA3_KERNEL_COMBINE = 1, /* split-KV's merge of the partials: FA3_COMBINE_NAME,
                               fa3_combine_params */
    FA3_KERNEL_NUM_KINDS
} fa3_kernel_kind;

/* ---------------------------------------------------------------- FA3_KERNEL_FWD */

#define FA3_KERNEL_NAME "fa3_fwd_kernel"

/* The divisors a forward launch passes as magics (fa3_kernel_params.div): the tile decode's and
   the per-row divisions' (codegen/divide.c kg_udiv_param). */
typedef enum fa3_div_slot {
    FA3_DIV_NMB = 0,    /* num_m_blocks */
    FA3_DIV_HEADS,      /* the decode's heads a pair: num_heads, packed GQA num_heads_k */
    FA3_DIV_HPKV,       /* heads_per_kv (packed GQA's ratio) */
    FA3_DIV_SEC_TILES,  /* masked order: section_hb · num_m_blocks */
    FA3_DIV_SEC_HB,     /* masked order: section_hb */
    FA3_DIV_LAST_PAIRS, /* masked order: the last section's pairs when fewer than section_hb */
    FA3_DIV_SPLITS,     /* num_splits (1 without split_kv) */
    FA3_DIV_PAGE_SIZE,  /* paged K/V: page_size (1 otherwise) */
    FA3_DIV_SLOTS,
    FA3_DIV_SEC_PAIRS /* not a slot: a masked section's pairs, section_hb or (the last
                         section's) fewer, by FA3_DIV_SEC_HB's or FA3_DIV_LAST_PAIRS's magic */
} fa3_div_slot;

typedef struct fa3_kernel_params {
    /* CUtensorMap objects (128 bytes, 64-byte aligned), made by cuTensorMapEncodeTiled.
       4-D maps, dims innermost first: {head_dim, seqlen, heads, batch}, 128B swizzle,
       box {64, rows, 1, 1} (e4m3: UINT8 elements, box {128, rows, 1, 1}: 128-byte rows). */
    _Alignas(64) uint8_t tmap_q[128];
    _Alignas(64) uint8_t tmap_k[128];
    _Alignas(64) uint8_t tmap_v[128];
    uint64_t o_ptr;          /* device address of O */
    uint64_t lse_ptr;        /* device address of LSE, 0 = not written */
    int64_t o_batch_stride;  /* elements */
    int64_t o_row_stride;    /* elements */
    int64_t o_head_stride;   /* elements */
    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t num_heads;
    int32_t heads_per_kv;    /* num_heads / num_heads_k */
    int32_t num_m_blocks;    /* ceil(seqlen_q / block_m) */
    int32_t window_left;     /* local: keys visible from i+sk-sq-window_left; causal/none: -1 */
    int32_t window_right;    /* local: up to i+sk-sq+window_right; causal: 0; none: -1 */
    float score_mul;         /* softcap: softmax_scale/softcap (pre-tanh factor); else 1 */
    float scale_log2;        /* softcap: softcap·log2(e); else softmax_scale·log2(e) */
    float lse_mul;           /* scale_log2·ln(2): turns a row max into natural-log units */
    uint32_t total_tiles;    /* num_m_blocks · num_heads · batch (grid size, 1-D) */
    uint32_t section_hb;     /* masked configs: (head, batch) pairs per L2 section (≥ 1), below */
    uint32_t o_tma;          /* 1: the epilogue stores O with tmap_o (plan.o_stage and O meets
                                TMA's alignment rules), 0: with st.global from registers */
    int32_t num_heads_k;     /* K/V heads (descale index b·num_heads_k + kv head) */
    uint64_t descale_q_ptr;  /* e4m3: fp32 (batch, num_heads_k) device arrays, 0 = all 1.0 */
    uint64_t descale_k_ptr;
    uint64_t descale_v_ptr;
    uint64_t tile_counter_ptr; /* dyn_sched plans: a u32 the runtime zeroes before the launch;
                                  the producers take their next tiles from it (atom.add) */
    /* O as a 4-D map {head_dim_v, seqlen_q, heads, batch}, 128B swizzle, box {64, 64, 1, 1}
       (one consumer warpgroup's rows); valid when o_tma = 1 */
    _Alignas(64) uint8_t tmap_o[128];
    /* varlen configs only (the PTX of the others declares the first FA3P_SIZE_DENSE bytes):
       int32 device arrays cu_seqlens_q/k (batch + 1), seqused_k (batch, 0 = not given) */
    uint64_t cu_seqlens_q_ptr;
    uint64_t cu_seqlens_k_ptr;
    uint64_t seqused_k_ptr;
    /* paged-KV configs only: tmap_k/v are 4-D maps {head_dim, page_size, num_heads_k, num_pages}
       with boxes of page_rows = gcd(block_n, page_size) rows, so each box lies in one page; a
       key block is runs_per_block = block_n / page_rows boxes. page_table: int32 device array
       (batch, page_table_stride elements a row) */
    uint64_t page_table_ptr;
    int64_t page_table_stride;
    int32_t page_size;
    int32_t num_pages;
    int32_t page_rows;
    int32_t runs_per_block;
    /* varlen with o_tma: tmap_o is {head_dim_v, max_seqlen_q, num_heads, total_q + 1} over
       o - max_seqlen_q rows, whose last dimension steps one row: row i of the sequence ending at
       packed row e is coordinate (i - len + max_seqlen_q, e), clipped past the sequence's end */
    int32_t max_seqlen_q;
    int32_t batch; /* varlen: the number of sequences (the tile walk's end) */
    /* split-KV configs only (their PTX declares the first FA3P_SIZE_SPLIT bytes): the fp32 partials in the
       workspace, o_partial[num_splits][partial_rows][head_dim_v] and
       lse_partial[num_splits][partial_rows], row as the LSE output's ((b·num_heads + h)·seqlen_q
       + i; varlen h·total_q + packed row); tile t·num_splits + s is split s of tile t, keys
       [nmin + s·chunk, min(nmax, nmin + (s+1)·chunk)) of its key blocks [nmin, nmax), chunk =
       ceil((nmax - nmin) / num_splits) */
    uint64_t o_partial_ptr;
    uint64_t lse_partial_ptr;
    int32_t num_splits;      /* 1..FA3_MAX_SPLITS */
    int32_t partial_rows;    /* rows of one split's partials: batch·num_heads·seqlen_q, varlen
                                num_heads·total_q */
    /* the tail split of a dense call (runtime/tail.c; 0 otherwise): non-masked, non-varlen split
       kernels decode tile t·num_splits + s as split s of tile tile_base + t, and write partial
       row (b·num_heads + h)·seqlen_q + i at row - partial_row_base */
    uint32_t tile_base;
    uint32_t partial_row_base;
    /* the launch's divisors as multiply-and-shift magics (divmagic.h), indexed by fa3_div_slot;
       only kernels of plans with fast_div >= 2 read them (their PTX declares all FA3P_SIZE
       bytes) */
    fa3_divmagic div[FA3_DIV_SLOTS];
} fa3_kernel_params;

#define FA3P_OFF_TMAP_Q 0
#define FA3P_OFF_TMAP_K 128
#define FA3P_OFF_TMAP_V 256
#define FA3P_OFF_O_PTR 384
#define FA3P_OFF_LSE_PTR 392
#define FA3P_OFF_O_BATCH_STRIDE 400
#define FA3P_OFF_O_ROW_STRIDE 408
#define FA3P_OFF_O_HEAD_STRIDE 416
#define FA3P_OFF_SEQLEN_Q 424
#define FA3P_OFF_SEQLEN_K 428
#define FA3P_OFF_NUM_HEADS 432
#define FA3P_OFF_HEADS_PER_KV 436
#define FA3P_OFF_NUM_M_BLOCKS 440
#define FA3P_OFF_WINDOW_LEFT 444
#define FA3P_OFF_WINDOW_RIGHT 448
#define FA3P_OFF_SCORE_MUL 452
#define FA3P_OFF_SCALE_LOG2 456
#define FA3P_OFF_LSE_MUL 460
#define FA3P_OFF_TOTAL_TILES 464
#define FA3P_OFF_SECTION_HB 468
#define FA3P_OFF_O_TMA 472
#define FA3P_OFF_NUM_HEADS_K 476
#define FA3P_OFF_DESCALE_Q 480
#define FA3P_OFF_DESCALE_K 488
#define FA3P_OFF_DESCALE_V 496
#define FA3P_OFF_TILE_COUNTER 504
#define FA3P_OFF_TMAP_O 512
#define FA3P_OFF_CU_SEQLENS_Q 640
#define FA3P_OFF_CU_SEQLENS_K 648
#define FA3P_OFF_SEQUSED_K 656
#define FA3P_OFF_PAGE_TABLE 664
#define FA3P_OFF_PAGE_TABLE_STRIDE 672
#define FA3P_OFF_PAGE_SIZE 680
#define FA3P_OFF_NUM_PAGES 684
#define FA3P_OFF_PAGE_ROWS 688
#define FA3P_OFF_RUNS_PER_BLOCK 692
#define FA3P_OFF_MAX_SEQLEN_Q 696
#define FA3P_OFF_BATCH 700
#define FA3P_OFF_O_PARTIAL 704
#define FA3P_OFF_LSE_PARTIAL 712
#define FA3P_OFF_NUM_SPLITS 720
#define FA3P_OFF_PARTIAL_ROWS 724
#define FA3P_OFF_TILE_BASE 728
#define FA3P_OFF_PARTIAL_ROW_BASE 732
#define FA3P_OFF_DIV 736
#define FA3P_SIZE 832        /* the struct; the parameter of fast_div >= 2 kernels */
#define FA3P_SIZE_SPLIT 768  /* the parameter other split-KV kernels declare (up to div) */
#define FA3P_SIZE_VARLEN 704 /* the parameter varlen or paged-KV kernels declare (up to batch) */
#define FA3P_SIZE_DENSE 640  /* the parameter the other kernels declare (up to tmap_o) */

_Static_assert(offsetof(fa3_kernel_params, tmap_k) == FA3P_OFF_TMAP_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, tmap_v) == FA3P_OFF_TMAP_V, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_ptr) == FA3P_OFF_O_PTR, "abi");
_Static_assert(offsetof(fa3_kernel_params, tile_counter_ptr) == FA3P_OFF_TILE_COUNTER, "abi");
_Static_assert(offsetof(fa3_kernel_params, lse_ptr) == FA3P_OFF_LSE_PTR, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_batch_stride) == FA3P_OFF_O_BATCH_STRIDE, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_row_stride) == FA3P_OFF_O_ROW_STRIDE, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_head_stride) == FA3P_OFF_O_HEAD_STRIDE, "abi");
_Static_assert(offsetof(fa3_kernel_params, seqlen_q) == FA3P_OFF_SEQLEN_Q, "abi");
_Static_assert(offsetof(fa3_kernel_params, seqlen_k) == FA3P_OFF_SEQLEN_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, num_heads) == FA3P_OFF_NUM_HEADS, "abi");
_Static_assert(offsetof(fa3_kernel_params, heads_per_kv) == FA3P_OFF_HEADS_PER_KV, "abi");
_Static_assert(offsetof(fa3_kernel_params, num_m_blocks) == FA3P_OFF_NUM_M_BLOCKS, "abi");
_Static_assert(offsetof(fa3_kernel_params, window_left) == FA3P_OFF_WINDOW_LEFT, "abi");
_Static_assert(offsetof(fa3_kernel_params, window_right) == FA3P_OFF_WINDOW_RIGHT, "abi");
_Static_assert(offsetof(fa3_kernel_params, score_mul) == FA3P_OFF_SCORE_MUL, "abi");
_Static_assert(offsetof(fa3_kernel_params, scale_log2) == FA3P_OFF_SCALE_LOG2, "abi");
_Static_assert(offsetof(fa3_kernel_params, lse_mul) == FA3P_OFF_LSE_MUL, "abi");
_Static_assert(offsetof(fa3_kernel_params, total_tiles) == FA3P_OFF_TOTAL_TILES, "abi");
_Static_assert(offsetof(fa3_kernel_params, section_hb) == FA3P_OFF_SECTION_HB, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_tma) == FA3P_OFF_O_TMA, "abi");
_Static_assert(offsetof(fa3_kernel_params, num_heads_k) == FA3P_OFF_NUM_HEADS_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, descale_q_ptr) == FA3P_OFF_DESCALE_Q, "abi");
_Static_assert(offsetof(fa3_kernel_params, descale_k_ptr) == FA3P_OFF_DESCALE_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, descale_v_ptr) == FA3P_OFF_DESCALE_V, "abi");
_Static_assert(offsetof(fa3_kernel_params, tmap_o) == FA3P_OFF_TMAP_O, "abi");
_Static_assert(offsetof(fa3_kernel_params, cu_seqlens_q_ptr) == FA3P_OFF_CU_SEQLENS_Q, "abi");
_Static_assert(offsetof(fa3_kernel_params, cu_seqlens_k_ptr) == FA3P_OFF_CU_SEQLENS_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, seqused_k_ptr) == FA3P_OFF_SEQUSED_K, "abi");
_Static_assert(offsetof(fa3_kernel_params, page_table_ptr) == FA3P_OFF_PAGE_TABLE, "abi");
_Static_assert(offsetof(fa3_kernel_params, page_table_stride) == FA3P_OFF_PAGE_TABLE_STRIDE, "abi");
_Static_assert(offsetof(fa3_kernel_params, page_size) == FA3P_OFF_PAGE_SIZE, "abi");
_Static_assert(offsetof(fa3_kernel_params, num_pages) == FA3P_OFF_NUM_PAGES, "abi");
_Static_assert(offsetof(fa3_kernel_params, page_rows) == FA3P_OFF_PAGE_ROWS, "abi");
_Static_assert(offsetof(fa3_kernel_params, runs_per_block) == FA3P_OFF_RUNS_PER_BLOCK, "abi");
_Static_assert(offsetof(fa3_kernel_params, max_seqlen_q) == FA3P_OFF_MAX_SEQLEN_Q, "abi");
_Static_assert(offsetof(fa3_kernel_params, batch) == FA3P_OFF_BATCH, "abi");
_Static_assert(offsetof(fa3_kernel_params, o_partial_ptr) == FA3P_OFF_O_PARTIAL, "abi");
_Static_assert(offsetof(fa3_kernel_params, lse_partial_ptr) == FA3P_OFF_LSE_PARTIAL, "abi");
_Static_assert(offsetof(fa3_kernel_params, num_splits) == FA3P_OFF_NUM_SPLITS, "abi");
_Static_assert(offsetof(fa3_kernel_params, partial_rows) == FA3P_OFF_PARTIAL_ROWS, "abi");
_Static_assert(offsetof(fa3_kernel_params, tile_base) == FA3P_OFF_TILE_BASE, "abi");
_Static_assert(offsetof(fa3_kernel_params, partial_row_base) == FA3P_OFF_PARTIAL_ROW_BASE, "abi");
_Static_assert(offsetof(fa3_kernel_params, div) == FA3P_OFF_DIV, "abi");
_Static_assert(sizeof(fa3_kernel_params) == FA3P_SIZE, "abi");

/* ---------------------------------------------------------------- FA3_KERNEL_COMBINE */

#define FA3_COMBINE_NAME "fa3_combine_kernel"
#define FA3_COMBINE_WARPS 4 /* rows (one a warp) per CTA: 1-D grid of ceil(rows / 4) CTAs */

/* Split-KV's second kernel (codegen/combine.c): merges num_splits fp32 partials per row into O
   (out_dtype) and LSE. The partials, in the workspace: o_partial[num_splits][rows][head_dim_v]
   and lse_partial[num_splits][rows], row = (b·num_heads + h)·seqlen_q + i (rectangular) or
   h·total_q + packed row (varlen, seqlen_q = total_q), as the LSE output is laid out. */
typedef struct fa3_combine_params {
    _Alignas(64) uint64_t o_partial_ptr; /* fp32, 16-byte aligned */
    uint64_t lse_partial_ptr;            /* fp32 */
    uint64_t o_ptr;                      /* O, the user's strides (elements, 4-byte aligned) */
    uint64_t lse_ptr;                    /* LSE (rows floats), 0 = not written */
    int64_t o_batch_stride;              /* elements; varlen: unused */
    int64_t o_row_stride;
    int64_t o_head_stride;
    uint64_t cu_seqlens_q_ptr;           /* varlen: int32 (batch + 1); rows of packed index
                                            >= cu_seqlens_q[batch] are not written */
    int32_t num_splits;                  /* 1..FA3_MAX_SPLITS */
    int32_t rows;                        /* partial rows */
    int32_t seqlen_q;                    /* rectangular: per batch; varlen: total_q */
    int32_t num_heads;
    int32_t batch;                       /* varlen: the number of sequences */
    uint32_t row_base;                   /* rectangular: partial row r is output row
                                            row_base + r (a dense call's tail split; else 0) */
    uint8_t pad_[40];
} fa3_combine_params;

#define FA3C_OFF_O_PARTIAL 0
#define FA3C_OFF_LSE_PARTIAL 8
#define FA3C_OFF_O_PTR 16
#define FA3C_OFF_LSE_PTR 24
#define FA3C_OFF_O_BATCH_STRIDE 32
#define FA3C_OFF_O_ROW_STRIDE 40
#define FA3C_OFF_O_HEAD_STRIDE 48
#define FA3C_OFF_CU_SEQLENS_Q 56
#define FA3C_OFF_NUM_SPLITS 64
#define FA3C_OFF_ROWS 68
#define FA3C_OFF_SEQLEN_Q 72
#define FA3C_OFF_NUM_HEADS 76
#define FA3C_OFF_BATCH 80
#define FA3C_OFF_ROW_BASE 84
#define FA3C_SIZE 128

_Static_assert(offsetof(fa3_combine_params, o_partial_ptr) == FA3C_OFF_O_PARTIAL, "abi");
_Static_assert(offsetof(fa3_combine_params, lse_partial_ptr) == FA3C_OFF_LSE_PARTIAL, "abi");
_Static_assert(offsetof(fa3_combine_params, o_ptr) == FA3C_OFF_O_PTR, "abi");
_Static_assert(offsetof(fa3_combine_params, lse_ptr) == FA3C_OFF_LSE_PTR, "abi");
_Static_assert(offsetof(fa3_combine_params, o_batch_stride) == FA3C_OFF_O_BATCH_STRIDE, "abi");
_Static_assert(offsetof(fa3_combine_params, o_row_stride) == FA3C_OFF_O_ROW_STRIDE, "abi");
_Static_assert(offsetof(fa3_combine_params, o_head_stride) == FA3C_OFF_O_HEAD_STRIDE, "abi");
_Static_assert(offsetof(fa3_combine_params, cu_seqlens_q_ptr) == FA3C_OFF_CU_SEQLENS_Q, "abi");
_Static_assert(offsetof(fa3_combine_params, num_splits) == FA3C_OFF_NUM_SPLITS, "abi");
_Static_assert(offsetof(fa3_combine_params, rows) == FA3C_OFF_ROWS, "abi");
_Static_assert(offsetof(fa3_combine_params, seqlen_q) == FA3C_OFF_SEQLEN_Q, "abi");
_Static_assert(offsetof(fa3_combine_params, num_heads) == FA3C_OFF_NUM_HEADS, "abi");
_Static_assert(offsetof(fa3_combine_params, batch) == FA3C_OFF_BATCH, "abi");
_Static_assert(offsetof(fa3_combine_params, row_base) == FA3C_OFF_ROW_BASE, "abi");
_Static_assert(sizeof(fa3_combine_params) == FA3C_SIZE, "abi");

/* ---------------------------------------------------------------- all kinds */

/* The launch buffer: room for the parameter block of any kind. */
typedef union fa3_kernel_param_block {
    fa3_kernel_params fwd;      /* FA3_KERNEL_FWD */
    fa3_combine_params combine; /* FA3_KERNEL_COMBINE */
} fa3_kernel_param_block;
_Static_assert(_Alignof(fa3_kernel_param_block) == 64, "abi: .param .align 64");

#endif
