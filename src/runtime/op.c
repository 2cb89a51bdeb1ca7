/*
 * The operations (op.h): which kernels each runs, in order, and its workspace; and for each
 * kernel kind its entry name, parameter block size and launch shape. Adding a kind: a row in
 * kinds[] and a case in fa3_kind_shape; adding an operation: its fa3_op and its case in
 * fa3_op_for_config.
 */
#include "runtime/op.h"

static const fa3_kind kinds[FA3_KERNEL_NUM_KINDS] = {
    [FA3_KERNEL_FWD] = {FA3_KERNEL_NAME, sizeof(fa3_kernel_params)},
    [FA3_KERNEL_COMBINE] = {FA3_COMBINE_NAME, sizeof(fa3_combine_params)},
};

const fa3_kind *fa3_kind_get(fa3_kernel_kind kind)
{
    return (unsigned)kind < FA3_KERNEL_NUM_KINDS ? &kinds[kind] : NULL;
}

void fa3_kind_shape(fa3_kernel_kind kind, const fa3_plan *plan, int *threads, int *smem_bytes)
{
    switch (kind) {
    case FA3_KERNEL_FWD: /* the plan's CTA: producer and consumer warpgroups, all its smem */
        *threads = plan->threads;
        *smem_bytes = plan->smem_bytes;
        return;
    case FA3_KERNEL_COMBINE: /* a warp a row, no shared memory */
        *threads = 32 * FA3_COMBINE_WARPS;
        *smem_bytes = 0;
        return;
    case FA3_KERNEL_NUM_KINDS:
        break;
    }
    *threads = 0;
    *smem_bytes = 0;
}

void fa3_kind_key_config(fa3_kernel_kind kind, const fa3_config *cfg, fa3_config *out)
{
    if (kind != FA3_KERNEL_COMBINE) {
        *out = *cfg;
        return;
    }
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = c.head_dim_v = cfg->head_dim_v;
    c.dtype = c.out_dtype = cfg->out_dtype;
    c.varlen = cfg->varlen;
    c.split_kv = 1;
    /* valid by construction (head_dim_v is a head_dim, out_dtype a 16-bit dtype); the plain copy
       should canonicalisation ever refuse it keeps the key well defined */
    if (fa3_config_canonicalize(&c, out) != FA3_OK) {
        fa3_clearerr();
        *out = c;
    }
}

static size_t round256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

void fa3_split_layout_make(const fa3_plan *plan, const fa3_op_shape *shape, fa3_split_layout *L)
{
    const int64_t hq = shape->num_heads, sq = shape->seqlen_q;
    L->rows = plan->cfg.varlen ? hq * sq : (int64_t)shape->batch * hq * sq;
    L->lse_offset = L->bytes = 0;
    const unsigned __int128 ns = shape->num_splits > 0 ? (unsigned)shape->num_splits : 1;
    const unsigned __int128 o = ns * (uint64_t)L->rows * (unsigned)plan->cfg.head_dim_v * 4;
    const unsigned __int128 l = ns * (uint64_t)L->rows * 4;
    if (L->rows < 0 || o + l + 512 > (unsigned __int128)(SIZE_MAX / 2))
        return;
    L->lse_offset = round256((size_t)o);
    L->bytes = L->lse_offset + round256((size_t)l);
}

static size_t split_workspace(const fa3_plan *plan, const fa3_op_shape *shape)
{
    fa3_split_layout L;
    fa3_split_layout_make(plan, shape, &L);
    return L.bytes;
}

/* The forward pass: one kernel, no workspace. */
static const fa3_op forward = {"forward", 1, {FA3_KERNEL_FWD}, NULL};
/* Split-KV: the forward kernel into fp32 partials, the combine kernel merging them. */
static const fa3_op forward_split = {"forward_split", 2, {FA3_KERNEL_FWD, FA3_KERNEL_COMBINE},
                                     split_workspace};

const fa3_op *fa3_op_for_config(const fa3_config *canonical)
{
    return canonical->split_kv == 1 ? &forward_split : &forward;
}

size_t fa3_op_workspace_bytes(const fa3_op *op, const fa3_plan *plan, const fa3_op_shape *shape)
{
    return op->workspace_bytes ? op->workspace_bytes(plan, shape) : 0;
}
