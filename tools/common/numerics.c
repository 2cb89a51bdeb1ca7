/* Host numerics shared by fa3-gen and the GPU tests (see numerics.h). */
#include <math.h>
#include <string.h>

#include "numerics.h"

/* ---------------------------------------------------------------- random source */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_init(host_rng *r, uint64_t seed)
{
    r->s = seed;
    r->have_spare = 0;
    r->spare = 0;
}

double rng_uniform(host_rng *r)
{
    /* 53 random bits, shifted off 0 so log() is finite */
    return ((double)(splitmix64(&r->s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void rng_normal_pair(host_rng *r, double *a, double *b)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    *a = rad * cos(th);
    *b = rad * sin(th);
}

double rng_normal(host_rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double a;
    rng_normal_pair(r, &a, &r->spare);
    r->have_spare = 1;
    return a;
}

/* ---------------------------------------------------------------- bf16 / fp16 */

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t f32_to_bf16(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb; /* round to nearest, ties to even (overflow rounds to inf) */
    return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_fp16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7E00u; /* NaN */
    if (a >= 0x477FF000u)      /* ≥ 65520 rounds to inf */
        return sign | 0x7C00u;
    if (a < 0x38800000u) {   /* below 2^-14: subnormal half (or zero) */
        if (a < 0x33000000u) /* < 2^-25: rounds to ±0 (2^-25 itself is a tie to 0) */
            return sign;
        uint32_t e = a >> 23;                      /* biased float exponent, 102..112 */
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u;  /* 24-bit significand */
        uint32_t shift = 126 - e;                  /* value = m · 2^(e-150); half ulp 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias exponent 127 → 15, keep 10 mantissa bits, round to nearest even */
    uint32_t r = a - 0x38000000u; /* (e-112) << 23 | mantissa */
    uint32_t q = r >> 13, rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1)))
        q++;
    return sign | (uint16_t)q; /* a carry into the exponent is the right result */
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return bits_f32(sign | 0x7F800000u | m << 13);
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | (e + 112) << 23 | m << 13);
}

uint16_t f32_to_dtype(fa3_dtype dt, float x)
{
    return dt == FA3_DTYPE_FP16 ? f32_to_fp16(x) : f32_to_bf16(x);
}

float dtype_to_f32(fa3_dtype dt, uint16_t h)
{
    return dt == FA3_DTYPE_FP16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

void floats_to_dtype(uint16_t *dst, const float *src, size_t n, fa3_dtype dt)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_dtype(dt, src[i]);
}

/* ---------------------------------------------------------------- random inputs */

void fill_normal_f32(host_rng *r, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double a, b;
        rng_normal_pair(r, &a, &b);
        dst[i] = (float)a;
        if (i + 1 < n)
            dst[i + 1] = (float)b;
    }
}

void fill_normal(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_dtype(dt, (float)(rng_normal(r) * scale));
}

void fill_uniform(host_rng *r, uint16_t *dst, size_t n, fa3_dtype dt, double scale)
{
    const double w = 2.0 * sqrt(3.0) * scale;
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_to_dtype(dt, (float)((rng_uniform(r) - 0.5) * w));
}

uint16_t nan16_bits(fa3_dtype dt)
{
    return dt == FA3_DTYPE_FP16 ? 0x7E00u : 0x7FC0u;
}

/* ---------------------------------------------------------------- fp8 e4m3 */

float e4m3_to_f32(uint8_t b)
{
    const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0)
        v = ldexpf((float)m, -9); /* subnormal: m · 2^-9 */
    else
        v = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) · 2^(e-7) */
    return sign ? -v : v;
}

uint8_t f32_to_e4m3(float x)
{
    if (isnan(x))
        return 0x7F;
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    if (a >= 448.0)
        return sign | 0x7E; /* saturate (0x7E = 448) */
    /* the representable neighbours: spacing 2^(e-3) in [2^e, 2^(e+1)), 2^-9 below 2^-6 */
    int e;
    (void)frexp(a, &e); /* a = f · 2^e, f in [0.5, 1): a in [2^(e-1), 2^e) */
    int q = e - 1 < -6 ? -9 : e - 1 - 3; /* log2 of the spacing */
    double units = ldexp(a, -q);         /* a in units of the spacing */
    double r = nearbyint(units);         /* ties to even (default rounding mode) */
    double v = ldexp(r, q);
    if (v >= 448.0)
        return sign | 0x7E;
    /* encode v exactly */
    if (v < ldexp(1.0, -6))
        return sign | (uint8_t)(int)ldexp(v, 9); /* subnormal or zero */
    int ev;
    double f = frexp(v, &ev); /* v = f · 2^ev, f in [0.5, 1) */
    int m = (int)ldexp(f, 4) - 8; /* (1 + m/8) · 2^(ev-1) */
    return sign | (uint8_t)((ev - 1 + 7) << 3) | (uint8_t)m;
}

void quantize_e4m3(const float *x, uint8_t *out, float *descale, int batch, int seqlen,
                   int heads, int dim, int descale_heads)
{
    const size_t row = (size_t)heads * (size_t)dim; /* one (batch, position) */
    const size_t per_batch = (size_t)seqlen * row;
    if (!descale) {
        for (size_t i = 0; i < (size_t)batch * per_batch; i++)
            out[i] = f32_to_e4m3(x[i]);
        return;
    }
    const int group = heads / descale_heads; /* heads per descale */
    const size_t span = (size_t)group * (size_t)dim;
    for (int b = 0; b < batch; b++)
        for (int g = 0; g < descale_heads; g++) {
            const size_t first = (size_t)b * per_batch + (size_t)g * span;
            float amax = 0.0f;
            for (int s = 0; s < seqlen; s++)
                for (size_t c = 0; c < span; c++) {
                    float a = fabsf(x[first + (size_t)s * row + c]);
                    if (a > amax)
                        amax = a;
                }
            const float d = amax > 0.0f ? amax / 448.0f : 1.0f;
            descale[(size_t)b * (size_t)descale_heads + (size_t)g] = d;
            for (int s = 0; s < seqlen; s++)
                for (size_t c = 0; c < span; c++) {
                    const size_t i = first + (size_t)s * row + c;
                    out[i] = f32_to_e4m3(x[i] / d);
                }
        }
}
