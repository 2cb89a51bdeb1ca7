/*
 * test_ptxas: CI's compile gate. For every supported config (head_dim 64/96/128/192/256 and
 * (192, 128) × bf16/fp16/e4m3 × mask none/causal/local × softcap 0/1, e4m3 with fp16 output, the
 * knob variants that change the code, split-KV kernels and block_m 64 ones) the generated PTX
 * is compiled whole-program by the toolkit's offline ptxas (`ptxas -arch=sm_90a -O3 -v`, path
 * $PTXAS or <cuda_dir>/bin/ptxas), and the test fails on:
 *   - a non-zero exit status or no cubin for the entry function;
 *   - any diagnostic line: one containing "warning", "Performance Loss" or a "(Cnnnn)" code.
 *     ptxas prints C7504/C7508 (setmaxnreg ignored) and C7510–C7515 (wgmma serialized) as
 *     "ptxas info : (C7508) Potential Performance Loss: ...", not as warnings;
 *   - non-zero "bytes spill stores", "bytes spill loads" or "bytes stack frame".
 * When the library has the PTX Compiler API built in, each config also goes through
 * fa3_jit_get_kernel with FA3_BACKEND_PTX_COMPILER (in parallel with ptxas) under the same rules,
 * read from fa3_kernel_info and the compile log. Split-KV's combine kernel (FA3_KERNEL_COMBINE: one
 * per head_dim_v × bf16/fp16 output × varlen) goes through the same gate, its PTX Compiler API
 * compile through fa3_compile_ptx.
 * A config the library refuses at canonicalisation is skipped with a note, except the default set
 * (64/128/256 × bf16/fp16 × none/causal, no softcap), which must always be accepted.
 * Prints per config: registers, spills, stack, static and dynamic shared memory.
 * FA3JIT_TEST_FILTER restricts the run to the cases whose names match (e.g. "*bm64*").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/generate.h"
#include "runtime/compile.h"
#include "runtime/op.h"
#include "fa3jit.h"
#include "fa3jit_build_config.h"
#include "kernel_abi.h"

extern char **environ;

static char g_tmpdir[256];
static const char *g_ptxas;
static fa3_context *g_ptxc_ctx; /* PTX Compiler API backend, memory-only; NULL if not built in */
static int g_failed_configs;

typedef struct ptxas_case {
    char name[64];
    fa3_config cfg;
    int must_accept; /* in the default set */
    const char *knobs; /* FA3JIT_PLAN_DEBUG while planning (benchmark variants), or NULL */
    fa3_kernel_kind kind; /* FA3_KERNEL_FWD, or the split config's FA3_KERNEL_COMBINE */
} ptxas_case;

/* (head_dim, head_dim_v) x dtype x mask x softcap, then the benchmark-knob variants */
/* NFP8X: e4m3 beyond the table: fp16 output, the dbg_no_vt knob at hd 128 and 256, and the
   two loop bodies with the tile's ends apart (mask_branch=0,merge_ends=0: e4m3's kernel before
   session 29) */
/* NSPLIT: split-KV (every head-dim pair and dtype, causal and local with softcap: the split
   kernels' largest; rectangular and varlen Q; all 432 listed split configs compile alike, 0
   spills, checked at their introduction); NCOMBINE: the combine kernels, head_dim_v 64/96/128/192/256 × bf16/fp16 ×
   varlen 0/1 */
/* NPACK: packed GQA, every head-dim pair and dtype: causal softcap (split 0, dense K/V) and local
   softcap split-KV with paged K/V (the packed kernels' largest: per-row query/head division,
   5-D Q loads, paged runs) */
/* NBM64: block_m 64 (one consumer warpgroup), every head-dim pair and dtype in four layouts with
   the mask and softcap code (the largest kernels): split-KV causal dense and local paged, one pass
   local dense and causal paged. All 432 block_m 64 configs (pack_gqa 0) compiled alike, 0 spills,
   no diagnostic, 255 registers, at its introduction (a one-off sweep, docs/kernel.md).
   NDECODE: the listed decode family (pack_gqa 1, block_m 64, split-KV), every head-dim pair and
   dtype, causal softcap dense and local softcap paged.
   NBM128: head_dim 64's two-consumer tile (block_m 128, fa3_fwd_tune's short causal choice),
   bf16/fp16 x causal/local with softcap, dense and varlen + paged (its largest).
   NBN64: head_dim 256's 64-key blocks (block_n 64, fa3_fwd_tune's short causal choice), the same
   eight layouts. */
enum { NDEFAULT = 6 * 3 * 3 * 2 * 2, NKNOB = 4, NKNOBSETS = 27, NFP8X = 8, NSPLIT = 6 * 3 * 2 * 2,
       NCOMBINE = 5 * 2 * 2, NPACK = 6 * 3 * 2, NBM64 = 6 * 3 * 4, NDECODE = 6 * 3 * 2,
       NBM128 = 2 * 2 * 2, NBN64 = 2 * 2 * 2,
       NCASES = NDEFAULT + NKNOBSETS * NKNOB + NFP8X + NSPLIT + NCOMBINE + NPACK + NBM64 +
                NDECODE + NBM128 + NBN64 };
static ptxas_case g_cases[NCASES];

/* Resources read from a ptxas -v log (-1 = not found). */
typedef struct resources {
    int regs, spill_st, spill_ld, stack, smem;
    int entry_found;
    int warnings;
    char first_warning[512];
} resources;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The integer right before `what` on line (e.g. "0 bytes spill stores"), or -1. */
static int number_before(const char *line, const char *what)
{
    const char *p = strstr(line, what);
    if (!p)
        return -1;
    while (p > line && p[-1] == ' ')
        p--;
    const char *end = p;
    while (p > line && isdigit((unsigned char)p[-1]))
        p--;
    if (p == end)
        return -1;
    return atoi(p);
}

static int contains_nocase(const char *s, const char *word)
{
    size_t n = strlen(word);
    for (; *s; s++)
        if (strncasecmp(s, word, n) == 0)
            return 1;
    return 0;
}

/* A compiler diagnostic: "warning", "Performance Loss", or a "(C1234)" message code. */
static int is_diagnostic(const char *line)
{
    if (contains_nocase(line, "warning") || strstr(line, "Performance Loss"))
        return 1;
    for (const char *p = strstr(line, "(C"); p; p = strstr(p + 1, "(C")) {
        int d = 0;
        while (isdigit((unsigned char)p[2 + d]))
            d++;
        if (d >= 4 && p[2 + d] == ')')
            return 1;
    }
    return 0;
}

/* The first diagnostic line of a whole log (copied into out), or 0 if none. */
static int first_diagnostic(const char *log, char *out, size_t size)
{
    for (const char *p = log; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        if (is_diagnostic(line)) {
            snprintf(out, size, "%.500s", line);
            return 1;
        }
        p = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* Scans a ptxas verbose log: every function's spills/stack (the max is kept: any non-zero fails),
   registers and static smem of the entry, warning lines. */
static void parse_log_entry(const char *log, resources *r, const char *entry_name)
{
    memset(r, 0, sizeof *r);
    r->regs = -1;
    r->smem = 0; /* ptxas prints "N bytes smem" only when N > 0 */
    r->spill_st = r->spill_ld = r->stack = -1;
    char entry[128];
    snprintf(entry, sizeof entry, "entry function '%s'", entry_name);
    const char *p = log;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        if (is_diagnostic(line)) {
            if (r->warnings++ == 0)
                snprintf(r->first_warning, sizeof r->first_warning, "%.500s", line);
        }
        if (strstr(line, entry))
            r->entry_found = 1;
        int v;
        if ((v = number_before(line, "bytes stack frame")) > r->stack)
            r->stack = v;
        if ((v = number_before(line, "bytes spill stores")) > r->spill_st)
            r->spill_st = v;
        if ((v = number_before(line, "bytes spill loads")) > r->spill_ld)
            r->spill_ld = v;
        const char *u = strstr(line, "Used ");
        if (u && strstr(u, " registers"))
            r->regs = atoi(u + 5);
        if ((v = number_before(line, "bytes smem")) >= 0)
            r->smem = v;
        p += len + (nl ? 1 : 0);
    }
}

static void parse_log(const char *log, resources *r)
{
    parse_log_entry(log, r, FA3_KERNEL_NAME);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s)
        s[n] = 0;
    return s;
}

static pid_t spawn_ptxas(const char *ptx, const char *cubin, const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {(char *)g_ptxas, "-arch=sm_90a", "-O3", "-v", (char *)ptx, "-o",
                    (char *)cubin, NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, g_ptxas, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("posix_spawn(%s): %s", g_ptxas, strerror(rc));
    return pid;
}

/* Waits for a ptxas child; its exit status, or 128 + the signal that ended it. */
static int wait_ptxas(pid_t pid)
{
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0)
        if (errno != EINTR)
            fail_msg("waitpid: %s", strerror(errno));
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

/* The gate itself must be able to fail: its parser on logs in ptxas's format, and the toolkit's
   ptxas on a kernel that asks for setmaxnreg with no register cap at entry (C7508). */
static void test_gate_selftest(void **state)
{
    (void)state;
    resources r;
    parse_log("ptxas info    : 0 bytes gmem\n"
              "ptxas info    : Compiling entry function '" FA3_KERNEL_NAME "' for 'sm_90a'\n"
              "ptxas info    : Function properties for " FA3_KERNEL_NAME "\n"
              "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
              "ptxas info    : Used 255 registers, used 16 barriers, 1024 bytes smem\n",
              &r);
    assert_int_equal(r.entry_found, 1);
    assert_int_equal(r.regs, 255);
    assert_int_equal(r.stack, 16);
    assert_int_equal(r.spill_st, 8);
    assert_int_equal(r.spill_ld, 12);
    assert_int_equal(r.smem, 1024);
    assert_int_equal(r.warnings, 0);
    parse_log("ptxas warning : something\n", &r);
    assert_int_equal(r.warnings, 1);
    parse_log("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async serialized\n",
              &r);
    assert_int_equal(r.warnings, 1);

    char ptx_path[512], cubin_path[512], log_path[512];
    snprintf(ptx_path, sizeof ptx_path, "%s/selftest.ptx", g_tmpdir);
    snprintf(cubin_path, sizeof cubin_path, "%s/selftest.cubin", g_tmpdir);
    snprintf(log_path, sizeof log_path, "%s/selftest.log", g_tmpdir);
    FILE *f = fopen(ptx_path, "w");
    assert_non_null(f);
    fputs(".version 9.0\n.target sm_90a\n.address_size 64\n"
          ".visible .entry selftest()\n{\n\tsetmaxnreg.inc.sync.aligned.u32 240;\n\tret;\n}\n",
          f);
    assert_int_equal(fclose(f), 0);
    int code = wait_ptxas(spawn_ptxas(ptx_path, cubin_path, log_path));
    char *log = slurp(log_path);
    assert_non_null(log);
    parse_log(log, &r);
    printf("  ptxas %s on a kernel that must be flagged: exit %d, %d diagnostic(s): %s\n",
           g_ptxas, code, r.warnings, r.first_warning);
    free(log);
    unlink(ptx_path);
    unlink(cubin_path);
    unlink(log_path);
    assert_int_equal(code, 0);
    assert_true(r.warnings >= 1);
}

static void test_one_config(void **state)
{
    const ptxas_case *pc = *state;
    fa3_config c;
    fa3_status st = fa3_config_canonicalize(&pc->cfg, &c);
    if (st != FA3_OK) {
        if (pc->must_accept)
            fail_msg("%s: the default set must be supported, but: %s: %s", pc->name,
                     fa3_strerror(st), fa3_last_error_message());
        printf("NOTE: %s skipped: the library refuses it (%s: %s)\n", pc->name, fa3_strerror(st),
               fa3_last_error_message());
        skip(); /* a config the library refuses up front */
    }
    fa3_plan plan;
    /* FA3JIT_TEST_PTXAS_KNOBS: knobs for every case without its own, to compile the whole set
       under a candidate default before it becomes one (not set in CI) */
    const char *all = getenv("FA3JIT_TEST_PTXAS_KNOBS");
    const char *knobs = pc->knobs ? pc->knobs : all && *all ? all : NULL;
    if (knobs)
        setenv("FA3JIT_PLAN_DEBUG", knobs, 1);
    st = fa3_plan_make(&c, &plan);
    unsetenv("FA3JIT_PLAN_DEBUG");
    if (st != FA3_OK)
        fail_msg("%s: fa3_plan_make: %s", pc->name, fa3_last_error_message());

    char *ptx = NULL;
    size_t len = 0;
    st = fa3_codegen_kernel(pc->kind, &plan, &ptx, &len); /* this plan: with the case's knobs */
    const char *entry = fa3_kind_get(pc->kind)->entry;
    if (st != FA3_OK)
        fail_msg("%s: fa3_codegen_ptx: %s: %s", pc->name, fa3_strerror(st),
                 fa3_last_error_message());
    /* l2_hint: the cache hints are in the PTX exactly where the plan asks for them (a knob's
       value, else plan.c's default: Q and O for masked 16-bit kernels and masked e4m3 kernels
       at head_dim >= 128) */
    const char *l2 = knobs ? strstr(knobs, "l2_hint=") : NULL;
    const int want =
        l2 ? atoi(l2 + strlen("l2_hint="))
           : c.mask != FA3_MASK_NONE && (c.dtype != FA3_DTYPE_E4M3 || c.head_dim >= 128) ? 6 : 0;
    if (plan.l2_hint != want)
        fail_msg("%s: knobs '%s': plan l2_hint %d, expected %d", pc->name, knobs ? knobs : "",
                 plan.l2_hint, want);
    const int hinted = want != 0;
    if ((strstr(ptx, ".L2::cache_hint") != NULL) != hinted)
        fail_msg("%s: knobs '%s': the PTX %s .L2::cache_hint", pc->name, knobs ? knobs : "",
                 hinted ? "lacks" : "has");
    char ptx_path[512], cubin_path[512], log_path[512];
    snprintf(ptx_path, sizeof ptx_path, "%s/%s.ptx", g_tmpdir, pc->name);
    snprintf(cubin_path, sizeof cubin_path, "%s/%s.cubin", g_tmpdir, pc->name);
    snprintf(log_path, sizeof log_path, "%s/%s.log", g_tmpdir, pc->name);
    FILE *f = fopen(ptx_path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(ptx, 1, len, f), len);
    assert_int_equal(fclose(f), 0);

    g_failed_configs++; /* undone at the end if every check passed */
    double t0 = now_ms();
    pid_t pid = spawn_ptxas(ptx_path, cubin_path, log_path);

    /* Meanwhile, the library's own whole-program backend. */
    char problems[2048] = "";
    size_t pn = 0;
#define PROBLEM(...) \
    (pn += (size_t)snprintf(problems + pn, pn < sizeof problems ? sizeof problems - pn : 0, \
                            __VA_ARGS__))
    char ptxc_summary[256] = "";
    if (g_ptxc_ctx && pc->kind == FA3_KERNEL_COMBINE) { /* the combine PTX itself */
        fa3_compile_result cr;
        st = fa3_compile_ptx(ptx, len, FA3_ARCH_SM90A, FA3_BACKEND_PTX_COMPILER, &cr);
        if (st != FA3_OK) {
            PROBLEM("\n  ptx-compiler: %s: %s", fa3_strerror(st), fa3_last_error_message());
        } else {
            snprintf(ptxc_summary, sizeof ptxc_summary,
                     " | ptx-compiler: regs %d, spill %d/%d, stack %d", cr.num_regs,
                     cr.spill_store_bytes, cr.spill_load_bytes, cr.stack_bytes);
            if (cr.num_regs <= 0)
                PROBLEM("\n  ptx-compiler: register count unknown (%d)", cr.num_regs);
            if (cr.spill_store_bytes != 0 || cr.spill_load_bytes != 0 || cr.stack_bytes != 0)
                PROBLEM("\n  ptx-compiler: spills %d/%d, stack %d bytes", cr.spill_store_bytes,
                        cr.spill_load_bytes, cr.stack_bytes);
            char diag[512];
            if (first_diagnostic(cr.info_log, diag, sizeof diag) ||
                first_diagnostic(cr.error_log, diag, sizeof diag))
                PROBLEM("\n  ptx-compiler: diagnostic in the compile log: %s", diag);
            if (cr.cubin_size == 0)
                PROBLEM("\n  ptx-compiler: empty cubin");
        }
        fa3_compile_result_free(&cr);
    } else if (g_ptxc_ctx && !pc->knobs) { /* the context plans without the knobs (and caches by config) */
        fa3_kernel *k = NULL;
        st = fa3_jit_get_kernel(g_ptxc_ctx, &c, &k);
        if (st != FA3_OK) {
            PROBLEM("\n  ptx-compiler: %s: %s", fa3_strerror(st), fa3_last_error_message());
        } else {
            fa3_kernel_info info;
            assert_int_equal(fa3_kernel_get_info(k, &info), FA3_OK);
            snprintf(ptxc_summary, sizeof ptxc_summary,
                     " | ptx-compiler: regs %d, spill %d/%d, stack %d, %.0f ms", info.num_regs,
                     info.spill_store_bytes, info.spill_load_bytes, info.stack_bytes,
                     info.compile_ms);
            if (info.backend != FA3_BACKEND_PTX_COMPILER)
                PROBLEM("\n  ptx-compiler: kernel built by backend %s",
                        fa3_backend_name(info.backend));
            if (info.num_regs <= 0)
                PROBLEM("\n  ptx-compiler: register count unknown (%d)", info.num_regs);
            if (info.spill_store_bytes != 0 || info.spill_load_bytes != 0)
                PROBLEM("\n  ptx-compiler: spills %d/%d bytes (store/load; -1 = unknown)",
                        info.spill_store_bytes, info.spill_load_bytes);
            if (info.stack_bytes != 0)
                PROBLEM("\n  ptx-compiler: stack frame %d bytes (-1 = unknown)",
                        info.stack_bytes);
            char diag[512];
            if (info.compile_log && first_diagnostic(info.compile_log, diag, sizeof diag))
                PROBLEM("\n  ptx-compiler: diagnostic in the compile log: %s", diag);
            if (info.cubin_size == 0)
                PROBLEM("\n  ptx-compiler: empty cubin");
        }
    }

    int code = wait_ptxas(pid);
    double ms = now_ms() - t0;
    fa3_free(ptx);
    char *log = slurp(log_path);
    assert_non_null(log);
    resources r;
    parse_log_entry(log, &r, entry);
    struct stat sb;
    int cubin_ok = stat(cubin_path, &sb) == 0 && sb.st_size > 0;

    printf("%-26s ptxas: regs %3d, spill %d/%d, stack %d, smem %d static + %d dynamic, "
           "%.0f ms%s\n",
           pc->name, r.regs, r.spill_st, r.spill_ld, r.stack, r.smem,
           pc->kind == FA3_KERNEL_COMBINE ? 0 : plan.smem_bytes, ms,
           ptxc_summary);

    if (code != 0)
        PROBLEM("\n  ptxas exited with %d", code);
    if (!cubin_ok)
        PROBLEM("\n  ptxas wrote no cubin");
    if (!r.entry_found)
        PROBLEM("\n  ptxas compiled no entry function '%s'", entry);
    if (r.warnings)
        PROBLEM("\n  ptxas printed %d warning line(s), first: %s", r.warnings, r.first_warning);
    if (r.spill_st != 0 || r.spill_ld != 0)
        PROBLEM("\n  ptxas: spills %d/%d bytes (store/load; -1 = not reported)", r.spill_st,
                r.spill_ld);
    if (r.stack != 0)
        PROBLEM("\n  ptxas: stack frame %d bytes (-1 = not reported)", r.stack);
    if (r.regs <= 0)
        PROBLEM("\n  ptxas: register count not reported");
#undef PROBLEM
    if (pn) {
        printf("FAIL %s (PTX kept in %s):%s\n--- ptxas log ---\n%s-----------------\n", pc->name,
               ptx_path, problems, log);
        free(log);
        fail_msg("%s: see above", pc->name);
    }
    free(log);
    unlink(cubin_path);
    unlink(log_path);
    unlink(ptx_path);
    g_failed_configs--;
}

static int group_setup(void **state)
{
    (void)state;
    g_ptxas = getenv("PTXAS");
    if (!g_ptxas || !*g_ptxas)
        g_ptxas = FA3_CUDA_DIR "/bin/ptxas";
    if (access(g_ptxas, X_OK) != 0) {
        printf("ptxas not found or not executable: %s (set $PTXAS)\n", g_ptxas);
        return -1;
    }
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/fa3jit-ptxas-XXXXXX");
    if (!mkdtemp(g_tmpdir)) {
        printf("mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    printf("ptxas: %s; work folder %s\n", g_ptxas, g_tmpdir);
    if (FA3_HAVE_PTX_COMPILER) {
        fa3_context_options o;
        fa3_context_options_init(&o);
        o.disable_disk_cache = 1;
        o.backend = FA3_BACKEND_PTX_COMPILER;
        fa3_status st = fa3_context_create(&g_ptxc_ctx, &o);
        if (st != FA3_OK) {
            printf("fa3_context_create(PTX compiler): %s: %s\n", fa3_strerror(st),
                   fa3_last_error_message());
            return -1;
        }
        printf("also compiling through the PTX Compiler API backend\n");
    } else {
        printf("NOTE: this build has no PTX Compiler API (-Dptx_compiler_dir=...): ptxas only\n");
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fa3_context_free(g_ptxc_ctx);
    if (g_failed_configs == 0)
        rmdir(g_tmpdir);
    else
        printf("%d config(s) failed; their PTX and logs are in %s\n", g_failed_configs, g_tmpdir);
    return 0;
}

int main(void)
{
    /* every supported (head_dim, head_dim_v) pair; all masks and softcap must be accepted */
    static const int hds[][2] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128},
                                 {256, 256}};
    static const char *dts[] = {"bf16", "fp16", "e4m3"};
    static const char *masks[] = {"none", "causal", "local"};
    struct CMUnitTest tests[1 + NCASES];
    tests[0] = (struct CMUnitTest){"gate_selftest", test_gate_selftest, NULL, NULL, NULL};
    int n = 0;
    for (int h = 0; h < 6; h++)
        for (int dt = 0; dt < 3; dt++)
            for (int m = 0; m < 3; m++)
                for (int sc = 0; sc < 2; sc++)
                for (int vl = 0; vl < 2; vl++) {
                    ptxas_case *pc = &g_cases[n];
                    fa3_config_init(&pc->cfg);
                    pc->cfg.varlen = vl;
                    pc->cfg.head_dim = hds[h][0];
                    pc->cfg.head_dim_v = hds[h][1];
                    pc->cfg.dtype = (fa3_dtype)dt;
                    pc->cfg.mask = (fa3_mask)m;
                    pc->cfg.softcap = sc;
                    pc->must_accept = 1;
                    if (hds[h][1] != hds[h][0])
                        snprintf(pc->name, sizeof pc->name, "hd%dx%d_%s_%s%s%s", hds[h][0],
                                 hds[h][1], dts[dt], masks[m], sc ? "_softcap" : "",
                                 vl ? "_varlen" : "");
                    else
                        snprintf(pc->name, sizeof pc->name, "hd%d_%s_%s%s%s", hds[h][0], dts[dt],
                                 masks[m], sc ? "_softcap" : "", vl ? "_varlen" : "");
                    tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                    n++;
                }
    /* knob variants that change the code (knobs.c): two consumer warpgroups for head_dim 64,
       the timing-only kernels without the softmax and without the O store, the softmax before
       fast_exp and cond_rescale, P packed first with the 4-accumulator reductions, the masked
       loop body alone, 8 of a row's exponentials by polynomial, the Q descriptor in ordinary
       registers with V waited for before the QK (the kernel before session 11, also without
       diag_half: with its copies of the first block hd64's masked kernels spill 16 bytes), the mbarrier
       waits with a suspend-time hint (on the kernel before the tile hand-over: with it the 24
       registers of the producer spill 8 bytes at hd192/256), each role's own static tile order (masked configs: the
       kernel before the tile hand-over), O staged in Q (hd192/256: the kernel before session
       13's ring staging), FA4's P packing order (early_pack, not yet measured; 2: the PV's wait held behind the K
       release), the ring's barrier and descriptor addresses each computed from the stage alone (ring_addr=0:
       the kernel before session 27), the new max's arithmetic computed on every block (kept_branch=0: the kernel
       before session 15), Q's descriptors built in every QK (q_desc_tile=0: the kernel
       before session 27), the first key block always whole (diag_half=0: the kernel before session 17)
       and its half and empty copies where two consumers take turns (diag_half=1), the masked and
       unmasked loop bodies apart (mask_branch=0: head_dim >= 128's kernel before session 20) and
       one body at every head dim (mask_branch=1), the tile's first QK and last PV apart from the
       loop's wgmmas (merge_ends=0: head_dim > 128's kernel before session 28) and issued by them
       at every head dim (merge_ends=1), merged with the first block's softmax a copy of
       its own (first_in_loop=0: the merged kernel before session 30), and every TMA transfer
       with an L2 eviction priority (l2_hint=7: the policy an immediate, not a register the
       producer would spill) and none (l2_hint=0: the masked 16-bit kernel before session 38) */
    static const struct { int hd, hdv, mask; } kv[NKNOB] = {
        {64, 64, 1}, {64, 64, 2}, {192, 192, 2}, {256, 256, 1}};
    static const struct { const char *knobs, *tag; } ks[NKNOBSETS] = {
        {"wg3=0", "wg3_0"},
        {"dbg_no_softmax=1", "dbg_no_softmax1"},
        {"dbg_no_o_store=1", "dbg_no_o_store1"},
        {"fast_exp=0,cond_rescale=0", "old_softmax"},
        {"pack_first=1,tree_reduce=1", "pack_first_tree_reduce"},
        {"one_body=1", "one_body1"},
        {"ex2_emu=8", "ex2_emu8"},
        {"uniform_desc=0,late_v_wait=0,diag_half=0", "old_desc_v_wait"},
        {"wait_hint=1,dyn_sched=0", "wait_hint1"},
        {"dyn_sched=0", "dyn_sched0"},
        {"ring_stage=0", "ring_stage0"},
        {"early_pack=1", "early_pack1"},
        {"early_pack=2", "early_pack2"},
        {"ring_addr=0", "ring_addr0"},
        {"kept_branch=0", "kept_branch0"},
        {"q_desc_tile=0", "q_desc_tile0"},
        {"diag_half=0", "diag_half0"},
        {"diag_half=1", "diag_half1"},
        {"mask_branch=0", "mask_branch0"},
        {"mask_branch=1", "mask_branch1"},
        {"fast_div=0", "fast_div0"},
        {"fast_div=1", "fast_div1"},
        {"merge_ends=0", "merge_ends0"},
        {"merge_ends=1", "merge_ends1"},
        {"first_in_loop=0", "first_in_loop0"},
        {"l2_hint=7", "l2_hint7"},
        {"l2_hint=0", "l2_hint0"}};
    for (int k = 0; k < NKNOBSETS; k++)
        for (int i = 0; i < NKNOB; i++) {
            ptxas_case *pc = &g_cases[n];
            fa3_config_init(&pc->cfg);
            pc->cfg.head_dim = kv[i].hd;
            pc->cfg.head_dim_v = kv[i].hdv;
            pc->cfg.mask = (fa3_mask)kv[i].mask;
            pc->must_accept = 1;
            pc->knobs = ks[k].knobs;
            snprintf(pc->name, sizeof pc->name, "hd%d_bf16_%s_%s", kv[i].hd, masks[kv[i].mask],
                     ks[k].tag);
            tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
            n++;
        }
    /* e4m3's kernel before session 29 (mask_branch=0,merge_ends=0: masked and unmasked loop
       bodies apart, the tile's first QK and last PV apart from the loop's wgmmas), at every head
       dim, masked and not, and in its largest layout; the default (one body, ends merged) is the
       table's */
    static const struct { int hd, out, mask, vp; const char *knobs, *name; } fx[NFP8X] = {
        {128, FA3_DTYPE_FP16, FA3_MASK_CAUSAL, 0, NULL, "hd128_e4m3_causal_out_fp16"},
        {128, FA3_DTYPE_AUTO, FA3_MASK_CAUSAL, 0, "dbg_no_vt=1", "hd128_e4m3_causal_dbg_no_vt1"},
        {256, FA3_DTYPE_AUTO, FA3_MASK_CAUSAL, 0, "dbg_no_vt=1", "hd256_e4m3_causal_dbg_no_vt1"},
        {64, FA3_DTYPE_AUTO, FA3_MASK_CAUSAL, 0, "mask_branch=0,merge_ends=0", "hd64_e4m3_causal_apart"},
        {128, FA3_DTYPE_AUTO, FA3_MASK_NONE, 0, "mask_branch=0,merge_ends=0", "hd128_e4m3_none_apart"},
        {128, FA3_DTYPE_AUTO, FA3_MASK_CAUSAL, 1, "mask_branch=0,merge_ends=0",
         "hd128_e4m3_causal_varlen_paged_apart"},
        {192, FA3_DTYPE_AUTO, FA3_MASK_LOCAL, 0, "mask_branch=0,merge_ends=0", "hd192_e4m3_local_apart"},
        {256, FA3_DTYPE_AUTO, FA3_MASK_CAUSAL, 0, "mask_branch=0,merge_ends=0", "hd256_e4m3_causal_apart"}};
    for (int i = 0; i < NFP8X; i++) {
        ptxas_case *pc = &g_cases[n];
        fa3_config_init(&pc->cfg);
        pc->cfg.head_dim = fx[i].hd;
        pc->cfg.dtype = FA3_DTYPE_E4M3;
        pc->cfg.out_dtype = (fa3_dtype)fx[i].out;
        pc->cfg.mask = (fa3_mask)fx[i].mask;
        pc->cfg.varlen = pc->cfg.paged_kv = fx[i].vp;
        pc->must_accept = 1;
        pc->knobs = fx[i].knobs;
        snprintf(pc->name, sizeof pc->name, "%s", fx[i].name);
        tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
        n++;
    }
    for (int h = 0; h < 6; h++)
        for (int dt = 0; dt < 3; dt++)
            for (int m = 1; m < 5; m++) {
                ptxas_case *pc = &g_cases[n];
                fa3_config_init(&pc->cfg);
                pc->cfg.head_dim = hds[h][0];
                pc->cfg.head_dim_v = hds[h][1];
                pc->cfg.dtype = (fa3_dtype)dt;
                pc->cfg.mask = (fa3_mask)(1 + (m - 1) % 2);
                pc->cfg.varlen = m > 2;
                pc->cfg.softcap = 1;
                pc->cfg.split_kv = 1;
                pc->must_accept = 1;
                snprintf(pc->name, sizeof pc->name, "hd%dx%d_%s_%s_softcap%s_split", hds[h][0],
                         hds[h][1], dts[dt], masks[pc->cfg.mask], pc->cfg.varlen ? "_varlen" : "");
                tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                n++;
            }
    /* block_m 64: split-KV and one pass, each with a dense and a paged layout */
    static const struct { int split, mask, paged; const char *tag; } bl[4] = {
        {1, FA3_MASK_CAUSAL, 0, "split"}, {1, FA3_MASK_LOCAL, 1, "paged_split"},
        {0, FA3_MASK_LOCAL, 0, "dense"}, {0, FA3_MASK_CAUSAL, 1, "paged"}};
    for (int h = 0; h < 6; h++)
        for (int dt = 0; dt < 3; dt++)
            for (int l = 0; l < 4; l++) {
                ptxas_case *pc = &g_cases[n];
                fa3_config_init(&pc->cfg);
                pc->cfg.head_dim = hds[h][0];
                pc->cfg.head_dim_v = hds[h][1];
                pc->cfg.dtype = (fa3_dtype)dt;
                pc->cfg.mask = (fa3_mask)bl[l].mask;
                pc->cfg.softcap = 1;
                pc->cfg.split_kv = bl[l].split;
                pc->cfg.paged_kv = bl[l].paged;
                pc->cfg.block_m = 64;
                pc->must_accept = 1;
                snprintf(pc->name, sizeof pc->name, "hd%dx%d_%s_%s_softcap_bm64_%s", hds[h][0],
                         hds[h][1], dts[dt], masks[bl[l].mask], bl[l].tag);
                tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                n++;
            }
    /* fa3_fwd_tune's short tiles: head_dim 64's two consumers (block_m 128), head_dim 256's
       64-key blocks (block_n 64) */
    for (int fam = 0; fam < 2; fam++)
        for (int dt = 0; dt < 2; dt++)
            for (int m = 1; m <= 2; m++)
                for (int l = 0; l < 2; l++) {
                    ptxas_case *pc = &g_cases[n];
                    fa3_config_init(&pc->cfg);
                    pc->cfg.head_dim = fam ? 256 : 64;
                    pc->cfg.dtype = (fa3_dtype)dt;
                    pc->cfg.mask = (fa3_mask)m;
                    pc->cfg.softcap = 1;
                    pc->cfg.varlen = pc->cfg.paged_kv = l;
                    if (fam)
                        pc->cfg.block_n = 64;
                    else
                        pc->cfg.block_m = 128;
                    pc->must_accept = 1;
                    snprintf(pc->name, sizeof pc->name, "hd%d_%s_%s_softcap_%s%s",
                             pc->cfg.head_dim, dts[dt], masks[m], fam ? "bn64" : "bm128",
                             l ? "_varlen_paged" : "");
                    tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                    n++;
                }
    /* split-KV's combine kernels (planned from the split config of that head_dim_v) */
    static const int hdvs[5] = {64, 96, 128, 192, 256};
    for (int h = 0; h < 5; h++)
        for (int dt = 0; dt < 2; dt++)
            for (int vl = 0; vl < 2; vl++) {
                ptxas_case *pc = &g_cases[n];
                fa3_config_init(&pc->cfg);
                pc->cfg.head_dim = pc->cfg.head_dim_v = hdvs[h];
                pc->cfg.dtype = (fa3_dtype)dt;
                pc->cfg.varlen = vl;
                pc->cfg.split_kv = 1;
                pc->must_accept = 1;
                pc->kind = FA3_KERNEL_COMBINE;
                snprintf(pc->name, sizeof pc->name, "combine_hdv%d_%s%s", hdvs[h], dts[dt],
                         vl ? "_varlen" : "");
                tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                n++;
            }
    /* packed GQA (fam 0: causal dense one pass, local paged split), then the decode family as
       listed (fam 1: packed GQA, block_m 64, split-KV; causal dense, local paged) */
    for (int fam = 0; fam < 2; fam++)
        for (int h = 0; h < 6; h++)
            for (int dt = 0; dt < 3; dt++)
                for (int v = 0; v < 2; v++) {
                    ptxas_case *pc = &g_cases[n];
                    fa3_config_init(&pc->cfg);
                    pc->cfg.head_dim = hds[h][0];
                    pc->cfg.head_dim_v = hds[h][1];
                    pc->cfg.dtype = (fa3_dtype)dt;
                    pc->cfg.mask = v ? FA3_MASK_LOCAL : FA3_MASK_CAUSAL;
                    pc->cfg.softcap = 1;
                    pc->cfg.split_kv = fam || v;
                    pc->cfg.paged_kv = v;
                    pc->cfg.pack_gqa = 1;
                    pc->cfg.block_m = fam ? 64 : 0;
                    pc->must_accept = 1;
                    snprintf(pc->name, sizeof pc->name, "hd%dx%d_%s_%s_softcap%s_%s", hds[h][0],
                             hds[h][1], dts[dt], masks[pc->cfg.mask],
                             v ? (fam ? "_paged" : "_paged_split") : "", fam ? "decode" : "packgqa");
                    tests[1 + n] = (struct CMUnitTest){pc->name, test_one_config, NULL, NULL, pc};
                    n++;
                }
    if (n != NCASES) {
        printf("%d cases made, %d declared\n", n, (int)NCASES);
        return 1;
    }
    /* FA3JIT_TEST_FILTER: only the cases whose names match (cmocka's pattern, e.g. "*bm64*") */
    const char *filter = getenv("FA3JIT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("ptxas", tests, group_setup, group_teardown);
}
