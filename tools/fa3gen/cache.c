/*
 * fa3-gen cache ls | clear | warm: the cache subcommand's command line and help, and the two
 * actions that read the folder: ls (one line per entry, columns as wide as their widest cell,
 * invalid entries and benchmark variants marked, then a summary) and clear (fa3jit's files only).
 * warm is cache_warm.c. The listing comes through fa3_tools_cache_list (runtime/tools_api.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fa3gen.h"

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
"          FA3JIT_PLAN_DEBUG are marked DEBUG, with their knobs); the summary counts\n"
"          index files too (which entry a config's kernel is in, for a warm load that\n"
"          skips generating the PTX)\n"
"  clear   removes fa3jit's files (<key>.fa3k entries, <key>.fa3x index files,\n"
"          <key>.lock locks, .<key>.tmp.* temporaries) and nothing else\n"
"  warm    compiles into the cache the configuration given by the CONFIG flags (as for\n"
"          --emit-ptx; default hd128 bf16), or with --all every configuration the library\n"
"          supports (fa3_supported_configs); a progress bar on a terminal, plain lines\n"
"          otherwise. Fails when a kernel does not compile or its entry is not on disk.\n"
"  --jobs N     compile N configurations at a time (default 1)\n"
"  --dry-run    print the configurations warm would compile\n"
"CONFIG and COMPILE: as in '%s --help'.\n",
            prog, prog, prog, prog);
}

/* Parses "fa3-gen cache ACTION [options]" (fa3gen.h). */
void cache_parse(int argc, char **argv, cache_args *a)
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
    size_t entries = 0, invalid = 0, debug = 0, locks = 0, temps = 0, indexes = 0;
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
        if (f->kind == FA3_CACHE_FILE_INDEX) {
            indexes++;
            continue;
        }
        ls_row *r = &rows[entries++];
        r->plan_debug = "";
        human_size(r->size, sizeof r->size, f->file_size);
        memcpy(r->key, f->name, 32);
        r->key[32] = '\0';
        if (f->valid) {
            /* a split-KV combine kernel: its own config (head_dim_v, out dtype, varlen) */
            const int comb = f->kernel_kind == FA3_KERNEL_COMBINE;
            if (comb)
                snprintf(r->desc, sizeof r->desc, "combine ");
            fa3_config_describe(&f->config, r->desc + (comb ? 8 : 0),
                                sizeof r->desc - (comb ? 8 : 0));
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
    printf("%zu entr%s (%zu invalid: ignored and rebuilt on use%s), %zu index file%s, %zu lock%s, "
           "%zu temporary file%s, %s in %s\n", entries, entries == 1 ? "y" : "ies", invalid,
           variants, indexes, indexes == 1 ? "" : "s", locks, locks == 1 ? "" : "s", temps,
           temps == 1 ? "" : "s", total, dir);
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

int cmd_cache(int argc, char **argv)
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
