/*
 * test_combine_ptx: the split-KV combine kernel's PTX (codegen/combine.c) run on the CPU by a
 * small interpreter of the instructions it uses (a warp at a time, 32 lanes in lockstep, shfl
 * across them, global memory as host memory), on random fp32 partials, against an fp64 host
 * merge: lse = m + ln Σ exp(LSE_s - m), O = Σ exp(LSE_s - lse)·O_s in bf16/fp16 at strided O.
 * Rows with every split -inf (O = 0, LSE = -inf), one finite split, random -inf splits; 1, 5, 33
 * and 128 splits; head_dim_v 64, 96, 128, 192, 256; rectangular and varlen rows (rows at or past
 * cu_seqlens_q[batch] and the padding between heads never written); LSE NULL. The GPU test
 * (test_splitkv_combine) runs the same kernel on the device; this one needs none, so a wrong
 * address, predicate or reduction shows up in CI.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/generate.h"
#include "runtime/split.h"
#include "tools/common/numerics.h"
#include "combine_ref.h"

/* ------------------------------------------------------------------ the interpreter */

#define MAXINS 4096
#define MAXOPS 8
#define NREG 512
enum { C_R, C_RD, C_F, C_P, NCLS };

typedef struct ins {
    int guard, gneg;           /* predicate register number, -1 = none */
    char op[48];
    int nops;
    char opnd[MAXOPS][48];
} ins;

typedef struct prog {
    ins in[MAXINS];
    int n;
    char label[256][48];
    int label_at[256], nlabels;
} prog;

typedef struct warp {
    uint64_t reg[32][NCLS][NREG];
    int alive[32];
    unsigned tid0, ctaid;
    const uint8_t *params;
} warp;

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == ';'))
        s[--n] = 0;
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    memmove(s, s + i, strlen(s + i) + 1);
}

static void parse(prog *p, const char *ptx)
{
    memset(p, 0, sizeof *p);
    const char *body = strstr(ptx, "\n{\n");
    assert_non_null(body);
    char line[512];
    for (const char *s = body + 3; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        snprintf(line, sizeof line, "%.*s", (int)len, s);
        s += len + (nl ? 1 : 0);
        trim(line);
        if (!line[0] || line[0] == '}' || !strncmp(line, ".reg", 4) || !strncmp(line, "//", 2))
            continue;
        if (line[strlen(line) - 1] == ':') {
            line[strlen(line) - 1] = 0;
            snprintf(p->label[p->nlabels], 48, "%s", line);
            p->label_at[p->nlabels++] = p->n;
            continue;
        }
        assert_true(p->n < MAXINS);
        ins *in = &p->in[p->n++];
        in->guard = -1;
        char *c = line;
        if (*c == '@') {
            c++;
            if (*c == '!') {
                in->gneg = 1;
                c++;
            }
            assert_true(c[0] == '%' && c[1] == 'p');
            in->guard = atoi(c + 2);
            c = strchr(c, ' ');
            while (*c == ' ')
                c++;
        }
        char *sp = strchr(c, ' ');
        snprintf(in->op, sizeof in->op, "%.*s", sp ? (int)(sp - c) : (int)strlen(c), c);
        if (!sp)
            continue;
        /* operands: commas outside brackets; braces open into single operands */
        char *o = sp + 1;
        while (*o) {
            while (*o == ' ' || *o == '{' || *o == '}' || *o == ',')
                o++;
            if (!*o)
                break;
            char *e = o;
            int br = 0;
            while (*e && (br || (*e != ',' && *e != '}'))) {
                br += *e == '[';
                br -= *e == ']';
                e++;
            }
            assert_true(in->nops < MAXOPS);
            snprintf(in->opnd[in->nops], 48, "%.*s", (int)(e - o), o);
            trim(in->opnd[in->nops]);
            in->nops++;
            o = e;
        }
    }
}

static int label_pc(const prog *p, const char *name)
{
    for (int i = 0; i < p->nlabels; i++)
        if (!strcmp(p->label[i], name))
            return p->label_at[i];
    fail_msg("label %s not found", name);
    return -1;
}

/* A register operand: class and number, or -1. */
static int reg_of(const char *s, int *num)
{
    if (s[0] != '%')
        return -1;
    if (s[1] == 'r' && s[2] == 'd') {
        *num = atoi(s + 3);
        return C_RD;
    }
    if (s[1] == 'r' && s[2] >= '0' && s[2] <= '9') {
        *num = atoi(s + 2);
        return C_R;
    }
    if (s[1] == 'f' && s[2] >= '0' && s[2] <= '9') {
        *num = atoi(s + 2);
        return C_F;
    }
    if (s[1] == 'p' && s[2] >= '0' && s[2] <= '9') {
        *num = atoi(s + 2);
        return C_P;
    }
    return -1;
}

static float as_f(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t of_f(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The value of a source operand for lane l (registers, immediates, special registers). */
static uint64_t val(const warp *w, int l, const char *s)
{
    int num, c = reg_of(s, &num);
    if (c >= 0) {
        assert_true(num < NREG);
        return w->reg[l][c][num];
    }
    if (!strcmp(s, "%tid.x"))
        return w->tid0 + (unsigned)l;
    if (!strcmp(s, "%ctaid.x"))
        return w->ctaid;
    if (s[0] == '0' && s[1] == 'f')
        return strtoull(s + 2, NULL, 16);
    return (uint64_t)strtoll(s, NULL, 10);
}

static void set(warp *w, int l, const char *d, uint64_t v)
{
    int num, c = reg_of(d, &num);
    assert_true(c >= 0 && num < NREG);
    if (c == C_R || c == C_F)
        v &= 0xffffffffu;
    w->reg[l][c][num] = v;
}

/* The address [x] or [x+off]: a register (host pointer) or fa3_params. */
static uintptr_t addr(const warp *w, int l, const char *s)
{
    char b[48];
    snprintf(b, sizeof b, "%s", s + 1);
    b[strlen(b) - 1] = 0; /* drop ']' */
    char *plus = strchr(b, '+');
    long off = 0;
    if (plus) {
        off = atol(plus + 1);
        *plus = 0;
    }
    if (!strcmp(b, "fa3_params"))
        return (uintptr_t)w->params + (uintptr_t)off;
    return (uintptr_t)val(w, l, b) + (uintptr_t)off;
}

static int cmp(const char *how, int isf, int sgn, uint64_t a, uint64_t b, int bits)
{
    int c; /* -1, 0, 1, or 2 for unordered floats */
    if (isf) {
        const float x = as_f(a), y = as_f(b);
        c = x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
    } else if (sgn) {
        const int64_t x = bits == 32 ? (int32_t)a : (int64_t)a;
        const int64_t y = bits == 32 ? (int32_t)b : (int64_t)b;
        c = x < y ? -1 : x > y;
    } else {
        const uint64_t m = bits == 32 ? 0xffffffffu : ~0ull, x = a & m, y = b & m;
        c = x < y ? -1 : x > y;
    }
    static const struct { const char *how; int lt, eq, gt; } t[] = {
        {"eq", 0, 1, 0}, {"ne", 1, 0, 1}, {"lt", 1, 0, 0},
        {"le", 1, 1, 0}, {"gt", 0, 0, 1}, {"ge", 0, 1, 1}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(how, t[i].how))
            return c == 2 ? !strcmp(how, "ne") : c < 0 ? t[i].lt : c ? t[i].gt : t[i].eq;
    fail_msg("setp.%s not handled", how);
    return 0;
}

static int has(const char *op, const char *part)
{
    return strstr(op, part) != NULL;
}

/* One lane's instruction (not bra, not shfl). */
static void exec1(warp *w, int l, const ins *in)
{
    const char *op = in->op;
    const int is64 = has(op, "64"), isf = has(op, ".f32") && !has(op, "cvt.rn");
#define V(i) val(w, l, in->opnd[i])
    if (!strncmp(op, "ld.param.", 9)) {
        const uintptr_t a = addr(w, l, in->opnd[1]);
        uint64_t v = 0;
        if (is64)
            memcpy(&v, (const void *)a, 8);
        else {
            uint32_t u;
            memcpy(&u, (const void *)a, 4);
            v = u;
        }
        set(w, l, in->opnd[0], v);
    } else if (!strcmp(op, "ld.global.v4.f32")) {
        const uintptr_t a = addr(w, l, in->opnd[4]);
        assert_int_equal(a % 16, 0);
        for (int i = 0; i < 4; i++) {
            uint32_t u;
            memcpy(&u, (const void *)(a + 4 * (uintptr_t)i), 4);
            set(w, l, in->opnd[i], u);
        }
    } else if (!strncmp(op, "ld.global.", 10)) {
        const uintptr_t a = addr(w, l, in->opnd[1]);
        assert_int_equal(a % 4, 0);
        uint32_t u;
        memcpy(&u, (const void *)a, 4);
        set(w, l, in->opnd[0], u);
    } else if (!strncmp(op, "st.global.", 10)) {
        const uintptr_t a = addr(w, l, in->opnd[0]);
        assert_int_equal(a % 4, 0);
        const uint32_t u = (uint32_t)V(1);
        memcpy((void *)a, &u, 4);
    } else if (!strncmp(op, "mov.", 4)) {
        set(w, l, in->opnd[0], V(1));
    } else if (!strncmp(op, "setp.", 5)) {
        char how[4];
        snprintf(how, sizeof how, "%.2s", op + 5);
        const int bits = is64 ? 64 : 32;
        int r = cmp(how, has(op, ".f32"), has(op, ".s"), V(1), V(2), bits);
        if (has(op, ".or."))
            r = r || (int)V(3);
        set(w, l, in->opnd[0], (uint64_t)r);
    } else if (!strcmp(op, "and.pred")) {
        set(w, l, in->opnd[0], V(1) && V(2));
    } else if (!strncmp(op, "cvt.u64.u32", 11)) {
        set(w, l, in->opnd[0], (uint32_t)V(1));
    } else if (!strncmp(op, "cvt.rn.", 7)) {
        const int fp16 = has(op, "f16x2") && !has(op, "bf16x2");
        const fa3_dtype dt = fp16 ? FA3_DTYPE_FP16 : FA3_DTYPE_BF16;
        const uint32_t hi = f32_to_dtype(dt, as_f(V(1))), lo = f32_to_dtype(dt, as_f(V(2)));
        set(w, l, in->opnd[0], (uint64_t)(hi << 16 | lo));
    } else if (isf) {
        const float a = as_f(V(1)), b = in->nops > 2 ? as_f(V(2)) : 0;
        float r;
        if (!strncmp(op, "add.", 4)) r = a + b;
        else if (!strncmp(op, "sub.", 4)) r = a - b;
        else if (!strncmp(op, "mul.", 4)) r = a * b;
        else if (!strncmp(op, "max.", 4)) r = fmaxf(a, b);
        else if (!strncmp(op, "fma.", 4)) r = fmaf(a, b, as_f(V(3)));
        else if (!strncmp(op, "ex2.", 4)) r = exp2f(a);
        else if (!strncmp(op, "lg2.", 4)) r = log2f(a);
        else {
            fail_msg("float op %s not handled", op);
            return;
        }
        set(w, l, in->opnd[0], of_f(r));
    } else {
        const uint64_t m = is64 ? ~0ull : 0xffffffffu, a = V(1) & m;
        const uint64_t b = in->nops > 2 ? V(2) & m : 0;
        uint64_t r;
        if (!strncmp(op, "add.", 4)) r = a + b;
        else if (!strncmp(op, "sub.", 4)) r = a - b;
        else if (!strncmp(op, "mul.lo.", 7)) r = a * b;
        else if (!strncmp(op, "mad.lo.", 7)) r = a * b + V(3);
        else if (!strncmp(op, "div.u32", 7)) r = b ? a / b : 0;
        else if (!strncmp(op, "min.u32", 7)) r = a < b ? a : b;
        else if (!strncmp(op, "and.", 4)) r = a & b;
        else if (!strncmp(op, "shl.", 4)) r = a << b;
        else if (!strncmp(op, "shr.u", 5)) r = a >> b;
        else {
            fail_msg("integer op %s not handled", op);
            return;
        }
        set(w, l, in->opnd[0], r & m);
    }
#undef V
}

static int guard_ok(const warp *w, int l, const ins *in)
{
    if (in->guard < 0)
        return 1;
    const int p = (int)w->reg[l][C_P][in->guard];
    return in->gneg ? !p : p;
}

/* Runs one warp (lanes tid0 .. tid0+31 of CTA ctaid) to its end. Branches must be uniform over
   the live lanes, except a branch to a `ret` (those lanes end). */
static void run_warp(const prog *p, warp *w)
{
    for (int l = 0; l < 32; l++)
        w->alive[l] = 1;
    int pc = 0;
    for (long steps = 0; pc < p->n; steps++) {
        assert_true(steps < 10000000);
        const ins *in = &p->in[pc];
        if (!strcmp(in->op, "ret"))
            return;
        if (!strcmp(in->op, "bra")) {
            int take = 0, stay = 0;
            for (int l = 0; l < 32; l++)
                if (w->alive[l])
                    guard_ok(w, l, in) ? take++ : stay++;
            const int target = label_pc(p, in->opnd[0]);
            if (take && stay) {
                if (strcmp(p->in[target].op, "ret") != 0)
                    fail_msg("divergent branch to %s (not a ret) at instruction %d",
                             in->opnd[0], pc);
                for (int l = 0; l < 32; l++)
                    if (w->alive[l] && guard_ok(w, l, in))
                        w->alive[l] = 0;
                pc++;
            } else {
                pc = take ? target : pc + 1;
            }
            continue;
        }
        if (!strncmp(in->op, "shfl.sync.", 10)) {
            const int bfly = has(in->op, "bfly");
            uint64_t src[32], out[32];
            for (int l = 0; l < 32; l++) {
                if (w->alive[l] && !guard_ok(w, l, in))
                    fail_msg("predicated shfl");
                if (!w->alive[l])
                    fail_msg("shfl with exited lanes");
                src[l] = val(w, l, in->opnd[1]);
            }
            for (int l = 0; l < 32; l++) {
                const unsigned b = (unsigned)val(w, l, in->opnd[2]);
                out[l] = src[(bfly ? (unsigned)l ^ b : b) & 31];
            }
            for (int l = 0; l < 32; l++)
                set(w, l, in->opnd[0], out[l]);
            pc++;
            continue;
        }
        for (int l = 0; l < 32; l++)
            if (w->alive[l] && guard_ok(w, l, in))
                exec1(w, l, in);
        pc++;
    }
}

/* ------------------------------------------------------------------ the cases */

typedef struct ccase {
    int hdv;
    fa3_dtype dt;
    int varlen, ns, batch, heads, sq; /* varlen: sq = total_q */
    const int32_t *cu;
    int with_lse, all_empty;
    double center, spread;
    int row_base; /* rectangular: the partials hold output rows row_base.. only (a tail split) */
} ccase;

static prog g_prog;
static warp g_warp;

static void run_case(const ccase *c, uint64_t seed)
{
    fa3_config cfg;
    fa3_config_init(&cfg);
    cfg.head_dim = cfg.head_dim_v = c->hdv;
    cfg.dtype = c->dt;
    cfg.varlen = c->varlen;
    cfg.split_kv = 1;
    assert_int_equal(fa3_config_canonicalize(&cfg, &cfg), FA3_OK);
    fa3_plan plan;
    assert_int_equal(fa3_plan_make(&cfg, &plan), FA3_OK);
    char *ptx = NULL;
    assert_int_equal(fa3_codegen_kernel(FA3_KERNEL_COMBINE, &plan, &ptx, NULL), FA3_OK);
    parse(&g_prog, ptx);
    free(ptx);

    const int hdv = c->hdv, ns = c->ns, H = c->heads, sq = c->sq, rb = c->row_base;
    const int all = c->varlen ? H * sq : c->batch * H * sq; /* output rows */
    const int rows = all - rb;                               /* partial rows */
    host_rng rng;
    rng_init(&rng, seed);
    const size_t no = (size_t)ns * rows * hdv, nl = (size_t)ns * rows;
    float *op = aligned_alloc(16, (no * 4 + 15) / 16 * 16), *lp = malloc(nl * 4);
    assert_true(op && lp);
    for (int row = 0; row < rows; row++) {
        const int kind = c->all_empty ? 0 : row % 5, only = (int)(rng_uniform(&rng) * ns) % ns;
        for (int s = 0; s < ns; s++) {
            double v = c->center + c->spread * (2 * rng_uniform(&rng) - 1);
            if (kind == 0 || (kind == 1 && s != only) || (kind >= 2 && rng_uniform(&rng) < 0.25))
                v = -INFINITY;
            lp[(size_t)s * rows + row] = (float)v;
            for (int j = 0; j < hdv; j++)
                op[((size_t)s * rows + row) * hdv + j] =
                    isinf(v) ? 0.0f : (float)rng_normal(&rng);
        }
    }
    const int64_t hs = hdv + 6, rs = (int64_t)H * hs, bs = c->varlen ? 0 : (int64_t)sq * rs;
    const size_t o_elems = (size_t)(c->varlen ? 1 : c->batch) * (size_t)sq * (size_t)rs;
    uint16_t *o = malloc(o_elems * 2);
    float *lse = malloc((size_t)all * 4);
    assert_true(o && lse);
    const uint16_t nan16 = nan16_bits(c->dt);
    for (size_t e = 0; e < o_elems; e++)
        o[e] = nan16;
    for (int r = 0; r < all; r++)
        lse[r] = NAN;

    const fa3_combine_call call = {
        .o_partial = op, .lse_partial = lp, .o = o, .lse = c->with_lse ? lse : NULL,
        .o_batch_stride = bs, .o_row_stride = rs, .o_head_stride = hs, .cu_seqlens_q = c->cu,
        .num_splits = ns, .rows = rows, .seqlen_q = sq, .num_heads = H, .batch = c->batch,
        .row_base = (uint32_t)rb};
    fa3_kernel_param_block params;
    unsigned grid;
    fa3_combine_params_fill(&call, &params.combine, &grid);
    g_warp.params = (const uint8_t *)&params;
    for (unsigned cta = 0; cta < grid; cta++)
        for (unsigned wi = 0; wi < FA3_COMBINE_WARPS; wi++) {
            memset(g_warp.reg, 0x5A, sizeof g_warp.reg); /* no value is 0 before it is set */
            g_warp.ctaid = cta;
            g_warp.tid0 = 32 * wi;
            run_warp(&g_prog, &g_warp);
        }

    long bad = 0;
    double worst = 0;
    unsigned char *seen = calloc(o_elems, 1);
    assert_non_null(seen);
    const int end = c->varlen ? c->cu[c->batch] : sq;
    for (int orow = 0; orow < all; orow++) {
        const int hb = orow / sq, i = orow % sq, row = orow - rb; /* row: the partials' */
        const int h = c->varlen ? hb : hb % H, b = c->varlen ? 0 : hb / H;
        const size_t base = (size_t)((int64_t)b * bs + (int64_t)i * rs + (int64_t)h * hs);
        for (int j = 0; j < hdv; j++)
            seen[base + (size_t)j] = 1;
        if (row < 0) { /* before the partials' first row: untouched */
            for (int j = 0; j < hdv; j++)
                if (o[base + (size_t)j] != nan16 && bad++ < 5)
                    printf("  row %d (before row_base %d) col %d written\n", orow, rb, j);
            if (!isnan(lse[orow]) && bad++ < 5)
                printf("  row %d: LSE written before row_base %d\n", orow, rb);
            continue;
        }
        if (c->varlen && i >= end) {
            for (int j = 0; j < hdv; j++)
                if (o[base + (size_t)j] != nan16 && bad++ < 5)
                    printf("  row %d (packed %d >= %d) col %d written\n", row, i, end, j);
            if (!isnan(lse[row]) && bad++ < 5)
                printf("  row %d: LSE written past the sequences\n", row);
            continue;
        }
        const double ref_lse = combine_ref_lse(lp, ns, rows, row);
        const double m = ref_lse; /* -inf exactly when every split is */
        if (c->with_lse) {
            const int ok = m == -INFINITY ? (isinf(lse[orow]) && lse[orow] < 0)
                                          : fabs(lse[orow] - ref_lse) <= 4e-6 * (1 + fabs(ref_lse));
            if (!ok && bad++ < 5)
                printf("  row %d: LSE %.9g, expected %.9g\n", orow, (double)lse[orow], ref_lse);
        } else if (!isnan(lse[orow]) && bad++ < 5) {
            printf("  row %d: LSE written though NULL\n", row);
        }
        for (int j = 0; j < hdv; j++) {
            double mag;
            const double ref = combine_ref_o(op, lp, ns, rows, hdv, row, j, ref_lse, &mag);
            const double got = dtype_to_f32(c->dt, o[base + (size_t)j]);
            const double err = fabs(got - ref), tol = combine_tol(c->dt, ref, mag);
            if (!(err <= tol) && bad++ < 5)
                printf("  row %d col %d: O %.7g, expected %.7g\n", row, j, got, ref);
            if (err / tol > worst)
                worst = err / tol;
        }
    }
    for (size_t e = 0; e < o_elems; e++)
        if (!seen[e] && o[e] != nan16 && bad++ < 5)
            printf("  O element %zu (padding) written\n", e);
    printf("  hdv %d %s%s, %d splits, %d rows from row %d: worst error %.2f of the tolerance, "
           "%ld bad\n", hdv, c->dt == FA3_DTYPE_FP16 ? "fp16" : "bf16", c->varlen ? " varlen" : "",
           ns, rows, rb, worst, bad);
    free(seen);
    free(o);
    free(lse);
    free(op);
    free(lp);
    if (bad)
        fail_msg("%ld mismatches", bad);
}

static uint64_t seed(void)
{
    const char *s = getenv("FA3JIT_TEST_SEED");
    static uint64_t v;
    if (!v)
        v = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return v;
}

static void test_rectangular(void **state)
{
    (void)state;
    static const ccase cs[] = {
        {128, FA3_DTYPE_BF16, 0, 5, 2, 3, 3, NULL, 1, 0, 2, 6, 0},
        {64, FA3_DTYPE_FP16, 0, 1, 3, 2, 3, NULL, 0, 0, 0, 3, 0},
        {256, FA3_DTYPE_BF16, 0, 128, 1, 2, 3, NULL, 1, 0, 5, 10, 0},
        {96, FA3_DTYPE_FP16, 0, 33, 2, 2, 3, NULL, 1, 0, 80, 30, 0},
        {192, FA3_DTYPE_BF16, 0, 6, 1, 3, 5, NULL, 1, 0, -80, 30, 0},
        {128, FA3_DTYPE_FP16, 0, 5, 2, 2, 3, NULL, 1, 1, 0, 1, 0},
        /* a tail split's combine: the last rows only, from inside a (batch, head)'s rows */
        {128, FA3_DTYPE_BF16, 0, 5, 2, 3, 7, NULL, 1, 0, 2, 6, 23},
        {256, FA3_DTYPE_FP16, 0, 3, 3, 2, 5, NULL, 1, 0, -3, 6, 10},
        {64, FA3_DTYPE_BF16, 0, 13, 1, 4, 6, NULL, 0, 0, 4, 6, 17},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i], seed() + i);
}

static void test_varlen(void **state)
{
    (void)state;
    static const int32_t cu3[] = {0, 3, 3, 7}, cu1[] = {0, 2};
    static const ccase cs[] = {
        {96, FA3_DTYPE_FP16, 1, 9, 3, 3, 10, cu3, 1, 0, 1, 8, 0},
        {192, FA3_DTYPE_BF16, 1, 33, 3, 2, 10, cu3, 1, 0, 3, 5, 0},
        {256, FA3_DTYPE_FP16, 1, 128, 1, 2, 3, cu1, 1, 0, 0, 4, 0},
        {64, FA3_DTYPE_BF16, 1, 1, 3, 3, 10, cu3, 0, 0, 0, 2, 0},
        {128, FA3_DTYPE_BF16, 1, 3, 3, 2, 10, cu3, 1, 1, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i], seed() + 100 + i);
}

int main(void)
{
    printf("seed %llu (FA3JIT_TEST_SEED repeats it)\n", (unsigned long long)seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rectangular),
        cmocka_unit_test(test_varlen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
