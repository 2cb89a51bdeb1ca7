/*
 * Device helpers shared by fa3-gen (check, bench) and the GPU tests, over the library's dlopen'd
 * driver table (runtime/tools_api.h): opening the device with its name and compute capability,
 * buffers of whole 32-bit words, and the pattern fills (NaN) that make unwritten outputs show.
 * Every call returns a status; FA3_ERR_CUDA carries "<call>: CUDA_ERROR_X (text)" as the message.
 * The tests wrap them to fail the current test; fa3-gen reports and exits.
 */
#ifndef FA3JIT_TOOLS_DEVICE_H
#define FA3JIT_TOOLS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/tools_api.h"

typedef struct dev_info {
    const fa3_driver *drv;
    CUdevice dev;
    char name[256];   /* cuDeviceGetName, else "device <n>" */
    int major, minor; /* compute capability, 0.0 if the driver did not say */
} dev_info;

/* Loads the driver (fa3_driver_get), makes a context current (fa3_driver_ensure_context: the
   current one, else device 0's primary context) and describes its device. Errors: those two
   calls' (FA3_ERR_NO_DRIVER, FA3_ERR_CUDA), with the library's message. */
fa3_status dev_open(dev_info *out);

/* A device allocation and its size in bytes, rounded up to whole 32-bit words (at least one), so
   that the word fills below stay inside it. */
typedef struct dev_buf {
    CUdeviceptr p;
    size_t bytes;
} dev_buf;

/* Allocates b for bytes (contents undefined). */
fa3_status dev_alloc(const fa3_driver *drv, dev_buf *b, size_t bytes);
/* Frees b (nothing if b->p is 0) and zeroes it. */
void dev_free(const fa3_driver *drv, dev_buf *b);
/* Writes bits into n consecutive 32-bit words at p. */
fa3_status dev_fill32(const fa3_driver *drv, CUdeviceptr p, size_t n, uint32_t bits);
/* Writes bits into n consecutive 16-bit elements at p, rounded up to whole words (an odd n also
   writes the element after the last: allocations from dev_alloc cover it). */
fa3_status dev_fill16(const fa3_driver *drv, CUdeviceptr p, size_t n, uint16_t bits);

#endif
