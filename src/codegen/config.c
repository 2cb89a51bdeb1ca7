/*
 * fa3_config: validation with an error naming each bad field, the canonical form and the list of
 * supported configurations (defaults, equality and the description walk the field table,
 * config_fields.c). Calls the planner (tile defaults, the fit check) but never the emitter: the
 * emitter calls fa3_config_describe, so fa3_emit_ptx lives in generate.c.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

fa3_status fa3_config_canonicalize(const fa3_config *cfg, fa3_config *out)
{
    if (!cfg || !out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_config_canonicalize: NULL %s",
                          !cfg ? "cfg" : "out");
    fa3_config c;
    FA3_TRY(fa3_config_in(cfg, &c));
    const size_t size = cfg->struct_size; /* out receives the caller's size (out may be cfg) */
    if (c.head_dim != 64 && c.head_dim != 96 && c.head_dim != 128 && c.head_dim != 192 &&
        c.head_dim != 256)
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM,
                          "head_dim %d is not supported (supported: 64, 96, 128, 192, 256)",
                          c.head_dim);
    fa3_config_fill_zero(&c, FA3_CANON_HEAD_DIM, NULL); /* head_dim_v 0 = head_dim */
    if (c.head_dim_v != c.head_dim && !(c.head_dim == 192 && c.head_dim_v == 128))
        return fa3_seterr(FA3_ERR_BAD_HEAD_DIM_V,
                          "head_dim_v %d is not supported with head_dim %d (supported: equal to "
                          "head_dim, or 128 with head_dim 192)", c.head_dim_v, c.head_dim);
    if (c.dtype != FA3_DTYPE_BF16 && c.dtype != FA3_DTYPE_FP16 && c.dtype != FA3_DTYPE_E4M3)
        return fa3_seterr(FA3_ERR_BAD_DTYPE, "dtype %d is not supported (supported: bf16 = 0, "
                          "fp16 = 1, e4m3 = 2; e5m2 is not supported)", (int)c.dtype);
    FA3_TRY(fa3_check_out_dtype("", c.dtype, c.out_dtype));
    fa3_config_fill_zero(&c, FA3_CANON_OUT_DTYPE, NULL); /* out_dtype auto = the default */
    if (c.mask != FA3_MASK_NONE && c.mask != FA3_MASK_CAUSAL && c.mask != FA3_MASK_LOCAL)
        return fa3_seterr(FA3_ERR_BAD_MASK, "mask %d is not a valid fa3_mask", (int)c.mask);
    if (c.softcap != 0 && c.softcap != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "softcap flag %d must be 0 or 1", c.softcap);
    if (c.varlen != 0 && c.varlen != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "varlen flag %d must be 0 or 1", c.varlen);
    if (c.paged_kv != 0 && c.paged_kv != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "paged_kv flag %d must be 0 or 1",
                          c.paged_kv);
    if (c.split_kv != 0 && c.split_kv != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "split_kv flag %d must be 0 or 1",
                          c.split_kv);
    if (c.pack_gqa != 0 && c.pack_gqa != 1)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "pack_gqa flag %d must be 0 or 1",
                          c.pack_gqa);
    if (c.pack_gqa && c.varlen)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "pack_gqa 1 with varlen 1 is not supported yet "
                          "(packed GQA takes rectangular Q: varlen 0, or pack_gqa 0)");
    if (c.arch != FA3_ARCH_SM90A)
        return fa3_seterr(FA3_ERR_BAD_ARCH, "arch %d is not supported (supported: 90 = sm_90a)",
                          (int)c.arch);
    fa3_config planned = c;
    fa3_plan_default_tiles(&c, &planned.block_n, &planned.stages);
    /* block_m: 64 (one consumer warpgroup), 128 (two), or the planner's 128/192 (for the tile's
       block_n; 192 = three, head_dim 64) */
    planned.block_m = fa3_plan_default_block_m(&c, c.block_n ? c.block_n : planned.block_n);
    if (c.block_m != 0 && c.block_m != 64 && c.block_m != 128 && c.block_m != planned.block_m)
        return fa3_seterr(FA3_ERR_BAD_BLOCK,
                          "block_m %d is invalid (0 = the planner's choice, %d here; 64 = one "
                          "consumer warpgroup, 128 = two)", c.block_m, planned.block_m);
    fa3_config_fill_zero(&c, FA3_CANON_PLANNER, &planned); /* block_n, stages, block_m 0 = the
                                                             planner's */
    if (c.block_n < 16 || c.block_n > 256 || c.block_n % 16 != 0)
        return fa3_seterr(FA3_ERR_BAD_BLOCK,
                          "block_n %d is invalid (a multiple of 16 in 16..256)", c.block_n);
    if (c.stages < 2 || c.stages > 8)
        return fa3_seterr(FA3_ERR_BAD_BLOCK, "stages %d is invalid (2..8)", c.stages);
    fa3_plan plan;
    FA3_TRY(fa3_plan_make(&c, &plan));
    return fa3_config_out(out, size, &c);
}

int fa3_supported_configs_sized(fa3_config *out, int max, size_t struct_size)
{
    /* the caller's last message survives the refused candidates' (fa3jit.h: a successful call
       leaves it in place) */
    const char *prev_msg = fa3_last_error_message();
    char *prev = prev_msg && prev_msg[0] ? strdup(prev_msg) : NULL;
    /* Candidates; fa3_config_canonicalize decides, so the list follows the generator. The
       decode configs are listed as one family: packed GQA (pack_gqa 1, also right for ratio 1)
       with split-KV and the 64-row decode tile (block_m 64), rectangular Q, dense and paged K/V
       (216; fa3_fwd_tune picks them for few query rows), and head_dim 64's two-consumer tile
       (block_m 128, bf16/fp16, causal/local, one pass, dense/varlen/paged: 32; fa3_fwd_tune
       picks it for short sequences), and head_dim 256's 64-key blocks (block_n 64, the same
       family: 32; fa3_fwd_tune's for short sequences). Other pack_gqa / block_m 64
       combinations are made on request (and compiled by test_ptxas's NPACK / NBM64 cases) but
       not listed: each listed family adds ~100-200 s to cli-cache's warm --all on 2 cores. */
    static const int heads[][2] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256},
                                   {192, 128}};
    static const fa3_dtype dtypes[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_DTYPE_E4M3};
    static const fa3_mask masks[] = {FA3_MASK_NONE, FA3_MASK_CAUSAL, FA3_MASK_LOCAL};
    int n = 0;
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
            for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++)
                for (int sc = 0; sc <= 1; sc++)
                for (int vl = 0; vl <= 35; vl++) { /* varlen, paged_kv, split_kv: bits 0-2;
                                                       8: the decode family; 16: block_m 128;
                                                       32: block_n 64 */
                    if ((vl & 8) && (vl & 5) != 4)
                        continue; /* decode configs: split-KV, rectangular Q */
                    if ((vl & 16) && (heads[h][0] != 64 || heads[h][1] != 64 ||
                                      dtypes[d] == FA3_DTYPE_E4M3 || masks[m] == FA3_MASK_NONE ||
                                      (vl & 12)))
                        continue; /* block_m 128: head_dim 64's short causal/local tile, 16-bit,
                                     one pass (fa3_fwd_tune) */
                    if ((vl & 32) && (heads[h][0] != 256 || heads[h][1] != 256 ||
                                      dtypes[d] == FA3_DTYPE_E4M3 || masks[m] == FA3_MASK_NONE ||
                                      (vl & 28)))
                        continue; /* block_n 64: head_dim 256's short causal/local key blocks,
                                     16-bit, one pass (fa3_fwd_tune) */
                    fa3_config c, canon;
                    fa3_config_init(&c);
                    c.varlen = vl & 1;
                    c.paged_kv = (vl >> 1) & 1;
                    c.split_kv = (vl >> 2) & 1;
                    c.pack_gqa = (vl >> 3) & 1;
                    c.block_m = vl & 8 ? 64 : vl & 16 ? 128 : 0;
                    c.block_n = vl & 32 ? 64 : 0;
                    c.head_dim = heads[h][0];
                    c.head_dim_v = heads[h][1];
                    c.dtype = dtypes[d];
                    c.mask = masks[m];
                    c.softcap = sc;
                    if (fa3_config_canonicalize(&c, &canon) != FA3_OK)
                        continue;
                    /* the caller's array: elements of its struct_size */
                    if (out && n < max &&
                        fa3_config_out((fa3_config *)(void *)((char *)out + (size_t)n *
                                                                                 struct_size),
                                       struct_size, &canon) != FA3_OK) {
                        free(prev); /* the size's error is the caller's now */
                        return -1;
                    }
                    n++;
                }
    fa3_clearerr(); /* the refused candidates are not the caller's error */
    if (prev) {
        fa3_seterr(FA3_OK, "%s", prev);
        free(prev);
    }
    return n;
}
