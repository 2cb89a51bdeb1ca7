/*
 * The GPU edge-case tests' problem kit (test_edge.c, test_edge_more.c, and the FP8 tests
 * test_fp8*.c): device tensors in chosen layouts inside NaN guards, one attention problem (dense
 * host inputs, device buffers, the kernel's outputs, the NVRTC references; edge_prob.c) and the
 * case file's pass rule with its report (edge_check.c). e4m3 problems hold their inputs as e4m3
 * bytes with per-(batch, kv head) descales (spec.descales) and O in the out_dtype.
 */
#ifndef FA3JIT_TESTS_EDGE_PROB_H
#define FA3JIT_TESTS_EDGE_PROB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fa3jit.h"
#include "gpu_util.h"

/* the run's context, seed, skip count and FA3JIT_TEST_SMALL (test_edge.c's main sets them) */
extern fa3_context *g_ctx;
extern uint64_t g_seed;
extern int g_skipped;
extern int g_small;

/* ------------------------------------------------------------------------------------------- */
/* Device tensors with layouts, guards and NaN gaps. */

typedef enum lay_kind {
    LAY_BSHD = 0,   /* (batch, seqlen, heads, dim), heads padded by pad elements */
    LAY_BHSD = 1,   /* (batch, heads, seqlen, dim) storage, rows padded by pad elements */
    LAY_HEAD_BCAST = 2 /* one head stored, head stride 0 (all heads read it) */
} lay_kind;

typedef struct layout {
    lay_kind kind;
    int pad;          /* NaN elements after each innermost row of dim elements (even; 16 bytes'
                         worth for Q/K/V, which TMA reads: a multiple of 8, of 16 for e4m3) */
    size_t pre, post; /* NaN guard elements before and after (the same rule) */
} layout;

typedef struct tensor16 {
    int es;             /* element bytes: 2, or 1 (e4m3 Q/K/V) */
    int b, s, h, d;
    int64_t bs, rs, hs; /* element strides */
    size_t pre, total;  /* guard before; allocation size in elements */
    CUdeviceptr base;
} tensor16;

/* ------------------------------------------------------------------------------------------- */
/* One attention problem: dense host inputs (logical (b, s, h, d) order), device tensors in the
   chosen layouts, the kernel's outputs and the references. */

typedef struct spec {
    int hd, hdv;        /* hdv 0 = hd */
    fa3_dtype dt;
    fa3_mask mask;
    int softcap;        /* config flag */
    float softcap_value;
    int wl, wr;         /* FA3_MASK_LOCAL windows */
    int batch, sq, sk, h, hk;
    fa3_dtype out;      /* out_dtype: FA3_DTYPE_AUTO (make_spec's), or fp16 with e4m3 */
    /* e4m3 inputs (dt FA3_DTYPE_E4M3): 1 (make_spec's) normal values of a different magnitude
       per (batch, kv head) group (x 1/2..2 for Q and K, 1/4..4 for V) quantized with descales
       amax/448 (quantize_e4m3); 0 N(0,1) rounded to e4m3, descales NULL; 2 descale_k only (Q
       and V as for 0) */
    int descales;
} spec;

typedef struct prob {
    spec s;
    fa3_config cfg;
    fa3_kernel *kernel;
    int d, dv;
    layout lq, lk, lv, lo;
    size_t lse_pre, lse_post;
    size_t nq, nk, nv, no, nlse;
    fa3_dtype out_dt;         /* the config's out_dtype (resolved) */
    int es;                   /* bytes of a Q/K/V element */
    uint16_t *q, *k, *v;      /* dense inputs (bf16/fp16) */
    uint8_t *q8, *k8, *v8;    /* dense inputs (e4m3) */
    float *ds[3];             /* e4m3: host descales of q, k, v ((batch, hk); NULL = none) */
    CUdeviceptr dds[3];       /* their device copies */
    uint16_t *o;              /* dense copy of the kernel's O */
    float *lse;               /* the kernel's LSE */
    float *ref, *ref_lse, *emul;
    uint8_t *ref_rows;        /* query rows the references cover */
    tensor16 tq, tk, tv, to;
    CUdeviceptr dlse;
    size_t lse_total;
    fa3_fwd_args args;
    size_t o_outside_written, lse_outside_written; /* from the last run */
    size_t o_outside_first;
} prob;

#define RUN_OK(p)                                                                        \
    do {                                                                                 \
        fa3_status st_ = prob_run(p);                                                    \
        if (st_ != FA3_OK)                                                               \
            fail_msg("fa3_fwd: %s: %s", fa3_strerror(st_), fa3_last_error_message());    \
    } while (0)

typedef struct check_res {
    tol_acc acc; /* the measures of tools/common/tolerance.h */
    double tol;  /* tol_o_bound(&acc) */
    size_t rows_ref, rows_empty, rows_total;
    int failed;
} check_res;

#define EXPECT_PASS(p, what)                                              \
    do {                                                                  \
        if (prob_check((p), (what), -1, -1, -1, 1, NULL) != 0)            \
            fail_msg("%s: failed (see above)", (what));                   \
    } while (0)

/* Differences between two runs' outputs (dense O and LSE): count of bitwise differences and the
   largest absolute difference (inf where exactly one is NaN; −inf = −inf). */
typedef struct diff_res {
    size_t o_bits, lse_bits;
    double o_max, lse_max;
} diff_res;

/* Copies of a run's outputs. */
typedef struct saved {
    uint16_t *o;
    float *lse;
} saved;

double now_s(void);

void *xcalloc(size_t n, size_t size);

void tensor_plan(tensor16 *t, const layout *l, int b, int s, int h, int d, int es);

size_t tensor_at(const tensor16 *t, int b, int s, int h, int c);

/* Dense host index of (b, s, h, c) in a contiguous (b, s, h, d) array. */
size_t dense_at(int s_, int h_, int d_, int b, int s, int h, int c);

/* Allocates t, writes the dense values (t->es bytes each) at their strided places and the NaN
   nan (of t->es bytes) everywhere else. */
void tensor_upload(tensor16 *t, const void *dense, uint16_t nan);

const void *tensor_ptr(const tensor16 *t);

/* Seeds each case's generator from the run's seed and the case's identity. */
void case_rng(host_rng *r, uint64_t salt);

/* Normal inputs (uniform for tensors above 4M elements, where Box–Muller takes seconds). */
void fill_random(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale);

/* A problem of shape s with random normal Q, K, V from the case's generator (case_rng(salt)),
   default layouts (contiguous, NaN guards around every tensor) that the case may change before
   prob_upload. */
void prob_init(prob *p, const spec *s, uint64_t salt);
/* The same without a kernel (p->kernel NULL, p->cfg as given with head_dim_v and out_dtype
   resolved): for tests of the reference alone. */
void prob_init_no_kernel(prob *p, const spec *s, uint64_t salt);

void prob_free_device(prob *p);

/* (Re)creates the device tensors in the current layouts from the dense inputs; sets args. */
void prob_upload(prob *p);

/* Fills O's and LSE's whole allocations with NaN, runs fa3_fwd, reads O (dense) and LSE back and
   counts positions outside the tensors that no longer hold their NaN. Returns fa3_fwd's status
   (outputs are read back either way). */
fa3_status prob_run(prob *p);

/* References for query rows [r0, r0 + n) (all batches and heads). Rows are cut out as a view:
   q advanced by r0 rows, seqlen_q = n, and for the causal mask seqlen_k = r0 + n + sk − sq keys,
   which keeps every row's bottom-right-aligned diagonal where it was (rows that would see no key
   at all are filled in as O = 0, LSE = −inf without a call). */
void prob_reference_rows(prob *p, int r0, int n);

void prob_reference(prob *p);

void prob_free(prob *p);

/* Visible keys [lo, hi] of query row i (bottom-right aligned); empty when lo > hi. */
void row_range(const spec *s, int i, int64_t *lo, int64_t *hi);

float o_at(const prob *p, int b, int i, int h, int c);

/* The input value the kernel computes with: tensor which (0 q, 1 k, 2 v) at (b, s, h, c) of the
   dense inputs, dequantized for e4m3 (x · descale of (b, h's kv head), h a kv head for k, v). */
float in_at(const prob *p, int which, int b, int s, int h, int c);

size_t lse_at(const prob *p, int b, int h, int i);

/*
 * The case file's rule over every (b, i, h) row except (xb, xi, xh) (−1s for none):
 *   - nothing written outside O or LSE (the NaN guards and gaps are intact);
 *   - a row that sees no key: O exactly 0 and LSE −inf;
 *   - every other row: every O element and the LSE finite;
 *   - rows the references cover: the tolerance rule (tools/common/tolerance.h),
 *     max|O−ref| ≤ 2.5·max|emul−ref| + 1e-3, |LSE−ref| ≤ 1e-3.
 * Prints one line (always if verbose, else only on failure) and every failure with its first
 * offending index. Returns the number of failed conditions.
 */
int prob_check(const prob *p, const char *what, int xb, int xi, int xh, int verbose,
                      check_res *out);

/* Runs p's kernel, then (if it launched) the references and prob_check; a failing fa3_fwd is
   printed as one FAIL line. Returns 1 if the case failed, else 0. Does not free p. */
int prob_run_and_check(prob *p, const char *what, int verbose);

double value_diff(double a, double b);

diff_res outputs_diff(fa3_dtype dt, const uint16_t *o1, const uint16_t *o2, size_t no,
                             const float *l1, const float *l2, size_t nl);

saved save_outputs(const prob *p);

void saved_free(saved *s);

spec make_spec(int hd, fa3_dtype dt, fa3_mask mask, int batch, int sq, int sk, int h,
                      int hk);
/* Runs p with the kernel of another mask (and its windows) on the same inputs. */
void run_with_mask(prob *p, fa3_mask mask, int wl, int wr);

#endif
