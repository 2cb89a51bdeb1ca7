/* The generator's entry point by kernel kind (generate.c), for the runtime. */
#ifndef FA3JIT_GENERATE_H
#define FA3JIT_GENERATE_H

#include "codegen/codegen.h"
#include "kernel_abi.h"

/* Writes the PTX of a kernel of kind for plan (its operation's plan) into a malloc'd
   NUL-terminated string, with that kind's emitter (FA3_KERNEL_FWD: fa3_codegen_ptx, FA3_KERNEL_COMBINE:
   fa3_codegen_combine). Errors:
   those of the emitter, FA3_ERR_INTERNAL for a kind without one. */
FA3_INTERNAL fa3_status fa3_codegen_kernel(fa3_kernel_kind kind, const fa3_plan *plan, char **ptx,
                                           size_t *len);

/* The split-KV combine kernel's PTX for plan (combine.c): depends on head_dim_v, out_dtype and
   varlen only. */
FA3_INTERNAL fa3_status fa3_codegen_combine(const fa3_plan *plan, char **ptx, size_t *len);

#endif
