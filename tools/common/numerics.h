/*
 * Host numerics shared by fa3-gen and the GPU tests (tools/common, no GPU needed): a seeded random
 * source (SplitMix64, normal values by Box–Muller), bf16/fp16 conversion with round-to-nearest-
 * even, random inputs rounded to a dtype, and the NaN bit patterns the outputs are pre-filled
 * with (so that an element a kernel does not write shows). One copy, so that the CLI's check and
 * the tests draw and round their inputs alike.
 */
#ifndef FA3JIT_TOOLS_NUMERICS_H
#define FA3JIT_TOOLS_NUMERICS_H

#include <stddef.h>
#include <stdint.h>

#include "fa3jit.h"

/* ---- random source */
typedef struct host_rng {
    uint64_t s;     /* SplitMix64 state */
    int have_spare; /* rng_normal: the second value of the last Box–Muller pair is waiting */
    double spare;
} host_rng;

/* Starts the sequence of seed (the same seed gives the same values on every machine). */
void rng_init(host_rng *r, uint64_t seed);
/* Uniform in (0, 1): 53 random bits, off 0 so that log() is finite. */
double rng_uniform(host_rng *r);
/* Two independent N(0, 1) values from two uniforms (Box–Muller: r·cos θ, r·sin θ). */
void rng_normal_pair(host_rng *r, double *a, double *b);
/* N(0, 1): the pairs of rng_normal_pair one value at a time. */
double rng_normal(host_rng *r);

/* ---- bf16 / fp16 */
uint16_t f32_to_bf16(float x); /* round to nearest even (overflow → inf); NaN stays a quiet NaN */
uint16_t f32_to_fp16(float x); /* round to nearest even, overflow → inf, subnormals kept */
float bf16_to_f32(uint16_t h); /* exact */
float fp16_to_f32(uint16_t h); /* exact */
/* The two above chosen by dtype (FA3_DTYPE_FP16: fp16, else bf16). */
uint16_t f32_to_dtype(fa3_dtype dt, float x);
float dtype_to_f32(fa3_dtype dt, uint16_t h);
/* dst[i] = f32_to_dtype(dt, src[i]) for i < n. */
void floats_to_dtype(uint16_t *dst, const float *src, size_t n, fa3_dtype dt);

/* ---- fp8 e4m3 (OCP FP8 E4M3, torch.float8_e4m3fn: bias 7, no infinities, 0x7F/0xFF NaN,
   largest finite 448, smallest subnormal 2^-9) */
/* Round to nearest even; saturating: |x| beyond 448 (and ±inf) gives ±448; NaN gives 0x7F. */
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t b); /* exact */
/* The e4m3 NaN the input guards are filled with (S.1111.111). */
#define E4M3_NAN_BITS 0x7Fu
/*
 * Quantizes x, contiguous (batch, seqlen, heads, dim) floats, to e4m3 as fa3_quantize_fp8 does:
 * one descale per (batch, descale head), descale head g covering heads g·(heads/descale_heads)
 * to (g+1)·(heads/descale_heads) − 1 (descale_heads divides heads: num_heads_k for Q, so that the
 * descales have fa3_fwd_args' (batch, num_heads_k) shape); descale = amax/448 over the group (1
 * for a group of zeros), out = f32_to_e4m3(x / descale). descale (batch·descale_heads floats) may
 * be NULL: then out = f32_to_e4m3(x), the inputs of a call with NULL descales (1.0).
 */
void quantize_e4m3(const float *x, uint8_t *out, float *descale, int batch, int seqlen,
                   int heads, int dim, int descale_heads);

/* ---- random inputs */
/* n values N(0, 1) as floats, drawn in pairs within the call (an odd n drops the last pair's
   second value; the spare of rng_normal is neither used nor left): the values depend only on the
   generator's state and n. fa3-gen check's input pools. */
void fill_normal_f32(host_rng *r, float *dst, size_t n);
/* n values N(0, 1)·scale (rng_normal) rounded to dtype. */
void fill_normal(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale);
/* n values uniform in (−√3, √3)·scale (mean 0, variance scale²) rounded to dtype: several times
   faster than fill_normal, for tensors of tens of millions of elements. */
void fill_uniform(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale);

/* ---- NaN patterns of the output pre-fills */
/* The quiet NaN of a 2-byte dtype: 0x7FC0 bf16, 0x7E00 fp16. */
uint16_t nan16_bits(fa3_dtype dt);
/* The quiet fp32 NaN. */
#define NAN32_BITS 0x7FC00000u

#endif
