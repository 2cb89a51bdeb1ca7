/*
 * The online softmax of one key block (FlashAttention, with FA3's exp2 and folded constants), the
 * O rescale and the P fragments. Per thread two rows (lane/4 and +8 of the warp's 16), block_n/4
 * scores each.
 *
 * Softcap first (tanh.approx(s·score_mul)), then the mask (blockinfo.c), the row max over the
 * thread's values and shfl.bfly 1, 2; m_z = m_new, or 0 while the row has seen no key (no
 * (-inf)-(-inf)); alpha = 2^((m_old - m_z)·c), p = 2^((s - m_z)·c) with c = scale_log2
 * (softmax_scale·log2 e, or softcap·log2 e); thread-partial row sums in fp32.
 *
 * The max is subtracted before the scaling, on purpose: FA3's single FMA 2^(s·c - round(m·c))
 * carries the rounding of m·c (half an ulp: 4096 at |m·c| = 1e11) into the exponent, so large
 * scores gave p = inf or 0 and O = NaN (issue 12; docs/notes.md has the cost, 2-5% at hd64/128,
 * and the variants measured). max.f32 ignores a NaN operand, but p = ex2(NaN) = NaN keeps a NaN
 * row NaN (edge case E14).
 */
#include "codegen/kgen.h"

void kg_softmax(kgen *g, cons *c, int masked)
{
    const fa3_plan *p = g->p;
    const int ns = p->block_n / 2;
    if (p->dbg_no_softmax) {
        /* timing only: P = S as it comes (no softcap, mask, max, exp or sum), alpha = 1; l stays
           0, so O is written as 0 (or NaN) and LSE as -inf */
        INS("mov.f32 $, " ONE_F ";", c->alpha[0]);
        INS("mov.f32 $, " ONE_F ";", c->alpha[1]);
        return;
    }
    if (p->cfg.softcap) {
        for (int i = 0; i < ns; i++) {
            INS("mul.f32 $, $, $;", ptx_at(c->s, i), ptx_at(c->s, i), c->score_mul);
            INS("tanh.approx.f32 $, $;", ptx_at(c->s, i), ptx_at(c->s, i));
        }
    }
    if (masked)
        kg_apply_mask(g, c);

    for (int r = 0; r < 2; r++) {
        /* the block's row max over the thread's values, then over the row's 4 threads */
        ptx_r bmax = c->tmp.bmax[r], o = c->tmp.shf;
        int first = 1;
        for (int i = 0; i < ns; i++) {
            if (acc_row(i) != r)
                continue;
            if (first)
                INS("mov.f32 $, $;", bmax, ptx_at(c->s, i));
            else
                INS("max.f32 $, $, $;", bmax, bmax, ptx_at(c->s, i));
            first = 0;
        }
        for (int lanes = 1; lanes <= 2; lanes *= 2) {
            INS("shfl.sync.bfly.b32 $, $, %d, 31, -1;", o, bmax, lanes);
            INS("max.f32 $, $, $;", bmax, bmax, o);
        }
        ptx_r mnew = c->tmp.mnew[r], mz = c->tmp.mz[r], none = c->tmp.nokey;
        INS("max.f32 $, $, $;", mnew, bmax, c->m[r]);
        INS("setp.eq.f32 $, $, " NEG_INF ";", none, mnew);
        INS("selp.f32 $, " ZERO_F ", $, $;", mz, mnew, none);
        INS("sub.rn.f32 $, $, $;", c->alpha[r], c->m[r], mz);
        INS("mul.rn.f32 $, $, $;", c->alpha[r], c->alpha[r], c->scale_log2);
        INS("ex2.approx.ftz.f32 $, $;", c->alpha[r], c->alpha[r]);
        INS("mov.f32 $, $;", c->m[r], mnew);
    }
    /* p = 2^((s - m_z)·c) (explicit rounding: no contraction into an FMA), partial row sums */
    ptx_r *sum = c->tmp.psum;
    INS("mov.f32 $, " ZERO_F ";", sum[0]);
    INS("mov.f32 $, " ZERO_F ";", sum[1]);
    for (int i = 0; i < ns; i++) {
        const int r = acc_row(i);
        ptx_r x = ptx_at(c->s, i);
        INS("sub.rn.f32 $, $, $;", x, x, c->tmp.mz[r]);
        INS("mul.rn.f32 $, $, $;", x, x, c->scale_log2);
        INS("ex2.approx.ftz.f32 $, $;", x, x);
        INS("add.f32 $, $, $;", sum[r], sum[r], x);
    }
    for (int r = 0; r < 2; r++)
        INS("fma.rn.f32 $, $, $, $;", c->l[r], c->l[r], c->alpha[r], sum[r]);
}

/* O *= alpha (per row), once the PV wgmma writing O has completed. */
void kg_rescale_o(kgen *g, cons *c)
{
    if (g->p->dbg_no_softmax)
        return;
    for (int i = 0; i < g->p->hdv_chunks * 32; i++)
        INS("mul.f32 $, $, $;", ptx_at(c->o, i), ptx_at(c->o, i), c->alpha[acc_row(i)]);
}

/* P fragments: a[4kk+j] = (lo = p[8kk+2j], hi = p[8kk+2j+1]); cvt puts its first source in the
   upper half. */
void kg_pack_p(kgen *g, cons *c)
{
    for (int j = 0; j < g->p->block_n / 4; j++)
        INS("cvt.rn.%s.f32 $, $, $;", g->cvt, ptx_at(c->a, j), ptx_at(c->s, 2 * j + 1),
            ptx_at(c->s, 2 * j));
}
