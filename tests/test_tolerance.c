/*
 * test_tolerance (CPU): the one accuracy rule of fa3-gen check and the GPU tests
 * (tools/common/tolerance.h) on hand-made values, so that its edges hold without a GPU: the bound
 * 2.5·max|O_emul − ref| + 1e-3 (and its V-scaled form), NaN and infinite differences, the worst
 * element's index, the LSE limit, and the report line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "tools/common/tolerance.h"

static void test_bound(void **state)
{
    (void)state;
    tol_acc t = {0};
    assert_true(tol_o_ok(&t) && tol_lse_ok(&t)); /* nothing measured passes */
    tol_add_o(&t, 0, 1.0, 1.0, 1.0);
    tol_add_o(&t, 1, 1.004, 1.0, 1.002); /* |O−ref| 4e-3, the dtype's own 2e-3 */
    tol_add_o(&t, 2, 0.999, 1.0, 1.001);
    assert_true(fabs(t.err_o - 4e-3) < 1e-12 && fabs(t.err_emul - 2e-3) < 1e-12);
    assert_int_equal(t.worst_o, 1);
    assert_true(fabs(tol_o_bound(&t) - 6e-3) < 1e-12);
    assert_true(tol_o_ok(&t));
    tol_add_o(&t, 3, 1.0 + 7e-3, 1.0, 1.0); /* above 2.5·2e-3 + 1e-3 */
    assert_false(tol_o_ok(&t));
    assert_int_equal(t.worst_o, 3);
    /* V of magnitude 1e3: the absolute term scales */
    assert_true(fabs(tol_o_bound_scaled(2e-3, 1e3) - (5e-3 + 1.0)) < 1e-12);
    assert_true(tol_o_bound_scaled(t.err_emul, 1.0) == tol_o_bound(&t));
}

static void test_not_finite(void **state)
{
    (void)state;
    tol_acc t = {0};
    tol_add_o(&t, 0, 1.0, 1.0, NAN); /* an emulation that is NaN is ignored */
    assert_true(t.err_emul == 0.0 && tol_o_ok(&t));
    tol_add_o(&t, 1, INFINITY, 1.0, 1.0); /* an infinite O fails */
    assert_true(isinf(t.err_o) && !tol_o_ok(&t));
    tol_add_o(&t, 2, 0.5, 0.5, 0.5); /* and stays the worst */
    assert_true(isinf(t.err_o) && t.worst_o == 1);
    tol_acc u = {0};
    tol_add_o(&u, 7, INFINITY, INFINITY, INFINITY); /* inf − inf: counts as infinite */
    assert_true(isinf(u.err_o) && !tol_o_ok(&u));
    tol_add_o(&u, 8, 1.0, 1.0, 1.0);
    assert_true(isinf(u.err_o) && u.worst_o == 7);

    tol_acc l = {0};
    tol_add_lse(&l, 0, 2.0, 2.0005);
    assert_true(tol_lse_ok(&l));
    tol_add_lse(&l, 1, 2.0, 2.002);
    assert_false(tol_lse_ok(&l));
    assert_int_equal(l.worst_lse, 1);
    tol_acc m = {0};
    tol_add_lse(&m, 4, -INFINITY, 3.0); /* not finite: infinite error */
    tol_add_lse(&m, 5, NAN, 3.0);
    assert_true(isinf(m.err_lse) && m.worst_lse == 4 && !tol_lse_ok(&m));
}

static void test_format(void **state)
{
    (void)state;
    tol_acc t = {0};
    tol_add_o(&t, 0, 1.5, 1.0, 1.25);
    tol_add_lse(&t, 0, 0.0, 0.25);
    char buf[256];
    assert_string_equal(tol_format(&t, buf, sizeof buf),
                        "max|O-ref| = 0.5, max|emul-ref| = 0.25 (tol 0.626), max|LSE-ref| = 0.25");
    char small[12];
    assert_int_equal(strlen(tol_format(&t, small, sizeof small)), sizeof small - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_not_finite),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
