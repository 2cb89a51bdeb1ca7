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

fa3_fwd_args fake_args(int hd, int batch, int seqlen_q, int seqlen_k, int num_heads,
                       int num_heads_k)
{
    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)FAKE_ADDR(1);
    a.k = (const void *)FAKE_ADDR(2);
    a.v = (const void *)FAKE_ADDR(3);
    a.o = (void *)FAKE_ADDR(4);
    a.lse = (float *)FAKE_ADDR(5);
    a.batch = batch;
    a.seqlen_q = seqlen_q;
    a.seqlen_k = seqlen_k;
    a.num_heads = num_heads;
    a.num_heads_k = num_heads_k;
    fa3_fwd_args_set_contiguous(&a, hd, hd);
    return a;
}

fa3_status fake_validate(const fa3_kernel *k, const fa3_fwd_args *a, uint32_t *tiles)
{
    float scale;
    int wl, wr;
    uint32_t t;
    return fa3_fwd_validate(k, a, &scale, &wl, &wr, tiles ? tiles : &t);
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
