/*
 * The FP8 quantizer's host side for test_quantize: tensor layouts (contiguous, strided x, padded
 * out) with their host images, and the fp64 implementation of fa3jit.h's rule with the checks of
 * a device result against it (descales, every byte with its tie allowance, the pre-fill around the
 * elements, reconstruction by the inverse rotation, q·k products). test_quantize.c says what each
 * check allows and why.
 */
#ifndef FA3JIT_TESTS_QUANT_REF_H
#define FA3JIT_TESTS_QUANT_REF_H

#include <stddef.h>
#include <stdint.h>

#include "fa3jit.h"
#include "tools/common/numerics.h"

#define QREF_MAX_HEAD_DIM 256

/* A quantizer problem: x (batch, seqlen, heads, hd) and its out, strides in elements. */
typedef struct qtensor {
    fa3_dtype dt;
    int batch, seqlen, heads, hd;
    int ndh_arg, ndh;            /* num_descale_heads as given (0 = heads) and resolved */
    int64_t xs[3], os[3];        /* batch, row, head strides of x and of out */
    size_t x_elems, out_bytes;   /* the spans of x (elements) and out (bytes) */
    size_t num_descales;         /* batch · ndh */
    uint16_t *x;                 /* host image of x (x_elems; gaps NaN), NULL: layout only */
} qtensor;

/* The layout (strided_x: gaps between heads, rows and batches; padded_out: out strides beyond
   the elements, multiples of 16), and with qt_init a NaN-filled host image of x. */
void qt_layout(qtensor *t, fa3_dtype dt, int batch, int seqlen, int heads, int hd, int ndh,
               int strided_x, int padded_out);
void qt_init(qtensor *t, fa3_dtype dt, int batch, int seqlen, int heads, int hd, int ndh,
             int strided_x, int padded_out);
void qt_free(qtensor *t);
size_t qt_x_offset(const qtensor *t, int b, int s, int h);   /* elements */
size_t qt_out_offset(const qtensor *t, int b, int s, int h); /* bytes */
/* Every element N(0,1)·mag rounded to the dtype, one in 512 an outlier 30-100 times larger
   (fp16: clamped to ±60000); zero_group: the last batch's last descale group all zeros. */
void qt_fill(qtensor *t, host_rng *rng, double mag, int zero_group);
/* fa3_quantize_args of t's shape and strides (hadamard 0). */
void qt_args(const qtensor *t, fa3_quantize_args *a, const void *x, void *out, float *descale);

/* One row in fp64: y = x·diag(signs)·H/sqrt(hd) (signs NULL: y = x). Returns the fp32
   butterfly's error bound b of the row (0 without rotation). */
double qref_row(fa3_dtype dt, int hd, const uint16_t *xrow, const float *signs, double *y);

/* The result of qt_check. */
typedef struct qcheck {
    size_t failures;  /* elements, descales or guard bytes wrong */
    size_t ties;      /* bytes accepted as the other neighbour of a rounding boundary */
    char first[512];  /* the first failure */
} qcheck;

/* Checks the device's out (out_bytes + guard bytes, 0x7F pre-filled) and desc (num_descales +
   guard floats, NaN pre-filled) for t against the host rule, rotated with signs (NULL: none). */
void qt_check(const qtensor *t, const float *signs, const uint8_t *out, const float *desc,
              size_t guard, qcheck *r);

/* One row's bytes got against the host values y (hd of them, not yet divided): desc64 the host's
   descale, rel_w the relative part of the window (1e-5 + 2·bmax/amax), b the row's bound.
   Returns the number of wrong bytes (the first described in why), adds tie bytes to *ties. */
int qref_row_bytes(const double *y, int hd, double b, double desc64, double rel_w,
                   const uint8_t *got, size_t *ties, char *why, size_t why_size);

/* Half the e4m3 spacing at |v| (2^-10 below 2^-6): the most round-to-nearest moves v. */
double qref_e4m3_half_ulp(double v);

/* What the kernel computes, in fp32 on the host (its operations in its order): out's elements
   (the rest untouched) and desc[num_descales]. Equal to the device's bytes but for a compiler
   that reorders fp32 arithmetic; the checks' self-test uses it as a correct result. */
void qref_emulate(const qtensor *t, const float *signs, uint8_t *out, float *desc);

/* q and k (contiguous, ndh = k's heads), quantized by the device with the same signs into
   q8/dsq and k8/dsk: every q·k product kept within its bound (test_quantize.c). NULL if so, else
   the first failure (static text); *worst: the largest |error| / bound. */
const char *qt_check_dots(const qtensor *q, const uint8_t *q8, const float *dsq, const qtensor *k,
                          const uint8_t *k8, const float *dsk, double *worst);

void *xcalloc(size_t n, size_t size); /* fails the test when out of memory */

#endif
