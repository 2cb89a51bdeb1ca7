/*
 * fa3-gen check (GPU): runs fa3_fwd on random normal inputs and compares it with the library's
 * NVRTC reference under the one tolerance rule (tools/common/tolerance.h), case by case: the
 * default set, --all (every supported head-dim pair, dtype, mask, softcap and GQA ratio at the
 * tile-boundary seqlen pairs) or the configuration the flags give. O and LSE are pre-filled with
 * 0xFF bytes (NaN) and followed by guards, so that unwritten elements and writes past the end
 * fail. One line per case ("... PASS" or "... FAIL (reasons)", which tools/gpu-run.sh reads),
 * then "N passed, M failed".
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa3gen.h"
#include "tools/common/device.h"
#include "tools/common/numerics.h"
#include "tools/common/tolerance.h"

#define CHECK_GUARD 1024 /* elements after O and LSE that must stay untouched */

/* Fills the whole buffer with 0xFF bytes: NaN for fp32 and for 16-bit floats. */
static fa3_status dfill_nan(const fa3_driver *drv, const dev_buf *b)
{
    return dev_fill32(drv, b->p, b->bytes / 4, 0xffffffffu);
}

typedef struct check_cfg {
    fa3_config cfg;
    int num_heads, num_heads_k;
    float softcap;                  /* value when cfg.softcap */
    int window_left, window_right;  /* FA3_MASK_LOCAL */
    char label[128];
} check_cfg;

typedef struct seq_pair {
    int q, k;
} seq_pair;

static const seq_pair default_pairs[] = {
    {1, 1},      {63, 63},   {128, 128},  {1000, 1000}, {4096, 4096}, {63, 1000}, {1000, 63},
    {128, 4096}, {4096, 1000}, {1, 4096}, {4096, 1},    {129, 257},   {255, 64},
};

/* check --all: each of 1, 64, 65, 127, 128, 129, 255, 257, 1000 as seqlen_q and as seqlen_k
   (either side of the 64-row consumer halves and the 128-row/128-key tiles; the 80- and 112-key
   tiles of hd256/hd192 end inside the longer ones), with shorter, equal and longer query sides;
   nothing above 1000, so that the ~500 configurations stay within a few minutes. */
static const seq_pair all_pairs[] = {
    {1, 1},     {1, 1000},   {64, 64},   {65, 129},   {127, 255},
    {128, 128}, {129, 65},   {255, 1000}, {257, 127}, {1000, 257},
};

static void make_label(check_cfg *c)
{
    int n = snprintf(c->label, sizeof c->label, "hd%d", c->cfg.head_dim);
    if (c->cfg.head_dim_v && c->cfg.head_dim_v != c->cfg.head_dim)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, "x%d", c->cfg.head_dim_v);
    n += snprintf(c->label + n, sizeof c->label - (size_t)n, " %s %s", dtype_str(c->cfg.dtype),
                  mask_str(c->cfg.mask));
    if (c->cfg.mask == FA3_MASK_LOCAL)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, "(%d,%d)", c->window_left,
                      c->window_right);
    if (c->cfg.softcap)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " softcap=%g", (double)c->softcap);
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

typedef struct check_state {
    const fa3_driver *drv;
    fa3_context *ctx;
    int batch;
    /* device */
    dev_buf q, k, v, o, lse, o_ref, o_emu, lse_ref, lse_emu;
    /* host */
    float *qf, *kf, *vf;       /* random normal pools */
    uint16_t *h16;             /* conversion scratch (largest of q/k/v) and O readback */
    float *ho_ref, *ho_emu, *hlse, *hlse_ref, *hlse_emu;
    size_t max_q, max_k, max_v, max_o, max_lse;
    int uploaded_dtype;        /* -1 = none */
} check_state;

typedef struct case_result {
    tol_acc acc;               /* the measures of the tolerance rule (tools/common/tolerance.h) */
    long long bad_o, bad_lse;  /* NaN / unwritten where a value is expected (or vice versa) */
    int guard_o, guard_lse;    /* 1 if something was written past the end */
    int ran;                   /* 0 if fa3_fwd or a reference could not run */
    char why[512];
} case_result;

/* Uploads the pools converted to dtype (once per dtype). */
static fa3_status upload_inputs(check_state *S, fa3_dtype dt)
{
    if (S->uploaded_dtype == (int)dt)
        return FA3_OK;
    const struct { const float *src; size_t n; const dev_buf *dst; } t[3] = {
        {S->qf, S->max_q, &S->q}, {S->kf, S->max_k, &S->k}, {S->vf, S->max_v, &S->v}};
    for (int i = 0; i < 3; ++i) {
        floats_to_dtype(S->h16, t[i].src, t[i].n, dt);
        FA3_TRY(FA3_CU(S->drv, cuMemcpyHtoD(t[i].dst->p, S->h16, t[i].n * 2)));
    }
    S->uploaded_dtype = (int)dt;
    return FA3_OK;
}

/* Runs one case. Returns 0, or an exit status if the check must stop (context lost, no NVRTC). */
static int run_case(check_state *S, const check_cfg *cc, fa3_kernel *kern, int sq, int sk,
                    case_result *r)
{
    const fa3_driver *drv = S->drv;
    const int hd = cc->cfg.head_dim;
    const int hdv = cc->cfg.head_dim_v ? cc->cfg.head_dim_v : hd;
    memset(r, 0, sizeof *r);

    fa3_fwd_args a;
    fa3_fwd_args_init(&a);
    a.q = (const void *)(uintptr_t)S->q.p;
    a.k = (const void *)(uintptr_t)S->k.p;
    a.v = (const void *)(uintptr_t)S->v.p;
    a.o = (void *)(uintptr_t)S->o.p;
    a.lse = (float *)(uintptr_t)S->lse.p;
    a.batch = S->batch;
    a.seqlen_q = sq;
    a.seqlen_k = sk;
    a.num_heads = cc->num_heads;
    a.num_heads_k = cc->num_heads_k;
    fa3_fwd_args_set_contiguous(&a, hd, hdv);
    a.softmax_scale = 0.0f;
    a.softcap = cc->cfg.softcap ? cc->softcap : 0.0f;
    if (cc->cfg.mask == FA3_MASK_LOCAL) {
        a.window_size_left = cc->window_left;
        a.window_size_right = cc->window_right;
    }
    const size_t n_o = (size_t)S->batch * (size_t)sq * (size_t)cc->num_heads * (size_t)hdv;
    const size_t n_lse = (size_t)S->batch * (size_t)cc->num_heads * (size_t)sq;

    fa3_status st = upload_inputs(S, cc->cfg.dtype);
    const dev_buf *fills[] = {&S->o, &S->lse, &S->o_ref, &S->o_emu, &S->lse_ref, &S->lse_emu};
    for (size_t i = 0; i < sizeof fills / sizeof fills[0] && st == FA3_OK; ++i)
        st = dfill_nan(drv, fills[i]);
    if (st != FA3_OK) {
        snprintf(r->why, sizeof r->why, "setup: %s", fa3_last_error_message());
        return EXIT_FAIL;
    }

    /* The kernel under test. */
    st = fa3_fwd(kern, &a, NULL);
    if (st != FA3_OK) {
        char line[400];
        first_line(line, sizeof line, fa3_last_error_message());
        snprintf(r->why, sizeof r->why, "fa3_fwd: %s (%s)", line, fa3_strerror(st));
        return 0;
    }
    st = FA3_CU(drv, cuCtxSynchronize());
    if (st != FA3_OK) {
        snprintf(r->why, sizeof r->why, "kernel run: %s; stopping (the CUDA context is lost)",
                 fa3_last_error_message());
        return EXIT_FAIL;
    }

    /* The two references. */
    for (int emu = 0; emu < 2; ++emu) {
        float *o = (float *)(uintptr_t)(emu ? S->o_emu.p : S->o_ref.p);
        float *l = (float *)(uintptr_t)(emu ? S->lse_emu.p : S->lse_ref.p);
        st = fa3_reference_fwd_ex(S->ctx, &cc->cfg, &a, o, l, emu, NULL);
        if (st != FA3_OK) {
            snprintf(r->why, sizeof r->why, "reference%s: %s (%s)", emu ? " (emulated)" : "",
                     fa3_last_error_message(), fa3_strerror(st));
            if (st == FA3_ERR_NO_NVRTC || st == FA3_ERR_NO_DRIVER)
                return EXIT_NO_GPU;
            return st == FA3_ERR_CUDA ? EXIT_FAIL : 0;
        }
    }

    /* Read everything back. */
    struct { void *dst; const dev_buf *src; size_t bytes; } rd[] = {
        {S->h16, &S->o, (n_o + CHECK_GUARD) * 2},
        {S->hlse, &S->lse, (n_lse + CHECK_GUARD) * 4},
        {S->ho_ref, &S->o_ref, n_o * 4},
        {S->ho_emu, &S->o_emu, n_o * 4},
        {S->hlse_ref, &S->lse_ref, n_lse * 4},
        {S->hlse_emu, &S->lse_emu, n_lse * 4},
    };
    for (size_t i = 0; i < sizeof rd / sizeof rd[0]; ++i) {
        st = FA3_CU(drv, cuMemcpyDtoH(rd[i].dst, rd[i].src->p, rd[i].bytes));
        if (st != FA3_OK) {
            snprintf(r->why, sizeof r->why, "readback: %s", fa3_last_error_message());
            return EXIT_FAIL;
        }
    }
    r->ran = 1;

    /* O against the fp32 reference and the dtype's own error, where both are numbers (an
       element NaN in one only is counted apart). */
    for (size_t i = 0; i < n_o; ++i) {
        float o = dtype_to_f32(cc->cfg.dtype, S->h16[i]);
        float ref = S->ho_ref[i];
        if (isnan(o) != isnan(ref)) {
            r->bad_o++;
            continue;
        }
        if (!isnan(ref))
            tol_add_o(&r->acc, i, o, ref, S->ho_emu[i]);
    }
    for (size_t i = n_o; i < n_o + CHECK_GUARD; ++i)
        if (S->h16[i] != 0xffffu)
            r->guard_o = 1;

    /* LSE: absolute error; -inf = -inf. */
    for (size_t i = 0; i < n_lse; ++i) {
        float l = S->hlse[i], ref = S->hlse_ref[i];
        if (isnan(l) != isnan(ref)) {
            r->bad_lse++;
            continue;
        }
        if (isnan(ref) || (isinf(l) && isinf(ref) && (l < 0) == (ref < 0)))
            continue;
        tol_add_lse(&r->acc, i, l, ref);
    }
    for (size_t i = n_lse; i < n_lse + CHECK_GUARD; ++i) {
        uint32_t bits;
        memcpy(&bits, &S->hlse[i], sizeof bits);
        if (bits != 0xffffffffu)
            r->guard_lse = 1;
    }
    return 0;
}

static int case_passed(const case_result *r)
{
    return r->ran && r->bad_o == 0 && r->bad_lse == 0 && !r->guard_o && !r->guard_lse &&
           tol_o_ok(&r->acc) && tol_lse_ok(&r->acc);
}

static void print_case(const check_cfg *cc, int batch, int sq, int sk, const case_result *r)
{
    int pass = case_passed(r);
    printf("%-40s b%d sq=%-5d sk=%-5d ", cc->label, batch, sq, sk);
    if (r->ran)
        printf("err_o=%.3e tol=%.3e err_lse=%.3e ", r->acc.err_o, tol_o_bound(&r->acc),
               r->acc.err_lse);
    else
        printf("err_o=-         tol=-         err_lse=-         ");
    printf("%s", pass ? "PASS" : "FAIL");
    if (!pass) {
        char why[700] = "";
        size_t n = 0;
#define WHY(...) n += (size_t)snprintf(why + n, n < sizeof why ? sizeof why - n : 0, __VA_ARGS__)
        if (!r->ran) {
            WHY("; %s", r->why);
        } else {
            if (r->bad_o)
                WHY("; %lld NaN/unwritten O elements", r->bad_o);
            if (r->bad_lse)
                WHY("; %lld NaN/unwritten LSE values", r->bad_lse);
            if (r->guard_o)
                WHY("; wrote past the end of O");
            if (r->guard_lse)
                WHY("; wrote past the end of LSE");
            if (!tol_o_ok(&r->acc))
                WHY("; O error above tolerance");
            if (!tol_lse_ok(&r->acc))
                WHY("; LSE error above 1e-3");
        }
#undef WHY
        printf(" (%s)", why[0] == ';' ? why + 2 : why);
    }
    printf("\n");
    fflush(stdout);
}

static void check_free(check_state *S)
{
    if (S->drv) {
        dev_buf *b[] = {&S->q, &S->k, &S->v, &S->o, &S->lse,
                     &S->o_ref, &S->o_emu, &S->lse_ref, &S->lse_emu};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i)
            dev_free(S->drv, b[i]);
    }
    free(S->qf);
    free(S->kf);
    free(S->vf);
    free(S->h16);
    free(S->ho_ref);
    free(S->ho_emu);
    free(S->hlse);
    free(S->hlse_ref);
    free(S->hlse_emu);
    fa3_context_free(S->ctx);
}

/* The configurations to check into *cfgs (malloc'd, *ncfg of them): the one the CONFIG flags give;
   with all, every supported head-dim pair x dtype x mask and window x softcap x GQA ratio (1, 2,
   8, MQA); else the default set. base: the heads, softcap value and window of the command line.
   Returns nonzero when out of memory (the list may then be short). */
static int check_configs(const common_opts *o, int all, const check_cfg *base, check_cfg **cfgs,
                         int *ncfg)
{
    int capcfg = 0, oom = 0;
    if (o->config_flags) {
        check_cfg cc = *base;
        cc.cfg = o->cfg;
        oom |= add_cfg(cfgs, ncfg, &capcfg, cc);
    } else if (all) {
        /* Every supported head-dim pair (those of fa3_supported_configs) x dtype x mask and
           window x softcap x GQA ratio (1, 2, 8, MQA). */
        static const fa3_dtype dts[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16};
        static const struct { fa3_mask mask; int wl, wr; } masks[] = {
            {FA3_MASK_NONE, -1, -1},  {FA3_MASK_CAUSAL, -1, -1}, {FA3_MASK_LOCAL, 64, 32},
            {FA3_MASK_LOCAL, -1, 0}, {FA3_MASK_LOCAL, 0, -1}};
        const int hh[4][2] = {{base->num_heads, base->num_heads}, {6, 3}, {16, 2}, {8, 1}};
        int nsup = fa3_supported_configs(NULL, 0);
        fa3_config *sup = calloc((size_t)(nsup > 0 ? nsup : 1), sizeof *sup);
        oom |= !sup;
        nsup = sup ? fa3_supported_configs(sup, nsup) : 0;
        for (int si = 0; si < nsup; ++si) {
            if (sup[si].dtype != FA3_DTYPE_BF16 || sup[si].mask != FA3_MASK_NONE ||
                sup[si].softcap)
                continue; /* one entry per head-dim pair */
            fa3_config probe; /* the pair with the planner's tiles (block_n, stages 0) */
            fa3_config_init(&probe);
            probe.head_dim = sup[si].head_dim;
            probe.head_dim_v = sup[si].head_dim_v == sup[si].head_dim ? 0 : sup[si].head_dim_v;
            for (int di = 0; di < 2; ++di)
                for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; ++mi)
                    for (int sc = 0; sc < 2; ++sc)
                        for (int g = 0; g < 4; ++g) {
                            check_cfg cc = {.num_heads = hh[g][0], .num_heads_k = hh[g][1],
                                            .softcap = base->softcap,
                                            .window_left = masks[mi].wl,
                                            .window_right = masks[mi].wr};
                            cc.cfg = probe;
                            cc.cfg.dtype = dts[di];
                            cc.cfg.mask = masks[mi].mask;
                            cc.cfg.softcap = sc;
                            oom |= add_cfg(cfgs, ncfg, &capcfg, cc);
                        }
        }
        free(sup);
    } else {
        /* The default set: head_dim 64/128/256 x bf16/fp16 x none/causal (--all is above). */
        static const int hds[] = {64, 128, 256};
        static const fa3_dtype dts[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16};
        for (int di = 0; di < 2; ++di) {
            for (int hi = 0; hi < 3; ++hi) {
                for (int m = 0; m < 2; ++m) {
                    check_cfg cc = *base;
                    fa3_config_init(&cc.cfg);
                    cc.cfg.head_dim = hds[hi];
                    cc.cfg.dtype = dts[di];
                    cc.cfg.mask = m ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
                    oom |= add_cfg(cfgs, ncfg, &capcfg, cc);
                }
            }
        }
    }
    return oom;
}

int cmd_check(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    int all = 0, quick = 0, have_seed = 0, batch = 2, heads = 3, heads_k = 0;
    int seqlen_q = 0, seqlen_k = 0, wl = 64, wr = 32;
    double softcap_value = 30.0;
    uint64_t seed = 0;
    cli c = {.argc = argc, .argv = argv, .i = 1};
    while (cli_next(&c)) {
        if (parse_common(&c, &o))
            continue;
        if (cli_is(&c, "--all")) {
            cli_noval(&c);
            all = 1;
        } else if (cli_is(&c, "--quick")) {
            cli_noval(&c);
            quick = 1;
        } else if (cli_is(&c, "--seed")) {
            seed = cli_u64(&c);
            have_seed = 1;
        } else if (cli_is(&c, "--batch")) {
            batch = cli_int(&c, 1, 1 << 20);
        } else if (cli_is(&c, "--heads")) {
            heads = cli_int(&c, 1, 1 << 16);
        } else if (cli_is(&c, "--heads-k")) {
            heads_k = cli_int(&c, 1, 1 << 16);
        } else if (cli_is(&c, "--seqlen-q")) {
            seqlen_q = cli_int(&c, 1, 1 << 24);
        } else if (cli_is(&c, "--seqlen-k")) {
            seqlen_k = cli_int(&c, 1, 1 << 24);
        } else if (cli_is(&c, "--window-left")) {
            wl = cli_int(&c, -1, INT_MAX);
        } else if (cli_is(&c, "--window-right")) {
            wr = cli_int(&c, -1, INT_MAX);
        } else if (cli_is(&c, "--softcap-value")) {
            softcap_value = cli_double(&c);
            if (!(softcap_value > 0))
                usage_error("option '--softcap-value': %g must be positive", softcap_value);
        } else if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            print_help(stdout);
            return 0;
        } else {
            unknown_arg(&c);
        }
    }
    if (all && o.config_flags)
        usage_error("'check --all' runs the full set; it cannot be combined with config flags");
    if (heads_k == 0)
        heads_k = heads;
    if (heads % heads_k != 0)
        usage_error("--heads %d is not a multiple of --heads-k %d", heads, heads_k);

    /* ---- the configurations */
    check_cfg *cfgs = NULL;
    int ncfg = 0;
    const check_cfg base = {.num_heads = heads, .num_heads_k = heads_k,
                            .softcap = (float)softcap_value, .window_left = wl, .window_right = wr};
    int oom = check_configs(&o, all, &base, &cfgs, &ncfg);

    /* ---- the seqlen pairs */
    seq_pair pairs[sizeof default_pairs / sizeof default_pairs[0] +
                   sizeof all_pairs / sizeof all_pairs[0]];
    int npairs = 0;
    if (seqlen_q || seqlen_k) {
        pairs[npairs++] = (seq_pair){seqlen_q ? seqlen_q : seqlen_k, seqlen_k ? seqlen_k : seqlen_q};
    } else if (all) {
        for (size_t i = 0; i < sizeof all_pairs / sizeof all_pairs[0]; ++i)
            pairs[npairs++] = all_pairs[i];
    } else {
        for (size_t i = 0; i < sizeof default_pairs / sizeof default_pairs[0]; ++i)
            if (!quick || (default_pairs[i].q < 4096 && default_pairs[i].k < 4096))
                pairs[npairs++] = default_pairs[i];
    }

    check_state S = {.batch = batch, .uploaded_dtype = -1};
    int rc = gpu_open("check", &S.drv);
    if (rc) {
        free(cfgs);
        return rc;
    }
    if (oom) {
        fprintf(stderr, "%s check: out of memory\n", prog);
        free(cfgs);
        return EXIT_FAIL;
    }

    /* ---- largest tensors over all cases */
    for (int ci = 0; ci < ncfg; ++ci) {
        const check_cfg *cc = &cfgs[ci];
        size_t hd = (size_t)cc->cfg.head_dim > 0 ? (size_t)cc->cfg.head_dim : 1;
        size_t hdv = cc->cfg.head_dim_v > 0 ? (size_t)cc->cfg.head_dim_v : hd;
        for (int pi = 0; pi < npairs; ++pi) {
            size_t b = (size_t)batch, sq = (size_t)pairs[pi].q, sk = (size_t)pairs[pi].k;
            size_t nq = b * sq * (size_t)cc->num_heads * hd;
            size_t nk = b * sk * (size_t)cc->num_heads_k * hd;
            size_t nv = b * sk * (size_t)cc->num_heads_k * hdv;
            size_t no = b * sq * (size_t)cc->num_heads * hdv;
            size_t nl = b * sq * (size_t)cc->num_heads;
            S.max_q = nq > S.max_q ? nq : S.max_q;
            S.max_k = nk > S.max_k ? nk : S.max_k;
            S.max_v = nv > S.max_v ? nv : S.max_v;
            S.max_o = no > S.max_o ? no : S.max_o;
            S.max_lse = nl > S.max_lse ? nl : S.max_lse;
        }
    }
    if (!have_seed)
        seed = (uint64_t)time(NULL) * 1000003ull ^ ((uint64_t)getpid() << 20) ^
               (uint64_t)(now_s() * 1e9);
    printf("fa3-gen check: seed %llu (rerun with --seed %llu), %d configs x %d seqlen pairs, "
           "batch %d\n", (unsigned long long)seed, (unsigned long long)seed, ncfg, npairs, batch);
    fflush(stdout);

    const double t0 = now_s();
    size_t max_in = S.max_q > S.max_k ? S.max_q : S.max_k;
    max_in = S.max_v > max_in ? S.max_v : max_in;
    size_t n16 = max_in > S.max_o + CHECK_GUARD ? max_in : S.max_o + CHECK_GUARD;
    S.qf = malloc(S.max_q * sizeof(float));
    S.kf = malloc(S.max_k * sizeof(float));
    S.vf = malloc(S.max_v * sizeof(float));
    S.h16 = malloc(n16 * sizeof(uint16_t));
    S.ho_ref = malloc(S.max_o * sizeof(float));
    S.ho_emu = malloc(S.max_o * sizeof(float));
    S.hlse = malloc((S.max_lse + CHECK_GUARD) * sizeof(float));
    S.hlse_ref = malloc(S.max_lse * sizeof(float));
    S.hlse_emu = malloc(S.max_lse * sizeof(float));
    if (!S.qf || !S.kf || !S.vf || !S.h16 || !S.ho_ref || !S.ho_emu || !S.hlse || !S.hlse_ref ||
        !S.hlse_emu) {
        fprintf(stderr, "%s check: out of host memory\n", prog);
        check_free(&S);
        free(cfgs);
        return EXIT_FAIL;
    }
    host_rng rng;
    rng_init(&rng, seed);
    fill_normal_f32(&rng, S.qf, S.max_q);
    fill_normal_f32(&rng, S.kf, S.max_k);
    fill_normal_f32(&rng, S.vf, S.max_v);

    fa3_status st = FA3_OK;
    struct { dev_buf *b; size_t bytes; } al[] = {
        {&S.q, S.max_q * 2}, {&S.k, S.max_k * 2}, {&S.v, S.max_v * 2},
        {&S.o, (S.max_o + CHECK_GUARD) * 2}, {&S.lse, (S.max_lse + CHECK_GUARD) * 4},
        {&S.o_ref, S.max_o * 4}, {&S.o_emu, S.max_o * 4},
        {&S.lse_ref, S.max_lse * 4}, {&S.lse_emu, S.max_lse * 4},
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0] && st == FA3_OK; ++i)
        st = dev_alloc(S.drv, al[i].b, al[i].bytes);
    if (st == FA3_OK)
        st = fa3_context_create(&S.ctx, &o.ctx_opts);
    if (st != FA3_OK) {
        lib_error(st, "check setup");
        check_free(&S);
        free(cfgs);
        return exit_code_for(st) == EXIT_USAGE ? EXIT_USAGE : EXIT_FAIL;
    }

    /* ---- run */
    int passed = 0, failed = 0, stop = 0;
    for (int ci = 0; ci < ncfg && !stop; ++ci) {
        const check_cfg *cc = &cfgs[ci];
        fa3_kernel *kern = NULL;
        char kerr[512] = "";
        fa3_status kst = fa3_jit_get_kernel(S.ctx, &cc->cfg, &kern);
        if (kst != FA3_OK) {
            char line[400];
            first_line(line, sizeof line, fa3_last_error_message());
            snprintf(kerr, sizeof kerr, "fa3_jit_get_kernel: %s (%s)", line, fa3_strerror(kst));
            fprintf(stderr, "%s check: %s: fa3_jit_get_kernel failed: %s\n", prog, cc->label,
                    fa3_last_error_message());
        }
        for (int pi = 0; pi < npairs && !stop; ++pi) {
            case_result r;
            memset(&r, 0, sizeof r);
            if (!kern) {
                snprintf(r.why, sizeof r.why, "%s", kerr);
            } else {
                int e = run_case(&S, cc, kern, pairs[pi].q, pairs[pi].k, &r);
                if (e) {
                    print_case(cc, batch, pairs[pi].q, pairs[pi].k, &r);
                    failed++;
                    stop = e;
                    break;
                }
            }
            print_case(cc, batch, pairs[pi].q, pairs[pi].k, &r);
            if (case_passed(&r))
                passed++;
            else
                failed++;
        }
    }
    if (stop == EXIT_NO_GPU) {
        fprintf(stderr, "%s check: cannot run the reference: %s\n", prog,
                fa3_last_error_message());
        check_free(&S);
        free(cfgs);
        return EXIT_NO_GPU;
    }
    if (stop)
        fprintf(stderr, "%s check: stopped early after a fatal error\n", prog);
    printf("check: %d cases in %.1f s\n", passed + failed, now_s() - t0);
    printf("%d passed, %d failed\n", passed, failed);
    check_free(&S);
    free(cfgs);
    return failed ? EXIT_FAIL : 0;
}
