/*
 * The forward launch: fa3_fwd checks its arguments (fwd_args.c), then launches the kernels of the
 * config's operation (op.h) in order: for the forward kernel (FA3_KERNEL_FWD) its parameter block
 * (kernel_abi.h: three or four TMA descriptors, O/LSE addresses and strides, shapes, mask window,
 * softmax constants, the L2 section size) and a persistent grid of at most one CTA per SM; for
 * split-KV (forward_split) first the partials' workspace (split.c sizes it; the caller's, or
 * stream-ordered from the driver), the forward kernel writing into it, then the combine kernel
 * (FA3_KERNEL_COMBINE) merging it into O and LSE. fa3_fwd_workspace_size tells the caller the
 * bytes; fa3_tools_fwd_partials runs a split-KV config's forward kernel alone (its fp32 partials).
 */
#include <stdint.h>
#include <string.h>

#include "kernel_abi.h"
#include "runtime/runtime.h"
#include "runtime/tools_api.h" /* fa3_tools_fwd_partials */

/* ------------------------------------------------------------------ launch */

/* A byte stride the tensor map accepts for a dimension of extent 1 (whose stride is never used):
   the contiguous stride, i.e. the inner extents' product, rounded up to 16; the row size if that
   would be too large. */
static uint64_t substitute_stride(const uint64_t *dims, int dim, int esize)
{
    uint64_t s = (uint64_t)esize;
    for (int i = 0; i < dim; i++) {
        if (s > (uint64_t)FA3_MAX_TMA_STRIDE / (dims[i] ? dims[i] : 1)) {
            s = 0;
            break;
        }
        s *= dims[i];
    }
    s = (s + 15) & ~(uint64_t)15;
    if (s == 0 || s >= (uint64_t)FA3_MAX_TMA_STRIDE)
        s = ((uint64_t)esize * dims[0] + 15) & ~(uint64_t)15;
    return s;
}

static fa3_status encode_map(const fa3_driver *d, uint8_t map[128], const char *which,
                             CUtensorMapDataType dtype, int esize, const void *ptr, int head_dim,
                             int seqlen, int heads, int batch, int64_t row_stride,
                             int64_t head_stride, int64_t batch_stride, int rows, int cols)
{
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)seqlen, (cuuint64_t)heads,
                                (cuuint64_t)batch};
    const int64_t strides_el[3] = {row_stride, head_stride, batch_stride};
    cuuint64_t strides[3];
    for (int i = 0; i < 3; i++)
        strides[i] = dims[i + 1] > 1 ? (cuuint64_t)strides_el[i] * (cuuint64_t)esize
                                     : (cuuint64_t)substitute_stride(dims, i + 1, esize);
    const cuuint32_t box[4] = {(cuuint32_t)cols, (cuuint32_t)rows, 1, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    CUresult r = d->cuTensorMapEncodeTiled((CUtensorMap *)(void *)map, dtype, 4, (void *)ptr, dims,
                                           strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fa3_status st = fa3_cu_check(r, "cuTensorMapEncodeTiled");
        fa3_appenderr(" for %s: dims {%llu, %llu, %llu, %llu}, byte strides {%llu, %llu, %llu}, "
                      "box {%d, %d, 1, 1}, address %p", which, (unsigned long long)dims[0],
                      (unsigned long long)dims[1], (unsigned long long)dims[2],
                      (unsigned long long)dims[3], (unsigned long long)strides[0],
                      (unsigned long long)strides[1], (unsigned long long)strides[2], cols, rows,
                      ptr);
        return st;
    }
    return FA3_OK;
}

/* Packed GQA's 5-D map of Q or O (kernel_abi.h): {head_dim, ratio, seqlen, num_heads_k, batch}
   with byte strides {head, row, ratio · head, batch}, box {cols, ratio, rows / ratio, 1, 1}: a
   box's rows in shared memory are packed rows q·ratio + h in order. cp.async.bulk.tensor takes
   1-5 dimensions and cuTensorMapEncodeTiled ranks up to 5, box extents 1..256 (ratio divides
   block_m <= 192, so both box extents fit). */
static fa3_status encode_map_gqa(const fa3_driver *d, uint8_t map[128], const char *which,
                                 CUtensorMapDataType dtype, int esize, const void *ptr,
                                 int head_dim, int seqlen, int num_heads, int num_heads_k,
                                 int batch, int64_t row_stride, int64_t head_stride,
                                 int64_t batch_stride, int rows, int cols)
{
    const int ratio = num_heads / num_heads_k;
    const cuuint64_t dims[5] = {(cuuint64_t)head_dim, (cuuint64_t)ratio, (cuuint64_t)seqlen,
                                (cuuint64_t)num_heads_k, (cuuint64_t)batch};
    const int64_t strides_el[4] = {head_stride, row_stride, head_stride * ratio, batch_stride};
    cuuint64_t strides[4];
    for (int i = 0; i < 4; i++)
        strides[i] = dims[i + 1] > 1 ? (cuuint64_t)strides_el[i] * (cuuint64_t)esize
                                     : (cuuint64_t)substitute_stride(dims, i + 1, esize);
    const cuuint32_t box[5] = {(cuuint32_t)cols, (cuuint32_t)ratio, (cuuint32_t)(rows / ratio),
                               1, 1};
    const cuuint32_t estr[5] = {1, 1, 1, 1, 1};
    CUresult r = d->cuTensorMapEncodeTiled((CUtensorMap *)(void *)map, dtype, 5, (void *)ptr, dims,
                                           strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS)
        return FA3_OK;
    fa3_status st = fa3_cu_check(r, "cuTensorMapEncodeTiled");
    fa3_appenderr(" for %s (pack_gqa, 5-D): dims {%llu, %llu, %llu, %llu, %llu}, byte strides "
                  "{%llu, %llu, %llu, %llu}, box {%d, %d, %d, 1, 1}, address %p", which,
                  (unsigned long long)dims[0], (unsigned long long)dims[1],
                  (unsigned long long)dims[2], (unsigned long long)dims[3],
                  (unsigned long long)dims[4], (unsigned long long)strides[0],
                  (unsigned long long)strides[1], (unsigned long long)strides[2],
                  (unsigned long long)strides[3], cols, ratio, rows / ratio, ptr);
    return st;
}

/* Whether O can be written through a tensor map: 16-byte aligned, strides by TMA's rule. */
static int o_tma_ok(const fa3_fwd_args *a, int es)
{
    return (uintptr_t)a->o % 16 == 0 && fa3_tma_stride_ok(a->o_row_stride, a->seqlen_q, es) &&
           fa3_tma_stride_ok(a->o_head_stride, a->num_heads, es) &&
           fa3_tma_stride_ok(a->o_batch_stride, a->batch, es);
}

/* Compute capability (major·10 + minor) and SM count of a device, read from the driver once per
   device ordinal and kept: fa3_fwd runs once per attention layer and step, so per-call driver
   queries are overhead. Ordinals past the table are queried every time. */
#define FA3_MAX_CACHED_DEVICES 64
static _Atomic int g_dev_props[FA3_MAX_CACHED_DEVICES]; /* 0 = unknown, else cc << 16 | sms */

static fa3_status device_props(const fa3_driver *d, CUdevice dev, int *cc, int *num_sms)
{
    int cached = dev >= 0 && dev < FA3_MAX_CACHED_DEVICES ? g_dev_props[dev] : 0;
    if (cached) {
        *cc = cached >> 16;
        *num_sms = cached & 0xffff;
        return FA3_OK;
    }
    int major = 0, minor = 0, sms = 0;
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev)));
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           dev)));
    FA3_TRY(FA3_CU(d, cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)));
    *cc = major * 10 + minor;
    *num_sms = sms;
    if (dev >= 0 && dev < FA3_MAX_CACHED_DEVICES && sms > 0 && sms < 0x10000)
        g_dev_props[dev] = *cc << 16 | sms;
    return FA3_OK;
}

/* Masked configs walk their tiles longest first (m_block reversed, slowest) in rounds of
   `grid` tiles, one per CTA. Over all (head, batch) pairs at once, the K/V a round reads
   belong to `grid` different heads and are gone from L2 when the next round comes back to those
   heads; at seqlen ≤ 2048 causal attention then waits on HBM. So the tiles are cut into sections
   of section_hb pairs whose K/V fit in 32 MiB of the 50 MiB L2 (FlashAttention-3's budget), but
   never fewer than grid/4 pairs (with 16 pairs per section the static rounds were 1.7x
   unbalanced, and the H200 ran hd256 causal seqlen 4096 at 398 instead of 599 TFLOP/s). Within
   [grid/4, that size] the size is the smallest whose static rounds share the work about as
   evenly as the best (schedule.c); up to all pairs when even grid/4 pairs overflow the whole L2
   (then L2 cannot hold a section anyway). Same-run A/B (H200, bf16, session 3 call 7, against the
   largest size that fits): causal hd128 512/1024 356/490 vs 326/411, hd256 512 324 vs 276,
   hd64 1024/8192 296/505 vs 287/482 TFLOP/s, the other causal shapes equal. Letting sections
   grow past the budget whenever the floor exceeded it (call 6) lost hd256 1024 (372 vs 477).
   Non-masked configs ignore it (m_block fastest). */
static uint32_t section_hb(fa3_kernel *k, const fa3_fwd_args *a, int wl, int wr, uint32_t hb_total,
                           unsigned grid)
{
    if (hb_total == 0 || k->cfg.mask == FA3_MASK_NONE)
        return hb_total ? hb_total : 1;
    if (k->plan.section > 0) /* knob section (A/B) */
        return (uint32_t)k->plan.section < hb_total ? (uint32_t)k->plan.section : hb_total;
    uint32_t lo, hi;
    fa3_section_bounds(&k->plan, a->seqlen_k, a->num_heads, a->num_heads_k, hb_total, grid, &lo,
                       &hi);
    return fa3_choose_section_hb(k, a, wl, wr, hb_total, grid, lo, hi);
}

/* One forward call's values, checked and derived from its arguments, for its kernels. */
typedef struct fwd_call {
    const fa3_fwd_args *args;
    const fa3_driver *d;
    float scale;       /* softmax_scale, 0 resolved */
    int wl, wr;        /* windows as the kernel gets them */
    uint32_t tiles;    /* ceil(seqlen_q / block_m) · num_heads · batch */
    int num_sms;
    /* split-KV configs: the fp32 partials (device addresses in the workspace,
       o_partial[num_splits][partial_rows][head_dim_v], lse_partial[num_splits][partial_rows];
       kernel_abi.h), the number of splits (1..FA3_MAX_SPLITS) and the rows of one split's
       partials (batch·num_heads·seqlen_q; varlen num_heads·total_q) */
    uint64_t o_partial, lse_partial;
    int num_splits;
    uint32_t partial_rows;
    uint32_t tile_base, partial_row_base; /* a tail split's split-KV launch (tail.c) */
    uint64_t tile_counter; /* dyn_sched plans: the zeroed u32 the kernel's producers count on */
    uint32_t dyn_section;  /* with tile_counter: the L2 section (fa3_dyn_section) */
} fwd_call;

/* The persistent grid: one CTA per SM, at most one per tile. */
static unsigned persistent_grid(uint32_t tiles, int num_sms)
{
    return num_sms > 0 && tiles > (uint32_t)num_sms ? (unsigned)num_sms : tiles;
}

/* The combine kernel's block (FA3_KERNEL_COMBINE) for call: the partials into O and LSE. */
static void combine_kernel_params(const fa3_kernel *kernel, const fwd_call *call,
                                  fa3_combine_params *prm, unsigned *grid)
{
    const fa3_fwd_args *a = call->args;
    const fa3_combine_call c = {
        .o_partial = (const float *)(uintptr_t)call->o_partial,
        .lse_partial = (const float *)(uintptr_t)call->lse_partial, .o = a->o, .lse = a->lse,
        .o_batch_stride = a->o_batch_stride, .o_row_stride = a->o_row_stride,
        .o_head_stride = a->o_head_stride,
        .cu_seqlens_q = kernel->cfg.varlen ? a->cu_seqlens_q : NULL,
        .num_splits = call->num_splits, .rows = (int)call->partial_rows, .seqlen_q = a->seqlen_q,
        .num_heads = a->num_heads, .batch = a->batch, .row_base = call->partial_row_base};
    fa3_combine_params_fill(&c, prm, grid);
}

/* (runtime.h) kernels of fast_div 2 plans divide by these (codegen/divide.c), as tile_order.c
   reads the values */
void fa3_kernel_params_divs(fa3_kernel_params *prm, uint32_t heads, uint32_t splits,
                            uint32_t page_size)
{
    const uint32_t nmb = (uint32_t)prm->num_m_blocks, hb = prm->section_hb;
    /* the masked order's pairs and its last section's (tile_order.h FA3_TILE_DECODE_MASKED) */
    const uint32_t pairs = nmb && splits ? prm->total_tiles / splits / nmb : 0;
    const uint32_t last = hb ? pairs % hb : 0;
    const uint32_t d[FA3_DIV_SLOTS] = {
        [FA3_DIV_NMB] = nmb,
        [FA3_DIV_HEADS] = heads,
        [FA3_DIV_HPKV] = (uint32_t)prm->heads_per_kv,
        [FA3_DIV_SEC_TILES] = hb * nmb,
        [FA3_DIV_SEC_HB] = hb,
        [FA3_DIV_LAST_PAIRS] = last ? last : hb,
        [FA3_DIV_SPLITS] = splits,
        [FA3_DIV_PAGE_SIZE] = page_size,
    };
    for (int i = 0; i < FA3_DIV_SLOTS; i++)
        prm->div[i] = fa3_divmagic_of(d[i]);
}

static fa3_status fwd_kernel_params(fa3_kernel *kernel, const fwd_call *call,
                                    fa3_kernel_params *prm, unsigned *grid_out)
{
    const fa3_config *c = &kernel->cfg;
    const fa3_plan *p = &kernel->plan;
    const fa3_fwd_args *args = call->args;
    const fa3_driver *d = call->d;
    const float scale = call->scale;
    const int wl = call->wl, wr = call->wr;
    const uint32_t tiles = call->tiles;
    memset(prm, 0, sizeof *prm);
    const CUtensorMapDataType dt = c->dtype == FA3_DTYPE_E4M3   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : c->dtype == FA3_DTYPE_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const CUtensorMapDataType odt = c->out_dtype == FA3_DTYPE_FP16
                                        ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                        : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const int es = p->elem_bytes, bc = p->box_cols;
    /* varlen: the packed tensors as one batch of total_q / total_k rows (seqlen_q/k); the kernel
       adds each sequence's first row (cu_seqlens) to its coordinates */
    const int mb = c->varlen ? 1 : args->batch;
    const int ratio = args->num_heads / args->num_heads_k;
    if (c->pack_gqa) /* packed GQA: a tile's block_m packed rows (fa3_fwd_validate: ratio | bm) */
        FA3_TRY(encode_map_gqa(d, prm->tmap_q, "q", dt, es, args->q, c->head_dim, args->seqlen_q,
                               args->num_heads, args->num_heads_k, mb, args->q_row_stride,
                               args->q_head_stride, args->q_batch_stride, p->block_m, bc));
    else
        FA3_TRY(encode_map(d, prm->tmap_q, "q", dt, es, args->q, c->head_dim, args->seqlen_q,
                           args->num_heads, mb, args->q_row_stride, args->q_head_stride,
                           args->q_batch_stride, p->block_m, bc));
    /* paged: K/V as {head_dim, page_size, num_heads_k, num_pages}, boxes of page_rows rows (the
       kernel loads a key block as block_n / page_rows boxes, each inside one page) */
    const int kv_rows = c->paged_kv ? args->page_size : args->seqlen_k;
    const int kv_batch = c->paged_kv ? args->num_pages : mb;
    const int kv_box =
        c->paged_kv ? (int)fa3_gcd((uint32_t)p->block_n, (uint32_t)args->page_size) : p->block_n;
    FA3_TRY(encode_map(d, prm->tmap_k, "k", dt, es, args->k, c->head_dim, kv_rows,
                       args->num_heads_k, kv_batch, args->k_row_stride, args->k_head_stride,
                       args->k_batch_stride, kv_box, bc));
    FA3_TRY(encode_map(d, prm->tmap_v, "v", dt, es, args->v, c->head_dim_v, kv_rows,
                       args->num_heads_k, kv_batch, args->v_row_stride, args->v_head_stride,
                       args->v_batch_stride, kv_box, bc));
    if (c->paged_kv) {
        prm->page_table_ptr = (uint64_t)(uintptr_t)args->page_table;
        prm->page_table_stride = args->page_table_stride;
        prm->page_size = args->page_size;
        prm->num_pages = args->num_pages;
        prm->page_rows = kv_box;
        prm->runs_per_block = p->block_n / kv_box;
    }
    /* O through TMA when the plan staged it and O meets TMA's rules (16-byte aligned address and
       strides); otherwise the kernel stores O from registers (same results). */
    if (p->o_stage && c->varlen) {
        /* varlen: {head_dim_v, max_seqlen_q, heads, total_q + 1} from max_seqlen_q rows before
           O, the last dimension one row a step (kernel_abi.h), so a store clips at its
           sequence's end; where TMA takes no such map, the register stores. Same-run A/B
           (session 7 calls 9-11, 16 random lengths, hd128 bf16): 469.5 vs 461.5 TFLOP/s
           non-causal, 342.5 vs 324.6 causal with the register stores; 525 vs 488 and 382 vs
           363 after the compact tile walk */
        const int64_t e = args->max_seqlen_q, rs = args->o_row_stride;
        if ((uintptr_t)args->o % 16 == 0 && fa3_tma_stride_ok(rs, 2, p->out_bytes) &&
            fa3_tma_stride_ok(args->o_head_stride, args->num_heads, p->out_bytes) && e > 0 &&
            encode_map(d, prm->tmap_o, "o", odt, p->out_bytes,
                       (const void *)((uintptr_t)args->o - (uintptr_t)(e * rs * p->out_bytes)),
                       c->head_dim_v, (int)e,
                       args->num_heads, args->seqlen_q + 1, rs, args->o_head_stride, rs, 64,
                       64) == FA3_OK) {
            prm->o_tma = 1;
            prm->max_seqlen_q = (int32_t)e;
        } else {
            fa3_clearerr();
        }
    } else if (c->pack_gqa) {
        /* packed GQA: a warpgroup's 64 rows are 64 / ratio query rows of ratio heads, a 5-D box
           when ratio divides 64; other ratios store from registers */
        if (p->o_stage && 64 % ratio == 0 && o_tma_ok(args, p->out_bytes)) {
            FA3_TRY(encode_map_gqa(d, prm->tmap_o, "o", odt, p->out_bytes, args->o,
                                   c->head_dim_v, args->seqlen_q, args->num_heads,
                                   args->num_heads_k, args->batch, args->o_row_stride,
                                   args->o_head_stride, args->o_batch_stride, 64, 64));
            prm->o_tma = 1;
        }
    } else if (p->o_stage && o_tma_ok(args, p->out_bytes)) {
        FA3_TRY(encode_map(d, prm->tmap_o, "o", odt, p->out_bytes, args->o, c->head_dim_v,
                           args->seqlen_q, args->num_heads, args->batch, args->o_row_stride,
                           args->o_head_stride, args->o_batch_stride, 64, 64));
        prm->o_tma = 1;
    }
    prm->num_heads_k = args->num_heads_k;
    prm->descale_q_ptr = (uint64_t)(uintptr_t)args->descale_q;
    prm->descale_k_ptr = (uint64_t)(uintptr_t)args->descale_k;
    prm->descale_v_ptr = (uint64_t)(uintptr_t)args->descale_v;
    prm->tile_counter_ptr = call->tile_counter;
    prm->o_ptr = (uint64_t)(uintptr_t)args->o;
    prm->lse_ptr = (uint64_t)(uintptr_t)args->lse;
    prm->o_batch_stride = args->o_batch_stride;
    prm->o_row_stride = args->o_row_stride;
    prm->o_head_stride = args->o_head_stride;
    prm->seqlen_q = args->seqlen_q;
    prm->seqlen_k = args->seqlen_k;
    prm->num_heads = args->num_heads;
    prm->heads_per_kv = args->num_heads / args->num_heads_k;
    /* varlen: every sequence gets the m_blocks of the longest (max_seqlen_q); the tiles past a
       shorter one's rows do nothing */
    const int64_t rows_q = c->varlen    ? args->max_seqlen_q
                           : c->pack_gqa ? (int64_t)args->seqlen_q * ratio /* packed rows */
                                         : args->seqlen_q;
    prm->num_m_blocks = (int32_t)((rows_q + p->block_m - 1) / p->block_m);
    prm->cu_seqlens_q_ptr = (uint64_t)(uintptr_t)args->cu_seqlens_q;
    prm->cu_seqlens_k_ptr = (uint64_t)(uintptr_t)args->cu_seqlens_k;
    prm->seqused_k_ptr = (uint64_t)(uintptr_t)args->seqused_k;
    prm->window_left = wl;
    prm->window_right = wr;
    if (c->softcap) {
        prm->score_mul = (float)((double)scale / (double)args->softcap);
        prm->scale_log2 = (float)((double)args->softcap * FA3_LOG2E);
        prm->lse_mul = args->softcap;
    } else {
        prm->score_mul = 1.0f;
        prm->scale_log2 = (float)((double)scale * FA3_LOG2E);
        prm->lse_mul = scale;
    }
    if (c->split_kv) {
        if (call->num_splits < 1 || !call->o_partial || !call->lse_partial)
            return fa3_seterr(FA3_ERR_UNSUPPORTED,
                              "split_kv kernel: its fp32 partials are not given (num_splits %d; "
                              "the combine step is not in this build)", call->num_splits);
        prm->o_partial_ptr = call->o_partial;
        prm->lse_partial_ptr = call->lse_partial;
        prm->num_splits = call->num_splits;
        prm->partial_rows = (int32_t)call->partial_rows;
        prm->tile_base = call->tile_base;
        prm->partial_row_base = call->partial_row_base;
    }
    /* split-KV: each tile num_splits times (tile_order.c) */
    const uint64_t splits = c->split_kv ? (uint64_t)call->num_splits : 1;
    if ((uint64_t)tiles * splits > UINT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "%u tiles x num_splits %d exceed 2^32 - 1", tiles,
                          call->num_splits);
    prm->total_tiles = (uint32_t)((uint64_t)tiles * splits);
    if (c->varlen) {
        /* the kernel numbers only the real tiles (codegen/varlen_order.h; tile_order.c,
           varlen_next): num_heads · sum of ceil(len_b / block_m), at most both bounds below;
           the CTAs stop past the last real tile */
        const uint64_t bm = (uint64_t)p->block_m, h = (uint64_t)args->num_heads;
        const uint64_t slots = (uint64_t)prm->num_m_blocks * h * (uint64_t)args->batch;
        const uint64_t rows = ((uint64_t)args->seqlen_q + (uint64_t)args->batch * (bm - 1)) /
                              bm * h;
        const uint64_t n = (slots < rows ? slots : rows) * splits;
        prm->total_tiles = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        prm->batch = args->batch;
    }

    /* Persistent kernel: one CTA per SM (the plan uses all of an SM's shared memory), each
       walking tiles ctaid.x, ctaid.x + gridDim.x, ... in the order the kernel defines. */
    /* varlen too: one CTA a tile instead (the hardware's block order as the scheduler) ran
       16 random lengths at 508.9 vs 524.7 TFLOP/s non-causal and 398.9 vs 382.1 causal, 16 equal
       lengths at 486 vs 560 and 363 vs 439 (session 7 call 11, hd128 bf16): persistent wins */
    const unsigned grid = persistent_grid(prm->total_tiles, call->num_sms);
    if (prm->total_tiles == 0) {
        *grid_out = 0;
        return FA3_OK;
    }
    /* L2 sections: the dense order's; the varlen walk (tile_order.c, varlen_next) has none and
       never reads section_hb (its total_tiles is only a bound, so no pair count either);
       split-KV takes one section of all pairs (schedule.c simulates whole tiles; split-KV
       runs few of them) */
    if (c->varlen) {
        prm->section_hb = 1;
    } else {
        const uint32_t pairs =
            prm->total_tiles / (uint32_t)splits / (uint32_t)prm->num_m_blocks;
        if (call->tile_counter) /* dyn_sched: the greedy tiles balance any size (dyn_wanted) */
            prm->section_hb = call->dyn_section;
        else
            prm->section_hb =
                c->split_kv ? pairs : section_hb(kernel, args, wl, wr, pairs, grid);
    }
    /* fast_div 2 kernels divide by the launch's divisors through their magics (the others
       never read them: no work on their calls); the decode's heads a pair are packed GQA's kv
       heads (tile_order.c; the varlen walk's are num_heads) */
    if (p->fast_div >= 2)
        fa3_kernel_params_divs(prm,
                               (uint32_t)(c->pack_gqa && !c->varlen ? args->num_heads_k
                                                                     : args->num_heads),
                               (uint32_t)splits, c->paged_kv ? (uint32_t)args->page_size : 1);
    *grid_out = grid;
    return FA3_OK;
}

/* fa3_fwd's part before any launch: the arguments checked (args: the caller's copied into a),
   the device and, where asked, the device arrays read back. *nothing: a varlen call without
   query rows (valid, nothing to launch). */
static fa3_status fwd_begin(fa3_kernel *kernel, const fa3_fwd_args *arguments, fa3_fwd_args *a,
                            fwd_call *call, int *nothing, void *stream)
{
    *nothing = 0;
    if (!kernel || !arguments)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_fwd: NULL %s",
                          !kernel ? "kernel" : "args");
    FA3_TRY(fa3_fwd_args_in(arguments, a));
    const fa3_fwd_args *args = a;
    *call = (fwd_call){.args = args};
    FA3_TRY(fa3_fwd_validate(kernel, args, &call->scale, &call->wl, &call->wr, &call->tiles));

    /* The device. */
    FA3_TRY(fa3_driver_get(&call->d));
    const fa3_driver *d = call->d;
    CUdevice dev;
    FA3_TRY(fa3_driver_ensure_context(NULL, &dev));
    int cc = 0;
    FA3_TRY(device_props(d, dev, &cc, &call->num_sms));
    if (cc != 90) {
        char name[128] = "?";
        if (d->cuDeviceGetName(name, (int)sizeof name, dev) != CUDA_SUCCESS)
            strcpy(name, "?");
        return fa3_seterr(FA3_ERR_UNSUPPORTED,
                          "device %d (%s) has compute capability %d.%d; fa3jit kernels need 9.0 "
                          "(sm_90a, Hopper)", (int)dev, name, cc / 10, cc % 10);
    }
    FA3_TRY(fa3_fwd_check_descales(&kernel->cfg, args, stream)); /* e4m3: read back */
    if (kernel->owner && kernel->owner->debug_varlen) /* FA3JIT_DEBUG_VARLEN=1 */
        FA3_TRY(fa3_fwd_check_varlen_arrays(&kernel->cfg, args, "", stream));
    if (kernel->cfg.varlen && args->max_seqlen_q == 0)
        *nothing = 1; /* no sequence has a query row: nothing to compute or write */
    return FA3_OK;
}

/* dyn_sched plans: whether this call's launch takes its tiles from a counter (fa3_dyn_section,
   on the grid and pairs of a dense masked launch), and then its section (*section); else the
   kernel walks the static order (tile_counter 0). */
static int dyn_wanted(const fa3_kernel *kernel, const fwd_call *call, uint32_t *section)
{
    const fa3_fwd_args *a = call->args;
    const uint64_t pairs = (uint64_t)a->num_heads * (uint64_t)a->batch;
    const unsigned grid = persistent_grid(call->tiles, call->num_sms);
    return pairs > 0 && pairs <= UINT32_MAX && call->tiles <= UINT32_MAX - grid &&
           fa3_dyn_section(&kernel->plan, a->seqlen_k, a->num_heads, a->num_heads_k,
                           (uint32_t)pairs, call->tiles, grid, section);
}

/* A dense non-masked call's tail split (tail.c, plan.tail_split): where it pays, *tp, the
   split-KV kernel (*tk) and its call (*tc: the tail tiles' pieces, their partial rows from the
   first tail row on, in a workspace stream-ordered from the driver's pool, *owned). 0 (nothing
   allocated) where it does not pay, or the kernel or the workspace cannot be had: the whole call
   then runs in the forward kernel, same results; under tail_split 2 (forced: the tests) those
   two are errors (*st), so a test cannot pass without the split. args->num_splits 1 (one pass)
   turns it off. While stream is being captured
   into a graph, the split runs only with a split-KV kernel built and loaded before (a compile or
   a module load inside a capture is left to calls outside it); else the call runs unsplit, even
   forced. */
static int tail_wanted(fa3_kernel *kernel, const fwd_call *call, fa3_tail_plan *tp,
                       fa3_kernel **tk, fwd_call *tc, CUdeviceptr *owned, void *stream,
                       fa3_status *st)
{
    const fa3_plan *p = &kernel->plan;
    const fa3_fwd_args *a = call->args;
    *owned = 0;
    if (!p->tail_split || kernel->cfg.split_kv || kernel->cfg.mask != FA3_MASK_NONE ||
        a->seqlen_q <= 0 || a->seqlen_k <= 0 || p->block_n <= 0 || a->num_splits == 1)
        return 0; /* num_splits 1: the caller asked for one pass */
    const int64_t key_blocks = ((int64_t)a->seqlen_k + p->block_n - 1) / p->block_n;
    const unsigned grid = persistent_grid(call->tiles, call->num_sms);
    const double piece = fa3_tail_piece_cost(kernel->cfg.head_dim, kernel->cfg.head_dim_v,
                                             p->block_n);
    if (!fa3_tail_choose(call->tiles, key_blocks, grid, piece, p->tail_split == 2, tp))
        return 0;
    uint64_t r0, r1;
    if (!fa3_tail_rows(tp, a->seqlen_q, p->block_m, (uint64_t)a->batch * (uint64_t)a->num_heads,
                       &r0, &r1))
        return 0;
    const uint64_t rows = r1 - r0, k = (uint64_t)tp->splits;
    const uint64_t o_bytes = (k * rows * (uint64_t)kernel->cfg.head_dim_v * 4 + 255) & ~255ull;
    const uint64_t bytes = o_bytes + ((k * rows * 4 + 255) & ~255ull);
    const int forced = p->tail_split == 2;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (call->d->cuStreamIsCapturing((CUstream)stream, &cap) != CUDA_SUCCESS)
        cap = CU_STREAM_CAPTURE_STATUS_ACTIVE; /* unknown: as if capturing */
    if (cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        CUcontext cuctx = NULL;
        if (fa3_tail_kernel(kernel, 1, tk) != FA3_OK ||
            call->d->cuCtxGetCurrent(&cuctx) != CUDA_SUCCESS || !fa3_kernel_loaded(*tk, cuctx)) {
            fa3_clearerr();
            return 0;
        }
    }
    fa3_status ts = fa3_tail_kernel(kernel, 0, tk);
    /* its functions in this CUDA context now (module load; driver JIT: the compile), so that a
       failure falls back before the forward kernel is queued for only the whole rounds */
    for (int i = 0; ts == FA3_OK && i < (*tk)->num_parts; i++) {
        CUfunction fn;
        ts = fa3_kernel_function(*tk, i, &fn, NULL);
    }
    if (ts != FA3_OK) {
        if (forced)
            *st = ts;
        else
            fa3_clearerr();
        return 0;
    }
    CUresult r = call->d->cuMemAllocAsync(owned, (size_t)bytes, (CUstream)stream);
    if (r != CUDA_SUCCESS) {
        *owned = 0;
        if (forced)
            *st = fa3_cu_check(r, "cuMemAllocAsync(tail split partials)");
        return 0;
    }
    *tc = *call;
    tc->tiles = tp->tail_tiles;
    tc->num_splits = tp->splits;
    tc->o_partial = (uint64_t)*owned;
    tc->lse_partial = (uint64_t)*owned + o_bytes;
    tc->partial_rows = (uint32_t)rows;
    tc->tile_base = tp->full_tiles;
    tc->partial_row_base = (uint32_t)r0;
    return 1;
}

/* Launches kernel i of the operation for call on stream. */
static fa3_status fwd_launch(fa3_kernel *kernel, int i, const fwd_call *call, void *stream)
{
    const fa3_part *pt = &kernel->parts[i];
    CUfunction fn;
    FA3_TRY(fa3_kernel_function(kernel, i, &fn, NULL));
    fa3_kernel_param_block params;
    unsigned grid = 0;
    switch (pt->kind) {
    case FA3_KERNEL_FWD:
        FA3_TRY(fwd_kernel_params(kernel, call, &params.fwd, &grid));
        break;
    case FA3_KERNEL_COMBINE:
        combine_kernel_params(kernel, call, &params.combine, &grid);
        break;
    case FA3_KERNEL_NUM_KINDS:
        return fa3_seterr(FA3_ERR_INTERNAL, "kernel kind %d has no launch", (int)pt->kind);
    }
    if (grid == 0) /* varlen with max_seqlen_q 0: no query rows, nothing to write */
        return FA3_OK;
    void *kparams[] = {&params};
    return FA3_CU(call->d, cuLaunchKernel(fn, grid, 1, 1, (unsigned)pt->threads, 1, 1,
                                          (unsigned)pt->smem_bytes, (CUstream)stream, kparams,
                                          NULL));
}

fa3_status fa3_fwd(fa3_kernel *kernel, const fa3_fwd_args *arguments, void *stream)
{
    fa3_fwd_args a;
    fwd_call call;
    int nothing;
    FA3_TRY(fwd_begin(kernel, arguments, &a, &call, &nothing, stream));
    if (nothing)
        return FA3_OK;
    const fa3_fwd_args *args = &a;
    const fa3_driver *d = call.d;
    /* Split-KV: the partials' workspace, the caller's or stream-ordered from the driver's pool
       (freed on the stream after the combine kernel, so graph capture records both) */
    CUdeviceptr owned = 0;
    if (kernel->cfg.split_kv == 1) {
        fa3_split_info si;
        FA3_TRY(fa3_split_resolve(kernel, args, call.tiles, call.num_sms, &si));
        uintptr_t ws = (uintptr_t)args->workspace;
        if (!ws) {
            FA3_TRY(FA3_CU(d, cuMemAllocAsync(&owned, si.layout.bytes, (CUstream)stream)));
            ws = (uintptr_t)owned;
        }
        call.o_partial = (uint64_t)ws;
        call.lse_partial = (uint64_t)(ws + si.layout.lse_offset);
        call.num_splits = si.num_splits;
        call.partial_rows = (uint32_t)si.layout.rows;
    } else {
        const fa3_op_shape shape = {args->batch, args->seqlen_q, args->seqlen_k, args->num_heads,
                                    args->num_heads_k, 1};
        if (fa3_op_workspace_bytes(kernel->op, &kernel->plan, &shape))
            return fa3_seterr(FA3_ERR_INTERNAL, "operation %s needs a workspace it has no "
                              "allocation for", kernel->op->name);
    }

    /* dyn_sched: the tile counter, stream-ordered from the driver's pool and zeroed on the
       stream before the launch (graph capture records the three). Where the pool cannot give
       it (no memory pools), the kernel walks the static order instead: same results. */
    CUdeviceptr counter = 0;
    fa3_status st = FA3_OK;
    if (kernel->plan.dyn_sched && dyn_wanted(kernel, &call, &call.dyn_section) &&
        d->cuMemAllocAsync(&counter, 4, (CUstream)stream) == CUDA_SUCCESS) {
        st = FA3_CU(d, cuMemsetD32Async(counter, 0, 1, (CUstream)stream));
        call.tile_counter = (uint64_t)counter;
    } else {
        counter = 0;
    }

    /* Tail split: the forward kernel takes the whole rounds' tiles, then the split-KV kernel
       and its combine the rest (tail_wanted) */
    fa3_tail_plan tp;
    fa3_kernel *tk = NULL;
    fwd_call tail_call;
    CUdeviceptr tail_ws = 0;
    const int tail = st == FA3_OK && kernel->cfg.split_kv != 1 &&
                     tail_wanted(kernel, &call, &tp, &tk, &tail_call, &tail_ws, stream, &st);
    fwd_call main_call = call;
    if (tail)
        main_call.tiles = tp.full_tiles;

    /* The operation's kernels, in order, on the stream. */
    for (int i = 0; i < kernel->num_parts && st == FA3_OK; i++)
        st = fwd_launch(kernel, i, &main_call, stream);
    for (int i = 0; tail && i < tk->num_parts && st == FA3_OK; i++)
        st = fwd_launch(tk, i, &tail_call, stream);
    const CUdeviceptr frees[3] = {owned, counter, tail_ws};
    for (int i = 0; i < 3; i++) {
        if (!frees[i])
            continue;
        CUresult r = d->cuMemFreeAsync(frees[i], (CUstream)stream);
        if (r != CUDA_SUCCESS && st == FA3_OK)
            st = fa3_cu_check(r, i == 2   ? "cuMemFreeAsync(tail split partials, stream)"
                                 : i == 1 ? "cuMemFreeAsync(tile counter, stream)"
                                          : "cuMemFreeAsync(owned, stream)");
    }
    return st;
}

fa3_status fa3_fwd_workspace_size(const fa3_kernel *kernel, const fa3_fwd_args *arguments,
                                  size_t *bytes)
{
    if (!kernel || !arguments || !bytes)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_fwd_workspace_size: NULL %s",
                          !kernel ? "kernel" : !arguments ? "args" : "bytes");
    fa3_fwd_args a;
    FA3_TRY(fa3_fwd_args_in(arguments, &a));
    a.workspace = NULL; /* not looked at */
    a.workspace_bytes = 0;
    float scale;
    int wl, wr;
    uint32_t tiles;
    FA3_TRY(fa3_fwd_validate(kernel, &a, &scale, &wl, &wr, &tiles));
    if (kernel->cfg.split_kv != 1) {
        *bytes = 0;
        return FA3_OK;
    }
    int num_sms = 0;
    if (a.num_splits == 0) { /* the library's choice needs the SM count */
        const fa3_driver *d;
        FA3_TRY(fa3_driver_get(&d));
        CUdevice dev;
        FA3_TRY(fa3_driver_ensure_context(NULL, &dev));
        int cc = 0;
        FA3_TRY(device_props(d, dev, &cc, &num_sms));
    }
    fa3_split_info si;
    FA3_TRY(fa3_split_resolve(kernel, &a, tiles, num_sms, &si));
    *bytes = si.layout.bytes;
    return FA3_OK;
}

fa3_status fa3_tools_fwd_partials(fa3_kernel *kernel, const fa3_fwd_args *arguments,
                                  int num_splits, void *o_partial, void *lse_partial,
                                  void *stream)
{
    if (kernel && !kernel->cfg.split_kv)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "fa3_tools_fwd_partials: the kernel's config has split_kv = 0");
    if (num_splits < 1 || num_splits > FA3_TOOLS_MAX_SPLITS)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "fa3_tools_fwd_partials: num_splits %d is not in 1..%d", num_splits,
                          FA3_TOOLS_MAX_SPLITS);
    if (!o_partial || !lse_partial || (uintptr_t)o_partial % 16 || (uintptr_t)lse_partial % 16)
        return fa3_seterr(FA3_ERR_BAD_ALIGNMENT, "fa3_tools_fwd_partials: o_partial %p and "
                          "lse_partial %p must be 16-byte aligned device pointers", o_partial,
                          lse_partial);
    fa3_fwd_args a;
    fwd_call call;
    int nothing;
    FA3_TRY(fwd_begin(kernel, arguments, &a, &call, &nothing, stream));
    if (nothing)
        return FA3_OK;
    call.o_partial = (uint64_t)(uintptr_t)o_partial;
    call.lse_partial = (uint64_t)(uintptr_t)lse_partial;
    call.num_splits = num_splits;
    const uint64_t rows = (uint64_t)(kernel->cfg.varlen ? 1 : a.batch) *
                          (uint64_t)a.num_heads * (uint64_t)a.seqlen_q;
    if (rows > INT32_MAX)
        return fa3_seterr(FA3_ERR_BAD_SHAPE, "fa3_tools_fwd_partials: %llu partial rows exceed "
                          "2^31 - 1", (unsigned long long)rows);
    call.partial_rows = (uint32_t)rows;
    for (int i = 0; i < kernel->num_parts; i++)
        if (kernel->parts[i].kind == FA3_KERNEL_FWD)
            return fwd_launch(kernel, i, &call, stream);
    return fa3_seterr(FA3_ERR_INTERNAL, "fa3_tools_fwd_partials: the operation has no forward "
                      "kernel");
}
