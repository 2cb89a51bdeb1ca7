/*
 * Split-KV's host side (split.h): the library's number of splits, the checks of num_splits and
 * the workspace (fa3_fwd_validate and fa3_fwd call them, before any launch), and the combine
 * kernel's parameter block and its stand-alone launch (the tests). fwd.c runs the operation.
 */
#include <stdint.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/split.h"

/* ------------------------------------------------------------------ the number of splits */

int fa3_split_heuristic(int64_t tiles, int64_t key_blocks, int num_sms)
{
    if (tiles < 1 || key_blocks < 1 || num_sms < 1)
        return 1;
    if (tiles >= (int64_t)num_sms || tiles * 10 >= (int64_t)num_sms * 8 || key_blocks == 1)
        return 1; /* the tiles fill the SMs (80%) already, or nothing to split */
    int64_t max_s = key_blocks;
    if (max_s > num_sms)
        max_s = num_sms;
    if (max_s > FA3_MAX_SPLITS)
        max_s = FA3_MAX_SPLITS;
    double eff[FA3_MAX_SPLITS + 1] = {0}, best = 0;
    for (int64_t s = 1; s <= max_s; s++) {
        const int64_t chunk = (key_blocks + s - 1) / s;
        if ((key_blocks + chunk - 1) / chunk != s)
            continue; /* some split would get no key block */
        const int64_t ctas = tiles * s, waves = (ctas + num_sms - 1) / num_sms;
        eff[s] = (double)ctas / (double)(waves * num_sms);
        if (eff[s] > best)
            best = eff[s];
    }
    for (int64_t s = 1; s <= max_s; s++)
        if (eff[s] > 0 && eff[s] >= 0.85 * best)
            return (int)s;
    return 1;
}

/* ------------------------------------------------------------------ checks */

fa3_status fa3_split_check_args(const fa3_kernel *k, const fa3_fwd_args *a)
{
    if (a->num_splits < 0 || a->num_splits > FA3_MAX_SPLITS)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->num_splits %d is out of range (0 = "
                          "the library chooses, 1..%d)", a->num_splits, FA3_MAX_SPLITS);
    if (k->cfg.split_kv != 1) {
        if (a->num_splits > 1)
            return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->num_splits %d needs a split_kv "
                              "config (this kernel's split_kv is 0: 0 or 1 only)",
                              a->num_splits);
        return FA3_OK; /* no workspace used */
    }
    if (a->workspace && (uintptr_t)a->workspace % 256 != 0)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "args->workspace %p is not 256-byte aligned "
                          "(split-KV's partials)", a->workspace);
    return FA3_OK;
}

fa3_status fa3_split_resolve(const fa3_kernel *k, const fa3_fwd_args *a, uint32_t tiles,
                             int num_sms, fa3_split_info *out)
{
    memset(out, 0, sizeof *out);
    fa3_fwd_layout L;
    FA3_TRY(fa3_fwd_layout_make(&k->cfg, a, "", &L));
    const int64_t bn = k->plan.block_n > 0 ? k->plan.block_n : 1;
    const int64_t key_blocks = ((int64_t)L.k_bound + bn - 1) / bn;
    out->num_splits = a->num_splits ? a->num_splits
                                    : fa3_split_heuristic(tiles, key_blocks, num_sms);
    const fa3_op_shape shape = {a->batch, a->seqlen_q, a->seqlen_k, a->num_heads,
                                a->num_heads_k, out->num_splits};
    fa3_split_layout_make(&k->plan, &shape, &out->layout);
    if (out->layout.rows > INT32_MAX || out->layout.bytes == 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "split-KV: %lld partial rows (%s) exceed 2^31-1 "
                          "or their workspace a size_t", (long long)out->layout.rows,
                          k->cfg.varlen ? "num_heads * seqlen_q"
                                        : "batch * num_heads * seqlen_q");
    if (a->workspace && a->workspace_bytes < out->layout.bytes)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "args->workspace_bytes %zu is too small: "
                          "%d splits need %zu bytes (fa3_fwd_workspace_size)",
                          a->workspace_bytes, out->num_splits, out->layout.bytes);
    return FA3_OK;
}

/* ------------------------------------------------------------------ the combine kernel */

void fa3_combine_params_fill(const fa3_combine_call *c, fa3_combine_params *prm, unsigned *grid)
{
    memset(prm, 0, sizeof *prm);
    prm->o_partial_ptr = (uint64_t)(uintptr_t)c->o_partial;
    prm->lse_partial_ptr = (uint64_t)(uintptr_t)c->lse_partial;
    prm->o_ptr = (uint64_t)(uintptr_t)c->o;
    prm->lse_ptr = (uint64_t)(uintptr_t)c->lse;
    prm->o_batch_stride = c->o_batch_stride;
    prm->o_row_stride = c->o_row_stride;
    prm->o_head_stride = c->o_head_stride;
    prm->cu_seqlens_q_ptr = (uint64_t)(uintptr_t)c->cu_seqlens_q;
    prm->num_splits = c->num_splits;
    prm->rows = c->rows;
    prm->seqlen_q = c->seqlen_q;
    prm->num_heads = c->num_heads;
    prm->batch = c->batch;
    prm->row_base = c->row_base;
    *grid = (unsigned)(((int64_t)c->rows + FA3_COMBINE_WARPS - 1) / FA3_COMBINE_WARPS);
}

fa3_status fa3_combine_launch(fa3_kernel *k, const fa3_combine_call *c, void *stream)
{
    if (!k || !c)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_combine_launch: NULL %s",
                          !k ? "kernel" : "call");
    int part = -1;
    for (int i = 0; i < k->num_parts; i++)
        if (k->parts[i].kind == FA3_KERNEL_COMBINE)
            part = i;
    if (part < 0)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_combine_launch: the kernel's operation "
                          "(%s) has no combine kernel (config split_kv = 0)", k->op->name);
    if (c->num_splits < 1 || c->num_splits > FA3_MAX_SPLITS)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "combine: num_splits %d not in 1..%d",
                          c->num_splits, FA3_MAX_SPLITS);
    if (c->rows < 1 || c->seqlen_q < 1 || c->num_heads < 1 || c->batch < 1)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "combine: rows %d, seqlen_q %d, num_heads %d, "
                          "batch %d must be at least 1", c->rows, c->seqlen_q, c->num_heads,
                          c->batch);
    const int64_t want = (int64_t)c->num_heads * c->seqlen_q * (k->cfg.varlen ? 1 : c->batch);
    if (want != c->rows)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "combine: rows %d, but the shape has %lld", c->rows,
                          (long long)want);
    if (!c->o_partial || !c->lse_partial || !c->o || (k->cfg.varlen && !c->cu_seqlens_q))
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "combine: NULL %s",
                          !c->o_partial ? "o_partial" : !c->lse_partial ? "lse_partial"
                                                      : !c->o ? "o" : "cu_seqlens_q");
    if ((uintptr_t)c->o_partial % 16 || (uintptr_t)c->lse_partial % 4 || (uintptr_t)c->o % 4 ||
        (uintptr_t)c->lse % 4)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "combine: a misaligned pointer (o_partial %p "
                          "needs 16 bytes, lse_partial %p, o %p, lse %p 4)",
                          (const void *)c->o_partial, (const void *)c->lse_partial, c->o,
                          (void *)c->lse);
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    CUfunction fn;
    FA3_TRY(fa3_kernel_function(k, part, &fn, NULL));
    fa3_kernel_param_block params;
    unsigned grid;
    fa3_combine_params_fill(c, &params.combine, &grid);
    void *kparams[] = {&params};
    const fa3_part *pt = &k->parts[part];
    return FA3_CU(d, cuLaunchKernel(fn, grid, 1, 1, (unsigned)pt->threads, 1, 1,
                                    (unsigned)pt->smem_bytes, (CUstream)stream, kparams, NULL));
}
