/*
 * Integer division in the kernels' PTX. ptxas 13.0 lowers div.u32 and rem.u32 to its generic
 * sequence (a float reciprocal refined by IMADs: about 15 SASS instructions, most of them one
 * dependent chain through I2F, MUFU.RCP and F2I) even where the divisor is an immediate power of
 * two, and the persistent tile loop decodes every tile through a chain of such divisions (tile ->
 * m_block and pair -> head and batch -> kv head, tile_order.c) before its first QK. Under the plan's
 * fast_div knob the divisions below become a multiply and shifts (divmagic.h): with fast_div >= 1
 * those by a plan constant, with fast_div >= 2 also those by a launch's divisor, whose magic the
 * runtime passes in fa3_kernel_params.div (slot fa3_div_slot). Without the knob each helper emits
 * the one div/rem instruction it stands for, so the default PTX is unchanged.
 */
#include "codegen/divide.h"

#include "divmagic.h"
#include "kernel_abi.h"

static int pow2_log(uint32_t d)
{
    return d && !(d & (d - 1)) ? __builtin_ctz(d) : -1;
}

/* q = (t + ((a - t) >> s1)) >> s2 with t = mulhi(a, m): the magic's five instructions, with
   m, s1, s2 immediates (mg) or registers (regs, where mg is NULL); q may be a. */
static void magic_div(kgen *g, ptx_r q, ptx_r a, const fa3_divmagic *mg, const ptx_r *regs)
{
    ptx_r t = ptx_reg(g->f, PTX_B32, "dvt"), u = ptx_reg(g->f, PTX_B32, "dvu");
    if (mg)
        INS("mul.hi.u32 $, $, %u;", t, a, mg->mul);
    else
        INS("mul.hi.u32 $, $, $;", t, a, regs[0]);
    INS("sub.u32 $, $, $;", u, a, t);
    if (mg)
        INS("shr.u32 $, $, %u;", u, u, mg->s1);
    else
        INS("shr.u32 $, $, $;", u, u, regs[1]);
    INS("add.u32 $, $, $;", u, u, t);
    if (mg)
        INS("shr.u32 $, $, %u;", q, u, mg->s2);
    else
        INS("shr.u32 $, $, $;", q, u, regs[2]);
}

static void udiv_const(kgen *g, ptx_r q, ptx_r a, uint32_t d)
{
    const int k = pow2_log(d);
    if (k >= 0) {
        INS("shr.u32 $, $, %d;", q, a, k);
        return;
    }
    const fa3_divmagic mg = fa3_divmagic_of(d);
    magic_div(g, q, a, &mg, NULL);
}

void kg_udiv_imm_to(kgen *g, ptx_r q, ptx_r a, uint32_t d)
{
    if (!g->p->fast_div || d == 0)
        INS("div.u32 $, $, %u;", q, a, d);
    else
        udiv_const(g, q, a, d);
}

void kg_urem_imm_to(kgen *g, ptx_r r, ptx_r a, uint32_t d)
{
    const int k = pow2_log(d);
    if (!g->p->fast_div || d == 0) {
        INS("rem.u32 $, $, %u;", r, a, d);
    } else if (k >= 0) {
        INS("and.b32 $, $, %u;", r, a, d - 1);
    } else {
        ptx_r q = ptx_reg(g->f, PTX_B32, "dvq");
        udiv_const(g, q, a, d);
        INS("mul.lo.u32 $, $, %u;", q, q, d);
        INS("sub.u32 $, $, $;", r, a, q);
    }
}

void kg_sdiv_imm_to(kgen *g, ptx_r q, ptx_r a, int32_t d)
{
    const int k = d > 0 ? pow2_log((uint32_t)d) : -1;
    if (!g->p->fast_div || d <= 0) {
        INS("div.s32 $, $, %d;", q, a, d);
    } else if (k == 0) {
        INS("mov.u32 $, $;", q, a);
    } else if (k > 0) { /* C's truncation: 2^k - 1 added to a negative a before the shift */
        ptx_r t = ptx_reg(g->f, PTX_B32, "dvs");
        INS("shr.s32 $, $, 31;", t, a);
        INS("shr.u32 $, $, %d;", t, t, 32 - k);
        INS("add.u32 $, $, $;", t, a, t);
        INS("shr.s32 $, $, %d;", q, t, k);
    } else { /* |a| / d with a's sign (|INT32_MIN| = 2^31 is exact as u32) */
        ptx_r neg = ptx_reg(g->f, PTX_PRED, "dvneg"), ua = ptx_reg(g->f, PTX_B32, "dvua");
        INS("setp.lt.s32 $, $, 0;", neg, a);
        INS("sub.u32 $, 0, $;", ua, a);
        INS("selp.b32 $, $, $, $;", ua, ua, a, neg);
        udiv_const(g, ua, ua, (uint32_t)d);
        ptx_r nq = ptx_reg(g->f, PTX_B32, "dvnq");
        INS("sub.u32 $, 0, $;", nq, ua);
        INS("selp.b32 $, $, $, $;", q, nq, ua, neg);
    }
}

void kg_sdiv_nonneg_imm_to(kgen *g, ptx_r q, ptx_r a, int32_t d)
{
    if (!g->p->fast_div || d <= 0)
        INS("div.s32 $, $, %d;", q, a, d);
    else
        udiv_const(g, q, a, (uint32_t)d);
}

/* q = a / d by slot's magic from the parameter block; FA3_DIV_SEC_PAIRS: d is section_hb or, in
   the masked order's last section, the fewer pairs left (FA3_DIV_LAST_PAIRS's magic) */
static void udiv_slot(kgen *g, ptx_r q, ptx_r a, ptx_r d, fa3_div_slot slot)
{
    ptx_r mg[3];
    static const char *const nm[3] = {"dvm", "dvs1", "dvs2"};
    if (slot == FA3_DIV_SEC_PAIRS) {
        ptx_r hb = kg_param(g, PTX_B32, "u32", FA3P_OFF_SECTION_HB, "dvhb");
        ptx_r last = ptx_reg(g->f, PTX_PRED, "dvlast");
        INS("setp.lt.u32 $, $, $;", last, d, hb);
        for (int i = 0; i < 3; i++) {
            const int off = FA3P_OFF_DIV + i * 4;
            ptx_r x = kg_param(g, PTX_B32, "u32", off + FA3_DIV_SEC_HB * 12, nm[i]);
            ptx_r y = kg_param(g, PTX_B32, "u32", off + FA3_DIV_LAST_PAIRS * 12, nm[i]);
            mg[i] = ptx_reg(g->f, PTX_B32, nm[i]);
            INS("selp.b32 $, $, $, $;", mg[i], y, x, last);
        }
    } else {
        for (int i = 0; i < 3; i++)
            mg[i] = kg_param(g, PTX_B32, "u32", FA3P_OFF_DIV + (int)slot * 12 + i * 4, nm[i]);
    }
    magic_div(g, q, a, NULL, mg);
}

void kg_udiv_param_to(kgen *g, ptx_r q, ptx_r a, ptx_r d, fa3_div_slot slot)
{
    if (g->p->fast_div < 2)
        INS("div.u32 $, $, $;", q, a, d);
    else
        udiv_slot(g, q, a, d, slot);
}

void kg_urem_param_to(kgen *g, ptx_r r, ptx_r a, ptx_r d, fa3_div_slot slot)
{
    if (g->p->fast_div < 2) {
        INS("rem.u32 $, $, $;", r, a, d);
        return;
    }
    ptx_r q = ptx_reg(g->f, PTX_B32, "dvq");
    udiv_slot(g, q, a, d, slot);
    INS("mul.lo.u32 $, $, $;", q, q, d);
    INS("sub.u32 $, $, $;", r, a, q);
}
