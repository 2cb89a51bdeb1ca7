/*
 * The tile order, described once. The kernel walks its tiles (m_block, head, batch) in rounds:
 * CTA c of grid G takes tile r·G + c in round r (masked configs: every odd round reversed, so the
 * CTA that took the longest tile of a round takes the shortest of the next). A tile index decodes
 * into (m_block, head, batch) and the key blocks [nmin, nmax) its rows see.
 *
 * The three steps are written below as lists of operations (X-macros). Each list is expanded twice:
 * into PTX by tile_order.c (the kernel's decode), and into C here (the host's simulation of the
 * kernel's order, runtime/schedule.c, which sizes the L2 sections). test_tile_order runs the
 * emitted PTX of the decode through a small interpreter and compares it with the C expansion.
 *
 * Operation forms: S(dst, op, a, b) on two values, K(dst, op, a, imm) with an immediate (a plan
 * constant), P(dst, cond, a, x, y) a select: dst = cond(a) ? x : y. Values are u32 (s32 where the
 * op says so): ops ADD, SUB, MUL, DIVU, REMU, DIVS, DIVSN (DIVS of a value the list has made
 * non-negative: the PTX may divide it unsigned), MINS, MAXS, MINU, AND; conditions NZ (a != 0,
 * unsigned), GE0 (a >= 0, signed).
 */
#ifndef FA3JIT_CODEGEN_TILE_ORDER_H
#define FA3JIT_CODEGEN_TILE_ORDER_H

#include <stdint.h>

/* Tile of CTA cta in round round (inputs: round, cta, ncta; masked: reversed odd rounds). */
#define FA3_TILE_INDEX_MASKED(S, K, P)       \
    K(odd, AND, round, 1)                    \
    K(last, SUB, ncta, 1)                    \
    S(rev, SUB, last, cta)                   \
    P(pos, NZ, odd, rev, cta)                \
    S(base, MUL, round, ncta)                \
    S(tile, ADD, base, pos)
#define FA3_TILE_INDEX_NONE(S, K, P)         \
    S(base, MUL, round, ncta)                \
    S(tile, ADD, base, cta)

/* (m_block, pair = head + batch·num_heads) of tile (inputs: tile, ntiles, nmb = number of
   m_blocks, section_hb). Non-masked: m_block fastest. Masked: sections of section_hb pairs (the
   last may be smaller), pairs fastest inside a section, m_block slowest and reversed (longest rows
   first). D(dst, op, a, b, SLOT) is S's DIVU or REMU by a divisor fixed for the launch, whose
   multiply-and-shift magic the runtime passes in fa3_kernel_params.div[FA3_DIV_SLOT]
   (kernel_abi.h; the PTX uses it under fast_div 2). */
#define FA3_TILE_DECODE_NONE(S, K, P, D)     \
    D(mblk, REMU, tile, nmb, NMB)            \
    D(pair, DIVU, tile, nmb, NMB)
#define FA3_TILE_DECODE_MASKED(S, K, P, D)   \
    D(pairs_all, DIVU, ntiles, nmb, NMB)     \
    S(sec_tiles, MUL, section_hb, nmb)       \
    D(sec, DIVU, tile, sec_tiles, SEC_TILES) \
    S(sec_start, MUL, sec, sec_tiles)        \
    S(in_sec, SUB, tile, sec_start)          \
    S(first_pair, MUL, sec, section_hb)      \
    S(left, SUB, pairs_all, first_pair)      \
    S(pairs, MINU, left, section_hb)         \
    D(mrev, DIVU, in_sec, pairs, SEC_PAIRS)  \
    D(pair_in, REMU, in_sec, pairs, SEC_PAIRS) \
    S(pair, ADD, pair_in, first_pair)        \
    K(mtop, SUB, nmb, 1)                     \
    S(mblk, SUB, mtop, mrev)

/* Key blocks [nmin, nmax) seen by rows m0 .. m0+bm-1, bottom-right aligned, niters = their count
   (inputs: m0, sq, sk, wl, wr with -1 = unlimited; constants bm, bn). The common part takes the
   first query row q0 and e0, one past the last; here q0 is m0 (an alias, no operation). */
#define FA3_TILE_RANGE(S, K, P)              \
    S(diag, SUB, sk, sq)                     \
    K(e0, ADD, m0, FA3_TO_BM)                \
    FA3_TILE_RANGE_FROM(S, K, P)
/* Packed GQA: the tile's packed rows m0 .. m0+bm-1 are query rows q = packed / ratio, so its first
   query row is m0 / ratio and its last (m0 + bm - 1) / ratio (input ratio besides the above). */
#define FA3_TILE_RANGE_PACKED(S, K, P, D)    \
    S(diag, SUB, sk, sq)                     \
    D(q0, DIVU, m0, ratio, HPKV)             \
    K(mlast, ADD, m0, FA3_TO_BM - 1)         \
    D(qlast, DIVU, mlast, ratio, HPKV)       \
    K(e0, ADD, qlast, 1)                     \
    FA3_TILE_RANGE_FROM(S, K, P)
#define FA3_TILE_RANGE_FROM(S, K, P)         \
    S(e1, ADD, e0, diag)                     \
    S(e2, ADD, e1, wr)                       \
    S(e3, MINS, e2, sk)                      \
    P(kend, GE0, wr, e3, sk)                 \
    K(kend0, MAXS, kend, 0)                  \
    K(kend1, ADD, kend0, FA3_TO_BN - 1)      \
    K(nmax, DIVSN, kend1, FA3_TO_BN)         \
    S(f0, ADD, q0, diag)                     \
    S(f1, SUB, f0, wl)                       \
    K(f2, MAXS, f1, 0)                       \
    K(f3, DIVSN, f2, FA3_TO_BN)              \
    K(zero, AND, f3, 0)                      \
    P(nmin, GE0, wl, f3, zero)               \
    S(span, SUB, nmax, nmin)                 \
    K(niters, MAXS, span, 0)

/* ---- the C expansion (host) */
#define FA3_TO_ADD(a, b) ((uint32_t)(a) + (uint32_t)(b))
#define FA3_TO_SUB(a, b) ((uint32_t)(a) - (uint32_t)(b))
#define FA3_TO_MUL(a, b) ((uint32_t)(a) * (uint32_t)(b))
#define FA3_TO_DIVU(a, b) ((uint32_t)(b) ? (uint32_t)(a) / (uint32_t)(b) : 0xffffffffu)
#define FA3_TO_REMU(a, b) ((uint32_t)(b) ? (uint32_t)(a) % (uint32_t)(b) : (uint32_t)(a))
#define FA3_TO_DIVS(a, b) ((uint32_t)((int32_t)(a) / (int32_t)(b)))
#define FA3_TO_DIVSN(a, b) FA3_TO_DIVS(a, b)
#define FA3_TO_MINS(a, b) ((int32_t)(a) < (int32_t)(b) ? (uint32_t)(a) : (uint32_t)(b))
#define FA3_TO_MAXS(a, b) ((int32_t)(a) > (int32_t)(b) ? (uint32_t)(a) : (uint32_t)(b))
#define FA3_TO_MINU(a, b) ((uint32_t)(a) < (uint32_t)(b) ? (uint32_t)(a) : (uint32_t)(b))
#define FA3_TO_AND(a, b) ((uint32_t)(a) & (uint32_t)(b))
#define FA3_TO_NZ(a) ((uint32_t)(a) != 0)
#define FA3_TO_GE0(a) ((int32_t)(a) >= 0)
#define FA3_TO_HS(d, op, a, b) const uint32_t d = FA3_TO_##op(a, b);
#define FA3_TO_HD(d, op, a, b, slot) FA3_TO_HS(d, op, a, b)
#define FA3_TO_HP(d, c, a, x, y) const uint32_t d = FA3_TO_##c(a) ? (uint32_t)(x) : (uint32_t)(y);

static inline uint32_t fa3_tile_index(int masked, uint32_t round, uint32_t cta, uint32_t ncta)
{
    if (masked) {
        FA3_TILE_INDEX_MASKED(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP)
        (void)base;
        return tile;
    }
    FA3_TILE_INDEX_NONE(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP)
    (void)base;
    return tile;
}

/* m_block of tile (pair: head + batch·num_heads). */
static inline uint32_t fa3_tile_decode(int masked, uint32_t tile, uint32_t ntiles, uint32_t nmb,
                                       uint32_t section_hb, uint32_t *pair_out)
{
    if (masked) {
        FA3_TILE_DECODE_MASKED(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP, FA3_TO_HD)
        *pair_out = pair;
        return mblk;
    }
    (void)ntiles;
    (void)section_hb;
    FA3_TILE_DECODE_NONE(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP, FA3_TO_HD)
    *pair_out = pair;
    return mblk;
}

/* Key blocks of the rows from m0 (bm rows, bn keys a block); *nmin_out the first. */
static inline int fa3_tile_range(int bm, int bn, int m0, int sq, int sk, int wl, int wr,
                                 int *nmin_out)
{
#define FA3_TO_BM ((uint32_t)bm)
#define FA3_TO_BN ((uint32_t)bn)
    const int q0 = m0;
    FA3_TILE_RANGE(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP)
#undef FA3_TO_BM
#undef FA3_TO_BN
    (void)nmax;
    if (nmin_out)
        *nmin_out = (int)nmin;
    return (int)niters;
}

/* Packed GQA: the key blocks of the packed rows from m0 (ratio query heads a query row). */
static inline int fa3_tile_range_packed(int bm, int bn, int m0, int ratio, int sq, int sk, int wl,
                                        int wr, int *nmin_out)
{
#define FA3_TO_BM ((uint32_t)bm)
#define FA3_TO_BN ((uint32_t)bn)
    FA3_TILE_RANGE_PACKED(FA3_TO_HS, FA3_TO_HS, FA3_TO_HP, FA3_TO_HD)
#undef FA3_TO_BM
#undef FA3_TO_BN
    (void)nmax;
    if (nmin_out)
        *nmin_out = (int)nmin;
    return (int)niters;
}

#endif
