/*
 * fake_kernel.h: kernels without code for the host-side argument tests, and the check that an
 * error's message names what it should.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_kernel.h"

fa3_kernel *fake_kernel_of(const fa3_config *cfg)
{
    fa3_kernel *k = calloc(1, sizeof *k);
    assert_non_null(k);
    assert_int_equal(fa3_config_canonicalize(cfg, &k->cfg), FA3_OK);
    assert_int_equal(fa3_plan_make(&k->cfg, &k->plan), FA3_OK);
    k->op = fa3_op_for_config(&k->cfg);
    assert_non_null(k->op);
    k->num_parts = 0;
    pthread_mutex_init(&k->mu, NULL);
    return k;
}

void fake_free(fa3_kernel *k)
{
    pthread_mutex_destroy(&k->mu);
    free(k);
}

void expect(fa3_status st, fa3_status want, ...)
{
    const char *msg = fa3_last_error_message();
    printf("  %s: %s\n", fa3_strerror(st), msg);
    if (st != want)
        fail_msg("returned %s, expected %s (%s)", fa3_strerror(st), fa3_strerror(want), msg);
    va_list ap;
    va_start(ap, want);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(msg, w))
            fail_msg("message \"%s\" does not name \"%s\"", msg, w);
    va_end(ap);
}
