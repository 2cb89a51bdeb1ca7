/*
 * The PTX writing layer: typed virtual registers, one emit path for instructions, labels from one
 * counter, and the checks a finished kernel must pass (tinygrad's PTX renderer and chibicc's
 * single emit path are the models).
 *
 * Registers are virtual: ptxas allocates the real ones, so every value gets its own register,
 * handed out by class and name (`ptx_reg(fn, PTX_B32, "tile")`) or as a named array
 * (`ptx_array(fn, PTX_F32, "s", 64)`: %s0 .. %s63, for accumulators). The .reg lines are written
 * when the function is finished, from what was handed out. A scalar prints as its class and
 * number (%r7: .reg .b32 %r<N>, the compact form ptxas reads fastest: the named form made the
 * kernel's text 31% longer and its compile up to 10% slower), or with `named` set as its name and
 * id (%tile_7), for reading (`fa3-gen --emit-ptx --named-registers`).
 *
 * Instructions are written by ptx_ins with a format in which `$` takes the next register (a
 * ptx_r argument), `${` a register array slice ({%s0, ..., %s63}: a ptx_r and an int count), and
 * %d, %u, %s, %x, %% work as in printf. Each register operand is checked against the instruction:
 * the op table (ptx.c) gives, per base opcode, which class each operand position takes from the
 * instruction's type suffix (add.u32: all .b32; setp.lt.s32: a predicate, then .b32; cvt.f32.u32:
 * .f32 then .b32; a bracketed shared-memory address: .b32, a global one: .b64). A mismatch, an
 * opcode missing from the table or an unterminated format is a generator bug: the function
 * records it and ptx_finish fails with its text.
 *
 * Kernel invariants (checked by ptx_finish, every kernel, every compile):
 *   - named barriers: ids within 1..15, each id always used with one thread count;
 *   - mbarriers: every release site of a barrier adds up to the barrier's arrival count per phase,
 *     and every barrier that is waited on was initialized;
 *   - shared memory: every recorded offset lies within the dynamic shared memory requested;
 *   - labels: each referenced label defined exactly once;
 *   - setmaxnreg: targets in 24..256, multiples of 8, and the split fits the register file.
 */
#ifndef FA3JIT_CODEGEN_PTX_H
#define FA3JIT_CODEGEN_PTX_H

#include <stddef.h>

#include "codegen/emit.h"

typedef enum ptx_cls { PTX_PRED = 1, PTX_B32, PTX_B64, PTX_F32, PTX_B16 } ptx_cls;
#define PTX_NUM_CLS 6 /* classes 1 .. PTX_B16, and 0 = none */

/* A virtual register: a scalar (arr = 0, id from the class's counter) or element idx of a named
   array (arr = 1 + the array's index). cls 0 = no register. */
typedef struct ptx_r {
    unsigned char cls;
    unsigned char arr;
    unsigned short idx;
    int id;
} ptx_r;

typedef struct ptx_fn ptx_fn;

/* Limits of the tables in ptx_fn */
#define PTX_MAX_SCALARS 4096
#define PTX_MAX_ARRAYS 8
#define PTX_MAX_LABELS 512
#define PTX_MAX_MBARS 64 /* 4 per K/V stage (at most 8) and 4 for Q: 36 */
#define PTX_MAX_SITES 64

/* An mbarrier the kernel uses: its byte offset from the barrier area, its arrival count per
   phase (mbarrier.init's count), a name for messages. */
typedef struct ptx_mbar {
    const char *name;
    int offset;
    int count;
} ptx_mbar;

struct ptx_fn {
    int named;                    /* print scalars by name (%tile_7) instead of %r7 */
    fa3_buf body;
    char error[256];              /* the first generator bug met ("" = none) */
    int nscalar[PTX_NUM_CLS];     /* per class: registers handed out */
    const char *scalar_name[PTX_MAX_SCALARS];
    unsigned char scalar_cls[PTX_MAX_SCALARS];
    unsigned short scalar_num[PTX_MAX_SCALARS]; /* number within its class: %r<num> */
    int nscalars;
    struct {
        const char *name;
        int cls, n;
    } arr[PTX_MAX_ARRAYS];
    int narr;
    int nlabels;
    unsigned char label_defined[PTX_MAX_LABELS];
    unsigned char label_used[PTX_MAX_LABELS];
    const char *label_name[PTX_MAX_LABELS];
    int named_bar_count[16];      /* thread count per named barrier id (0 = unused) */
    ptx_mbar mbar[PTX_MAX_MBARS]; /* the barrier table (set by the generator from the plan) */
    int nmbar;
    unsigned char mbar_inited[PTX_MAX_MBARS], mbar_waited[PTX_MAX_MBARS];
    struct {
        int mbar, arrivals;
        const char *site;
    } release[PTX_MAX_SITES];    /* arrive sites: arrivals each adds per phase */
    int nrelease;
    int smem_bytes;               /* dynamic shared memory the launch requests */
    int smem_max_used;            /* highest byte (exclusive) the generator addressed */
};

/* ---- registers */
ptx_r ptx_reg(ptx_fn *f, ptx_cls cls, const char *name);
/* A named array of n registers of cls; returns element 0 (ptx_at gives the others). */
ptx_r ptx_array(ptx_fn *f, ptx_cls cls, const char *name, int n);
ptx_r ptx_at(ptx_r first, int i);
/* The register's name as the PTX spells it (%tile_7, %s12), into buf. */
const char *ptx_name(const ptx_fn *f, ptx_r r, char *buf, size_t size);

/* ---- instructions: see the header comment for the format */
void ptx_ins(ptx_fn *f, const char *fmt, ...);
/* A comment line (// text) in the body. */
void ptx_comment(ptx_fn *f, const char *fmt, ...) FA3_PRINTF(2, 3);

/* ---- labels: a new one (name only for reading the PTX), its definition, its text for bra */
int ptx_label(ptx_fn *f, const char *name);
void ptx_place(ptx_fn *f, int label);
const char *ptx_lab(ptx_fn *f, int label); /* "$L<name>_<n>"; marks it used */

/* ---- invariants: what the generator declares so ptx_finish can check it */
void ptx_named_bar(ptx_fn *f, int id, int threads);   /* a bar.sync/bar.arrive on id */
int ptx_mbar_add(ptx_fn *f, const char *name, int offset, int count); /* returns its index */
void ptx_mbar_inited(ptx_fn *f, int mbar);
void ptx_mbar_waited(ptx_fn *f, int mbar);
void ptx_mbar_release(ptx_fn *f, int mbar, int arrivals, const char *site);
void ptx_smem_use(ptx_fn *f, int offset, int bytes);
void ptx_regs_split(ptx_fn *f, int entry_regs, int threads, int producer_regs, int producer_threads,
                    int consumer_regs, int consumer_threads);
/* Records a generator bug (the first one is kept). */
void ptx_bug(ptx_fn *f, const char *fmt, ...) FA3_PRINTF(2, 3);

/* Checks the invariants, then appends the .reg declarations and the body to out.
   FA3_ERR_INTERNAL naming the first violation, FA3_ERR_OUT_OF_MEMORY. Frees the body. */
fa3_status ptx_finish(ptx_fn *f, fa3_buf *out);
/* Frees what f holds (after an error, when ptx_finish was not called). */
void ptx_discard(ptx_fn *f);

#endif
