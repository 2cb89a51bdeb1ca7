/*
 * test_kinds: the kernel kinds and operations agree with the generator, without a GPU. For every
 * supported config, each kernel of its operation (runtime/op.c) has an emitter whose PTX declares
 * the kind's entry name, a `.param .align 64` block of the kind's parameter size and the CTA size
 * of the kind's launch shape; the forward operation needs no workspace; values that are not kinds
 * have no record and no emitter.
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
    assert_true(smem > 0);
    assert_true(k->params_size > 0 && k->params_size <= sizeof(fa3_kernel_param_block));
    char *ptx = NULL;
    size_t len = 0;
    CHECK(fa3_codegen_kernel(kind, plan, &ptx, &len));
    char want[256];
    /* the forward kernel of a config without varlen and paged KV declares the block up to
       tmap_o */
    const size_t declared = kind == FA3_KERNEL_FWD && !cfg->varlen && !cfg->paged_kv
                                ? FA3P_SIZE_DENSE
                                                                    : k->params_size;
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
        const fa3_op_shape shape = {2, 1024, 1024, 16, 16};
        assert_int_equal(fa3_op_workspace_bytes(op, &plan, &shape), 0); /* forward: none */
        for (int j = 0; j < op->num_kernels; j++, kernels++)
            check_kernel(&cfgs[i], &plan, op->kinds[j]);
    }
    printf("  %d configs, %d kernels: entry, parameter block and CTA size as op.c says\n", n,
           kernels);
    free(cfgs);
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
        cmocka_unit_test(test_not_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
