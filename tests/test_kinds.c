/*
 * test_kinds: the kernel kinds and operations agree with the generator, without a GPU. For every
 * supported config, each kernel of its operation (runtime/op.c) has an emitter whose PTX declares
 * the kind's entry name, a `.param .align 64` block of the kind's parameter size and the CTA size
 * of the kind's launch shape; the forward operation needs no workspace; the split_kv variant of
 * each runs forward_split (forward, combine) with the partials' workspace; the combine kernel's
 * cache config keeps only head_dim_v, out_dtype and varlen; values that are not kinds have no
 * record and no emitter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/generate.h"
#include "runtime/op.h"
#include "check.h"

static void check_kernel(const fa3_config *cfg, const fa3_plan *plan, fa3_kernel_kind kind)
{
    const fa3_kind *k = fa3_kind_get(kind);
    assert_non_null(k);
    int threads = 0, smem = 0;
    fa3_kind_shape(kind, plan, &threads, &smem);
    assert_true(threads > 0 && threads % 128 == 0);
    assert_true(kind == FA3_KERNEL_COMBINE ? smem == 0 : smem > 0);
    assert_true(k->params_size > 0 && k->params_size <= sizeof(fa3_kernel_param_block));
    char *ptx = NULL;
    size_t len = 0;
    CHECK(fa3_codegen_kernel(kind, plan, &ptx, &len));
    char want[256];
    /* the forward kernel declares the block up to tmap_o (dense), up to batch (varlen or
       paged KV), up to div (split-KV), or whole (fast_div 2: the launch's divisors) */
    const size_t declared = kind != FA3_KERNEL_FWD   ? k->params_size
                            : plan->fast_div >= 2     ? k->params_size
                            : cfg->split_kv           ? FA3P_SIZE_SPLIT
                            : cfg->varlen || cfg->paged_kv ? FA3P_SIZE_VARLEN
                                                           : FA3P_SIZE_DENSE;
    snprintf(want, sizeof want, ".visible .entry %s(\n\t.param .align 64 .b8 fa3_params[%zu]\n)",
             k->entry, declared);
    char desc[64];
    CHECK(fa3_config_describe(cfg, desc, sizeof desc));
    if (!strstr(ptx, want))
        fail_msg("%s, kind %d: the PTX has no \"%s\"", desc, (int)kind, want);
    snprintf(want, sizeof want, ".maxntid %d, 1, 1\n", threads);
    if (!strstr(ptx, want))
        fail_msg("%s, kind %d: the PTX has no \"%s\"", desc, (int)kind, want);
    free(ptx);
}

static void test_operations(void **state)
{
    (void)state;
    int n = fa3_supported_configs(NULL, 0);
    fa3_config *cfgs = calloc((size_t)n, sizeof *cfgs);
    assert_non_null(cfgs);
    assert_int_equal(fa3_supported_configs(cfgs, n), n);
    int kernels = 0;
    for (int i = 0; i < n; i++) {
        const fa3_op *op = fa3_op_for_config(&cfgs[i]);
        assert_non_null(op);
        assert_true(op->num_kernels >= 1 && op->num_kernels <= FA3_OP_MAX_KERNELS);
        fa3_plan plan;
        CHECK(fa3_plan_make(&cfgs[i], &plan));
        const fa3_op_shape shape = {2, 1024, 1024, 16, 16, 1};
        if (!cfgs[i].split_kv) {
            assert_int_equal(fa3_op_workspace_bytes(op, &plan, &shape), 0); /* forward: none */
            assert_string_equal(op->name, "forward");
        }
        for (int j = 0; j < op->num_kernels; j++, kernels++)
            check_kernel(&cfgs[i], &plan, op->kinds[j]);
        /* split-KV: forward then combine, with the partials' workspace */
        fa3_config sc = cfgs[i];
        sc.split_kv = 1;
        CHECK(fa3_config_canonicalize(&sc, &sc));
        const fa3_op *sop = fa3_op_for_config(&sc);
        assert_string_equal(sop->name, "forward_split");
        assert_int_equal(sop->num_kernels, 2);
        assert_int_equal(sop->kinds[0], FA3_KERNEL_FWD);
        assert_int_equal(sop->kinds[1], FA3_KERNEL_COMBINE);
        fa3_plan splan;
        CHECK(fa3_plan_make(&sc, &splan));
        const fa3_op_shape s7 = {2, 3, 1024, 5, 5, 7};
        const size_t rows = sc.varlen ? 5 * 3 : 2 * 5 * 3;
        const size_t o = (7 * rows * (size_t)sc.head_dim_v * 4 + 255) / 256 * 256;
        assert_int_equal(fa3_op_workspace_bytes(sop, &splan, &s7), o + (7 * rows * 4 + 255) / 256 * 256);
        check_kernel(&sc, &splan, FA3_KERNEL_COMBINE);
        kernels++;
    }
    printf("  %d configs, %d kernels: entry, parameter block and CTA size as op.c says\n", n,
           kernels);
    free(cfgs);
}

/* Combine kernels are shared across configs: the key config and the PTX depend on head_dim_v,
   out_dtype and varlen only. */
static void test_combine_key(void **state)
{
    (void)state;
    fa3_config a, b;
    fa3_config_init(&a);
    a.head_dim = 192;
    a.head_dim_v = 128;
    a.dtype = FA3_DTYPE_E4M3;
    a.mask = FA3_MASK_CAUSAL;
    a.softcap = 1;
    a.split_kv = 1;
    CHECK(fa3_config_canonicalize(&a, &a));
    fa3_config_init(&b);
    b.split_kv = 1;
    b.paged_kv = 1;
    CHECK(fa3_config_canonicalize(&b, &b));
    fa3_config ka, kb;
    fa3_kind_key_config(FA3_KERNEL_COMBINE, &a, &ka);
    fa3_kind_key_config(FA3_KERNEL_COMBINE, &b, &kb);
    assert_true(fa3_config_equal(&ka, &kb));
    assert_int_equal(ka.head_dim_v, 128);
    assert_int_equal(ka.out_dtype, FA3_DTYPE_BF16);
    fa3_config kf;
    fa3_kind_key_config(FA3_KERNEL_FWD, &a, &kf);
    assert_true(fa3_config_equal(&kf, &a));
    fa3_plan pa, pb;
    CHECK(fa3_plan_make(&a, &pa));
    CHECK(fa3_plan_make(&b, &pb));
    char *xa = NULL, *xb = NULL;
    CHECK(fa3_codegen_kernel(FA3_KERNEL_COMBINE, &pa, &xa, NULL));
    CHECK(fa3_codegen_kernel(FA3_KERNEL_COMBINE, &pb, &xb, NULL));
    assert_string_equal(xa, xb);
    free(xb);
    b.varlen = 1; /* varlen: another kernel */
    fa3_kind_key_config(FA3_KERNEL_COMBINE, &b, &kb);
    assert_false(fa3_config_equal(&ka, &kb));
    CHECK(fa3_plan_make(&b, &pb));
    CHECK(fa3_codegen_kernel(FA3_KERNEL_COMBINE, &pb, &xb, NULL));
    assert_true(strcmp(xa, xb) != 0);
    free(xa);
    free(xb);
}

static void test_not_kinds(void **state)
{
    (void)state;
    assert_null(fa3_kind_get(FA3_KERNEL_NUM_KINDS));
    assert_null(fa3_kind_get((fa3_kernel_kind)-1));
    fa3_config c;
    fa3_config_init(&c);
    CHECK(fa3_config_canonicalize(&c, &c));
    fa3_plan plan;
    CHECK(fa3_plan_make(&c, &plan));
    char *ptx = NULL;
    assert_int_equal(fa3_codegen_kernel(FA3_KERNEL_NUM_KINDS, &plan, &ptx, NULL),
                     FA3_ERR_INTERNAL);
    assert_null(ptx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operations),
        cmocka_unit_test(test_combine_key),
        cmocka_unit_test(test_not_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
