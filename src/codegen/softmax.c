/*
 * The online softmax of one key block (FlashAttention, with FA3's exp2 and folded constants), the
 * O rescale and the P fragments. Per thread two rows (lane/4 and +8 of the warp's 16), block_n/4
 * scores each.
 *
 * Softcap first (tanh.approx(s·score_mul)), then the mask (blockinfo.c), the row max over the
 * thread's values and shfl.bfly 1, 2; m_z = m_new, or 0 while the row has seen no key (no
 * (-inf)-(-inf)); c = scale_log2 (softmax_scale·log2 e, or softcap·log2 e); thread-partial row
 * sums in fp32.
 *
 * bf16/fp16 (fast_exp, the default; row_new_max has the details): p = 2^fma(s, c_r, -off), one
 * FMA a score, with off = RU(m_z·c) and its exact rounding e carried into alpha and the LSE.
 * e4m3 and fast_exp=0: p = 2^((s - m_z)·c), alpha = 2^((m_old - m_z)·c): the max subtracted
 * before the scaling. FA3's single FMA 2^(s·c - round(m·c)) without e carries the rounding of
 * m·c (half an ulp: 4096 at |m·c| = 1e11) into the exponent, so large scores gave p = inf or 0
 * and O = NaN (issue 12; docs/notes.md has both forms' costs). max.f32 ignores a NaN operand,
 * but p = ex2(NaN) = NaN keeps a NaN row NaN (edge case E14).
 */
#include "codegen/kgen.h"
#include "kernel_abi.h"

/* e4m3: FA3's exponent offset. P is formed as 2^((s - m)·c + 8), in (0, 256] (e4m3 reaches 448),
   so that small probabilities keep e4m3's normal range (2^-6 and up) longer; the row sums carry
   the same 2^8, which cancels in O/l, and the LSE takes 8·ln 2 off (epilogue.c). */
#define FP8_P_OFFSET "0f41000000" /* 8.0 */

void kg_descales_init(kgen *g, cons *c)
{
    c->ds.qp = kg_param(g, PTX_B64, "u64", FA3P_OFF_DESCALE_Q, "dsq");
    c->ds.kp = kg_param(g, PTX_B64, "u64", FA3P_OFF_DESCALE_K, "dsk");
    c->ds.vp = kg_param(g, PTX_B64, "u64", FA3P_OFF_DESCALE_V, "dsv");
    c->ds.nhk = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS_K, "nhk");
    c->ds.smul = c->score_mul;
    c->ds.sl2 = c->scale_log2;
    c->ds.lmul = c->lse_mul;
    c->score_mul = ptx_reg(g->f, PTX_F32, "smul_t");
    c->scale_log2 = ptx_reg(g->f, PTX_F32, "sl2_t");
    c->lse_mul = ptx_reg(g->f, PTX_F32, "lmul_t");
    c->ds.v = ptx_reg(g->f, PTX_F32, "dsv_t");
}

/* One descale of the tile's (batch, kv head): 1 when its array is not given. */
static ptx_r load_descale(kgen *g, ptx_r ptr, ptx_r off, const char *name)
{
    ptx_r v = ptx_reg(g->f, PTX_F32, name), a = ptx_reg(g->f, PTX_B64, "dsaddr");
    ptx_r has = ptx_reg(g->f, PTX_PRED, "dshas");
    INS("mov.f32 $, " ONE_F ";", v);
    INS("setp.ne.u64 $, $, 0;", has, ptr);
    INS("add.s64 $, $, $;", a, ptr, off);
    INS("@$ ld.global.nc.f32 $, [$];", has, v, a);
    return v;
}

/* The scores are q8·k8 sums: the real scores are those times descale_q·descale_k, which the
   tile's constants take in (softcap: the pre-tanh factor; else the exp2 scale and the LSE's);
   descale_v scales O in the epilogue. */
void kg_descales_tile(kgen *g, cons *c)
{
    ptx_r idx = ptx_reg(g->f, PTX_B32, "dsidx"), i64 = ptx_reg(g->f, PTX_B64, "dsidx");
    ptx_r off = ptx_reg(g->f, PTX_B64, "dsoff");
    INS("mad.lo.u32 $, $, $, $;", idx, c->t.batch, c->ds.nhk, c->t.kvhead);
    INS("cvt.u64.u32 $, $;", i64, idx);
    INS("shl.b64 $, $, 2;", off, i64);
    ptx_r dq = load_descale(g, c->ds.qp, off, "dsq_t");
    ptx_r dk = load_descale(g, c->ds.kp, off, "dsk_t");
    ptx_r dv = load_descale(g, c->ds.vp, off, "dsv_l");
    ptx_r dqk = ptx_reg(g->f, PTX_F32, "dsqk");
    INS("mul.rn.f32 $, $, $;", dqk, dq, dk);
    INS("mov.f32 $, $;", c->ds.v, dv);
    if (g->p->cfg.softcap) {
        INS("mul.rn.f32 $, $, $;", c->score_mul, c->ds.smul, dqk);
        INS("mov.f32 $, $;", c->scale_log2, c->ds.sl2);
        INS("mov.f32 $, $;", c->lse_mul, c->ds.lmul);
    } else {
        INS("mov.f32 $, $;", c->score_mul, c->ds.smul);
        INS("mul.rn.f32 $, $, $;", c->scale_log2, c->ds.sl2, dqk);
        INS("mul.rn.f32 $, $, $;", c->lse_mul, c->ds.lmul, dqk);
    }
}

/* The block's max of row r over the thread's values, then over the row's 4 threads (bmax). */
static void row_max(kgen *g, cons *c, int r)
{
    const int ns = kg_ns(g, c);
    ptx_r bmax = c->tmp.bmax[r], o = c->tmp.shf;
    /* tree_reduce: the row's j-th value into accumulator j % 4 (max is exact in any order) */
    const int nacc = g->p->tree_reduce ? 4 : 1;
    ptx_r acc[4] = {bmax};
    for (int k = 1; k < nacc; k++)
        acc[k] = c->tmp.racc[r][k - 1];
    int j = 0;
    for (int i = 0; i < ns; i++) {
        if (acc_row(i) != r)
            continue;
        if (j < nacc)
            INS("mov.f32 $, $;", acc[j % nacc], ptx_at(c->s, i));
        else
            INS("max.f32 $, $, $;", acc[j % nacc], acc[j % nacc], ptx_at(c->s, i));
        j++;
    }
    if (nacc == 4) {
        INS("max.f32 $, $, $;", acc[0], acc[0], acc[1]);
        INS("max.f32 $, $, $;", acc[2], acc[2], acc[3]);
        INS("max.f32 $, $, $;", acc[0], acc[0], acc[2]);
    }
    for (int lanes = 1; lanes <= 2; lanes *= 2) {
        INS("shfl.sync.bfly.b32 $, $, %d, 31, -1;", o, bmax, lanes);
        INS("max.f32 $, $, $;", bmax, bmax, o);
    }
}

/* x = 2^x on the FMA pipe (ex2_emu): x clamped to [-126, ...] keeping NaN, j = round(x) by
   the 1.5·2^23 shift, f = x - j in [-0.5, 0.5], 2^f by a degree-3 polynomial (relative error
   7.5e-5, fitted to minimize it on that interval; P's bf16/fp16 rounding is 2e-3/4.9e-4) and
   2^j added to its exponent field (the shifted bits of x + 1.5·2^23: their low bits are j, and
   1.5·2^23's own bits vanish in the shift). Below -126 the result is 2^-126·2^f rather than 0,
   which only unmasked blocks (no -inf keys from the mask) may accept. */
static void ex2_poly(kgen *g, cons *c, ptx_r x)
{
    ptx_r t = c->tmp.emu[0], j = c->tmp.emu[1], q = c->tmp.emu[2];
    INS("max.NaN.f32 $, $, 0fC2FC0000;", x, x); /* -126 */
    INS("add.rn.f32 $, $, 0f4B400000;", t, x);  /* 1.5·2^23 */
    INS("sub.rn.f32 $, $, 0f4B400000;", j, t);
    INS("sub.rn.f32 $, $, $;", x, x, j);        /* f */
    INS("fma.rn.f32 $, $, 0f3D61FBB0, 0f3E786F0D;", q, x);
    INS("fma.rn.f32 $, $, $, 0f3F31798D;", q, q, x);
    INS("fma.rn.f32 $, $, $, 0f3F7FFB49;", q, q, x);
    ptx_r ti = c->tmp.emu_i[0], qi = c->tmp.emu_i[1]; /* the bits, as integers */
    INS("mov.b32 $, $;", ti, t);
    INS("mov.b32 $, $;", qi, q);
    INS("shl.b32 $, $, 23;", ti, ti);
    INS("add.s32 $, $, $;", qi, qi, ti);
    INS("mov.b32 $, $;", x, qi);
}

/* Row r's new max m (keep: the old one unless c->rescale), its exp2 offset mz (0 for a row
   without keys) and alpha = 2^((m_old - mz)·c). */
static void row_new_max(kgen *g, cons *c, int r, int keep)
{
    ptx_r mnew = c->tmp.mnew[r], mz = c->tmp.mz[r], none = c->tmp.nokey;
    INS("max.f32 $, $, $;", mnew, c->tmp.bmax[r], c->m[r]);
    if (keep) /* the max kept: alpha = 2^0 = 1 */
        INS("selp.f32 $, $, $, $;", mnew, mnew, c->m[r], c->rescale);
    INS("setp.eq.f32 $, $, " NEG_INF ";", none, mnew);
    INS("selp.f32 $, " ZERO_F ", $, $;", mz, mnew, none);
    if (g->p->fast_exp) {
        /* fast_exp: p = 2^fma(s, c_r, -off), one FMA a score, where off = RU(mz·c) (rounded up:
           p <= 1 at every magnitude) and its rounding e = mz·c - off (exact: the error of a
           rounded product is a float) enters alpha and the LSE, so the blocks' weights agree
           exactly. Beyond |mz·c| >= 2^27 (fp16 2^26) the rounding (up to an ulp, 16 / 8) would
           take p at the max below 2^-16 (fp16 2^-8): such rows take c_r = c2, the power of two
           <= c, with off = mz·c2 exact (p = 1 at the max, e = 0). Their exponents are then up
           to 2x too small in magnitude, which the fp32 scores' own error there (each key's
           weight moves by 2^(2^-22·c·Σ|q·k|) >= 2^32 / 2^16 at the threshold: test_magnitude's
           rule) exceeds for every key that can weigh (x >= -30 / -24). */
        ptx_r cr = c->tmp.cr[r], noff = c->tmp.noff[r], enew = c->tmp.enew[r];
        ptx_r big = c->tmp.big, t = c->tmp.shf; /* shf: free after row_max */
        INS("mul.rp.f32 $, $, $;", enew, mz, c->scale_log2);
        INS("abs.f32 $, $;", noff, enew);
        INS("setp.ge.f32 $, $, %s;", big, noff,
            g->p->cfg.dtype == FA3_DTYPE_FP16 ? "0f4C800000" /* 2^26 */ : "0f4D000000" /* 2^27 */);
        INS("selp.f32 $, $, $, $;", cr, c->tmp.c2, c->scale_log2, big);
        INS("mul.rn.f32 $, $, $;", noff, mz, c->tmp.c2);
        INS("selp.f32 $, $, $, $;", noff, noff, enew, big);
        INS("neg.f32 $, $;", noff, noff);
        INS("fma.rn.f32 $, $, $, $;", enew, mz, cr, noff);
        INS("sub.rn.f32 $, $, $;", c->alpha[r], c->m[r], mz);
        INS("sub.rn.f32 $, $, $;", t, enew, c->e[r]);
        INS("fma.rn.f32 $, $, $, $;", c->alpha[r], c->alpha[r], cr, t);
        INS("ex2.approx.ftz.f32 $, $;", c->alpha[r], c->alpha[r]);
        INS("mov.f32 $, $;", c->m[r], mnew);
        INS("mov.f32 $, $;", c->e[r], enew);
        return;
    }
    INS("sub.rn.f32 $, $, $;", c->alpha[r], c->m[r], mz);
    INS("mul.rn.f32 $, $, $;", c->alpha[r], c->alpha[r], c->scale_log2);
    INS("ex2.approx.ftz.f32 $, $;", c->alpha[r], c->alpha[r]);
    INS("mov.f32 $, $;", c->m[r], mnew);
}

/* early_pack: P pair j (scores 2j, 2j+1) into its A fragment, as kg_pack_p does for all. */
static void pack_pair(kgen *g, cons *c, int j)
{
    INS("cvt.rn.%s.f32 $, $, $;", g->cvt, ptx_at(c->a, j), ptx_at(c->s, 2 * j + 1),
        ptx_at(c->s, 2 * j));
}

/* early_pack: the PV's wait inside the softmax, after the exponentials summed so far into the
   row sums part[r][0 .. min(nsum, seen[r]) - 1]. ptxas hoists a wgmma.wait_group above
   independent arithmetic (at hd64 above every exponential) but not above an mbarrier arrive:
   with c->k_release (early_pack 2) the block's K release comes first, on lane 0 and every such
   sum > -1 or NaN (always true: sums of 2^y; ptxas cannot fold it), so the wait stays behind
   those exponentials. */
static void pv_wait(kgen *g, cons *c, ptx_r part[2][4], int nsum, const int seen[2])
{
    if (c->k_release) {
        INS("setp.gtu.f32 $, $, 0fBF800000;", g->sc.fence, part[0][0]); /* -1.0 */
        for (int r = 0; r < 2; r++)
            for (int k = !r; k < nsum && k < seen[r]; k++)
                INS("setp.gtu.and.f32 $, $, 0fBF800000, $;", g->sc.fence, part[r][k], g->sc.fence);
        g->sc.fenced = 1;
        c->k_release(g, c);
        g->sc.fenced = 0;
    }
    INS("wgmma.wait_group.sync.aligned 0;");
}

void kg_softmax(kgen *g, cons *c, int masked, int pv_in_flight)
{
    const fa3_plan *p = g->p;
    const int ns = kg_ns(g, c);
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
    if (masked == 2) { /* mask_branch: the block's need, uniform over the CTA */
        const int skip = ptx_label(g->f, "no_mask");
        INS("@!$ bra.uni %s;", c->tmp.need, ptx_lab(g->f, skip));
        kg_apply_mask(g, c);
        ptx_place(g->f, skip);
    } else if (masked) {
        kg_apply_mask(g, c);
    }

    /* cond_rescale (16-bit P only): the warp keeps every row's max unless one of them grows by
       more than 8 in the exp2 domain (then P <= 2^8: no bf16/fp16 overflow; LSE and O use the
       max kept, so they are unchanged); alpha is then exactly 1 and kg_rescale_o skips O's
       multiply, the branch uniform over the warp (vote.any) */
    const int cond = p->cond_rescale, fast = p->fast_exp;
    if (fast) /* c2: the power of two <= c (c > 0: fwd_args.c) */
        INS("and.b32 $, $, 0xFF800000;", c->tmp.c2, c->scale_log2);
    /* row by row (max, then its new max and alpha); cond_rescale: both maxima before the vote */
    for (int r = 0; r < 2; r++) {
        row_max(g, c, r);
        if (!cond)
            row_new_max(g, c, r, 0);
    }
    if (cond) {
        /* some row of the warp: (bmax - m)·c > 8 (-inf - -inf = NaN: no) */
        ptx_r need = c->tmp.nokey;
        for (int q = 0; q < 2; q++) {
            INS("sub.f32 $, $, $;", c->tmp.mz[q], c->tmp.bmax[q], c->m[q]);
            INS("mul.f32 $, $, $;", c->tmp.mz[q], c->tmp.mz[q], c->scale_log2);
            INS("setp.gt.f32 $, $, 0f41000000;", q ? need : c->rescale, c->tmp.mz[q]);
        }
        INS("or.pred $, $, $;", c->rescale, c->rescale, need); /* 8.0 above */
        INS("vote.sync.any.pred $, $, -1;", c->rescale, c->rescale);
        if (p->kept_branch && fast && pv_in_flight && !p->ex2_emu) {
            /* kept_branch: in the loop's blocks, a warp that keeps every row's max jumps over the
               new max's arithmetic, whose results (m, e, c_r, -off) would equal the carried ones
               (the tile's first block, pv_in_flight 0, computes them for every row); alpha = 1
               (a row without keys: 0 there, but its l is 0 or NaN either way: p = 2^-inf = 0;
               not with ex2_emu, whose polynomial gives 2^-126 there) */
            const int keep = ptx_label(g->f, "kept_max"), done = ptx_label(g->f, "new_max");
            INS("@!$ bra.uni %s;", c->rescale, ptx_lab(g->f, keep));
            for (int r = 0; r < 2; r++)
                row_new_max(g, c, r, 0);
            INS("bra.uni %s;", ptx_lab(g->f, done));
            ptx_place(g->f, keep);
            for (int r = 0; r < 2; r++)
                INS("mov.f32 $, " ONE_F ";", c->alpha[r]);
            ptx_place(g->f, done);
        } else {
            for (int r = 0; r < 2; r++)
                row_new_max(g, c, r, 1);
        }
    }
    /* p = 2^fma(s, c_r, -off) (fast_exp) or 2^((s - m_z)·c) (explicit rounding: no contraction
       into an FMA), partial row sums */
    ptx_r *sum = c->tmp.psum;
    /* tree_reduce (fast_exp): the row's j-th p into partial sum j % 4 */
    const int nsum = fast && p->tree_reduce ? 4 : 1;
    ptx_r part[2][4] = {{sum[0]}, {sum[1]}};
    for (int r = 0; r < 2; r++)
        for (int k = 1; k < nsum; k++)
            part[r][k] = c->tmp.sacc[r][k - 1];
    int seen[2] = {0, 0};
    /* early_pack: the PV's wait after the first EARLY_PACK_WAIT exponentials (FA4's hd64 loop:
       after 12 with alpha's two); the A fragments it reads are free after it, and each pair is
       packed once both its exponentials are done (the pairs done before the wait, right after
       it) */
    const int early = kg_early_pack(p);
    int waited = !pv_in_flight, packed = 0;
    if (nsum == 1) {
        INS("mov.f32 $, " ZERO_F ";", sum[0]);
        INS("mov.f32 $, " ZERO_F ";", sum[1]);
    }
    for (int i = 0; i < ns; i++) {
        const int r = acc_row(i);
        ptx_r x = ptx_at(c->s, i);
        if (fast) {
            INS("fma.rn.f32 $, $, $, $;", x, x, c->tmp.cr[r], c->tmp.noff[r]);
            if (!masked && seen[r] >= p->block_n / 4 - p->ex2_emu) /* the row's last ex2_emu */
                ex2_poly(g, c, x);
            else
                INS("ex2.approx.ftz.f32 $, $;", x, x);
            const int k = seen[r]++ % nsum;
            if (nsum > 1 && seen[r] <= nsum)
                INS("mov.f32 $, $;", part[r][k], x);
            else
                INS("add.f32 $, $, $;", part[r][k], part[r][k], x);
            if (early && !waited && i + 1 == EARLY_PACK_WAIT) {
                pv_wait(g, c, part, nsum, seen);
                waited = 1;
            }
            for (; early && waited && 2 * packed + 1 <= i; packed++)
                pack_pair(g, c, packed);
            continue;
        }
        INS("sub.rn.f32 $, $, $;", x, x, c->tmp.mz[r]);
        if (p->fp8) /* the exponent offset in the same rounding step */
            INS("fma.rn.f32 $, $, $, " FP8_P_OFFSET ";", x, x, c->scale_log2);
        else
            INS("mul.rn.f32 $, $, $;", x, x, c->scale_log2);
        INS("ex2.approx.ftz.f32 $, $;", x, x);
        INS("add.f32 $, $, $;", sum[r], sum[r], x);
    }
    if (early && !waited) /* fewer scores than the wait's place */
        pv_wait(g, c, part, nsum, seen);
    for (; early && packed < ns / 2; packed++)
        pack_pair(g, c, packed);
    if (early)
        kg_zero_p(g, c, ns / 2); /* c->half: P's other half */
    for (int r = 0; r < 2 && nsum == 4; r++) {
        INS("add.f32 $, $, $;", part[r][0], part[r][0], part[r][1]);
        INS("add.f32 $, $, $;", part[r][2], part[r][2], part[r][3]);
        INS("add.f32 $, $, $;", part[r][0], part[r][0], part[r][2]);
    }
    if (c->l_lse[0].id != c->l[0].id) /* the LSE's l: P's rounding at a kept max (up to 2^8) is not
                                   the scores' (test_magnitude's LSE rule) */
        for (int r = 0; r < 2; r++)
            INS("fma.rn.f32 $, $, $, $;", c->l_lse[r], c->l_lse[r], c->alpha[r], sum[r]);
    if (fast) {
        const char *t1 = g->cvt[0] == 'f' ? "f16" : "bf16"; /* P's dtype (g->cvt: its pairs) */
        /* l takes the block max's weight as the PV sees it, rounded to P's dtype: p at the max
           is 2^e, not 1, and a row that one key dominates would otherwise get O = v·P/p, off by
           P's rounding (an ulp of O at large scores, test_magnitude). One thread of the row's
           four adds the difference (own_max: 1 for lane % 4 == 0, else 0). */
        for (int r = 0; r < 2; r++) {
            ptx_r x = c->tmp.mz[r], y = c->tmp.shf;
            INS("fma.rn.f32 $, $, $, $;", x, c->tmp.bmax[r], c->tmp.cr[r], c->tmp.noff[r]);
            INS("ex2.approx.ftz.f32 $, $;", x, x);
            INS("cvt.rn.%s.f32 $, $;", t1, c->tmp.p16, x);
            INS("cvt.f32.%s $, $;", t1, y, c->tmp.p16);
            INS("sub.rn.f32 $, $, $;", y, y, x);
            INS("fma.rn.f32 $, $, $, $;", sum[r], y, c->own_max, sum[r]);
        }
    }
    for (int r = 0; r < 2; r++)
        INS("fma.rn.f32 $, $, $, $;", c->l[r], c->l[r], c->alpha[r], sum[r]);
}

/* O *= alpha (per row), once the PV wgmma writing O has completed. */
void kg_rescale_o(kgen *g, cons *c)
{
    if (g->p->dbg_no_softmax)
        return;
    const int cond = g->p->cond_rescale, skip = cond ? ptx_label(g->f, "keep_o") : 0;
    if (cond) /* uniform over the warp (vote.any in kg_softmax) */
        INS("@!$ bra.uni %s;", c->rescale, ptx_lab(g->f, skip));
    for (int i = 0; i < g->p->hdv_chunks * 32; i++)
        INS("mul.f32 $, $, $;", ptx_at(c->o, i), ptx_at(c->o, i), c->alpha[acc_row(i)]);
    if (cond)
        ptx_place(g->f, skip);
}

/* P fragments. 16-bit: a[4kk+j] = (lo = p[8kk+2j], hi = p[8kk+2j+1]); cvt puts its first source
   in the upper half.
   e4m3 (k32 steps): register j of step kk holds bytes b = 0..3 at row +8·(j&1), k = 16·(j>>1) +
   4·(lane%4) + b (hopper-ptx-facts §1), while the accumulators give the thread keys 8·i + 2·(lane%4)
   + {0, 1}. Instead of moving bytes between threads, the PV's k order is permuted: fragment byte
   b of register j is p[16kk + 8(j>>1) + 2(j&1) + (b&1) + 4(b>>1)], i.e. logical key 4q + b of a
   16-key half maps to key 2q + (b&1) + 8(b>>1) of the block (q = lane%4), and the producer writes
   the transposed V in the same order (producer.c), so the sum over keys is unchanged. */
void kg_pack_p(kgen *g, cons *c)
{
    if (g->p->fp8) {
        for (int kk = 0; kk < g->p->block_n / 32; kk++)
            for (int j = 0; j < 4; j++) {
                const int b = 16 * kk + 8 * (j >> 1) + 2 * (j & 1);
                INS("cvt.rn.satfinite.e4m3x2.f32 $, $, $;", c->h[0], ptx_at(c->s, b + 1),
                    ptx_at(c->s, b));
                INS("cvt.rn.satfinite.e4m3x2.f32 $, $, $;", c->h[1], ptx_at(c->s, b + 5),
                    ptx_at(c->s, b + 4));
                INS("mov.b32 $, {$, $};", ptx_at(c->a, 4 * kk + j), c->h[0], c->h[1]);
            }
        return;
    }
    for (int j = 0; j < kg_ns(g, c) / 2; j++)
        INS("cvt.rn.%s.f32 $, $, $;", g->cvt, ptx_at(c->a, j), ptx_at(c->s, 2 * j + 1),
            ptx_at(c->s, 2 * j));
    kg_zero_p(g, c, kg_ns(g, c) / 2); /* c->half: P's other half */
}

/* P's 16-bit fragments from a[from] on set to 0 (the keys a half or empty first block leaves
   out: diag_half) */
void kg_zero_p(kgen *g, cons *c, int from)
{
    for (int j = from; j < g->p->block_n / 4; j++)
        INS("mov.b32 $, 0;", ptx_at(c->a, j));
}
