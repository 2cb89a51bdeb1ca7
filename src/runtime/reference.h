/* Internal hooks of the reference attention (reference.c), for tests. */
#ifndef FA3JIT_REFERENCE_H
#define FA3JIT_REFERENCE_H

#include <stddef.h>
#include "common.h"

/*
 * Compiles the reference kernel's CUDA C source with NVRTC for compute capability cc (90 for
 * sm_90) without touching the driver or any cache: needs no GPU. *image receives a malloc'd
 * cubin (*is_ptx = 0), or PTX text if this NVRTC cannot emit cubins (*is_ptx = 1); free() it.
 * Errors: FA3_ERR_NO_NVRTC, FA3_ERR_COMPILE (NVRTC log in the message), FA3_ERR_OUT_OF_MEMORY.
 */
FA3_TOOLS_API fa3_status fa3_reference_build_image(int cc, void **image, size_t *size, int *is_ptx);

#endif
