/*
 * fa3-gen check's cases (check.c runs them): the configurations — the one the CONFIG flags give,
 * the default set, or --all (every supported head-dim pair and dtype, from fa3_supported_configs,
 * x mask and window x softcap x GQA ratio, dense and varlen) — with their labels, each in the
 * Q/K layouts --varlen and --paged ask for, and the seqlen pairs of the dense ones (the varlen /
 * paged cases of a configuration: check_varlen.c), and the parts --select and --shard keep.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>

#include "fa3gen.h"

static const seq_pair default_pairs[] = {
    {1, 1},      {63, 63},   {128, 128},  {1000, 1000}, {4096, 4096}, {63, 1000}, {1000, 63},
    {128, 4096}, {4096, 1000}, {1, 4096}, {4096, 1},    {129, 257},   {255, 64},
};

/* check --all: each of 1, 64, 65, 127, 128, 129, 255, 257, 1000 as seqlen_q and as seqlen_k
   (either side of the 64-row consumer halves and the 128-row/128-key tiles; the 80- and 112-key
   tiles of hd256/hd192 end inside the longer ones), with shorter, equal and longer query sides;
   nothing above 1000, so that the ~500 configurations per dtype pair stay within minutes. */
static const seq_pair all_pairs[] = {
    {1, 1},     {1, 1000},   {64, 64},   {65, 129},   {127, 255},
    {128, 128}, {129, 65},   {255, 1000}, {257, 127}, {1000, 257},
};

_Static_assert(sizeof default_pairs / sizeof default_pairs[0] <= CHECK_MAX_PAIRS &&
               sizeof all_pairs / sizeof all_pairs[0] <= CHECK_MAX_PAIRS, "CHECK_MAX_PAIRS");

fa3_dtype check_out_dtype(const fa3_config *cfg)
{
    if (cfg->out_dtype != FA3_DTYPE_AUTO)
        return cfg->out_dtype;
    return cfg->dtype == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : cfg->dtype;
}

static void make_label(check_cfg *c)
{
    int n = snprintf(c->label, sizeof c->label, "hd%d", c->cfg.head_dim);
    if (c->cfg.head_dim_v && c->cfg.head_dim_v != c->cfg.head_dim)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, "x%d", c->cfg.head_dim_v);
    n += snprintf(c->label + n, sizeof c->label - (size_t)n, " %s", dtype_str(c->cfg.dtype));
    if (c->cfg.dtype == FA3_DTYPE_E4M3 && check_out_dtype(&c->cfg) != FA3_DTYPE_BF16)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, ">%s",
                      dtype_str(check_out_dtype(&c->cfg)));
    n += snprintf(c->label + n, sizeof c->label - (size_t)n, " %s", mask_str(c->cfg.mask));
    if (c->cfg.mask == FA3_MASK_LOCAL)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, "(%d,%d)", c->window_left,
                      c->window_right);
    if (c->cfg.softcap)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " softcap=%g", (double)c->softcap);
    if (c->cfg.varlen)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " varlen");
    if (c->cfg.paged_kv)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " paged");
    if (c->cfg.split_kv)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " split");
    if (c->cfg.pack_gqa)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " packgqa");
    if (c->cfg.block_m == 64 || c->cfg.block_m == 128) /* given (0: the planner's) */
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " bm%d", c->cfg.block_m);
    if (c->cfg.block_n || c->cfg.stages)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " bn%d st%d", c->cfg.block_n,
                      c->cfg.stages);
    snprintf(c->label + n, sizeof c->label - (size_t)n, " h%d/%d", c->num_heads, c->num_heads_k);
}

static int add_cfg(check_cfg **list, int *n, int *cap, check_cfg c)
{
    if (*n == *cap) {
        int ncap = *cap ? 2 * *cap : 64;
        check_cfg *g = realloc(*list, (size_t)ncap * sizeof *g);
        if (!g)
            return -1;
        *list = g;
        *cap = ncap;
    }
    make_label(&c);
    (*list)[(*n)++] = c;
    return 0;
}

/* c in the layouts asked for: --paged: paged K/V with varlen Q (and, without --varlen,
   rectangular Q first); --varlen alone: varlen; neither: c as it is. */
static int add_layouts(check_cfg **list, int *n, int *cap, check_cfg c, int varlen, int paged)
{
    if (!varlen && !paged)
        return add_cfg(list, n, cap, c);
    c.cfg.paged_kv = paged > 0;
    int oom = 0;
    if (paged && !varlen) {
        c.cfg.varlen = 0;
        oom |= add_cfg(list, n, cap, c);
    }
    c.cfg.varlen = 1;
    return oom | add_cfg(list, n, cap, c);
}

/* 1 if sup (nsup configs) has the head-dim pair (hd, hdv) in dtype dt (dense or varlen: vl). */
static int supported(const fa3_config *sup, int nsup, int hd, int hdv, fa3_dtype dt, int vl)
{
    for (int i = 0; i < nsup; ++i)
        if (sup[i].head_dim == hd && sup[i].head_dim_v == hdv && sup[i].dtype == dt &&
            sup[i].varlen == vl)
            return 1;
    return 0;
}

int check_configs(const common_opts *o, int all, int varlen, int paged, const check_cfg *base,
                  check_cfg **cfgs, int *ncfg)
{
    int capcfg = 0, oom = 0;
    if (o->config_flags) {
        check_cfg cc = *base;
        cc.cfg = o->cfg;
        return add_layouts(cfgs, ncfg, &capcfg, cc, varlen, paged) != 0;
    }
    int nsup = fa3_supported_configs(NULL, 0);
    fa3_config *sup = calloc((size_t)(nsup > 0 ? nsup : 1), sizeof *sup);
    if (!sup)
        return 1;
    nsup = fa3_supported_configs(sup, nsup);
    static const fa3_dtype dts[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_DTYPE_E4M3};
    if (all) {
        /* Every supported head-dim pair (those of fa3_supported_configs) x each of its dtypes x
           mask and window x softcap x GQA ratio (dense: 1, 2, 8, MQA; varlen: 2, MQA); e4m3
           also with out_dtype fp16 at the first GQA ratio. Dense, then varlen (--varlen or
           --paged: the varlen part only, in the layouts they ask for). */
        static const struct { fa3_mask mask; int wl, wr; } masks[] = {
            {FA3_MASK_NONE, -1, -1},  {FA3_MASK_CAUSAL, -1, -1}, {FA3_MASK_LOCAL, 64, 32},
            {FA3_MASK_LOCAL, -1, 0}, {FA3_MASK_LOCAL, 0, -1}};
        const int hh[4][2] = {{base->num_heads, base->num_heads}, {6, 3}, {16, 2}, {8, 1}};
        static const int ratios[2][4] = {{0, 1, 2, 3}, {1, 3, -1, -1}}; /* dense, varlen */
        for (int vl = varlen || paged ? 1 : 0; vl < 2; ++vl)
            for (int si = 0; si < nsup; ++si) {
                if (sup[si].dtype != FA3_DTYPE_BF16 || sup[si].mask != FA3_MASK_NONE ||
                    sup[si].softcap || sup[si].varlen != vl || sup[si].paged_kv ||
                    sup[si].split_kv || sup[si].block_m == 64)
                    continue; /* one entry per head-dim pair (the paged layouts: add_layouts;
                                 block_m 64: check --block-m 64 CONFIG) */
                fa3_config probe; /* the pair with the planner's tiles (block_n, stages 0) */
                fa3_config_init(&probe);
                probe.head_dim = sup[si].head_dim;
                probe.head_dim_v = sup[si].head_dim_v == sup[si].head_dim ? 0
                                                                          : sup[si].head_dim_v;
                probe.varlen = vl;
                for (size_t di = 0; di < sizeof dts / sizeof dts[0]; ++di) {
                    if (!supported(sup, nsup, sup[si].head_dim, sup[si].head_dim_v, dts[di], vl))
                        continue;
                    for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; ++mi)
                        for (int sc = 0; sc < 2; ++sc)
                            for (int gi = 0; gi < 4 && ratios[vl][gi] >= 0; ++gi) {
                                const int g = ratios[vl][gi];
                                const int nout = dts[di] == FA3_DTYPE_E4M3 && gi == 0 ? 2 : 1;
                                for (int out = 0; out < nout; ++out) {
                                    check_cfg cc = {.num_heads = hh[g][0],
                                                    .num_heads_k = hh[g][1],
                                                    .softcap = base->softcap,
                                                    .window_left = masks[mi].wl,
                                                    .window_right = masks[mi].wr};
                                    cc.cfg = probe;
                                    cc.cfg.dtype = dts[di];
                                    cc.cfg.out_dtype = out ? FA3_DTYPE_FP16 : FA3_DTYPE_AUTO;
                                    cc.cfg.mask = masks[mi].mask;
                                    cc.cfg.softcap = sc;
                                    oom |= vl ? add_layouts(cfgs, ncfg, &capcfg, cc, varlen, paged)
                                              : add_cfg(cfgs, ncfg, &capcfg, cc);
                                }
                            }
                }
            }
    } else {
        /* The default set: head_dim 64/128/256 x each supported dtype x none/causal, in the
           layouts --varlen and --paged ask for (dense without them). */
        static const int hds[] = {64, 128, 256};
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; ++di) {
            for (int hi = 0; hi < 3; ++hi) {
                if (!supported(sup, nsup, hds[hi], hds[hi], dts[di], varlen || paged))
                    continue;
                for (int m = 0; m < 2; ++m) {
                    check_cfg cc = *base;
                    fa3_config_init(&cc.cfg);
                    cc.cfg.head_dim = hds[hi];
                    cc.cfg.dtype = dts[di];
                    cc.cfg.mask = m ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
                    oom |= add_layouts(cfgs, ncfg, &capcfg, cc, varlen, paged);
                }
            }
        }
    }
    free(sup);
    return oom;
}

int check_pairs(int all, int quick, int seqlen_q, int seqlen_k, seq_pair *pairs)
{
    int n = 0;
    if (seqlen_q || seqlen_k) {
        pairs[n++] = (seq_pair){seqlen_q ? seqlen_q : seqlen_k, seqlen_k ? seqlen_k : seqlen_q};
    } else if (all) {
        for (size_t i = 0; i < sizeof all_pairs / sizeof all_pairs[0]; ++i)
            pairs[n++] = all_pairs[i];
    } else {
        for (size_t i = 0; i < sizeof default_pairs / sizeof default_pairs[0]; ++i)
            if (!quick || (default_pairs[i].q < 4096 && default_pairs[i].k < 4096))
                pairs[n++] = default_pairs[i];
    }
    return n;
}

static const seq_pair pack_pairs[] = {{1, 1}, {1, 1000}, {3, 77}, {8, 4096}, {16, 16}, {16, 1000}};

int check_pack_configs(const common_opts *o, const check_cfg *base, check_cfg **cfgs, int *ncfg)
{
    static const int hds[] = {64, 128, 256};
    static const fa3_dtype dts[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_DTYPE_E4M3};
    static const int heads[2][2] = {{32, 8}, {16, 2}}; /* GQA 4 and 8: divide 128 and 192 */
    int cap = 0, oom = 0;
    const int nconf = o->config_flags ? 1 : 3 * 3 * 2 * 2;
    for (int ci = 0; ci < nconf; ++ci)
        for (int g = 0; g < 2; ++g) {
            check_cfg cc = *base;
            cc.num_heads = heads[g][0];
            cc.num_heads_k = heads[g][1];
            if (o->config_flags) {
                cc.cfg = o->cfg;
            } else {
                fa3_config_init(&cc.cfg);
                cc.cfg.head_dim = hds[ci / 12];
                cc.cfg.dtype = dts[ci / 4 % 3];
                cc.cfg.mask = ci / 2 % 2 ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
                cc.cfg.split_kv = ci % 2;
            }
            cc.cfg.pack_gqa = 1;
            oom |= add_cfg(cfgs, ncfg, &cap, cc);
        }
    return oom;
}

int check_pack_pairs(int seqlen_q, int seqlen_k, seq_pair *pairs)
{
    if (seqlen_q || seqlen_k) {
        pairs[0] = (seq_pair){seqlen_q ? seqlen_q : seqlen_k, seqlen_k ? seqlen_k : seqlen_q};
        return 1;
    }
    int n = 0;
    for (size_t i = 0; i < sizeof pack_pairs / sizeof pack_pairs[0]; ++i)
        pairs[n++] = pack_pairs[i];
    return n;
}

int check_shard(check_cfg *cfgs, int *weight, int *ncfg, int shard_i, int shard_n)
{
    const int n = *ncfg;
    if (shard_n > n)
        return -1;
    long long total = 0, before = 0;
    for (int ci = 0; ci < n; ++ci)
        total += weight[ci];
    /* run s starts at the first config whose first case lies at or past total*(s-1)/N, moved so
       that every run holds at least one config (a heavy config would otherwise swallow the next
       run's cut) and one is left for each later run; runs 1..I+1 in one walk */
    int start[2] = {0, n}, prev = -1, ci = 0;
    for (int s = 1; s <= shard_i + 1 && s <= shard_n; ++s) {
        while (ci < n && before * shard_n < total * (s - 1))
            before += weight[ci++];
        int st = ci > prev + 1 ? ci : prev + 1;
        if (st > n - (shard_n - s + 1))
            st = n - (shard_n - s + 1);
        prev = st;
        if (s == shard_i)
            start[0] = st;
        else if (s == shard_i + 1)
            start[1] = st;
    }
    for (int k = start[0]; k < start[1]; ++k) {
        cfgs[k - start[0]] = cfgs[k];
        weight[k - start[0]] = weight[k];
    }
    *ncfg = start[1] - start[0];
    return 0;
}

int check_select(check_cfg *cfgs, int *ncfg, const char *const *pat, int npat)
{
    for (int k = 0; k < npat; ++k) { /* every pattern must match something: a typo is an error */
        int hit = 0;
        for (int ci = 0; ci < *ncfg && !hit; ++ci)
            hit = fnmatch(pat[k], cfgs[ci].label, 0) == 0;
        if (!hit)
            return k;
    }
    int kept = 0;
    for (int ci = 0; ci < *ncfg; ++ci)
        for (int k = 0; k < npat; ++k)
            if (fnmatch(pat[k], cfgs[ci].label, 0) == 0) {
                cfgs[kept++] = cfgs[ci];
                break;
            }
    *ncfg = kept;
    return -1;
}
