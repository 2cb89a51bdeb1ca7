/*
 * test_varlen_table: the kernel's varlen tile table in PTX (codegen/varlen_order.c) against the
 * host's model of it (codegen/varlen_order.h). The PTX warp 0 runs at kernel start (the build)
 * and the decode every role runs per tile go through a small interpreter of one warp in lock
 * step (32 lanes, shared memory, cu_seqlens_q in a fake global memory; a branch that is not
 * uniform across the lanes fails the test; a decode runs on one lane, tile by tile); for many random length sets the table's bytes in
 * shared memory equal the model's, and each tile decodes to the model's (sequence, head,
 * m_block), past the end to "past", an invalid table to "walk".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/kgen.h"
#include "codegen/varlen_order.h"
#include "kernel_abi.h"

#define LANES 32
#define NREGS 160
#define SMEM (64 << 10)
#define GLOBAL_BASE 0x10000ull

typedef struct warp {
    char name[NREGS][32];
    uint64_t val[LANES][NREGS];
    int n;
    uint8_t params[FA3P_SIZE];
    uint8_t smem[SMEM];
    const int32_t *cu; /* the global memory: cu_seqlens_q at GLOBAL_BASE */
    int ncu;
    int nl; /* lanes running: 32 for the build, 1 for a decode */
} warp;

static int reg(warp *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->name[i], name))
            return i;
    if (w->n == NREGS || strlen(name) >= 32)
        fail_msg("interpreter: too many registers");
    snprintf(w->name[w->n], 32, "%s", name);
    for (int l = 0; l < LANES; l++)
        w->val[l][w->n] = 0;
    return w->n++;
}

static uint64_t get(warp *w, int lane, const char *tok)
{
    if (tok[0] == '%')
        return w->val[lane][reg(w, tok)];
    return (uint64_t)strtoll(tok, NULL, 0);
}

static void set(warp *w, int lane, const char *name, uint64_t v)
{
    w->val[lane][reg(w, name)] = v;
}

/* [reg+imm] or [reg] of lane: the address */
static uint64_t addr(warp *w, int lane, const char *tok)
{
    char r[32];
    size_t n = strcspn(tok + 1, "+]");
    snprintf(r, sizeof r, "%.*s", (int)n, tok + 1);
    uint64_t a = get(w, lane, r);
    if (tok[1 + n] == '+')
        a += (uint64_t)strtoll(tok + 2 + n, NULL, 0);
    return a;
}

static uint32_t *shared_at(warp *w, uint64_t a)
{
    if (a % 4 || a + 4 > SMEM)
        fail_msg("interpreter: shared address %llu", (unsigned long long)a);
    return (uint32_t *)(w->smem + a);
}

typedef struct line {
    char guard[32]; /* "%p3", "!%p3" or "" */
    char op[48];
    char a[6][48];
    int na;
    char label[48]; /* a label line: its name */
} line;

static int parse(const char *text, line **out)
{
    int cap = 64, n = 0;
    line *L = malloc(sizeof *L * (size_t)cap);
    for (const char *p = text; *p;) {
        char buf[256];
        size_t len = strcspn(p, "\n");
        if (len >= sizeof buf)
            fail_msg("interpreter: line too long");
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (p[len] == '\n');
        char *s = buf;
        while (*s == '\t' || *s == ' ')
            s++;
        if (!*s || s[0] == '/')
            continue;
        if (n == cap)
            L = realloc(L, sizeof *L * (size_t)(cap *= 2));
        line *ln = &L[n++];
        memset(ln, 0, sizeof *ln);
        if (s[0] == '$') {
            snprintf(ln->label, sizeof ln->label, "%.*s", (int)strcspn(s, ":"), s);
            continue;
        }
        if (s[0] == '@') {
            size_t g = strcspn(s, " ");
            snprintf(ln->guard, sizeof ln->guard, "%.*s", (int)g - 1, s + 1);
            s += g + 1;
        }
        size_t o = strcspn(s, " ;");
        snprintf(ln->op, sizeof ln->op, "%.*s", (int)o, s);
        char *args = s + o;
        args[strcspn(args, ";")] = 0;
        for (char *t = strtok(args, ", {}"); t && ln->na < 6; t = strtok(NULL, ", {}"))
            snprintf(ln->a[ln->na++], sizeof ln->a[0], "%s", t);
    }
    *out = L;
    return n;
}

static int find_label(const line *L, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (L[i].label[0] && !strcmp(L[i].label, name))
            return i;
    fail_msg("interpreter: no label %s", name);
    return -1;
}

/* Runs text on the lanes (lane l: %tid.x l); every branch must be uniform. */
static void run(warp *w, const char *text)
{
    line *L;
    const int n = parse(text, &L);
    for (int pc = 0, steps = 0; pc < n; steps++) {
        if (steps > 100000)
            fail_msg("interpreter: no end");
        const line *ln = &L[pc++];
        if (ln->label[0] || !strcmp(ln->op, "bar.warp.sync"))
            continue;
        int on[LANES], any = 0, all = 1;
        for (int l = 0; l < w->nl; l++) {
            on[l] = 1;
            if (ln->guard[0]) {
                const int neg = ln->guard[0] == '!';
                on[l] = (get(w, l, ln->guard + neg) != 0) != neg;
            }
            any |= on[l];
            all &= on[l];
        }
        const char *op = ln->op;
        if (!strncmp(op, "bra", 3)) {
            if (any && !all)
                fail_msg("interpreter: branch to %s diverges", ln->a[0]);
            if (all)
                pc = find_label(L, n, ln->a[0]);
            continue;
        }
        if (!strncmp(op, "shfl.sync.", 10)) { /* every lane, from the values before */
            uint64_t src[LANES];
            for (int l = 0; l < w->nl; l++)
                src[l] = get(w, l, ln->a[1]);
            for (int l = 0; l < w->nl; l++) {
                const int b = (int)get(w, l, ln->a[2]);
                int from = l;
                if (!strcmp(op, "shfl.sync.idx.b32"))
                    from = b & 31;
                else if (!strcmp(op, "shfl.sync.up.b32"))
                    from = l - b >= 0 ? l - b : l;
                else
                    fail_msg("interpreter: %s", op);
                set(w, l, ln->a[0], src[from]);
            }
            continue;
        }
        for (int l = 0; l < w->nl; l++) {
            if (!on[l])
                continue;
            const char(*a)[48] = ln->a;
            uint64_t x = ln->na > 1 && a[1][0] != '[' ? get(w, l, a[1]) : 0;
            uint64_t y = ln->na > 2 ? get(w, l, a[2]) : 0;
            const uint32_t x32 = (uint32_t)x, y32 = (uint32_t)y;
            uint64_t r = 0;
            if (!strcmp(op, "ld.param.u32")) {
                uint32_t v;
                memcpy(&v, w->params + addr(w, l, a[1]), 4);
                r = v;
            } else if (!strcmp(op, "ld.param.u64")) {
                memcpy(&r, w->params + addr(w, l, a[1]), 8);
            } else if (!strcmp(op, "ld.global.nc.u32")) {
                const uint64_t g = addr(w, l, a[1]);
                if (g < GLOBAL_BASE || (g - GLOBAL_BASE) % 4 ||
                    (g - GLOBAL_BASE) / 4 >= (uint64_t)w->ncu)
                    fail_msg("interpreter: global address %llx", (unsigned long long)g);
                r = (uint32_t)w->cu[(g - GLOBAL_BASE) / 4];
            } else if (!strcmp(op, "ld.shared.u32")) {
                r = *shared_at(w, addr(w, l, a[1]));
            } else if (!strcmp(op, "ld.shared.v4.u32")) {
                const uint64_t s = addr(w, l, a[4]);
                for (int k = 0; k < 4; k++)
                    set(w, l, a[k], *shared_at(w, s + 4 * (uint64_t)k));
                continue;
            } else if (!strcmp(op, "st.shared.u32")) {
                *shared_at(w, addr(w, l, a[0])) = (uint32_t)get(w, l, a[1]);
                continue;
            } else if (!strcmp(op, "mov.u32")) {
                r = !strcmp(a[1], "%tid.x") ? (uint64_t)l : x32;
            } else if (!strcmp(op, "cvt.u64.u32")) {
                r = x32;
            } else if (!strcmp(op, "shl.b64")) {
                r = x << y;
            } else if (!strcmp(op, "add.s64")) {
                r = x + y;
            } else if (!strncmp(op, "setp.", 5)) {
                const int sg = strstr(op, ".s32") != NULL;
                const int64_t sx = sg ? (int32_t)x32 : (int64_t)x32;
                const int64_t sy = sg ? (int32_t)y32 : (int64_t)y32;
                const char *c = op + 5;
                if (!strncmp(c, "eq", 2))
                    r = sx == sy;
                else if (!strncmp(c, "ne", 2))
                    r = sx != sy;
                else if (!strncmp(c, "lt", 2))
                    r = sx < sy;
                else if (!strncmp(c, "le", 2))
                    r = sx <= sy;
                else if (!strncmp(c, "gt", 2))
                    r = sx > sy;
                else if (!strncmp(c, "ge", 2))
                    r = sx >= sy;
                else
                    fail_msg("interpreter: %s", op);
            } else if (!strcmp(op, "selp.b32") || !strcmp(op, "selp.u32")) {
                r = get(w, l, a[3]) ? x32 : y32;
            } else if (!strcmp(op, "and.pred")) {
                r = x && y;
            } else if (!strcmp(op, "or.pred")) {
                r = x || y;
            } else if (!strcmp(op, "add.u32")) {
                r = (uint32_t)(x32 + y32);
            } else if (!strcmp(op, "sub.u32") || !strcmp(op, "sub.s32")) {
                r = (uint32_t)(x32 - y32);
            } else if (!strcmp(op, "mul.lo.u32")) {
                r = (uint32_t)(x32 * y32);
            } else if (!strcmp(op, "div.u32")) {
                r = y32 ? x32 / y32 : 0xffffffffu;
            } else if (!strcmp(op, "max.s32")) {
                r = (uint32_t)((int32_t)x32 > (int32_t)y32 ? x32 : y32);
            } else if (!strcmp(op, "shl.b32")) {
                r = (uint32_t)(x32 << y32);
            } else if (!strcmp(op, "shr.u32")) {
                r = x32 >> y32;
            } else {
                fail_msg("interpreter: instruction '%s' outside the table's subset", op);
            }
            set(w, l, a[0], r);
        }
    }
    free(L);
}

/* The build (warp 0's prologue part), then the decode of tile %tile with its three exits. */
typedef struct table_ptx {
    char *build, *decode;
    char thr[32], lane[32], sbase[32], tile[32], mblk[32], head[32], batch[32], out[32];
} table_ptx;

static void emit(int masked, int bm, int vtab, table_ptx *tp)
{
    fa3_plan p = {0};
    fa3_config_init(&p.cfg);
    p.cfg.mask = masked ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
    p.cfg.varlen = 1;
    p.block_m = bm;
    p.smem_vtab = vtab;
    for (int part = 0; part < 2; part++) {
        ptx_fn *f = calloc(1, sizeof *f);
        assert_non_null(f);
        f->smem_bytes = SMEM;
        kgen g = {.f = f, .p = &p};
        g.thr = ptx_reg(f, PTX_B32, "thr");
        g.lane = ptx_reg(f, PTX_B32, "lane");
        g.sbase = ptx_reg(f, PTX_B32, "sbase");
        ptx_name(f, g.thr, tp->thr, 32);
        ptx_name(f, g.lane, tp->lane, 32);
        ptx_name(f, g.sbase, tp->sbase, 32);
        if (part == 0) {
            kg_vtab_build(&g);
        } else {
            ptx_r tile = ptx_reg(f, PTX_B32, "tile"), out = ptx_reg(f, PTX_B32, "out");
            tile_info t = {.tile = tile, .mblk = ptx_reg(f, PTX_B32, "mblk"),
                           .head = ptx_reg(f, PTX_B32, "head"),
                           .batch = ptx_reg(f, PTX_B32, "batch")};
            const int past = ptx_label(f, "tpast"), walk = ptx_label(f, "twalk");
            const int end = ptx_label(f, "tend");
            kg_vtab_decode(&g, tile, past, walk, &t);
            ptx_ins(f, "mov.u32 $, 0;", out);
            ptx_ins(f, "bra.uni %s;", ptx_lab(f, end));
            ptx_place(f, past);
            ptx_ins(f, "mov.u32 $, 1;", out);
            ptx_ins(f, "bra.uni %s;", ptx_lab(f, end));
            ptx_place(f, walk);
            ptx_ins(f, "mov.u32 $, 2;", out);
            ptx_place(f, end);
            ptx_name(f, tile, tp->tile, 32);
            ptx_name(f, t.mblk, tp->mblk, 32);
            ptx_name(f, t.head, tp->head, 32);
            ptx_name(f, t.batch, tp->batch, 32);
            ptx_name(f, out, tp->out, 32);
        }
        if (f->error[0])
            fail_msg("emitter: %s", f->error);
        *(part ? &tp->decode : &tp->build) = f->body.data; /* taken over */
        free(f);
    }
}

static uint32_t rng_state = 777;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (uint32_t)(((uint64_t)(rng_state >> 8) * n) >> 24);
}

static void one_case(const table_ptx *tp, warp *w, int masked, int bm, int vtab, uint32_t batch,
                     uint32_t heads, const int32_t *cu)
{
    memset(w->smem, 0xa5, sizeof w->smem);
    memset(w->params, 0, sizeof w->params);
    const uint64_t cuq = GLOBAL_BASE;
    memcpy(w->params + FA3P_OFF_BATCH, &batch, 4);
    memcpy(w->params + FA3P_OFF_NUM_HEADS, &heads, 4);
    memcpy(w->params + FA3P_OFF_CU_SEQLENS_Q, &cuq, 8);
    w->cu = cu;
    w->ncu = (int)batch + 1;
    w->nl = LANES;
    for (int l = 0; l < LANES; l++) {
        set(w, l, tp->thr, (uint64_t)l);
        set(w, l, tp->lane, (uint64_t)l);
        set(w, l, tp->sbase, 0);
    }
    run(w, tp->build);
    uint32_t nmb[64];
    for (uint32_t b = 0; b < batch; b++)
        nmb[b] = (uint32_t)(cu[b + 1] - cu[b] + bm - 1) / (uint32_t)bm;
    fa3_vtab t;
    fa3_vtab_build(&t, masked, batch, heads, nmb);
    fa3_vtab got;
    memcpy(&got, w->smem + vtab, sizeof got);
    assert_int_equal(got.valid, t.valid);
    if (!t.valid) {
        w->nl = 1;
        set(w, 0, tp->tile, 0);
        run(w, tp->decode);
        assert_int_equal(get(w, 0, tp->out), 2);
        return;
    }
    assert_int_equal(got.total, t.total);
    assert_memory_equal(got.seq, t.seq, sizeof t.seq);
    assert_memory_equal(got.nmb, t.nmb, sizeof t.nmb);
    /* the prefix the order uses: 33 entries non-masked, 129 masked */
    assert_memory_equal(got.pre, t.pre, 4 * (masked ? FA3_VT_LEVELS + 1 : FA3_VT_BATCH + 1));
    /* each tile alone (a decode branches on its own tile): all of a small table, else a sample */
    w->nl = 1;
    const uint32_t stride = t.total < 2000 ? 1 : 1 + t.total / 1000;
    for (uint32_t tile = 0; tile <= t.total + 2; tile += tile + stride > t.total ? 1 : stride) {
        set(w, 0, tp->tile, tile);
        run(w, tp->decode);
        uint32_t b, h, m;
        if (!fa3_vtab_decode(&t, masked, heads, tile, &b, &h, &m)) {
            assert_int_equal(get(w, 0, tp->out), 1);
            continue;
        }
        assert_int_equal(get(w, 0, tp->out), 0);
        assert_int_equal(get(w, 0, tp->batch), b);
        assert_int_equal(get(w, 0, tp->head), h);
        assert_int_equal(get(w, 0, tp->mblk), m);
    }
}

static void test_table_ptx(void **state)
{
    (void)state;
    warp *w = calloc(1, sizeof *w);
    assert_non_null(w);
    for (int masked = 0; masked < 2; masked++)
        for (int bm = 64; bm <= 192; bm += 64) { /* 64: the decode tile (block_m 64) */
            const int vtab = 4096 + 16 * (int)rnd(64);
            table_ptx tp;
            emit(masked, bm, vtab, &tp);
            for (int iter = 0; iter < 60; iter++) {
                const int kind = iter % 5;
                const uint32_t batch = kind == 0 ? 1 : kind == 1 ? 32 : kind == 2 ? 33 + rnd(8)
                                                                                : 1 + rnd(32);
                const uint32_t heads = 1 + rnd(iter % 2 ? 3 : 12);
                int32_t cu[64] = {0};
                for (uint32_t b = 0; b < batch; b++) {
                    int32_t len = rnd(4) == 0 ? 0 : (int32_t)rnd(3000);
                    if (kind == 3 && b == 1) /* beyond the 128 levels (masked) */
                        len = FA3_VT_LEVELS * bm + 1;
                    if (kind == 4 && b % 2) /* ties */
                        len = 500;
                    cu[b + 1] = cu[b] + len;
                }
                one_case(&tp, w, masked, bm, vtab, batch, heads, cu);
            }
            free(tp.build);
            free(tp.decode);
        }
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table_ptx)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
