/*
 * The forward kernel, assembled: the PTX header (ptx_templates/header.ptx), the entry with its one
 * parameter block (kernel_abi.h), the prologue every thread runs (shared memory base, mbarrier
 * init from the plan's barrier table, a CTA barrier), then the roles: warpgroup 0 the producer
 * (producer.c), warpgroups 1.. the consumers (mainloop.c). kgen.h lists the files; docs/kernel.md
 * describes the kernel. Decides nothing: every size comes from the plan (plan.c).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/kgen.h"
#include "kernel_abi.h"

extern const char fa3_tmpl_header[];

/* The plan's barrier table into the writer's, so every use is checked against it. */
static void enter_barriers(kgen *g)
{
    const fa3_plan *p = g->p;
    static const char *const kname[] = {"k_full", "v_full", "k_empty", "v_empty"};
    const int base[] = {p->bar_k_full, p->bar_v_full, p->bar_k_empty, p->bar_v_empty};
    const int count[] = {p->bar_full_count, p->bar_full_count, p->bar_release_count,
                         p->bar_release_count};
    int *group[] = {g->mb_k_full, g->mb_v_full, g->mb_k_empty, g->mb_v_empty};
    for (int b = 0; b < p->q_bufs; b++) {
        g->mb_q_full[b] = ptx_mbar_add(g->f, b ? "q_full[1]" : "q_full[0]", p->bar_q_full[b],
                                       p->bar_full_count);
        g->mb_q_empty[b] = ptx_mbar_add(g->f, b ? "q_empty[1]" : "q_empty[0]",
                                        p->bar_q_empty[b], p->bar_release_count);
    }
    if (p->stages > FA3_MAX_STAGES)
        ptx_bug(g->f, "%d stages: at most %d", p->stages, FA3_MAX_STAGES);
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < p->stages && s < FA3_MAX_STAGES; s++)
            group[k][s] = ptx_mbar_add(g->f, kname[k], base[k] + 8 * s, count[k]);
    for (int b = 0; b < 2 && p->dyn_sched; b++) {
        g->mb_tile_full[b] = ptx_mbar_add(g->f, "tile_full", p->bar_tile_full + 8 * b,
                                          p->bar_full_count);
        g->mb_tile_empty[b] = ptx_mbar_add(g->f, "tile_empty", p->bar_tile_empty + 8 * b,
                                           p->bar_release_count);
    }
    if (p->fp8)
        for (int s = 0; s < p->stages && s < FA3_MAX_STAGES; s++) {
            g->mb_vt_full[s] = ptx_mbar_add(g->f, "vt_full", p->bar_vt_full + 8 * s,
                                            p->bar_producer_count);
            g->mb_vraw_empty[s] = ptx_mbar_add(g->f, "vraw_empty", p->bar_vraw_empty + 8 * s,
                                               p->bar_producer_count);
        }
}

static void prologue(kgen *g)
{
    const fa3_plan *p = g->p;
    g->thr = ptx_reg(g->f, PTX_B32, "thr");
    g->wg = ptx_reg(g->f, PTX_B32, "wg");
    g->warp = ptx_reg(g->f, PTX_B32, "warp");
    g->lane = ptx_reg(g->f, PTX_B32, "lane");
    g->sbase = ptx_reg(g->f, PTX_B32, "sbase");
    g->bars = ptx_reg(g->f, PTX_B32, "bars");
    ptx_r s0 = ptx_reg(g->f, PTX_B32, "smem");
    INS("mov.u32 $, %%tid.x;", g->thr);
    INS("shr.u32 $, $, 7;", g->wg, g->thr);
    /* uniform_desc: the warpgroup index as lane 0 holds it: ptxas then knows it is warp-uniform
       and keeps what derives from it (the consumer's Q descriptor) in uniform registers; from
       tid.x >> 7 it builds the descriptor in ordinary registers and moves it with 2 R2UR per QK
       wgmma */
    if (p->uniform_desc)
        INS("shfl.sync.idx.b32 $, $, 0, 31, -1;", g->wg, g->wg);
    INS("shr.u32 $, $, 5;", g->warp, g->thr);
    INS("and.b32 $, $, 3;", g->warp, g->warp); /* warp within its warpgroup */
    INS("and.b32 $, $, 31;", g->lane, g->thr);
    /* 1024-aligned dynamic shared memory base (128B-swizzle atoms need it) */
    INS("mov.u32 $, fa3_smem;", s0);
    INS("add.u32 $, $, 1023;", s0, s0);
    INS("and.b32 $, $, -1024;", g->sbase, s0);
    INS("add.u32 $, $, %d;", g->bars, g->sbase, p->smem_bar);
    g->sq = kg_param(g, PTX_B32, "u32", FA3P_OFF_SEQLEN_Q, "sq");
    g->sk = kg_param(g, PTX_B32, "u32", FA3P_OFF_SEQLEN_K, "sk");
    g->wl = kg_param(g, PTX_B32, "s32", FA3P_OFF_WINDOW_LEFT, "wl");
    g->wr = kg_param(g, PTX_B32, "s32", FA3P_OFF_WINDOW_RIGHT, "wr");
    g->ntiles = kg_param(g, PTX_B32, "u32", FA3P_OFF_TOTAL_TILES, "ntiles");

    /* mbarriers: thread 0 initializes every one of the table */
    const int lab = ptx_label(g->f, "init");
    ptx_r not0 = ptx_reg(g->f, PTX_PRED, "notthr0");
    INS("setp.ne.u32 $, $, 0;", not0, g->thr);
    INS("@$ bra %s;", not0, ptx_lab(g->f, lab));
    /* in layout order: q_full[0], each stage's k_full, v_full, k_empty, v_empty, then the Q
       buffers' q_empty (and q_full[1]) */
    int order[6 * FA3_MAX_STAGES + 4], n = 0;
#define ORDER(m)                                                           \
    do {                                                                   \
        if (n < (int)(sizeof order / sizeof order[0]))                     \
            order[n++] = (m);                                              \
        else                                                               \
            ptx_bug(g->f, "more mbarriers than the init order holds");     \
    } while (0)
    ORDER(g->mb_q_full[0]);
    for (int st = 0; st < p->stages && st < FA3_MAX_STAGES; st++) {
        ORDER(g->mb_k_full[st]);
        ORDER(g->mb_v_full[st]);
        ORDER(g->mb_k_empty[st]);
        ORDER(g->mb_v_empty[st]);
    }
    for (int b = 0; b < p->q_bufs; b++) {
        if (b)
            ORDER(g->mb_q_full[b]);
        ORDER(g->mb_q_empty[b]);
    }
    for (int b = 0; b < 2 && p->dyn_sched; b++)
        ORDER(g->mb_tile_full[b]);
    for (int b = 0; b < 2 && p->dyn_sched; b++)
        ORDER(g->mb_tile_empty[b]);
    for (int st = 0; p->fp8 && st < p->stages && st < FA3_MAX_STAGES; st++)
        ORDER(g->mb_vt_full[st]);
    for (int st = 0; p->fp8 && st < p->stages && st < FA3_MAX_STAGES; st++)
        ORDER(g->mb_vraw_empty[st]);
#undef ORDER
    if (n != g->f->nmbar)
        ptx_bug(g->f, "%d mbarriers in the table, %d initialized", g->f->nmbar, n);
    for (int i = 0; i < n; i++) {
        const ptx_mbar *mb = &g->f->mbar[order[i]];
        if (mb->offset)
            INS("mbarrier.init.shared::cta.b64 [$+%d], %d;", g->bars, mb->offset, mb->count);
        else
            INS("mbarrier.init.shared::cta.b64 [$], %d;", g->bars, mb->count);
        ptx_mbar_inited(g->f, order[i]);
    }
    INS("fence.mbarrier_init.release.cluster;");
    ptx_place(g->f, lab);
    kg_vtab_build(g); /* varlen: warp 0 sorts the sequences (varlen_order.c) */
    INS("bar.sync 0;");
}

int fa3_fwd_param_bytes(const fa3_plan *plan)
{
    return plan->fast_div >= 2                           ? FA3P_SIZE
           : plan->cfg.split_kv                          ? FA3P_SIZE_SPLIT
           : plan->cfg.varlen || plan->cfg.paged_kv      ? FA3P_SIZE_VARLEN
                                                         : FA3P_SIZE_DENSE;
}

static void header(const fa3_plan *plan, fa3_buf *out)
{
    char desc[128];
    fa3_config_describe(&plan->cfg, desc, sizeof desc);
    for (const char *t = fa3_tmpl_header; *t;) {
        if (!strncmp(t, "@VERSION@", 9)) {
            fa3_emitf(out, "%s", FA3JIT_VERSION_STRING);
            t += 9;
        } else if (!strncmp(t, "@GENERATOR@", 11)) {
            fa3_emitf(out, "%s", FA3_GENERATOR_VERSION);
            t += 11;
        } else if (!strncmp(t, "@CONFIG@", 8)) {
            fa3_emitf(out, "%s", desc);
            if (plan->debug[0]) /* a variant says so (the default plan's header is unchanged) */
                fa3_emitf(out, "\n// DEBUG plan, not for production: FA3JIT_PLAN_DEBUG=%s",
                          plan->debug);
            t += 8;
        } else {
            fa3_emitf(out, "%c", *t++);
        }
    }
    fa3_emitf(out, "\n.extern .shared .align 1024 .b8 fa3_smem[];\n\n");
    fa3_emitf(out, ".visible .entry %s(\n\t.param .align 64 .b8 fa3_params[%d]\n)\n",
              FA3_KERNEL_NAME,
              fa3_fwd_param_bytes(plan));
    fa3_emitf(out, ".maxntid %d, 1, 1\n.minnctapersm 1\n{\n", plan->threads);
}

static fa3_status codegen(const fa3_plan *plan, char **ptx, size_t *len, int named)
{
    if (!plan || !ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_codegen_ptx: NULL argument");
    ptx_fn *f = calloc(1, sizeof *f);
    if (!f)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory while generating PTX");
    f->named = named;
    kgen G = {.f = f,
              .p = plan,
              .ab = plan->fp8 ? "e4m3" : plan->cfg.dtype == FA3_DTYPE_FP16 ? "f16" : "bf16",
              .cvt = plan->cfg.out_dtype == FA3_DTYPE_FP16 ? "f16x2" : "bf16x2"};
    kgen *g = &G;
    f->smem_bytes = plan->smem_bytes - 1024; /* past the alignment slack */
    ptx_regs_split(f, plan->entry_regs, plan->threads, plan->producer_regs, 128,
                   plan->consumer_regs, 128 * plan->num_consumer_wg);
    ptx_smem_use(f, plan->smem_bar, 0);
    enter_barriers(g);
    for (int m = 0; m < f->nmbar; m++) /* the writer checks barrier bytes against smem_bytes */
        ptx_smem_use(f, plan->smem_bar + f->mbar[m].offset, 8);
    g->lab_done = ptx_label(f, "done");
    prologue(g);
    const int lab_consumer = ptx_label(f, "consumer");
    ptx_r cons = ptx_reg(f, PTX_PRED, "consumer");
    INS("setp.ne.u32 $, $, 0;", cons, g->wg);
    INS("@$ bra %s;", cons, ptx_lab(f, lab_consumer));
    kg_producer(g);
    ptx_place(f, lab_consumer);
    kg_consumer(g);
    ptx_place(f, g->lab_done);
    INS("ret;");

    fa3_buf out = {0};
    header(plan, &out);
    fa3_status st = ptx_finish(f, &out);
    free(f);
    if (st != FA3_OK) {
        free(out.data);
        return st;
    }
    fa3_emitf(&out, "}\n");
    return fa3_buf_finish(&out, ptx, len);
}

fa3_status fa3_codegen_ptx(const fa3_plan *plan, char **ptx, size_t *len)
{
    return codegen(plan, ptx, len, 0);
}

fa3_status fa3_codegen_ptx_named(const fa3_plan *plan, char **ptx, size_t *len)
{
    return codegen(plan, ptx, len, 1);
}
