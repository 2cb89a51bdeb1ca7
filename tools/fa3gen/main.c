/*
 * fa3-gen — command-line front end of fa3jit.
 *
 *   fa3-gen --emit-ptx | --emit-cubin FILE | --info   [config flags] [cache flags]
 *   fa3-gen check [--all | config flags] [--varlen] [--paged P] [--seed N] [--quick] ... (GPU)
 *   fa3-gen bench [--json] [--dtype D] [--head-dim N] [--causal|--non-causal|--both] ... (GPU)
 *   fa3-gen cache ls | clear | warm [--all | config flags] [--jobs N] [--dry-run]
 *
 * Exit status: 0 success; 1 a check failed or an operation failed (writing stdout included); 2 no
 * usable GPU / driver / NVRTC for a GPU subcommand; 64 bad command line or an unsupported
 * configuration value.
 *
 * This file: the dispatch to the subcommands (one file each, fa3gen.h lists them), --help and
 * --version, and the last check that everything reached stdout. Uses the library through
 * include/fa3jit.h, plus what src/runtime/tools_api.h lists (the driver table for device memory,
 * events and synchronisation; the cache listing; the environment's warnings; the compile log's
 * diagnostic lines), which libfa3jit.so exports for its own tools.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fa3gen.h"

void print_help(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  %s --emit-ptx | --emit-cubin FILE | --info  [CONFIG] [COMPILE]\n"
"  %s check [--all | CONFIG] [--varlen] [--paged P] [--pack-gqa] [--seed N] [--quick] [--list]\n"
"          [CHECK OPTIONS] [COMPILE]\n"
"  %s bench [--json] [--dtype D] [--head-dim N] [--causal|--non-causal|--both]\n"
"          [--reps N] [--warmup N] [--seqlen N | --decode] [CONFIG] [COMPILE]\n"
"  fa3-gen cache ls | clear | warm [--all | CONFIG] [--jobs N]   (fa3-gen cache --help)\n"
"  %s --version | --help\n"
"\n"
"Generates FlashAttention-3 forward kernels for Hopper (sm_90a) as PTX, compiles them to\n"
"cubins, and (check, bench) runs them on the GPU.\n"
"\n"
"Actions (no GPU needed; may be combined, run in this order):\n"
"  --emit-ptx           print the generated PTX to stdout\n"
"  --named-registers    with --emit-ptx: registers by name (%%tile_7), for reading\n"
"  --emit-cubin FILE    compile and write the cubin to FILE ('-' = stdout)\n"
"  --info               compile (or load from the cache) and describe the kernel: config,\n"
"                       backend, registers, spills, stack, shared memory, threads, tile plan,\n"
"                       cache key, source, compile time, compiler warnings\n"
"\n"
"CONFIG (kernel configuration; defaults: head_dim 128, bf16, no mask, no softcap):\n"
"  --head-dim N         Q/K head dimension (64, 96, 128, 192, 256)\n"
"  --head-dim-v N       V/O head dimension (default: the same as head_dim; the one other\n"
"                       value supported is 128 with --head-dim 192)\n"
"  --dtype D            bf16 | fp16 | e4m3 (FP8 Q/K/V with fp32 descales; O in --out-dtype)\n"
"  --out-dtype D        dtype of O: auto (default: the dtype; bf16 for e4m3) | bf16 | fp16\n"
"                       (fp16 with e4m3; bf16/fp16 kernels write their own dtype)\n"
"  --causal             causal mask (bottom-right aligned)\n"
"  --local              sliding-window mask\n"
"  --softcap            scores pass through softcap*tanh(s/softcap)\n"
"  --varlen             (with --emit-ptx, --info) a varlen config: Q/K/V packed\n"
"                       by cu_seqlens_q/k; with check, the varlen cases (below)\n"
"  --paged-kv           (with --emit-ptx, --info) K/V in a paged cache (page_table)\n"
"  --split-kv           split-KV: each tile's keys in num_splits chunks (fp32 partials,\n"
"                       then a combine)\n"
"  --pack-gqa           packed GQA: a tile holds all query heads of one kv head (needs\n"
"                       num_heads/num_heads_k to divide block_m; rectangular Q); with\n"
"                       check, the packed decode cases\n"
"  --block-m N          query rows per tile: 64 = one consumer warpgroup, the decode tile;\n"
"                       128 = two (head_dim 64's short causal tile; default: the planner's\n"
"                       choice, 128 or 192)\n"
"  --block-n N          keys per tile (default: the planner's choice)\n"
"  --stages N           K/V pipeline depth (default: the planner's choice)\n"
"\n"
"COMPILE:\n"
"  --backend B          auto | ptx-compiler | nvjitlink | driver-jit\n"
"  --cache-dir DIR      disk cache folder (default $FA3JIT_CACHE_DIR, $XDG_CACHE_HOME/fa3jit,\n"
"                       ~/.cache/fa3jit)\n"
"  --no-cache           memory cache only\n"
"\n"
"check (GPU): compares fa3_fwd with an fp32 reference (NVRTC) on random normal inputs.\n"
"  Default set: head_dim 64/128/256 x bf16/fp16/e4m3 (those this build supports) x\n"
"  non-causal/causal, batch 2, 3 heads,\n"
"  seqlen pairs (q,k) including (1,1), (63,63), (128,128), (1000,1000), (4096,4096),\n"
"  (63,1000), (1000,63), (128,4096), (4096,1000), (1,4096), (4096,1).\n"
"  Any CONFIG flag checks that single configuration instead.\n"
"  Pass: every expected element written (O pre-filled with 0xFFFF NaNs, LSE with NaN), nothing\n"
"  written past O/LSE, max|O-O_ref| <= 2*max|O_emul-O_ref| + 1e-3 (O_emul: reference rounding P\n"
"  and O to the dtype; e4m3: 2^8*P to e4m3, O to out_dtype), |LSE-LSE_ref| <= 1e-3\n"
"  (-inf = -inf; e4m3: 1e-2, the FP8 MMA's accumulation). e4m3 inputs: the normal values\n"
"  quantized on the host with one descale per (batch, kv head), amax/448 (fa3_quantize_fp8's\n"
"  rule), given to kernel and reference alike.\n"
"  --all                every head dim this build supports (64, 96, 128, 192, 256, 192/128\n"
"                       tried) x bf16/fp16/e4m3 (as supported; e4m3 also with out_dtype fp16\n"
"                       at H/H) x mask none, causal, local (64,32), (-1,0), (0,-1)\n"
"                       x softcap 0/30 x heads H/H (H = --heads, default 3), 6/3 (GQA 2),\n"
"                       16/2 (GQA 8), 8/1 (MQA), batch 2 (--batch), at the\n"
"                       tile-boundary seqlen pairs (q,k) (1,1), (1,1000), (64,64), (65,129),\n"
"                       (127,255), (128,128), (129,65), (255,1000), (257,127), (1000,257);\n"
"                       then every varlen config (GQA 6/3 and 8/1) with the varlen cases\n"
"                       with-empty, long+tiny, seqused\n"
"  --varlen             packed variable-length batches (cu_seqlens) instead of the dense\n"
"                       cases: the configs (default set, --all's varlen part or CONFIG) as\n"
"                       varlen configs, each with the cases random (12 sequences up to\n"
"                       300/300 rows), long+tiny (one of 1500 among 39 of 0..3), with-empty\n"
"                       (every 3rd q and 4th k segment empty), short-k (keys 0..45 against\n"
"                       ~700 queries), seqused (seqused_k below the stored keys); 29 rows\n"
"                       of Q/O past cu_seqlens_q[batch] must stay untouched\n"
"  --paged P            K/V in pages of P rows (1..256) through shuffled page tables with\n"
"                       pages shared between sequences (unused entries -1 in some): varlen Q\n"
"                       (the cases above) and, without --varlen, rectangular Q first\n"
"                       (equal, decode: one query per sequence, some with 0 keys, seqused)\n"
"  Varlen/paged cases: O/LSE NaN-prefilled; the reference against an fp64 host (sampled rows,\n"
"  2e-4) and bitwise against its dense path per sequence; the kernel against the reference\n"
"  (the rule above; rows that see no key O = 0, LSE = -inf) and against the dense kernel per\n"
"  sequence on the same keys; e4m3: values rounded to e4m3 with random descales 0.5..2 per\n"
"  (sequence, kv head). --batch and --seqlen-q/-k (up to 4096 and 65536 with varlen cases)\n"
"  replace each case's batch and longest lengths.\n"
"  --pack-gqa           packed GQA (decode shapes): the configs (CONFIG, else hd 64/128/256 x\n"
"                       each dtype x none/causal, split_kv 0 and 1 with the library's\n"
"                       num_splits) with pack_gqa 1, heads 32/8 (GQA 4) and 16/2 (GQA 8),\n"
"                       at the seqlen pairs (1,1), (1,1000), (3,77), (8,4096), (16,16),\n"
"                       (16,1000) (or --seqlen-q/-k)\n"
"  --list               print the cases and exit (no GPU)\n"
"  --select GLOB        only the configs whose label (as --list prints it, e.g. 'hd128 e4m3\n"
"                       causal h3/3') matches the fnmatch pattern; repeated (up to 16): any\n"
"                       of them, each matching some config (e.g. --all --select '* e4m3*\n"
"                       causal *')\n"
"  --shard I/N          only the I-th of N contiguous parts of the configs (after --select;\n"
"                       1 <= I <= N <= 1024 and N at most the config count), cut so that the\n"
"                       parts hold about as many cases each, each at least one config; the N\n"
"                       parts together are the whole set (--all in two calls: 1/2, 2/2)\n"
"  --quick              skip the seqlen pairs with 4096 (default set) and the long+tiny\n"
"                       varlen cases\n"
"  --seed N             random seed (default: from time and pid; printed)\n"
"  --batch N            batch size (default 2)\n"
"  --heads N            query heads (default 3)\n"
"  --heads-k N          K/V heads (default: --heads)\n"
"  --seqlen-q N, --seqlen-k N   one seqlen pair instead of the list (the other defaults to it)\n"
"  --window-left N, --window-right N   local window (default 64 and 32; -1 = unlimited)\n"
"  --softcap-value X    softcap value with --softcap (default 30)\n"
"  --descales M         e4m3 inputs: amax (default: per-(batch, kv head) descales) | none\n"
"                       (unscaled e4m3 values, NULL descales = 1)\n"
"  Prints one line per case and the summary 'N passed, M failed'.\n"
"\n"
"bench (GPU): FlashAttention-3 paper sweep, batch*seqlen = 16384, heads*head_dim = 2048,\n"
"  seqlen 512..16384, head_dim 64/128/256, causal and non-causal; median of --reps timed\n"
"  runs (CUDA events) after --warmup runs; TFLOP/s = fa3_fwd_flops / time.\n"
"  --json               print a JSON array, one object per line: dtype, head_dim, seqlen,\n"
"                       batch, num_heads, causal, ms, tflops\n"
"  --dtype D            bf16 (default) | fp16 | e4m3 (descales 1.0, trusted)\n"
"  --head-dim N         only this head_dim\n"
"  --causal | --non-causal | --both   mask selection (default --both)\n"
"  --seqlen N           only this seqlen (batch = max(1, 16384/N))\n"
"  --layout L           bshd (default: (batch, seqlen, heads, head_dim) contiguous, as\n"
"                       FlashAttention) or bhsd (each head's rows contiguous, as SDPA)\n"
"  --reps N             timed runs (default 20)     --warmup N   untimed runs (default 3)\n"
"  --block-n N, --stages N   tile overrides\n"
"  --decode             the decode shapes instead (batch seqlen_q heads/heads_k seqlen_k hd:\n"
"                       32 1 32/8 32768 128, 128 1 32/8 4096 128, 8 4 32/8 65536 128,\n"
"                       1 1 64/8 131072 128, 64 1 16/16 8192 64; bf16/fp16), as GB/s of K+V\n"
"                       read once; CONFIG flags apply (e.g. --block-m 64 --split-kv)\n"
"\n"
"Exit status: 0 ok; 1 a check or an operation failed; 2 no usable GPU, CUDA driver or NVRTC;\n"
"64 bad command line or unsupported configuration value.\n",
            prog, prog, prog, prog);
}

int print_version(void)
{
    printf("fa3-gen %s (libfa3jit %s, API %d)\n", FA3JIT_VERSION_STRING, fa3_version_string(),
           (int)fa3_version_number());
    static const fa3_backend all[] = {FA3_BACKEND_PTX_COMPILER, FA3_BACKEND_NVJITLINK,
                                      FA3_BACKEND_DRIVER_JIT};
    printf("backends:");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.disable_disk_cache = 1;
        o.backend = all[i];
        fa3_context *ctx = NULL;
        fa3_status st = fa3_context_create(&ctx, &o);
        /* nvJitLink is built in always but loaded at run time: name a failed load apart. */
        printf(" %s%s", fa3_backend_name(all[i]),
               st == FA3_OK ? "" : st == FA3_ERR_BAD_BACKEND ? " (not built)" : " (not loadable)");
        fa3_context_free(ctx);
    }
    fa3_context_options o;
    fa3_context_options_init(&o);
    o.disable_disk_cache = 1;
    fa3_context *ctx = NULL;
    if (fa3_context_create(&ctx, &o) == FA3_OK)
        printf("; auto = %s", fa3_backend_name(fa3_context_backend(ctx)));
    fa3_context_free(ctx);
    printf("\n");
    return 0;
}

/* The exit status once everything is written: a command whose output did not reach stdout (a
   full disk, a closed pipe's EIO) failed, whatever it did besides. */
static int stdout_checked(int rc)
{
    errno = 0;
    int flush_failed = fflush(stdout) != 0;
    if (!flush_failed && !ferror(stdout))
        return rc;
    if (flush_failed && errno)
        fprintf(stderr, "%s: cannot write standard output: %s\n", prog, strerror(errno));
    else
        fprintf(stderr, "%s: cannot write standard output (a write failed)\n", prog);
    return rc ? rc : EXIT_FAIL;
}

int main(int argc, char **argv)
{
    env_warning_report();
    int rc;
    if (argc >= 2 && strcmp(argv[1], "check") == 0)
        rc = cmd_check(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "bench") == 0)
        rc = cmd_bench(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "cache") == 0)
        rc = cmd_cache(argc, argv);
    else
        rc = cmd_gen(argc, argv);
    return stdout_checked(rc);
}
