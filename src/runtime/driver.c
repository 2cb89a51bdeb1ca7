/*
 * The CUDA Driver API, loaded at first use: dlopen("libcuda.so.1"), then every entry point of the
 * fa3_driver table resolved through cuGetProcAddress (so versioned symbols such as cuMemAlloc_v2
 * are found by their base names, at the ABI of the cuda.h we were compiled against), then cuInit(0).
 * Nothing here runs until a caller needs the GPU, so codegen and compiling work without a driver.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/driver.h"

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static fa3_driver g_drv;
static void *g_lib;
static fa3_status g_load_status = FA3_ERR_NO_DRIVER;
static char g_load_error[1024] = "the CUDA driver was not loaded";
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static atomic_int g_loaded; /* 1 once load_driver succeeded (readable without pthread_once) */

static get_proc_v2_fn g_get_proc_v2;
static get_proc_v1_fn g_get_proc_v1;

/* Looks a driver function up by its base name at ABI version cuda_version; NULL if absent. */
static void *lookup(const char *name, int cuda_version)
{
    void *fn = NULL;
    CUresult r;
    if (g_get_proc_v2) {
        CUdriverProcAddressQueryResult qr = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        r = g_get_proc_v2(name, &fn, cuda_version, CU_GET_PROC_ADDRESS_DEFAULT, &qr);
        if (r != CUDA_SUCCESS || qr != CU_GET_PROC_ADDRESS_SUCCESS)
            return NULL;
    } else {
        r = g_get_proc_v1(name, &fn, cuda_version, CU_GET_PROC_ADDRESS_DEFAULT);
        if (r != CUDA_SUCCESS)
            return NULL;
    }
    return fn;
}

static void load_fail(const char *fmt, ...) FA3_PRINTF(1, 2);
static void load_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_load_error, sizeof g_load_error, fmt, ap);
    va_end(ap);
    g_load_status = FA3_ERR_NO_DRIVER;
}

/*
 * The CUDA toolkit ships a stub libcuda.so (lib64/stubs, targets/<arch>/lib/stubs) for linking on
 * machines without a driver; each of its entry points returns CUDA_ERROR_STUB_LIBRARY. dlopen
 * finds it when no driver is installed and the stubs folder is on the library path (containers
 * built with the toolkit: then only the "libcuda.so" fallback finds it), or when a libcuda.so.1
 * made from it sits ahead of the driver's on LD_LIBRARY_PATH. Returns 1, with the failure
 * recorded, if g_lib is that stub (as_so1: it was found under the driver's name libcuda.so.1;
 * dl1: why that name failed otherwise).
 */
static int fail_if_stub(int as_so1, const char *dl1)
{
    CUresult (*init)(unsigned int) = NULL;
    void *sym = dlsym(g_lib, "cuInit");
    memcpy(&init, &sym, sizeof sym);
    if (!init || init(0) != CUDA_ERROR_STUB_LIBRARY)
        return 0;
    /* The file dlopen found (a symbolic link: and what it names). */
    struct link_map *lm = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s",
             dlinfo(g_lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name[0]
                 ? lm->l_name
                 : as_so1 ? "libcuda.so.1" : "libcuda.so");
    char *real = realpath(path, NULL);
    if (real && strcmp(real, path) != 0) {
        size_t n = strlen(path);
        snprintf(path + n, sizeof path - n, " (-> %s)", real);
    }
    free(real);
    if (as_so1)
        load_fail("could not load the CUDA driver: libcuda.so.1 is %s, the CUDA toolkit's stub "
                  "library (cuInit returns CUDA_ERROR_STUB_LIBRARY), not a driver: it is "
                  "shadowing the NVIDIA driver's libcuda.so.1, if one is installed; take its "
                  "folder off LD_LIBRARY_PATH (or the ld.so configuration)", path);
    else
        load_fail("could not load the CUDA driver: no NVIDIA driver is installed "
                  "(dlopen(\"libcuda.so.1\"): %s); libcuda.so is %s, the CUDA toolkit's stub "
                  "library (cuInit returns CUDA_ERROR_STUB_LIBRARY), not a driver", dl1, path);
    return 1;
}

static void load_driver(void)
{
    const char *dl1 = NULL;
    if (fa3_test_fail("dlopen")) { /* tests: as on a machine without the driver */
        load_fail("could not load the CUDA driver: dlopen(\"libcuda.so.1\"): injected failure "
                  "(FA3JIT_TEST_FAIL=dlopen)");
        return;
    }
    g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        const char *e = dlerror();
        dl1 = e ? e : "unknown error";
        /* Keep a copy: the next dlerror() call overwrites it. */
        static char first[256];
        snprintf(first, sizeof first, "%s", dl1);
        dl1 = first;
        g_lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (!g_lib) {
        const char *e = dlerror();
        load_fail("could not load the CUDA driver: dlopen(\"libcuda.so.1\"): %s; "
                  "dlopen(\"libcuda.so\"): %s", dl1, e ? e : "unknown error");
        return;
    }
    g_get_proc_v2 = (get_proc_v2_fn)dlsym(g_lib, "cuGetProcAddress_v2");
    if (!g_get_proc_v2)
        g_get_proc_v1 = (get_proc_v1_fn)dlsym(g_lib, "cuGetProcAddress");
    if (!g_get_proc_v2 && !g_get_proc_v1) {
        if (!fail_if_stub(dl1 == NULL, dl1))
            load_fail("the CUDA driver has no cuGetProcAddress (driver older than CUDA 11.3)");
        return;
    }

    /* Bootstrap at a version every CUDA 12+ driver knows, then ask for the functions at the ABI of
       our headers, or the driver's own version when it is older (it has nothing newer to give). */
    fa3_driver d;
    memset(&d, 0, sizeof d);
    void *dgv = lookup("cuDriverGetVersion", 12000);
    memcpy(&d.cuDriverGetVersion, &dgv, sizeof dgv);
    if (!d.cuDriverGetVersion || d.cuDriverGetVersion(&d.version) != CUDA_SUCCESS) {
        if (!fail_if_stub(dl1 == NULL, dl1))
            load_fail("cuDriverGetVersion is missing from the CUDA driver or failed");
        return;
    }
    if (d.version < 12000) {
        load_fail("the CUDA driver supports CUDA %d.%d; fa3jit needs CUDA 12.0 or newer (TMA)",
                  d.version / 1000, d.version % 1000 / 10);
        return;
    }
    /* Every prototype in driver.h is the CUDA 12.0 ABI, so ask for exactly that version: asking
       for the newest one hands back changed signatures (CUDA 13.0's cuCtxSynchronize and
       cuCtxGetDevice take a CUcontext; calling them through 12.0 prototypes destroyed contexts
       and crashed on the H200). */
    int abi = 12000;

    /* #name is the base name (stringizing does not expand cuda.h's versioning macros such as
       cuMemAlloc -> cuMemAlloc_v2), while d.name expands to the same member the header declared. */
#define FA3_RESOLVE(name)                                                            \
    do {                                                                             \
        void *fa3_fn_ = lookup(#name, abi);                                          \
        memcpy(&d.name, &fa3_fn_, sizeof fa3_fn_);                                   \
        if (!d.name) {                                                               \
            load_fail("the CUDA driver (CUDA %d.%d) does not provide %s",             \
                      d.version / 1000, d.version % 1000 / 10, #name);               \
            return;                                                                  \
        }                                                                            \
    } while (0)

    FA3_RESOLVE(cuGetErrorName);
    FA3_RESOLVE(cuGetErrorString);
    FA3_RESOLVE(cuInit);
    FA3_RESOLVE(cuDriverGetVersion);
    FA3_RESOLVE(cuDeviceGet);
    FA3_RESOLVE(cuDeviceGetCount);
    FA3_RESOLVE(cuDeviceGetAttribute);
    FA3_RESOLVE(cuDeviceGetName);
    FA3_RESOLVE(cuDevicePrimaryCtxRetain);
    FA3_RESOLVE(cuDevicePrimaryCtxRelease);
    FA3_RESOLVE(cuCtxGetCurrent);
    FA3_RESOLVE(cuCtxSetCurrent);
    FA3_RESOLVE(cuCtxGetDevice);
    FA3_RESOLVE(cuCtxSynchronize);
    FA3_RESOLVE(cuModuleLoadData);
    FA3_RESOLVE(cuModuleLoadDataEx);
    FA3_RESOLVE(cuModuleUnload);
    FA3_RESOLVE(cuModuleGetFunction);
    FA3_RESOLVE(cuFuncSetAttribute);
    FA3_RESOLVE(cuFuncGetAttribute);
    FA3_RESOLVE(cuLaunchKernel);
    FA3_RESOLVE(cuTensorMapEncodeTiled);
    FA3_RESOLVE(cuMemAlloc);
    FA3_RESOLVE(cuMemFree);
    FA3_RESOLVE(cuMemcpyHtoD);
    FA3_RESOLVE(cuMemcpyDtoH);
    FA3_RESOLVE(cuMemcpyDtoHAsync);
    FA3_RESOLVE(cuMemsetD32);
    FA3_RESOLVE(cuMemsetD32Async);
    FA3_RESOLVE(cuMemAllocAsync);
    FA3_RESOLVE(cuMemFreeAsync);
    FA3_RESOLVE(cuStreamSynchronize);
    FA3_RESOLVE(cuStreamIsCapturing);
    FA3_RESOLVE(cuEventCreate);
    FA3_RESOLVE(cuEventDestroy);
    FA3_RESOLVE(cuEventRecord);
    FA3_RESOLVE(cuEventSynchronize);
    FA3_RESOLVE(cuEventElapsedTime);
#undef FA3_RESOLVE

    CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        if (d.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
            name = "unknown CUresult";
        if (d.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text)
            text = "";
        load_fail("cuInit(0) failed: %s (%s)", name, text);
        return;
    }
    g_drv = d;
    g_load_status = FA3_OK;
    g_load_error[0] = '\0';
    atomic_store_explicit(&g_loaded, 1, memory_order_release);
}

fa3_status fa3_driver_get(const fa3_driver **out)
{
    pthread_once(&g_load_once, load_driver);
    if (g_load_status != FA3_OK) {
        if (out)
            *out = NULL;
        return fa3_seterr(g_load_status, "%s", g_load_error);
    }
    if (out)
        *out = &g_drv;
    return FA3_OK;
}

int fa3_driver_loaded(void)
{
    return atomic_load_explicit(&g_loaded, memory_order_acquire);
}

fa3_status fa3_cu_check(CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS)
        return FA3_OK;
    const char *name = NULL, *text = NULL;
    if (fa3_driver_loaded()) {
        if (g_drv.cuGetErrorName(r, &name) != CUDA_SUCCESS)
            name = NULL;
        if (g_drv.cuGetErrorString(r, &text) != CUDA_SUCCESS)
            text = NULL;
    }
    if (name)
        return fa3_seterr(FA3_ERR_CUDA, "%s: %s (%s)", call, name, text ? text : "no description");
    return fa3_seterr(FA3_ERR_CUDA, "%s: CUresult %d", call, (int)r);
}

/* Device 0's primary context, retained once for the life of the process. */
static pthread_mutex_t g_primary_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_primary;
static CUdevice g_primary_dev;

fa3_status fa3_driver_ensure_context(CUcontext *ctx, CUdevice *dev)
{
    const fa3_driver *d;
    FA3_TRY(fa3_driver_get(&d));
    CUcontext cur = NULL;
    FA3_TRY(FA3_CU(d, cuCtxGetCurrent(&cur)));
    CUdevice cdev = 0;
    if (cur) {
        FA3_TRY(FA3_CU(d, cuCtxGetDevice(&cdev)));
    } else {
        pthread_mutex_lock(&g_primary_mu);
        if (!g_primary) {
            int count = 0;
            fa3_status st = FA3_CU(d, cuDeviceGetCount(&count));
            if (st == FA3_OK && count < 1)
                st = fa3_seterr(FA3_ERR_NO_DRIVER, "no CUDA device found (cuDeviceGetCount = 0)");
            CUdevice d0 = 0;
            if (st == FA3_OK)
                st = FA3_CU(d, cuDeviceGet(&d0, 0));
            CUcontext pc = NULL;
            if (st == FA3_OK)
                st = FA3_CU(d, cuDevicePrimaryCtxRetain(&pc, d0));
            if (st != FA3_OK) {
                pthread_mutex_unlock(&g_primary_mu);
                return st;
            }
            g_primary = pc;
            g_primary_dev = d0;
        }
        cur = g_primary;
        cdev = g_primary_dev;
        pthread_mutex_unlock(&g_primary_mu);
        FA3_TRY(FA3_CU(d, cuCtxSetCurrent(cur)));
    }
    if (ctx)
        *ctx = cur;
    if (dev)
        *dev = cdev;
    return FA3_OK;
}
