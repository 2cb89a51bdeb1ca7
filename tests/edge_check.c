/*
 * The edge-case tests' pass rule and its report (edge_prob.h): prob_check over a problem's rows,
 * and the differences between two runs' outputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3jit.h"
#include "gpu_util.h"
#include "edge_prob.h"

/*
 * The case file's rule over every (b, i, h) row except (xb, xi, xh) (−1s for none):
 *   - nothing written outside O or LSE (the NaN guards and gaps are intact);
 *   - a row that sees no key: O exactly 0 and LSE −inf;
 *   - every other row: every O element and the LSE finite;
 *   - rows the references cover: the tolerance rule (tools/common/tolerance.h),
 *     max|O−ref| ≤ 2.5·max|emul−ref| + 1e-3, |LSE−ref| ≤ 1e-3.
 * Prints one line (always if verbose, else only on failure) and every failure with its first
 * offending index. Returns the number of failed conditions.
 */
int prob_check(const prob *p, const char *what, int xb, int xi, int xh, int verbose,
                      check_res *out)
{
    const spec *s = &p->s;
    check_res r;
    memset(&r, 0, sizeof r);
    r.acc.lse_tol = tol_lse_bound(s->dt == FA3_DTYPE_E4M3, s->hd);
    char first[512] = "";
#define NOTE_FIRST(...)                                                   \
    do {                                                                  \
        if (!first[0])                                                    \
            snprintf(first, sizeof first, __VA_ARGS__);                   \
    } while (0)
    size_t bad_empty = 0, nonfinite = 0, nonfinite_lse = 0, ref_bad = 0;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < s->sq; i++) {
            int64_t lo, hi;
            row_range(s, i, &lo, &hi);
            for (int h = 0; h < s->h; h++) {
                if (b == xb && i == xi && h == xh)
                    continue;
                r.rows_total++;
                size_t li = lse_at(p, b, h, i);
                if (lo > hi) {
                    r.rows_empty++;
                    int bad = !(isinf(p->lse[li]) && p->lse[li] < 0);
                    for (int c = 0; c < p->dv && !bad; c++)
                        bad = o_at(p, b, i, h, c) != 0.0f;
                    if (bad) {
                        bad_empty++;
                        NOTE_FIRST("row b%d i%d h%d sees no key but O[0] = %g, LSE = %g (want 0, "
                                   "-inf)", b, i, h, (double)o_at(p, b, i, h, 0),
                                   (double)p->lse[li]);
                    }
                    if (p->ref_rows[i] && !(isinf(p->ref_lse[li]) && p->ref_lse[li] < 0))
                        ref_bad++;
                    continue;
                }
                if (!isfinite(p->lse[li])) {
                    nonfinite_lse++;
                    NOTE_FIRST("LSE b%d h%d i%d = %g (row sees keys %lld..%lld)", b, h, i,
                               (double)p->lse[li], (long long)lo, (long long)hi);
                }
                for (int c = 0; c < p->dv; c++) {
                    float x = o_at(p, b, i, h, c);
                    if (!isfinite(x)) {
                        nonfinite++;
                        NOTE_FIRST("O[b%d i%d h%d c%d] = %g (unwritten or not finite)", b, i, h,
                                   c, (double)x);
                    }
                }
                if (!p->ref_rows[i])
                    continue;
                r.rows_ref++;
                if (!isfinite(p->ref_lse[li]))
                    ref_bad++;
                tol_add_lse(&r.acc, li, p->lse[li], p->ref_lse[li]);
                for (int c = 0; c < p->dv; c++) {
                    size_t oi = dense_at(s->sq, s->h, p->dv, b, i, h, c);
                    float x = dtype_to_f32(p->out_dt, p->o[oi]);
                    if (!isfinite(p->ref[oi]) || !isfinite(p->emul[oi])) {
                        ref_bad++;
                        continue;
                    }
                    if (!isfinite(x))
                        continue; /* counted above */
                    tol_add_o(&r.acc, oi, x, p->ref[oi], p->emul[oi]);
                }
            }
        }
    r.tol = tol_o_bound(&r.acc);
    const size_t worst = r.acc.worst_o, worst_lse = r.acc.worst_lse;
    int fails = 0;
    char msg[2048];
    size_t n = 0;
#define ADD(...) n += (size_t)snprintf(msg + n, n < sizeof msg ? sizeof msg - n : 0, __VA_ARGS__)
    msg[0] = 0;
    if (p->o_outside_written) {
        fails++;
        ADD("; %zu O positions outside the tensor were written (first at element %zu of the "
            "allocation, %zu guard elements before O)", p->o_outside_written, p->o_outside_first,
            p->to.pre);
    }
    if (p->lse_outside_written) {
        fails++;
        ADD("; %zu LSE guard values were written", p->lse_outside_written);
    }
    if (bad_empty) {
        fails++;
        ADD("; %zu rows that see no key are not O = 0, LSE = -inf", bad_empty);
    }
    if (nonfinite || nonfinite_lse) {
        fails++;
        ADD("; %zu O elements and %zu LSE values not finite (unwritten, NaN read from a guard, or "
            "overflow)", nonfinite, nonfinite_lse);
    }
    if (ref_bad) {
        fails++;
        ADD("; the reference is not finite in %zu places (test bug?)", ref_bad);
    }
    if (!tol_o_ok(&r.acc)) {
        fails++;
        ADD("; max|O-ref| = %.4g at %zu (%g vs %g) exceeds 2*%.4g + 1e-3", r.acc.err_o, worst,
            (double)dtype_to_f32(p->out_dt, p->o[worst]), (double)p->ref[worst], r.acc.err_emul);
    }
    if (!tol_lse_ok(&r.acc)) {
        fails++;
        ADD("; max|LSE-ref| = %.4g at %zu (%g vs %g) exceeds %g", r.acc.err_lse, worst_lse,
            (double)p->lse[worst_lse], (double)p->ref_lse[worst_lse], r.acc.lse_tol);
    }
#undef ADD
#undef NOTE_FIRST
    if (verbose || fails) {
        char line[256];
        printf("  %s%s: %s; %zu rows, %zu vs reference, %zu see no key\n", fails ? "FAIL " : "",
               what, tol_format(&r.acc, line, sizeof line), r.rows_total, r.rows_ref,
               r.rows_empty);
    }
    if (fails)
        printf("    %s%s%s\n", msg + 2, first[0] ? "; first: " : "", first);
    r.failed = fails;
    if (out)
        *out = r;
    return fails;
}

double value_diff(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0.0 : INFINITY;
    if (a == b)
        return 0.0; /* also ±inf = ±inf */
    return fabs(a - b);
}

diff_res outputs_diff(fa3_dtype dt, const uint16_t *o1, const uint16_t *o2, size_t no,
                             const float *l1, const float *l2, size_t nl)
{
    diff_res d;
    memset(&d, 0, sizeof d);
    for (size_t i = 0; i < no; i++) {
        if (o1[i] == o2[i])
            continue;
        d.o_bits++;
        double e = value_diff(dtype_to_f32(dt, o1[i]), dtype_to_f32(dt, o2[i]));
        if (!(e <= d.o_max))
            d.o_max = e;
    }
    for (size_t i = 0; i < nl; i++) {
        if (memcmp(&l1[i], &l2[i], 4) == 0)
            continue;
        d.lse_bits++;
        double e = value_diff(l1[i], l2[i]);
        if (!(e <= d.lse_max))
            d.lse_max = e;
    }
    return d;
}

saved save_outputs(const prob *p)
{
    saved s = {xcalloc(p->no, 2), xcalloc(p->nlse, 4)};
    memcpy(s.o, p->o, p->no * 2);
    memcpy(s.lse, p->lse, p->nlse * 4);
    return s;
}

void saved_free(saved *s)
{
    free(s->o);
    free(s->lse);
    s->o = NULL;
    s->lse = NULL;
}

int prob_run_and_check(prob *p, const char *what, int verbose)
{
    fa3_status st = prob_run(p);
    if (st != FA3_OK) {
        printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st), fa3_last_error_message());
        return 1;
    }
    prob_reference(p);
    return prob_check(p, what, -1, -1, -1, verbose, NULL) != 0;
}
