/*
 * The generator's entry points: which emitter writes each kernel kind (kernel_abi.h) for a plan,
 * and fa3_emit_ptx (canonical config → plan → the forward kernel's PTX). Apart from config.c so
 * that validation and emission do not call each other: the emitters use config.c
 * (fa3_config_describe for the PTX header), and this file uses both.
 */
#include "codegen/generate.h"

fa3_status fa3_codegen_kernel(fa3_kernel_kind kind, const fa3_plan *plan, char **ptx, size_t *len)
{
    switch (kind) {
    case FA3_KERNEL_FWD:
        return fa3_codegen_ptx(plan, ptx, len);
    case FA3_KERNEL_COMBINE:
        return fa3_codegen_combine(plan, ptx, len);
    case FA3_KERNEL_NUM_KINDS:
        break;
    }
    return fa3_seterr(FA3_ERR_INTERNAL, "no emitter for kernel kind %d", (int)kind);
}

fa3_status fa3_emit_ptx(const fa3_config *cfg, char **ptx, size_t *len)
{
    if (!ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_emit_ptx: NULL ptx");
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(cfg, &c));
    fa3_plan plan;
    FA3_TRY(fa3_plan_make(&c, &plan));
    return fa3_codegen_kernel(FA3_KERNEL_FWD, &plan, ptx, len);
}

fa3_status fa3_tools_emit_ptx_named(const fa3_config *cfg, char **ptx, size_t *len)
{
    if (!cfg || !ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_tools_emit_ptx_named: NULL argument");
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(cfg, &c));
    fa3_plan plan;
    FA3_TRY(fa3_plan_make(&c, &plan));
    return fa3_codegen_ptx_named(&plan, ptx, len);
}
