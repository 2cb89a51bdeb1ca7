/* The accuracy rule of fa3-gen check and the GPU tests (see tolerance.h). */
#include <math.h>
#include <stdio.h>

#include "tolerance.h"

void tol_add_o(tol_acc *t, size_t i, double o, double ref, double emul)
{
    double d = fabs(o - ref), de = fabs(emul - ref);
    if (isnan(d))
        d = INFINITY;
    if (d > t->err_o) {
        t->err_o = d;
        t->worst_o = i;
    }
    if (de > t->err_emul)
        t->err_emul = de;
}

void tol_add_lse(tol_acc *t, size_t i, double lse, double ref)
{
    double d = fabs(lse - ref);
    if (!isfinite(d))
        d = INFINITY;
    if (d > t->err_lse) {
        t->err_lse = d;
        t->worst_lse = i;
    }
}

double tol_o_bound_scaled(double err_emul, double v_mag)
{
    return TOL_O_EMUL_FACTOR * err_emul + TOL_O_ABS * v_mag;
}

double tol_o_bound(const tol_acc *t)
{
    return tol_o_bound_scaled(t->err_emul, 1.0);
}

int tol_o_ok(const tol_acc *t)
{
    return t->err_o <= tol_o_bound(t);
}

int tol_lse_ok(const tol_acc *t)
{
    return t->err_lse <= (t->lse_tol > 0 ? t->lse_tol : TOL_LSE);
}

const char *tol_format(const tol_acc *t, char *buf, size_t size)
{
    snprintf(buf, size, "max|O-ref| = %.3g, max|emul-ref| = %.3g (tol %.3g), max|LSE-ref| = %.3g",
             t->err_o, t->err_emul, tol_o_bound(t), t->err_lse);
    return buf;
}

double tol_lse_bound(int dtype_is_e4m3, int head_dim)
{
    if (!dtype_is_e4m3)
        return TOL_LSE;
    /* more products per score, each rounded in the e4m3 MMA's accumulator: the bound grows with
       sqrt(head_dim / 128) (hd256 varlen reached 1.21e-2, call 3 of session 7) */
    return head_dim > 128 ? TOL_LSE_E4M3 * sqrt(head_dim / 128.0) : TOL_LSE_E4M3;
}
