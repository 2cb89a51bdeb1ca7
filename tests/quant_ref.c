/* The FP8 quantizer's host side for test_quantize (see quant_ref.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_ref.h"

#define E4M3_MAX 448.0
#define U32 (1.0 / 16777216.0) /* 2^-24: fp32's unit roundoff */

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        fail_msg("out of host memory (%zu x %zu bytes)", n, size);
    return p;
}

/* ---------------------------------------------------------------- layouts */

void qt_layout(qtensor *t, fa3_dtype dt, int batch, int seqlen, int heads, int hd, int ndh,
               int strided_x, int padded_out)
{
    memset(t, 0, sizeof *t);
    t->dt = dt;
    t->batch = batch;
    t->seqlen = seqlen;
    t->heads = heads;
    t->hd = hd;
    t->ndh_arg = ndh;
    t->ndh = ndh ? ndh : heads;
    t->xs[2] = strided_x ? hd + 8 : hd;
    t->xs[1] = heads * t->xs[2] + (strided_x ? 24 : 0);
    t->xs[0] = seqlen * t->xs[1] + (strided_x ? 40 : 0);
    t->os[2] = padded_out ? (hd + 15) / 16 * 16 + 16 : hd;
    t->os[1] = heads * t->os[2] + (padded_out ? 32 : 0);
    t->os[0] = seqlen * t->os[1] + (padded_out ? 48 : 0);
    t->x_elems = (size_t)((batch - 1) * t->xs[0] + (int64_t)(seqlen - 1) * t->xs[1] +
                          (heads - 1) * t->xs[2] + hd);
    t->out_bytes = (size_t)((batch - 1) * t->os[0] + (int64_t)(seqlen - 1) * t->os[1] +
                            (heads - 1) * t->os[2] + hd);
    t->num_descales = (size_t)batch * t->ndh;
}

void qt_init(qtensor *t, fa3_dtype dt, int batch, int seqlen, int heads, int hd, int ndh,
             int strided_x, int padded_out)
{
    qt_layout(t, dt, batch, seqlen, heads, hd, ndh, strided_x, padded_out);
    t->x = xcalloc(t->x_elems, 2);
    const uint16_t nan = nan16_bits(dt);
    for (size_t i = 0; i < t->x_elems; i++)
        t->x[i] = nan; /* the gaps: a kernel reading one shows */
}

void qt_free(qtensor *t)
{
    free(t->x);
    t->x = NULL;
}

size_t qt_x_offset(const qtensor *t, int b, int s, int h)
{
    return (size_t)(b * t->xs[0] + s * t->xs[1] + h * t->xs[2]);
}

size_t qt_out_offset(const qtensor *t, int b, int s, int h)
{
    return (size_t)(b * t->os[0] + s * t->os[1] + h * t->os[2]);
}

void qt_fill(qtensor *t, host_rng *rng, double mag, int zero_group)
{
    const int hpg = t->heads / t->ndh;
    for (int b = 0; b < t->batch; b++)
        for (int s = 0; s < t->seqlen; s++)
            for (int h = 0; h < t->heads; h++) {
                uint16_t *row = t->x + qt_x_offset(t, b, s, h);
                const int zero = zero_group && b == t->batch - 1 && h / hpg == t->ndh - 1;
                for (int d = 0; d < t->hd; d++) {
                    double v = rng_normal(rng) * mag;
                    if (rng_uniform(rng) < 1.0 / 512)
                        v *= 30.0 + 70.0 * rng_uniform(rng);
                    if (t->dt == FA3_DTYPE_FP16)
                        v = fmax(-60000.0, fmin(60000.0, v));
                    row[d] = f32_to_dtype(t->dt, zero ? 0.0f : (float)v);
                }
            }
}

void qt_args(const qtensor *t, fa3_quantize_args *a, const void *x, void *out, float *descale)
{
    fa3_quantize_args_init(a);
    a->dtype = t->dt;
    a->x = x;
    a->out = out;
    a->descale = descale;
    a->batch = t->batch;
    a->seqlen = t->seqlen;
    a->num_heads = t->heads;
    a->head_dim = t->hd;
    a->num_descale_heads = t->ndh_arg;
    a->x_batch_stride = t->xs[0];
    a->x_row_stride = t->xs[1];
    a->x_head_stride = t->xs[2];
    a->out_batch_stride = t->os[0];
    a->out_row_stride = t->os[1];
    a->out_head_stride = t->os[2];
}

/* ---------------------------------------------------------------- the rule in fp64 */

/* In place: v ← v·H (Sylvester order, H symmetric), n a power of two. */
static void fwht(double *v, int n)
{
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const double a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

double qref_row(fa3_dtype dt, int hd, const uint16_t *xrow, const float *signs, double *y)
{
    double sum = 0;
    for (int d = 0; d < hd; d++) {
        y[d] = dtype_to_f32(dt, xrow[d]);
        sum += fabs(y[d]);
    }
    if (!signs)
        return 0.0;
    for (int d = 0; d < hd; d++)
        y[d] *= signs[d];
    fwht(y, hd);
    const double r = 1.0 / sqrt((double)hd);
    for (int d = 0; d < hd; d++)
        y[d] *= r;
    int stages = 0;
    while ((1 << stages) < hd)
        stages++;
    return (stages + 2) * U32 * sum * r;
}

double qref_e4m3_half_ulp(double v)
{
    const double a = fabs(v);
    if (a < ldexp(1.0, -6))
        return ldexp(1.0, -10);
    int e;
    (void)frexp(a, &e); /* a in [2^(e-1), 2^e): spacing 2^(e-4) */
    return ldexp(1.0, e - 5);
}

int qref_row_bytes(const double *y, int hd, double b, double desc64, double rel_w,
                   const uint8_t *got, size_t *ties, char *why, size_t why_size)
{
    int bad = 0;
    for (int j = 0; j < hd; j++) {
        const double q = y[j] / desc64, w = fabs(q) * rel_w + 2.0 * b / desc64;
        const uint8_t want = f32_to_e4m3((float)q);
        if (got[j] == want)
            continue;
        /* the window [q - w, q + w] spans a rounding boundary (or zero's sign): either side */
        const uint8_t blo = f32_to_e4m3((float)(q - w)), bhi = f32_to_e4m3((float)(q + w));
        const float v = e4m3_to_f32(got[j]);
        if (blo != bhi && v >= e4m3_to_f32(blo) && v <= e4m3_to_f32(bhi)) {
            (*ties)++;
            continue;
        }
        if (!bad++)
            snprintf(why, why_size,
                     "element %d: byte 0x%02x (%g), host 0x%02x (%g) from x_rot/descale = %.9g "
                     "(window %.3g)", j, got[j], (double)v, want, (double)e4m3_to_f32(want), q,
                     w);
    }
    return bad;
}

static void note(qcheck *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(qcheck *r, const char *fmt, ...)
{
    if (r->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->first, sizeof r->first, fmt, ap);
        va_end(ap);
    }
}

/* ||x_rec - x||_2 of one row against its bound (test_quantize.c). */
static void check_reconstruction(const qtensor *t, const float *signs, const uint16_t *xrow,
                                 const double *y, double b, double d64, double ddev,
                                 double rel_w, const uint8_t *got, qcheck *r, int bi, int s,
                                 int h)
{
    double yq[QREF_MAX_HEAD_DIM], bound2 = 0, err2 = 0, xn2 = 0;
    for (int j = 0; j < t->hd; j++) {
        const double q = y[j] / d64, w = fabs(q) * rel_w + 2.0 * b / d64;
        const double bj =
            (qref_e4m3_half_ulp(fabs(q) + w) + w) * ddev + fabs(q) * fabs(ddev - d64);
        bound2 += bj * bj;
        yq[j] = e4m3_to_f32(got[j]) * ddev;
    }
    if (signs) { /* the inverse: (H/sqrt(hd))^T = H/sqrt(hd), then diag(signs) */
        fwht(yq, t->hd);
        for (int j = 0; j < t->hd; j++)
            yq[j] *= signs[j] / sqrt((double)t->hd);
    }
    for (int d = 0; d < t->hd; d++) {
        const double x = dtype_to_f32(t->dt, xrow[d]);
        err2 += (yq[d] - x) * (yq[d] - x);
        xn2 += x * x;
    }
    if (sqrt(err2) > sqrt(bound2) * (1 + 1e-6) + 1e-9 * sqrt(xn2))
        note(r, "row (b %d, s %d, h %d): dequantized and rotated back, ||x_rec - x|| = %.6g "
             "exceeds the e4m3 bound %.6g", bi, s, h, sqrt(err2), sqrt(bound2));
}

void qt_check(const qtensor *t, const float *signs, const uint8_t *out, const float *desc,
              size_t guard, qcheck *r)
{
    memset(r, 0, sizeof *r);
    const int hd = t->hd, hpg = t->heads / t->ndh;
    const size_t rows = (size_t)t->batch * t->seqlen * t->heads, nd = t->num_descales;
    double *y = xcalloc(rows * hd, sizeof(double)), *brow = xcalloc(rows, sizeof(double));
    double *amax = xcalloc(nd, sizeof(double)), *bmax = xcalloc(nd, sizeof(double));
    double *d64 = xcalloc(nd, sizeof(double)), *rel_w = xcalloc(nd, sizeof(double));
#define ROW(b, s, h) ((((size_t)(b) * t->heads + (h)) * t->seqlen) + (s))
    for (int b = 0; b < t->batch; b++)
        for (int h = 0; h < t->heads; h++)
            for (int s = 0; s < t->seqlen; s++) {
                const size_t ri = ROW(b, s, h), g = (size_t)b * t->ndh + h / hpg;
                double *yr = y + ri * hd;
                brow[ri] = qref_row(t->dt, hd, t->x + qt_x_offset(t, b, s, h), signs, yr);
                for (int j = 0; j < hd; j++)
                    amax[g] = fmax(amax[g], fabs(yr[j]));
                bmax[g] = fmax(bmax[g], brow[ri]);
            }

    /* descales */
    for (size_t g = 0; g < nd; g++) {
        d64[g] = amax[g] > 0 ? amax[g] / E4M3_MAX : 1.0;
        rel_w[g] = amax[g] > 0 ? 1e-5 + 2.0 * bmax[g] / amax[g] : 1e-5;
        const double tol = amax[g] > 0 ? d64[g] * (1e-6 + 2.0 * bmax[g] / amax[g]) : 0.0;
        if (!(fabs(desc[g] - d64[g]) <= tol))
            note(r, "descale[%zu] (batch %zu, descale head %zu) = %.9g, host %.9g (amax %.9g, "
                 "allowed %.3g)", g, g / t->ndh, g % t->ndh, (double)desc[g], d64[g], amax[g],
                 tol);
    }
    for (size_t i = 0; i < guard; i++) {
        uint32_t u;
        memcpy(&u, &desc[nd + i], 4);
        if (u != NAN32_BITS)
            note(r, "descale guard float %zu after the array was written (0x%08x)", i, u);
    }

    /* bytes, reconstruction, and the pre-fill everywhere else */
    uint8_t *mine = xcalloc(t->out_bytes + guard, 1);
    for (int b = 0; b < t->batch; b++)
        for (int h = 0; h < t->heads; h++)
            for (int s = 0; s < t->seqlen; s++) {
                const size_t ri = ROW(b, s, h), g = (size_t)b * t->ndh + h / hpg;
                const size_t off = qt_out_offset(t, b, s, h);
                memset(mine + off, 1, (size_t)hd);
                char why[256];
                int bad = qref_row_bytes(y + ri * hd, hd, brow[ri], d64[g], rel_w[g], out + off,
                                         &r->ties, why, sizeof why);
                if (bad) {
                    if (r->failures == 0)
                        snprintf(r->first, sizeof r->first, "row (b %d, s %d, h %d): %s (%d wrong "
                                 "in the row)", b, s, h, why, bad);
                    r->failures += (size_t)bad;
                    continue;
                }
                check_reconstruction(t, signs, t->x + qt_x_offset(t, b, s, h), y + ri * hd,
                                     brow[ri], d64[g], desc[g], rel_w[g], out + off, r, b, s, h);
            }
#undef ROW
    for (size_t i = 0; i < t->out_bytes + guard; i++)
        if (!mine[i] && out[i] != 0x7F)
            note(r, "out byte %zu (%s) was written: 0x%02x", i,
                 i < t->out_bytes ? "between elements" : "after the tensor", out[i]);
    free(mine);
    free(y);
    free(brow);
    free(amax);
    free(bmax);
    free(d64);
    free(rel_w);
}

/* ---------------------------------------------------------------- the device in fp32 */

/* One row as the kernel computes it: fp32, the butterfly's spans in increasing order (the
   kernel's: within a lane, then across lanes), (a + b, a - b) at each, then the scale. */
static void emulate_row(const qtensor *t, const uint16_t *xrow, const float *signs, float *v)
{
    for (int d = 0; d < t->hd; d++)
        v[d] = dtype_to_f32(t->dt, xrow[d]) * (signs ? signs[d] : 1.0f);
    if (!signs)
        return;
    for (int h = 1; h < t->hd; h <<= 1)
        for (int i = 0; i < t->hd; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
    const float scale = (float)(1.0 / sqrt((double)t->hd));
    for (int d = 0; d < t->hd; d++)
        v[d] *= scale;
}

void qref_emulate(const qtensor *t, const float *signs, uint8_t *out, float *desc)
{
    const int hpg = t->heads / t->ndh;
    float v[QREF_MAX_HEAD_DIM];
    for (size_t g = 0; g < t->num_descales; g++)
        desc[g] = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; b < t->batch; b++)
            for (int s = 0; s < t->seqlen; s++)
                for (int h = 0; h < t->heads; h++) {
                    const size_t g = (size_t)b * t->ndh + h / hpg;
                    emulate_row(t, t->x + qt_x_offset(t, b, s, h), signs, v);
                    uint8_t *orow = out + qt_out_offset(t, b, s, h);
                    for (int d = 0; d < t->hd; d++) {
                        if (pass == 0)
                            desc[g] = fmaxf(desc[g], fabsf(v[d]));
                        else
                            orow[d] = f32_to_e4m3(v[d] / desc[g]);
                    }
                }
        if (pass == 0)
            for (size_t g = 0; g < t->num_descales; g++)
                desc[g] = desc[g] == 0.0f ? 1.0f : desc[g] / 448.0f;
    }
}

/* ---------------------------------------------------------------- q·k products */

/* Row ri (b, s, h) of a contiguous tensor, dequantized: deq[hd], its error bound ||e|| and the
   norm of the original row. */
static void dequant_row(const qtensor *t, const uint8_t *q8, const float *ds, int b, int s, int h,
                        double *deq, double *err, double *norm, double *orig)
{
    float ones[QREF_MAX_HEAD_DIM];
    for (int j = 0; j < t->hd; j++)
        ones[j] = 1.0f;
    double y[QREF_MAX_HEAD_DIM];
    const uint16_t *xrow = t->x + qt_x_offset(t, b, s, h);
    const double bnd = qref_row(t->dt, t->hd, xrow, ones, y); /* the fp32 butterfly's bound */
    const double d = ds[(size_t)b * t->ndh + h / (t->heads / t->ndh)];
    const uint8_t *row = q8 + qt_out_offset(t, b, s, h);
    double e2 = 0, n2 = 0;
    for (int j = 0; j < t->hd; j++) {
        const double v = e4m3_to_f32(row[j]);
        deq[j] = v * d;
        const double ej = qref_e4m3_half_ulp(v) * d + bnd;
        e2 += ej * ej;
        orig[j] = dtype_to_f32(t->dt, xrow[j]);
        n2 += orig[j] * orig[j];
    }
    *err = sqrt(e2);
    *norm = sqrt(n2);
}

const char *qt_check_dots(const qtensor *q, const uint8_t *q8, const float *dsq, const qtensor *k,
                          const uint8_t *k8, const float *dsk, double *worst)
{
    static char msg[400];
    const int hd = q->hd, ratio = q->heads / k->heads;
    const size_t nq = (size_t)q->seqlen * q->heads, nk = (size_t)k->seqlen * k->heads;
    double *qd = xcalloc(nq * hd, 8), *qo = xcalloc(nq * hd, 8), *qe = xcalloc(nq, 8);
    double *qn = xcalloc(nq, 8), *kd = xcalloc(nk * hd, 8), *ko = xcalloc(nk * hd, 8);
    double *ke = xcalloc(nk, 8), *kn = xcalloc(nk, 8);
    const char *fail = NULL;
    *worst = 0;
    for (int b = 0; b < q->batch && !fail; b++) {
        for (int s = 0; s < q->seqlen; s++)
            for (int h = 0; h < q->heads; h++) {
                const size_t i = (size_t)s * q->heads + h;
                dequant_row(q, q8, dsq, b, s, h, qd + i * hd, &qe[i], &qn[i], qo + i * hd);
            }
        for (int s = 0; s < k->seqlen; s++)
            for (int h = 0; h < k->heads; h++) {
                const size_t i = (size_t)s * k->heads + h;
                dequant_row(k, k8, dsk, b, s, h, kd + i * hd, &ke[i], &kn[i], ko + i * hd);
            }
        for (int h = 0; h < q->heads && !fail; h++)
            for (int i = 0; i < q->seqlen && !fail; i++)
                for (int j = 0; j < k->seqlen; j++) {
                    const size_t a = (size_t)i * q->heads + h;
                    const size_t c = (size_t)j * k->heads + h / ratio;
                    double rot = 0, orig = 0;
                    for (int d = 0; d < hd; d++) {
                        rot += qd[a * hd + d] * kd[c * hd + d];
                        orig += qo[a * hd + d] * ko[c * hd + d];
                    }
                    const double bound = 1.5 * (qe[a] * kn[c] + qn[a] * ke[c] + qe[a] * ke[c]) +
                                         1e-9 * qn[a] * kn[c];
                    const double ratio_err = fabs(rot - orig) / bound;
                    *worst = fmax(*worst, ratio_err);
                    if (!(ratio_err <= 1.0)) {
                        snprintf(msg, sizeof msg, "batch %d head %d q row %d . k row %d: rotated "
                                 "and dequantized %.9g, original %.9g, allowed %.3g", b, h, i, j,
                                 rot, orig, bound);
                        fail = msg;
                        break;
                    }
                }
    }
    free(qd);
    free(qo);
    free(qe);
    free(qn);
    free(kd);
    free(ko);
    free(ke);
    free(kn);
    return fail;
}
