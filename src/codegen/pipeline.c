/*
 * mbarriers and the K/V ring's position, shared by the producer and the consumers.
 *
 * The plan's barrier table (codegen.h: bar_*) gives every mbarrier's offset and arrival count;
 * kernel.c enters them in the PTX writer's table, so every wait and every release site here is
 * checked against them when the kernel is finished (ptx.h invariants). A ring position is FA4's
 * PipelineState: a stage index and a phase bit, advanced after each key block and wrapping at
 * plan->stages with the phase flipped; producer and consumers advance theirs in the same order.
 */
#include "codegen/kgen.h"

ptx_r kg_param(kgen *g, ptx_cls cls, const char *type, int off, const char *name)
{
    ptx_r r = ptx_reg(g->f, cls, name);
    INS("ld.param.%s $, [fa3_params+%d];", type, r, off);
    return r;
}

/* Spin until the phase with the given parity of the mbarrier at addr completes. */
void kg_scratch_init(kgen *g)
{
    g->sc.pw = ptx_reg(g->f, PTX_PRED, "pw");
    g->sc.pt = ptx_reg(g->f, PTX_PRED, "pt");
    g->sc.wrap = ptx_reg(g->f, PTX_PRED, "wrap");
    g->sc.flip = ptx_reg(g->f, PTX_B32, "flip");
    g->sc.bar = ptx_reg(g->f, PTX_B32, "bar");
    if (kg_early_pack(g->p) == 2) /* only there: the other kernels' PTX stays as it was */
        g->sc.fence = ptx_reg(g->f, PTX_PRED, "fence");
    g->sc.fenced = 0;
    g->sc.ring_addr = 0; /* kg_consumer sets it */
}

void kg_mbar_wait(kgen *g, ptx_r addr, ptx_r parity, int mbar)
{
    ptx_mbar_waited(g->f, mbar);
    const int l = ptx_label(g->f, "wait");
    ptx_r ok = g->sc.pw;
    ptx_place(g->f, l);
    /* wait_hint: a suspend-time hint (ns; CUTLASS's ClusterBarrier::wait passes 10 ms): the
       thread sleeps in the try_wait until the phase completes or the hint runs out, instead of
       the system's default limit, which ncu saw re-issuing the try_wait and its branch ~4x as
       often as FA4 (issue 17, session 11) */
    INS("mbarrier.try_wait.parity.shared::cta.b64 $, [$], $%s;", ok, addr, parity,
        g->p->wait_hint ? ", 10000000" : "");
    INS("@!$ bra %s;", ok, ptx_lab(g->f, l));
}

/* Address of ring barrier mb[stage]: the group's stage 0 plus 8 bytes a stage. */
ptx_r kg_ring_bar(kgen *g, const int *mb, ptx_r stage, ptx_r off)
{
    ptx_r b = g->sc.bar;
    if (g->sc.ring_addr) {
        INS("mad.lo.u32 $, $, 8, $;", b, stage, g->bars);
        INS("add.u32 $, $, %d;", b, b, g->f->mbar[mb[0]].offset);
        return b;
    }
    INS("shl.b32 $, $, 3;", off, stage);
    INS("add.u32 $, $, %d;", b, g->bars, g->f->mbar[mb[0]].offset);
    INS("add.u32 $, $, $;", b, b, off);
    return b;
}

void kg_ring_slot(kgen *g, ptx_r dst, ptx_r stage, int stage_bytes, int off)
{
    INS("mad.lo.u32 $, $, %d, $;", dst, stage, stage_bytes, g->sbase);
    INS("add.u32 $, $, %d;", dst, dst, off);
}

/* Address of Q barrier mb[buf]: with two buffers, buf (0 or 1) picks the entry. */
ptx_r kg_q_bar(kgen *g, const int *mb, ptx_r buf)
{
    ptx_r a = g->sc.bar;
    if (g->p->q_bufs == 1) {
        INS("add.u32 $, $, %d;", a, g->bars, g->f->mbar[mb[0]].offset);
        return a;
    }
    const int o0 = g->f->mbar[mb[0]].offset, o1 = g->f->mbar[mb[1]].offset;
    if (o1 - o0 == 16) { /* the q_empty pair: base + 16·buf */
        if (g->sc.ring_addr) { /* the offset last: ptxas folds it into the address */
            INS("mad.lo.u32 $, $, 16, $;", a, buf, g->bars);
            INS("add.u32 $, $, %d;", a, a, o0);
            return a;
        }
        INS("add.u32 $, $, %d;", a, g->bars, o0);
        INS("mad.lo.u32 $, $, 16, $;", a, buf, a);
        return a;
    }
    ptx_r p = ptx_reg(g->f, PTX_PRED, "qbuf1");
    INS("setp.ne.u32 $, $, 0;", p, buf);
    INS("selp.b32 $, %d, %d, $;", a, o1, o0, p);
    INS("add.u32 $, $, $;", a, a, g->bars);
    return a;
}

/* Lane 0 of each consumer warp arrives: num_consumer_wg × 4 arrivals per phase. */
void kg_release_warp(kgen *g, ptx_r addr, int mbar, const char *site)
{
    kg_release_warp_unless(g, addr, mbar, (ptx_r){0}, site);
}

void kg_release_warp_unless(kgen *g, ptx_r addr, int mbar, ptx_r skip, const char *site)
{
    ptx_mbar_release(g->f, mbar, 4 * g->p->num_consumer_wg, site);
    ptx_r l0 = g->sc.pt;
    if (skip.cls && g->sc.fenced)
        return ptx_bug(g->f, "release at %s: a skip predicate under the early_pack fence", site);
    if (skip.cls)
        INS("setp.eq.and.u32 $, $, 0, !$;", l0, g->lane, skip);
    else if (g->sc.fenced)
        INS("setp.eq.and.u32 $, $, 0, $;", l0, g->lane, g->sc.fence);
    else
        INS("setp.eq.u32 $, $, 0;", l0, g->lane);
    INS("@$ mbarrier.arrive.shared::cta.b64 _, [$];", l0, addr);
}

ptx_r kg_wg_lead(kgen *g, const char *name)
{
    ptx_r tid = ptx_reg(g->f, PTX_B32, "wgtid"), lead = ptx_reg(g->f, PTX_PRED, name);
    INS("and.b32 $, $, 127;", tid, g->thr);
    INS("setp.eq.u32 $, $, 0;", lead, tid);
    return lead;
}

pipe_state kg_pipe_init(kgen *g)
{
    pipe_state s = {ptx_reg(g->f, PTX_B32, "stage"), ptx_reg(g->f, PTX_B32, "phase")};
    INS("mov.u32 $, 0;", s.stage);
    INS("mov.u32 $, 0;", s.phase);
    return s;
}

void kg_pipe_advance(kgen *g, pipe_state *s)
{
    ptx_r wrap = g->sc.wrap, flip = g->sc.flip;
    INS("add.u32 $, $, 1;", s->stage, s->stage);
    INS("setp.eq.u32 $, $, %d;", wrap, s->stage, g->p->stages);
    INS("selp.b32 $, 0, $, $;", s->stage, s->stage, wrap);
    INS("xor.b32 $, $, 1;", flip, s->phase);
    INS("selp.b32 $, $, $, $;", s->phase, flip, s->phase, wrap);
}

void kg_pipe_assign(kgen *g, pipe_state *dst, pipe_state src)
{
    INS("mov.u32 $, $;", dst->stage, src.stage);
    INS("mov.u32 $, $;", dst->phase, src.phase);
}

/* l2_hint: the cache policy of a TMA transfer whose knob bit is `bit`, as the 64-bit immediate
   operand of .L2::cache_hint, or NULL where the knob leaves the transfer plain. The values are
   what createpolicy.fractional.L2::evict_last / ::evict_first (fraction 1.0, the whole transfer)
   produce: ptxas 13.0 folds those instructions to 0x14F0000000000000 / 0x12F0000000000000
   (nvdisasm: the high word (0x140 | 0xf) << 20, resp. 0x120), CUTLASS's CacheHintSm90 values.
   An immediate, not a createpolicy register: the producer's 24 registers held the register
   copy and spilled 28 bytes at hd256 causal; with the immediate ptxas puts the policy in a
   uniform register pair (UTMALDG ... desc[UR]) and spills nothing. */
const char *kg_l2_policy(const kgen *g, int bit)
{
    if (!(g->p->l2_hint & bit))
        return NULL;
    return bit == FA3_L2_KV ? "0x14F0000000000000" : "0x12F0000000000000";
}

/* One TMA load of a 4-D box {c0, a, b, c} (five: the 5-D box {c0, 0, a, b, c} of the packed-GQA
   map) into shared address dst, completing on mbarrier bar, with the L2 policy pol where set. */
void kg_tma_load(kgen *g, ptx_r dst, ptx_r tm, int c0, ptx_r a, ptx_r b, ptx_r c, ptx_r bar,
                 const char *pol, int five)
{
    INS("cp.async.bulk.tensor.%s.shared::cluster.global.mbarrier::complete_tx::bytes%s "
        "[$], [$, {%d, %s$, $, $}], [$]%s%s;",
        five ? "5d" : "4d", pol ? ".L2::cache_hint" : "", dst, tm, c0, five ? "0, " : "", a, b, c,
        bar, pol ? ", " : "", pol ? pol : "");
}

/* One TMA store, guarded by lead, of shared address src to the 4-D box {c0, a, b, c} (five: the
   5-D box {c0, 0, a, b, c}), with the L2 policy pol where set. */
void kg_tma_store(kgen *g, ptx_r lead, ptx_r tm, int c0, ptx_r a, ptx_r b, ptx_r c, ptx_r src,
                  const char *pol, int five)
{
    INS("@$ cp.async.bulk.tensor.%s.global.shared::cta.bulk_group%s [$, {%d, %s$, $, $}], [$]%s%s;",
        lead, five ? "5d" : "4d", pol ? ".L2::cache_hint" : "", tm, c0, five ? "0, " : "", a, b,
        c, src, pol ? ", " : "", pol ? pol : "");
}
