/*
 * fa3-gen — command-line front end of fa3jit.
 *
 *   fa3-gen --emit-ptx | --emit-cubin FILE | --info   [config flags] [cache flags]
 *   fa3-gen check [--all | config flags] [--seed N] [--quick] ...      (GPU)
 *   fa3-gen bench [--json] [--dtype D] [--head-dim N] [--causal|--non-causal|--both] ... (GPU)
 *   fa3-gen cache ls | clear | warm [--all | config flags] [--jobs N] [--dry-run]
 *
 * Exit status: 0 success; 1 a check failed or an operation failed (writing stdout included); 2 no
 * usable GPU / driver / NVRTC for a GPU subcommand; 64 bad command line or an unsupported
 * configuration value.
 *
 * Uses the library through include/fa3jit.h, plus what src/runtime/tools_api.h lists (the driver
 * table for device memory, events and synchronisation; the cache listing; the environment's
 * warnings; the compile log's diagnostic lines), which libfa3jit.so exports for its own tools.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fa3jit.h"
#include "runtime/tools_api.h"
#include "tools/common/device.h"
#include "tools/common/numerics.h"
#include "tools/common/tolerance.h"

enum { EXIT_FAIL = 1, EXIT_NO_GPU = 2, EXIT_USAGE = 64 };

static const char *prog = "fa3-gen";

/* ================================================================== messages, exit codes */

static void usage_error(const char *fmt, ...) FA3_PRINTF(1, 2);
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    va_end(ap);
    exit(EXIT_USAGE);
}

/* Exit status for a library error: configuration/argument errors are usage errors. */
static int exit_code_for(fa3_status st)
{
    switch (st) {
    case FA3_ERR_INVALID_ARGUMENT:
    case FA3_ERR_BAD_HEAD_DIM:
    case FA3_ERR_BAD_HEAD_DIM_V:
    case FA3_ERR_BAD_DTYPE:
    case FA3_ERR_BAD_MASK:
    case FA3_ERR_BAD_ARCH:
    case FA3_ERR_BAD_BLOCK:
    case FA3_ERR_BAD_BACKEND:
        return EXIT_USAGE;
    case FA3_ERR_NO_DRIVER:
    case FA3_ERR_NO_NVRTC:
        return EXIT_NO_GPU;
    default:
        return EXIT_FAIL;
    }
}

/* Prints "fa3-gen: <what>: <library message> [<status name>]" to stderr. */
static void lib_error(fa3_status st, const char *what)
{
    const char *msg = fa3_last_error_message();
    fprintf(stderr, "%s: %s: %s (%s)\n", prog, what, msg && msg[0] ? msg : fa3_strerror(st),
            fa3_strerror(st));
}

/* First line of the current library message, for one-line reports. */
static void first_line(char *dst, size_t size, const char *src)
{
    if (!src)
        src = "";
    size_t n = strcspn(src, "\n");
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ================================================================== argument parsing */

typedef struct cli {
    int argc;
    char **argv;
    int i;                  /* index of the current argument */
    char name[64];          /* current flag, without any "=value" */
    const char *inline_val; /* value given as --flag=value, else NULL */
} cli;

/* Moves to the next argument; returns 0 at the end. */
static int cli_next(cli *c)
{
    if (++c->i >= c->argc)
        return 0;
    const char *a = c->argv[c->i];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    if (n >= sizeof c->name)
        n = sizeof c->name - 1;
    memcpy(c->name, a, n);
    c->name[n] = '\0';
    c->inline_val = eq ? eq + 1 : NULL;
    return 1;
}

static int cli_is(const cli *c, const char *flag)
{
    return strcmp(c->name, flag) == 0;
}

/* A flag that takes no value must not be given one. */
static void cli_noval(const cli *c)
{
    if (c->inline_val)
        usage_error("option '%s' takes no value (got '%s')", c->name, c->inline_val);
}

static const char *cli_value(cli *c)
{
    if (c->inline_val)
        return c->inline_val;
    if (c->i + 1 >= c->argc)
        usage_error("option '%s' needs a value", c->name);
    return c->argv[++c->i];
}

static long long parse_ll(const char *flag, const char *s, long long lo, long long hi)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        usage_error("option '%s': '%s' is not an integer", flag, s);
    if (v < lo || v > hi)
        usage_error("option '%s': %s is out of range (%lld..%lld)", flag, s, lo, hi);
    return v;
}

static int cli_int(cli *c, int lo, int hi)
{
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    return (int)parse_ll(name, cli_value(c), lo, hi);
}

static double cli_double(cli *c)
{
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    const char *s = cli_value(c);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v))
        usage_error("option '%s': '%s' is not a finite number", name, s);
    return v;
}

static uint64_t cli_u64(cli *c)
{
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    const char *s = cli_value(c);
    char *end = NULL;
    errno = 0;
    if (s[0] == '-')
        usage_error("option '%s': '%s' is not a non-negative integer", name, s);
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end != '\0')
        usage_error("option '%s': '%s' is not a non-negative integer", name, s);
    return (uint64_t)v;
}

static const char *dtype_str(fa3_dtype d)
{
    switch (d) {
    case FA3_DTYPE_BF16: return "bf16";
    case FA3_DTYPE_FP16: return "fp16";
    case FA3_DTYPE_E4M3: return "e4m3";
    }
    return "?";
}

static const char *mask_str(fa3_mask m)
{
    switch (m) {
    case FA3_MASK_NONE: return "none";
    case FA3_MASK_CAUSAL: return "causal";
    case FA3_MASK_LOCAL: return "local";
    }
    return "?";
}

static fa3_dtype parse_dtype(const char *flag, const char *s)
{
    if (!strcmp(s, "bf16"))
        return FA3_DTYPE_BF16;
    if (!strcmp(s, "fp16"))
        return FA3_DTYPE_FP16;
    if (!strcmp(s, "e4m3"))
        return FA3_DTYPE_E4M3; /* the library says whether it is supported */
    usage_error("option '%s': unknown dtype '%s' (bf16, fp16, e4m3)", flag, s);
    return FA3_DTYPE_BF16;
}

static fa3_backend parse_backend(const char *flag, const char *s)
{
    static const struct { const char *name; fa3_backend b; } tab[] = {
        {"auto", FA3_BACKEND_AUTO},
        {"ptx-compiler", FA3_BACKEND_PTX_COMPILER},
        {"nvjitlink", FA3_BACKEND_NVJITLINK},
        {"driver-jit", FA3_BACKEND_DRIVER_JIT},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; ++i)
        if (!strcmp(s, tab[i].name))
            return tab[i].b;
    usage_error("option '%s': unknown backend '%s' (auto, ptx-compiler, nvjitlink, driver-jit)",
                flag, s);
    return FA3_BACKEND_AUTO;
}

/* Flags shared by every mode: the kernel configuration and the context options. */
typedef struct common_opts {
    fa3_config cfg;
    int saw_causal, saw_local;
    int config_flags; /* how many config flags were given (check: single-config mode) */
    fa3_context_options ctx_opts;
} common_opts;

static void common_init(common_opts *o)
{
    memset(o, 0, sizeof *o);
    fa3_config_init(&o->cfg);
    fa3_context_options_init(&o->ctx_opts);
}

/* Consumes one config/cache flag; returns 0 if the current flag is not one of them. */
static int parse_common(cli *c, common_opts *o)
{
    char flag[64];
    snprintf(flag, sizeof flag, "%s", c->name);
    if (cli_is(c, "--head-dim")) {
        o->cfg.head_dim = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--head-dim-v")) {
        o->cfg.head_dim_v = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--dtype")) {
        o->cfg.dtype = parse_dtype(flag, cli_value(c));
    } else if (cli_is(c, "--causal")) {
        cli_noval(c);
        o->saw_causal = 1;
        o->cfg.mask = FA3_MASK_CAUSAL;
    } else if (cli_is(c, "--local")) {
        cli_noval(c);
        o->saw_local = 1;
        o->cfg.mask = FA3_MASK_LOCAL;
    } else if (cli_is(c, "--softcap")) {
        cli_noval(c);
        o->cfg.softcap = 1;
    } else if (cli_is(c, "--block-n")) {
        o->cfg.block_n = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--stages")) {
        o->cfg.stages = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--backend")) {
        o->ctx_opts.backend = parse_backend(flag, cli_value(c));
        return 1; /* not a kernel-config flag */
    } else if (cli_is(c, "--cache-dir")) {
        o->ctx_opts.cache_dir = cli_value(c);
        return 1;
    } else if (cli_is(c, "--no-cache")) {
        cli_noval(c);
        o->ctx_opts.disable_disk_cache = 1;
        return 1;
    } else {
        return 0;
    }
    o->config_flags++;
    if (o->saw_causal && o->saw_local)
        usage_error("options '--causal' and '--local' exclude each other");
    return 1;
}

static void unknown_arg(const cli *c)
{
    const char *a = c->argv[c->i];
    if (a[0] == '-')
        usage_error("unknown option '%s'", a);
    usage_error("unexpected argument '%s'", a);
}

/* Validates the configuration (message from fa3_config_canonicalize names the bad value). */
static void canonical_or_exit(const fa3_config *cfg, fa3_config *out)
{
    fa3_status st = fa3_config_canonicalize(cfg, out);
    if (st != FA3_OK) {
        lib_error(st, "invalid configuration");
        exit(exit_code_for(st));
    }
}

static fa3_context *context_or_exit(const fa3_context_options *opts)
{
    fa3_context *ctx = NULL;
    fa3_status st = fa3_context_create(&ctx, opts);
    if (st != FA3_OK) {
        lib_error(st, "fa3_context_create");
        exit(exit_code_for(st));
    }
    return ctx;
}

/* The environment's bad values (fa3_env_warnings), printed once on stderr at start. Every context
   repeats them at the start of its fa3_context_warning: past_env_warning skips that part. */
static char g_env_warning[1024];

static const char *past_env_warning(const char *w)
{
    size_t n = strlen(g_env_warning);
    if (n && strncmp(w, g_env_warning, n) == 0)
        w += n + (strncmp(w + n, "; ", 2) == 0 ? 2 : 0);
    return w;
}

/* ================================================================== help, version */

static void print_help(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  %s --emit-ptx | --emit-cubin FILE | --info  [CONFIG] [COMPILE]\n"
"  %s check [--all | CONFIG] [--seed N] [--quick] [CHECK OPTIONS] [COMPILE]\n"
"  %s bench [--json] [--dtype D] [--head-dim N] [--causal|--non-causal|--both]\n"
"          [--reps N] [--warmup N] [--seqlen N] [COMPILE]\n"
"  fa3-gen cache ls | clear | warm [--all | CONFIG] [--jobs N]   (fa3-gen cache --help)\n"
"  %s --version | --help\n"
"\n"
"Generates FlashAttention-3 forward kernels for Hopper (sm_90a) as PTX, compiles them to\n"
"cubins, and (check, bench) runs them on the GPU.\n"
"\n"
"Actions (no GPU needed; may be combined, run in this order):\n"
"  --emit-ptx           print the generated PTX to stdout\n"
"  --emit-cubin FILE    compile and write the cubin to FILE ('-' = stdout)\n"
"  --info               compile (or load from the cache) and describe the kernel: config,\n"
"                       backend, registers, spills, stack, shared memory, threads, tile plan,\n"
"                       cache key, source, compile time, compiler warnings\n"
"\n"
"CONFIG (kernel configuration; defaults: head_dim 128, bf16, no mask, no softcap):\n"
"  --head-dim N         Q/K head dimension (64, 96, 128, 192, 256)\n"
"  --head-dim-v N       V/O head dimension (default: the same as head_dim; the one other\n"
"                       value supported is 128 with --head-dim 192)\n"
"  --dtype D            bf16 | fp16 (e4m3: not supported yet)\n"
"  --causal             causal mask (bottom-right aligned)\n"
"  --local              sliding-window mask\n"
"  --softcap            scores pass through softcap*tanh(s/softcap)\n"
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
"  Default set: head_dim 64/128/256 x bf16/fp16 x non-causal/causal, batch 2, 3 heads,\n"
"  seqlen pairs (q,k) including (1,1), (63,63), (128,128), (1000,1000), (4096,4096),\n"
"  (63,1000), (1000,63), (128,4096), (4096,1000), (1,4096), (4096,1).\n"
"  Any CONFIG flag checks that single configuration instead.\n"
"  Pass: every expected element written (O pre-filled with 0xFFFF NaNs, LSE with NaN), nothing\n"
"  written past O/LSE, max|O-O_ref| <= 2*max|O_emul-O_ref| + 1e-3 (O_emul: reference rounding P\n"
"  and O to the dtype), |LSE-LSE_ref| <= 1e-3 (-inf = -inf).\n"
"  --all                every head dim this build supports (64, 96, 128, 192, 256, 192/128\n"
"                       tried) x bf16/fp16 x mask none, causal, local (64,32), (-1,0), (0,-1)\n"
"                       x softcap 0/30 x heads H/H (H = --heads, default 3), 6/3 (GQA 2),\n"
"                       16/2 (GQA 8), 8/1 (MQA), batch 2 (--batch), at the\n"
"                       tile-boundary seqlen pairs (q,k) (1,1), (1,1000), (64,64), (65,129),\n"
"                       (127,255), (128,128), (129,65), (255,1000), (257,127), (1000,257)\n"
"  --quick              skip the seqlen pairs with 4096 (default set)\n"
"  --seed N             random seed (default: from time and pid; printed)\n"
"  --batch N            batch size (default 2)\n"
"  --heads N            query heads (default 3)\n"
"  --heads-k N          K/V heads (default: --heads)\n"
"  --seqlen-q N, --seqlen-k N   one seqlen pair instead of the list (the other defaults to it)\n"
"  --window-left N, --window-right N   local window (default 64 and 32; -1 = unlimited)\n"
"  --softcap-value X    softcap value with --softcap (default 30)\n"
"  Prints one line per case and the summary 'N passed, M failed'.\n"
"\n"
"bench (GPU): FlashAttention-3 paper sweep, batch*seqlen = 16384, heads*head_dim = 2048,\n"
"  seqlen 512..16384, head_dim 64/128/256, causal and non-causal; median of --reps timed\n"
"  runs (CUDA events) after --warmup runs; TFLOP/s = fa3_fwd_flops / time.\n"
"  --json               print a JSON array, one object per line: dtype, head_dim, seqlen,\n"
"                       batch, num_heads, causal, ms, tflops\n"
"  --dtype D            bf16 (default) | fp16\n"
"  --head-dim N         only this head_dim\n"
"  --causal | --non-causal | --both   mask selection (default --both)\n"
"  --seqlen N           only this seqlen (batch = max(1, 16384/N))\n"
"  --layout L           bshd (default: (batch, seqlen, heads, head_dim) contiguous, as\n"
"                       FlashAttention) or bhsd (each head's rows contiguous, as SDPA)\n"
"  --reps N             timed runs (default 20)     --warmup N   untimed runs (default 3)\n"
"  --block-n N, --stages N   tile overrides\n"
"\n"
"Exit status: 0 ok; 1 a check or an operation failed; 2 no usable GPU, CUDA driver or NVRTC;\n"
"64 bad command line or unsupported configuration value.\n",
            prog, prog, prog, prog);
}

static int print_version(void)
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
        printf(" %s%s", fa3_backend_name(all[i]), st == FA3_OK ? "" : " (not built)");
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

/* ================================================================== emit / info */

static int write_file(const char *path, const void *data, size_t size)
{
    if (strcmp(path, "-") == 0) /* main's last check reports a failed write to stdout */
        return fwrite(data, 1, size, stdout) == size ? 0 : EXIT_FAIL;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot open '%s' for writing: %s\n", prog, path, strerror(errno));
        return EXIT_FAIL;
    }
    int bad = fwrite(data, 1, size, f) != size;
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "%s: writing '%s' failed: %s\n", prog, path, strerror(errno));
        return EXIT_FAIL;
    }
    return 0;
}

static const char *source_str(fa3_kernel_source s)
{
    switch (s) {
    case FA3_SOURCE_COMPILED: return "compiled";
    case FA3_SOURCE_DISK: return "disk";
    case FA3_SOURCE_MEMORY: return "memory";
    }
    return "?";
}

static int log_has_warning(const char *log)
{
    for (const char *p = log; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (fa3_log_line_is_diagnostic(p, n))
            return 1;
        p += n + (p[n] == '\n');
    }
    return 0;
}

static void print_count(const char *key, int v, const char *unit)
{
    if (v < 0)
        printf("%-18s unknown\n", key);
    else
        printf("%-18s %d%s\n", key, v, unit);
}

/* How --info and cache ls name a benchmark variant (plan_debug: its FA3JIT_PLAN_DEBUG value). */
#define DEBUG_PLAN_FMT "DEBUG knobs FA3JIT_PLAN_DEBUG=%s (a benchmark variant, not for production)"

static void print_info(const fa3_context *ctx, const fa3_kernel *kern, const fa3_kernel_info *in)
{
    char desc[256];
    if (fa3_config_describe(&in->config, desc, sizeof desc) != FA3_OK)
        snprintf(desc, sizeof desc, "?");
    const char *dir = fa3_context_cache_dir(ctx);
    printf("%-18s %s\n", "config:", desc);
    const char *knobs = fa3_kernel_plan_debug(kern);
    if (knobs[0])
        printf("%-18s " DEBUG_PLAN_FMT "\n", "plan:", knobs);
    else
        printf("%-18s %s\n", "plan:", "default");
    printf("%-18s %s\n", "backend:", fa3_backend_name(in->backend));
    print_count("registers:", in->num_regs, "");
    print_count("spill stores:", in->spill_store_bytes, " bytes");
    print_count("spill loads:", in->spill_load_bytes, " bytes");
    print_count("stack frame:", in->stack_bytes, " bytes");
    printf("%-18s %d bytes\n", "shared memory:", in->shared_bytes);
    printf("%-18s %d\n", "threads:", in->threads);
    printf("%-18s block_m %d, block_n %d, stages %d\n", "tile plan:", in->block_m, in->block_n,
           in->stages);
    printf("%-18s %s\n", "cache key:", in->cache_key);
    printf("%-18s %s\n", "cache dir:", dir ? dir : "(disk cache off)");
    const char *cw = past_env_warning(fa3_context_warning(ctx));
    if (cw && *cw)
        printf("%-18s %s\n", "cache warning:", cw);
    printf("%-18s %s\n", "source:", source_str(in->source));
    printf("%-18s %.1f\n", "compile ms:", in->compile_ms);
    printf("%-18s %zu bytes\n", "cubin size:", in->cubin_size);
    int warn = log_has_warning(in->compile_log);
    printf("%-18s %s\n", "compile warnings:", warn ? "yes" : "no");
    if (warn) {
        /* Show the warning lines themselves. */
        const char *p = in->compile_log;
        while (*p) {
            size_t n = strcspn(p, "\n");
            if (fa3_log_line_is_diagnostic(p, n))
                printf("  %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    }
}

static int cmd_gen(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    int emit_ptx = 0, info = 0;
    const char *cubin_path = NULL;
    cli c = {.argc = argc, .argv = argv, .i = 0};
    while (cli_next(&c)) {
        if (parse_common(&c, &o))
            continue;
        if (cli_is(&c, "--emit-ptx")) {
            cli_noval(&c);
            emit_ptx = 1;
        } else if (cli_is(&c, "--emit-cubin")) {
            cubin_path = cli_value(&c);
        } else if (cli_is(&c, "--info")) {
            cli_noval(&c);
            info = 1;
        } else if (cli_is(&c, "--version")) {
            return print_version();
        } else if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            print_help(stdout);
            return 0;
        } else {
            unknown_arg(&c);
        }
    }
    if (!emit_ptx && !info && !cubin_path)
        usage_error("nothing to do: give --emit-ptx, --emit-cubin FILE, --info, check or bench");

    fa3_config cfg;
    canonical_or_exit(&o.cfg, &cfg);

    if (emit_ptx) {
        char *ptx = NULL;
        size_t len = 0;
        fa3_status st = fa3_emit_ptx(&cfg, &ptx, &len);
        if (st != FA3_OK) {
            lib_error(st, "fa3_emit_ptx");
            return exit_code_for(st);
        }
        int rc = write_file("-", ptx, len);
        fa3_free(ptx);
        if (rc)
            return rc;
    }
    if (!cubin_path && !info)
        return 0;

    fa3_context *ctx = context_or_exit(&o.ctx_opts);
    fa3_kernel *kern = NULL;
    fa3_status st = fa3_jit_get_kernel(ctx, &cfg, &kern);
    if (st != FA3_OK) {
        lib_error(st, "fa3_jit_get_kernel");
        fa3_context_free(ctx);
        return exit_code_for(st);
    }
    int rc = 0;
    if (cubin_path) {
        const void *data = NULL;
        size_t size = 0;
        st = fa3_kernel_get_cubin(kern, &data, &size);
        if (st != FA3_OK) {
            lib_error(st, "fa3_kernel_get_cubin");
            rc = exit_code_for(st);
        } else {
            rc = write_file(cubin_path, data, size);
        }
    }
    if (info && rc == 0) {
        fa3_kernel_info in;
        st = fa3_kernel_get_info(kern, &in);
        if (st != FA3_OK) {
            lib_error(st, "fa3_kernel_get_info");
            rc = exit_code_for(st);
        } else {
            print_info(ctx, kern, &in);
        }
    }
    fa3_context_free(ctx);
    return rc;
}

/* ================================================================== clock */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ================================================================== GPU helpers */

/* Opens the device (dev_open) and names it on stderr; on failure prints why and returns
   EXIT_NO_GPU. */
static int gpu_open(const char *cmd, const fa3_driver **drv)
{
    dev_info d;
    fa3_status st = dev_open(&d);
    if (st != FA3_OK) {
        const char *msg = fa3_last_error_message();
        fprintf(stderr, "%s %s: needs an NVIDIA GPU with a working CUDA driver: %s (%s)\n", prog,
                cmd, msg && msg[0] ? msg : fa3_strerror(st), fa3_strerror(st));
        return EXIT_NO_GPU;
    }
    *drv = d.drv;
    fprintf(stderr, "%s %s: device %s (sm_%d%d)\n", prog, cmd, d.name, d.major, d.minor);
    return 0;
}

/* Fills the whole buffer with 0xFF bytes: NaN for fp32 and for 16-bit floats. */
static fa3_status dfill_nan(const fa3_driver *drv, const dev_buf *b)
{
    return dev_fill32(drv, b->p, b->bytes / 4, 0xffffffffu);
}

/* ================================================================== check */

#define CHECK_GUARD 1024 /* elements after O and LSE that must stay untouched */

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

static int cmd_check(int argc, char **argv)
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
    int ncfg = 0, capcfg = 0, oom = 0;
    if (o.config_flags) {
        check_cfg cc = {.cfg = o.cfg, .num_heads = heads, .num_heads_k = heads_k,
                        .softcap = (float)softcap_value, .window_left = wl, .window_right = wr};
        oom |= add_cfg(&cfgs, &ncfg, &capcfg, cc);
    } else if (all) {
        /* Every supported head-dim pair (those of fa3_supported_configs) x dtype x mask and
           window x softcap x GQA ratio (1, 2, 8, MQA). */
        static const fa3_dtype dts[] = {FA3_DTYPE_BF16, FA3_DTYPE_FP16};
        static const struct { fa3_mask mask; int wl, wr; } masks[] = {
            {FA3_MASK_NONE, -1, -1},  {FA3_MASK_CAUSAL, -1, -1}, {FA3_MASK_LOCAL, 64, 32},
            {FA3_MASK_LOCAL, -1, 0}, {FA3_MASK_LOCAL, 0, -1}};
        const int hh[4][2] = {{heads, heads}, {6, 3}, {16, 2}, {8, 1}};
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
                                            .softcap = (float)softcap_value,
                                            .window_left = masks[mi].wl,
                                            .window_right = masks[mi].wr};
                            cc.cfg = probe;
                            cc.cfg.dtype = dts[di];
                            cc.cfg.mask = masks[mi].mask;
                            cc.cfg.softcap = sc;
                            oom |= add_cfg(&cfgs, &ncfg, &capcfg, cc);
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
                    check_cfg cc = {.num_heads = heads, .num_heads_k = heads_k,
                                    .softcap = (float)softcap_value, .window_left = wl,
                                    .window_right = wr};
                    fa3_config_init(&cc.cfg);
                    cc.cfg.head_dim = hds[hi];
                    cc.cfg.dtype = dts[di];
                    cc.cfg.mask = m ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
                    oom |= add_cfg(&cfgs, &ncfg, &capcfg, cc);
                }
            }
        }
    }

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

/* ================================================================== bench */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int cmd_bench(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    o.cfg.head_dim = 0; /* 0 = all three */
    int json = 0, reps = 20, warmup = 3, causal_sel = 2 /* 0 no, 1 yes, 2 both */, one_seqlen = 0;
    int bhsd = 0; /* --layout bhsd: each head's rows contiguous, as PyTorch SDPA's inputs */
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
    dev_buf q = {0}, k = {0}, v = {0}, ob = {0};
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
        for (int t = 0; t < 3 && st == FA3_OK; ++t) {
            for (size_t i = 0; i < n; ++i) {
                float x = pool[(i + (size_t)t * 1234567u) & (pool_n - 1)];
                h16[i] = f32_to_dtype(o.cfg.dtype, x);
            }
            st = FA3_CU(drv, cuMemcpyHtoD(dst[t]->p, h16, n * 2));
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
                for (int w = 0; w < warmup && st == FA3_OK; ++w)
                    st = fa3_fwd(kern, &a, NULL);
                if (st == FA3_OK)
                    st = FA3_CU(drv, cuCtxSynchronize());
                if (st == FA3_OK)
                    st = FA3_CU(drv, cuEventRecord(ev[0], NULL));
                for (int r = 0; r < reps && st == FA3_OK; ++r) {
                    st = fa3_fwd(kern, &a, NULL);
                    if (st == FA3_OK)
                        st = FA3_CU(drv, cuEventRecord(ev[r + 1], NULL));
                }
                if (st == FA3_OK)
                    st = FA3_CU(drv, cuEventSynchronize(ev[reps]));
                for (int r = 0; r < reps && st == FA3_OK; ++r)
                    st = FA3_CU(drv, cuEventElapsedTime(&ms[r], ev[r], ev[r + 1]));
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
                qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
                double med = reps % 2 ? ms[reps / 2] : 0.5 * ((double)ms[reps / 2 - 1] +
                                                              (double)ms[reps / 2]);
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
    fa3_context_free(ctx);
    free(ev);
    free(ms);
    free(pool);
    free(h16);
    return rc;
}

/* ================================================================== cache (ls, clear, warm) */

typedef struct cache_args {
    common_opts o;
    const char *action; /* "ls", "clear" or "warm" */
    int all;            /* warm: every supported config */
    int dry_run;        /* warm: list the configs, compile nothing */
    int jobs;           /* warm: compiles in parallel */
    int help;
} cache_args;

static void print_cache_help(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  %s cache ls    [--cache-dir DIR]\n"
"  %s cache clear [--cache-dir DIR]\n"
"  %s cache warm  [--all | CONFIG] [--jobs N] [--dry-run] [COMPILE]\n"
"\n"
"Manages the disk cache of compiled kernels (default folder: $FA3JIT_CACHE_DIR,\n"
"$XDG_CACHE_HOME/fa3jit, ~/.cache/fa3jit).\n"
"  ls      one line per entry: config, backend, size, age, key (entries that fail the\n"
"          loader's checks, header and payload checksums included, are shown as invalid:\n"
"          they are ignored and rebuilt on use; benchmark variants built under\n"
"          FA3JIT_PLAN_DEBUG are marked DEBUG, with their knobs)\n"
"  clear   removes fa3jit's files (<key>.fa3k entries, <key>.lock locks, .<key>.tmp.*\n"
"          temporaries) and nothing else\n"
"  warm    compiles into the cache the configuration given by the CONFIG flags (as for\n"
"          --emit-ptx; default hd128 bf16), or with --all every configuration the library\n"
"          supports (fa3_supported_configs); a progress bar on a terminal, plain lines\n"
"          otherwise. Fails when a kernel does not compile or its entry is not on disk.\n"
"  --jobs N     compile N configurations at a time (default 1)\n"
"  --dry-run    print the configurations warm would compile\n"
"CONFIG and COMPILE: as in '%s --help'.\n",
            prog, prog, prog, prog);
}

/* Parses "fa3-gen cache ACTION [options]" (argv[1] is "cache"). Exits with EXIT_USAGE on a bad
   command line. Kept apart from the actions so that tests/fuzz can drive it. */
static void cache_parse(int argc, char **argv, cache_args *a)
{
    memset(a, 0, sizeof *a);
    common_init(&a->o);
    a->jobs = 1;
    cli c = {.argc = argc, .argv = argv, .i = 1};
    while (cli_next(&c)) {
        if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            cli_noval(&c);
            a->help = 1;
            return;
        }
        if (parse_common(&c, &a->o))
            continue;
        if (cli_is(&c, "--all")) {
            cli_noval(&c);
            a->all = 1;
        } else if (cli_is(&c, "--dry-run")) {
            cli_noval(&c);
            a->dry_run = 1;
        } else if (cli_is(&c, "--jobs") || cli_is(&c, "-j")) {
            a->jobs = cli_int(&c, 1, 256);
        } else if (c.argv[c.i][0] != '-' && !a->action) {
            const char *s = c.argv[c.i];
            if (!strcmp(s, "ls") || !strcmp(s, "list"))
                a->action = "ls";
            else if (!strcmp(s, "clear"))
                a->action = "clear";
            else if (!strcmp(s, "warm"))
                a->action = "warm";
            else
                usage_error("unknown cache action '%s' (ls, clear, warm)", s);
        } else {
            unknown_arg(&c);
        }
    }
    if (!a->action)
        usage_error("cache: give an action: ls, clear or warm");
    if (strcmp(a->action, "warm") != 0 &&
        (a->all || a->dry_run || a->jobs != 1 || a->o.config_flags ||
         a->o.ctx_opts.backend != FA3_BACKEND_AUTO || a->o.ctx_opts.disable_disk_cache))
        usage_error("cache %s: only --cache-dir applies (CONFIG, COMPILE, --all, --jobs and "
                    "--dry-run are for 'cache warm')", a->action);
    if (a->all && a->o.config_flags)
        usage_error("cache warm: --all and configuration flags exclude each other");
    if (a->o.ctx_opts.disable_disk_cache)
        usage_error("cache warm: --no-cache leaves nothing to warm");
    if (a->o.ctx_opts.backend == FA3_BACKEND_DRIVER_JIT)
        usage_error("cache warm: backend driver-jit compiles at load time and has no cubin to "
                    "cache");
}

/* "12.3 KiB" */
static void human_size(char *buf, size_t size, uint64_t n)
{
    if (n < 1024)
        snprintf(buf, size, "%llu B", (unsigned long long)n);
    else if (n < (uint64_t)1 << 20)
        snprintf(buf, size, "%.1f KiB", (double)n / 1024.0);
    else if (n < (uint64_t)1 << 30)
        snprintf(buf, size, "%.1f MiB", (double)n / 1048576.0);
    else
        snprintf(buf, size, "%.1f GiB", (double)n / 1073741824.0);
}

/* "42s", "5m", "3h", "12d" */
static void human_age(char *buf, size_t size, int64_t then)
{
    int64_t s = (int64_t)time(NULL) - then;
    if (s < 0)
        s = 0;
    if (s < 60)
        snprintf(buf, size, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    else if (s < 86400)
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
}

/* The folder ls/clear work on: --cache-dir as given, else the one a context resolves to. NULL
   (after saying why) when the disk cache is off and no folder was named. */
static char *cache_folder(const cache_args *a)
{
    if (a->o.ctx_opts.cache_dir && a->o.ctx_opts.cache_dir[0])
        return strdup(a->o.ctx_opts.cache_dir);
    fa3_context *ctx = context_or_exit(&a->o.ctx_opts);
    const char *dir = fa3_context_cache_dir(ctx);
    char *out = dir ? strdup(dir) : NULL;
    if (!dir) {
        const char *w = past_env_warning(fa3_context_warning(ctx));
        fprintf(stderr, "%s: cache %s: the disk cache is off (%s); name a folder with "
                "--cache-dir DIR\n", prog, a->action,
                w[0] ? w : "FA3JIT_CACHE_DISABLE is set");
    }
    fa3_context_free(ctx);
    return out;
}

static int cmp_listed(const void *pa, const void *pb)
{
    const fa3_tools_cache_item *a = pa, *b = pb;
    if (a->valid != b->valid)
        return b->valid - a->valid;
    if (a->valid) {
        const fa3_config *x = &a->config, *y = &b->config;
        int d[] = {x->head_dim - y->head_dim, y->head_dim_v - x->head_dim_v,
                   (int)x->dtype - (int)y->dtype, (int)x->mask - (int)y->mask,
                   x->softcap - y->softcap, x->block_n - y->block_n, x->stages - y->stages,
                   strcmp(a->plan_debug, b->plan_debug), /* default first */
                   (int)a->backend - (int)b->backend};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i)
            if (d[i])
                return d[i];
    }
    return strcmp(a->name, b->name);
}

/* One line of cache ls: its columns as text. */
typedef struct ls_row {
    char desc[160], backend[24], size[32], age[32], key[33];
    const char *plan_debug; /* "" or a benchmark variant's knobs (after the key) */
} ls_row;

static int cache_ls(const cache_args *a)
{
    char *dir = cache_folder(a);
    if (!dir)
        return EXIT_FAIL;
    fa3_tools_cache_item *files = NULL;
    size_t n = 0;
    fa3_status st = fa3_tools_cache_list(dir, &files, &n);
    if (st != FA3_OK) {
        lib_error(st, "cache ls");
        free(dir);
        return EXIT_FAIL;
    }
    qsort(files, n, sizeof *files, cmp_listed);
    ls_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free(files);
        free(dir);
        return EXIT_FAIL;
    }
    /* The rows first, then each column as wide as its widest cell: configs differ in length. */
    size_t entries = 0, invalid = 0, debug = 0, locks = 0, temps = 0;
    int w_desc = 0, w_backend = 0, w_size = 0, w_age = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
        const fa3_tools_cache_item *f = &files[i];
        bytes += f->file_size;
        if (f->kind == FA3_CACHE_FILE_LOCK) {
            locks++;
            continue;
        }
        if (f->kind == FA3_CACHE_FILE_TEMP) {
            temps++;
            continue;
        }
        ls_row *r = &rows[entries++];
        r->plan_debug = "";
        human_size(r->size, sizeof r->size, f->file_size);
        memcpy(r->key, f->name, 32);
        r->key[32] = '\0';
        if (f->valid) {
            fa3_config_describe(&f->config, r->desc, sizeof r->desc);
            snprintf(r->backend, sizeof r->backend, "%s", fa3_backend_name(f->backend));
            human_age(r->age, sizeof r->age, f->created);
            r->plan_debug = f->plan_debug;
            if (r->plan_debug[0]) {
                debug++;
                size_t dl = strlen(r->desc);
                snprintf(r->desc + dl, sizeof r->desc - dl, " DEBUG");
            }
        } else {
            invalid++;
            snprintf(r->desc, sizeof r->desc, "(invalid: %s)", f->why ? f->why : "?");
            snprintf(r->backend, sizeof r->backend, "-");
            human_age(r->age, sizeof r->age, f->mtime);
        }
#define WIDEN(w, cell) w = (int)strlen(cell) > w ? (int)strlen(cell) : w
        WIDEN(w_desc, r->desc);
        WIDEN(w_backend, r->backend);
        WIDEN(w_size, r->size);
        WIDEN(w_age, r->age);
#undef WIDEN
    }
    for (size_t i = 0; i < entries; ++i) {
        printf("%-*s  %-*s  %*s  %*s  %s", w_desc, rows[i].desc, w_backend, rows[i].backend,
               w_size, rows[i].size, w_age, rows[i].age, rows[i].key);
        if (rows[i].plan_debug[0])
            printf("  " DEBUG_PLAN_FMT, rows[i].plan_debug);
        printf("\n");
    }
    char total[32], variants[96] = "";
    human_size(total, sizeof total, bytes);
    if (debug)
        snprintf(variants, sizeof variants, "; %zu DEBUG: FA3JIT_PLAN_DEBUG variant%s, not for "
                 "production", debug, debug == 1 ? "" : "s");
    printf("%zu entr%s (%zu invalid: ignored and rebuilt on use%s), %zu lock%s, %zu temporary "
           "file%s, %s in %s\n", entries, entries == 1 ? "y" : "ies", invalid, variants, locks,
           locks == 1 ? "" : "s", temps, temps == 1 ? "" : "s", total, dir);
    free(rows);
    free(files);
    free(dir);
    return 0;
}

static int cache_clear(const cache_args *a)
{
    char *dir = cache_folder(a);
    if (!dir)
        return EXIT_FAIL;
    size_t removed = 0;
    uint64_t bytes = 0;
    fa3_status st = fa3_cache_clear(dir, &removed, &bytes);
    char total[32];
    human_size(total, sizeof total, bytes);
    printf("removed %zu file%s (%s) from %s\n", removed, removed == 1 ? "" : "s", total, dir);
    if (st != FA3_OK)
        lib_error(st, "cache clear");
    free(dir);
    return st == FA3_OK ? 0 : EXIT_FAIL;
}

typedef struct warm_state {
    fa3_context *ctx;
    const fa3_config *cfgs;
    char (*keys)[33]; /* per config, "" if it failed */
    int n, next, done, failed, compiled, loaded;
    int debug;        /* kernels of a debug plan (FA3JIT_PLAN_DEBUG) */
    char knobs[256];  /* the knobs of one of them */
    int bar;          /* progress bar (stdout is a terminal) */
    pthread_mutex_t mu;
} warm_state;

/* Columns of the terminal on stdout: its window size, else $COLUMNS (a plain positive number),
   else 80. Asked at each redraw, so a resized window is followed. */
static int terminal_columns(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *s = getenv("COLUMNS");
    char *end = NULL;
    long v = s && s[0] >= '0' && s[0] <= '9' ? strtol(s, &end, 10) : 0;
    return end && *end == '\0' && v > 0 && v <= 10000 ? (int)v : 80;
}

/* Redraws the progress line in place: "[###...] done/n label", in the terminal's width less
   one column (a line that reached the last column would wrap, and \r would then redraw only its
   second half). The bar shrinks from 30 to 10 cells to make room for the label; whatever still
   does not fit is cut. */
static void warm_bar(const warm_state *w, const char *label)
{
    enum { MAX_BAR = 30, MIN_BAR = 10 };
    char counts[32];
    snprintf(counts, sizeof counts, "%d/%d", w->done, w->n);
    int room = terminal_columns() - 1;
    int cells = room - (int)(strlen("[] ") + strlen(counts) + 1 + strlen(label));
    cells = cells > MAX_BAR ? MAX_BAR : cells < MIN_BAR ? MIN_BAR : cells;
    int fill = w->n ? w->done * cells / w->n : cells;
    char bar[MAX_BAR + 1];
    for (int i = 0; i < cells; ++i)
        bar[i] = i < fill ? '#' : '.';
    bar[cells] = '\0';
    char line[512];
    snprintf(line, sizeof line, "[%s] %s %s", bar, counts, label);
    printf("\r\033[K%.*s", room > 0 ? room : 0, line);
    fflush(stdout);
}

static void *warm_worker(void *arg)
{
    warm_state *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int i = w->next < w->n ? w->next++ : -1;
        pthread_mutex_unlock(&w->mu);
        if (i < 0)
            return NULL;
        char desc[128];
        fa3_config_describe(&w->cfgs[i], desc, sizeof desc);
        double t0 = now_s();
        fa3_kernel *k = NULL;
        fa3_kernel_info in;
        fa3_status st = fa3_jit_get_kernel(w->ctx, &w->cfgs[i], &k);
        if (st == FA3_OK)
            st = fa3_kernel_get_info(k, &in);
        char err[512] = "";
        if (st != FA3_OK)
            first_line(err, sizeof err, fa3_last_error_message());
        double secs = now_s() - t0;

        pthread_mutex_lock(&w->mu);
        w->done++;
        if (st != FA3_OK) {
            w->failed++;
            w->keys[i][0] = '\0';
        } else {
            memcpy(w->keys[i], in.cache_key, 33);
            const char *knobs = fa3_kernel_plan_debug(k);
            if (knobs[0] && w->debug++ == 0)
                snprintf(w->knobs, sizeof w->knobs, "%s", knobs);
            if (in.source == FA3_SOURCE_COMPILED)
                w->compiled++;
            else
                w->loaded++;
        }
        const char *how = st != FA3_OK ? "FAILED"
                          : in.source == FA3_SOURCE_COMPILED ? "compiled" : "already cached";
        if (w->bar) {
            if (st != FA3_OK)
                printf("\r\033[K%s: FAILED: %s (%s)\n", desc, err, fa3_strerror(st));
            warm_bar(w, desc);
        } else {
            printf("[%d/%d] %s: %s", w->done, w->n, desc, how);
            if (st != FA3_OK)
                printf(": %s (%s)\n", err, fa3_strerror(st));
            else
                printf(" (%.2f s)\n", secs);
            fflush(stdout);
        }
        pthread_mutex_unlock(&w->mu);
    }
}

static int cache_warm(const cache_args *a)
{
    fa3_config one;
    if (!a->all)
        canonical_or_exit(&a->o.cfg, &one);
    int n = a->all ? fa3_supported_configs(NULL, 0) : 1;
    fa3_config *cfgs = calloc((size_t)(n > 0 ? n : 1), sizeof *cfgs);
    if (!cfgs) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return EXIT_FAIL;
    }
    if (a->all)
        n = fa3_supported_configs(cfgs, n);
    else
        cfgs[0] = one;
    if (a->dry_run) {
        for (int i = 0; i < n; ++i) {
            char desc[128];
            fa3_config_describe(&cfgs[i], desc, sizeof desc);
            printf("%s\n", desc);
        }
        printf("%d configuration%s\n", n, n == 1 ? "" : "s");
        free(cfgs);
        return 0;
    }
    fa3_context *ctx = context_or_exit(&a->o.ctx_opts);
    const char *dir = fa3_context_cache_dir(ctx);
    if (!dir) {
        const char *w = past_env_warning(fa3_context_warning(ctx));
        fprintf(stderr, "%s: cache warm: the disk cache is off (%s): nothing to warm\n", prog,
                w[0] ? w : "FA3JIT_CACHE_DISABLE is set");
        fa3_context_free(ctx);
        free(cfgs);
        return EXIT_FAIL;
    }
    /* A folder that cannot be one (a file, or a path through a file) is refused before any
       compile; a missing folder is created by the first store. A folder the library only warns
       about (read-only, ...) is reported after the run as entries "not on disk". */
    struct stat sb;
    const char *bad_dir = stat(dir, &sb) == 0 ? (S_ISDIR(sb.st_mode) ? NULL : "not a directory")
                          : errno == ENOENT ? NULL : strerror(errno);
    if (bad_dir) {
        fprintf(stderr, "%s: cache warm: cannot use '%s' as the cache folder: %s\n", prog, dir,
                bad_dir);
        fa3_context_free(ctx);
        free(cfgs);
        return EXIT_FAIL;
    }
    warm_state w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.cfgs = cfgs;
    w.n = n;
    w.keys = calloc((size_t)n, sizeof *w.keys);
    w.bar = isatty(STDOUT_FILENO);
    pthread_mutex_init(&w.mu, NULL);
    int jobs = a->jobs < n ? a->jobs : n;
    pthread_t *th = calloc((size_t)jobs, sizeof *th);
    if (!w.keys || !th) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free(w.keys);
        free(th);
        free(cfgs);
        fa3_context_free(ctx);
        return EXIT_FAIL;
    }
    printf("warming %d configuration%s into %s (backend %s, %d job%s)\n", n, n == 1 ? "" : "s",
           dir, fa3_backend_name(fa3_context_backend(ctx)), jobs, jobs == 1 ? "" : "s");
    fflush(stdout);
    double t0 = now_s();
    if (w.bar)
        warm_bar(&w, "");
    int started = 0;
    for (int j = 1; j < jobs; ++j)
        if (pthread_create(&th[started], NULL, warm_worker, &w) == 0)
            started++;
    warm_worker(&w); /* this thread is one of the jobs */
    for (int j = 0; j < started; ++j)
        pthread_join(th[j], NULL);
    if (w.bar)
        printf("\r\033[K");

    /* Every kernel that built must now have a valid entry on disk. */
    int missing = 0;
    fa3_tools_cache_item *files = NULL;
    size_t nf = 0;
    if (fa3_tools_cache_list(dir, &files, &nf) != FA3_OK)
        nf = 0;
    for (int i = 0; i < n; ++i) {
        if (!w.keys[i][0])
            continue;
        int found = 0;
        for (size_t f = 0; f < nf && !found; ++f)
            found = files[f].kind == FA3_CACHE_FILE_ENTRY && files[f].valid &&
                    strcmp(files[f].key, w.keys[i]) == 0;
        missing += !found;
    }
    free(files);
    printf("warm: %d configuration%s, %d compiled, %d already cached, %d failed, %d not on disk "
           "(%.1f s)\n", n, n == 1 ? "" : "s", w.compiled, w.loaded, w.failed, missing,
           now_s() - t0);
    const char *warning = past_env_warning(fa3_context_warning(ctx));
    if (warning[0])
        fprintf(stderr, "%s: warning: %s\n", prog, warning);
    if (w.debug)
        fprintf(stderr, "%s: warning: %d kernel%s warmed with " DEBUG_PLAN_FMT "\n", prog,
                w.debug, w.debug == 1 ? "" : "s", w.knobs);
    pthread_mutex_destroy(&w.mu);
    free(th);
    free(w.keys);
    free(cfgs);
    fa3_context_free(ctx);
    return w.failed || missing ? EXIT_FAIL : 0;
}

static int cmd_cache(int argc, char **argv)
{
    cache_args a;
    cache_parse(argc, argv, &a);
    if (a.help) {
        print_cache_help(stdout);
        return 0;
    }
    if (!strcmp(a.action, "ls"))
        return cache_ls(&a);
    if (!strcmp(a.action, "clear"))
        return cache_clear(&a);
    return cache_warm(&a);
}

/* ================================================================== main */

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
    if (fa3_env_warnings(g_env_warning, sizeof g_env_warning))
        fprintf(stderr, "%s: warning: %s\n", prog, g_env_warning);
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
