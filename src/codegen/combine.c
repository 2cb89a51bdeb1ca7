/*
 * The split-KV combine kernel (FA3_KERNEL_COMBINE, kernel_abi.h): merges the num_splits fp32
 * partials of each row (o_partial, lse_partial, written by the split forward kernel) into O in
 * the output dtype and LSE. One warp a row, FA3_COMBINE_WARPS rows a CTA; each lane owns 4
 * columns of every 128 (16-byte loads), lanes past head_dim_v idle:
 *   1. lane j reads LSE_s for s = j, j+32, j+64, j+96 (num_splits <= 128); a butterfly gives
 *      the row max m, then the sum of exp(LSE_s - m): lse = m + ln(sum). All splits -inf
 *      (no key visible): O = 0, lse = -inf.
 *   2. each lane turns its LSE_s into w_s = exp(LSE_s - lse); for each split (8 at a time, 4 for
 *      head_dim_v > 128, their loads in flight together) the warp takes w_s by shfl and adds w_s · O_s (a split of
 *      weight 0, at -inf, is not loaded: it wrote O_s = 0);
 *   3. O packed to bf16x2/f16x2 and stored at the user's strides (two 4-byte stores a lane per
 *      128 columns: O is only promised 4-byte aligned), lane 0 writes LSE[row].
 * Rows: rectangular row = (b·num_heads + h)·seqlen_q + i (partial row r is row row_base + r);
 * varlen row = h·total_q + packed, rows at or past cu_seqlens_q[batch] left untouched. The PTX depends only on head_dim_v, the output
 * dtype and varlen (one cache entry each: op.c's fa3_kind_key_config). Decides nothing else.
 */
#include <stdlib.h>

#include "codegen/generate.h"
#include "codegen/kgen.h"
#include "kernel_abi.h"

#define LOG2E_F "0f3FB8AA3B" /* log2(e) */
#define LN2_F "0f3F317218"   /* ln(2) */
#define FA3_MAX_SPLITS_PER_LANE (FA3_MAX_SPLITS / 32) /* LSE_s a lane reads in step 1 */
/* Splits whose O loads are in flight together: 8 of one 128-column chunk, 4 of two (32 loaded
   registers either way; divides 32). The splits of a row are a chain of load latencies, so this
   sets the speed at decoding's few rows. */
#define MAX_UNROLL 8

typedef struct cgen {
    ptx_fn *f;
} cgen;

/* INS for this file: kgen.h's macro names g->f */
#define CINS(...) ptx_ins(g->f, __VA_ARGS__)

static ptx_r param(cgen *g, ptx_cls cls, const char *type, int off, const char *name)
{
    ptx_r r = ptx_reg(g->f, cls, name);
    CINS("ld.param.%s $, [fa3_params+%d];", type, r, off);
    return r;
}

/* x = op(x, the same value of the lane xor'd by 16, 8, 4, 2, 1): every lane gets the result. */
static void warp_reduce(cgen *g, ptx_r x, const char *op)
{
    ptx_r t = ptx_reg(g->f, PTX_F32, "red");
    for (int off = 16; off >= 1; off /= 2) {
        CINS("shfl.sync.bfly.b32 $, $, %d, 31, -1;", t, x, off);
        CINS("%s.f32 $, $, $;", op, x, x, t);
    }
}

static void body(cgen *g, const fa3_plan *p)
{
    const int hdv = p->cfg.head_dim_v, varlen = p->cfg.varlen;
    const int nchunks = (hdv + 127) / 128; /* 128 columns a warp-wide 16-byte load */
    const char *cvt = p->cfg.out_dtype == FA3_DTYPE_FP16 ? "f16x2" : "bf16x2";
    const int lab_done = ptx_label(g->f, "done");

    ptx_r tid = ptx_reg(g->f, PTX_B32, "tid"), warp = ptx_reg(g->f, PTX_B32, "warp");
    ptx_r lane = ptx_reg(g->f, PTX_B32, "lane"), cta = ptx_reg(g->f, PTX_B32, "cta");
    ptx_r row = ptx_reg(g->f, PTX_B32, "row");
    CINS("mov.u32 $, %%tid.x;", tid);
    CINS("shr.u32 $, $, 5;", warp, tid);
    CINS("and.b32 $, $, 31;", lane, tid);
    CINS("mov.u32 $, %%ctaid.x;", cta);
    CINS("mad.lo.u32 $, $, %d, $;", row, cta, FA3_COMBINE_WARPS, warp);
    ptx_r rows = param(g, PTX_B32, "u32", FA3C_OFF_ROWS, "rows");
    ptx_r past = ptx_reg(g->f, PTX_PRED, "past");
    CINS("setp.ge.u32 $, $, $;", past, row, rows);
    CINS("@$ bra %s;", past, ptx_lab(g->f, lab_done));

    /* the row's coordinates; varlen: rows past the last sequence are not written (E17) */
    ptx_r sq = param(g, PTX_B32, "u32", FA3C_OFF_SEQLEN_Q, "sq");
    ptx_r nh = param(g, PTX_B32, "u32", FA3C_OFF_NUM_HEADS, "nheads");
    ptx_r hb = ptx_reg(g->f, PTX_B32, "hb"), qi = ptx_reg(g->f, PTX_B32, "qi");
    /* rectangular: the output row orow = row_base + row (a dense call's tail split combines
       only its tail rows, runtime/tail.c; else row_base 0); varlen: orow = row */
    ptx_r orow = row;
    if (!varlen) {
        ptx_r rb = param(g, PTX_B32, "u32", FA3C_OFF_ROW_BASE, "rowbase");
        orow = ptx_reg(g->f, PTX_B32, "orow");
        CINS("add.u32 $, $, $;", orow, row, rb);
    }
    CINS("div.u32 $, $, $;", hb, orow, sq);    /* varlen: the head; else b·num_heads + h */
    CINS("mul.lo.u32 $, $, $;", qi, hb, sq);
    CINS("sub.u32 $, $, $;", qi, orow, qi);    /* varlen: the packed row; else i */
    ptx_r obase = ptx_reg(g->f, PTX_B64, "obase"); /* element offset of the row in O */
    ptx_r t64 = ptx_reg(g->f, PTX_B64, "t64"), u64 = ptx_reg(g->f, PTX_B64, "u64");
    ptx_r ors = param(g, PTX_B64, "s64", FA3C_OFF_O_ROW_STRIDE, "ors");
    ptx_r ohs = param(g, PTX_B64, "s64", FA3C_OFF_O_HEAD_STRIDE, "ohs");
    if (varlen) {
        ptx_r cu = param(g, PTX_B64, "u64", FA3C_OFF_CU_SEQLENS_Q, "cuq");
        ptx_r nb = param(g, PTX_B32, "u32", FA3C_OFF_BATCH, "nbatch");
        ptx_r end = ptx_reg(g->f, PTX_B32, "qend");
        CINS("cvt.u64.u32 $, $;", t64, nb);
        CINS("shl.b64 $, $, 2;", t64, t64);
        CINS("add.u64 $, $, $;", t64, t64, cu);
        CINS("ld.global.u32 $, [$];", end, t64);
        CINS("setp.ge.u32 $, $, $;", past, qi, end);
        CINS("@$ bra %s;", past, ptx_lab(g->f, lab_done));
        CINS("cvt.u64.u32 $, $;", t64, qi);
        CINS("mul.lo.s64 $, $, $;", obase, t64, ors);
        CINS("cvt.u64.u32 $, $;", t64, hb);
        CINS("mad.lo.s64 $, $, $, $;", obase, t64, ohs, obase);
    } else {
        ptx_r b = ptx_reg(g->f, PTX_B32, "b"), h = ptx_reg(g->f, PTX_B32, "h");
        ptx_r obs = param(g, PTX_B64, "s64", FA3C_OFF_O_BATCH_STRIDE, "obs");
        CINS("div.u32 $, $, $;", b, hb, nh);
        CINS("mul.lo.u32 $, $, $;", h, b, nh);
        CINS("sub.u32 $, $, $;", h, hb, h);
        CINS("cvt.u64.u32 $, $;", t64, qi);
        CINS("mul.lo.s64 $, $, $;", obase, t64, ors);
        CINS("cvt.u64.u32 $, $;", t64, h);
        CINS("mad.lo.s64 $, $, $, $;", obase, t64, ohs, obase);
        CINS("cvt.u64.u32 $, $;", t64, b);
        CINS("mad.lo.s64 $, $, $, $;", obase, t64, obs, obase);
    }

    /* 1. the row's lse over the splits */
    ptx_r ns = param(g, PTX_B32, "u32", FA3C_OFF_NUM_SPLITS, "nsplits");
    ptx_r lsep = param(g, PTX_B64, "u64", FA3C_OFF_LSE_PARTIAL, "lsepart");
    ptx_r rows64 = ptx_reg(g->f, PTX_B64, "rows64"), row64 = ptx_reg(g->f, PTX_B64, "row64");
    CINS("cvt.u64.u32 $, $;", rows64, rows);
    CINS("cvt.u64.u32 $, $;", row64, row);
    ptx_r mx = ptx_reg(g->f, PTX_F32, "mx"), sum = ptx_reg(g->f, PTX_F32, "sum");
    ptx_r ls[FA3_MAX_SPLITS_PER_LANE];
    ptx_r sidx = ptx_reg(g->f, PTX_B32, "sidx"), has = ptx_reg(g->f, PTX_PRED, "has");
    CINS("mov.f32 $, " NEG_INF ";", mx);
    for (int k = 0; k < FA3_MAX_SPLITS_PER_LANE; k++) {
        ls[k] = ptx_reg(g->f, PTX_F32, "lsek");
        CINS("add.u32 $, $, %d;", sidx, lane, 32 * k);
        CINS("setp.lt.u32 $, $, $;", has, sidx, ns);
        CINS("mov.f32 $, " NEG_INF ";", ls[k]);
        CINS("cvt.u64.u32 $, $;", t64, sidx);
        CINS("mad.lo.u64 $, $, $, $;", t64, t64, rows64, row64);
        CINS("shl.b64 $, $, 2;", t64, t64);
        CINS("add.u64 $, $, $;", t64, t64, lsep);
        CINS("@$ ld.global.f32 $, [$];", has, ls[k], t64);
        CINS("max.f32 $, $, $;", mx, mx, ls[k]);
    }
    warp_reduce(g, mx, "max");
    ptx_r lse = ptx_reg(g->f, PTX_F32, "lse"), e = ptx_reg(g->f, PTX_F32, "e");
    ptx_r empty = ptx_reg(g->f, PTX_PRED, "empty");
    ptx_r acc[8], act[2];
    for (int i = 0; i < 4 * nchunks; i++) {
        acc[i] = ptx_reg(g->f, PTX_F32, "acc");
        CINS("mov.f32 $, " ZERO_F ";", acc[i]);
    }
    for (int j = 0; j < nchunks; j++) { /* lanes with columns in chunk j */
        act[j] = ptx_reg(g->f, PTX_PRED, "act");
        const int lanes = (hdv - 128 * j) / 4 < 32 ? (hdv - 128 * j) / 4 : 32;
        CINS("setp.lt.u32 $, $, %d;", act[j], lane, lanes);
    }
    CINS("mov.f32 $, " NEG_INF ";", lse);
    CINS("setp.eq.f32 $, $, " NEG_INF ";", empty, mx);
    const int lab_store = ptx_label(g->f, "store");
    CINS("@$ bra %s;", empty, ptx_lab(g->f, lab_store)); /* no split saw a key: O = 0 */
    CINS("mov.f32 $, " ZERO_F ";", sum);
    for (int k = 0; k < FA3_MAX_SPLITS_PER_LANE; k++) {
        CINS("sub.f32 $, $, $;", e, ls[k], mx);
        CINS("mul.f32 $, $, " LOG2E_F ";", e, e);
        CINS("ex2.approx.ftz.f32 $, $;", e, e); /* -inf (no such split): 0 */
        CINS("add.f32 $, $, $;", sum, sum, e);
    }
    warp_reduce(g, sum, "add");
    CINS("lg2.approx.ftz.f32 $, $;", e, sum); /* sum >= 1: the max's own term */
    CINS("fma.rn.f32 $, $, " LN2_F ", $;", lse, e, mx);
    /* the weights exp(LSE_s - lse), in the lanes that read LSE_s (0 for -inf) */
    for (int k = 0; k < FA3_MAX_SPLITS_PER_LANE; k++) {
        CINS("sub.f32 $, $, $;", ls[k], ls[k], lse);
        CINS("mul.f32 $, $, " LOG2E_F ";", ls[k], ls[k]);
        CINS("ex2.approx.ftz.f32 $, $;", ls[k], ls[k]);
    }

    /* 2. O = sum_s w_s O_s: lane group k's 32 splits, UNROLL at a time (their loads issued
       together); w_s from lane s % 32 by shfl; a split of weight 0 (-inf, or underflowed) is
       not loaded */
    ptx_r opart = param(g, PTX_B64, "u64", FA3C_OFF_O_PARTIAL, "opart");
    const int UNROLL = MAX_UNROLL / nchunks;
    ptx_r ostep = ptx_reg(g->f, PTX_B64, "ostep"), op[MAX_UNROLL];
    for (int u = 0; u < UNROLL; u++)
        op[u] = ptx_reg(g->f, PTX_B64, "op");
    ptx_r ostep_u = ptx_reg(g->f, PTX_B64, "ostepu");
    CINS("mul.lo.u64 $, $, %d;", ostep, rows64, 4 * hdv); /* bytes between two splits' O */
    CINS("mul.lo.u64 $, $, %d;", ostep_u, rows64, 4 * hdv * UNROLL);
    CINS("mul.lo.u64 $, $, %d;", op[0], row64, hdv);
    CINS("cvt.u64.u32 $, $;", t64, lane);
    CINS("shl.b64 $, $, 2;", t64, t64);
    CINS("add.u64 $, $, $;", op[0], op[0], t64); /* element offset of the lane's first column */
    CINS("shl.b64 $, $, 2;", op[0], op[0]);
    CINS("add.u64 $, $, $;", op[0], op[0], opart);
    ptx_r v[MAX_UNROLL][8], wu[MAX_UNROLL], ld[MAX_UNROLL][2];
    for (int u = 0; u < UNROLL; u++) {
        wu[u] = ptx_reg(g->f, PTX_F32, "wu");
        for (int j = 0; j < nchunks; j++)
            ld[u][j] = ptx_reg(g->f, PTX_PRED, "ldp");
        for (int i = 0; i < 4 * nchunks; i++) {
            v[u][i] = ptx_reg(g->f, PTX_F32, "v");
            CINS("mov.f32 $, " ZERO_F ";", v[u][i]); /* lanes never loading keep 0 */
        }
    }
    ptx_r it = ptx_reg(g->f, PTX_B32, "it"), cnt = ptx_reg(g->f, PTX_B32, "cnt");
    ptx_r idx = ptx_reg(g->f, PTX_B32, "idx"), more = ptx_reg(g->f, PTX_PRED, "more");
    ptx_r valid = ptx_reg(g->f, PTX_PRED, "valid");
    for (int k = 0; k < FA3_MAX_SPLITS_PER_LANE; k++) {
        if (k) { /* splits 32k.. exist? (uniform) */
            CINS("setp.le.u32 $, $, %d;", more, ns, 32 * k);
            CINS("@$ bra %s;", more, ptx_lab(g->f, lab_store));
        }
        CINS("sub.u32 $, $, %d;", cnt, ns, 32 * k);
        CINS("min.u32 $, $, 32;", cnt, cnt);
        CINS("mov.u32 $, 0;", it);
        const int lab_loop = ptx_label(g->f, "splits");
        ptx_place(g->f, lab_loop);
        for (int u = 0; u < UNROLL; u++) {
            if (u)
                CINS("add.u64 $, $, $;", op[u], op[u - 1], ostep);
            CINS("add.u32 $, $, %d;", idx, it, u);
            CINS("shfl.sync.idx.b32 $, $, $, 31, -1;", wu[u], ls[k], idx);
            CINS("setp.lt.u32 $, $, $;", valid, idx, cnt);
            CINS("@!$ mov.f32 $, " ZERO_F ";", valid, wu[u]);
            CINS("setp.gt.f32 $, $, " ZERO_F ";", valid, wu[u]);
            for (int j = 0; j < nchunks; j++)
                CINS("and.pred $, $, $;", ld[u][j], valid, act[j]);
        }
        for (int u = 0; u < UNROLL; u++)
            for (int j = 0; j < nchunks; j++)
                CINS("@$ ld.global.v4.f32 {$, $, $, $}, [$+%d];", ld[u][j], v[u][4 * j],
                     v[u][4 * j + 1], v[u][4 * j + 2], v[u][4 * j + 3], op[u], 512 * j);
        for (int u = 0; u < UNROLL; u++) /* a weight of 0 times a stale finite value: 0 */
            for (int i = 0; i < 4 * nchunks; i++)
                CINS("fma.rn.f32 $, $, $, $;", acc[i], wu[u], v[u][i], acc[i]);
        CINS("add.u64 $, $, $;", op[0], op[0], ostep_u);
        CINS("add.u32 $, $, %d;", it, it, UNROLL);
        CINS("setp.lt.u32 $, $, $;", more, it, cnt);
        CINS("@$ bra %s;", more, ptx_lab(g->f, lab_loop));
    }

    /* 3. O in the output dtype, LSE */
    ptx_place(g->f, lab_store);
    ptx_r optr = param(g, PTX_B64, "u64", FA3C_OFF_O_PTR, "optr");
    ptx_r addr = ptx_reg(g->f, PTX_B64, "oaddr");
    ptx_r w01 = ptx_reg(g->f, PTX_B32, "w01"), w23 = ptx_reg(g->f, PTX_B32, "w23");
    CINS("cvt.u64.u32 $, $;", u64, lane);
    CINS("shl.b64 $, $, 2;", u64, u64);
    CINS("add.u64 $, $, $;", addr, obase, u64);
    CINS("shl.b64 $, $, %d;", addr, addr, p->out_bytes == 2 ? 1 : 0);
    CINS("add.u64 $, $, $;", addr, addr, optr);
    for (int j = 0; j < nchunks; j++) {
        CINS("cvt.rn.%s.f32 $, $, $;", cvt, w01, acc[4 * j + 1], acc[4 * j]);
        CINS("cvt.rn.%s.f32 $, $, $;", cvt, w23, acc[4 * j + 3], acc[4 * j + 2]);
        CINS("@$ st.global.b32 [$+%d], $;", act[j], addr, 128 * j * p->out_bytes, w01);
        CINS("@$ st.global.b32 [$+%d], $;", act[j], addr, 128 * j * p->out_bytes + 4, w23);
    }
    ptx_r lptr = param(g, PTX_B64, "u64", FA3C_OFF_LSE_PTR, "lseptr");
    ptx_r nolse = ptx_reg(g->f, PTX_PRED, "nolse");
    CINS("setp.eq.u64 $, $, 0;", nolse, lptr);
    CINS("setp.ne.or.u32 $, $, 0, $;", nolse, lane, nolse);
    CINS("@$ bra %s;", nolse, ptx_lab(g->f, lab_done));
    CINS("cvt.u64.u32 $, $;", t64, orow);
    CINS("shl.b64 $, $, 2;", t64, t64);
    CINS("add.u64 $, $, $;", t64, t64, lptr);
    CINS("st.global.f32 [$], $;", t64, lse);
    ptx_place(g->f, lab_done);
    CINS("ret;");
}

fa3_status fa3_codegen_combine(const fa3_plan *plan, char **ptx, size_t *len)
{
    if (!plan || !ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_codegen_combine: NULL argument");
    const int hdv = plan->cfg.head_dim_v;
    if (hdv < 4 || hdv % 4 || hdv > 256 || plan->out_bytes != 2)
        return fa3_seterr(FA3_ERR_INTERNAL, "combine kernel: head_dim_v %d / %d-byte output not "
                          "supported (multiples of 4 up to 256, 16-bit output)", hdv,
                          plan->out_bytes);
    ptx_fn *f = calloc(1, sizeof *f);
    if (!f)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory while generating PTX");
    cgen G = {.f = f}, *g = &G;
    body(g, plan);
    fa3_buf out = {0};
    fa3_emitf(&out, "//\n// Generated by fa3jit %s (%s): split-KV combine kernel for sm_90a.\n"
              "// Combine: hdv%d %s%s\n//\n.version 9.0\n.target sm_90a\n.address_size 64\n\n",
              FA3JIT_VERSION_STRING, FA3_GENERATOR_VERSION, hdv,
              plan->cfg.out_dtype == FA3_DTYPE_FP16 ? "fp16" : "bf16",
              plan->cfg.varlen ? " varlen" : "");
    fa3_emitf(&out, ".visible .entry %s(\n\t.param .align 64 .b8 fa3_params[%d]\n)\n",
              FA3_COMBINE_NAME, FA3C_SIZE);
    fa3_emitf(&out, ".maxntid %d, 1, 1\n{\n", 32 * FA3_COMBINE_WARPS);
    fa3_status st = ptx_finish(f, &out);
    free(f);
    if (st != FA3_OK) {
        free(out.data);
        return st;
    }
    fa3_emitf(&out, "}\n");
    return fa3_buf_finish(&out, ptx, len);
}
