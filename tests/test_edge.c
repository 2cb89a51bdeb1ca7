/*
 * test_edge: the attention edge cases every release must pass (shared/cases/attention-edge-cases.md,
 * E1–E14), plus GQA ratios and every supported head dimension, on the GPU. Each test needs a CUDA
 * driver and an sm_90 device; without one it prints "SKIP: <reason>" and is skipped (the process
 * exits 77, meson's SKIP, when every GPU test skipped).
 *
 * Rules (as tests/test_gpu.c): O and LSE are pre-filled with NaN so an unwritten element fails;
 * max|O − ref| ≤ 2.5·max|O_emul − ref| + 1e-3 and |LSE − LSE_ref| ≤ 1e-3, where ref is the library's
 * fp32 NVRTC reference and O_emul the reference that rounds P and O to the kernel's dtype; a row
 * that sees no key must be exactly O = 0, LSE = −inf. Inputs are random from a fresh seed each run
 * (printed; repeat a run with FA3JIT_TEST_SEED=<seed>).
 *
 * Every device tensor lives inside a larger allocation that is NaN everywhere the tensor has no
 * element: guards before and after it, and (for the padded and permuted layouts) the gaps between
 * its rows or heads. A kernel that reads outside a Q/K/V tensor pulls NaN into O (for V even where
 * the key is masked, since 0·NaN = NaN); every O and LSE position outside the tensor must still hold
 * its NaN after the call (nothing written outside).
 *
 * Tests:
 *   e1_tile_boundaries    E1: all 144 (seqlen_q, seqlen_k) pairs of {1, 2, 63, 64, 65, 127, 128,
 *                         129, 191, 255, 257, 1000}, hd128 bf16, none and causal; NaN guards around
 *                         Q/K/V/O/LSE: matches the reference, nothing read or written outside
 *   e2_single_key         E2: seqlen 1/1, hd64 fp16: O = v bit for bit, LSE = q·k·scale
 *   e3_identical_keys     E3: all keys equal → O = mean of the visible v rows, LSE = s + ln(n)
 *   e4_e5_causal_empty    E4/E5: causal 2048/1024 and 8/3: the rows that see no key are exactly
 *                         O = 0, LSE = −inf (and their count is right); the rest match
 *   e6_local_full_window  E6: local (−1, 1<<20) and other all-covering windows, sq 256 > sk 128,
 *                         fp16 hd64 == full attention (within tolerance) and the reference
 *   e7_local_causal       E7: local (−1, 0) == causal, bit for bit, O and LSE
 *   e8_softcap_saturate   E8: softcap 50, scaled scores near ±5000: O finite, matches the tanh
 *                         reference; LSE finite and ≤ 50 + ln(seqlen_k)
 *   e9_bad_head_dim       E9: head_dim 72 and 512, (128, 72): FA3_ERR_BAD_HEAD_DIM(_V) naming the
 *                         value, no kernel, no PTX; with a GPU, a NaN O buffer stays untouched
 *   e10_strided_views     E10: Q/K/V made (b, h, s, d), passed with (b, s, h, d) strides, hd256,
 *                         seqlen 8192, 32 heads == contiguous copies: bitwise (the same kernel on
 *                         the same values; the case's bound is 5e-4, max |ΔO| printed); three row
 *                         blocks vs the reference
 *   e11_kv_head_stride0   E11: K/V broadcast across heads with head stride 0, seqlen_k 289 ==
 *                         materialized copies, bitwise; vs the reference (none and causal)
 *   e12_deterministic     E12: the same inputs twice → bitwise identical O and LSE
 *   e13_large_grids       E13: batch·heads > 65535 at seqlen 1 (1024·80, 1·70000), and causal
 *                         seqlen 131072 (sampled row blocks vs the reference, every row written)
 *   e14_nan_row           E14: NaN in one Q row → that O row all NaN (LSE not finite), every other row
 *                         bitwise equal to the NaN-free run and within tolerance of the reference
 *   gqa_ratios            num_heads 8 with num_heads_k 1, 2, 4, 8 at (128, 128), (1000, 257),
 *                         none and causal
 *   head_dims             64, 96, 128, 192, 256 and (192, 128), bf16 causal, with NaN gaps between
 *                         heads in Q/K/V/O (skipped with a note when this build lacks the size)
 *
 * Environment: FA3JIT_TEST_SEED=<n> repeats a run; FA3JIT_TEST_FILTER=<glob> runs matching tests
 * only (cmocka_set_test_filter, e.g. "test_e1*"); FA3JIT_TEST_SMALL=1 shrinks E10 (seqlen 1024,
 * 4 heads) and the long E13 case (seqlen 8192) for slow emulated drivers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_prob.h"
#include "check.h"

/* test_edge_more.c */
void test_e10_strided_views(void **state);
void test_e11_kv_head_stride0(void **state);
void test_e12_deterministic(void **state);
void test_e13_large_grids(void **state);
void test_e14_nan_row(void **state);
void test_gqa_ratios(void **state);
void test_o_unaligned(void **state);
void test_l2_sections(void **state);
void test_head_dims(void **state);

/* ------------------------------------------------------------------------------------------- */
/* E1 */

static const int e1_lens[] = {1, 2, 63, 64, 65, 127, 128, 129, 191, 255, 257, 1000};
#define E1_N ((int)(sizeof e1_lens / sizeof e1_lens[0]))

static void test_e1_tile_boundaries(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const double t0 = now_s();
    int cases = 0, failed = 0;
    for (int m = 0; m < 2; m++) {
        fa3_mask mask = m ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
        double worst = 0, worst_ratio = 0, worst_lse = 0;
        for (int qi = 0; qi < E1_N; qi++)
            for (int ki = 0; ki < E1_N; ki++) {
                const int sq = e1_lens[qi], sk = e1_lens[ki];
                spec s = make_spec(128, FA3_DTYPE_BF16, mask, 1, sq, sk, 2, 2);
                prob p;
                prob_init(&p, &s, 0xE1000000u + (uint64_t)m * 1000000 + (uint64_t)sq * 1000 + sk);
                /* Guards: two full 128-row tiles of NaN after Q/K/V (a tensor map or loop that
                   rounds seqlen up to a tile would read them), some before; after O and LSE. */
                layout g = {LAY_BSHD, 0, 4096, (size_t)2 * 128 * 2 * 128};
                p.lq = p.lk = p.lv = g;
                p.lo = (layout){LAY_BSHD, 0, 4096, 4096};
                p.lse_pre = 1024;
                p.lse_post = 1024;
                prob_upload(&p);
                fa3_status st = prob_run(&p);
                char what[128];
                snprintf(what, sizeof what, "E1 hd128 bf16 %s sq=%d sk=%d", m ? "causal" : "none",
                         sq, sk);
                cases++;
                if (st != FA3_OK) {
                    printf("  FAIL %s: fa3_fwd: %s: %s\n", what, fa3_strerror(st),
                           fa3_last_error_message());
                    failed++;
                    prob_free(&p);
                    continue;
                }
                prob_reference(&p);
                check_res cr;
                failed += prob_check(&p, what, -1, -1, -1, 0, &cr) != 0;
                if (cr.acc.err_o > worst)
                    worst = cr.acc.err_o;
                if (cr.acc.err_o / cr.tol > worst_ratio)
                    worst_ratio = cr.acc.err_o / cr.tol;
                if (cr.acc.err_lse > worst_lse)
                    worst_lse = cr.acc.err_lse;
                prob_free(&p);
            }
        printf("  E1 %s: %d pairs; worst max|O-ref| = %.3g, worst err/tol = %.2f, worst "
               "max|LSE-ref| = %.3g\n", m ? "causal" : "none", E1_N * E1_N, worst, worst_ratio,
               worst_lse);
    }
    printf("  E1: %d cases, %d failed, %.1f s\n", cases, failed, now_s() - t0);
    if (failed)
        fail_msg("E1: %d of %d (seqlen_q, seqlen_k, mask) cases failed", failed, cases);
}

/* ------------------------------------------------------------------------------------------- */
/* E2 */

static void test_e2_single_key(void **state)
{
    (void)state;
    REQUIRE_GPU();
    for (int m = 0; m < 2; m++) {
        spec s = make_spec(64, FA3_DTYPE_FP16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 3, 1, 1, 4,
                           2);
        prob p;
        prob_init(&p, &s, 0xE2 + (uint64_t)m);
        prob_upload(&p);
        RUN_OK(&p);
        double scale = 1.0 / sqrt(64.0), worst_lse = 0;
        size_t mismatched = 0;
        for (int b = 0; b < s.batch; b++)
            for (int h = 0; h < s.h; h++) {
                int hk = h / (s.h / s.hk);
                const uint16_t *q = p.q + dense_at(1, s.h, 64, b, 0, h, 0);
                const uint16_t *k = p.k + dense_at(1, s.hk, 64, b, 0, hk, 0);
                const uint16_t *v = p.v + dense_at(1, s.hk, 64, b, 0, hk, 0);
                const uint16_t *o = p.o + dense_at(1, s.h, 64, b, 0, h, 0);
                double dot = 0;
                for (int c = 0; c < 64; c++) {
                    dot += (double)fp16_to_f32(q[c]) * fp16_to_f32(k[c]);
                    if (o[c] != v[c] && mismatched++ == 0)
                        printf("  E2: b%d h%d O[%d] = 0x%04x (%g), want v = 0x%04x (%g)\n", b, h,
                               c, o[c], (double)fp16_to_f32(o[c]), v[c],
                               (double)fp16_to_f32(v[c]));
                }
                double want = dot * scale, got = p.lse[lse_at(&p, b, h, 0)];
                double e = fabs(got - want);
                if (!(e <= worst_lse))
                    worst_lse = e;
            }
        printf("  E2 %s: %zu O elements differ from v; max|LSE - q.k.scale| = %.3g\n",
               m ? "causal" : "none", mismatched, worst_lse);
        if (p.o_outside_written || p.lse_outside_written)
            fail_msg("E2: wrote outside O/LSE");
        prob_free(&p);
        if (mismatched)
            fail_msg("E2: %zu O elements are not exactly v", mismatched);
        if (!(worst_lse <= 1e-3))
            fail_msg("E2: LSE differs from q.k.scale by %g (> 1e-3)", worst_lse);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* E3 */

static void e3_case(int hd, fa3_dtype dt, fa3_mask mask, int sq, int sk, uint64_t salt)
{
    spec s = make_spec(hd, dt, mask, 2, sq, sk, 2, 2);
    prob p;
    prob_init(&p, &s, salt);
    for (int b = 0; b < s.batch; b++) /* every key row equal to row 0 of its (b, head) */
        for (int j = 1; j < sk; j++)
            for (int h = 0; h < s.hk; h++)
                memcpy(p.k + dense_at(sk, s.hk, hd, b, j, h, 0),
                       p.k + dense_at(sk, s.hk, hd, b, 0, h, 0), (size_t)hd * 2);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "E3 hd%d %s %s sq=%d sk=%d", hd,
             dt == FA3_DTYPE_FP16 ? "fp16" : "bf16", mask ? "causal" : "none", sq, sk);
    EXPECT_PASS(&p, what);

    /* O = mean of the visible v rows (prefix sums in double), to one ulp of the dtype. */
    const double ulp = dt == FA3_DTYPE_FP16 ? 0x1p-10 : 0x1p-7;
    const double scale = 1.0 / sqrt((double)hd);
    double worst = 0, worst_rel = 0, worst_lse = 0;
    double *prefix = xcalloc((size_t)(sk + 1) * hd, sizeof(double));
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            int hk = h / (s.h / s.hk);
            for (int j = 0; j < sk; j++)
                for (int c = 0; c < hd; c++)
                    prefix[(size_t)(j + 1) * hd + c] =
                        prefix[(size_t)j * hd + c] +
                        dtype_to_f32(dt, p.v[dense_at(sk, s.hk, hd, b, j, hk, c)]);
            const uint16_t *k0 = p.k + dense_at(sk, s.hk, hd, b, 0, hk, 0);
            for (int i = 0; i < sq; i++) {
                int64_t lo, hi;
                row_range(&s, i, &lo, &hi);
                if (lo > hi)
                    continue;
                double cnt = (double)(hi - lo + 1), dot = 0;
                const uint16_t *qr = p.q + dense_at(sq, s.h, hd, b, i, h, 0);
                for (int c = 0; c < hd; c++) {
                    double mean = (prefix[(size_t)(hi + 1) * hd + c] -
                                   prefix[(size_t)lo * hd + c]) / cnt;
                    double x = o_at(&p, b, i, h, c);
                    double e = fabs(x - mean), allowed = ulp * fabs(mean) + 1e-5;
                    if (!(e <= worst))
                        worst = e;
                    if (!(e / allowed <= worst_rel))
                        worst_rel = e / allowed;
                    if (!(e <= allowed)) {
                        free(prefix);
                        fail_msg("%s: O[b%d i%d h%d c%d] = %.7g, mean of the %g visible v rows = "
                                 "%.7g (allowed %.3g)", what, b, i, h, c, x, cnt, mean, allowed);
                    }
                    dot += (double)dtype_to_f32(dt, qr[c]) * dtype_to_f32(dt, k0[c]);
                }
                double want_lse = dot * scale + log(cnt);
                double el = fabs((double)p.lse[lse_at(&p, b, h, i)] - want_lse);
                if (!(el <= worst_lse))
                    worst_lse = el;
            }
        }
    free(prefix);
    printf("  %s: max|O - mean(v)| = %.3g (%.2f of one ulp), max|LSE - (s + ln n)| = %.3g\n", what,
           worst, worst_rel, worst_lse);
    if (!(worst_lse <= 1e-3))
        fail_msg("%s: LSE differs from q.k0.scale + ln(n) by %g (> 1e-3)", what, worst_lse);
    prob_free(&p);
}

static void test_e3_identical_keys(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e3_case(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 300, 1000, 0xE30);
    e3_case(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 300, 1000, 0xE31);
    e3_case(64, FA3_DTYPE_FP16, FA3_MASK_NONE, 129, 257, 0xE32);
}

/* ------------------------------------------------------------------------------------------- */
/* E4, E5 */

static void causal_empty_case(const char *id, int batch, int sq, int sk, int h, int hk,
                              size_t want_empty)
{
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, batch, sq, sk, h, hk);
    prob p;
    prob_init(&p, &s, 0xE4000000u + (uint64_t)sq * 4096 + sk);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "%s causal sq=%d sk=%d b%d h%d/%d", id, sq, sk, batch, h, hk);
    check_res cr;
    int f = prob_check(&p, what, -1, -1, -1, 1, &cr);
    prob_free(&p);
    if (f)
        fail_msg("%s: failed (see above)", what);
    if (cr.rows_empty != want_empty)
        fail_msg("%s: %zu rows see no key, expected %zu", what, cr.rows_empty, want_empty);
}

static void test_e4_e5_causal_empty_rows(void **state)
{
    (void)state;
    REQUIRE_GPU();
    /* E4: rows 0..1023 of each (batch, head) see no key */
    causal_empty_case("E4", 1, 2048, 1024, 2, 2, (size_t)1024 * 2);
    /* E5: the first 5 rows see no key */
    causal_empty_case("E5", 2, 8, 3, 2, 1, (size_t)5 * 2 * 2);
    /* the boundary one tile further: sq − sk = 128 (one whole query tile empty) and 129 */
    causal_empty_case("E4b", 1, 384, 256, 2, 2, (size_t)128 * 2);
    causal_empty_case("E4c", 1, 385, 256, 2, 2, (size_t)129 * 2);
}

/* ------------------------------------------------------------------------------------------- */
/* E6, E7: one problem, two kernels (different configs), same device inputs. */

static void test_e6_local_full_window(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int sq = 256, sk = 128;
    spec s = make_spec(64, FA3_DTYPE_FP16, FA3_MASK_NONE, 2, sq, sk, 3, 3);
    prob p;
    prob_init(&p, &s, 0xE6);
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    EXPECT_PASS(&p, "E6 full attention (mask none) hd64 fp16 sq=256 sk=128");
    saved full = save_outputs(&p);
    /* (-1, 1<<20) is what the case names (fa3_fwd turns a right window >= seqlen_q into -1);
       (-1, sq-1) and (sk-1, sq-1) reach every key without that shortcut. */
    static const int win[][2] = {{-1, 1 << 20}, {-1, sq - 1}, {sk - 1, sq - 1}, {sk - 1, -1}};
    int failed = 0;
    for (size_t w = 0; w < sizeof win / sizeof win[0]; w++) {
        run_with_mask(&p, FA3_MASK_LOCAL, win[w][0], win[w][1]);
        char what[128];
        snprintf(what, sizeof what, "E6 local(%d,%d) hd64 fp16 sq=256 sk=128", win[w][0],
                 win[w][1]);
        check_res cr;
        failed += prob_check(&p, what, -1, -1, -1, 1, &cr) != 0;
        diff_res d = outputs_diff(s.dt, full.o, p.o, p.no, full.lse, p.lse, p.nlse);
        printf("    vs full attention: %zu O elements differ (max %.3g), %zu LSE values (max "
               "%.3g)\n", d.o_bits, d.o_max, d.lse_bits, d.lse_max);
        if (!(d.o_max <= cr.tol) || !(d.lse_max <= 1e-3)) {
            printf("  FAIL %s: differs from full attention by %.3g in O (tol %.3g), %.3g in LSE\n",
                   what, d.o_max, cr.tol, d.lse_max);
            failed++;
        }
    }
    saved_free(&full);
    prob_free(&p);
    if (failed)
        fail_msg("E6: %d windows failed (see above)", failed);
}

static void test_e7_local_equals_causal(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int shapes[][2] = {{256, 256}, {1000, 257}, {257, 1000}, {8, 3}, {129, 129}};
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int sq = shapes[i][0], sk = shapes[i][1];
        spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, sq, sk, 4, 2);
        prob p;
        prob_init(&p, &s, 0xE7000000u + (uint64_t)sq * 4096 + sk);
        prob_upload(&p);
        RUN_OK(&p);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "E7 causal hd128 bf16 sq=%d sk=%d", sq, sk);
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        saved causal = save_outputs(&p);
        run_with_mask(&p, FA3_MASK_LOCAL, -1, 0);
        snprintf(what, sizeof what, "E7 local(-1,0) hd128 bf16 sq=%d sk=%d", sq, sk);
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        diff_res d = outputs_diff(s.dt, causal.o, p.o, p.no, causal.lse, p.lse, p.nlse);
        printf("    local(-1,0) vs causal: %zu O elements and %zu LSE values differ (max %.3g, "
               "%.3g)\n", d.o_bits, d.lse_bits, d.o_max, d.lse_max);
        if (d.o_bits || d.lse_bits) {
            printf("  FAIL %s: not bitwise equal to causal\n", what);
            failed++;
        }
        saved_free(&causal);
        prob_free(&p);
    }
    if (failed)
        fail_msg("E7: %d checks failed (see above)", failed);
}

/* ------------------------------------------------------------------------------------------- */
/* E8 */

static void test_e8_softcap_saturation(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const float cap = 50.0f;
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 300, 300, 2, 2);
    s.softcap = 1;
    s.softcap_value = cap;
    prob p;
    prob_init(&p, &s, 0xE8);
    /* Per (batch, head): key j0 = c·(query row i0) gives row i0 a scaled score near +5000, key j1
       = −c·(row i0) one near −5000; the other rows see ±hundreds from those two keys. */
    const double scale = 1.0 / sqrt(128.0);
    double top = 0;
    int inj[2][2][3];
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            int i0 = (37 * b + 101 * h + 5) % s.sq, j0 = (53 * b + 29 * h + 7) % s.sk;
            int j1 = (j0 + s.sk / 2) % s.sk;
            const uint16_t *qr = p.q + dense_at(s.sq, s.h, 128, b, i0, h, 0);
            double qq = 0;
            for (int c = 0; c < 128; c++)
                qq += (double)bf16_to_f32(qr[c]) * bf16_to_f32(qr[c]);
            double cf = 5000.0 / (qq * scale);
            for (int c = 0; c < 128; c++) {
                float x = (float)(cf * bf16_to_f32(qr[c]));
                p.k[dense_at(s.sk, s.hk, 128, b, j0, h, c)] = f32_to_bf16(x);
                p.k[dense_at(s.sk, s.hk, 128, b, j1, h, c)] = f32_to_bf16(-x);
            }
            double dot = 0;
            for (int c = 0; c < 128; c++)
                dot += (double)bf16_to_f32(qr[c]) *
                       bf16_to_f32(p.k[dense_at(s.sk, s.hk, 128, b, j0, h, c)]);
            if (dot * scale > top)
                top = dot * scale;
            inj[b][h][0] = i0;
            inj[b][h][1] = j0;
            inj[b][h][2] = j1;
            if (!(dot * scale > 4000.0))
                fail_msg("test bug: injected score %g is not near 5000", dot * scale);
        }
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    EXPECT_PASS(&p, "E8 softcap 50 hd128 bf16 s300, scores near +-5000");
    /* LSE: finite everywhere (checked above) and at most cap + ln(seqlen_k): the capped scores are
       within ±cap; the rows with the +5000 key have LSE within [cap − 1e-3, cap + ln(sk)]. */
    double max_lse = -INFINITY;
    for (size_t i = 0; i < p.nlse; i++)
        if (p.lse[i] > max_lse)
            max_lse = p.lse[i];
    printf("  E8: largest raw scaled score %.0f; largest LSE %.4f (cap %g + ln %d = %.4f)\n", top,
           max_lse, (double)cap, s.sk, cap + log((double)s.sk));
    if (!(max_lse <= cap + log((double)s.sk) + 1e-3))
        fail_msg("E8: LSE %g above cap + ln(seqlen_k): scores were not capped", max_lse);
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.h; h++) {
            double l = p.lse[lse_at(&p, b, h, inj[b][h][0])];
            if (!(l >= cap - 1e-3 && l <= cap + log((double)s.sk) + 1e-3))
                fail_msg("E8: row b%d h%d i%d (score +5000 at key %d) has LSE %g, want about %g",
                         b, h, inj[b][h][0], inj[b][h][1], l, (double)cap);
        }
    prob_free(&p);
}

/* ------------------------------------------------------------------------------------------- */
/* E9 (runs without a GPU too: configs are validated before anything touches the driver) */

static void expect_bad_config(int hd, int hdv, fa3_status want, int named)
{
    fa3_config c, out;
    fa3_config_init(&c);
    c.head_dim = hd;
    c.head_dim_v = hdv;
    fa3_config_init(&out);
    fa3_config before = out;
    char val[32];
    snprintf(val, sizeof val, "%d", named);

    fa3_status st = fa3_config_canonicalize(&c, &out);
    const char *msg = fa3_last_error_message();
    printf("  E9 (%d, %d): canonicalize: %s: %s\n", hd, hdv, fa3_strerror(st), msg);
    if (st != want)
        fail_msg("E9: canonicalize(head_dim %d, head_dim_v %d) returned %s, expected %s", hd, hdv,
                 fa3_strerror(st), fa3_strerror(want));
    if (!strstr(msg, val) || !strstr(msg, want == FA3_ERR_BAD_HEAD_DIM ? "head_dim" : "head_dim_v"))
        fail_msg("E9: message \"%s\" does not name the field and %s", msg, val);
    if (memcmp(&out, &before, sizeof out) != 0)
        fail_msg("E9: canonicalize changed out on error");

    fa3_kernel *k = NULL;
    st = fa3_jit_get_kernel(g_ctx, &c, &k);
    msg = fa3_last_error_message();
    if (st != want || k != NULL || !strstr(msg, val))
        fail_msg("E9: fa3_jit_get_kernel(head_dim %d, head_dim_v %d) returned %s (kernel %p), "
                 "message \"%s\"; expected %s naming %s", hd, hdv, fa3_strerror(st), (void *)k,
                 msg, fa3_strerror(want), val);

    char *ptx = NULL;
    size_t len = 12345;
    st = fa3_emit_ptx(&c, &ptx, &len);
    if (st != want || ptx != NULL)
        fail_msg("E9: fa3_emit_ptx(head_dim %d) returned %s and %s PTX; expected %s and none", hd,
                 fa3_strerror(st), ptx ? "some" : "no", fa3_strerror(want));
}

static void test_e9_bad_head_dim(void **state)
{
    (void)state;
    CUdeviceptr o = 0;
    const size_t n = 4096;
    int gpu = gpu_available(NULL, 0);
    if (gpu) {
        o = gpu_alloc(n * 2);
        gpu_fill_nan16(o, n, FA3_DTYPE_BF16);
        gpu_sync();
    }
    expect_bad_config(72, 0, FA3_ERR_BAD_HEAD_DIM, 72);
    expect_bad_config(512, 0, FA3_ERR_BAD_HEAD_DIM, 512);
    expect_bad_config(128, 72, FA3_ERR_BAD_HEAD_DIM_V, 72);
    if (gpu) {
        uint16_t *h = xcalloc(n, 2);
        gpu_sync();
        gpu_download(h, o, n * 2);
        size_t touched = 0;
        for (size_t i = 0; i < n; i++)
            touched += h[i] != nan16_bits(FA3_DTYPE_BF16);
        free(h);
        gpu_free(o);
        printf("  E9: O buffer after the refused calls: %zu of %zu elements changed\n", touched, n);
        if (touched)
            fail_msg("E9: the output buffer was written");
    } else {
        printf("  E9: no GPU: configuration checks only\n");
    }
}

/* ------------------------------------------------------------------------------------------- */

int main(void)
{
    const char *sm = getenv("FA3JIT_TEST_SMALL");
    g_small = sm && *sm && strcmp(sm, "0") != 0;
    if (g_small)
        printf("FA3JIT_TEST_SMALL: E10 at seqlen 1024 with 4 heads, E13 at seqlen 8192\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e9_bad_head_dim), /* the one test that runs without a GPU */
        cmocka_unit_test(test_e1_tile_boundaries),
        cmocka_unit_test(test_e2_single_key),
        cmocka_unit_test(test_e3_identical_keys),
        cmocka_unit_test(test_e4_e5_causal_empty_rows),
        cmocka_unit_test(test_e6_local_full_window),
        cmocka_unit_test(test_e7_local_equals_causal),
        cmocka_unit_test(test_e8_softcap_saturation),
        cmocka_unit_test(test_e10_strided_views),
        cmocka_unit_test(test_e11_kv_head_stride0),
        cmocka_unit_test(test_e12_deterministic),
        cmocka_unit_test(test_e13_large_grids),
        cmocka_unit_test(test_e14_nan_row),
        cmocka_unit_test(test_gqa_ratios),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_l2_sections),
        cmocka_unit_test(test_o_unaligned),
    };
    const size_t n = sizeof tests / sizeof tests[0];
    const double t0 = now_s();
    /* all but E9 need a GPU */
    int rc = gpu_test_main("edge", tests, n, (int)n - 1, &g_ctx, &g_seed, &g_skipped);
    printf("test_edge: %.1f s\n", now_s() - t0);
    return rc;
}

