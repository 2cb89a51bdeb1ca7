/*
 * CUDA C programs compiled at run time (rtc.h): NVRTC, dlopen'd ("libnvrtc.so.13", then
 * "libnvrtc.so", then the toolkit's lib64) so that the library has no link-time dependency on it;
 * each program's compiled image per compute capability (process lifetime) and its loaded module
 * per CUcontext, both under one process-wide mutex.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "fa3jit_build_config.h"
#include "runtime/rtc.h"

struct fa3_rtc_image {
    int cc;
    int is_ptx;
    void *data;
    size_t size;
};

struct fa3_rtc_module {
    CUcontext ctx;
    CUmodule module;
    CUfunction fn[FA3_RTC_MAX_FUNCTIONS];
};

/* The header every program may #include "fa3_rtc.cuh": integer names and 16-bit loads. */
static const char rtc_header_name[] = "fa3_rtc.cuh";
static const char rtc_header[] =
    "typedef unsigned short u16;\n"
    "typedef unsigned int u32;\n"
    "typedef long long i64;\n"
    "typedef unsigned long long u64;\n"
    "\n"
    "__device__ __forceinline__ float bf16_bits_to_f32(u16 b)\n"
    "{\n"
    "    return __uint_as_float(((unsigned)b) << 16);\n"
    "}\n"
    "\n"
    "__device__ __forceinline__ float f16_bits_to_f32(u16 h)\n"
    "{\n"
    "    float f;\n"
    "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "    return f;\n"
    "}\n"
    "\n"
    "/* One bf16 (FP16 = false) or fp16 element as a float (exact). */\n"
    "template <bool FP16> __device__ __forceinline__ float load_elem(const u16 *p)\n"
    "{\n"
    "    return FP16 ? f16_bits_to_f32(*p) : bf16_bits_to_f32(*p);\n"
    "}\n";

/* ------------------------------------------------------------------ NVRTC, dlopen'd */

typedef struct nvrtc_api {
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *); /* NULL before NVRTC 11.1 */
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
} nvrtc_api;

static pthread_mutex_t rtc_lock = PTHREAD_MUTEX_INITIALIZER;
static int nvrtc_tried;          /* under rtc_lock */
static nvrtc_api nvrtc;          /* valid when nvrtc_ok */
static int nvrtc_ok;
static char nvrtc_why[512];      /* why loading failed (repeated in every later error) */

#define LOAD_SYM(h, field, name, required)                                                  \
    do {                                                                                    \
        void *sym_ = dlsym((h), (name));                                                    \
        memcpy(&nvrtc.field, &sym_, sizeof sym_);                                           \
        if (!sym_ && (required)) {                                                          \
            snprintf(nvrtc_why, sizeof nvrtc_why, "%s has no symbol %s", lib_used, (name)); \
            return 0;                                                                       \
        }                                                                                   \
    } while (0)

/* Called with rtc_lock held. Returns 1 if NVRTC is usable. */
static int nvrtc_load_locked(void)
{
    if (nvrtc_tried)
        return nvrtc_ok;
    nvrtc_tried = 1;
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so",
                                        FA3_CUDA_DIR "/lib64/libnvrtc.so.13",
                                        FA3_CUDA_DIR "/lib64/libnvrtc.so"};
    void *h = NULL;
    const char *lib_used = NULL;
    char first_err[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; ++i) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            lib_used = names[i];
        } else if (!first_err[0]) {
            const char *e = dlerror();
            snprintf(first_err, sizeof first_err, "%s", e ? e : names[i]);
        }
    }
    if (!h) {
        snprintf(nvrtc_why, sizeof nvrtc_why,
                 "NVRTC could not be loaded (tried libnvrtc.so.13, libnvrtc.so and %s/lib64): %s; "
                 "install the CUDA NVRTC runtime or add its folder to LD_LIBRARY_PATH",
                 FA3_CUDA_DIR, first_err);
        return 0;
    }
    LOAD_SYM(h, GetErrorString, "nvrtcGetErrorString", 1);
    LOAD_SYM(h, Version, "nvrtcVersion", 1);
    LOAD_SYM(h, CreateProgram, "nvrtcCreateProgram", 1);
    LOAD_SYM(h, DestroyProgram, "nvrtcDestroyProgram", 1);
    LOAD_SYM(h, CompileProgram, "nvrtcCompileProgram", 1);
    LOAD_SYM(h, GetProgramLogSize, "nvrtcGetProgramLogSize", 1);
    LOAD_SYM(h, GetProgramLog, "nvrtcGetProgramLog", 1);
    LOAD_SYM(h, GetPTXSize, "nvrtcGetPTXSize", 1);
    LOAD_SYM(h, GetPTX, "nvrtcGetPTX", 1);
    LOAD_SYM(h, GetCUBINSize, "nvrtcGetCUBINSize", 0);
    LOAD_SYM(h, GetCUBIN, "nvrtcGetCUBIN", 0);
    if (!nvrtc.GetCUBINSize || !nvrtc.GetCUBIN)
        nvrtc.GetCUBINSize = NULL, nvrtc.GetCUBIN = NULL;
    nvrtc_ok = 1; /* the handle stays open for the life of the process */
    return 1;
}

static fa3_status nvrtc_fail(const fa3_rtc_program *p, nvrtcResult r, const char *call,
                             const char *arch_opt)
{
    return fa3_seterr(r == NVRTC_ERROR_OUT_OF_MEMORY ? FA3_ERR_OUT_OF_MEMORY : FA3_ERR_COMPILE,
                      "%s: %s (%s) failed: %s (%d)", p->what, call, arch_opt,
                      nvrtc.GetErrorString(r), (int)r);
}

/* Compiles p's source for compute capability cc (e.g. 90) into a cubin (or PTX if this NVRTC
   cannot make cubins). Called with rtc_lock held. */
static fa3_status nvrtc_compile_locked(const fa3_rtc_program *p, int cc, void **image,
                                       size_t *size, int *is_ptx)
{
    char arch_opt[64];
    int ptx = nvrtc.GetCUBIN == NULL;
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", cc);
    const char *opts[] = {arch_opt, "--std=c++17"};

    nvrtcProgram prog = NULL;
    const char *headers[] = {rtc_header}, *header_names[] = {rtc_header_name};
    nvrtcResult r = nvrtc.CreateProgram(&prog, p->source, p->file_name, 1, headers, header_names);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(p, r, "nvrtcCreateProgram", arch_opt);
    fa3_status st = FA3_OK;
    r = nvrtc.CompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(p, r, "nvrtcCompileProgram", arch_opt);
        size_t log_size = 0;
        if (nvrtc.GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
            char *log = malloc(log_size);
            if (log && nvrtc.GetProgramLog(prog, log) == NVRTC_SUCCESS)
                fa3_appenderr("\nNVRTC log:\n%s", log);
            free(log);
        }
        nvrtc.DestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    r = ptx ? nvrtc.GetPTXSize(prog, &n) : nvrtc.GetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(p, r, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", arch_opt);
    } else if (n == 0) {
        st = fa3_seterr(FA3_ERR_COMPILE, "%s: NVRTC returned an empty %s (%s)", p->what,
                        ptx ? "PTX" : "cubin", arch_opt);
    } else {
        char *buf = malloc(n);
        if (!buf) {
            st = fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", p->what, n);
        } else {
            r = ptx ? nvrtc.GetPTX(prog, buf) : nvrtc.GetCUBIN(prog, buf);
            if (r != NVRTC_SUCCESS) {
                free(buf);
                st = nvrtc_fail(p, r, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", arch_opt);
            } else {
                *image = buf;
                *size = n;
                *is_ptx = ptx;
            }
        }
    }
    r = nvrtc.DestroyProgram(&prog);
    if (st == FA3_OK && r != NVRTC_SUCCESS) {
        free(*image);
        *image = NULL;
        st = nvrtc_fail(p, r, "nvrtcDestroyProgram", arch_opt);
    }
    return st;
}

/* ------------------------------------------------------------------ the caches */

/* p's image for compute capability cc, compiling it on first use. rtc_lock held. */
static fa3_status image_for_cc_locked(fa3_rtc_program *p, int cc, const fa3_rtc_image **out)
{
    for (int i = 0; i < p->num_images; ++i) {
        if (p->images[i].cc == cc) {
            *out = &p->images[i];
            return FA3_OK;
        }
    }
    if (!nvrtc_load_locked())
        return fa3_seterr(FA3_ERR_NO_NVRTC, "%s: %s", p->what, nvrtc_why);
    fa3_rtc_image *grown = realloc(p->images, (size_t)(p->num_images + 1) * sizeof *grown);
    if (!grown)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
    p->images = grown;
    fa3_rtc_image img = {.cc = cc};
    FA3_TRY(nvrtc_compile_locked(p, cc, &img.data, &img.size, &img.is_ptx));
    p->images[p->num_images] = img;
    *out = &p->images[p->num_images++];
    return FA3_OK;
}

/* Loads p's image into the current context cuctx (device dev). rtc_lock held. */
static fa3_status module_for_context_locked(fa3_rtc_program *p, const fa3_driver *drv,
                                            CUcontext cuctx, CUdevice dev,
                                            const fa3_rtc_module **out)
{
    for (int i = 0; i < p->num_modules; ++i) {
        if (p->modules[i].ctx == cuctx) {
            *out = &p->modules[i];
            return FA3_OK;
        }
    }
    int major = 0, minor = 0;
    FA3_TRY(FA3_CU(drv, cuDeviceGetAttribute(&major,
                                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)));
    FA3_TRY(FA3_CU(drv, cuDeviceGetAttribute(&minor,
                                             CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)));
    const int cc = major * 10 + minor;
    if (cc < p->min_cc)
        return fa3_seterr(FA3_ERR_UNSUPPORTED,
                          "%s: the device has compute capability %d.%d; it needs %d.%d or newer",
                          p->what, major, minor, p->min_cc / 10, p->min_cc % 10);
    const fa3_rtc_image *img = NULL;
    FA3_TRY(image_for_cc_locked(p, cc, &img));

    fa3_rtc_module *grown = realloc(p->modules, (size_t)(p->num_modules + 1) * sizeof *grown);
    if (!grown)
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
    p->modules = grown;
    fa3_rtc_module m = {.ctx = cuctx};
    if (img->is_ptx) {
        char log[4096] = "";
        CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
        void *val[2] = {log, (void *)(uintptr_t)sizeof log};
        fa3_status st = FA3_CU(drv, cuModuleLoadDataEx(&m.module, img->data, 2, opt, val));
        if (st != FA3_OK) {
            if (log[0])
                fa3_appenderr("\nJIT log:\n%s", log);
            return st;
        }
    } else {
        FA3_TRY(FA3_CU(drv, cuModuleLoadData(&m.module, img->data)));
    }
    for (int i = 0; i < p->num_functions; ++i) {
        fa3_status st = FA3_CU(drv, cuModuleGetFunction(&m.fn[i], m.module, p->functions[i]));
        if (st != FA3_OK) {
            drv->cuModuleUnload(m.module); /* already failing: keep the first error */
            return st;
        }
    }
    p->modules[p->num_modules] = m;
    *out = &p->modules[p->num_modules++];
    return FA3_OK;
}

/* ------------------------------------------------------------------ entry points */

fa3_status fa3_rtc_functions(fa3_rtc_program *p, const fa3_driver **drv_out, CUfunction *fn)
{
    const fa3_driver *drv = NULL;
    FA3_TRY(fa3_driver_get(&drv));
    CUcontext cuctx = NULL;
    CUdevice dev = 0;
    FA3_TRY(fa3_driver_ensure_context(&cuctx, &dev));
    if (pthread_mutex_lock(&rtc_lock) != 0)
        return fa3_seterr(FA3_ERR_INTERNAL, "%s: pthread_mutex_lock failed", p->what);
    const fa3_rtc_module *mod = NULL;
    fa3_status st = module_for_context_locked(p, drv, cuctx, dev, &mod);
    if (st == FA3_OK)
        memcpy(fn, mod->fn, (size_t)p->num_functions * sizeof *fn);
    pthread_mutex_unlock(&rtc_lock);
    *drv_out = drv;
    return st;
}

fa3_status fa3_rtc_build_image(const fa3_rtc_program *p, int cc, void **image, size_t *size,
                               int *is_ptx)
{
    if (!image || !size || !is_ptx)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "%s build: NULL argument", p->what);
    if (cc < 10 || cc > 999)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "%s build: compute capability %d is invalid", p->what, cc);
    *image = NULL;
    *size = 0;
    if (pthread_mutex_lock(&rtc_lock) != 0)
        return fa3_seterr(FA3_ERR_INTERNAL, "%s: pthread_mutex_lock failed", p->what);
    fa3_status st = nvrtc_load_locked()
                        ? nvrtc_compile_locked(p, cc, image, size, is_ptx)
                        : fa3_seterr(FA3_ERR_NO_NVRTC, "%s: %s", p->what, nvrtc_why);
    pthread_mutex_unlock(&rtc_lock);
    return st;
}
