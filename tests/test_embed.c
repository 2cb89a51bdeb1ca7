/*
 * test_embed: the public API an embedding program relies on, through the shared library only.
 *   supported_configs: fa3_supported_configs — the count, (NULL, 0), truncation to max, every
 *                      entry canonical and distinct, the head-dim pairs the generator accepts,
 *                      every dtype (e4m3 with out_dtype bf16, the others their own), no error
 *                      message left behind;
 *   warning_no_home:   no cache folder can be named (no FA3JIT_CACHE_DIR, XDG_CACHE_HOME, HOME):
 *                      the context works from memory and says why in fa3_context_warning;
 *   warning_null:      fa3_context_warning(NULL) is "" (never NULL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3jit.h"

static void test_supported_configs(void **state)
{
    (void)state;
    int n = fa3_supported_configs(NULL, 0);
    assert_true(n >= 2);
    assert_int_equal(fa3_supported_configs(NULL, -5), n);
    fa3_config *all = calloc((size_t)n + 1, sizeof *all);
    assert_non_null(all);
    memset(&all[n], 0x5a, sizeof all[n]); /* sentinel */
    assert_int_equal(fa3_supported_configs(all, n + 1), n);
    fa3_config sentinel;
    memset(&sentinel, 0x5a, sizeof sentinel);
    assert_memory_equal(&all[n], &sentinel, sizeof sentinel); /* nothing written past n */
    assert_string_equal(fa3_last_error_message(), "");

    int pairs[6] = {0}, masks[3] = {0}, dtypes[3] = {0}, softcaps[2] = {0};
    for (int i = 0; i < n; i++) {
        fa3_config c;
        assert_int_equal(fa3_config_canonicalize(&all[i], &c), FA3_OK);
        assert_memory_equal(&c, &all[i], sizeof c); /* already canonical */
        for (int j = 0; j < i; j++)
            if (memcmp(&all[i], &all[j], sizeof c) == 0)
                fail_msg("configs %d and %d are the same", i, j);
        static const int hd[6][2] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256},
                                     {192, 128}};
        int found = 0;
        for (int p = 0; p < 6; p++)
            if (all[i].head_dim == hd[p][0] && all[i].head_dim_v == hd[p][1]) {
                pairs[p]++;
                found = 1;
            }
        assert_true(found);
        assert_in_range(all[i].dtype, FA3_DTYPE_BF16, FA3_DTYPE_E4M3);
        assert_int_equal(all[i].out_dtype,
                         all[i].dtype == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : all[i].dtype);
        masks[all[i].mask]++;
        dtypes[all[i].dtype]++;
        softcaps[all[i].softcap]++;
    }
    for (int d = 0; d < 3; d++)
        assert_true(dtypes[d] > 0); /* bf16, fp16 and e4m3 each */
    /* the first max, in order, when max is smaller */
    fa3_config few[3];
    assert_int_equal(fa3_supported_configs(few, 3), n);
    assert_memory_equal(few, all, sizeof few);
    assert_int_equal(all[0].head_dim, 64);
    char desc[128];
    assert_int_equal(fa3_config_describe(&all[n - 1], desc, sizeof desc), FA3_OK);
    printf("  %d supported configs (hd64/96/128/192/256/192x128: %d %d %d %d %d %d; bf16 %d, "
           "fp16 %d, e4m3 %d; none %d, causal %d, local %d; softcap %d), last: %s\n", n,
           pairs[0], pairs[1], pairs[2], pairs[3], pairs[4], pairs[5], dtypes[0], dtypes[1],
           dtypes[2], masks[0], masks[1], masks[2], softcaps[1], desc);
    free(all);
}

static void test_warning_no_home(void **state)
{
    (void)state;
    unsetenv("FA3JIT_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    unsetenv("FA3JIT_CACHE_DISABLE");
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.backend = FA3_BACKEND_NVJITLINK;
    fa3_context *ctx = NULL;
    assert_int_equal(fa3_context_create(&ctx, &o), FA3_OK);
    assert_null(fa3_context_cache_dir(ctx));
    const char *w = fa3_context_warning(ctx);
    assert_non_null(w);
    assert_non_null(strstr(w, "HOME"));
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = 64;
    fa3_kernel *k = NULL;
    assert_int_equal(fa3_jit_get_kernel(ctx, &cfg, &k), FA3_OK);
    assert_ptr_equal(fa3_context_warning(ctx), w);
    printf("  warning: %s\n", w);
    fa3_context_free(ctx);
}

static void test_warning_null(void **state)
{
    (void)state;
    assert_non_null(fa3_context_warning(NULL));
    assert_string_equal(fa3_context_warning(NULL), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supported_configs),
        cmocka_unit_test(test_warning_no_home),
        cmocka_unit_test(test_warning_null),
    };
    return cmocka_run_group_tests_name("embed", tests, NULL, NULL);
}
