/*
 * test_structs: the growth path of the public structs' sizes (src/common.c, "Growing structs" in
 * fa3jit.h) on a made-up struct with one earlier release: a caller of the earlier, smaller size is
 * read with the new fields at their defaults and written only as far as its struct goes; unknown
 * sizes are refused. (The real structs have one release so far: test_config checks them.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common.h"

typedef struct v2 {
    uint32_t struct_size;
    int32_t a;  /* release 1 */
    int32_t b;  /* appended in release 2, default 7 */
} v2;

static const size_t v1_size = offsetof(v2, b);
static const fa3_struct_kind v2_kind = {"v2", "v2_init()", sizeof(v2), &v1_size, 1};
static const v2 v2_defaults = {sizeof(v2), 1, 7};

static void test_growth(void **state)
{
    (void)state;
    /* a release-1 caller: 8 bytes, then whatever follows in its memory */
    unsigned char mem[sizeof(v2)];
    memset(mem, 0xEE, sizeof mem);
    fa3_struct_init(&v2_kind, mem, v1_size, &v2_defaults);
    v2 in;
    assert_int_equal(fa3_struct_in(&v2_kind, mem, &in, &v2_defaults), FA3_OK);
    assert_int_equal(in.struct_size, sizeof(v2));
    assert_int_equal(in.a, 1);
    assert_int_equal(in.b, 7); /* not read from the caller: the default */
    for (size_t i = v1_size; i < sizeof mem; i++)
        assert_int_equal(mem[i], 0xEE); /* init wrote only the caller's bytes */
    v2 full = {sizeof(v2), 5, 9};
    assert_int_equal(fa3_struct_out(&v2_kind, mem, v1_size, &full), FA3_OK);
    uint32_t size;
    memcpy(&size, mem, sizeof size);
    assert_int_equal(size, v1_size);
    int32_t a;
    memcpy(&a, mem + offsetof(v2, a), sizeof a);
    assert_int_equal(a, 5);
    for (size_t i = v1_size; i < sizeof mem; i++)
        assert_int_equal(mem[i], 0xEE); /* out wrote only the caller's bytes */

    /* unknown sizes */
    assert_int_equal(fa3_struct_check(&v2_kind, 0), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "not initialised (use v2_init())"));
    assert_int_equal(fa3_struct_check(&v2_kind, sizeof(v2) + 4), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "newer fa3jit.h"));
    assert_int_equal(fa3_struct_check(&v2_kind, 6), FA3_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fa3_last_error_message(), "not a size of v2"));
    v2 untouched = {0, 3, 3};
    assert_int_equal(fa3_struct_in(&v2_kind, &untouched, &in, &v2_defaults),
                     FA3_ERR_INVALID_ARGUMENT);
    assert_int_equal(in.a, 1); /* dst left as it was */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_growth)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
