/*
 * fa3-gen's parts, one file per job (this header declares what they share):
 *   main.c        dispatch to the subcommands, --help and --version, the final stdout check
 *   cli.c         exit codes and messages, the argument reader, the config/compile flags every
 *                 subcommand takes, and helpers they share (config check, context, device, clock)
 *   gen.c         --emit-ptx, --emit-cubin FILE, --info
 *   check.c       check: fa3_fwd against the NVRTC reference (the tolerance rule of
 *                 tools/common/tolerance.h)
 *   check_cases.c check's configurations (default set, --all, the CONFIG flags; their layouts
 *                 for --varlen / --paged) and seqlen pairs
 *   check_varlen.c check's varlen / paged-KV cases, run and judged by tools/common/varlen_check
 *   bench.c       bench: the FlashAttention-3 paper sweep (bench/compare.py and bench/ab.py read
 *                 its --json lines)
 *   cache.c       cache ls | clear | warm: the command line, ls and clear
 *   cache_warm.c  cache warm: compiles configurations into the disk cache
 * Beyond include/fa3jit.h they use src/runtime/tools_api.h and the host helpers of tools/common.
 * tests/fuzz/fuzz_cli.c compiles cli.c, cache.c and cache_warm.c into its harness.
 */
#ifndef FA3JIT_FA3GEN_H
#define FA3JIT_FA3GEN_H

#include <stdint.h>
#include <stdio.h>

#include "fa3jit.h"
#include "runtime/tools_api.h"
#include "tools/common/varlen_check.h"

/* ---- exit codes and messages (cli.c) */

/* 0 success; 1 a check or an operation failed (writing stdout included); 2 no usable GPU, CUDA
   driver or NVRTC for a GPU subcommand; 64 bad command line or unsupported configuration value. */
enum { EXIT_FAIL = 1, EXIT_NO_GPU = 2, EXIT_USAGE = 64 };

extern const char *const prog; /* "fa3-gen", the prefix of every message */

/* "fa3-gen: <message>" and "Try 'fa3-gen --help'." on stderr, then exit(EXIT_USAGE). */
void usage_error(const char *fmt, ...) FA3_PRINTF(1, 2);
/* The exit status for a library error: configuration/argument errors are usage errors (64), a
   missing driver or NVRTC is EXIT_NO_GPU, anything else EXIT_FAIL. */
int exit_code_for(fa3_status st);
/* "fa3-gen: <what>: <library message> (<status name>)" on stderr. */
void lib_error(fa3_status st, const char *what);
/* The first line of src (NULL: "") into dst, cut to size. */
void first_line(char *dst, size_t size, const char *src);

/* Reads the environment's bad values (fa3_env_warnings) and prints them once on stderr. */
void env_warning_report(void);
/* w (a context's fa3_context_warning) without the environment part it starts with, which
   env_warning_report has already printed. */
const char *past_env_warning(const char *w);

/* How --info and cache ls name a benchmark variant (plan_debug: its FA3JIT_PLAN_DEBUG value). */
#define DEBUG_PLAN_FMT "DEBUG knobs FA3JIT_PLAN_DEBUG=%s (a benchmark variant, not for production)"

/* ---- the argument reader (cli.c) */

typedef struct cli {
    int argc;
    char **argv;
    int i;                  /* index of the current argument */
    char name[64];          /* current flag, without any "=value" */
    const char *inline_val; /* value given as --flag=value, else NULL */
} cli;

/* Moves to the next argument; returns 0 at the end. */
int cli_next(cli *c);
/* 1 if the current flag is flag. */
int cli_is(const cli *c, const char *flag);
/* A flag that takes no value must not be given one (usage error). */
void cli_noval(const cli *c);
/* The flag's value: "--flag=value" or the next argument (usage error if none). */
const char *cli_value(cli *c);
/* The value as an integer in lo..hi, a finite number, a non-negative integer (any base strtoull
   reads); anything else is a usage error naming the flag. */
int cli_int(cli *c, int lo, int hi);
double cli_double(cli *c);
uint64_t cli_u64(cli *c);
/* Usage error for the current argument: an unknown option or an unexpected word. */
void unknown_arg(const cli *c);

const char *dtype_str(fa3_dtype d); /* "bf16", "fp16", "e4m3" */
const char *mask_str(fa3_mask m);   /* "none", "causal", "local" */

/* Flags shared by every mode: the kernel configuration and the context options. */
typedef struct common_opts {
    fa3_config cfg;
    int saw_causal, saw_local;
    int config_flags; /* how many config flags were given (check: single-config mode) */
    fa3_context_options ctx_opts;
} common_opts;

void common_init(common_opts *o);
/* Consumes one config/compile flag (CONFIG and COMPILE of --help); returns 0 if the current flag
   is not one of them. */
int parse_common(cli *c, common_opts *o);

/* ---- helpers the subcommands share (cli.c) */

/* fa3_config_canonicalize, or the library's message (naming the bad value) and exit. */
void canonical_or_exit(const fa3_config *cfg, fa3_config *out);
/* fa3_context_create, or the library's message and exit. */
fa3_context *context_or_exit(const fa3_context_options *opts);
/* Opens the device (dev_open) and names it on stderr as "fa3-gen <cmd>: device ..."; on failure
   says why and returns EXIT_NO_GPU. */
int gpu_open(const char *cmd, const fa3_driver **drv);
/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

/* ---- help and version (main.c) */

void print_help(FILE *f);
int print_version(void);

/* ---- the subcommands: argv as main's, argv[1] the subcommand's name (gen: any flags) */

int cmd_gen(int argc, char **argv);   /* gen.c */
int cmd_check(int argc, char **argv); /* check.c */
int cmd_bench(int argc, char **argv); /* bench.c */
/* bench --decode: the decode shapes with o's config (bench_decode.c) */
int bench_decode(const common_opts *o, int reps, int warmup);
/* bench's timing (bench.c): warmup launches of fa3_fwd(kern, a), a synchronize, then reps
   launches each followed by an event (ev: reps + 1 created events), ms[r] the r-th launch's
   milliseconds; and the median of ms (sorted in place) */
fa3_status bench_time(const fa3_driver *drv, fa3_kernel *kern, const fa3_fwd_args *a,
                      int warmup, int reps, CUevent *ev, float *ms);
double bench_median(float *ms, int reps);
int cmd_cache(int argc, char **argv); /* cache.c */

/* ---- check's cases (check_cases.c) */

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

#define CHECK_MAX_PAIRS 32 /* the most seqlen pairs check_pairs gives */
#define CHECK_MAX_SHARDS 1024 /* check --shard I/N: the largest N */
#define CHECK_MAX_SELECT 16 /* check --select GLOB: the most patterns */

/* The configurations to check into *cfgs (malloc'd, *ncfg of them): the one the CONFIG flags
   give; with all, every supported head-dim pair x its supported dtypes (e4m3 also with out_dtype
   fp16) x mask and window x softcap x GQA ratio (dense 1, 2, 8, MQA; varlen 2, MQA), dense then
   varlen; else the default set. varlen (--varlen) and paged (--paged's page size, 0 without):
   each configuration in those layouts (paged without varlen: rectangular Q, then varlen Q; --all:
   only its varlen part). base: the heads, softcap value and window of the command line. Returns
   nonzero when out of memory (the list may then be short). */
int check_configs(const common_opts *o, int all, int varlen, int paged, const check_cfg *base,
                  check_cfg **cfgs, int *ncfg);
/* The seqlen pairs into pairs (CHECK_MAX_PAIRS room): the one of --seqlen-q/-k (either given),
   else those of --all or the default set (quick: without 4096). Returns how many. */
int check_pairs(int all, int quick, int seqlen_q, int seqlen_k, seq_pair *pairs);
/* check --pack-gqa: the configurations (CONFIG, else hd 64/128/256 x dtype x none/causal x
   split_kv 0/1) with pack_gqa 1 at GQA 4 (32/8) and 8 (16/2), and their decode-shaped seqlen
   pairs (the one of --seqlen-q/-k when given). */
int check_pack_configs(const common_opts *o, const check_cfg *base, check_cfg **cfgs, int *ncfg);
/* --shard I/N: keeps, in place, the I-th (1-based) of N contiguous runs of cfgs[0..*ncfg) and
   their weights, cut by the cumulative case count (weight[ci]: config ci's cases), so that the N
   runs share the cases about evenly, every config falls in exactly one and each holds at least
   one. Returns -1 (nothing changed) when N is above the config count. */
int check_shard(check_cfg *cfgs, int *weight, int *ncfg, int shard_i, int shard_n);
/* --select GLOB...: keeps, in place and in order, the configs whose label (as check --list prints
   it, e.g. "hd128 e4m3 causal h3/3") matches one of the npat fnmatch(3) patterns. Returns the
   index of the first pattern that matches no config (nothing changed), else -1. */
int check_select(check_cfg *cfgs, int *ncfg, const char *const *pat, int npat);
int check_pack_pairs(int seqlen_q, int seqlen_k, seq_pair *pairs);
/* The dtype of O for cfg: out_dtype, FA3_DTYPE_AUTO resolved (bf16 for e4m3, else dtype). */
fa3_dtype check_out_dtype(const fa3_config *cfg);

/* ---- check's varlen / paged-KV cases (check_varlen.c) */

typedef struct varlen_opts {
    int page_size;        /* --paged: K/V page size (1..256); 0: not paged */
    int batch;            /* --batch given: every case's batch; 0: each case's own */
    int max_q, max_k;     /* --seqlen-q / -k given: every case's longest lengths; 0: its own */
    int all, quick;       /* --all: the short list of cases; --quick: without long+tiny */
    int no_descales;      /* --descales none: e4m3 with NULL descales */
} varlen_opts;

#define CHECK_MAX_VARLEN_CASES 8 /* the most cases check_varlen_cases gives */
#define CHECK_VARLEN_MAX_BATCH 4096 /* --batch / --seqlen-q / -k limits with varlen cases */
#define CHECK_VARLEN_MAX_SEQLEN 65536

/* The cases of the varlen or paged configuration cc (cfg.varlen or cfg.paged_kv) into specs
   (CHECK_MAX_VARLEN_CASES room; each id points into names[i]). Returns how many. */
int check_varlen_cases(const check_cfg *cc, const varlen_opts *v, vl_spec *specs,
                       char names[][48]);
/* One line per case of cc without running it (check --list). */
void check_varlen_list(const check_cfg *cc, const varlen_opts *v);
/* Runs cc's cases with ctx on drv's device, one line each ("... PASS" / "... FAIL (reasons)"),
   counting them into *passed and *failed. Returns 0, or the exit status to stop with
   (EXIT_NO_GPU: no reference; EXIT_FAIL: a CUDA failure, the context may be lost). */
int check_varlen_config(fa3_context *ctx, const fa3_driver *drv, uint64_t seed,
                        const check_cfg *cc, const varlen_opts *v, int *passed, int *failed);

/* ---- cache (cache.c, cache_warm.c) */

typedef struct cache_args {
    common_opts o;
    const char *action; /* "ls", "clear" or "warm" */
    int all;            /* warm: every supported config */
    int dry_run;        /* warm: list the configs, compile nothing */
    int jobs;           /* warm: compiles in parallel */
    int help;
} cache_args;

/* Parses "fa3-gen cache ACTION [options]" (argv[1] is "cache"). Exits with EXIT_USAGE on a bad
   command line. Kept apart from the actions so that tests/fuzz can drive it. */
void cache_parse(int argc, char **argv, cache_args *a);
/* cache warm (cache_warm.c). */
int cache_warm(const cache_args *a);

#endif
