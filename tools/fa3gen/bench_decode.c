/*
 * fa3-gen bench --decode (GPU): the decode shapes of issue 16 (seqlen_q 1-4, long K/V, GQA;
 * bf16 or fp16, one row each), timed as bench times the sweep (the median of --reps back-to-back
 * fa3_fwd calls between CUDA events, after --warmup) and reported as GB/s of K and V read once
 * (2 · batch · seqlen_k · num_heads_k · head_dim · 2 bytes over the time), the number the peers'
 * decode.py prints for cuDNN and FA4. The config flags apply (--block-m 64, --split-kv: the
 * library's num_splits with a workspace of the test's own, allocated once); --head-dim picks the
 * shapes of that head_dim. Inputs are constants (the time does not depend on the values; K/V of
 * up to 4 GiB are filled on the device).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fa3gen.h"
#include "tools/common/device.h"
#include "tools/common/numerics.h"

/* (batch, seqlen_q, num_heads, num_heads_k, seqlen_k, head_dim) */
static const int shapes[][6] = {
    {32, 1, 32, 8, 32768, 128}, {128, 1, 32, 8, 4096, 128}, {8, 4, 32, 8, 65536, 128},
    {1, 1, 64, 8, 131072, 128}, {64, 1, 16, 16, 8192, 64},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

int bench_decode(const common_opts *o, int reps, int warmup)
{
    if (o->cfg.dtype != FA3_DTYPE_BF16 && o->cfg.dtype != FA3_DTYPE_FP16)
        usage_error("bench --decode: --dtype bf16 or fp16");
    for (size_t s = 0; s < NSHAPES; s++) { /* every config before touching the GPU */
        fa3_config cfg = o->cfg, canon;
        cfg.head_dim = shapes[s][5];
        if (!o->cfg.head_dim || o->cfg.head_dim == cfg.head_dim)
            canonical_or_exit(&cfg, &canon);
    }
    const fa3_driver *drv = NULL;
    int rc = gpu_open("bench", &drv);
    if (rc)
        return rc;
    fa3_context *ctx = NULL;
    CUevent *ev = calloc((size_t)reps + 1, sizeof *ev);
    float *ms = calloc((size_t)reps, sizeof *ms);
    int nev = 0, failures = 0;
    fa3_status st = ev && ms ? FA3_OK : FA3_ERR_OUT_OF_MEMORY;
    while (st == FA3_OK && nev < reps + 1) {
        st = FA3_CU(drv, cuEventCreate(&ev[nev], CU_EVENT_DEFAULT));
        if (st == FA3_OK)
            ++nev;
    }
    if (st == FA3_OK)
        st = fa3_context_create(&ctx, &o->ctx_opts);
    if (st != FA3_OK) {
        lib_error(st, "bench --decode setup");
        rc = EXIT_FAIL;
        goto done;
    }
    printf("%-44s %10s %9s  %s\n", "shape (batch sq heads/heads_k sk hd)", "us", "GB/s",
           "kernel");
    for (size_t s = 0; s < NSHAPES; s++) {
        const int B = shapes[s][0], sq = shapes[s][1], H = shapes[s][2], HK = shapes[s][3];
        const int sk = shapes[s][4], hd = shapes[s][5];
        if (o->cfg.head_dim && o->cfg.head_dim != hd)
            continue;
        fa3_config cfg = o->cfg;
        cfg.head_dim = hd;
        fa3_kernel *kern = NULL;
        dev_buf q = {0}, k = {0}, v = {0}, ob = {0}, ws = {0};
        const size_t nq = (size_t)B * sq * H * hd, nkv = (size_t)B * sk * HK * hd;
        st = fa3_jit_get_kernel(ctx, &cfg, &kern);
        if (st == FA3_OK)
            st = dev_alloc(drv, &q, nq * 2);
        if (st == FA3_OK)
            st = dev_alloc(drv, &k, nkv * 2);
        if (st == FA3_OK)
            st = dev_alloc(drv, &v, nkv * 2);
        if (st == FA3_OK)
            st = dev_alloc(drv, &ob, nq * 2);
        /* constants: q·k the same for every key (a uniform softmax), v finite */
        if (st == FA3_OK)
            st = dev_fill16(drv, q.p, nq, f32_to_dtype(cfg.dtype, 0.125f));
        if (st == FA3_OK)
            st = dev_fill16(drv, k.p, nkv, f32_to_dtype(cfg.dtype, 0.25f));
        if (st == FA3_OK)
            st = dev_fill16(drv, v.p, nkv, f32_to_dtype(cfg.dtype, 0.5f));
        fa3_fwd_args a;
        fa3_fwd_args_init(&a);
        a.q = (const void *)(uintptr_t)q.p;
        a.k = (const void *)(uintptr_t)k.p;
        a.v = (const void *)(uintptr_t)v.p;
        a.o = (void *)(uintptr_t)ob.p;
        a.batch = B;
        a.seqlen_q = sq;
        a.seqlen_k = sk;
        a.num_heads = H;
        a.num_heads_k = HK;
        fa3_fwd_args_set_contiguous(&a, hd, hd);
        size_t wbytes = 0;
        if (st == FA3_OK && cfg.split_kv)
            st = fa3_fwd_workspace_size(kern, &a, &wbytes);
        if (st == FA3_OK && wbytes) {
            st = dev_alloc(drv, &ws, wbytes);
            a.workspace = (void *)(uintptr_t)ws.p;
            a.workspace_bytes = wbytes;
        }
        if (st == FA3_OK)
            st = bench_time(drv, kern, &a, warmup, reps, ev, ms);
        char shape[64], desc[96] = "";
        snprintf(shape, sizeof shape, "b%d sq%d h%d/%d sk%d d%d", B, sq, H, HK, sk, hd);
        if (kern) {
            fa3_kernel_info info;
            if (fa3_kernel_get_info(kern, &info) == FA3_OK)
                fa3_config_describe(&info.config, desc, sizeof desc);
        }
        if (st == FA3_OK) {
            const double med = bench_median(ms, reps);
            const double bytes = 2.0 * (double)nkv * 2.0;
            printf("%-44s %10.1f %9.0f  %s\n", shape, med * 1e3, bytes / (med * 1e-3) / 1e9,
                   desc);
        } else {
            lib_error(st, shape);
            failures++;
        }
        fflush(stdout);
        dev_free(drv, &q);
        dev_free(drv, &k);
        dev_free(drv, &v);
        dev_free(drv, &ob);
        dev_free(drv, &ws);
        if (st == FA3_ERR_CUDA) { /* the context may be lost: stop */
            rc = EXIT_FAIL;
            break;
        }
        st = FA3_OK;
    }
    if (failures && !rc)
        rc = EXIT_FAIL;
done:
    for (int i = 0; i < nev; ++i)
        drv->cuEventDestroy(ev[i]);
    fa3_context_free(ctx);
    free(ev);
    free(ms);
    return rc;
}
