/*
 * The operations (op.h): which kernels each runs, in order, and its workspace; and for each
 * kernel kind its entry name, parameter block size and launch shape. Adding a kind: a row in
 * kinds[] and a case in fa3_kind_shape; adding an operation: its fa3_op and its case in
 * fa3_op_for_config.
 */
#include "runtime/op.h"

static const fa3_kind kinds[FA3_KERNEL_NUM_KINDS] = {
    [FA3_KERNEL_FWD] = {FA3_KERNEL_NAME, sizeof(fa3_kernel_params)},
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
    case FA3_KERNEL_NUM_KINDS:
        break;
    }
    *threads = 0;
    *smem_bytes = 0;
}

/* The forward pass: one kernel, no workspace. */
static const fa3_op forward = {"forward", 1, {FA3_KERNEL_FWD}, NULL};

const fa3_op *fa3_op_for_config(const fa3_config *canonical)
{
    (void)canonical; /* every config runs the forward operation (split-KV will choose here) */
    return &forward;
}

size_t fa3_op_workspace_bytes(const fa3_op *op, const fa3_plan *plan, const fa3_op_shape *shape)
{
    return op->workspace_bytes ? op->workspace_bytes(plan, shape) : 0;
}
