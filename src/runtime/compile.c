/*
 * Compile backends (see compile.h): PTX → sm_90a cubin with the PTX Compiler API (whole-program,
 * keeps setmaxnreg; only when the build found libnvptxcompiler_static.a) or nvJitLink (relocatable,
 * drops setmaxnreg, serializes wgmma; dlopen'd at its first use, so that a process on the default
 * backend never maps its 98 MB). Every library call's return code is checked; a failure names the
 * call and carries the compiler's logs in the thread's error message. What the logs say
 * (registers, spills, diagnostics) is read by compile_log.c.
 *
 * Thread safety: fa3_compile_ptx may run on several threads at once (contexts building different
 * configs, fa3-gen cache warm's two workers, a split config's forward and combine: build.c). The
 * only state kept between calls is the nvJitLink loader's (jl, jl_status, jl_why): written once
 * under pthread_once, which also makes it visible to every thread that passes fa3_jitlink_load,
 * and only read after (build.c asks for the backend's version, which loads it, on the calling
 * thread before any helper starts). Each compile creates, uses and destroys its own nvPTXCompiler
 * / nvJitLink handle, never shared; the PTX Compiler API guide (its "Thread Safety" chapter)
 * allows calls from several threads, and test build-parts compiles with both backends on two
 * threads and gets a serial build's bytes. The error message is per thread (error.c); the log
 * parser (compile_log.c) works on its arguments only; the test hooks (fa3_test_fail) only read
 * $FA3JIT_TEST_FAIL with getenv, which is safe beside other getenv calls (the library never sets
 * the environment; tests arm a fault between calls, never during one). DRIVER_JIT's version goes
 * through fa3_driver_get, which loads the driver under pthread_once.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Types and declarations only: the header's inline wrappers (nvJitLinkCreate calls
   __nvJitLinkCreate_13_0, ...) would make libnvJitLink a link dependency. */
#define NVJITLINK_NO_INLINE
#include <nvJitLink.h>

#include "fa3jit_build_config.h"
#include "kernel_abi.h"
#include "runtime/compile.h"
#include "runtime/driver.h"

#if FA3_HAVE_PTX_COMPILER
#include <nvPTXCompiler.h>
#endif

/* ------------------------------------------------------------------ small helpers */

const char *fa3_arch_name(fa3_arch arch)
{
    switch (arch) {
    case FA3_ARCH_SM90A: return "sm_90a";
    }
    return NULL;
}

const char *fa3_backend_name(fa3_backend b)
{
    switch (b) {
    case FA3_BACKEND_AUTO: return "auto";
    case FA3_BACKEND_PTX_COMPILER: return "ptx-compiler";
    case FA3_BACKEND_NVJITLINK: return "nvjitlink";
    case FA3_BACKEND_DRIVER_JIT: return "driver-jit";
    }
    return "unknown";
}

static char *dup_text(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    char *d = malloc(n + 1);
    if (d) {
        if (n)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

void fa3_compile_result_free(fa3_compile_result *r)
{
    if (!r)
        return;
    free(r->cubin);
    free(r->info_log);
    free(r->error_log);
    memset(r, 0, sizeof *r);
    r->num_regs = r->spill_store_bytes = r->spill_load_bytes = r->stack_bytes = -1;
}

static void result_init(fa3_compile_result *r)
{
    memset(r, 0, sizeof *r);
    r->num_regs = r->spill_store_bytes = r->spill_load_bytes = r->stack_bytes = -1;
}

/* Appends the logs to the thread's error message (after the caller's fa3_seterr). */
static void append_logs(const fa3_compile_result *r)
{
    if (r->error_log && r->error_log[0])
        fa3_appenderr("\n--- error log ---\n%s", r->error_log);
    if (r->info_log && r->info_log[0])
        fa3_appenderr("\n--- info log ---\n%s", r->info_log);
}
/* ------------------------------------------------------------------ backends */

int fa3_backend_available(fa3_backend b)
{
    switch (b) {
    case FA3_BACKEND_PTX_COMPILER: return FA3_HAVE_PTX_COMPILER;
    case FA3_BACKEND_NVJITLINK: return 1;
    case FA3_BACKEND_DRIVER_JIT: return 1;
    case FA3_BACKEND_AUTO: return 1;
    }
    return 0;
}

fa3_backend fa3_backend_resolve(fa3_backend b)
{
    if (b == FA3_BACKEND_AUTO)
        return FA3_HAVE_PTX_COMPILER ? FA3_BACKEND_PTX_COMPILER : FA3_BACKEND_NVJITLINK;
    return b;
}

static const char *jitlink_result_name(nvJitLinkResult r)
{
    switch (r) {
    case NVJITLINK_SUCCESS: return "NVJITLINK_SUCCESS";
    case NVJITLINK_ERROR_UNRECOGNIZED_OPTION: return "NVJITLINK_ERROR_UNRECOGNIZED_OPTION";
    case NVJITLINK_ERROR_MISSING_ARCH: return "NVJITLINK_ERROR_MISSING_ARCH";
    case NVJITLINK_ERROR_INVALID_INPUT: return "NVJITLINK_ERROR_INVALID_INPUT";
    case NVJITLINK_ERROR_PTX_COMPILE: return "NVJITLINK_ERROR_PTX_COMPILE";
    case NVJITLINK_ERROR_NVVM_COMPILE: return "NVJITLINK_ERROR_NVVM_COMPILE";
    case NVJITLINK_ERROR_INTERNAL: return "NVJITLINK_ERROR_INTERNAL";
    case NVJITLINK_ERROR_THREADPOOL: return "NVJITLINK_ERROR_THREADPOOL";
    case NVJITLINK_ERROR_UNRECOGNIZED_INPUT: return "NVJITLINK_ERROR_UNRECOGNIZED_INPUT";
    case NVJITLINK_ERROR_FINALIZE: return "NVJITLINK_ERROR_FINALIZE";
    case NVJITLINK_ERROR_NULL_INPUT: return "NVJITLINK_ERROR_NULL_INPUT";
    case NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS: return "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS";
    case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE: return "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE";
    case NVJITLINK_ERROR_ARCH_MISMATCH: return "NVJITLINK_ERROR_ARCH_MISMATCH";
    case NVJITLINK_ERROR_OUTDATED_LIBRARY: return "NVJITLINK_ERROR_OUTDATED_LIBRARY";
    case NVJITLINK_ERROR_MISSING_FATBIN: return "NVJITLINK_ERROR_MISSING_FATBIN";
    case NVJITLINK_ERROR_UNRECOGNIZED_ARCH: return "NVJITLINK_ERROR_UNRECOGNIZED_ARCH";
    case NVJITLINK_ERROR_UNSUPPORTED_ARCH: return "NVJITLINK_ERROR_UNSUPPORTED_ARCH";
    case NVJITLINK_ERROR_LTO_NOT_ENABLED: return "NVJITLINK_ERROR_LTO_NOT_ENABLED";
    }
    return "NVJITLINK_ERROR_(unknown)";
}

/* Options that change the binary; they also enter the backend's cache-key identity. */
#define JITLINK_OPT_O "-O3"
#define PTXC_OPT_O "-O3"

/* ---- nvJitLink, dlopen'd */

/* Loading libnvJitLink.so.13 (98 MB, C++ static constructors) cost ~6 ms of every process start
   while it was a DT_NEEDED library, though the default backend never calls it; it is opened on the
   first use of this backend instead, as driver.c opens libcuda. The entry points are looked up by
   the versioned names the header's inline wrappers call (nvJitLinkCreate is
   __nvJitLinkCreate_13_0), with the header's own prototypes (__typeof__): a library of another
   ABI is refused by name, and a header that renames them breaks the build here rather than a
   call at run time. nvJitLinkVersion has no versioned name. */
#define JITLINK_ABI "_13_0"
#define JITLINK_SONAME "libnvJitLink.so.13"
#define JITLINK_CALLS(X)                                                                        \
    X(Create, __nvJitLinkCreate_13_0) X(Destroy, __nvJitLinkDestroy_13_0)                       \
    X(AddData, __nvJitLinkAddData_13_0) X(Complete, __nvJitLinkComplete_13_0)                   \
    X(GetLinkedCubinSize, __nvJitLinkGetLinkedCubinSize_13_0)                                   \
    X(GetLinkedCubin, __nvJitLinkGetLinkedCubin_13_0)                                           \
    X(GetErrorLogSize, __nvJitLinkGetErrorLogSize_13_0)                                         \
    X(GetErrorLog, __nvJitLinkGetErrorLog_13_0)                                                 \
    X(GetInfoLogSize, __nvJitLinkGetInfoLogSize_13_0)                                           \
    X(GetInfoLog, __nvJitLinkGetInfoLog_13_0) X(Version, nvJitLinkVersion)

typedef struct jitlink_api {
#define JITLINK_MEMBER(field, sym) __typeof__(sym) *field;
    JITLINK_CALLS(JITLINK_MEMBER)
#undef JITLINK_MEMBER
} jitlink_api;

static jitlink_api jl;                 /* valid once jl_status is FA3_OK */
static fa3_status jl_status = FA3_ERR_LINK;
static char jl_why[1024];              /* why loading failed (repeated in every later error) */
static pthread_once_t jl_once = PTHREAD_ONCE_INIT;

static void jitlink_load_once(void)
{
    /* The SONAME through the usual search (LD_LIBRARY_PATH, ld.so.conf, this library's RUNPATH),
       then the toolkit the library was built against, where the link used to find it. */
    static const char *const names[] = {JITLINK_SONAME, FA3_CUDA_DIR "/lib64/" JITLINK_SONAME};
    size_t n = 0;
    fa3_append(jl_why, sizeof jl_why, &n, "could not load nvJitLink (the nvjitlink backend):");
    void *h = NULL;
    const char *lib_used = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        const char *e = NULL;
        if (fa3_test_fail("dlopen-nvJitLink")) /* tests: as on a machine without the library */
            e = "injected failure (FA3JIT_TEST_FAIL=dlopen-nvJitLink)";
        else if (!(h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            e = dlerror();
        if (h)
            lib_used = names[i];
        else
            fa3_append(jl_why, sizeof jl_why, &n, "%s dlopen(\"%s\"): %s", i ? ";" : "",
                       names[i], e ? e : "unknown error");
    }
    if (!h) {
        fa3_append(jl_why, sizeof jl_why, &n,
                   "; install the CUDA 13 nvJitLink library (" JITLINK_SONAME ") or add its "
                   "folder to LD_LIBRARY_PATH%s",
                   FA3_HAVE_PTX_COMPILER ? ", or use the default backend (ptx-compiler), which "
                                           "does not need it" : "");
        return;
    }
#define JITLINK_RESOLVE(field, sym)                                                          \
    do {                                                                                     \
        void *fn_ = dlsym(h, #sym);                                                          \
        if (!fn_) {                                                                          \
            snprintf(jl_why, sizeof jl_why, "could not load nvJitLink (the nvjitlink backend): " \
                     "%s has no symbol %s (a library of another ABI than " JITLINK_ABI "?)",  \
                     lib_used, #sym);                                                        \
            dlclose(h);                                                                      \
            return;                                                                          \
        }                                                                                    \
        memcpy(&jl.field, &fn_, sizeof fn_);                                                 \
    } while (0);
    JITLINK_CALLS(JITLINK_RESOLVE)
#undef JITLINK_RESOLVE
    jl_why[0] = '\0';
    jl_status = FA3_OK; /* the handle stays open for the life of the process */
}

fa3_status fa3_jitlink_load(void)
{
    pthread_once(&jl_once, jitlink_load_once);
    if (jl_status != FA3_OK)
        return fa3_seterr(jl_status, "%s", jl_why);
    return FA3_OK;
}

static fa3_status jitlink_version(char *buf, size_t size)
{
    FA3_TRY(fa3_jitlink_load());
    unsigned major = 0, minor = 0;
    nvJitLinkResult r = jl.Version(&major, &minor);
    if (r != NVJITLINK_SUCCESS)
        return fa3_seterr(FA3_ERR_LINK, "nvJitLinkVersion failed: %s", jitlink_result_name(r));
    snprintf(buf, size, "nvJitLink %u.%u " JITLINK_OPT_O, major, minor);
    return FA3_OK;
}

/* Reads one of nvJitLink's logs into a malloc'd string ("" when empty). */
static fa3_status jitlink_log(nvJitLinkHandle h, int error_log, char **out)
{
    size_t n = 0;
    nvJitLinkResult r = error_log ? jl.GetErrorLogSize(h, &n) : jl.GetInfoLogSize(h, &n);
    if (r != NVJITLINK_SUCCESS)
        return fa3_seterr(FA3_ERR_LINK, "%s failed: %s",
                          error_log ? "nvJitLinkGetErrorLogSize" : "nvJitLinkGetInfoLogSize",
                          jitlink_result_name(r));
    char *s = malloc(n + 1);
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory reading a %zu-byte nvJitLink log", n);
    s[0] = '\0';
    if (n > 0) {
        r = error_log ? jl.GetErrorLog(h, s) : jl.GetInfoLog(h, s);
        if (r != NVJITLINK_SUCCESS) {
            free(s);
            return fa3_seterr(FA3_ERR_LINK, "%s failed: %s",
                              error_log ? "nvJitLinkGetErrorLog" : "nvJitLinkGetInfoLog",
                              jitlink_result_name(r));
        }
    }
    s[n] = '\0';
    *out = s;
    return FA3_OK;
}

/* Collects both logs into r (best effort: used on the failure path too). */
static fa3_status jitlink_logs(nvJitLinkHandle h, fa3_compile_result *r)
{
    fa3_status st = FA3_OK;
    if (!r->info_log)
        st = jitlink_log(h, 0, &r->info_log);
    if (!r->error_log) {
        fa3_status st2 = jitlink_log(h, 1, &r->error_log);
        if (st == FA3_OK)
            st = st2;
    }
    return st;
}

static fa3_status compile_jitlink(const char *ptx, size_t len, const char *arch,
                                  fa3_compile_result *out)
{
    FA3_TRY(jitlink_version(out->backend_version, sizeof out->backend_version));
    char arch_opt[32];
    snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
    const char *opts[] = {arch_opt, JITLINK_OPT_O, "-Xptxas=-v"};
    nvJitLinkHandle h = NULL;
    nvJitLinkResult r = fa3_test_fail("nvJitLinkCreate")
                            ? NVJITLINK_ERROR_INTERNAL
                            : jl.Create(&h, (uint32_t)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVJITLINK_SUCCESS)
        return fa3_seterr(FA3_ERR_LINK, "nvJitLinkCreate(%s %s -Xptxas=-v) failed: %s", arch_opt,
                          JITLINK_OPT_O, jitlink_result_name(r));

    const char *failed = NULL;
    r = jl.AddData(h, NVJITLINK_INPUT_PTX, ptx, len, FA3_KERNEL_NAME ".ptx");
    if (r != NVJITLINK_SUCCESS)
        failed = "nvJitLinkAddData(PTX)";
    if (!failed) {
        r = jl.Complete(h);
        if (r != NVJITLINK_SUCCESS)
            failed = "nvJitLinkComplete";
    }
    size_t size = 0;
    if (!failed) {
        r = jl.GetLinkedCubinSize(h, &size);
        if (r != NVJITLINK_SUCCESS)
            failed = "nvJitLinkGetLinkedCubinSize";
        else if (size == 0) {
            r = NVJITLINK_ERROR_INTERNAL;
            failed = "nvJitLinkGetLinkedCubinSize (empty cubin)";
        }
    }
    if (failed) {
        /* The logs explain the failure; read them first, then set the message. */
        fa3_compile_result tmp;
        result_init(&tmp);
        (void)jitlink_logs(h, &tmp);
        out->info_log = tmp.info_log;
        out->error_log = tmp.error_log;
        nvJitLinkResult dr = jl.Destroy(&h);
        (void)dr; /* the failure being reported matters more */
        fa3_seterr(FA3_ERR_LINK, "%s failed: %s", failed, jitlink_result_name(r));
        append_logs(out);
        return FA3_ERR_LINK;
    }
    fa3_status st = FA3_OK;
    out->cubin = fa3_test_fail("oom-cubin") ? NULL : malloc(size);
    if (!out->cubin)
        st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte cubin", size);
    if (st == FA3_OK) {
        r = jl.GetLinkedCubin(h, out->cubin);
        if (r != NVJITLINK_SUCCESS)
            st = fa3_seterr(FA3_ERR_LINK, "nvJitLinkGetLinkedCubin failed: %s",
                            jitlink_result_name(r));
        else
            out->cubin_size = size;
    }
    if (st == FA3_OK)
        st = jitlink_logs(h, out);
    r = jl.Destroy(&h);
    if (st == FA3_OK && r != NVJITLINK_SUCCESS)
        st = fa3_seterr(FA3_ERR_LINK, "nvJitLinkDestroy failed: %s", jitlink_result_name(r));
    return st;
}

/* ---- PTX Compiler API */

#if FA3_HAVE_PTX_COMPILER
static const char *ptxc_result_name(nvPTXCompileResult r)
{
    switch (r) {
    case NVPTXCOMPILE_SUCCESS: return "NVPTXCOMPILE_SUCCESS";
    case NVPTXCOMPILE_ERROR_INVALID_COMPILER_HANDLE: return "NVPTXCOMPILE_ERROR_INVALID_COMPILER_HANDLE";
    case NVPTXCOMPILE_ERROR_INVALID_INPUT: return "NVPTXCOMPILE_ERROR_INVALID_INPUT";
    case NVPTXCOMPILE_ERROR_COMPILATION_FAILURE: return "NVPTXCOMPILE_ERROR_COMPILATION_FAILURE";
    case NVPTXCOMPILE_ERROR_INTERNAL: return "NVPTXCOMPILE_ERROR_INTERNAL";
    case NVPTXCOMPILE_ERROR_OUT_OF_MEMORY: return "NVPTXCOMPILE_ERROR_OUT_OF_MEMORY";
    case NVPTXCOMPILE_ERROR_COMPILER_INVOCATION_INCOMPLETE:
        return "NVPTXCOMPILE_ERROR_COMPILER_INVOCATION_INCOMPLETE";
    case NVPTXCOMPILE_ERROR_UNSUPPORTED_PTX_VERSION: return "NVPTXCOMPILE_ERROR_UNSUPPORTED_PTX_VERSION";
    case NVPTXCOMPILE_ERROR_UNSUPPORTED_DEVSIDE_SYNC: return "NVPTXCOMPILE_ERROR_UNSUPPORTED_DEVSIDE_SYNC";
    case NVPTXCOMPILE_ERROR_CANCELLED: return "NVPTXCOMPILE_ERROR_CANCELLED";
    }
    return "NVPTXCOMPILE_ERROR_(unknown)";
}

static fa3_status ptxc_version(char *buf, size_t size)
{
    unsigned major = 0, minor = 0;
    nvPTXCompileResult r = nvPTXCompilerGetVersion(&major, &minor);
    if (r != NVPTXCOMPILE_SUCCESS)
        return fa3_seterr(FA3_ERR_COMPILE, "nvPTXCompilerGetVersion failed: %s",
                          ptxc_result_name(r));
    snprintf(buf, size, "nvPTXCompiler %u.%u " PTXC_OPT_O, major, minor);
    return FA3_OK;
}

static fa3_status ptxc_log(nvPTXCompilerHandle h, int error_log, char **out)
{
    size_t n = 0;
    nvPTXCompileResult r = error_log ? nvPTXCompilerGetErrorLogSize(h, &n)
                                     : nvPTXCompilerGetInfoLogSize(h, &n);
    if (r != NVPTXCOMPILE_SUCCESS)
        return fa3_seterr(FA3_ERR_COMPILE, "%s failed: %s",
                          error_log ? "nvPTXCompilerGetErrorLogSize" : "nvPTXCompilerGetInfoLogSize",
                          ptxc_result_name(r));
    char *s = malloc(n + 1);
    if (!s)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory reading a %zu-byte compiler log", n);
    s[0] = '\0';
    if (n > 0) {
        r = error_log ? nvPTXCompilerGetErrorLog(h, s) : nvPTXCompilerGetInfoLog(h, s);
        if (r != NVPTXCOMPILE_SUCCESS) {
            free(s);
            return fa3_seterr(FA3_ERR_COMPILE, "%s failed: %s",
                              error_log ? "nvPTXCompilerGetErrorLog" : "nvPTXCompilerGetInfoLog",
                              ptxc_result_name(r));
        }
    }
    s[n] = '\0';
    *out = s;
    return FA3_OK;
}

static fa3_status ptxc_logs(nvPTXCompilerHandle h, fa3_compile_result *r)
{
    fa3_status st = FA3_OK;
    if (!r->info_log)
        st = ptxc_log(h, 0, &r->info_log);
    if (!r->error_log) {
        fa3_status st2 = ptxc_log(h, 1, &r->error_log);
        if (st == FA3_OK)
            st = st2;
    }
    return st;
}

static fa3_status compile_ptxc(const char *ptx, size_t len, const char *arch,
                               fa3_compile_result *out)
{
    FA3_TRY(ptxc_version(out->backend_version, sizeof out->backend_version));
    char arch_opt[32];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-name=%s", arch);
    const char *const opts[] = {arch_opt, PTXC_OPT_O, "--verbose"};
    nvPTXCompilerHandle h = NULL;
    nvPTXCompileResult r = fa3_test_fail("nvPTXCompilerCreate") ? NVPTXCOMPILE_ERROR_OUT_OF_MEMORY
                                                                : nvPTXCompilerCreate(&h, len, ptx);
    if (r != NVPTXCOMPILE_SUCCESS)
        return fa3_seterr(FA3_ERR_COMPILE, "nvPTXCompilerCreate failed: %s", ptxc_result_name(r));

    const char *failed = NULL;
    r = nvPTXCompilerCompile(h, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVPTXCOMPILE_SUCCESS)
        failed = "nvPTXCompilerCompile";
    size_t size = 0;
    if (!failed) {
        r = nvPTXCompilerGetCompiledProgramSize(h, &size);
        if (r != NVPTXCOMPILE_SUCCESS)
            failed = "nvPTXCompilerGetCompiledProgramSize";
        else if (size == 0) {
            r = NVPTXCOMPILE_ERROR_INTERNAL;
            failed = "nvPTXCompilerGetCompiledProgramSize (empty program)";
        }
    }
    if (failed) {
        fa3_compile_result tmp;
        result_init(&tmp);
        (void)ptxc_logs(h, &tmp);
        out->info_log = tmp.info_log;
        out->error_log = tmp.error_log;
        nvPTXCompileResult dr = nvPTXCompilerDestroy(&h);
        (void)dr;
        fa3_seterr(FA3_ERR_COMPILE, "%s(%s %s --verbose) failed: %s", failed, arch_opt, PTXC_OPT_O,
                   ptxc_result_name(r));
        append_logs(out);
        return FA3_ERR_COMPILE;
    }
    fa3_status st = FA3_OK;
    out->cubin = fa3_test_fail("oom-cubin") ? NULL : malloc(size);
    if (!out->cubin)
        st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte cubin", size);
    if (st == FA3_OK) {
        r = nvPTXCompilerGetCompiledProgram(h, out->cubin);
        if (r != NVPTXCOMPILE_SUCCESS)
            st = fa3_seterr(FA3_ERR_COMPILE, "nvPTXCompilerGetCompiledProgram failed: %s",
                            ptxc_result_name(r));
        else
            out->cubin_size = size;
    }
    if (st == FA3_OK)
        st = ptxc_logs(h, out);
    r = nvPTXCompilerDestroy(&h);
    if (st == FA3_OK && r != NVPTXCOMPILE_SUCCESS)
        st = fa3_seterr(FA3_ERR_COMPILE, "nvPTXCompilerDestroy failed: %s", ptxc_result_name(r));
    return st;
}
#endif /* FA3_HAVE_PTX_COMPILER */

/* ---- dispatch */

fa3_status fa3_backend_version(fa3_backend b, char *buf, size_t size)
{
    if (!buf || size == 0)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_backend_version: no buffer");
    buf[0] = '\0';
    switch (fa3_backend_resolve(b)) {
    case FA3_BACKEND_PTX_COMPILER:
#if FA3_HAVE_PTX_COMPILER
        return ptxc_version(buf, size);
#else
        return fa3_seterr(FA3_ERR_BAD_BACKEND,
                          "backend ptx-compiler is not built into this library (configure with "
                          "-Dptx_compiler_dir=<folder of libnvptxcompiler_static.a>)");
#endif
    case FA3_BACKEND_NVJITLINK:
        return jitlink_version(buf, size);
    case FA3_BACKEND_DRIVER_JIT: {
        const fa3_driver *d = NULL;
        if (fa3_driver_get(&d) == FA3_OK)
            snprintf(buf, size, "driver-jit %d", d->version);
        else {
            fa3_clearerr(); /* not an error here: the launch will report it */
            snprintf(buf, size, "driver-jit unavailable");
        }
        return FA3_OK;
    }
    case FA3_BACKEND_AUTO:
        break;
    }
    return fa3_seterr(FA3_ERR_BAD_BACKEND, "backend %d is not a valid fa3_backend", (int)b);
}

fa3_status fa3_compile_ptx(const char *ptx, size_t len, fa3_arch arch, fa3_backend b,
                           fa3_compile_result *out)
{
    if (!out)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_compile_ptx: NULL result");
    result_init(out);
    if (!ptx || len == 0 || ptx[len] != '\0')
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "fa3_compile_ptx: PTX text missing or not NUL-terminated at len %zu", len);
    const char *arch_name = fa3_arch_name(arch);
    if (!arch_name)
        return fa3_seterr(FA3_ERR_BAD_ARCH, "arch %d is not supported (supported: 90 = sm_90a)",
                          (int)arch);
    fa3_status st;
    switch (b) {
    case FA3_BACKEND_PTX_COMPILER:
#if FA3_HAVE_PTX_COMPILER
        st = compile_ptxc(ptx, len, arch_name, out);
        break;
#else
        return fa3_seterr(FA3_ERR_BAD_BACKEND,
                          "backend ptx-compiler is not built into this library");
#endif
    case FA3_BACKEND_NVJITLINK:
        st = compile_jitlink(ptx, len, arch_name, out);
        break;
    case FA3_BACKEND_DRIVER_JIT:
        /* Compiled by the driver when the module is loaded. */
        st = fa3_backend_version(b, out->backend_version, sizeof out->backend_version);
        if (st == FA3_OK && (!(out->info_log = dup_text("")) || !(out->error_log = dup_text(""))))
            st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory");
        break;
    default:
        return fa3_seterr(FA3_ERR_BAD_BACKEND, "backend %d cannot compile (resolve AUTO first)",
                          (int)b);
    }
    /* Resources come from the info log; a warning counts in either log. */
    if (out->info_log)
        fa3_parse_ptxas_log(out->info_log, out);
    if (out->error_log) {
        fa3_compile_result w;
        result_init(&w);
        fa3_parse_ptxas_log(out->error_log, &w);
        out->has_warning |= w.has_warning;
    }
    return st;
}
