/*
 * fa3-gen's command line (see fa3gen.h): the exit codes and how messages are worded, the argument
 * reader (--flag VALUE, --flag=VALUE, strict numbers), the config and compile flags every
 * subcommand takes, and the helpers the subcommands share: the config check and context that end
 * the program with the library's message, the device, the clock.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fa3gen.h"
#include "tools/common/device.h"

const char *const prog = "fa3-gen";

/* ================================================================== messages, exit codes */

void usage_error(const char *fmt, ...)
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
int exit_code_for(fa3_status st)
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
void lib_error(fa3_status st, const char *what)
{
    const char *msg = fa3_last_error_message();
    fprintf(stderr, "%s: %s: %s (%s)\n", prog, what, msg && msg[0] ? msg : fa3_strerror(st),
            fa3_strerror(st));
}

/* First line of the current library message, for one-line reports. */
void first_line(char *dst, size_t size, const char *src)
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

/* Moves to the next argument; returns 0 at the end. */
int cli_next(cli *c)
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

int cli_is(const cli *c, const char *flag)
{
    return strcmp(c->name, flag) == 0;
}

/* A flag that takes no value must not be given one. */
void cli_noval(const cli *c)
{
    if (c->inline_val)
        usage_error("option '%s' takes no value (got '%s')", c->name, c->inline_val);
}

const char *cli_value(cli *c)
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

int cli_int(cli *c, int lo, int hi)
{
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    return (int)parse_ll(name, cli_value(c), lo, hi);
}

double cli_double(cli *c)
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

uint64_t cli_u64(cli *c)
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

const char *dtype_str(fa3_dtype d)
{
    switch (d) {
    case FA3_DTYPE_BF16: return "bf16";
    case FA3_DTYPE_FP16: return "fp16";
    case FA3_DTYPE_E4M3: return "e4m3";
    case FA3_DTYPE_AUTO: return "auto";
    }
    return "?";
}

const char *mask_str(fa3_mask m)
{
    switch (m) {
    case FA3_MASK_NONE: return "none";
    case FA3_MASK_CAUSAL: return "causal";
    case FA3_MASK_LOCAL: return "local";
    }
    return "?";
}

/* --dtype's names; --out-dtype (out = 1) also takes auto (FA3_DTYPE_AUTO). */
static fa3_dtype parse_dtype(const char *flag, const char *s, int out)
{
    if (out && !strcmp(s, "auto"))
        return FA3_DTYPE_AUTO;
    if (!strcmp(s, "bf16"))
        return FA3_DTYPE_BF16;
    if (!strcmp(s, "fp16"))
        return FA3_DTYPE_FP16;
    if (!strcmp(s, "e4m3"))
        return FA3_DTYPE_E4M3; /* the library says whether it is supported */
    usage_error("option '%s': unknown dtype '%s' (%sbf16, fp16, e4m3)", flag, s,
                out ? "auto, " : "");
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

void common_init(common_opts *o)
{
    memset(o, 0, sizeof *o);
    fa3_config_init(&o->cfg);
    fa3_context_options_init(&o->ctx_opts);
}

/* Consumes one config/cache flag; returns 0 if the current flag is not one of them. */
int parse_common(cli *c, common_opts *o)
{
    char flag[64];
    snprintf(flag, sizeof flag, "%s", c->name);
    if (cli_is(c, "--head-dim")) {
        o->cfg.head_dim = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--head-dim-v")) {
        o->cfg.head_dim_v = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--dtype")) {
        o->cfg.dtype = parse_dtype(flag, cli_value(c), 0);
    } else if (cli_is(c, "--out-dtype")) {
        o->cfg.out_dtype = parse_dtype(flag, cli_value(c), 1);
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
    } else if (cli_is(c, "--varlen")) {
        cli_noval(c);
        o->cfg.varlen = 1;
    } else if (cli_is(c, "--paged-kv")) {
        cli_noval(c);
        o->cfg.paged_kv = 1;
    } else if (cli_is(c, "--split-kv")) {
        cli_noval(c);
        o->cfg.split_kv = 1;
    } else if (cli_is(c, "--pack-gqa")) {
        cli_noval(c);
        o->cfg.pack_gqa = 1;
    } else if (cli_is(c, "--block-m")) {
        o->cfg.block_m = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--block-n")) {
        o->cfg.block_n = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--stages")) {
        o->cfg.stages = cli_int(c, INT_MIN, INT_MAX);
    } else if (cli_is(c, "--backend")) {
        o->ctx_opts.backend = parse_backend(flag, cli_value(c));
        return 1; /* not a kernel-config flag */
    } else if (cli_is(c, "--cache-dir")) {
        o->ctx_opts.cache_dir = cli_value(c);
        if (!o->ctx_opts.cache_dir[0]) /* an unset "$DIR" must not mean the default folder */
            usage_error("option '--cache-dir': an empty folder name (leave the option out for the "
                        "default folder)");
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

void unknown_arg(const cli *c)
{
    const char *a = c->argv[c->i];
    if (a[0] == '-')
        usage_error("unknown option '%s'", a);
    usage_error("unexpected argument '%s'", a);
}

/* Validates the configuration (message from fa3_config_canonicalize names the bad value). */
void canonical_or_exit(const fa3_config *cfg, fa3_config *out)
{
    fa3_status st = fa3_config_canonicalize(cfg, out);
    if (st != FA3_OK) {
        lib_error(st, "invalid configuration");
        exit(exit_code_for(st));
    }
}

fa3_context *context_or_exit(const fa3_context_options *opts)
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

void env_warning_report(void)
{
    if (fa3_env_warnings(g_env_warning, sizeof g_env_warning))
        fprintf(stderr, "%s: warning: %s\n", prog, g_env_warning);
}

const char *past_env_warning(const char *w)
{
    size_t n = strlen(g_env_warning);
    if (n && strncmp(w, g_env_warning, n) == 0)
        w += n + (strncmp(w + n, "; ", 2) == 0 ? 2 : 0);
    return w;
}

/* ================================================================== clock, device */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Opens the device (dev_open) and names it on stderr; on failure prints why and returns
   EXIT_NO_GPU. */
int gpu_open(const char *cmd, const fa3_driver **drv)
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
