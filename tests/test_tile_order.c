/*
 * test_tile_order: the tile order's two expansions agree, and the order is right.
 *   - the PTX the kernel's emitters write for the tile index and decode (tile_order.c) runs through
 *     a small interpreter of its integer instructions and gives, for every round and CTA of many
 *     shapes, the same tile, m_block, head, batch, kv head and key-block range as the host's C
 *     expansion (codegen/tile_order.h) that the section-size simulation uses;
 *   - the order visits every tile exactly once, decodes tiles one-to-one onto (m_block, head,
 *     batch), and each tile's key-block range is exactly the blocks holding a key some row of the
 *     tile sees (brute force over the rows);
 *   - split-KV: tile t·num_splits + s is split s of the tile t above, its blocks [nmin + s·chunk,
 *     min(nmax, nmin + (s+1)·chunk)), chunk = ceil(niters / num_splits): the splits of a tile
 *     cover its range once, in order, more splits than blocks leaving the last ones empty.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "codegen/tile_order.h"
#include "kernel_abi.h"
#include "runtime/runtime.h"

/* ---- a register file keyed by name */
#define NVARS 512
typedef struct vm {
    char name[NVARS][32];
    uint32_t val[NVARS];
    int n;
    uint32_t params[FA3P_SIZE / 4];
    uint32_t ctaid, nctaid;
} vm;

static uint32_t *slot(vm *m, const char *name, size_t len)
{
    for (int i = 0; i < m->n; i++)
        if (strlen(m->name[i]) == len && !memcmp(m->name[i], name, len))
            return &m->val[i];
    if (m->n == NVARS || len >= 32)
        fail_msg("interpreter: too many registers");
    memcpy(m->name[m->n], name, len);
    m->name[m->n][len] = 0;
    m->val[m->n] = 0;
    return &m->val[m->n++];
}

static uint32_t get(vm *m, const char *tok)
{
    if (tok[0] == '%')
        return *slot(m, tok, strlen(tok));
    return (uint32_t)strtol(tok, NULL, 0);
}

static void set_name(vm *m, const char *name, uint32_t v)
{
    *slot(m, name, strlen(name)) = v;
}

/* Runs the instruction lines of text: integer ALU ops, setp, selp, ld.param, the special
   registers. Anything else fails the test (the decode must stay within this subset). */
static void run(vm *m, const char *text)
{
    char line[256];
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (n >= sizeof line)
            fail_msg("interpreter: line too long");
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (p[n] == '\n');
        char *s = line;
        while (*s == '\t' || *s == ' ')
            s++;
        if (!*s || s[0] == '/' || s[0] == '$')
            continue;
        char op[64], a[5][64];
        int na = 0;
        char *sp = strchr(s, ' ');
        if (!sp)
            fail_msg("interpreter: no operands in '%s'", s);
        memcpy(op, s, (size_t)(sp - s));
        op[sp - s] = 0;
        char *args = sp + 1;
        args[strcspn(args, ";")] = 0;
        for (char *t = strtok(args, ", "); t && na < 5; t = strtok(NULL, ", "))
            snprintf(a[na++], sizeof a[0], "%s", t);
        if (!strcmp(op, "ld.param.u32") || !strcmp(op, "ld.param.s32")) {
            int off = atoi(strchr(a[1], '+') + 1);
            set_name(m, a[0], m->params[off / 4]);
        } else if (!strcmp(op, "mov.u32")) {
            uint32_t v = !strcmp(a[1], "%ctaid.x")    ? m->ctaid
                         : !strcmp(a[1], "%nctaid.x") ? m->nctaid
                                                      : get(m, a[1]);
            set_name(m, a[0], v);
        } else if (!strcmp(op, "setp.ne.u32")) {
            set_name(m, a[0], get(m, a[1]) != get(m, a[2]));
        } else if (!strcmp(op, "setp.ge.s32")) {
            set_name(m, a[0], (int32_t)get(m, a[1]) >= (int32_t)get(m, a[2]));
        } else if (!strcmp(op, "setp.lt.s32")) {
            set_name(m, a[0], (int32_t)get(m, a[1]) < (int32_t)get(m, a[2]));
        } else if (!strcmp(op, "setp.lt.u32")) {
            set_name(m, a[0], get(m, a[1]) < get(m, a[2]));
        } else if (!strcmp(op, "selp.b32")) {
            set_name(m, a[0], get(m, a[3]) ? get(m, a[1]) : get(m, a[2]));
        } else {
            uint32_t x = get(m, a[1]), y = get(m, a[2]), r = 0;
            if (!strcmp(op, "add.u32"))
                r = x + y;
            else if (!strcmp(op, "sub.u32"))
                r = x - y;
            else if (!strcmp(op, "mul.lo.u32"))
                r = x * y;
            else if (!strcmp(op, "mul.hi.u32"))
                r = (uint32_t)(((uint64_t)x * y) >> 32);
            else if (!strcmp(op, "shr.u32")) /* PTX clamps the shift */
                r = y > 31 ? 0 : x >> y;
            else if (!strcmp(op, "shr.s32"))
                r = (uint32_t)((int32_t)x >> (y > 31 ? 31 : y));
            /* (a tile past the end decodes to garbage the kernel never uses: no trap here) */
            else if (!strcmp(op, "div.u32"))
                r = y ? x / y : 0xffffffffu;
            else if (!strcmp(op, "rem.u32"))
                r = y ? x % y : x;
            else if (!strcmp(op, "div.s32"))
                r = y ? (uint32_t)((int32_t)x / (int32_t)y) : 0xffffffffu;
            else if (!strcmp(op, "min.s32"))
                r = (int32_t)x < (int32_t)y ? x : y;
            else if (!strcmp(op, "max.s32"))
                r = (int32_t)x > (int32_t)y ? x : y;
            else if (!strcmp(op, "min.u32"))
                r = x < y ? x : y;
            else if (!strcmp(op, "and.b32"))
                r = x & y;
            else
                fail_msg("interpreter: instruction '%s' outside the decode's subset", op);
            set_name(m, a[0], r);
        }
    }
}

typedef struct shape {
    int masked, bm, bn, sq, sk, wl, wr, heads, batch, hpk;
    uint32_t section_hb, grid;
    int splits; /* split-KV: num_splits (0: a config without split_kv) */
    int pack;   /* packed GQA: tiles of (kv head, batch), hpk query heads a query row */
} shape;

/* The emitted decode of one plan: instruction text and the names of its outputs. */
typedef struct decode_ptx {
    char *text;
    char tile[32], mblk[32], head[32], batch[32], kvhead[32], nmin[32], nmax[32], niters[32];
    char split[32], qrow[32];
    char round[32], sq[32], sk[32], wl[32], wr[32], ntiles[32];
} decode_ptx;

static void emit_decode(const shape *sh, int fast_div, decode_ptx *d)
{
    fa3_plan p = {0};
    fa3_config_init(&p.cfg);
    p.fast_div = fast_div;
    p.cfg.mask = sh->masked ? FA3_MASK_CAUSAL : FA3_MASK_NONE;
    p.cfg.split_kv = sh->splits > 0;
    p.cfg.pack_gqa = sh->pack;
    p.block_m = sh->bm;
    p.block_n = sh->bn;
    ptx_fn *f = calloc(1, sizeof *f);
    assert_non_null(f);
    kgen g = {.f = f, .p = &p};
    g.sq = ptx_reg(f, PTX_B32, "sq");
    g.sk = ptx_reg(f, PTX_B32, "sk");
    g.wl = ptx_reg(f, PTX_B32, "wl");
    g.wr = ptx_reg(f, PTX_B32, "wr");
    g.ntiles = ptx_reg(f, PTX_B32, "ntiles");
    g.round = ptx_reg(f, PTX_B32, "round");
    ptx_r tile = kg_tile_index(&g);
    tile_info t = kg_tile_decode(&g, tile);
    if (f->error[0])
        fail_msg("emitter: %s", f->error);
    ptx_name(f, tile, d->tile, 32);
    ptx_name(f, t.mblk, d->mblk, 32);
    ptx_name(f, t.head, d->head, 32);
    ptx_name(f, t.batch, d->batch, 32);
    ptx_name(f, t.kvhead, d->kvhead, 32);
    ptx_name(f, t.nmin, d->nmin, 32);
    ptx_name(f, t.nmax, d->nmax, 32);
    ptx_name(f, t.niters, d->niters, 32);
    if (sh->splits)
        ptx_name(f, t.split, d->split, 32);
    ptx_name(f, t.qrow, d->qrow, 32);
    ptx_name(f, g.round, d->round, 32);
    ptx_name(f, g.sq, d->sq, 32);
    ptx_name(f, g.sk, d->sk, 32);
    ptx_name(f, g.wl, d->wl, 32);
    ptx_name(f, g.wr, d->wr, 32);
    ptx_name(f, g.ntiles, d->ntiles, 32);
    d->text = f->body.data; /* taken over */
    free(f);
}

static void check_shape(const shape *sh, int fast_div)
{
    decode_ptx d;
    emit_decode(sh, fast_div, &d);
    /* packed GQA: sq · hpk packed rows of each (kv head, batch) pair */
    const int ratio = sh->pack ? sh->hpk : 1, hk = sh->pack ? sh->heads / sh->hpk : sh->heads;
    const uint32_t nmb = (uint32_t)((sh->sq * ratio + sh->bm - 1) / sh->bm);
    const uint32_t ns = sh->splits ? (uint32_t)sh->splits : 1;
    const uint32_t pairs = (uint32_t)(hk * sh->batch), nbase = nmb * pairs;
    const uint32_t ntiles = nbase * ns;
    vm *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->params[FA3P_OFF_NUM_M_BLOCKS / 4] = nmb;
    m->params[FA3P_OFF_NUM_HEADS / 4] = (uint32_t)sh->heads;
    m->params[FA3P_OFF_NUM_HEADS_K / 4] = (uint32_t)(sh->heads / sh->hpk);
    m->params[FA3P_OFF_HEADS_PER_KV / 4] = (uint32_t)sh->hpk;
    m->params[FA3P_OFF_SECTION_HB / 4] = sh->section_hb;
    m->params[FA3P_OFF_NUM_SPLITS / 4] = ns;
    { /* the launch's divisors (fast_div 2) as the runtime passes them */
        fa3_kernel_params prm;
        memset(&prm, 0, sizeof prm);
        prm.num_m_blocks = (int32_t)nmb;
        prm.heads_per_kv = sh->hpk;
        prm.section_hb = sh->section_hb;
        prm.total_tiles = ntiles;
        fa3_kernel_params_divs(&prm, (uint32_t)hk, ns, 1);
        memcpy(&m->params[FA3P_OFF_DIV / 4], prm.div, sizeof prm.div);
    }
    m->nctaid = sh->grid;
    uint8_t *seen = calloc(ntiles, 1);
    uint32_t *covered = calloc(nbase, sizeof *covered); /* blocks the splits ran, per tile */
    assert_non_null(seen);
    assert_non_null(covered);
    int visited = 0;
    for (uint32_t r = 0; (uint64_t)r * sh->grid < ntiles; r++)
        for (uint32_t c = 0; c < sh->grid; c++) {
            m->n = 0;
            m->ctaid = c;
            set_name(m, d.round, r);
            set_name(m, d.sq, (uint32_t)sh->sq);
            set_name(m, d.sk, (uint32_t)sh->sk);
            set_name(m, d.wl, (uint32_t)sh->wl);
            set_name(m, d.wr, (uint32_t)sh->wr);
            set_name(m, d.ntiles, ntiles);
            run(m, d.text);
            const uint32_t tile = get(m, d.tile);
            assert_int_equal(tile, fa3_tile_index(sh->masked, r, c, sh->grid));
            if (tile >= ntiles)
                continue;
            const uint32_t base = tile / ns, split = tile % ns;
            if (sh->splits)
                assert_int_equal(get(m, d.split), split);
            uint32_t pair;
            uint32_t mblk = fa3_tile_decode(sh->masked, base, nbase, nmb, sh->section_hb, &pair);
            assert_int_equal(get(m, d.mblk), mblk);
            assert_int_equal(get(m, d.head), pair % (uint32_t)hk); /* packed: the kv head */
            assert_int_equal(get(m, d.batch), pair / (uint32_t)hk);
            assert_int_equal(get(m, d.kvhead), sh->pack ? pair % (uint32_t)hk
                                                        : pair % (uint32_t)hk / (uint32_t)sh->hpk);
            /* Q's TMA row: the tile's first query row */
            assert_int_equal(get(m, d.qrow), mblk * (uint32_t)sh->bm / (uint32_t)ratio);
            int nmin;
            int niters = sh->pack ? fa3_tile_range_packed(sh->bm, sh->bn, (int)mblk * sh->bm,
                                                          ratio, sh->sq, sh->sk, sh->wl, sh->wr,
                                                          &nmin)
                                  : fa3_tile_range(sh->bm, sh->bn, (int)mblk * sh->bm, sh->sq,
                                                   sh->sk, sh->wl, sh->wr, &nmin);
            /* split s: its chunk of the tile's blocks; the splits tile the range in order */
            const int chunk = (niters + (int)ns - 1) / (int)ns;
            int slo = nmin + (int)split * chunk, shi = slo + chunk;
            if (shi > nmin + niters)
                shi = nmin + niters;
            const int sn = shi > slo ? shi - slo : 0;
            assert_int_equal((int32_t)get(m, d.niters), sn);
            if (sn > 0) {
                assert_int_equal((int32_t)get(m, d.nmin), slo);
                assert_int_equal((int32_t)get(m, d.nmax), shi);
                covered[mblk * pairs + pair] += (uint32_t)sn;
            }
            /* one-to-one, and the range is the blocks some row of the tile sees */
            const uint32_t id = (mblk * pairs + pair) * ns + split;
            assert_true(mblk < nmb && pair < pairs && !seen[id]);
            seen[id] = 1;
            visited++;
            int lo = -1, hi = -1;
            for (int i = (int)mblk * sh->bm; i < ((int)mblk + 1) * sh->bm; i++) {
                int diag = i / ratio + sh->sk - sh->sq; /* packed row i is query row i/ratio */
                int k0 = sh->wl >= 0 ? diag - sh->wl : 0, k1 = sh->wr >= 0 ? diag + sh->wr
                                                                           : sh->sk - 1;
                if (k0 < 0)
                    k0 = 0;
                if (k1 > sh->sk - 1)
                    k1 = sh->sk - 1;
                if (k0 > k1)
                    continue;
                if (lo < 0 || k0 / sh->bn < lo)
                    lo = k0 / sh->bn;
                if (k1 / sh->bn + 1 > hi)
                    hi = k1 / sh->bn + 1;
            }
            if (lo < 0)
                assert_int_equal(niters, 0);
            else
                assert_true(niters == hi - lo && nmin == lo);
        }
    assert_int_equal(visited, (int)ntiles);
    for (uint32_t b = 0; b < nbase; b++) { /* every block of every tile by exactly one split */
        int nmin;
        const int m0 = (int)(b / pairs) * sh->bm;
        const int niters = sh->pack ? fa3_tile_range_packed(sh->bm, sh->bn, m0, ratio, sh->sq,
                                                            sh->sk, sh->wl, sh->wr, &nmin)
                                    : fa3_tile_range(sh->bm, sh->bn, m0, sh->sq, sh->sk, sh->wl,
                                                     sh->wr, &nmin);
        assert_int_equal((int)covered[b], niters);
    }
    free(covered);
    free(seen);
    free(m);
    free(d.text);
}

static void test_orders_agree(void **state)
{
    (void)state;
    static const shape shapes[] = {
        /* masked, bm, bn, sq, sk, wl, wr, heads, batch, hpk, section_hb, grid, splits, pack */
        {0, 128, 128, 1000, 1000, -1, -1, 3, 2, 1, 1, 7, 0, 0},
        {0, 192, 128, 257, 4096, -1, -1, 4, 3, 2, 1, 5, 0, 0},
        {1, 128, 128, 1000, 1000, -1, 0, 3, 2, 3, 2, 7, 0, 0},     /* causal */
        {1, 128, 128, 2048, 1024, -1, 0, 4, 1, 2, 3, 6, 0, 0},     /* rows that see no key */
        {1, 192, 128, 1000, 1500, -1, 0, 5, 2, 5, 4, 11, 0, 0},
        {1, 128, 80, 777, 777, 100, 20, 6, 2, 2, 5, 9, 0, 0},      /* local */
        {1, 128, 112, 300, 5000, 0, -1, 2, 3, 1, 6, 4, 0, 0},      /* local, right unlimited */
        {1, 128, 128, 64, 9000, 300, 300, 7, 1, 7, 7, 3, 0, 0},
        {1, 128, 128, 4096, 4096, -1, 0, 8, 4, 4, 33, 132, 0, 0},
        /* split-KV: 1, 2, 3, 7 splits, more splits than blocks, decode (one query row) */
        {0, 128, 128, 1, 1000, -1, -1, 4, 2, 2, 1, 132, 1, 0},
        {0, 192, 128, 257, 4096, -1, -1, 4, 3, 2, 1, 5, 2, 0},
        {1, 128, 128, 1000, 1000, -1, 0, 3, 2, 3, 6, 7, 3, 0},
        {1, 128, 128, 2048, 1024, -1, 0, 4, 1, 2, 4, 6, 7, 0},  /* rows that see no key */
        {1, 128, 80, 777, 777, 100, 20, 6, 2, 2, 12, 9, 7, 0},  /* local */
        {0, 128, 128, 1, 700, -1, -1, 8, 3, 4, 1, 132, 24, 0}, /* 24 splits of 6 blocks */
        {1, 128, 128, 300, 1000, -1, 0, 2, 2, 1, 4, 16, 24, 0},
        /* packed GQA (heads = num_heads, hpk = ratio): decode, MQA, ratio 1, causal with rows
           past seqlen_q, local, hd64's block_m 192 with ratio 3 and 6, split-KV */
        {0, 128, 128, 1, 5000, -1, -1, 32, 4, 8, 1, 132, 0, 1},
        {1, 128, 128, 3, 77, -1, 0, 32, 3, 4, 1, 7, 0, 1},
        {1, 128, 128, 100, 1000, -1, 0, 32, 1, 32, 1, 5, 0, 1},  /* MQA */
        {1, 128, 80, 300, 1000, 50, 10, 16, 2, 2, 3, 9, 0, 1},   /* local */
        {0, 128, 128, 16, 77, -1, -1, 4, 2, 1, 1, 3, 0, 1},      /* ratio 1 */
        {1, 192, 128, 100, 1000, -1, 0, 12, 2, 3, 2, 7, 0, 1},
        {1, 192, 128, 77, 5000, 300, 0, 24, 1, 6, 4, 11, 0, 1},
        {0, 128, 128, 1, 5000, -1, -1, 32, 4, 8, 1, 132, 8, 1},  /* decode, 8 splits */
        {1, 128, 128, 16, 1000, -1, 0, 64, 1, 8, 8, 40, 3, 1},
        {1, 128, 128, 300, 1000, 100, 0, 32, 2, 32, 2, 16, 3, 1},
        /* 16-key blocks, seqlen_k - seqlen_q = 1 mod 16: tile 0's last query row (31) sees up
           to key 928, the first of a block (an off-by-one in the range shows) */
        {1, 128, 16, 104, 1001, -1, 0, 8, 1, 4, 1, 5, 0, 1},
        {1, 128, 16, 104, 1001, 15, 0, 8, 1, 4, 1, 5, 0, 1},
        /* block_m 64 (the decode tile): one pass and split, masks none, causal, local */
        {0, 64, 128, 7, 4096, -1, -1, 8, 3, 4, 1, 132, 0, 0},
        {1, 64, 128, 300, 1000, -1, 0, 4, 2, 2, 3, 9, 0, 0},     /* causal, a tail m_block */
        {1, 64, 80, 65, 4096, 64, 32, 4, 2, 1, 2, 5, 0, 0},      /* local */
        {0, 64, 128, 1, 4096, -1, -1, 8, 2, 4, 1, 132, 4, 0},
        {1, 64, 112, 65, 1000, -1, 0, 4, 2, 2, 4, 16, 4, 0},
    };
    /* fast_div 1 and 2: the divisions as multiply and shifts (codegen/divide.c) */
    for (int fast_div = 0; fast_div <= 2; fast_div++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            check_shape(&shapes[i], fast_div);
    printf("%zu shapes x fast_div 0..2: emitted PTX and the host's tile order agree\n",
           sizeof shapes / sizeof shapes[0]);
}

/* divmagic.h's multiply and shifts against the division, over divisors of every size and
   numerators at the edges (0, around multiples of d, the top of the range) and random ones */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    return (uint32_t)(rng_state >> 32);
}

static void check_div(uint32_t d)
{
    const fa3_divmagic mg = fa3_divmagic_of(d);
    const uint32_t k = 0xFFFFFFFFu / d;
    const uint32_t edge[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, k * d - 1, k * d,
                             k * d + (d - 1), 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        if (fa3_divmagic_div(edge[i], mg) != edge[i] / d)
            fail_msg("divmagic: %u / %u gave %u", edge[i], d, fa3_divmagic_div(edge[i], mg));
    for (int i = 0; i < 64; i++) {
        const uint32_t n = rnd() >> (rnd() % 32);
        if (fa3_divmagic_div(n, mg) != n / d)
            fail_msg("divmagic: %u / %u gave %u", n, d, fa3_divmagic_div(n, mg));
    }
}

static void test_divmagic(void **state)
{
    (void)state;
    for (uint32_t d = 1; d <= 70000; d++)
        check_div(d);
    for (int b = 1; b < 32; b++) {
        const uint32_t p = 1u << b;
        check_div(p - 1);
        check_div(p + 1);
        check_div(p);
    }
    check_div(0xFFFFFFFFu);
    for (int i = 0; i < 20000; i++)
        check_div(rnd() | 1);
    assert_int_equal(fa3_divmagic_div(12345, fa3_divmagic_of(0)), 12345); /* 0 taken as 1 */
}

/* The emitted divisions by a plan constant (divide.c) through the interpreter, under fast_div 1:
   unsigned and signed quotients and remainders, negative dividends included. */
static void test_divide_imm(void **state)
{
    (void)state;
    static const int32_t divisors[] = {1, 2, 3, 7, 64, 80, 112, 128, 176, 192, 1000, 65536};
    fa3_plan p = {0};
    fa3_config_init(&p.cfg);
    p.fast_div = 1;
    for (size_t i = 0; i < sizeof divisors / sizeof divisors[0]; i++) {
        const int32_t d = divisors[i];
        ptx_fn *f = calloc(1, sizeof *f);
        assert_non_null(f);
        kgen g = {.f = f, .p = &p};
        ptx_r a = ptx_reg(f, PTX_B32, "a");
        ptx_r q = ptx_reg(f, PTX_B32, "q"), r = ptx_reg(f, PTX_B32, "r");
        ptx_r sq = ptx_reg(f, PTX_B32, "sq"), ip = ptx_reg(f, PTX_B32, "ip");
        kg_udiv_imm_to(&g, q, a, (uint32_t)d);
        kg_urem_imm_to(&g, r, a, (uint32_t)d);
        kg_sdiv_imm_to(&g, sq, a, d);
        ptx_ins(f, "mov.u32 $, $;", ip, a);
        kg_urem_imm_to(&g, ip, ip, (uint32_t)d); /* in place */
        if (f->error[0])
            fail_msg("emitter: %s", f->error);
        assert_null(strstr(f->body.data, "div.")); /* no generic division left */
        assert_null(strstr(f->body.data, "rem."));
        char na[32], nq[32], nr[32], ns[32], ni[32];
        ptx_name(f, a, na, 32);
        ptx_name(f, q, nq, 32);
        ptx_name(f, r, nr, 32);
        ptx_name(f, sq, ns, 32);
        ptx_name(f, ip, ni, 32);
        vm *m = calloc(1, sizeof *m);
        assert_non_null(m);
        for (int j = 0; j < 4000; j++) {
            const uint32_t n = j < 8 ? (uint32_t[]){0, 1, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu,
                                                    (uint32_t)d - 1, (uint32_t)d,
                                                    (uint32_t)-d}[j]
                                     : rnd() >> (rnd() % 32) ^ (j & 1 ? 0xFFFFFFFFu : 0);
            m->n = 0;
            set_name(m, na, n);
            run(m, f->body.data);
            assert_int_equal(get(m, nq), n / (uint32_t)d);
            assert_int_equal(get(m, nr), n % (uint32_t)d);
            assert_int_equal(get(m, ni), n % (uint32_t)d);
            assert_int_equal((int32_t)get(m, ns), (int32_t)n / d);
        }
        free(m);
        free(f->body.data);
        free(f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_orders_agree),
                                       cmocka_unit_test(test_divmagic),
                                       cmocka_unit_test(test_divide_imm)};
    return cmocka_run_group_tests_name("tile_order", tests, NULL, NULL);
}
