/*
 * fa3-gen cache warm [--all | CONFIG] [--jobs N] [--dry-run] [COMPILE]: compiles the configuration
 * the flags give, or every supported one, into the disk cache, N at a time (worker threads over one
 * context), with a progress bar fitted to the terminal (plain lines when stdout is not one), then
 * checks that every kernel that built has a valid entry on disk. --dry-run lists the
 * configurations only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fa3gen.h"

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

int cache_warm(const cache_args *a)
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
