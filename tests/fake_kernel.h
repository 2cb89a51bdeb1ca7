/*
 * Kernels without code, for the CPU tests of the host-side argument checks (test_splitkv_args,
 * test_pack_gqa_args): fa3_fwd_validate, fa3_split_resolve and friends read only a kernel's
 * config, plan and operation. Also their message check. Internal headers (runtime.h): link the
 * static library. Include after <cmocka.h>.
 */
#ifndef FA3JIT_TESTS_FAKE_KERNEL_H
#define FA3JIT_TESTS_FAKE_KERNEL_H

#include <stdint.h>

#include "runtime/runtime.h"

/* A kernel of cfg's canonical form (the test fails if cfg is refused), planned, with its
   operation and no code (num_parts 0: nothing to launch); fake_free() it. */
fa3_kernel *fake_kernel_of(const fa3_config *cfg);
void fake_free(fa3_kernel *k);

/* Device addresses that never overlap (256 GiB apart) for the argument checks. */
#define FAKE_ADDR(n) ((uintptr_t)0x100000000000ull + (uintptr_t)(n) * 0x4000000000ull)

/* Contiguous (batch, seqlen, heads, hd) Q/K/V/O and an LSE at FAKE_ADDR(1..5), of the shape
   given (head_dim_v = hd). */
fa3_fwd_args fake_args(int hd, int batch, int seqlen_q, int seqlen_k, int num_heads,
                       int num_heads_k);

/* fa3_fwd_validate of k and a; *tiles (may be NULL) the tile count it computes. */
fa3_status fake_validate(const fa3_kernel *k, const fa3_fwd_args *a, uint32_t *tiles);

/* st is want, and fa3_last_error_message names every word of the NULL-terminated list. */
void expect(fa3_status st, fa3_status want, ...);

#endif
