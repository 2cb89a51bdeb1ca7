/*
 * The persistent tile loop's index and decode in PTX: the expansion of tile_order.h's lists into
 * instructions (the host expands the same lists into C for its simulation of the order).
 */
#include "codegen/divide.h"
#include "codegen/kgen.h"
#include "codegen/tile_order.h"
#include "kernel_abi.h"

typedef enum to_op { ADD, SUB, MUL, DIVU, REMU, DIVS, DIVSN, MINS, MAXS, MINU, AND } to_op;
typedef enum to_cond { NZ, GE0 } to_cond;

static const char *const op_text[] = {"add.u32", "sub.u32", "mul.lo.u32", "div.u32",
                                      "rem.u32", "div.s32", "div.s32",    "min.s32",
                                      "max.s32", "min.u32", "and.b32"};

static ptx_r op_rr(kgen *g, const char *name, to_op op, ptx_r a, ptx_r b)
{
    ptx_r d = ptx_reg(g->f, PTX_B32, name);
    INS("%s $, $, $;", op_text[op], d, a, b);
    return d;
}

/* a DIVU or REMU by a divisor fixed for the launch, its magic in slot (tile_order.h's D form) */
static ptx_r op_inv(kgen *g, const char *name, to_op op, ptx_r a, ptx_r b, fa3_div_slot slot)
{
    return op == REMU ? kg_urem_param(g, name, a, b, slot) : kg_udiv_param(g, name, a, b, slot);
}

static ptx_r op_ri(kgen *g, const char *name, to_op op, ptx_r a, int imm)
{
    if (op == DIVS || op == DIVSN) { /* the lists' divisions by a plan constant (block_n) */
        ptx_r d = ptx_reg(g->f, PTX_B32, name);
        if (op == DIVSN)
            kg_sdiv_nonneg_imm_to(g, d, a, imm);
        else
            kg_sdiv_imm_to(g, d, a, imm);
        return d;
    }
    ptx_r d = ptx_reg(g->f, PTX_B32, name);
    INS("%s $, $, %d;", op_text[op], d, a, imm);
    return d;
}

static ptx_r op_sel(kgen *g, const char *name, to_cond c, ptx_r a, ptx_r x, ptx_r y)
{
    ptx_r p = ptx_reg(g->f, PTX_PRED, name);
    ptx_r d = ptx_reg(g->f, PTX_B32, name);
    INS(c == NZ ? "setp.ne.u32 $, $, 0;" : "setp.ge.s32 $, $, 0;", p, a);
    INS("selp.b32 $, $, $, $;", d, x, y, p);
    return d;
}

#define TO_S(d, op, a, b) ptx_r d = op_rr(g, #d, op, a, b);
#define TO_K(d, op, a, imm) ptx_r d = op_ri(g, #d, op, a, (int)(imm));
#define TO_P(d, c, a, x, y) ptx_r d = op_sel(g, #d, c, a, x, y);
#define TO_D(d, op, a, b, slot) ptx_r d = op_inv(g, #d, op, a, b, FA3_DIV_##slot);

ptx_r kg_tile_index(kgen *g)
{
    if (g->p->dyn_sched) /* the producer's choice, handed over (kg_tile_publish/take) */
        return g->dyn_tile;
    return kg_tile_index_static(g);
}

ptx_r kg_tile_index_static(kgen *g)
{
    ptx_r round = g->round;
    ptx_r ncta = ptx_reg(g->f, PTX_B32, "ncta"), cta = ptx_reg(g->f, PTX_B32, "cta");
    INS("mov.u32 $, %%nctaid.x;", ncta);
    INS("mov.u32 $, %%ctaid.x;", cta);
    /* varlen with the longest-first table: odd rounds reversed too (non-causal: the sorted
       sequences' costs descend round by round; simulated balance 0.95 -> 0.99 on the bench's
       lengths, test_varlen_order) */
    if (g->p->cfg.mask != FA3_MASK_NONE || (g->p->cfg.varlen && g->p->smem_vtab)) {
        FA3_TILE_INDEX_MASKED(TO_S, TO_K, TO_P)
        return tile;
    }
    FA3_TILE_INDEX_NONE(TO_S, TO_K, TO_P)
    return tile;
}

/* Varlen: the tile's sequence from the offsets (sequence b is rows cu[b] .. cu[b+1]-1 of the
   packed tensors; seqused_k[b], when given, the keys it uses). Tiles are (m_block, head, batch)
   of ceil(max_seqlen_q / block_m) m_blocks a sequence (the runtime sizes the grid so), so a tile
   never straddles two sequences; those past a shorter sequence's rows get no work. */
static void varlen_bounds(kgen *g, tile_info *t)
{
    ptx_r cuq = kg_param(g, PTX_B64, "u64", FA3P_OFF_CU_SEQLENS_Q, "cuq");
    ptx_r cuk = kg_param(g, PTX_B64, "u64", FA3P_OFF_CU_SEQLENS_K, "cuk");
    ptx_r su = kg_param(g, PTX_B64, "u64", FA3P_OFF_SEQUSED_K, "seqused");
    ptx_r b64 = ptx_reg(g->f, PTX_B64, "vlb"), off = ptx_reg(g->f, PTX_B64, "vloff");
    ptx_r aq = ptx_reg(g->f, PTX_B64, "vlaq"), ak = ptx_reg(g->f, PTX_B64, "vlak");
    ptx_r as = ptx_reg(g->f, PTX_B64, "vlas");
    INS("cvt.u64.u32 $, $;", b64, t->batch);
    INS("shl.b64 $, $, 2;", off, b64);
    INS("add.s64 $, $, $;", aq, cuq, off);
    INS("add.s64 $, $, $;", ak, cuk, off);
    ptx_r qend = ptx_reg(g->f, PTX_B32, "vlqend"), kend = ptx_reg(g->f, PTX_B32, "vlkend");
    t->qoff = ptx_reg(g->f, PTX_B32, "qoff");
    t->koff = ptx_reg(g->f, PTX_B32, "koff");
    INS("ld.global.nc.u32 $, [$];", t->qoff, aq);
    INS("ld.global.nc.u32 $, [$+4];", qend, aq);
    INS("ld.global.nc.u32 $, [$];", t->koff, ak);
    INS("ld.global.nc.u32 $, [$+4];", kend, ak);
    t->sq = op_rr(g, "sqt", SUB, qend, t->qoff);
    t->sk = op_rr(g, "skt", SUB, kend, t->koff);
    ptx_r has = ptx_reg(g->f, PTX_PRED, "hasused");
    INS("setp.ne.u64 $, $, 0;", has, su);
    INS("add.s64 $, $, $;", as, su, off);
    INS("@$ ld.global.nc.u32 $, [$];", has, t->sk, as);
    t->qrow = op_rr(g, "qrow", ADD, t->qoff, t->m0);
    t->tbatch = ptx_reg(g->f, PTX_B32, "tbatch");
    INS("mov.u32 $, 0;", t->tbatch);
}

/* Paged K/V with rectangular Q: the tile's sequence has seqused_k[b] keys when the array is
   given, else seqlen_k (varlen_bounds reads seqused_k for varlen + paged). */
static void paged_bounds(kgen *g, tile_info *t)
{
    ptx_r su = kg_param(g, PTX_B64, "u64", FA3P_OFF_SEQUSED_K, "seqused");
    ptx_r b64 = ptx_reg(g->f, PTX_B64, "pgb"), as = ptx_reg(g->f, PTX_B64, "pgas");
    ptx_r has = ptx_reg(g->f, PTX_PRED, "hasused");
    t->sk = ptx_reg(g->f, PTX_B32, "skt");
    INS("mov.u32 $, $;", t->sk, g->sk);
    INS("setp.ne.u64 $, $, 0;", has, su);
    INS("cvt.u64.u32 $, $;", b64, t->batch);
    INS("shl.b64 $, $, 2;", b64, b64);
    INS("add.s64 $, $, $;", as, su, b64);
    INS("@$ ld.global.nc.u32 $, [$];", has, t->sk, as);
}

/* Split-KV: tile index = base tile · num_splits + split (the splits of one (m_block, head,
   batch) fastest, so the CTAs of a round share its Q and read its keys side by side); *tile
   becomes the base tile, *ntiles the base tiles' count. */
static ptx_r split_of(kgen *g, ptx_r *tile, ptx_r *ntiles)
{
    ptx_r ns = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_SPLITS, "nsplits");
    ptx_r split = kg_urem_param(g, "split", *tile, ns, FA3_DIV_SPLITS);
    *tile = kg_udiv_param(g, "btile", *tile, ns, FA3_DIV_SPLITS);
    if (ntiles)
        *ntiles = kg_udiv_param(g, "bntiles", *ntiles, ns, FA3_DIV_SPLITS);
    return split;
}

tile_info kg_tile_decode(kgen *g, ptx_r tile)
{
    const fa3_plan *p = g->p;
    tile_info t = {.tile = tile};
    ptx_r ntiles = g->ntiles;
    if (p->cfg.split_kv)
        t.split = split_of(g, &tile, p->cfg.mask == FA3_MASK_NONE ? NULL : &ntiles);
    if (p->cfg.split_kv && p->cfg.mask == FA3_MASK_NONE) /* a dense call's tail split: its */
        tile = op_rr(g, "btile", ADD, tile,                 /* tiles from tile_base on */
                     kg_param(g, PTX_B32, "u32", FA3P_OFF_TILE_BASE, "tbase"));
    ptx_r nmb = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_M_BLOCKS, "nmb");
    /* packed GQA: a pair is (kv head, batch), its m_blocks cover seqlen_q · ratio packed rows */
    ptx_r nh = p->cfg.pack_gqa ? kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS_K, "nheadsk")
                               : kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    ptx_r hpk = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "hpkv");
    ptx_r mblk_out, pair_out;
    if (p->cfg.mask == FA3_MASK_NONE) {
        FA3_TILE_DECODE_NONE(TO_S, TO_K, TO_P, TO_D)
        mblk_out = mblk;
        pair_out = pair;
        (void)ntiles;
    } else {
        ptx_r section_hb = kg_param(g, PTX_B32, "u32", FA3P_OFF_SECTION_HB, "sechb");
        FA3_TILE_DECODE_MASKED(TO_S, TO_K, TO_P, TO_D)
        mblk_out = mblk;
        pair_out = pair;
    }
    t.mblk = mblk_out;
    t.head = kg_urem_param(g, "head", pair_out, nh, FA3_DIV_HEADS);
    t.batch = kg_udiv_param(g, "batch", pair_out, nh, FA3_DIV_HEADS);
    /* packed GQA: head is the kv head (the Q and O maps' head coordinate); each row has its own
       query head (blockinfo.c, epilogue.c) */
    t.kvhead = p->cfg.pack_gqa ? t.head : kg_udiv_param(g, "kvhead", t.head, hpk, FA3_DIV_HPKV);
    t.m0 = op_ri(g, "m0", MUL, t.mblk, p->block_m);
    return kg_tile_bounds(g, t);
}

/* Split-KV: split s of the tile's key blocks [nmin, nmax) (niters of them) takes chunk =
   ceil(niters / num_splits) of them, [nmin + s·chunk, min(nmax, nmin + (s+1)·chunk)); a split
   past the blocks gets none (niters 0: O = 0, LSE = -inf, as a row that sees no key). The
   per-row masks work on key indices, so they need no change. */
static void split_range(kgen *g, tile_info *t)
{
    ptx_r ns = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_SPLITS, "nsplits");
    ptx_r c0 = op_rr(g, "chunk", ADD, t->niters, ns);
    ptx_r c1 = op_ri(g, "chunk", SUB, c0, 1);
    ptx_r chunk = kg_udiv_param(g, "chunk", c1, ns, FA3_DIV_SPLITS);
    ptx_r off = op_rr(g, "soff", MUL, t->split, chunk);
    ptx_r lo = op_rr(g, "snmin", ADD, t->nmin, off);
    ptx_r hi0 = op_rr(g, "snmax", ADD, lo, chunk);
    ptx_r hi = op_rr(g, "snmax", MINS, hi0, t->nmax);
    ptx_r span = op_rr(g, "sspan", SUB, hi, lo);
    t->nmin = lo;
    t->nmax = hi;
    t->niters = op_ri(g, "niters", MAXS, span, 0);
}

/* The tile's sequence bounds and key-block range, from its (m_block, head, batch). */
tile_info kg_tile_bounds(kgen *g, tile_info t)
{
    const fa3_plan *p = g->p;
    t.sq = g->sq;
    t.sk = g->sk;
    t.qrow = t.m0;
    t.tbatch = t.batch;
    if (p->cfg.varlen)
        varlen_bounds(g, &t);
    else if (p->cfg.paged_kv)
        paged_bounds(g, &t);
    /* the key blocks [nmin, nmax) the tile's rows see */
    ptx_r m0 = t.m0, sq = t.sq, sk = t.sk, wl = g->wl, wr = g->wr;
#define FA3_TO_BM p->block_m
#define FA3_TO_BN p->block_n
    if (p->cfg.pack_gqa) {
        /* packed GQA: the rows' query positions m0 / ratio .. (m0 + bm - 1) / ratio; Q's TMA
           row coordinate (the 5-D map's seqlen) is the first */
        ptx_r ratio = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "ratio");
        FA3_TILE_RANGE_PACKED(TO_S, TO_K, TO_P, TO_D)
        t.qrow = q0;
        t.nmin = nmin;
        t.nmax = nmax;
        t.niters = niters;
    } else {
        ptx_r q0 = m0;
        FA3_TILE_RANGE(TO_S, TO_K, TO_P)
        t.nmin = nmin;
        t.nmax = nmax;
        t.niters = niters;
    }
#undef FA3_TO_BM
#undef FA3_TO_BN
    if (p->cfg.varlen) { /* a tile past its sequence's rows has nothing to do (and stores none) */
        ptx_r past = ptx_reg(g->f, PTX_PRED, "pastrows");
        ptx_r n2 = ptx_reg(g->f, PTX_B32, "niters");
        INS("setp.ge.s32 $, $, $;", past, t.m0, t.sq);
        INS("selp.b32 $, 0, $, $;", n2, t.niters, past);
        t.niters = n2;
    }
    if (p->cfg.split_kv)
        split_range(g, &t);
    return t;
}

/* bar, the slot's barrier of pair from, moved to the same slot's barrier of pair to */
static void other_pair(kgen *g, ptx_r bar, const int *from, const int *to)
{
    INS("add.u32 $, $, %d;", bar, bar, g->f->mbar[to[0]].offset - g->f->mbar[from[0]].offset);
}

/* dyn_sched: the address of use k's tile-index slot (slot k mod 2), the slot's barrier address
   of pair mb (g->sc.bar) into *bar and the use's parity into *par */
static ptx_r tile_slot(kgen *g, ptx_r k, const int *mb, ptx_r *par, ptx_r *bar)
{
    const fa3_plan *p = g->p;
    ptx_r slot = ptx_reg(g->f, PTX_B32, "tslot"), a = ptx_reg(g->f, PTX_B32, "taddr");
    *par = ptx_reg(g->f, PTX_B32, "tpar");
    INS("and.b32 $, $, 1;", slot, k);
    INS("shr.u32 $, $, 1;", *par, k);
    INS("and.b32 $, $, 1;", *par, *par);
    *bar = g->sc.bar;
    INS("mad.lo.u32 $, $, 8, $;", *bar, slot, g->bars);
    INS("add.u32 $, $, %d;", *bar, *bar, g->f->mbar[mb[0]].offset);
    INS("mad.lo.u32 $, $, 4, $;", a, slot, g->sbase);
    INS("add.u32 $, $, %d;", a, a, p->smem_tile);
    ptx_smem_use(g->f, p->smem_tile, 8);
    return a;
}

void kg_tile_publish(kgen *g, ptx_r k)
{
    ptx_r par, bar;
    ptx_r a = tile_slot(g, k, g->mb_tile_empty, &par, &bar);
    INS("xor.b32 $, $, 1;", par, par); /* the slot's previous use (the first passes at once) */
    kg_mbar_wait(g, bar, par, g->mb_tile_empty[0]);
    INS("st.shared.u32 [$], $;", a, g->dyn_tile);
    other_pair(g, bar, g->mb_tile_empty, g->mb_tile_full);
    INS("mbarrier.arrive.shared::cta.b64 _, [$];", bar);
}

void kg_tile_take(kgen *g, ptx_r k)
{
    ptx_r par, bar;
    ptx_r a = tile_slot(g, k, g->mb_tile_full, &par, &bar);
    kg_mbar_wait(g, bar, par, g->mb_tile_full[0]);
    /* lane 0 reads (its release below is ordered after its own read), the warp gets its value:
       warp-uniform to ptxas, as the static order's ctaid-derived index was */
    ptx_r l0 = g->sc.pt;
    INS("setp.eq.u32 $, $, 0;", l0, g->lane);
    INS("@$ ld.shared.u32 $, [$];", l0, g->dyn_tile, a);
    INS("shfl.sync.idx.b32 $, $, 0, 31, -1;", g->dyn_tile, g->dyn_tile);
    other_pair(g, bar, g->mb_tile_full, g->mb_tile_empty);
    kg_release_warp(g, bar, g->mb_tile_empty[0], "tile index taken");
}

void kg_tile_start(kgen *g)
{
    if (!g->p->cfg.varlen)
        return;
    g->vb = ptx_reg(g->f, PTX_B32, "vb");
    g->vbase = ptx_reg(g->f, PTX_B32, "vbase");
    INS("mov.u32 $, 0;", g->vb);
    INS("mov.u32 $, 0;", g->vbase);
}

/* Varlen without the longest-first table (varlen_order.c: batch > 32, a masked sequence of more
   than 128 m_blocks, or a plan with no room for it): the tiles are numbered sequence by sequence
   in batch order, only the real ones: sequence b holds
   num_heads · ceil(len_b / block_m) tiles, head-major, m_block fastest (masked: reversed,
   longest rows first). So the tiles a round runs at once are few sequences' heads with all their
   m_blocks, reading the same K/V (with slots of ceil(max_seqlen_q / block_m) m_blocks for every
   sequence, 16 random lengths ran at 0.82x of 16 equal ones, the kernel itself at 0.99x on equal
   lengths: session 7 call 10). A role's tiles only grow, so it walks the sequences once, from a
   cursor kept across its tiles (kg_tile_start); past the last sequence it has no tile left. */
static tile_info varlen_next(kgen *g, ptx_r tile, int lab_past)
{
    const fa3_plan *p = g->p;
    ptx_r cuq = kg_param(g, PTX_B64, "u64", FA3P_OFF_CU_SEQLENS_Q, "cuq");
    ptx_r nb_seq = kg_param(g, PTX_B32, "u32", FA3P_OFF_BATCH, "nseq");
    ptx_r nh = kg_param(g, PTX_B32, "u32", FA3P_OFF_NUM_HEADS, "nheads");
    const int lab_scan = ptx_label(g->f, "vscan"), lab_found = ptx_label(g->f, "vfound");
    ptx_r done = ptx_reg(g->f, PTX_PRED, "vdone"), here = ptx_reg(g->f, PTX_PRED, "vhere");
    ptx_r a = ptx_reg(g->f, PTX_B64, "vaddr"), qe = ptx_reg(g->f, PTX_B32, "vqe");
    ptx_r nmb = ptx_reg(g->f, PTX_B32, "vnmb"), end = ptx_reg(g->f, PTX_B32, "vend");
    ptx_place(g->f, lab_scan);
    INS("setp.ge.u32 $, $, $;", done, g->vb, nb_seq);
    INS("@$ bra %s;", done, ptx_lab(g->f, lab_past));
    INS("cvt.u64.u32 $, $;", a, g->vb);
    INS("shl.b64 $, $, 2;", a, a);
    INS("add.s64 $, $, $;", a, cuq, a);
    ptx_r qs = ptx_reg(g->f, PTX_B32, "vqs");
    INS("ld.global.nc.u32 $, [$];", qs, a);
    INS("ld.global.nc.u32 $, [$+4];", qe, a);
    INS("sub.u32 $, $, $;", nmb, qe, qs);
    INS("add.u32 $, $, %d;", nmb, nmb, p->block_m - 1);
    kg_udiv_imm_to(g, nmb, nmb, (uint32_t)p->block_m);
    INS("mad.lo.u32 $, $, $, $;", end, nmb, nh, g->vbase);
    INS("setp.lt.u32 $, $, $;", here, tile, end);
    INS("@$ bra %s;", here, ptx_lab(g->f, lab_found));
    INS("mov.u32 $, $;", g->vbase, end);
    INS("add.u32 $, $, 1;", g->vb, g->vb);
    INS("bra.uni %s;", ptx_lab(g->f, lab_scan));
    ptx_place(g->f, lab_found);
    tile_info t = {.tile = tile};
    ptx_r local = op_rr(g, "vlocal", SUB, tile, g->vbase);
    t.head = op_rr(g, "head", DIVU, local, nmb);
    ptx_r hm = op_rr(g, "vhm", MUL, t.head, nmb);
    ptx_r mi = op_rr(g, "vmi", SUB, local, hm);
    if (p->cfg.mask != FA3_MASK_NONE) {
        ptx_r top = op_ri(g, "vtop", SUB, nmb, 1);
        t.mblk = op_rr(g, "mblk", SUB, top, mi);
    } else {
        t.mblk = mi;
    }
    t.batch = ptx_reg(g->f, PTX_B32, "batch");
    INS("mov.u32 $, $;", t.batch, g->vb);
    return t;
}

tile_info kg_tile_next(kgen *g, int lab_past)
{
    ptx_r tile = kg_tile_index(g);
    ptx_r past = ptx_reg(g->f, PTX_PRED, "past");
    INS("setp.ge.u32 $, $, $;", past, tile, g->ntiles);
    INS("@$ bra %s;", past, ptx_lab(g->f, lab_past));
    if (!g->p->cfg.varlen)
        return kg_tile_decode(g, tile);
    ptx_r split = {0};
    if (g->p->cfg.split_kv) /* the split index out of the tile index first (split fastest) */
        split = split_of(g, &tile, NULL);
    tile_info t;
    if (!g->p->smem_vtab) {
        t = varlen_next(g, tile, lab_past);
    } else {
        /* longest first from the table warp 0 built (varlen_order.h); the walk where the
           table is invalid (batch > 32, or a masked sequence of more than 128 m_blocks) */
        t = (tile_info){.tile = tile};
        t.mblk = ptx_reg(g->f, PTX_B32, "mblk");
        t.head = ptx_reg(g->f, PTX_B32, "head");
        t.batch = ptx_reg(g->f, PTX_B32, "batch");
        const int lab_walk = ptx_label(g->f, "vwalk"), lab_join = ptx_label(g->f, "vjoin");
        kg_vtab_decode(g, tile, lab_past, lab_walk, &t);
        INS("bra.uni %s;", ptx_lab(g->f, lab_join));
        ptx_place(g->f, lab_walk);
        tile_info w = varlen_next(g, tile, lab_past);
        INS("mov.u32 $, $;", t.mblk, w.mblk);
        INS("mov.u32 $, $;", t.head, w.head);
        INS("mov.u32 $, $;", t.batch, w.batch);
        ptx_place(g->f, lab_join);
    }
    ptx_r hpk = kg_param(g, PTX_B32, "u32", FA3P_OFF_HEADS_PER_KV, "hpkv");
    t.kvhead = kg_udiv_param(g, "kvhead", t.head, hpk, FA3_DIV_HPKV);
    t.m0 = op_ri(g, "m0", MUL, t.mblk, g->p->block_m);
    t.split = split;
    return kg_tile_bounds(g, t);
}
