/*
 * Operations and kernel kinds as the runtime sees them. An operation is what one public call runs:
 * an ordered list of kernels (each of a kind, kernel_abi.h) launched on one stream, plus a
 * workspace of device memory they share. Today there is one, the forward pass: one kernel, no
 * workspace; forward_split (split-KV: the forward kernel writing partials, then the combine
 * kernel, sharing the partials' workspace) has two, the backward pass will have three. For each kind the runtime knows its entry name, the size of its
 * parameter block and its launch shape under a plan; the kind's launch code (fwd.c for FA3_KERNEL_FWD) fills its parameter block
 * (kernel_abi.h) and grid.
 */
#ifndef FA3JIT_OP_H
#define FA3JIT_OP_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "kernel_abi.h"

/* What the runtime knows of a kernel kind. */
typedef struct fa3_kind {
    const char *entry;  /* the PTX .entry the module is asked for */
    size_t params_size; /* bytes of its parameter block (its member of fa3_kernel_param_block):
                           the .param its PTX declares */
} fa3_kind;

/* The kind's record; NULL for a value that is not a kind. */
FA3_INTERNAL const fa3_kind *fa3_kind_get(fa3_kernel_kind kind);

/* Threads per CTA and dynamic shared memory bytes of a kind's kernel under plan. */
FA3_INTERNAL void fa3_kind_shape(fa3_kernel_kind kind, const fa3_plan *plan, int *threads,
                                 int *smem_bytes);

/* The config a kernel of kind is built and cached under, for an operation of canonical config
   cfg: the forward kernel's is cfg; the combine kernel depends only on head_dim_v, out_dtype and
   varlen, so its config keeps those (head_dim = head_dim_v, dtype = out_dtype, split_kv = 1, the
   rest the defaults, canonical): configs that differ elsewhere share its cache entry. */
FA3_INTERNAL void fa3_kind_key_config(fa3_kernel_kind kind, const fa3_config *cfg,
                                      fa3_config *out);

/* The extents of one call, which a workspace's size depends on (seqlen_q: varlen's total_q). */
typedef struct fa3_op_shape {
    int batch, seqlen_q, seqlen_k, num_heads, num_heads_k;
    int num_splits; /* split-KV: resolved, 1..FA3_MAX_SPLITS */
} fa3_op_shape;

/* Split-KV's workspace (fa3jit.h, fa3_fwd_args "Split-KV"): rows partial rows (batch · num_heads ·
   seqlen_q, varlen num_heads · total_q), o_partial at byte 0, lse_partial at lse_offset (a
   multiple of 256), bytes in all (a multiple of 256); 0 bytes when it does not fit a size_t. */
typedef struct fa3_split_layout {
    int64_t rows;
    size_t lse_offset, bytes;
} fa3_split_layout;
FA3_INTERNAL void fa3_split_layout_make(const fa3_plan *plan, const fa3_op_shape *shape,
                                        fa3_split_layout *L);

#define FA3_OP_MAX_KERNELS 4 /* the backward pass will need three */

typedef struct fa3_op {
    const char *name;                         /* "forward", "forward_split" */
    int num_kernels;
    fa3_kernel_kind kinds[FA3_OP_MAX_KERNELS]; /* launched in this order */
    /* Device bytes of workspace one call needs (given to each of its kernels); NULL = none. */
    size_t (*workspace_bytes)(const fa3_plan *plan, const fa3_op_shape *shape);
} fa3_op;

/* The operation fa3_jit_get_kernel builds for a canonical config. */
FA3_INTERNAL const fa3_op *fa3_op_for_config(const fa3_config *canonical);

/* The workspace one call of op needs under plan (0 when none). */
FA3_INTERNAL size_t fa3_op_workspace_bytes(const fa3_op *op, const fa3_plan *plan,
                                           const fa3_op_shape *shape);

#endif
