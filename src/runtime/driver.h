/*
 * CUDA Driver API, opened with dlopen("libcuda.so.1") at first use and resolved through
 * cuGetProcAddress, so that the library, the CLI and the CPU tests run on machines with no driver.
 * Only the entry points fa3jit uses are listed; add more here when needed. Each is resolved at the
 * CUDA 12.0 ABI (cuGetProcAddress version 12000), so its prototype here must be the 12.0 one
 * (cudaTypedefs.h: PFN_<name>_v<N> with the largest N <= 12000).
 */
#ifndef FA3JIT_DRIVER_H
#define FA3JIT_DRIVER_H

#include <cuda.h>
#include "common.h"

typedef struct fa3_driver {
    int version; /* cuDriverGetVersion */
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*cuFuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                       const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                       const cuuint32_t *, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    /* stream-ordered allocation: split-KV's workspace when the caller gives none (fwd.c) */
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
} fa3_driver;

/* Loads libcuda once (thread-safe) and calls cuInit(0). Errors: FA3_ERR_NO_DRIVER with the
   dlopen/cuInit reason in the message. */
FA3_TOOLS_API fa3_status fa3_driver_get(const fa3_driver **out);

/* 1 if a previous fa3_driver_get succeeded (never loads anything; thread-safe). Lets cleanup code
   skip driver calls when the driver was never loaded. */
FA3_TOOLS_API int fa3_driver_loaded(void);

/* Converts a CUresult into FA3_OK or FA3_ERR_CUDA with "<call>: CUDA_ERROR_X (text)" as message. */
FA3_TOOLS_API fa3_status fa3_cu_check(CUresult r, const char *call);
#define FA3_CU(drv, call_expr) fa3_cu_check((drv)->call_expr, #call_expr)

/* Makes sure the calling thread has a current context: the current one, else device 0's primary
   context (retained once per process) made current. *ctx (may be NULL) receives it, *dev its
   device. Errors: FA3_ERR_NO_DRIVER (no device), FA3_ERR_CUDA. */
FA3_TOOLS_API fa3_status fa3_driver_ensure_context(CUcontext *ctx, CUdevice *dev);

#endif
