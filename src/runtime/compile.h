/*
 * Compile backends: PTX text in, a loadable sm_90a cubin out, with the compiler's logs and the
 * resources ptxas reported (registers, spills, stack) parsed from its verbose output.
 *   FA3_BACKEND_PTX_COMPILER — the PTX Compiler API (static library), whole-program: keeps
 *                              setmaxnreg. The AUTO choice when built in.
 *   FA3_BACKEND_NVJITLINK    — nvJitLink; compiles PTX as relocatable code, so ptxas drops
 *                              setmaxnreg (C7504) and serializes wgmma (C7509; both caught by
 *                              has_warning). dlopen'd at first use (fa3_jitlink_load).
 *   FA3_BACKEND_DRIVER_JIT   — nothing to do at compile time: the driver JITs the PTX when the
 *                              module is loaded (kernel.c), so the result has no cubin.
 */
#ifndef FA3JIT_COMPILE_H
#define FA3JIT_COMPILE_H

#include <stddef.h>
#include "common.h"

typedef struct fa3_compile_result {
    void *cubin;             /* malloc'd cubin, NULL for DRIVER_JIT */
    size_t cubin_size;
    char *info_log;          /* malloc'd, NUL-terminated ("" if the compiler wrote none) */
    char *error_log;         /* malloc'd, NUL-terminated ("" if none) */
    char backend_version[96];/* e.g. "nvPTXCompiler 13.0 --gpu-name=sm_90a -O3" */
    int num_regs;            /* "Used N registers" of the entry function, -1 if unknown */
    int spill_store_bytes;   /* "N bytes spill stores", -1 if unknown */
    int spill_load_bytes;    /* "N bytes spill loads", -1 if unknown */
    int stack_bytes;         /* "N bytes stack frame", -1 if unknown */
    int has_warning;         /* 1 if either log has a diagnostic line: "warning", "Performance
                                Loss" or a "(Cnnnn)" code — ptxas prints C7504/C7508 (setmaxnreg
                                ignored) and C7509-C7515 (wgmma serialized) as "info" lines.
                                CI fails on it. */
} fa3_compile_result;

/* 1 if backend b (not AUTO) is built into this library. DRIVER_JIT is always built in (it needs a
   driver only when the module is loaded). */
FA3_INTERNAL int fa3_backend_available(fa3_backend b);

/* Opens libnvJitLink (the NVJITLINK backend) once per process, on first call: nothing else maps
   it, so a process on the other backends never loads it. Every later call returns the first
   outcome. Errors: FA3_ERR_LINK, the message naming the library, each file tried and dlopen's
   reason (or the entry point it lacks). */
FA3_INTERNAL fa3_status fa3_jitlink_load(void);

/* AUTO → PTX_COMPILER if built in, else NVJITLINK; other values are returned unchanged. */
FA3_INTERNAL fa3_backend fa3_backend_resolve(fa3_backend b);

/* Writes the backend's identity as it enters the cache key: compiler name, its version and the
   fixed options that change the binary. No driver or GPU needed, except that DRIVER_JIT names the
   driver's version when libcuda can be loaded ("unavailable" otherwise).
   Errors: FA3_ERR_BAD_BACKEND, FA3_ERR_LINK (nvJitLinkVersion failed), FA3_ERR_COMPILE. */
FA3_INTERNAL fa3_status fa3_backend_version(fa3_backend b, char *buf, size_t size);

/* Compiles ptx[0..len) (len excludes the NUL; ptx[len] must be '\0') for arch with backend b (not
   AUTO). On success *out owns a cubin (except DRIVER_JIT) and both logs. On failure out holds
   whatever logs the compiler produced (release it either way with fa3_compile_result_free) and the
   message names the failing call and carries the compiler's error log.
   Errors: FA3_ERR_COMPILE (PTX Compiler API), FA3_ERR_LINK (nvJitLink), FA3_ERR_BAD_BACKEND,
   FA3_ERR_BAD_ARCH, FA3_ERR_OUT_OF_MEMORY. */
FA3_INTERNAL fa3_status fa3_compile_ptx(const char *ptx, size_t len, fa3_arch arch, fa3_backend b,
                                        fa3_compile_result *out);

/* Releases what a result owns and resets it (fields -1 / NULL). Safe on a zeroed result. */
FA3_INTERNAL void fa3_compile_result_free(fa3_compile_result *r);

/* What the logs say (compile_log.c). */

/* The two compiler logs joined into one malloc'd text (a newline between them when the first
   does not end with one); NULL when out of memory. */
FA3_INTERNAL char *fa3_compile_join_logs(const char *info, const char *error);

/* 1 if the log line p[0..n) is a compiler diagnostic CI treats as a failure: "warning" (any case),
   "Performance Loss", or a ptxas advisory code "(Cnnnn)" (e.g. "(C7504) Potential Performance
   Loss: 'setmaxnreg' ignored"). fa3_parse_ptxas_log sets has_warning by it; fa3-gen --info
   prints the lines it matches. */
FA3_TOOLS_API int fa3_log_line_is_diagnostic(const char *p, size_t n);

/* Parses ptxas verbose output (info log, or the driver JIT's log) into r's num_regs, spill and
   stack fields and has_warning. Values of the entry function FA3_KERNEL_NAME are preferred, else
   the first function's (a module holds one kernel, so a kernel of another kind gets its own);
   fields not found are left unchanged. Exposed for tests and for the DRIVER_JIT path. */
FA3_INTERNAL void fa3_parse_ptxas_log(const char *log, fa3_compile_result *r);

/* "sm_90a" for FA3_ARCH_SM90A, NULL for an unknown arch. */
FA3_INTERNAL const char *fa3_arch_name(fa3_arch arch);

#endif
