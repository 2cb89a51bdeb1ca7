/*
 * Unsigned 32-bit division by an invariant divisor as a multiply and shifts (Granlund and
 * Montgomery, "Division by Invariant Integers using Multiplication", PLDI 1994, Figure 4.1):
 * for d >= 1 and l = ceil(log2 d),
 *   m  = floor(2^32 · (2^l - d) / d) + 1   (fits in 32 bits),
 *   t  = (m · n) >> 32,
 *   n / d = (t + ((n - t) >> s1)) >> s2,   s1 = min(l, 1), s2 = max(l - 1, 0),
 * exact for every 32-bit n, in 32-bit arithmetic. The kernels' generic div.u32 is ptxas's
 * float-reciprocal sequence (about 15 SASS instructions on a dependent chain of I2F, MUFU.RCP,
 * F2I and IMADs; ptxas 13.0 emits it even for an immediate power of two), where this is 5.
 * Shared by the code generator (immediate divisors, codegen/divide.c), the runtime (the launch's
 * divisors in fa3_kernel_params.div, runtime/fwd.c) and the tests.
 */
#ifndef FA3JIT_DIVMAGIC_H
#define FA3JIT_DIVMAGIC_H

#include <stdint.h>

typedef struct fa3_divmagic {
    uint32_t mul, s1, s2;
} fa3_divmagic;

/* The magic of divisor d (0 is taken as 1: a launch never divides by 0). */
static inline fa3_divmagic fa3_divmagic_of(uint32_t d)
{
    if (d == 0)
        d = 1;
    uint32_t l = 0;
    while (l < 32 && ((uint64_t)1 << l) < d)
        l++;
    /* (2^l - d) < 2^31 for l <= 32, so the shifted numerator fits in 64 bits */
    const uint64_t m = ((((uint64_t)1 << l) - d) << 32) / d + 1;
    return (fa3_divmagic){(uint32_t)m, l < 1 ? l : 1, l > 1 ? l - 1 : 0};
}

/* n / d by the magic of d: what the emitted instructions compute. */
static inline uint32_t fa3_divmagic_div(uint32_t n, fa3_divmagic mg)
{
    const uint32_t t = (uint32_t)(((uint64_t)mg.mul * n) >> 32);
    return (t + ((n - t) >> mg.s1)) >> mg.s2;
}

#endif
