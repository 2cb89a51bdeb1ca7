/*
 * The parts of a varlen_check run below the judging (varlen_data.c; private to tools/common):
 * the run's device and host memory layer that records the first failure in the vl_result, the
 * case's data (host values, device copies, varlen / paged arguments), the fp64 host attention of
 * one row, and one sequence cut out as a dense call.
 */
#ifndef FA3JIT_TOOLS_VARLEN_DATA_H
#define FA3JIT_TOOLS_VARLEN_DATA_H

#include "tools/common/numerics.h"
#include "tools/common/varlen_check.h"

/* The run's device and host memory layer: after the first failure (r->verdict VL_ERROR, the
   call named in r->msg) every later call does nothing, so the steps read straight through. */
typedef struct vx {
    const fa3_driver *drv;
    const vl_spec *s;
    vl_result *r;
    int failed;
} vx;

/* A failed check: appended to r->msg, the case fails, the run goes on. */
void vx_note(vx *x, const char *fmt, ...) FA3_PRINTF(2, 3);
/* The case cannot go on (VL_ERROR, st): what failed, and why; vx_error adds the library's
   message. Only the first is kept. */
void vx_error_msg(vx *x, fa3_status st, const char *what);
void vx_error(vx *x, fa3_status st, const char *what);
/* Host and device memory and copies; each does nothing once x has failed (then returns NULL or
   0). */
void *vx_calloc(vx *x, size_t n, size_t size);
CUdeviceptr vx_dalloc(vx *x, size_t bytes);
void vx_dfree(vx *x, CUdeviceptr p);
void vx_cu(vx *x, fa3_status st, const char *what); /* a failed st becomes x's error */
void vx_up(vx *x, CUdeviceptr d, const void *h, size_t bytes);
void vx_down(vx *x, void *h, CUdeviceptr d, size_t bytes);
/* Rounds n values to dt in place (so the host sees what the kernel sees) and uploads them. */
CUdeviceptr vx_upload_values(vx *x, float *v, size_t n, fa3_dtype dt);

/* Host and device copies of one case. */
typedef struct vl_data {
    vl_case c;
    int rows_q;             /* rows of Q/O: total_q + extra (varlen) or batch · max_q */
    int64_t rows_k;         /* rows of the K/V storage */
    int sq_rect;            /* rectangular Q: queries per sequence */
    int hdv;                /* V/O head dim */
    fa3_dtype odt;          /* the kernel's O dtype */
    float *q, *k, *v;       /* the values the kernel sees, dequantized (no descale) */
    float *ds_q, *ds_k, *ds_v; /* e4m3 with descales: (batch, num_heads_k); else NULL */
    CUdeviceptr dq, dk, dv, dcu_q, dcu_k, dused, dpages, dds_q, dds_k, dds_v;
} vl_data;

/* Makes x->s's case into D (zeroed first, so vd_free is always safe). */
void vd_make(vx *x, vl_data *D, host_rng *r);
void vd_free(vx *x, vl_data *D);
/* The case's varlen / paged arguments over D (o, lse: the caller's). */
fa3_fwd_args vd_args(const vl_spec *s, const vl_data *D);
/* The O row of query i of sequence b, and the LSE index of (b, i, head h): (num_heads, rows_q)
   varlen, else (batch, num_heads, seqlen_q). */
int64_t vd_q_row(const vl_spec *s, const vl_data *D, int b, int i);
int64_t vd_lse_at(const vl_spec *s, const vl_data *D, int b, int i, int h);
/* fp64 attention of row i, head h of sequence b into o (head_dim_v) and *lse (-inf, O = 0 for a
   row that sees no key). 0, or -1 out of memory. */
int vd_host_row(const vl_spec *s, const vl_data *D, int b, int i, int h, double *o, double *lse);
/* Sequence b alone as a dense (batch 1) call in a: its Q rows and its keys gathered
   contiguously, uploaded into bufs (free them with vx_dfree). */
void vd_dense_of(vx *x, const vl_data *D, int b, fa3_fwd_args *a, CUdeviceptr bufs[3]);

#endif
