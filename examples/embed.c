/* embed.c — fa3jit in a C program: context, config, kernel (memory → disk cache → compile) and its
 * info; on a machine with a GPU, one small causal forward pass on random data checked against the
 * library's fp32 reference. Build against an installed fa3jit:
 *   cc embed.c $(pkg-config --cflags --libs fa3jit) -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lm */
#include <cuda_runtime_api.h>
#include <fa3jit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, S = 256, H = 2, D = 64, N = B * S * H * D }; /* q = k = v: (B, S, H, D) bf16 */
static const char *const how[] = {"compiled", "from the disk cache", "from memory"};
static int fail(void) { return fprintf(stderr, "fa3jit: %s\n", fa3_last_error_message()), 1; }
static uint16_t bf16(float x) { uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); }
static float f32(uint16_t h) { uint32_t u = h * 65536u; float x; memcpy(&x, &u, 4); return x; }

int main(void)
{
    fa3_context *ctx; fa3_config cfg; fa3_kernel *k; fa3_kernel_info in; char desc[96];
    fa3_config_init(&cfg); cfg.head_dim = D; cfg.mask = FA3_MASK_CAUSAL;
    if (fa3_context_create(&ctx, NULL) || fa3_jit_get_kernel(ctx, &cfg, &k) ||
        fa3_kernel_get_info(k, &in) || fa3_config_describe(&in.config, desc, sizeof desc))
        return fail();
    printf("kernel %s (%s, %s): key %s, %d registers, %zu-byte cubin\n", desc, how[in.source],
           fa3_backend_name(in.backend), in.cache_key, in.num_regs, in.cubin_size);
    if (*fa3_context_warning(ctx)) printf("cache warning: %s\n", fa3_context_warning(ctx));
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        return puts("no GPU: skipping the forward pass"), fa3_context_free(ctx), 0;
    uint16_t *h = malloc(N * 2); float *ref = malloc(N * 4), err = 0; void *dq, *dout, *dref;
    for (int i = 0; i < N; i++) h[i] = bf16(rand() / (float)RAND_MAX - 0.5f);
    cudaMalloc(&dq, N * 2); cudaMalloc(&dout, N * 2); cudaMalloc(&dref, N * 4);
    cudaMemcpy(dq, h, N * 2, cudaMemcpyHostToDevice);
    fa3_fwd_args a; fa3_fwd_args_init(&a);
    a.q = a.k = a.v = dq; a.o = dout; a.batch = B; a.seqlen_q = a.seqlen_k = S;
    a.num_heads = a.num_heads_k = H; fa3_fwd_args_set_contiguous(&a, D, D);
    if (fa3_fwd(k, &a, NULL) || fa3_reference_fwd(ctx, &cfg, &a, dref, NULL, NULL)) return fail();
    cudaMemcpy(h, dout, N * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(ref, dref, N * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < N; i++) err = fmaxf(err, fabsf(f32(h[i]) - ref[i]));
    printf("forward pass (batch %d, seqlen %d, %d heads, hd %d): max |O - O_ref| = %.3g\n", B, S,
           H, D, err);
    cudaFree(dq); cudaFree(dout); cudaFree(dref); free(h); free(ref); fa3_context_free(ctx);
    return err < 2e-2f ? 0 : 1;
}
