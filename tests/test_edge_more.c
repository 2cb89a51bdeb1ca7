/*
 * test_edge (part 2 of 2, cases E10–E14, GQA ratios, head dims, L2 sections, unaligned O): see
 * test_edge.c for the rules and the list of tests.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edge_prob.h"
#include "check.h"

/* ------------------------------------------------------------------------------------------- */
/* E10 */

void test_e10_strided_views(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const int sq = g_small ? 1024 : 8192, h = g_small ? 4 : 32;
    const double t0 = now_s();
    spec s = make_spec(256, FA3_DTYPE_BF16, FA3_MASK_NONE, 1, sq, sq, h, h);
    prob p;
    prob_init(&p, &s, 0xE10);
    /* (batch, heads, seqlen, head_dim) storage passed with (batch, seqlen, heads, head_dim)
       strides; the host permutes (tensor_upload places each element by its strides). */
    layout bhsd = {LAY_BHSD, 0, 256, 2048};
    p.lq = p.lk = p.lv = bhsd;
    prob_upload(&p);
    printf("  E10: q strides (batch %lld, row %lld, head %lld); inputs made and uploaded in %.1f s\n",
           (long long)p.args.q_batch_stride, (long long)p.args.q_row_stride,
           (long long)p.args.q_head_stride, now_s() - t0);
    RUN_OK(&p);
    /* sampled row blocks against the reference: first, middle, last tile */
    prob_reference_rows(&p, 0, 128);
    prob_reference_rows(&p, sq / 2 - 64, 128);
    prob_reference_rows(&p, sq - 128, 128);
    char what[128];
    snprintf(what, sizeof what, "E10 strided hd256 bf16 s%d h%d (3 row blocks vs reference)", sq,
             h);
    EXPECT_PASS(&p, what);
    saved strided = save_outputs(&p);

    layout contig = {LAY_BSHD, 0, 256, 2048};
    p.lq = p.lk = p.lv = contig;
    prob_upload(&p);
    RUN_OK(&p);
    diff_res d = outputs_diff(s.dt, strided.o, p.o, p.no, strided.lse, p.lse, p.nlse);
    printf("  E10: strided vs contiguous copies: %zu of %zu O elements differ bitwise (max %.3g), "
           "%zu LSE values (max %.3g); %.1f s\n", d.o_bits, p.no, d.o_max, d.lse_bits, d.lse_max,
           now_s() - t0);
    size_t outside = p.o_outside_written + p.lse_outside_written;
    saved_free(&strided);
    prob_free(&p);
    if (outside)
        fail_msg("E10: the contiguous run wrote outside O/LSE");
    if (!(d.o_max <= 5e-4) || !(d.lse_max <= 1e-3))
        fail_msg("E10: strided and contiguous runs differ by %g in O (case bound 5e-4), %g in LSE",
                 d.o_max, d.lse_max);
    /* Same kernel, same values in shared memory, and runs are deterministic (E12): anything but
       bitwise equality means the strided run loaded something else. */
    if (d.o_bits || d.lse_bits)
        fail_msg("E10: %zu O elements and %zu LSE values differ between the strided and the "
                 "contiguous run (max %g): expected bitwise equality", d.o_bits, d.lse_bits,
                 d.o_max);
}

/* ------------------------------------------------------------------------------------------- */
/* E11 */

static void e11_case(fa3_mask mask, uint64_t salt)
{
    const int sk = 32 * 9 + 1; /* 289 */
    spec s = make_spec(128, FA3_DTYPE_BF16, mask, 2, 200, sk, 4, 4);
    prob p;
    prob_init(&p, &s, salt);
    for (int b = 0; b < s.batch; b++) /* the same K/V for every head */
        for (int j = 0; j < sk; j++)
            for (int h = 1; h < s.hk; h++) {
                memcpy(p.k + dense_at(sk, s.hk, 128, b, j, h, 0),
                       p.k + dense_at(sk, s.hk, 128, b, j, 0, 0), 256);
                memcpy(p.v + dense_at(sk, s.hk, 128, b, j, h, 0),
                       p.v + dense_at(sk, s.hk, 128, b, j, 0, 0), 256);
            }
    p.lk = p.lv = (layout){LAY_HEAD_BCAST, 0, 256, 2048};
    prob_upload(&p);
    printf("  E11: k strides (batch %lld, row %lld, head %lld), num_heads_k %d\n",
           (long long)p.args.k_batch_stride, (long long)p.args.k_row_stride,
           (long long)p.args.k_head_stride, s.hk);
    RUN_OK(&p);
    prob_reference(&p);
    char what[128];
    snprintf(what, sizeof what, "E11 K/V head stride 0 hd128 bf16 %s sq=200 sk=%d",
             mask ? "causal" : "none", sk);
    EXPECT_PASS(&p, what);
    saved bcast = save_outputs(&p);
    p.lk = p.lv = (layout){LAY_BSHD, 0, 256, 2048};
    prob_upload(&p);
    RUN_OK(&p);
    diff_res d = outputs_diff(s.dt, bcast.o, p.o, p.no, bcast.lse, p.lse, p.nlse);
    printf("  %s vs materialized copies: %zu O elements differ bitwise (max %.3g), %zu LSE (max "
           "%.3g)\n", what, d.o_bits, d.o_max, d.lse_bits, d.lse_max);
    saved_free(&bcast);
    prob_free(&p);
    if (d.o_bits || d.lse_bits) /* same kernel, same values: bitwise (see E10) */
        fail_msg("%s: %zu O elements and %zu LSE values differ from the materialized copies "
                 "(max %g, %g)", what, d.o_bits, d.lse_bits, d.o_max, d.lse_max);
}

void test_e11_kv_head_stride0(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e11_case(FA3_MASK_NONE, 0xE110);
    e11_case(FA3_MASK_CAUSAL, 0xE111);
}

/* ------------------------------------------------------------------------------------------- */
/* E12 */

static void e12_case(fa3_mask mask, int sq, int sk, int wl, int wr, uint64_t salt)
{
    spec s = make_spec(128, FA3_DTYPE_BF16, mask, 2, sq, sk, 4, 2);
    s.wl = wl;
    s.wr = wr;
    prob p;
    prob_init(&p, &s, salt);
    prob_upload(&p);
    RUN_OK(&p);
    saved first = save_outputs(&p);
    size_t diff_o = 0, diff_l = 0;
    for (int rep = 0; rep < 2; rep++) {
        RUN_OK(&p);
        diff_res d = outputs_diff(s.dt, first.o, p.o, p.no, first.lse, p.lse, p.nlse);
        diff_o += d.o_bits;
        diff_l += d.lse_bits;
    }
    printf("  E12 %s sq=%d sk=%d: over 2 repeats, %zu O elements and %zu LSE values differ from "
           "the first run\n", mask == FA3_MASK_CAUSAL ? "causal" : mask ? "local" : "none", sq, sk,
           diff_o, diff_l);
    saved_free(&first);
    prob_free(&p);
    if (diff_o || diff_l)
        fail_msg("E12: repeated runs are not bitwise identical");
}

void test_e12_deterministic(void **state)
{
    (void)state;
    REQUIRE_GPU();
    e12_case(FA3_MASK_CAUSAL, 1000, 1000, -1, -1, 0xE120);
    e12_case(FA3_MASK_NONE, 1000, 257, -1, -1, 0xE121);
    e12_case(FA3_MASK_LOCAL, 777, 1000, 64, 32, 0xE122);
}

/* ------------------------------------------------------------------------------------------- */
/* E13 */

/* Runs p; a refusal before launch (status other than OK, a message, O untouched) is accepted as
   the case file allows. Returns 1 if it ran. */
static int run_or_refuse(prob *p, const char *what)
{
    fa3_status st = prob_run(p);
    if (st == FA3_OK)
        return 1;
    const char *msg = fa3_last_error_message();
    size_t written = 0;
    for (size_t i = 0; i < p->no; i++)
        written += p->o[i] != nan16_bits(p->s.dt);
    printf("  NOTE %s: refused before launch: %s: %s (%zu O elements written)\n", what,
           fa3_strerror(st), msg, written);
    if (st == FA3_ERR_CUDA || st == FA3_ERR_INTERNAL || !msg[0] || written ||
        p->o_outside_written)
        fail_msg("%s: failed with %s (\"%s\") after writing %zu O elements: not a clear refusal "
                 "before launch", what, fa3_strerror(st), msg, written);
    return 0;
}

void test_e13_large_grids(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const double t0 = now_s();
    /* batch·heads above 65535 (a grid's y/z limit) at seqlen 1 */
    static const int bh[][3] = {{1024, 80, 80}, {1, 70000, 7}};
    for (int c = 0; c < 2; c++) {
        spec s = make_spec(64, FA3_DTYPE_BF16, FA3_MASK_NONE, bh[c][0], 1, 1, bh[c][1], bh[c][2]);
        prob p;
        prob_init(&p, &s, 0xE130 + (uint64_t)c);
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "E13 hd64 bf16 s1 batch %d heads %d/%d (%d rows)", bh[c][0],
                 bh[c][1], bh[c][2], bh[c][0] * bh[c][1]);
        if (run_or_refuse(&p, what)) {
            prob_reference(&p);
            EXPECT_PASS(&p, what);
        }
        prob_free(&p);
    }
    /* a long causal sequence: every row written and finite (checked for all rows), row blocks at
       the start, the middle and the end against the reference */
    const int L = g_small ? 8192 : 131072;
    spec s = make_spec(64, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 1, L, L, 1, 1);
    prob p;
    prob_init(&p, &s, 0xE13F);
    prob_upload(&p);
    char what[128];
    snprintf(what, sizeof what, "E13 hd64 bf16 causal s%d (4 row blocks vs reference)", L);
    const double t1 = now_s();
    if (run_or_refuse(&p, what)) {
        const double t2 = now_s();
        prob_reference_rows(&p, 0, 128);
        prob_reference_rows(&p, L / 2 - 64, 128);
        prob_reference_rows(&p, L - 192, 64);
        prob_reference_rows(&p, L - 128, 128);
        printf("  E13 s%d: fa3_fwd + readback %.2f s, references on 448 rows %.2f s\n", L, t2 - t1,
               now_s() - t2);
        EXPECT_PASS(&p, what);
    }
    prob_free(&p);
    printf("  E13: %.1f s\n", now_s() - t0);
}

/* ------------------------------------------------------------------------------------------- */
/* E14 */

void test_e14_nan_row(void **state)
{
    (void)state;
    REQUIRE_GPU();
    spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_NONE, 2, 200, 300, 2, 2);
    prob p;
    prob_init(&p, &s, 0xE14);
    prob_upload(&p);
    RUN_OK(&p);
    saved clean = save_outputs(&p);

    const int nb = 1, ni = 77, nh = 1;
    p.q[dense_at(s.sq, s.h, 128, nb, ni, nh, 5)] = f32_to_bf16(NAN); /* one element of one row */
    prob_upload(&p);
    RUN_OK(&p);
    prob_reference(&p);
    size_t nan_count = 0;
    for (int c = 0; c < 128; c++)
        nan_count += isnan(o_at(&p, nb, ni, nh, c)) != 0;
    float l = p.lse[lse_at(&p, nb, nh, ni)];
    printf("  E14: %zu of 128 elements of the NaN row are NaN; its LSE = %g\n", nan_count,
           (double)l);
    /* every other row: bitwise what the NaN-free run gave */
    size_t changed = 0, changed_lse = 0;
    for (int b = 0; b < s.batch; b++)
        for (int i = 0; i < s.sq; i++)
            for (int h = 0; h < s.h; h++) {
                if (b == nb && i == ni && h == nh)
                    continue;
                size_t o0 = dense_at(s.sq, s.h, 128, b, i, h, 0);
                changed += memcmp(clean.o + o0, p.o + o0, 256) != 0;
                size_t li = lse_at(&p, b, h, i);
                changed_lse += memcmp(&clean.lse[li], &p.lse[li], 4) != 0;
            }
    printf("  E14: %zu other O rows and %zu other LSE values changed from the NaN-free run\n",
           changed, changed_lse);
    saved_free(&clean);
    int f = prob_check(&p, "E14 other rows vs reference", nb, ni, nh, 1, NULL);
    prob_free(&p);
    if (nan_count != 128)
        fail_msg("E14: only %zu of 128 elements of the NaN row are NaN", nan_count);
    /* the case file asks for the O row; a finite LSE would still be a wrong statistic (NaN, or
       +inf as FlashAttention reports rows whose sum is NaN, are both accepted) */
    if (isfinite(l))
        fail_msg("E14: the NaN row's LSE is %g, a finite value", (double)l);
    if (changed || changed_lse)
        fail_msg("E14: the NaN in one row changed %zu other O rows and %zu LSE values", changed,
                 changed_lse);
    if (f)
        fail_msg("E14: the other rows fail the reference check (see above)");
}

/* ------------------------------------------------------------------------------------------- */
/* GQA ratios, head dims */

void test_gqa_ratios(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int hks[] = {1, 2, 4, 8};
    static const int seqs[][2] = {{128, 128}, {1000, 257}};
    int failed = 0, n = 0;
    for (int m = 0; m < 2; m++)
        for (int si = 0; si < 2; si++)
            for (int g = 0; g < 4; g++) {
                spec s = make_spec(128, FA3_DTYPE_BF16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2,
                                   seqs[si][0], seqs[si][1], 8, hks[g]);
                prob p;
                prob_init(&p, &s,
                          0x6A000000u + (uint64_t)m * 100 + (uint64_t)si * 10 + (uint64_t)g);
                prob_upload(&p);
                RUN_OK(&p);
                prob_reference(&p);
                char what[128];
                snprintf(what, sizeof what, "GQA h8/%d hd128 bf16 %s sq=%d sk=%d", hks[g],
                         m ? "causal" : "none", seqs[si][0], seqs[si][1]);
                failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
                n++;
                prob_free(&p);
            }
    if (failed)
        fail_msg("GQA: %d of %d cases failed", failed, n);
}

/* O that TMA cannot store (address 4 bytes past a 16-byte boundary, rows padded by 2 elements):
   the kernel falls back to stores from registers, and with head_dim 256 (O staged in Q) still
   releases Q. NaN gaps around every O row catch a write beside the tensor. */
void test_o_unaligned(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[] = {64, 128, 256};
    int failed = 0;
    for (int m = 0; m < 2; m++)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            spec s = make_spec(dims[i], FA3_DTYPE_BF16, m ? FA3_MASK_CAUSAL : FA3_MASK_NONE, 2,
                               300, 500, 4, 2);
            prob p;
            prob_init(&p, &s, 0x0A1000u + (uint64_t)dims[i] * 10 + (uint64_t)m);
            p.lo = (layout){LAY_BSHD, 2, 258, 4096};
            prob_upload(&p);
            RUN_OK(&p);
            prob_reference(&p);
            char what[128];
            snprintf(what, sizeof what, "O unaligned (address %% 16 = 4, row pad 2) hd%d bf16 %s "
                     "sq=300 sk=500 h4/2", dims[i], m ? "causal" : "none");
            failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
            prob_free(&p);
        }
    if (failed)
        fail_msg("O unaligned: %d of 6 cases failed", failed);
}

/* Masked configs walk their tiles in L2 sections of (head, batch) pairs (fwd.c section_hb):
   seqlen_k 4096 at head_dim 128 gives 2 MiB of K/V per KV head, so 16 KV heads (32 query heads
   at 2 per KV head) per section; 2 × 40 heads make sections of 32, 32 and 16 pairs, the last one
   short. Every row is compared with the reference, causal and local. */
void test_l2_sections(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int failed = 0;
    for (int m = 0; m < 2; m++) {
        spec s = make_spec(128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 1000, 4096, 40, 20);
        prob p;
        prob_init(&p, &s, 0x12500 + (uint64_t)m);
        prob_upload(&p);
        if (m == 0)
            RUN_OK(&p);
        else
            run_with_mask(&p, FA3_MASK_LOCAL, 700, 64);
        prob_reference(&p);
        char what[128];
        snprintf(what, sizeof what, "L2 sections hd128 bf16 %s b2 h40/20 sq=1000 sk=4096",
                 m ? "local(700,64)" : "causal");
        failed += prob_check(&p, what, -1, -1, -1, 1, NULL) != 0;
        prob_free(&p);
    }
    if (failed)
        fail_msg("L2 sections: %d of 2 cases failed", failed);
}

void test_head_dims(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const int dims[][2] = {{64, 0}, {96, 0}, {128, 0}, {192, 0}, {256, 0}, {192, 128}};
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const int hd = dims[i][0], hdv = dims[i][1] ? dims[i][1] : hd;
        fa3_config c, canon;
        fa3_config_init(&c);
        c.head_dim = hd;
        c.head_dim_v = dims[i][1];
        c.mask = FA3_MASK_CAUSAL;
        fa3_status st = fa3_config_canonicalize(&c, &canon);
        if (st != FA3_OK) {
            printf("  NOTE: head_dim %d, head_dim_v %d not supported by this build (%s: %s): "
                   "skipped\n", hd, hdv, fa3_strerror(st), fa3_last_error_message());
            continue;
        }
        fa3_kernel *kern = NULL; /* a generator or compiler failure fails this size only */
        st = fa3_jit_get_kernel(g_ctx, &canon, &kern);
        if (st != FA3_OK) {
            printf("  FAIL hd%d hdv%d: fa3_jit_get_kernel: %s: %s\n", hd, hdv, fa3_strerror(st),
                   fa3_last_error_message());
            failed++;
            ran++;
            continue;
        }
        spec s = make_spec(hd, FA3_DTYPE_BF16, FA3_MASK_CAUSAL, 2, 300, 500, 4, 2);
        s.hdv = dims[i][1];
        prob p;
        prob_init(&p, &s, 0xD000u + (uint64_t)hd * 1000 + (uint64_t)hdv);
        /* NaN gaps of 32 elements after every head's row in Q/K/V/O: a kernel that rounds the
           head dim up (96 → 128) and reads or writes the neighbour's columns fails */
        layout gap = {LAY_BSHD, 32, 256, 4096};
        p.lq = p.lk = p.lv = p.lo = gap;
        p.lse_post = 1024;
        prob_upload(&p);
        char what[128];
        snprintf(what, sizeof what, "hd%d hdv%d bf16 causal sq=300 sk=500 h4/2 (NaN gaps)", hd,
                 hdv);
        failed += prob_run_and_check(&p, what, 1);
        ran++;
        prob_free(&p);
    }
    printf("  head dims: %d ran, %d failed\n", ran, failed);
    if (failed)
        fail_msg("head dims: %d of %d failed", failed, ran);
    if (ran < 3)
        fail_msg("head dims: only %d sizes supported (64, 128 and 256 at least must be)", ran);
}

