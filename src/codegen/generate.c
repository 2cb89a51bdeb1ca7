/*
 * The generator's entry point for callers: fa3_emit_ptx (canonical config → plan → PTX). Apart
 * from config.c so that validation and emission do not call each other: the emitter uses
 * config.c (fa3_config_describe for the PTX header), and this file uses both.
 */
#include "codegen/codegen.h"

fa3_status fa3_emit_ptx(const fa3_config *cfg, char **ptx, size_t *len)
{
    if (!ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_emit_ptx: NULL ptx");
    fa3_config c;
    FA3_TRY(fa3_config_canonicalize(cfg, &c));
    fa3_plan plan;
    FA3_TRY(fa3_plan_make(&c, &plan));
    return fa3_codegen_ptx(&plan, ptx, len);
}
