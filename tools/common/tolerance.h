/*
 * The one accuracy rule of fa3-gen check and the GPU tests, FlashAttention's:
 *     max|O − O_ref| ≤ 2·max|O_emul − O_ref| + 1e-3,      max|LSE − LSE_ref| ≤ 1e-3
 * O_ref and LSE_ref: the library's fp32 reference (fa3_reference_fwd_ex, emulate_dtype 0); O_emul:
 * the reference that rounds P and O to the kernel's dtype (emulate_dtype 1), so that
 * max|O_emul − O_ref| is the error the dtype itself makes. The callers choose which elements are
 * measured (written, finite, in rows that see a key: each documents its own) and report in their
 * own words; the measures, the bound and the verdict are here.
 *
 * How each reports it: fa3-gen check one line per case ("err_o=… tol=… err_lse=… PASS|FAIL
 * (reasons)", parsed by tools/gpu-run.sh); test_gpu and test_edge the tol_format line per case
 * and a cmocka failure naming the worst element; test_magnitude scales the absolute term by V's
 * magnitude (tol_o_bound_scaled) and has its own LSE rule for inputs up to 1e5.
 */
#ifndef FA3JIT_TOOLS_TOLERANCE_H
#define FA3JIT_TOOLS_TOLERANCE_H

#include <stddef.h>

#define TOL_O_EMUL_FACTOR 2.0 /* times the dtype's own error */
#define TOL_O_ABS 1e-3        /* plus this (for V of magnitude 1) */
#define TOL_LSE 1e-3          /* absolute, LSE in natural-log units */

/* The running measures of one case (zero-initialize: tol_acc t = {0}). */
typedef struct tol_acc {
    double err_o;     /* max |O − O_ref| over the elements added */
    double err_emul;  /* max |O_emul − O_ref| over the same elements */
    double err_lse;   /* max |LSE − LSE_ref| (infinite where either is not finite) */
    size_t worst_o;   /* the index given with err_o's element */
    size_t worst_lse; /* the index given with err_lse's value */
} tol_acc;

/* Adds O element i: |o − ref| (a NaN difference, from inf − inf, counts as infinite) and
   |emul − ref| (a NaN one is ignored). */
void tol_add_o(tol_acc *t, size_t i, double o, double ref, double emul);
/* Adds LSE value i: |lse − ref|, infinite unless both are finite. */
void tol_add_lse(tol_acc *t, size_t i, double lse, double ref);

/* The bound on err_o: 2·err_emul + 1e-3·v_mag (v_mag: the magnitude of V; 1 for N(0,1) inputs). */
double tol_o_bound_scaled(double err_emul, double v_mag);
/* tol_o_bound_scaled(t->err_emul, 1). */
double tol_o_bound(const tol_acc *t);
/* 1 if err_o is within tol_o_bound (a NaN error fails). */
int tol_o_ok(const tol_acc *t);
/* 1 if err_lse ≤ 1e-3 (a NaN error fails). */
int tol_lse_ok(const tol_acc *t);

/* "max|O-ref| = %.3g, max|emul-ref| = %.3g (tol %.3g), max|LSE-ref| = %.3g" into buf (size
   bytes, cut to fit); returns buf. */
const char *tol_format(const tol_acc *t, char *buf, size_t size);

#endif
