/*
 * test_fp8 (part 2 of 2): the edge cases of shared/cases/attention-edge-cases.md that the FP8
 * path changes (element sizes, descales, P's e4m3 rounding), with e4m3 inputs quantized per
 * (batch, kv head) group (edge_prob.h). Same rules as test_edge (see test_edge.c): NaN guards
 * around every tensor and NaN gaps in the padded layouts (e4m3 NaN 0x7F in Q/K/V), nothing
 * written outside O/LSE, rows that see no key exactly O = 0 and LSE = −inf, the tolerance rule of
 * tools/common/tolerance.h against the reference.
 *   fp8_e1_tails          E1 over {1, 63, 64, 65, 127, 128, 129, 255, 257, 1000}², none/causal
 *   fp8_e2_single_key     E2: NULL descales: O = v bit for bit; with descales: O = v·descale_v
 *                         to one rounding of out_dtype; LSE = q·k·scale (dequantized)
 *   fp8_e3_identical_keys E3: O = mean of the visible v rows (P is 2^8 exactly)
 *   fp8_e4_causal_empty   E4/E5: causal seqlen_q > seqlen_k, the empty rows counted
 *   fp8_e7_local_causal   E7: local (−1, 0) == causal bit for bit
 *   fp8_e8_softcap_saturate E8: descale_k x 2000 pushes scores to ±thousands: capped at 50
 *   fp8_e10_strided       E10: (b, h, s, d) storage with (b, s, h, d) strides == contiguous
 *   fp8_e11_kv_stride0    E11: K/V head stride 0 == materialized heads
 *   fp8_e12_deterministic E12: bitwise repeatable
 *   fp8_e14_nan_row       E14: an e4m3 NaN in one Q row: that row NaN, the others untouched
 *   fp8_gqa               num_heads 8 over 1, 2, 4, 8 KV heads (descale_q per KV head group)
 *   fp8_o_unaligned       O (out_dtype) 4 bytes past 16, rows padded: the register store path
 *   fp8_head_dims         every supported head dim with NaN gaps between heads
 *   fp8_l2_sections       L2 sections (fwd.c section_hb sizes them by e4m3's bytes)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_prob.h"
#include "check.h"

static spec fp8_spec(int hd, fa3_mask mask, int batch, int sq, int sk, int h, int hk)
{
    return make_spec(hd, FA3_DTYPE_E4M3, mask, batch, sq, sk, h, hk);
}

static const char *mask_name(fa3_mask m)
{
    return m == FA3_MASK_LOCAL ? "local" : m == FA3_MASK_CAUSAL ? "causal" : "none";
}

/* Runs p, references it and applies the rule; 1 if it failed (printed). */
static int run_check(prob *p, const char *what)
{
    fa3_status st = prob_run(p);
    if (st != FA3_OK) {
        printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st), fa3_last_error_message());
        return 1;
    }
    prob_reference(p);
    return prob_check(p, what, -1, -1, -1, 1, NULL) != 0;
}

void test_fp8_e1_tails(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int lens[] = {1, 63, 64, 65, 127, 128, 129, 255, 257, 1000};
    const int nl = (int)(sizeof lens / sizeof lens[0]);
    int cases = 0, failed = 0;
    for (int m = 0; m < 2; m++)
        for (int qi = 0; qi < nl; qi++)
            for (int ki = 0; ki < nl; ki++) {
                spec s = fp8_spec(128, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 1, lens[qi],
                                  lens[ki], 2, 2);
                prob p;
                prob_init(&p, &s, 0xF8E1000000ull + (uint64_t)m * 1000000 +
                                      (uint64_t)lens[qi] * 1000 + (uint64_t)lens[ki]);
                /* two full tiles of NaN after Q/K/V (a rounded-up seqlen would read them) */
                p.lq = p.lk = p.lv = (layout){LAY_BSHD, 0, 4096, (size_t)2 * 128 * 2 * 128};
                p.lo = (layout){LAY_BSHD, 0, 4096, 4096};
                p.lse_pre = p.lse_post = 1024;
                prob_upload(&p);
                char what[128];
                snprintf(what, sizeof what, "E1 e4m3 hd128 %s sq=%d sk=%d", mask_name(s.mask),
                         s.sq, s.sk);
                failed += prob_run_and_check(&p, what, 0);
                cases++;
                prob_free(&p);
            }
    printf("  E1 e4m3: %d cases, %d failed\n", cases, failed);
    if (failed)
        fail_msg("E1 e4m3: %d of %d cases failed", failed, cases);
}

void test_fp8_e2_single_key(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (int mode = 0; mode < 2; mode++) /* descales NULL, then per group */
        for (int m = 0; m < 2; m++) {
            spec s = fp8_spec(64, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 3, 1, 1, 4, 2);
            s.descales = mode;
            prob p;
            prob_init(&p, &s, 0xF8E2 + (uint64_t)(2 * mode + m));
            prob_upload(&p);
            RUN_OK(&p);
            const double scale = 1.0 / sqrt(64.0);
            double worst_lse = 0, worst_o = 0;
            size_t off = 0;
            for (int b = 0; b < s.batch; b++)
                for (int h = 0; h < s.h; h++) {
                    const int hk = h / (s.h / s.hk);
                    double dot = 0;
                    for (int c = 0; c < 64; c++) {
                        dot += (double)in_at(&p, 0, b, 0, h, c) * in_at(&p, 1, b, 0, hk, c);
                        const double want = in_at(&p, 2, b, 0, hk, c), got = o_at(&p, b, 0, h, c);
                        /* NULL descales: v itself (e4m3 values are bf16 values); else one
                           rounding of v·descale_v to bf16 */
                        const double allowed = mode ? 0x1p-7 * fabs(want) : 0.0;
                        const double e = fabs(got - want);
                        worst_o = e > worst_o || isnan(e) ? e : worst_o;
                        if (!(e <= allowed) && off++ == 0)
                            printf("  E2: b%d h%d O[%d] = %.8g, want v = %.8g\n", b, h, c, got,
                                   want);
                    }
                    const double e = fabs(p.lse[lse_at(&p, b, h, 0)] - dot * scale);
                    worst_lse = e > worst_lse || isnan(e) ? e : worst_lse;
                }
            printf("  E2 e4m3 %s descales %s: %zu O elements off v (max %.3g), max|LSE - "
                   "q.k.scale| = %.3g\n", mask_name(s.mask), mode ? "per group" : "NULL", off,
                   worst_o, worst_lse);
            const int outside = p.o_outside_written || p.lse_outside_written;
            prob_free(&p);
            if (outside)
                fail_msg("E2 e4m3: wrote outside O/LSE");
            if (off)
                fail_msg("E2 e4m3: %zu O elements are not v%s", off,
                         mode ? "·descale_v within one bf16 rounding" : " exactly");
            if (!(worst_lse <= TOL_LSE_E4M3)) /* FP8 wgmma's accumulation: tolerance.h */
                fail_msg("E2 e4m3: LSE differs from q.k.scale by %g (> %g)", worst_lse,
                         TOL_LSE_E4M3);
        }
}

void test_fp8_e3_identical_keys(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const struct { int hd; fa3_mask mask; int sq, sk; } cs[] = {
        {128, FA3_MASK_NONE, 300, 1000}, {128, FA3_MASK_CAUSAL, 300, 1000},
        {64, FA3_MASK_NONE, 129, 257}};
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int hd = cs[ci].hd, sq = cs[ci].sq, sk = cs[ci].sk;
        spec s = fp8_spec(hd, cs[ci].mask, 2, sq, sk, 2, 2);
        prob p;
        prob_init(&p, &s, 0xF8E30 + ci);
        for (int b = 0; b < s.batch; b++) /* every key row equal to row 0 of its (b, head) */
            for (int j = 1; j < sk; j++)
                for (int h = 0; h < s.hk; h++)
                    memcpy(p.k8 + dense_at(sk, s.hk, hd, b, j, h, 0),
                           p.k8 + dense_at(sk, s.hk, hd, b, 0, h, 0), (size_t)hd);
        prob_upload(&p);
        RUN_OK(&p);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "E3 e4m3 hd%d %s sq=%d sk=%d", hd, mask_name(s.mask), sq, sk);
        EXPECT_PASS(&p, what);
        double vmax = 0, worst = 0;
        for (int b = 0; b < s.batch; b++)
            for (int j = 0; j < sk; j++)
                for (int h = 0; h < s.hk; h++)
                    for (int c = 0; c < hd; c++)
                        vmax = fmax(vmax, fabs(in_at(&p, 2, b, j, h, c)));
        double *prefix = xcalloc((size_t)(sk + 1) * hd, sizeof(double));
        for (int b = 0; b < s.batch; b++)
            for (int h = 0; h < s.h; h++) {
                const int hk = h / (s.h / s.hk);
                for (int j = 0; j < sk; j++)
                    for (int c = 0; c < hd; c++)
                        prefix[(size_t)(j + 1) * hd + c] =
                            prefix[(size_t)j * hd + c] + in_at(&p, 2, b, j, hk, c);
                for (int i = 0; i < sq; i++) {
                    int64_t lo, hi;
                    row_range(&s, i, &lo, &hi);
                    if (lo > hi)
                        continue;
                    const double cnt = (double)(hi - lo + 1);
                    for (int c = 0; c < hd; c++) {
                        double mean = (prefix[(size_t)(hi + 1) * hd + c] -
                                       prefix[(size_t)lo * hd + c]) / cnt;
                        double x = o_at(&p, b, i, h, c), e = fabs(x - mean);
                        worst = e > worst || isnan(e) ? e : worst;
                        if (!(e <= 0x1p-7 * fabs(mean) + 1e-5 * vmax)) { /* 1 bf16 ulp */
                            free(prefix);
                            fail_msg("%s: O[b%d i%d h%d c%d] = %.7g, mean of the %g visible v "
                                     "rows = %.7g", what, b, i, h, c, x, cnt, mean);
                        }
                    }
                }
            }
        free(prefix);
        printf("  %s: max|O - mean(v)| = %.3g (v up to %.3g)\n", what, worst, vmax);
        prob_free(&p);
    }
}

void test_fp8_e4_causal_empty(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const struct { int b, sq, sk, h, hk; size_t empty; } cs[] = {
        {1, 2048, 1024, 2, 2, (size_t)1024 * 2}, {2, 8, 3, 2, 1, (size_t)5 * 2 * 2},
        {1, 385, 256, 2, 2, (size_t)129 * 2}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        spec s = fp8_spec(128, FA3_MASK_CAUSAL, cs[i].b, cs[i].sq, cs[i].sk, cs[i].h, cs[i].hk);
        prob p;
        prob_init(&p, &s, 0xF8E4000 + i);
        prob_upload(&p);
        RUN_OK(&p);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "E4 e4m3 causal sq=%d sk=%d b%d h%d/%d", s.sq, s.sk, s.batch,
                 s.h, s.hk);
        check_res cr;
        int f = prob_check(&p, what, -1, -1, -1, 1, &cr);
        prob_free(&p);
        if (f)
            fail_msg("%s: failed (see above)", what);
        if (cr.rows_empty != cs[i].empty)
            fail_msg("%s: %zu rows see no key, expected %zu", what, cr.rows_empty, cs[i].empty);
    }
}

void test_fp8_e7_local_causal(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int shapes[][2] = {{1000, 257}, {257, 1000}, {8, 3}, {129, 129}};
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        spec s = fp8_spec(128, FA3_MASK_CAUSAL, 2, shapes[i][0], shapes[i][1], 4, 2);
        prob p;
        prob_init(&p, &s, 0xF8E7000 + i);
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "E7 e4m3 causal sq=%d sk=%d", s.sq, s.sk);
        failed += run_check(&p, what);
        saved causal = save_outputs(&p);
        run_with_mask(&p, FA3_MASK_LOCAL, -1, 0);
        diff_res d = outputs_diff(p.out_dt, causal.o, p.o, p.no, causal.lse, p.lse, p.nlse);
        printf("    local(-1,0) vs causal: %zu O elements and %zu LSE values differ\n", d.o_bits,
               d.lse_bits);
        if (d.o_bits || d.lse_bits) {
            printf("  FAIL %s: local(-1,0) is not bitwise equal to causal\n", what);
            failed++;
        }
        saved_free(&causal);
        prob_free(&p);
    }
    if (failed)
        fail_msg("E7 e4m3: %d checks failed (see above)", failed);
}

void test_fp8_e8_softcap_saturate(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const float cap = 50.0f;
    spec s = fp8_spec(128, FA3_MASK_NONE, 2, 300, 300, 2, 2);
    s.softcap = 1;
    s.softcap_value = cap;
    prob p;
    prob_init(&p, &s, 0xF8E8);
    for (int i = 0; i < s.batch * s.hk; i++)
        p.ds[1][i] *= 2000.0f; /* scaled scores of about ±2000·N(0,1) */
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    EXPECT_PASS(&p, "E8 e4m3 softcap 50, descale_k x 2000");
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < p.nlse; i++) {
        lo = fmin(lo, p.lse[i]);
        hi = fmax(hi, p.lse[i]);
    }
    printf("  E8 e4m3: LSE in [%.4f, %.4f] (cap %g + ln %d = %.4f)\n", lo, hi, (double)cap, s.sk,
           cap + log((double)s.sk));
    prob_free(&p);
    if (!(hi <= cap + log((double)s.sk) + 1e-3))
        fail_msg("E8 e4m3: LSE %g above cap + ln(seqlen_k): scores were not capped", hi);
    if (!(lo >= cap - 1e-3)) /* every row has keys whose score saturates at +cap */
        fail_msg("E8 e4m3: LSE %g below the cap: the scores did not saturate", lo);
}

void test_fp8_e10_strided(void **state)
{
    (void)state;
    REQUIRE_GPU();
    spec s = fp8_spec(256, FA3_MASK_NONE, 1, 1024, 1024, 4, 4);
    prob p;
    prob_init(&p, &s, 0xF8E10);
    p.lq = p.lk = p.lv = (layout){LAY_BHSD, 0, 256, 2048};
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference_rows(&p, 0, 128);
    prob_reference_rows(&p, 448, 128);
    prob_reference_rows(&p, 1024 - 128, 128);
    EXPECT_PASS(&p, "E10 e4m3 strided hd256 s1024 h4 (3 row blocks vs reference)");
    saved strided = save_outputs(&p);
    p.lq = p.lk = p.lv = (layout){LAY_BSHD, 0, 256, 2048};
    prob_upload(&p);
    RUN_OK(&p);
    diff_res d = outputs_diff(p.out_dt, strided.o, p.o, p.no, strided.lse, p.lse, p.nlse);
    printf("  E10 e4m3: strided vs contiguous: %zu O elements and %zu LSE values differ\n",
           d.o_bits, d.lse_bits);
    saved_free(&strided);
    prob_free(&p);
    if (d.o_bits || d.lse_bits)
        fail_msg("E10 e4m3: strided and contiguous runs differ (%zu O, %zu LSE)", d.o_bits,
                 d.lse_bits);
}

void test_fp8_e11_kv_stride0(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (int m = 0; m < 2; m++) {
        const int sk = 289;
        spec s = fp8_spec(128, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2, 200, sk, 4, 4);
        prob p;
        prob_init(&p, &s, 0xF8E110 + (uint64_t)m);
        for (int b = 0; b < s.batch; b++) { /* the same K/V (and descales) for every head */
            for (int j = 0; j < sk; j++)
                for (int h = 1; h < s.hk; h++) {
                    memcpy(p.k8 + dense_at(sk, s.hk, 128, b, j, h, 0),
                           p.k8 + dense_at(sk, s.hk, 128, b, j, 0, 0), 128);
                    memcpy(p.v8 + dense_at(sk, s.hk, 128, b, j, h, 0),
                           p.v8 + dense_at(sk, s.hk, 128, b, j, 0, 0), 128);
                }
            for (int h = 1; h < s.hk; h++) {
                p.ds[1][b * s.hk + h] = p.ds[1][b * s.hk];
                p.ds[2][b * s.hk + h] = p.ds[2][b * s.hk];
            }
        }
        p.lk = p.lv = (layout){LAY_HEAD_BCAST, 0, 256, 2048};
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "E11 e4m3 K/V head stride 0 hd128 %s sq=200 sk=%d",
                 mask_name(s.mask), sk);
        int f = run_check(&p, what);
        saved bcast = save_outputs(&p);
        p.lk = p.lv = (layout){LAY_BSHD, 0, 256, 2048};
        prob_upload(&p);
        RUN_OK(&p);
        diff_res d = outputs_diff(p.out_dt, bcast.o, p.o, p.no, bcast.lse, p.lse, p.nlse);
        printf("  %s vs materialized: %zu O elements and %zu LSE values differ\n", what, d.o_bits,
               d.lse_bits);
        saved_free(&bcast);
        prob_free(&p);
        if (f)
            fail_msg("%s: failed (see above)", what);
        if (d.o_bits || d.lse_bits)
            fail_msg("%s: differs from the materialized copies", what);
    }
}

void test_fp8_e12_deterministic(void **state)
{
    (void)state;
    REQUIRE_GPU();
    spec s = fp8_spec(128, FA3_MASK_CAUSAL, 2, 1000, 1000, 4, 2);
    prob p;
    prob_init(&p, &s, 0xF8E12);
    prob_upload(&p);
    RUN_OK(&p);
    saved first = save_outputs(&p);
    size_t diff = 0;
    for (int rep = 0; rep < 2; rep++) {
        RUN_OK(&p);
        diff_res d = outputs_diff(p.out_dt, first.o, p.o, p.no, first.lse, p.lse, p.nlse);
        diff += d.o_bits + d.lse_bits;
    }
    printf("  E12 e4m3: %zu values differ over 2 repeats\n", diff);
    saved_free(&first);
    prob_free(&p);
    if (diff)
        fail_msg("E12 e4m3: repeated runs are not bitwise identical");
}

void test_fp8_e14_nan_row(void **state)
{
    (void)state;
    REQUIRE_GPU();
    spec s = fp8_spec(128, FA3_MASK_NONE, 2, 200, 300, 2, 2);
    prob p;
    prob_init(&p, &s, 0xF8E14);
    prob_upload(&p);
    RUN_OK(&p);
    saved clean = save_outputs(&p);
    const int nb = 1, ni = 77, nh = 1;
    p.q8[dense_at(s.sq, s.h, 128, nb, ni, nh, 5)] = E4M3_NAN_BITS;
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    size_t nan_count = 0, changed = 0;
    for (int c = 0; c < 128; c++)
        nan_count += isnan(o_at(&p, nb, ni, nh, c)) != 0;
    for (int b = 0; b < s.batch; b++)
        for (int i = 0; i < s.sq; i++)
            for (int h = 0; h < s.h; h++) {
                if (b == nb && i == ni && h == nh)
                    continue;
                size_t o0 = dense_at(s.sq, s.h, 128, b, i, h, 0), li = lse_at(&p, b, h, i);
                changed += memcmp(clean.o + o0, p.o + o0, 256) != 0 ||
                           memcmp(&clean.lse[li], &p.lse[li], 4) != 0;
            }
    const float l = p.lse[lse_at(&p, nb, nh, ni)];
    printf("  E14 e4m3: %zu of 128 elements of the NaN row are NaN, its LSE %g; %zu other rows "
           "changed\n", nan_count, (double)l, changed);
    saved_free(&clean);
    int f = prob_check(&p, "E14 e4m3 other rows vs reference", nb, ni, nh, 1, NULL);
    prob_free(&p);
    if (nan_count != 128 || isfinite(l))
        fail_msg("E14 e4m3: the NaN row has %zu NaN elements and LSE %g", nan_count, (double)l);
    if (changed)
        fail_msg("E14 e4m3: the NaN changed %zu other rows", changed);
    if (f)
        fail_msg("E14 e4m3: the other rows fail the reference check");
}

void test_fp8_gqa(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int hks[] = {1, 2, 4, 8};
    int failed = 0;
    for (int m = 0; m < 2; m++)
        for (int g = 0; g < 4; g++) {
            spec s = fp8_spec(128, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2, 1000, 257, 8, hks[g]);
            prob p;
            prob_init(&p, &s, 0xF86A00 + (uint64_t)(m * 10 + g));
            prob_upload(&p);
            char what[128];
            snprintf(what, sizeof what, "GQA e4m3 h8/%d hd128 %s sq=1000 sk=257", hks[g],
                     mask_name(s.mask));
            failed += run_check(&p, what);
            prob_free(&p);
        }
    if (failed)
        fail_msg("GQA e4m3: %d of 8 cases failed", failed);
}

void test_fp8_o_unaligned(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[] = {64, 128, 256};
    int failed = 0;
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++) {
            spec s = fp8_spec(dims[i], m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2, 300, 500, 4, 2);
            s.out = m ? FA3_DTYPE_FP16 : FA3_DTYPE_AUTO;
            prob p;
            prob_init(&p, &s, 0xF80A10 + (uint64_t)(dims[i] * 10 + m));
            p.lo = (layout){LAY_BSHD, 2, 258, 4096}; /* address % 16 = 4, rows padded by 2 */
            prob_upload(&p);
            char what[128];
            snprintf(what, sizeof what, "O unaligned e4m3>%s hd%d %s sq=300 sk=500 h4/2",
                     m ? "fp16" : "bf16", dims[i], mask_name(s.mask));
            failed += run_check(&p, what);
            prob_free(&p);
        }
    if (failed)
        fail_msg("O unaligned e4m3: %d of 6 cases failed", failed);
}

void test_fp8_head_dims(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[][2] = {{64, 0}, {96, 0}, {128, 0}, {192, 0}, {256, 0}, {192, 128}};
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fa3_config c, canon;
        fa3_config_init(&c);
        c.head_dim = dims[i][0];
        c.head_dim_v = dims[i][1];
        c.dtype = FA3_DTYPE_E4M3;
        fa3_status st = fa3_config_canonicalize(&c, &canon);
        if (st == FA3_ERR_BAD_HEAD_DIM || st == FA3_ERR_BAD_HEAD_DIM_V) {
            printf("  NOTE: e4m3 head_dim %d/%d not supported (%s): skipped\n", dims[i][0],
                   dims[i][1], fa3_last_error_message());
            continue;
        }
        spec s = fp8_spec(dims[i][0], FA3_MASK_CAUSAL, 2, 300, 500, 4, 2);
        s.hdv = dims[i][1];
        char what[128];
        snprintf(what, sizeof what, "e4m3 hd%d hdv%d causal sq=300 sk=500 h4/2 (NaN gaps)",
                 dims[i][0], dims[i][1] ? dims[i][1] : dims[i][0]);
        ran++;
        if (st != FA3_OK) {
            printf("  FAIL %s: %s: %s\n", what, fa3_strerror(st), fa3_last_error_message());
            failed++;
            continue;
        }
        prob p;
        prob_init(&p, &s, 0xF8D000 + (uint64_t)dims[i][0] * 1000 + (uint64_t)dims[i][1]);
        p.lq = p.lk = p.lv = p.lo = (layout){LAY_BSHD, 32, 256, 4096};
        prob_upload(&p);
        failed += run_check(&p, what);
        prob_free(&p);
    }
    printf("  e4m3 head dims: %d ran, %d failed\n", ran, failed);
    if (failed)
        fail_msg("e4m3 head dims: %d of %d failed", failed, ran);
    if (ran < 3)
        fail_msg("e4m3 head dims: only %d sizes supported (64, 128 and 256 at least must be)",
                 ran);
}

void test_fp8_l2_sections(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int failed = 0;
    for (int m = 0; m < 2; m++) {
        spec s = fp8_spec(128, FA3_MASK_CAUSAL, 2, 1000, 4096, 40, 20);
        prob p;
        prob_init(&p, &s, 0xF812500 + (uint64_t)m);
        prob_upload(&p);
        if (m == 0) {
            RUN_OK(&p);
        } else {
            run_with_mask(&p, FA3_MASK_LOCAL, 700, 64);
        }
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "L2 sections e4m3 hd128 %s b2 h40/20 sq=1000 sk=4096",
                 m ? "local(700,64)" : "causal");
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        prob_free(&p);
    }
    if (failed)
        fail_msg("L2 sections e4m3: %d of 2 cases failed", failed);
}
