/*
 * Integer division in the kernels' PTX (divide.c): each helper writes into q (or r; it may be
 * the dividend's register) the quotient (remainder) of a u32 (s32 for the sdiv) by a divisor;
 * under the plan's fast_div knob as a multiply and shifts (divmagic.h), else as the one div/rem
 * instruction. The kg_*div/rem forms without _to make the result's register, named name.
 */
#ifndef FA3JIT_CODEGEN_DIVIDE_H
#define FA3JIT_CODEGEN_DIVIDE_H

#include <stdint.h>

#include "codegen/kgen.h"
#include "kernel_abi.h"

/* By a plan constant d (fast_div >= 1): a power of two as a shift or mask. */
void kg_udiv_imm_to(kgen *g, ptx_r q, ptx_r a, uint32_t d);
void kg_urem_imm_to(kgen *g, ptx_r r, ptx_r a, uint32_t d);
/* Signed a by a positive plan constant d, truncating as div.s32. */
void kg_sdiv_imm_to(kgen *g, ptx_r q, ptx_r a, int32_t d);
/* Signed a known to be >= 0 by a positive plan constant d: div.s32 without fast_div, else the
   unsigned forms (the same quotient for a >= 0). */
void kg_sdiv_nonneg_imm_to(kgen *g, ptx_r q, ptx_r a, int32_t d);
/* By the launch's divisor d (its register, loaded from the parameter block), whose magic the
   runtime passes in slot (fast_div >= 2). */
void kg_udiv_param_to(kgen *g, ptx_r q, ptx_r a, ptx_r d, fa3_div_slot slot);
void kg_urem_param_to(kgen *g, ptx_r r, ptx_r a, ptx_r d, fa3_div_slot slot);

static inline ptx_r kg_udiv_param(kgen *g, const char *name, ptx_r a, ptx_r d,
                                  fa3_div_slot slot)
{
    ptx_r q = ptx_reg(g->f, PTX_B32, name);
    kg_udiv_param_to(g, q, a, d, slot);
    return q;
}

static inline ptx_r kg_urem_param(kgen *g, const char *name, ptx_r a, ptx_r d,
                                  fa3_div_slot slot)
{
    ptx_r r = ptx_reg(g->f, PTX_B32, name);
    kg_urem_param_to(g, r, a, d, slot);
    return r;
}

#endif
