/*
 * fa3-gen check (GPU): runs fa3_fwd on random normal inputs and compares it with the library's
 * NVRTC reference under the one tolerance rule (tools/common/tolerance.h), case by case: the
 * default set, --all (every supported head-dim pair, dtype, mask, softcap and GQA ratio at the
 * tile-boundary seqlen pairs; and the varlen configurations) or the configuration the flags give
 * (check_cases.c); --varlen / --paged P: those configurations with packed sequences / paged K/V,
 * whose cases check_varlen.c makes and tools/common/varlen_check.c judges. e4m3 inputs
 * are the same normal values quantized on the host with per-(batch, kv head) descales (amax/448,
 * fa3_quantize_fp8's rule; --descales none: unscaled, NULL descales), which both the kernel and
 * the reference get; O is read in the config's out_dtype. O and LSE are pre-filled with 0xFF
 * bytes (NaN) and followed by guards, so that unwritten elements and writes past the end fail.
 * One line per case ("... PASS" or "... FAIL (reasons)", which tools/gpu-run.sh reads), then
 * "N passed, M failed".
 */
#include <errno.h>
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

typedef struct check_state {
    const fa3_driver *drv;
    fa3_context *ctx;
    int batch;
    /* device */
    dev_buf q, k, v, o, lse, o_ref, o_emu, lse_ref, lse_emu;
    dev_buf dq, dk, dv;        /* e4m3 descales, (batch, num_heads_k) */
    /* host */
    float *qf, *kf, *vf;       /* random normal pools */
    uint16_t *h16;             /* conversion scratch (largest of q/k/v) and O readback */
    float *ho_ref, *ho_emu, *hlse, *hlse_ref, *hlse_emu;
    float *hds;                /* descale scratch */
    size_t max_q, max_k, max_v, max_o, max_lse, max_ds;
    int uploaded_dtype;        /* -1 = none (or e4m3: per case) */
    int no_descales;           /* --descales none: e4m3 inputs unscaled, descales NULL */
} check_state;

typedef struct case_result {
    tol_acc acc;               /* the measures of the tolerance rule (tools/common/tolerance.h) */
    long long bad_o, bad_lse;  /* NaN / unwritten where a value is expected (or vice versa) */
    int guard_o, guard_lse;    /* 1 if something was written past the end */
    int ran;                   /* 0 if fa3_fwd or a reference could not run */
    char why[512];
} case_result;

/* Uploads one case's inputs and sets a's descales. bf16/fp16: the pools converted to dtype (once
   per dtype). e4m3: each pool's prefix, as the case's (batch, seqlen, heads, head dim) tensor,
   quantized with per-(batch, kv head) descales (quantize_e4m3), and the descales; every case,
   since the descales depend on the shape. */
static fa3_status upload_inputs(check_state *S, const check_cfg *cc, fa3_fwd_args *a)
{
    const fa3_dtype dt = cc->cfg.dtype;
    if (dt == FA3_DTYPE_E4M3) {
        S->uploaded_dtype = -1; /* the buffers now hold e4m3 bytes */
        const int hd = cc->cfg.head_dim, hdv = cc->cfg.head_dim_v ? cc->cfg.head_dim_v : hd;
        const struct { const float *src; const dev_buf *dst, *ds; int seqlen, heads, dim;
                       const float **field; } t[3] = {
            {S->qf, &S->q, &S->dq, a->seqlen_q, a->num_heads, hd, &a->descale_q},
            {S->kf, &S->k, &S->dk, a->seqlen_k, a->num_heads_k, hd, &a->descale_k},
            {S->vf, &S->v, &S->dv, a->seqlen_k, a->num_heads_k, hdv, &a->descale_v}};
        uint8_t *h8 = (uint8_t *)S->h16;
        const size_t nds = (size_t)a->batch * (size_t)a->num_heads_k;
        for (int i = 0; i < 3; ++i) {
            size_t n = (size_t)a->batch * (size_t)t[i].seqlen * (size_t)t[i].heads *
                       (size_t)t[i].dim;
            quantize_e4m3(t[i].src, h8, S->no_descales ? NULL : S->hds, a->batch, t[i].seqlen,
                          t[i].heads, t[i].dim, a->num_heads_k);
            FA3_TRY(FA3_CU(S->drv, cuMemcpyHtoD(t[i].dst->p, h8, n)));
            *t[i].field = NULL;
            if (!S->no_descales) {
                FA3_TRY(FA3_CU(S->drv, cuMemcpyHtoD(t[i].ds->p, S->hds, nds * sizeof(float))));
                *t[i].field = (const float *)(uintptr_t)t[i].ds->p;
            }
        }
        return FA3_OK;
    }
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
    r->acc.lse_tol = tol_lse_bound(cc->cfg.dtype == FA3_DTYPE_E4M3, cc->cfg.head_dim);

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

    fa3_status st = upload_inputs(S, cc, &a);
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
    const fa3_dtype out_dt = check_out_dtype(&cc->cfg);
    for (size_t i = 0; i < n_o; ++i) {
        float o = dtype_to_f32(out_dt, S->h16[i]);
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
                WHY("; LSE error above %g", r->acc.lse_tol);
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
        dev_buf *b[] = {&S->q, &S->k, &S->v, &S->o, &S->lse, &S->o_ref, &S->o_emu,
                        &S->lse_ref, &S->lse_emu, &S->dq, &S->dk, &S->dv};
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
    free(S->hds);
    fa3_context_free(S->ctx);
}

/* --shard's value: two decimal integers "I/N", digits only, 1 <= I <= N <= CHECK_MAX_SHARDS.
   Returns nonzero when it is not. */
static int parse_shard(const char *v, int *shard_i, int *shard_n)
{
    long part[2];
    for (int k = 0; k < 2; ++k) {
        if (*v < '0' || *v > '9')
            return 1; /* no sign, no space */
        char *end;
        errno = 0;
        part[k] = strtol(v, &end, 10);
        if (errno || part[k] < 1 || part[k] > CHECK_MAX_SHARDS || *end != (k == 0 ? '/' : '\0'))
            return 1;
        v = end + 1;
    }
    if (part[0] > part[1])
        return 1;
    *shard_i = (int)part[0];
    *shard_n = (int)part[1];
    return 0;
}

int cmd_check(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    int all = 0, quick = 0, have_seed = 0, batch = 2, heads = 3, heads_k = 0;
    int seqlen_q = 0, seqlen_k = 0, wl = 64, wr = 32;
    double softcap_value = 30.0;
    int no_descales = 0, saw_descales = 0, saw_batch = 0, varlen = 0, paged = 0, list = 0;
    int pack = 0, shard_i = 1, shard_n = 1, nselect = 0;
    const char *patterns[CHECK_MAX_SELECT];
    uint64_t seed = 0;
    cli c = {.argc = argc, .argv = argv, .i = 1};
    while (cli_next(&c)) {
        /* --varlen / --paged P pick check's cases here (before the config flags, where
           --varlen and --paged-kv set the config of --emit-ptx and the others) */
        if (cli_is(&c, "--varlen")) {
            cli_noval(&c);
            varlen = 1;
            continue;
        }
        if (cli_is(&c, "--paged")) {
            paged = cli_int(&c, 1, 256);
            continue;
        }
        if (cli_is(&c, "--pack-gqa")) { /* check's packed decode cases (not a CONFIG flag) */
            cli_noval(&c);
            pack = 1;
            continue;
        }
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
            saw_batch = 1;
        } else if (cli_is(&c, "--select")) {
            const char *v = cli_value(&c);
            if (nselect == CHECK_MAX_SELECT)
                usage_error("option '--select': more than %d patterns ('%s')", CHECK_MAX_SELECT,
                            v);
            if (!v[0])
                usage_error("option '--select': an empty pattern");
            patterns[nselect++] = v;
        } else if (cli_is(&c, "--shard")) {
            const char *v = cli_value(&c);
            if (parse_shard(v, &shard_i, &shard_n))
                usage_error("option '--shard': '%s' is not I/N with 1 <= I <= N <= %d", v,
                            CHECK_MAX_SHARDS);
        } else if (cli_is(&c, "--list")) {
            cli_noval(&c);
            list = 1;
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
        } else if (cli_is(&c, "--descales")) {
            const char *v = cli_value(&c);
            saw_descales = 1;
            if (!strcmp(v, "amax"))
                no_descales = 0;
            else if (!strcmp(v, "none"))
                no_descales = 1;
            else
                usage_error("option '--descales': unknown value '%s' (amax, none)", v);
        } else if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            print_help(stdout);
            return 0;
        } else {
            unknown_arg(&c);
        }
    }
    if (all && o.config_flags)
        usage_error("'check --all' runs the full set; it cannot be combined with config flags");
    if (pack && (all || varlen || paged))
        usage_error("'check --pack-gqa' runs rectangular dense cases; it cannot be combined "
                    "with %s", all ? "--all" : varlen ? "--varlen" : "--paged");
    if (o.config_flags) { /* a bad CONFIG is a usage error before the GPU, as for the others */
        fa3_config canon, layout = o.cfg;
        /* in the layouts asked for; paged_kv is the library's to refuse, per case, after the
           reference's checks (its kernel may not be generated yet) */
        layout.varlen = varlen || paged;
        layout.pack_gqa |= pack;
        canonical_or_exit(&layout, &canon);
        if (saw_descales && canon.dtype != FA3_DTYPE_E4M3)
            usage_error("option '--descales' is for e4m3 inputs (--dtype e4m3); this %s "
                        "configuration takes no descales", dtype_str(canon.dtype));
    }
    if (heads_k == 0)
        heads_k = heads;
    if (heads % heads_k != 0)
        usage_error("--heads %d is not a multiple of --heads-k %d", heads, heads_k);
    if (varlen || paged || all) { /* varlen cases: every length fits the int32 offsets */
        const char *why = varlen || paged ? "with --varlen/--paged" : "with --all (its varlen "
                                                                      "cases)";
        if (saw_batch && batch > CHECK_VARLEN_MAX_BATCH)
            usage_error("option '--batch': %d is above %d %s", batch, CHECK_VARLEN_MAX_BATCH, why);
        if (seqlen_q > CHECK_VARLEN_MAX_SEQLEN || seqlen_k > CHECK_VARLEN_MAX_SEQLEN)
            usage_error("option '--seqlen-%s': %d is above %d %s",
                        seqlen_q > CHECK_VARLEN_MAX_SEQLEN ? "q" : "k",
                        seqlen_q > CHECK_VARLEN_MAX_SEQLEN ? seqlen_q : seqlen_k,
                        CHECK_VARLEN_MAX_SEQLEN, why);
    }
    const varlen_opts vo = {.page_size = paged, .batch = saw_batch ? batch : 0,
                            .max_q = seqlen_q ? seqlen_q : seqlen_k,
                            .max_k = seqlen_k ? seqlen_k : seqlen_q, .all = all, .quick = quick,
                            .no_descales = no_descales};

    /* ---- the configurations */
    check_cfg *cfgs = NULL;
    int ncfg = 0;
    const check_cfg base = {.num_heads = heads, .num_heads_k = heads_k,
                            .softcap = (float)softcap_value, .window_left = wl, .window_right = wr};
    int oom = pack ? check_pack_configs(&o, &base, &cfgs, &ncfg)
                   : check_configs(&o, all, varlen, paged, &base, &cfgs, &ncfg);

    /* ---- the seqlen pairs */
    seq_pair pairs[CHECK_MAX_PAIRS];
    int npairs = pack ? check_pack_pairs(seqlen_q, seqlen_k, pairs)
                      : check_pairs(all, quick, seqlen_q, seqlen_k, pairs);

    /* ---- --select: the configs whose labels match */
    if (nselect) {
        const int bad = check_select(cfgs, &ncfg, patterns, nselect);
        if (bad >= 0) {
            free(cfgs);
            usage_error("option '--select': '%s' matches none of the %d config labels (check "
                        "--list prints them)", patterns[bad], ncfg);
        }
    }
    /* ---- each config's cases (a varlen / paged config's own, a dense one's seqlen pairs);
       --shard keeps its part of the configs */
    int *ncases = malloc((size_t)(ncfg > 0 ? ncfg : 1) * sizeof *ncases);
    if (!ncases)
        oom = 1, ncfg = 0;
    for (int ci = 0; ci < ncfg; ++ci) {
        vl_spec specs[CHECK_MAX_VARLEN_CASES];
        char names[CHECK_MAX_VARLEN_CASES][48];
        ncases[ci] = cfgs[ci].cfg.varlen || cfgs[ci].cfg.paged_kv
                         ? check_varlen_cases(&cfgs[ci], &vo, specs, names)
                         : npairs;
    }
    if (shard_n > 1 && ncases && check_shard(cfgs, ncases, &ncfg, shard_i, shard_n) < 0) {
        free(ncases);
        free(cfgs);
        usage_error("option '--shard': %d parts of %d configs (N must be at most the config "
                    "count)", shard_n, ncfg);
    }
    int nvl = 0, nvl_cases = 0; /* the varlen / paged configurations and their cases */
    for (int ci = 0; ci < ncfg; ++ci)
        if (cfgs[ci].cfg.varlen || cfgs[ci].cfg.paged_kv) {
            nvl++;
            nvl_cases += ncases[ci];
        }
    free(ncases);

    if (list) { /* the cases, without the GPU */
        for (int ci = 0; ci < ncfg; ++ci) {
            if (cfgs[ci].cfg.varlen || cfgs[ci].cfg.paged_kv)
                check_varlen_list(&cfgs[ci], &vo);
            else
                for (int pi = 0; pi < npairs; ++pi)
                    printf("%-40s b%d sq=%d sk=%d\n", cfgs[ci].label, batch, pairs[pi].q,
                           pairs[pi].k);
        }
        printf("%d configs: %d dense x %d seqlen pairs, %d varlen/paged with %d cases", ncfg,
               ncfg - nvl, npairs, nvl, nvl_cases);
        if (shard_n > 1)
            printf(" (shard %d/%d)", shard_i, shard_n);
        printf("\n");
        free(cfgs);
        return oom ? EXIT_FAIL : 0;
    }

    check_state S = {.batch = batch, .uploaded_dtype = -1, .no_descales = no_descales};
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
        if (cc->cfg.varlen || cc->cfg.paged_kv)
            continue; /* varlen_check allocates its own */
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
        size_t nds = (size_t)batch * (size_t)cc->num_heads_k;
        S.max_ds = nds > S.max_ds ? nds : S.max_ds;
    }
    size_t *sizes[] = {&S.max_q, &S.max_k, &S.max_v, &S.max_o, &S.max_lse, &S.max_ds};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (*sizes[i] == 0)
            *sizes[i] = 1; /* no dense case: keep the buffers valid */
    if (!have_seed)
        seed = (uint64_t)time(NULL) * 1000003ull ^ ((uint64_t)getpid() << 20) ^
               (uint64_t)(now_s() * 1e9);
    printf("fa3-gen check: seed %llu (rerun with --seed %llu)", (unsigned long long)seed,
           (unsigned long long)seed);
    if (ncfg > nvl)
        printf(", %d configs x %d seqlen pairs, batch %d", ncfg - nvl, npairs, batch);
    if (nvl)
        printf("%s %d varlen/paged configs, %d cases", ncfg > nvl ? ";" : ",", nvl, nvl_cases);
    if (shard_n > 1)
        printf(" (shard %d/%d)", shard_i, shard_n);
    printf("\n");
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
    S.hds = malloc(S.max_ds * sizeof(float));
    if (!S.qf || !S.kf || !S.vf || !S.h16 || !S.ho_ref || !S.ho_emu || !S.hlse || !S.hlse_ref ||
        !S.hlse_emu || !S.hds) {
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
        {&S.dq, S.max_ds * 4}, {&S.dk, S.max_ds * 4}, {&S.dv, S.max_ds * 4},
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
        if (cc->cfg.varlen || cc->cfg.paged_kv) {
            stop = check_varlen_config(S.ctx, S.drv, seed, cc, &vo, &passed, &failed);
            continue;
        }
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
