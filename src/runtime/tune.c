/*
 * fa3_fwd_tune (fa3jit.h): the library's choice of a call's shape-dependent config fields —
 * split_kv, pack_gqa, block_m and block_n — from the call's shape and the device's SM
 * count, so that a caller who compiles configs per call gets the decode kernels, head_dim
 * 64's short causal tile and head_dim 256's short key blocks where they pay.
 * Pure host arithmetic over fa3_plan_make's tile sizes; no GPU.
 */
#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "runtime/runtime.h"
#include "runtime/split.h"

/* a·b, saturated at 2^40 (any count that large fills every SM: the rules below only compare
   tile counts with num_sms · 10) */
static int64_t sat_mul(int64_t a, int64_t b)
{
    const int64_t cap = (int64_t)1 << 40;
    if (a <= 0 || b <= 0)
        return 0;
    return a > cap / b ? cap : a * b;
}

fa3_status fa3_fwd_tune(fa3_config *cfg, const fa3_fwd_args *args_in, int num_sms)
{
    if (!cfg || !args_in)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_fwd_tune: %s is NULL",
                          !cfg ? "cfg" : "args");
    if (num_sms < 1 || num_sms > 65535)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "fa3_fwd_tune: num_sms %d is out of range (1..65535)", num_sms);
    fa3_fwd_args a;
    FA3_TRY(fa3_fwd_args_in(args_in, &a)); /* its struct_size rules, as fa3_fwd's */
    const fa3_fwd_args *args = &a;
    if (args->batch < 0 || args->seqlen_q < 0 || args->seqlen_k < 0 || args->num_heads < 0 ||
        args->num_heads_k < 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "fa3_fwd_tune: a negative shape field (batch %d, "
                          "seqlen_q %d, seqlen_k %d, num_heads %d, num_heads_k %d)",
                          args->batch, args->seqlen_q, args->seqlen_k, args->num_heads,
                          args->num_heads_k);
    /* the fields this chooses are overwritten: their values as given do not matter */
    fa3_config c;
    FA3_TRY(fa3_config_in(cfg, &c)); /* the caller's struct_size bytes, defaults past them */
    c.split_kv = 0;
    c.pack_gqa = 0;
    c.block_m = 0;
    c.block_n = 0;
    FA3_TRY(fa3_config_canonicalize(&c, &c));
    /* varlen: the longest sequence's rows and keys bound every tile (fa3_fwd's count) */
    const int64_t rows = c.varlen ? args->max_seqlen_q : args->seqlen_q;
    const int64_t keys = c.varlen ? args->max_seqlen_k : args->seqlen_k;
    if (rows < 0 || keys < 0)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "fa3_fwd_tune: max_seqlen_q %d or max_seqlen_k %d "
                          "is negative", args->max_seqlen_q, args->max_seqlen_k);
    fa3_plan plan;
    FA3_TRY(fa3_plan_make(&c, &plan));
    const int64_t bm = plan.block_m;
    const int64_t ratio = args->num_heads_k > 0 && args->num_heads % args->num_heads_k == 0
                              ? args->num_heads / args->num_heads_k : 0;
    /* The decode family (pack_gqa 1, block_m 64, split-KV; rectangular Q and a ratio dividing
       64): where packing pays by FlashAttention-3's rule — the share of a tile's rows used
       without it, seqlen_q / round_up(seqlen_q, block_m), under 0.9 of the share with seqlen_q ·
       ratio rows — or where the query rows fit one 64-row tile anyway (ratio 1 included), so
       that a tile's tensor work per key block is a half (a third at head_dim 64) of the
       planner's tile's. Measured on the H200 (bench/RESULTS.md, session 8; GB/s of K+V, issue
       16's five decode shapes): the planner's tile one pass 1512/1421/1498/364/2779, split-KV
       alone 1516/1430/1493/734/2794, block_m 64 one pass 2097/2030/2092/521/4378 (fa3-gen bench
       --decode, one run); the whole family through flash_attn_func 4361/4257/4301/3683/4257
       against one pass 1323/1301/1276/371/2545 in one run beside cuDNN 4508/4385/1266/3876/4398
       and FA4 4472/4048/3108/406/2733. Packing is what the GQA rows need (K/V read once per kv
       head), split-KV the batch-1 row, the 64-row tile the MHA head_dim 64 row. */
    int decode = 0;
    if (!c.varlen && ratio >= 1 && 64 % ratio == 0 && rows > 0) {
        const int64_t prow = sat_mul(rows, ratio);
        const double used = (double)rows / (double)(((rows + bm - 1) / bm) * bm);
        const double used_packed = (double)prow / (double)(((prow + bm - 1) / bm) * bm);
        decode = rows <= 64 || (ratio > 1 && used < 0.9 * used_packed);
    }
    int split = 1;
    if (!decode) {
        const int64_t tiles =
            sat_mul(sat_mul(args->batch, args->num_heads), (rows + bm - 1) / bm);
        const int64_t key_blocks = (keys + plan.block_n - 1) / plan.block_n;
        split = fa3_split_heuristic(tiles, key_blocks, num_sms) > 1;
    }
    /* head_dim 64's short causal/local calls: the two-consumer tile (block_m 128) where the
       planner's is 192. Same-run A/B on the H200 (bench/compare.py --variants wg3=0, the same
       kernel; bf16, batch x seqlen 16k, 32 heads, 3 rounds rotated, session 10 call 2), 128 /
       192 rows: causal 512/1024 1.093/1.108 (236/300 vs 216/271 TFLOP/s), 2048 0.958, 4096+
       0.87-0.95; non-causal 0.86-0.96 at every length. A 192-row tile puts two masked key
       blocks on each diagonal, and with short rows more of it idles. One pass only (the listed
       configs); split-KV keeps the planner's tile. A local mask with both windows unlimited is
       full attention: the planner's tile. */
    const int masked = c.mask == FA3_MASK_CAUSAL ||
                       (c.mask == FA3_MASK_LOCAL &&
                        (args->window_size_left >= 0 || args->window_size_right >= 0));
    const int short_tile = !decode && !split && bm == 192 && masked && rows <= 1024 &&
                           keys <= 1024;
    /* head_dim 256's short causal/local calls: 64 keys a block where the planner takes 80. Same
       run on the H200 (tools/probes/tile_ab.sh: fa3-gen bench, batch x seqlen 16k, 8 heads,
       rounds rotated; session 16, calls 3-4), bn64 / bn80: bf16 causal 512/1024 1.052/1.024 (fp16
       1.048/1.027), causal 2048/4096 0.997/0.996, non-causal 512/1024/2048 1.016/0.993/1.002.
       The likely reason (not measured apart): a short causal tile is mostly its diagonal, and
       smaller key blocks leave fewer masked-out scores. bn48 (3 stages) lost 5%. One pass,
       unpacked (the listed configs: fa3_supported_configs); e4m3 plans its own tiles. */
    const int short_keys = !decode && !split && c.dtype != FA3_DTYPE_E4M3 &&
                           c.head_dim == 256 && c.head_dim_v == 256 && plan.block_n == 80 &&
                           masked && rows <= 1024 && keys <= 1024;
    /* fields past the caller's struct_size (an older fa3jit.h) keep their meaning: absent */
#define TUNE_SET(field, value)                                                                 \
    do {                                                                                       \
        if (cfg->struct_size >= offsetof(fa3_config, field) + sizeof cfg->field)               \
            cfg->field = (value);                                                              \
    } while (0)
    TUNE_SET(split_kv, split);
    TUNE_SET(pack_gqa, decode);
    TUNE_SET(block_m, decode ? 64 : short_tile ? 128 : 0);
    TUNE_SET(block_n, short_keys ? 64 : 0);
#undef TUNE_SET
    return FA3_OK;
}
