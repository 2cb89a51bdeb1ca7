/*
 * combine_ref.h: the split-KV combine's host merge in fp64 and its tolerance.
 */
#include <math.h>
#include <stddef.h>

#include "combine_ref.h"

double combine_ref_lse(const float *lp, int ns, int rows, int row)
{
    double m = -INFINITY;
    for (int s = 0; s < ns; s++)
        m = fmax(m, (double)lp[(size_t)s * rows + row]);
    if (m == -INFINITY)
        return -INFINITY;
    double sum = 0;
    for (int s = 0; s < ns; s++)
        sum += exp((double)lp[(size_t)s * rows + row] - m);
    return m + log(sum);
}

double combine_ref_o(const float *op, const float *lp, int ns, int rows, int hdv, int row,
                     int j, double lse, double *mag)
{
    double ref = 0;
    *mag = 0;
    for (int s = 0; s < ns && lse != -INFINITY; s++) {
        const double l = lp[(size_t)s * rows + row];
        if (l == -INFINITY)
            continue;
        const double w = exp(l - lse), x = op[((size_t)s * rows + row) * hdv + j];
        ref += w * x;
        *mag += w * fabs(x);
    }
    return ref;
}

double combine_tol(fa3_dtype dt, double ref, double mag)
{
    const double ulp = dt == FA3_DTYPE_FP16 ? 0x1p-11 : 0x1p-8;
    /* fp16 below 2^-14 is subnormal: its spacing 2^-24 is the rounding floor there */
    const double floor = dt == FA3_DTYPE_FP16 ? 0x1p-24 : 1e-30;
    return ulp * fabs(ref) + 1e-5 * mag + floor;
}
