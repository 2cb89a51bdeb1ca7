/* Device helpers shared by fa3-gen and the GPU tests (see device.h). */
#include <stdio.h>
#include <string.h>

#include "device.h"

fa3_status dev_open(dev_info *out)
{
    memset(out, 0, sizeof *out);
    FA3_TRY(fa3_driver_get(&out->drv));
    FA3_TRY(fa3_driver_ensure_context(NULL, &out->dev));
    const fa3_driver *drv = out->drv;
    if (drv->cuDeviceGetName(out->name, (int)sizeof out->name, out->dev) != CUDA_SUCCESS)
        snprintf(out->name, sizeof out->name, "device %d", (int)out->dev);
    if (drv->cuDeviceGetAttribute(&out->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  out->dev) != CUDA_SUCCESS ||
        drv->cuDeviceGetAttribute(&out->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                  out->dev) != CUDA_SUCCESS)
        out->major = out->minor = 0;
    return FA3_OK;
}

fa3_status dev_alloc(const fa3_driver *drv, dev_buf *b, size_t bytes)
{
    b->p = 0;
    b->bytes = (bytes + 3) & ~(size_t)3;
    if (b->bytes == 0)
        b->bytes = 4;
    return FA3_CU(drv, cuMemAlloc(&b->p, b->bytes));
}

void dev_free(const fa3_driver *drv, dev_buf *b)
{
    if (b->p)
        drv->cuMemFree(b->p);
    b->p = 0;
    b->bytes = 0;
}

fa3_status dev_fill32(const fa3_driver *drv, CUdeviceptr p, size_t n, uint32_t bits)
{
    return FA3_CU(drv, cuMemsetD32(p, bits, n));
}

fa3_status dev_fill16(const fa3_driver *drv, CUdeviceptr p, size_t n, uint16_t bits)
{
    return dev_fill32(drv, p, (n + 1) / 2, (uint32_t)bits | (uint32_t)bits << 16);
}
