/*
 * test_ptx_layer: the PTX writer (src/codegen/ptx.c) refuses what a generator bug would produce,
 * naming it: a register of the wrong class for its instruction, an opcode outside the op table, a
 * named barrier id outside 1..15 or used with two thread counts, an mbarrier release site whose
 * arrivals differ from the barrier's count, a barrier waited on but never initialized, shared
 * memory past the request, a label used but never placed, a setmaxnreg split beyond the register
 * file. A well-formed function passes, with its .reg declarations written. And a plan the
 * barrier table cannot serve (four consumers: ping-pong ids 1..4 meet the epilogue's 4..) fails
 * the real generator with FA3_ERR_INTERNAL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/codegen.h"
#include "codegen/ptx.h"

static ptx_fn *fresh(void)
{
    ptx_fn *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->smem_bytes = 4096;
    return f;
}

/* Finishes f and checks it failed with a message containing want (NULL: it must pass). */
static void finish_expect(ptx_fn *f, const char *want)
{
    fa3_buf out = {0};
    fa3_status st = ptx_finish(f, &out);
    if (!want) {
        if (st != FA3_OK)
            fail_msg("expected to pass: %s", fa3_last_error_message());
        assert_non_null(out.data);
    } else {
        assert_int_equal(st, FA3_ERR_INTERNAL);
        if (!strstr(fa3_last_error_message(), want))
            fail_msg("message '%s' does not name '%s'", fa3_last_error_message(), want);
    }
    free(out.data);
    free(f);
}

static void test_well_formed(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    f->named = 1; /* the readable rendering; the compact one is checked below */
    ptx_r a = ptx_reg(f, PTX_B32, "a"), b = ptx_reg(f, PTX_B32, "b");
    ptx_r x = ptx_reg(f, PTX_F32, "x"), p = ptx_reg(f, PTX_PRED, "p");
    ptx_r s = ptx_array(f, PTX_F32, "acc", 4);
    int l = ptx_label(f, "top");
    ptx_place(f, l);
    ptx_ins(f, "add.u32 $, $, 7;", a, b);
    ptx_ins(f, "setp.lt.s32 $, $, $;", p, a, b);
    ptx_ins(f, "selp.f32 $, $, $, $;", x, ptx_at(s, 1), ptx_at(s, 2), p);
    ptx_ins(f, "shfl.sync.bfly.b32 $, $, 1, 31, -1;", x, x); /* .b32 takes .f32 registers */
    ptx_ins(f, "@!$ bra %s;", p, ptx_lab(f, l));
    int m = ptx_mbar_add(f, "full", 0, 1);
    ptx_mbar_inited(f, m);
    ptx_mbar_waited(f, m);
    ptx_mbar_release(f, m, 1, "test");
    ptx_named_bar(f, 3, 256);
    ptx_named_bar(f, 3, 256);
    ptx_smem_use(f, 0, 4096);
    ptx_regs_split(f, 168, 384, 24, 128, 240, 256);
    fa3_buf out = {0};
    assert_int_equal(ptx_finish(f, &out), FA3_OK);
    assert_non_null(strstr(out.data, ".reg .f32 %acc<4>;"));
    assert_non_null(strstr(out.data, ".reg .b32 %a_0, %b_1;"));
    assert_non_null(strstr(out.data, "add.u32 %a_0, %b_1, 7;"));
    assert_non_null(strstr(out.data, "selp.f32 %x_2, %acc1, %acc2, %p_3;"));
    assert_non_null(strstr(out.data, "@!%p_3 bra $Ltop_0;"));
    free(out.data);
    free(f);
    /* compact: numbered per class, one .reg line per class */
    f = fresh();
    a = ptx_reg(f, PTX_B32, "a");
    b = ptx_reg(f, PTX_B32, "b");
    p = ptx_reg(f, PTX_PRED, "p");
    ptx_ins(f, "setp.lt.s32 $, $, $;", p, a, b);
    out = (fa3_buf){0};
    assert_int_equal(ptx_finish(f, &out), FA3_OK);
    assert_non_null(strstr(out.data, ".reg .pred %p<1>;"));
    assert_non_null(strstr(out.data, ".reg .b32 %r<2>;"));
    assert_non_null(strstr(out.data, "setp.lt.s32 %p0, %r0, %r1;"));
    free(out.data);
    free(f);
}

static void test_wrong_class(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    ptx_r a = ptx_reg(f, PTX_B32, "a"), x = ptx_reg(f, PTX_F32, "x");
    ptx_ins(f, "add.u32 $, $, $;", a, a, x);
    finish_expect(f, "operand 2 is a .f32 register, the instruction takes .b32");
    f = fresh();
    ptx_r d = ptx_reg(f, PTX_B64, "d"), p = ptx_reg(f, PTX_B32, "notpred");
    ptx_ins(f, "@$ st.global.b32 [$], $;", p, d, a); /* guard must be a predicate */
    finish_expect(f, "operand -1 is a .b32 register, the instruction takes .pred");
    f = fresh();
    ptx_r r = ptx_reg(f, PTX_B32, "r"), s = ptx_reg(f, PTX_B32, "addr");
    ptx_ins(f, "ld.global.u32 $, [$];", r, s); /* global addresses are 64-bit */
    finish_expect(f, "operand 1 is a .b32 register, the instruction takes .b64");
    f = fresh();
    ptx_r y = ptx_reg(f, PTX_F32, "y"), z = ptx_reg(f, PTX_B32, "z");
    ptx_ins(f, "cvt.rn.f32.u32 $, $;", z, y); /* cvt: destination .f32, source .b32 */
    finish_expect(f, "operand 0 is a .b32 register, the instruction takes .f32");
}

static void test_unknown_opcode(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    ptx_r a = ptx_reg(f, PTX_B32, "a");
    ptx_ins(f, "popc.b32 $, $;", a, a);
    finish_expect(f, "opcode not in the op table: popc.b32");
}

static void test_named_barriers(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    ptx_named_bar(f, 16, 128);
    finish_expect(f, "named barrier id 16 outside 1..15");
    f = fresh();
    ptx_named_bar(f, 4, 256);
    ptx_named_bar(f, 4, 128);
    finish_expect(f, "named barrier 4 used with 256 and 128 threads");
    f = fresh();
    ptx_named_bar(f, 2, 100);
    finish_expect(f, "not a multiple of 32");
}

static void test_mbarriers(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    int m = ptx_mbar_add(f, "k_empty", 8, 8);
    ptx_mbar_inited(f, m);
    ptx_mbar_release(f, m, 4, "one warp too few");
    finish_expect(f, "mbarrier k_empty expects 8 arrivals per phase; the release at one warp too "
                     "few gives 4");
    f = fresh();
    m = ptx_mbar_add(f, "q_full", 0, 1);
    ptx_mbar_waited(f, m);
    finish_expect(f, "mbarrier q_full waited on but never initialized");
    f = fresh();
    ptx_mbar_add(f, "a", 16, 1);
    ptx_mbar_add(f, "b", 16, 1);
    finish_expect(f, "mbarriers a and b share offset 16");
}

static void test_smem_labels_regs(void **state)
{
    (void)state;
    ptx_fn *f = fresh();
    ptx_smem_use(f, 4000, 200);
    finish_expect(f, "shared memory used up to byte 4200 of the 4096 requested");
    f = fresh();
    int l = ptx_label(f, "nowhere");
    ptx_ins(f, "bra.uni %s;", ptx_lab(f, l));
    finish_expect(f, "label $Lnowhere_0 used but never placed");
    f = fresh();
    ptx_regs_split(f, 168, 384, 24, 128, 256, 256);
    finish_expect(f, "setmaxnreg split 24 x 128 + 256 x 256 exceeds the CTA's 168 x 384");
    /* the CTA's pool is the launch allocation: 48 x 128 + 232 x 256 = 65536 fits the register
       file but not 168 x 384 = 64512 (it hung on the H200) */
    f = fresh();
    ptx_regs_split(f, 168, 384, 48, 128, 232, 256);
    finish_expect(f, "setmaxnreg split 48 x 128 + 232 x 256 exceeds the CTA's 168 x 384");
    f = fresh();
    ptx_regs_split(f, 168, 384, 20, 128, 240, 256);
    finish_expect(f, "setmaxnreg 20: not in 24..256");
}

/* The real generator on a plan with four consumers: the barrier table cannot hold it. */
static void test_generator_refuses_bad_plan(void **state)
{
    (void)state;
    fa3_config c, canon;
    fa3_config_init(&c);
    assert_int_equal(fa3_config_canonicalize(&c, &canon), FA3_OK);
    fa3_plan p;
    assert_int_equal(fa3_plan_make(&canon, &p), FA3_OK);
    char *ptx = NULL;
    size_t len = 0;
    assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_OK);
    free(ptx);
    p.num_consumer_wg = 4;
    p.threads = 640;
    p.consumer_regs = 96;
    p.entry_regs = 96;
    p.bar_release_count = 16;
    ptx = NULL;
    assert_int_equal(fa3_codegen_ptx(&p, &ptx, &len), FA3_ERR_INTERNAL);
    assert_null(ptx);
    if (!strstr(fa3_last_error_message(), "named barrier 4 used with"))
        fail_msg("message: %s", fa3_last_error_message());
}

/* Strips register tokens (%name_7, %r7, %s12) so two renderings of one kernel compare equal. */
static void strip_regs(char *t)
{
    char *w = t;
    for (char *r = t; *r;) {
        if (*r == '%' && ((r[1] >= 'a' && r[1] <= 'z') || r[1] == '_')) {
            r++;
            while ((*r >= 'a' && *r <= 'z') || (*r >= '0' && *r <= '9') || *r == '_' || *r == '.')
                r++;
            *w++ = '%';
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
}

/* fa3-gen --emit-ptx --named-registers: the same kernel, registers named (no .reg lines compared) */
static void test_named_rendering(void **state)
{
    (void)state;
    fa3_config c;
    fa3_config_init(&c);
    c.mask = FA3_MASK_CAUSAL;
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(fa3_emit_ptx(&c, &a, &la), FA3_OK);
    assert_int_equal(fa3_tools_emit_ptx_named(&c, &b, &lb), FA3_OK);
    assert_non_null(strstr(b, "%tile_"));
    assert_null(strstr(a, "%tile_"));
    /* drop the declarations, then compare the instructions with register names stripped */
    char *ia = strstr(a, "\tmov.u32"), *ib = strstr(b, "\tmov.u32");
    assert_non_null(ia);
    assert_non_null(ib);
    strip_regs(ia);
    strip_regs(ib);
    assert_string_equal(ia, ib);
    fa3_free(a);
    fa3_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed),      cmocka_unit_test(test_wrong_class),
        cmocka_unit_test(test_unknown_opcode),   cmocka_unit_test(test_named_barriers),
        cmocka_unit_test(test_mbarriers),        cmocka_unit_test(test_smem_labels_regs),
        cmocka_unit_test(test_generator_refuses_bad_plan),
        cmocka_unit_test(test_named_rendering),
    };
    return cmocka_run_group_tests_name("ptx_layer", tests, NULL, NULL);
}
