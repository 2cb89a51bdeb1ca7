/*
 * The split-KV combine's fp64 host merge and its tolerance, shared by test_combine_ptx (the
 * kernel's PTX in an interpreter) and test_splitkv_combine (the kernel on the GPU). Partials in
 * kernel_abi.h's layout: lp[s · rows + row], op[(s · rows + row) · hdv + j].
 */
#ifndef FA3JIT_TESTS_COMBINE_REF_H
#define FA3JIT_TESTS_COMBINE_REF_H

#include "fa3jit.h"

/* Row row's merged LSE, log Σ_s exp(LSE_s) (max-subtracted), -inf when every split is -inf. */
double combine_ref_lse(const float *lp, int ns, int rows, int row);

/* Column j of row row's merged O, Σ_s exp(LSE_s - lse) · O_s (0 for lse -inf), and *mag the
   same sum of |O_s|. */
double combine_ref_o(const float *op, const float *lp, int ns, int rows, int hdv, int row,
                     int j, double lse, double *mag);

/* The error allowed for an output of dtype dt (bf16/fp16) near ref, of magnitude mag: half an
   ulp of the dtype, 1e-5 of the magnitude, and fp16's subnormal spacing below 2^-14. */
double combine_tol(fa3_dtype dt, double ref, double mag);

#endif
