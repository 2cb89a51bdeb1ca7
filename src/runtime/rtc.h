/* CUDA C programs compiled at run time through NVRTC (the reference attention, the FP8
   quantizer): NVRTC dlopen'd, each program's image per compute capability and its module per
   CUcontext, cached for the life of the process (rtc.c). */
#ifndef FA3JIT_RTC_H
#define FA3JIT_RTC_H

#include <stddef.h>

#include "runtime/driver.h"

#define FA3_RTC_MAX_FUNCTIONS 12

typedef struct fa3_rtc_image fa3_rtc_image;   /* rtc.c */
typedef struct fa3_rtc_module fa3_rtc_module; /* rtc.c */

/*
 * One program: a static object of its user, whose caches rtc.c fills under its one lock. Modules
 * are never unloaded; a CUcontext destroyed by the application and a new one created at the same
 * address would reuse a stale entry, so applications that destroy contexts should not call these
 * programs afterwards.
 */
typedef struct fa3_rtc_program {
    const char *what;      /* for messages, e.g. "reference kernel" */
    const char *source;    /* the CUDA C text (no CUDA headers) */
    const char *file_name; /* NVRTC's name of it, e.g. "fa3_reference.cu" */
    const char *const *functions; /* the entry points, extern "C" */
    int num_functions;     /* at most FA3_RTC_MAX_FUNCTIONS */
    int min_cc;            /* the oldest compute capability it compiles for (e.g. 89), 0: any */
    /* caches, under rtc.c's lock */
    fa3_rtc_image *images;
    int num_images;
    fa3_rtc_module *modules;
    int num_modules;
} fa3_rtc_program;

/*
 * The program's entry points (fn[i] for functions[i]) in the calling thread's current CUDA
 * context (device 0's primary context made current if there is none), compiling and loading the
 * program at the first call for that context's device and context. *drv receives the driver
 * table. Thread-safe. Errors: FA3_ERR_NO_DRIVER, FA3_ERR_CUDA, FA3_ERR_UNSUPPORTED (a device
 * older than min_cc), FA3_ERR_NO_NVRTC, FA3_ERR_COMPILE (NVRTC's log in the message),
 * FA3_ERR_OUT_OF_MEMORY.
 */
FA3_INTERNAL fa3_status fa3_rtc_functions(fa3_rtc_program *prog, const fa3_driver **drv,
                                          CUfunction *fn);

/* Compiles the program for compute capability cc without the driver or the caches (no GPU
   needed): *image a malloc'd cubin (*is_ptx = 0) or PTX text if this NVRTC cannot emit cubins
   (*is_ptx = 1); free() it. Errors: FA3_ERR_INVALID_ARGUMENT, FA3_ERR_NO_NVRTC, FA3_ERR_COMPILE,
   FA3_ERR_OUT_OF_MEMORY. */
FA3_INTERNAL fa3_status fa3_rtc_build_image(const fa3_rtc_program *prog, int cc, void **image,
                                            size_t *size, int *is_ptx);

#endif
