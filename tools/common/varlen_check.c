/* Runs and judges one varlen / paged-KV case (see varlen_check.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/device.h"
#include "tools/common/varlen_data.h"

/* The prefill: all-ones bits, a NaN in fp32 and in both 16-bit dtypes. */
static int untouched(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == 0xffffffffu;
}

/* The reference (fp32) against the fp64 host attention on sampled rows; rows past
   cu_seqlens_q[batch] unwritten. */
static void check_reference(vx *x, const vl_data *D, const float *o_ref, const float *lse_ref)
{
    const vl_spec *s = x->s;
    vl_result *r = x->r;
    const int H = s->num_heads, dv = D->hdv;
    double *o = vx_calloc(x, (size_t)dv, sizeof(double)), lse;
    if (!o)
        return;
    for (int b = 0; b < D->c.batch; b++)
        for (int i = 0; i < D->c.len_q[b]; i++)
            for (int h = 0; h < H; h++) {
                /* sample rows of long sequences: the first, the last and every 7th */
                if (i > 2 && i < D->c.len_q[b] - 2 && i % 7 != 0)
                    continue;
                if (vd_host_row(s, D, b, i, h, o, &lse) != 0) {
                    free(o);
                    vx_error_msg(x, FA3_ERR_OUT_OF_MEMORY, "out of host memory (host attention)");
                    return;
                }
                const float *got = o_ref + (vd_q_row(s, D, b, i) * H + h) * dv;
                for (int t = 0; t < dv; t++) {
                    double e = fabs(got[t] - o[t]);
                    if (!(e <= r->ref_err_o))
                        r->ref_err_o = e;
                }
                const double gl = lse_ref[vd_lse_at(s, D, b, i, h)];
                double el = isinf(lse) ? (gl == lse ? 0 : INFINITY) : fabs(gl - lse);
                if (!(el <= r->ref_err_lse))
                    r->ref_err_lse = el;
                r->ref_rows++;
            }
    free(o);
    if (!(r->ref_err_o <= VL_REF_BOUND) || !(r->ref_err_lse <= VL_REF_BOUND))
        vx_note(x, "%s: the reference differs from the fp64 host attention: max|dO| %.3g, "
                "max|dLSE| %.3g (bound %g)", s->id, r->ref_err_o, r->ref_err_lse, VL_REF_BOUND);
    long long past = 0;
    if (s->varlen)
        for (int64_t row = D->c.total_q; row < D->rows_q; row++)
            for (int h = 0; h < H; h++)
                past += !untouched(o_ref[(row * H + h) * dv]) +
                        !untouched(lse_ref[(int64_t)h * D->rows_q + row]);
    if (past)
        vx_note(x, "%s: the reference wrote %lld values past cu_seqlens_q[batch] = %d", s->id, past,
                D->c.total_q);
}

/* Runs the reference (kernel NULL; emulate 0/1) or fa3_fwd on a into fresh outputs, NaN-
   prefilled with VL_GUARD guard elements after each; O and LSE read back as floats into o
   (rows_q · H · dv) and lse (H · rows_q), untouched elements all-ones bits. Returns the guard
   elements written; -1 if the call was refused (noted) or failed (error). */
static long long run_once(vx *x, fa3_context *ctx, const vl_data *D, fa3_kernel *kernel,
                          const fa3_config *cfg, fa3_fwd_args a, int emulate, float *o,
                          float *lse, int rows_q)
{
    const vl_spec *s = x->s;
    const int H = s->num_heads;
    const size_t no = (size_t)rows_q * H * D->hdv, nl = (size_t)H * rows_q;
    const size_t es = kernel ? 2 : 4, no_all = no + VL_GUARD, nl_all = nl + VL_GUARD;
    CUdeviceptr dl = vx_dalloc(x, nl_all * 4), dout = vx_dalloc(x, no_all * es);
    float *lh = vx_calloc(x, nl_all, 4);
    void *oh = vx_calloc(x, no_all, es);
    long long guard = -1;
    if (!x->failed) {
        vx_cu(x, dev_fill32(x->drv, dl, nl_all, 0xffffffffu), "cuMemsetD32");
        vx_cu(x, dev_fill32(x->drv, dout, (no_all * es + 3) / 4, 0xffffffffu), "cuMemsetD32");
    }
    if (x->failed)
        goto out;
    fa3_status st;
    if (kernel) {
        a.o = (void *)(uintptr_t)dout;
        a.lse = (float *)(uintptr_t)dl;
        st = fa3_fwd(kernel, &a, NULL);
        if (st == FA3_ERR_CUDA) {
            vx_error(x, st, "fa3_fwd");
            goto out;
        }
        if (st != FA3_OK) {
            char desc[64];
            fa3_config_describe(cfg, desc, sizeof desc);
            vx_note(x, "%s: fa3_fwd refuses the %s call: %s (%s)", s->id, desc,
                    fa3_last_error_message(), fa3_strerror(st));
            goto out;
        }
        vx_cu(x, FA3_CU(x->drv, cuCtxSynchronize()), "the kernel's run (cuCtxSynchronize)");
    } else {
        st = fa3_reference_fwd_ex(ctx, cfg, &a, (float *)(uintptr_t)dout, (float *)(uintptr_t)dl,
                                  emulate, NULL);
        vx_cu(x, st, emulate ? "the reference (emulated)" : "the reference");
    }
    vx_down(x, oh, dout, no_all * es);
    vx_down(x, lh, dl, nl_all * 4);
    if (x->failed)
        goto out;
    guard = 0;
    for (size_t i = 0; i < no_all; i++) {
        float f;
        if (kernel) {
            const uint16_t hb = ((const uint16_t *)oh)[i];
            const uint32_t ones = 0xffffffffu; /* untouched stays recognisable */
            f = dtype_to_f32(D->odt, hb);
            if (hb == 0xffffu)
                memcpy(&f, &ones, 4);
        } else {
            f = ((const float *)oh)[i];
        }
        if (i < no)
            o[i] = f;
        else
            guard += !untouched(f);
    }
    memcpy(lse, lh, nl * 4);
    for (size_t i = nl; i < nl_all; i++)
        guard += !untouched(lh[i]);
out:
    free(lh);
    free(oh);
    vx_dfree(x, dl);
    vx_dfree(x, dout);
    return guard;
}

/* Per sequence, the dense path (kernel NULL: the reference, bitwise; else the dense kernel,
   within bound) against the varlen result o / lse. */
static void check_dense(vx *x, fa3_context *ctx, const vl_data *D, fa3_kernel *kernel,
                        const float *o, const float *lse, double bound)
{
    const vl_spec *s = x->s;
    const int H = s->num_heads, dv = D->hdv;
    const fa3_config dense = vl_spec_config(s, 0);
    double worst = 0, worst_lse = 0;
    for (int b = 0; b < D->c.batch && !x->failed; b++) {
        const int sq = D->c.len_q[b], sk = D->c.len_k[b];
        if (sq == 0 || sk == 0)
            continue; /* no dense call of that shape; its rows are checked as empty */
        fa3_fwd_args a;
        CUdeviceptr bufs[3];
        vd_dense_of(x, D, b, &a, bufs);
        float *od = vx_calloc(x, (size_t)sq * H * dv, 4), *ld = vx_calloc(x, (size_t)H * sq, 4);
        if (!x->failed && run_once(x, ctx, D, kernel, &dense, a, 0, od, ld, sq) >= 0)
            for (int i = 0; i < sq; i++)
                for (int h = 0; h < H; h++) {
                    const int64_t row = vd_q_row(s, D, b, i);
                    for (int t = 0; t < dv; t++) {
                        double e = fabs(od[((int64_t)i * H + h) * dv + t] -
                                        o[(row * H + h) * dv + t]);
                        if (!(e <= worst))
                            worst = e;
                    }
                    const double l1 = ld[(int64_t)h * sq + i], l2 = lse[vd_lse_at(s, D, b, i, h)];
                    double el = l1 == l2 ? 0 : fabs(l1 - l2);
                    if (!(el <= worst_lse))
                        worst_lse = el;
                }
        free(od);
        free(ld);
        for (int i = 0; i < 3; i++)
            vx_dfree(x, bufs[i]);
    }
    if (x->failed)
        return;
    vl_result *r = x->r;
    const double lse_bound = tol_lse_bound(s->dtype == FA3_DTYPE_E4M3, s->head_dim);
    if (kernel) {
        r->dense_done = 1;
        r->dense_o = worst;
        r->dense_lse = worst_lse;
        r->dense_bound = bound;
    } else {
        r->ref_dense_done = 1;
        r->ref_dense_o = worst;
        r->ref_dense_lse = worst_lse;
    }
    if (!kernel ? (worst != 0 || worst_lse != 0) : (!(worst <= bound) || !(worst_lse <= lse_bound)))
        vx_note(x, "%s: the varlen %s differs from its dense path per sequence: max|dO| %.3g, "
                "max|dLSE| %.3g (%s)", s->id, kernel ? "kernel" : "reference", worst, worst_lse,
                kernel ? "bound: the tolerance rule" : "must be bitwise equal");
}

/* The kernel (o, l) against the reference (o_ref, l_ref) and its emulation (o_emu). */
static void judge_kernel(vx *x, const vl_data *D, const float *o, const float *l,
                         const float *o_ref, const float *l_ref, const float *o_emu)
{
    const vl_spec *s = x->s;
    vl_result *r = x->r;
    const int H = s->num_heads, dv = D->hdv;
    r->acc.lse_tol = tol_lse_bound(s->dtype == FA3_DTYPE_E4M3, s->head_dim);
    for (int b = 0; b < D->c.batch; b++)
        for (int i = 0; i < D->c.len_q[b]; i++)
            for (int h = 0; h < H; h++) {
                const int64_t row = vd_q_row(s, D, b, i), li = vd_lse_at(s, D, b, i, h);
                const float *go = o + (row * H + h) * dv, *ro = o_ref + (row * H + h) * dv;
                const float *eo = o_emu + (row * H + h) * dv;
                if (isinf(l_ref[li]) && l_ref[li] < 0) { /* sees no key: O = 0, LSE = -inf */
                    for (int t = 0; t < dv; t++)
                        r->empty_bad += go[t] != 0.0f;
                    r->empty_bad += !(isinf(l[li]) && l[li] < 0);
                    continue;
                }
                for (int t = 0; t < dv; t++)
                    tol_add_o(&r->acc, (size_t)((row * H + h) * dv + t), go[t], ro[t], eo[t]);
                tol_add_lse(&r->acc, (size_t)li, l[li], l_ref[li]);
            }
    if (s->varlen) /* E17: rows past cu_seqlens_q[batch] keep their contents */
        for (int64_t row = D->c.total_q; row < D->rows_q; row++)
            for (int h = 0; h < H; h++) {
                r->touched += !untouched(l[(int64_t)h * D->rows_q + row]);
                for (int t = 0; t < dv; t++)
                    r->touched += !untouched(o[(row * H + h) * dv + t]);
            }
    char line[256];
    tol_format(&r->acc, line, sizeof line);
    if (!tol_o_ok(&r->acc) || !tol_lse_ok(&r->acc))
        vx_note(x, "%s: kernel vs reference: %s (worst O element %zu, LSE %zu; LSE bound %g)",
                s->id, line, r->acc.worst_o, r->acc.worst_lse, r->acc.lse_tol);
    if (r->empty_bad)
        vx_note(x, "%s: %lld values of rows that see no key are not O = 0 / LSE = -inf", s->id,
                r->empty_bad);
    if (r->touched)
        vx_note(x, "%s: the kernel wrote %lld values past cu_seqlens_q[batch] or past the end of "
                "O/LSE", s->id, r->touched);
}

vl_verdict vl_check_run(fa3_context *ctx, const fa3_driver *drv, uint64_t seed, const vl_spec *s,
                        FILE *log, vl_result *r)
{
    memset(r, 0, sizeof *r);
    vx x = {.drv = drv, .s = s, .r = r};
    host_rng rng;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the id: each case its own inputs */
    for (const char *p = s->id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    rng_init(&rng, seed ^ h);
    vl_data D;
    vd_make(&x, &D, &rng);
    r->batch = D.c.batch;
    r->total_q = s->varlen ? D.c.total_q : D.rows_q;
    r->total_k = D.c.total_k;
    r->rows_q = D.rows_q;
    r->max_q = s->varlen ? D.c.max_q : s->max_q;
    r->max_k = D.c.max_k;
    const int H = s->num_heads;
    const size_t no = (size_t)D.rows_q * H * D.hdv, nl = (size_t)H * D.rows_q;
    float *o_ref = vx_calloc(&x, no, 4), *o_emu = vx_calloc(&x, no, 4), *o = vx_calloc(&x, no, 4);
    float *l_ref = vx_calloc(&x, nl, 4), *l_emu = vx_calloc(&x, nl, 4), *l = vx_calloc(&x, nl, 4);
    if (x.failed)
        goto out;
    if (log)
        fprintf(log, "  %s: batch %d, %s, total_q %d (rows %d), total_k %d, max %d/%d%s%s\n",
                s->id, D.c.batch, s->len_q ? "given lengths" : vl_pattern_name(s->pattern),
                r->total_q, D.rows_q, D.c.total_k, r->max_q, D.c.max_k,
                s->page_size ? ", paged" : "", s->seqused ? ", seqused_k" : "");
    const fa3_config cfg = vl_spec_config(s, 1);
    const fa3_fwd_args a = vd_args(s, &D);
    long long g1 = run_once(&x, ctx, &D, NULL, &cfg, a, 0, o_ref, l_ref, D.rows_q);
    long long g2 = run_once(&x, ctx, &D, NULL, &cfg, a, 1, o_emu, l_emu, D.rows_q);
    if (x.failed)
        goto out;
    if (g1 || g2)
        vx_note(&x, "%s: the reference wrote past the end of O/LSE", s->id);
    check_reference(&x, &D, o_ref, l_ref);
    if (log && !x.failed)
        fprintf(log, "  %s: reference vs fp64 host: %lld rows, max|dO| %.2e, max|dLSE| %.2e\n",
                s->id, r->ref_rows, r->ref_err_o, r->ref_err_lse);
    if (s->check_dense && !x.failed) {
        check_dense(&x, ctx, &D, NULL, o_ref, l_ref, 0);
        if (log && r->ref_dense_done)
            fprintf(log, "  %s: varlen vs dense reference per sequence: max|dO| %.2e, "
                    "max|dLSE| %.2e\n", s->id, r->ref_dense_o, r->ref_dense_lse);
    }
    if (x.failed)
        goto out;

    fa3_kernel *kernel = NULL;
    fa3_status st = fa3_jit_get_kernel(ctx, &cfg, &kernel);
    if (st != FA3_OK) {
        const char *msg = fa3_last_error_message();
        char desc[64];
        fa3_config_describe(&cfg, desc, sizeof desc);
        vx_note(&x, "%s: the library refuses the %s kernel: %s: %s", s->id, desc,
                fa3_strerror(st), msg);
        goto out;
    }
    long long g = run_once(&x, ctx, &D, kernel, &cfg, a, 0, o, l, D.rows_q);
    if (g < 0)
        goto out;
    r->kernel_ran = 1;
    r->touched += g;
    judge_kernel(&x, &D, o, l, o_ref, l_ref, o_emu);
    if (log) {
        char line[256];
        fprintf(log, "  %s: kernel vs reference: %s, empty-row errors %lld, values past the end "
                "%lld\n", s->id, tol_format(&r->acc, line, sizeof line), r->empty_bad,
                r->touched);
    }
    if (s->check_dense) {
        fa3_kernel *dk = NULL;
        const fa3_config dcfg = vl_spec_config(s, 0);
        st = fa3_jit_get_kernel(ctx, &dcfg, &dk);
        if (st != FA3_OK) {
            vx_note(&x, "%s: the dense kernel: fa3_jit_get_kernel: %s (%s)", s->id,
                    fa3_last_error_message(), fa3_strerror(st));
            goto out;
        }
        check_dense(&x, ctx, &D, dk, o, l, tol_o_bound(&r->acc));
        if (log && r->dense_done)
            fprintf(log, "  %s: varlen vs dense kernel per sequence: max|dO| %.2e (bound %.2e), "
                    "max|dLSE| %.2e\n", s->id, r->dense_o, r->dense_bound, r->dense_lse);
    }
out:
    free(o_ref);
    free(o_emu);
    free(o);
    free(l_ref);
    free(l_emu);
    free(l);
    vd_free(&x, &D);
    return r->verdict;
}

