/*
 * fa3-gen bench (GPU): the FlashAttention-3 paper's forward sweep (batch·seqlen = 16384,
 * heads·head_dim = 2048, seqlen 512..16384, head_dim 64/128/256, causal and non-causal), each
 * shape the median of --reps runs timed with CUDA events after --warmup runs, as TFLOP/s of
 * fa3_fwd_flops. Prints a table, or with --json one object a line (bench/compare.py and
 * bench/ab.py read those: keep the keys and their order). e4m3: inputs are the normal values
 * rounded to e4m3, with descale arrays of 1.0 passed as trusted (no read-back in the timing).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa3gen.h"
#include "tools/common/device.h"
#include "tools/common/numerics.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

fa3_status bench_time(const fa3_driver *drv, fa3_kernel *kern, const fa3_fwd_args *a,
                      int warmup, int reps, CUevent *ev, float *ms)
{
    fa3_status st = FA3_OK;
    for (int w = 0; w < warmup && st == FA3_OK; ++w)
        st = fa3_fwd(kern, a, NULL);
    if (st == FA3_OK)
        st = FA3_CU(drv, cuCtxSynchronize());
    if (st == FA3_OK)
        st = FA3_CU(drv, cuEventRecord(ev[0], NULL));
    for (int r = 0; r < reps && st == FA3_OK; ++r) {
        st = fa3_fwd(kern, a, NULL);
        if (st == FA3_OK)
            st = FA3_CU(drv, cuEventRecord(ev[r + 1], NULL));
    }
    if (st == FA3_OK)
        st = FA3_CU(drv, cuEventSynchronize(ev[reps]));
    for (int r = 0; r < reps && st == FA3_OK; ++r)
        st = FA3_CU(drv, cuEventElapsedTime(&ms[r], ev[r], ev[r + 1]));
    return st;
}

double bench_median(float *ms, int reps)
{
    qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
    return reps % 2 ? ms[reps / 2] : 0.5 * ((double)ms[reps / 2 - 1] + (double)ms[reps / 2]);
}

int cmd_bench(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    o.cfg.head_dim = 0; /* 0 = all three */
    int json = 0, reps = 20, warmup = 3, causal_sel = 2 /* 0 no, 1 yes, 2 both */, one_seqlen = 0;
    int bhsd = 0; /* --layout bhsd: each head's rows contiguous, as PyTorch SDPA's inputs */
    int decode = 0; /* --decode: the decode shapes instead (bench_decode.c) */
    cli c = {.argc = argc, .argv = argv, .i = 1};
    while (cli_next(&c)) {
        if (cli_is(&c, "--causal")) {
            cli_noval(&c);
            causal_sel = 1;
            continue;
        }
        if (cli_is(&c, "--local") || cli_is(&c, "--softcap") || cli_is(&c, "--head-dim-v"))
            usage_error("option '%s' is not supported by bench (the paper sweep)", c.name);
        if (parse_common(&c, &o))
            continue;
        if (cli_is(&c, "--json")) {
            cli_noval(&c);
            json = 1;
        } else if (cli_is(&c, "--non-causal")) {
            cli_noval(&c);
            causal_sel = 0;
        } else if (cli_is(&c, "--both")) {
            cli_noval(&c);
            causal_sel = 2;
        } else if (cli_is(&c, "--reps")) {
            reps = cli_int(&c, 1, 100000);
        } else if (cli_is(&c, "--warmup")) {
            warmup = cli_int(&c, 0, 100000);
        } else if (cli_is(&c, "--decode")) {
            cli_noval(&c);
            decode = 1;
        } else if (cli_is(&c, "--seqlen")) {
            one_seqlen = cli_int(&c, 1, 1 << 24);
        } else if (cli_is(&c, "--layout")) {
            const char *l = cli_value(&c);
            if (strcmp(l, "bshd") && strcmp(l, "bhsd"))
                usage_error("--layout '%s': expected bshd or bhsd", l);
            bhsd = !strcmp(l, "bhsd");
        } else if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            print_help(stdout);
            return 0;
        } else {
            unknown_arg(&c);
        }
    }
    if (o.cfg.varlen || o.cfg.paged_kv)
        usage_error("option '%s' is not supported by bench (its shapes are rectangular, with "
                    "contiguous K/V)", o.cfg.varlen ? "--varlen" : "--paged-kv");
    if (decode) {
        if (causal_sel != 2 || json || one_seqlen || bhsd)
            usage_error("--decode runs its own shapes (non-causal, bshd, text): it takes no "
                        "--causal/--non-causal/--both, --json, --seqlen or --layout");
        if (o.cfg.head_dim && o.cfg.head_dim != 64 && o.cfg.head_dim != 128)
            usage_error("--decode's shapes have head_dim 64 and 128: --head-dim %d has none",
                        o.cfg.head_dim);
        return bench_decode(&o, reps, warmup);
    }
    int hds[3] = {64, 128, 256}, nhd = 3;
    if (o.cfg.head_dim) {
        hds[0] = o.cfg.head_dim;
        nhd = 1;
    }
    int seqlens[6] = {512, 1024, 2048, 4096, 8192, 16384}, nsl = 6;
    if (one_seqlen) {
        seqlens[0] = one_seqlen;
        nsl = 1;
    }
    int causals[2] = {0, 1}, ncausal = 2;
    if (causal_sel != 2) {
        causals[0] = causal_sel;
        ncausal = 1;
    }
    /* Validate every configuration before touching the GPU. */
    for (int h = 0; h < nhd; ++h) {
        for (int ci = 0; ci < ncausal; ++ci) {
            fa3_config cfg = o.cfg, canon;
            cfg.head_dim = hds[h];
            cfg.mask = causals[ci] ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
            canonical_or_exit(&cfg, &canon);
            if (2048 % hds[h] != 0)
                usage_error("--head-dim %d does not divide 2048 (num_heads*head_dim = 2048)",
                            hds[h]);
        }
    }

    const fa3_driver *drv = NULL;
    int rc = gpu_open("bench", &drv);
    if (rc)
        return rc;

    /* Largest tensor: batch·seqlen·heads·head_dim = max(16384, seqlen)·2048 elements. */
    size_t max_tokens = 16384;
    for (int s = 0; s < nsl; ++s)
        if ((size_t)seqlens[s] > max_tokens)
            max_tokens = (size_t)seqlens[s];
    const size_t n = max_tokens * 2048;
    dev_buf q = {0}, k = {0}, v = {0}, ob = {0}, ds = {0};
    const int e4m3 = o.cfg.dtype == FA3_DTYPE_E4M3;
    size_t nds = 1; /* e4m3 descales: the largest batch · num_heads */
    for (int s = 0; s < nsl; ++s)
        for (int h = 0; h < nhd; ++h) {
            size_t bh = (size_t)(seqlens[s] >= 16384 ? 1 : 16384 / seqlens[s]) *
                        (size_t)(2048 / hds[h]);
            nds = bh > nds ? bh : nds;
        }
    fa3_context *ctx = NULL;
    CUevent *ev = calloc((size_t)reps + 1, sizeof *ev);
    float *ms = calloc((size_t)reps, sizeof *ms);
    const size_t pool_n = (size_t)1 << 22;
    float *pool = malloc(pool_n * sizeof *pool);
    uint16_t *h16 = malloc(n * sizeof *h16);
    int nev = 0; /* events created */
    fa3_status st = FA3_OK;
    if (!ev || !ms || !pool || !h16) {
        fprintf(stderr, "%s bench: out of host memory\n", prog);
        rc = EXIT_FAIL;
        goto done;
    }
    st = dev_alloc(drv, &q, n * 2);
    if (st == FA3_OK)
        st = dev_alloc(drv, &k, n * 2);
    if (st == FA3_OK)
        st = dev_alloc(drv, &v, n * 2);
    if (st == FA3_OK)
        st = dev_alloc(drv, &ob, n * 2);
    if (st == FA3_OK && e4m3)
        st = dev_alloc(drv, &ds, nds * 4);
    if (st == FA3_OK && e4m3)
        st = dev_fill32(drv, ds.p, nds, 0x3F800000u); /* 1.0f */
    while (st == FA3_OK && nev < reps + 1) {
        st = FA3_CU(drv, cuEventCreate(&ev[nev], CU_EVENT_DEFAULT));
        if (st == FA3_OK)
            ++nev;
    }
    if (st == FA3_OK) {
        /* Random normal inputs: a 4M-value pool, tiled with a different phase per tensor. */
        host_rng rng;
        rng_init(&rng, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
        fill_normal_f32(&rng, pool, pool_n);
        const dev_buf *dst[3] = {&q, &k, &v};
        uint8_t *h8 = (uint8_t *)h16;
        for (int t = 0; t < 3 && st == FA3_OK; ++t) {
            for (size_t i = 0; i < n; ++i) {
                float x = pool[(i + (size_t)t * 1234567u) & (pool_n - 1)];
                if (e4m3)
                    h8[i] = f32_to_e4m3(x);
                else
                    h16[i] = f32_to_dtype(o.cfg.dtype, x);
            }
            st = FA3_CU(drv, cuMemcpyHtoD(dst[t]->p, h16, n * (e4m3 ? 1 : 2)));
        }
    }
    if (st == FA3_OK)
        st = fa3_context_create(&ctx, &o.ctx_opts);
    if (st != FA3_OK) {
        lib_error(st, "bench setup");
        rc = exit_code_for(st) == EXIT_USAGE ? EXIT_USAGE : EXIT_FAIL;
        goto done;
    }

    if (json)
        printf("[\n");
    else
        printf("%-5s %5s %7s %6s %6s %7s %10s %9s\n", "dtype", "hdim", "seqlen", "batch",
               "heads", "causal", "ms", "TFLOP/s");
    fflush(stdout);
    int first_row = 1, failures = 0;
    for (int h = 0; h < nhd; ++h) {
        for (int ci = 0; ci < ncausal; ++ci) {
            fa3_config cfg = o.cfg;
            cfg.head_dim = hds[h];
            cfg.mask = causals[ci] ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
            fa3_kernel *kern = NULL;
            st = fa3_jit_get_kernel(ctx, &cfg, &kern);
            if (st != FA3_OK) {
                char what[64];
                snprintf(what, sizeof what, "hd%d %s: fa3_jit_get_kernel", hds[h],
                         causals[ci] ? "causal" : "non-causal");
                lib_error(st, what);
                failures++;
                continue;
            }
            for (int s = 0; s < nsl; ++s) {
                const int seqlen = seqlens[s];
                fa3_fwd_args a;
                fa3_fwd_args_init(&a);
                a.q = (const void *)(uintptr_t)q.p;
                a.k = (const void *)(uintptr_t)k.p;
                a.v = (const void *)(uintptr_t)v.p;
                a.o = (void *)(uintptr_t)ob.p;
                a.lse = NULL;
                a.batch = seqlen >= 16384 ? 1 : 16384 / seqlen;
                a.seqlen_q = a.seqlen_k = seqlen;
                a.num_heads = a.num_heads_k = 2048 / hds[h];
                fa3_fwd_args_set_contiguous(&a, hds[h], hds[h]);
                if (e4m3) {
                    a.descale_q = a.descale_k = a.descale_v = (const float *)(uintptr_t)ds.p;
                    a.descales_trusted = 1;
                }
                if (bhsd) {
                    const int64_t d = hds[h], sl = seqlen, nh = a.num_heads;
                    a.q_row_stride = a.k_row_stride = a.v_row_stride = a.o_row_stride = d;
                    a.q_head_stride = a.k_head_stride = a.v_head_stride = a.o_head_stride = sl * d;
                    a.q_batch_stride = a.k_batch_stride = a.v_batch_stride = a.o_batch_stride =
                        nh * sl * d;
                }
                char what[96];
                snprintf(what, sizeof what, "hd%d %s seqlen %d: fa3_fwd", hds[h],
                         causals[ci] ? "causal" : "non-causal", seqlen);
                if (st == FA3_OK)
                    st = bench_time(drv, kern, &a, warmup, reps, ev, ms);
                if (st != FA3_OK) {
                    lib_error(st, what);
                    failures++;
                    if (st == FA3_ERR_CUDA) { /* the context may be lost: stop */
                        rc = EXIT_FAIL;
                        goto end_output;
                    }
                    st = FA3_OK;
                    continue;
                }
                double med = bench_median(ms, reps);
                double tflops = fa3_fwd_flops(&cfg, &a) / (med * 1e-3) / 1e12;
                if (json) {
                    printf("%s{\"dtype\": \"%s\", \"head_dim\": %d, \"seqlen\": %d, \"batch\": %d, "
                           "\"num_heads\": %d, \"causal\": %s, \"ms\": %.5f, \"tflops\": %.2f}",
                           first_row ? "" : ",\n", dtype_str(cfg.dtype), hds[h], seqlen, a.batch,
                           a.num_heads, causals[ci] ? "true" : "false", med, tflops);
                } else {
                    printf("%-5s %5d %7d %6d %6d %7s %10.4f %9.1f\n", dtype_str(cfg.dtype),
                           hds[h], seqlen, a.batch, a.num_heads, causals[ci] ? "yes" : "no", med,
                           tflops);
                }
                first_row = 0;
                fflush(stdout);
            }
        }
    }
end_output:
    if (json)
        printf("%s]\n", first_row ? "" : "\n");
    if (failures && !rc)
        rc = EXIT_FAIL;
done:
    for (int i = 0; i < nev; ++i)
        drv->cuEventDestroy(ev[i]);
    dev_free(drv, &q);
    dev_free(drv, &k);
    dev_free(drv, &v);
    dev_free(drv, &ob);
    dev_free(drv, &ds);
    fa3_context_free(ctx);
    free(ev);
    free(ms);
    free(pool);
    free(h16);
    return rc;
}
