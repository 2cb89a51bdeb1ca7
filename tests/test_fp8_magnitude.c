/*
 * test_fp8 (part 3): e4m3 inputs of any magnitude, which reaches the kernel through the descales
 * (test_magnitude's rule for the 16-bit dtypes, its "all keys tie" case). Every q and k element is
 * 448 (e4m3's largest) with descale_q = descale_k = magnitude/448, so every key of a row has the
 * same score, up to sqrt(head_dim)·1e10 at magnitude 1e5: a kernel that folds the rounding of
 * the scaled row max into the exponent turns that into inf or NaN. V is random, its descales
 * scaled by the magnitude too. Rule: rows that see no key O = 0 and LSE = −inf; every other row O
 * = the mean of its visible v rows to one bf16 rounding (+1e-5 of V's largest), LSE = s + ln(n)
 * within 1e-3 + 1e-5·|LSE|; the NaN guards around O and LSE intact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_prob.h"
#include "check.h"

/* One case; returns 1 if it failed (printed). */
static int magnitude_case(int hd, fa3_mask mask, double mag, uint64_t salt)
{
    spec s = make_spec(hd, FA3_DTYPE_E4M3, mask, 1, 130, mask == FA3_MASK_CAUSAL ? 100 : 200, 2,
                       1);
    prob p;
    prob_init(&p, &s, salt);
    memset(p.q8, 0x7E, p.nq); /* 448 */
    memset(p.k8, 0x7E, p.nk);
    for (int i = 0; i < s.batch * s.hk; i++) {
        p.ds[0][i] = p.ds[1][i] = (float)(mag / 448.0);
        p.ds[2][i] *= (float)mag;
    }
    prob_upload(&p);
    char what[128];
    snprintf(what, sizeof what, "e4m3 hd%d %s magnitude %g (all keys tie)", hd,
             mask == FA3_MASK_CAUSAL ? "causal" : "none", mag);
    fa3_status st = prob_run(&p);
    if (st != FA3_OK) {
        printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st), fa3_last_error_message());
        prob_free(&p);
        return 1;
    }
    double vmax = 0, dot = 0;
    for (int j = 0; j < s.sk; j++)
        for (int c = 0; c < p.dv; c++)
            vmax = fmax(vmax, fabs(in_at(&p, 2, 0, j, 0, c)));
    for (int c = 0; c < hd; c++)
        dot += (double)in_at(&p, 0, 0, 0, 0, c) * in_at(&p, 1, 0, 0, 0, c);
    const double score = dot / sqrt((double)hd);
    double *prefix = xcalloc((size_t)(s.sk + 1) * p.dv, sizeof(double));
    for (int j = 0; j < s.sk; j++)
        for (int c = 0; c < p.dv; c++)
            prefix[(size_t)(j + 1) * p.dv + c] =
                prefix[(size_t)j * p.dv + c] + in_at(&p, 2, 0, j, 0, c);
    double worst_o = 0, worst_lse = 0;
    size_t bad_o = 0, bad_lse = 0;
    char first[256] = "";
    for (int h = 0; h < s.h; h++)
        for (int i = 0; i < s.sq; i++) {
            int64_t lo, hi;
            row_range(&s, i, &lo, &hi);
            const double l = p.lse[lse_at(&p, 0, h, i)];
            if (lo > hi) {
                int bad = !(isinf(l) && l < 0);
                for (int c = 0; c < p.dv; c++)
                    bad |= o_at(&p, 0, i, h, c) != 0.0f;
                bad_o += bad;
                continue;
            }
            const double n = (double)(hi - lo + 1), want_lse = score + log(n);
            const double el = fabs(l - want_lse);
            worst_lse = el > worst_lse || isnan(el) ? el : worst_lse;
            if (!(el <= 1e-3 + 1e-5 * fabs(want_lse)) && bad_lse++ == 0 && !first[0])
                snprintf(first, sizeof first, "LSE h%d i%d = %.9g, want %.9g", h, i, l, want_lse);
            for (int c = 0; c < p.dv; c++) {
                const double mean = (prefix[(size_t)(hi + 1) * p.dv + c] -
                                     prefix[(size_t)lo * p.dv + c]) / n;
                const double x = o_at(&p, 0, i, h, c), e = fabs(x - mean);
                worst_o = e > worst_o || isnan(e) ? e : worst_o;
                if (!(e <= 0x1p-7 * fabs(mean) + 1e-5 * vmax) && bad_o++ == 0 && !first[0])
                    snprintf(first, sizeof first, "O h%d i%d c%d = %.7g, want mean %.7g", h, i, c,
                             x, mean);
            }
        }
    free(prefix);
    const size_t outside = p.o_outside_written + p.lse_outside_written;
    const int failed = bad_o || bad_lse || outside;
    printf("  %s%s: score %.4g, max|O - mean(v)| = %.3g (v up to %.3g), max|LSE - (s + ln n)| = "
           "%.3g%s%s\n", failed ? "FAIL " : "", what, score, worst_o, vmax, worst_lse,
           first[0] ? "; first: " : "", first);
    if (outside)
        printf("    %zu positions outside O/LSE written\n", outside);
    prob_free(&p);
    return failed;
}

void test_fp8_magnitude(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int hds[] = {64, 128, 256};
    static const double mags[] = {1e-3, 1.0, 1e3, 1e5};
    int failed = 0, n = 0;
    for (int hi = 0; hi < 3; hi++)
        for (int m = 0; m < 2; m++)
            for (int mi = 0; mi < 4; mi++, n++)
                failed += magnitude_case(hds[hi], m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, mags[mi],
                                         0xF8A6000 + (uint64_t)n);
    if (failed)
        fail_msg("e4m3 magnitudes: %d of %d cases failed", failed, n);
}
