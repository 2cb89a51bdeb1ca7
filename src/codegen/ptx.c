/*
 * The PTX writing layer (interface and rules in ptx.h): register allocation by class and name,
 * the instruction formatter with its operand-class check against the op table below, labels, and
 * the kernel invariants ptx_finish checks before writing the .reg declarations and the body.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/ptx.h"

static const char *const cls_decl[PTX_NUM_CLS] = {"", ".pred", ".b32", ".b64", ".f32", ".b16"};
static const char *const cls_name[PTX_NUM_CLS] = {"none", ".pred", ".b32", ".b64", ".f32", ".b16"};
static const char *const cls_short[PTX_NUM_CLS] = {"", "p", "r", "rd", "f", "h"};

void ptx_bug(ptx_fn *f, const char *fmt, ...)
{
    if (f->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->error, sizeof f->error, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ registers */

ptx_r ptx_reg(ptx_fn *f, ptx_cls cls, const char *name)
{
    if (f->nscalars >= PTX_MAX_SCALARS) {
        ptx_bug(f, "more than %d scalar registers", PTX_MAX_SCALARS);
        return (ptx_r){.cls = (unsigned char)cls, .id = 0};
    }
    int id = f->nscalars++;
    f->scalar_num[id] = f->nscalar[cls];
    f->scalar_name[id] = name;
    f->scalar_cls[id] = (unsigned char)cls;
    f->nscalar[cls]++;
    return (ptx_r){.cls = (unsigned char)cls, .arr = 0, .idx = 0, .id = id};
}

ptx_r ptx_array(ptx_fn *f, ptx_cls cls, const char *name, int n)
{
    if (f->narr >= PTX_MAX_ARRAYS || n < 1 || n > 65535) {
        ptx_bug(f, "register array %s[%d]: too many arrays or a bad size", name, n);
        return (ptx_r){.cls = (unsigned char)cls};
    }
    for (int i = 0; i < f->narr; i++)
        if (!strcmp(f->arr[i].name, name))
            ptx_bug(f, "register array %s declared twice", name);
    for (int c = PTX_PRED; c <= PTX_B16; c++) /* the scalars' compact names: %p, %r, %rd, %f, %h */
        if (!strcmp(cls_short[c], name))
            ptx_bug(f, "register array %s would collide with the scalar registers", name);
    f->arr[f->narr].name = name;
    f->arr[f->narr].cls = cls;
    f->arr[f->narr].n = n;
    f->narr++;
    return (ptx_r){.cls = (unsigned char)cls, .arr = (unsigned char)f->narr, .idx = 0, .id = 0};
}

ptx_r ptx_at(ptx_r first, int i)
{
    first.idx = (unsigned short)(first.idx + i);
    return first;
}

const char *ptx_name(const ptx_fn *f, ptx_r r, char *buf, size_t size)
{
    if (r.arr)
        snprintf(buf, size, "%%%s%d", f->arr[r.arr - 1].name, r.idx);
    else if (f->named)
        snprintf(buf, size, "%%%s_%d", f->scalar_name[r.id], r.id);
    else
        snprintf(buf, size, "%%%s%d", cls_short[r.cls], f->scalar_num[r.id]);
    return buf;
}

/* Appends the register's name (without a check: callers validated it). */
static void put_reg(ptx_fn *f, ptx_r r)
{
    if (r.arr && r.idx >= f->arr[r.arr - 1].n)
        ptx_bug(f, "%%%s%d: past the array's %d registers", f->arr[r.arr - 1].name, r.idx,
                f->arr[r.arr - 1].n);
    char name[48];
    ptx_name(f, r, name, sizeof name);
    fa3_emitn(&f->body, name, strlen(name));
}

/* ------------------------------------------------------------------ the op table */

/* Per base opcode, the class rule of each operand position (the last letter repeats):
     T  the class of the instruction's type (its last type suffix; cvt: see D/S)
     D  cvt's destination type, S  cvt's source type
     P  a predicate, B  a .b32 register (shift amounts, barrier ids, counts, lanes)
     X  not checked here (wgmma, bulk copies: their helpers build the operands)
   A register inside [...] is an address: .b32 in shared memory, .b64 in global memory. */
static const struct op_rule {
    const char *base;
    const char *rule;
} op_rules[] = {
    {"add", "T"},   {"sub", "T"},    {"mul", "T"},      {"mad", "T"},     {"min", "T"},
    {"max", "T"},   {"and", "T"},    {"or", "T"},       {"xor", "T"},     {"not", "T"},
    {"neg", "T"},   {"abs", "T"},    {"rem", "T"},      {"div", "T"},     {"mov", "T"},
    {"shl", "TTB"}, {"shr", "TTB"},  {"setp", "PTTP"},  {"selp", "TTTP"}, {"cvt", "DS"},
    {"cvta", "T"},  {"ld", "TA"},    {"st", "AT"},      {"ex2", "T"},     {"lg2", "T"},
    {"tanh", "T"},  {"rcp", "T"},    {"fma", "T"},      {"shfl", "TTB"},  {"bar", "B"},
    {"mbarrier", "X"}, {"bra", "X"}, {"ret", "X"},      {"fence", "X"},   {"setmaxnreg", "X"},
    {"wgmma", "X"}, {"cp", "X"},     {"prefetch", "X"}, {"prmt", "T"},   {"vote", "P"},
    {"atom", "TAT"},
};

/* Class of a PTX type name, 0 if it is not one. */
static int type_cls(const char *t, size_t n)
{
    static const struct {
        const char *t;
        int cls;
    } types[] = {{"pred", PTX_PRED}, {"b32", PTX_B32},   {"u32", PTX_B32},    {"s32", PTX_B32},
                 {"b64", PTX_B64},   {"u64", PTX_B64},   {"s64", PTX_B64},    {"f32", PTX_F32},
                 {"bf16x2", PTX_B32}, {"f16x2", PTX_B32}, {"b16", PTX_B16},
                 {"e4m3x2", PTX_B16}, {"bf16", PTX_B16},  {"f16", PTX_B16}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].t) == n && !memcmp(types[i].t, t, n))
            return types[i].cls;
    return 0;
}

/* A register operand the formatter wrote: its position (-1 = the guard), class, whether it was
   inside brackets or braces. */
typedef struct seen {
    int pos, cls, bracket, brace;
} seen;

static int cls_ok(int want, int got, int bits_type)
{
    if (want == got)
        return 1;
    /* a .b32 (bit-size) type also takes .f32 registers of the same size */
    return bits_type && want == PTX_B32 && got == PTX_F32;
}

static void check_operands(ptx_fn *f, const char *ins, const seen *s, int ns)
{
    const char *op = ins;
    if (*op == '@') { /* skip the guard */
        while (*op && *op != ' ')
            op++;
        while (*op == ' ')
            op++;
    }
    size_t oplen = strcspn(op, " ;");
    const struct op_rule *rule = NULL;
    for (size_t i = 0; i < sizeof op_rules / sizeof op_rules[0] && !rule; i++) {
        size_t bl = strlen(op_rules[i].base);
        if (bl <= oplen && !memcmp(op, op_rules[i].base, bl) && (op[bl] == '.' || bl == oplen))
            rule = &op_rules[i];
    }
    /* or.pred is or with a pred type: the generic rule covers it */
    if (!rule) {
        ptx_bug(f, "opcode not in the op table: %.*s", (int)oplen, op);
        return;
    }
    /* types among the dot-separated parts: the last one is T; cvt: first D, second S */
    int types[4] = {0}, nt = 0, last_bits = 0;
    for (const char *p = op; p < op + oplen;) {
        const char *d = memchr(p, '.', (size_t)(op + oplen - p));
        const char *e = d ? d : op + oplen;
        int c = type_cls(p, (size_t)(e - p));
        if (c && nt < 4) {
            types[nt++] = c;
            last_bits = p[0] == 'b' && p[1] != 'f';
        }
        p = d ? d + 1 : e;
    }
    const int shared = strstr(op, ".shared") && strstr(op, ".shared") < op + oplen;
    const int global = strstr(op, ".global") && strstr(op, ".global") < op + oplen;
    for (int i = 0; i < ns; i++) {
        int want;
        if (s[i].pos < 0) {
            want = PTX_PRED;
        } else if (s[i].bracket && rule->rule[0] != 'X') {
            want = shared ? PTX_B32 : global ? PTX_B64 : 0;
            if (!want) {
                ptx_bug(f, "%s: an address register outside shared or global memory", ins);
                return;
            }
        } else {
            size_t rl = strlen(rule->rule);
            char r = rule->rule[s[i].pos < (int)rl ? s[i].pos : (int)rl - 1];
            if (r == 'X')
                continue;
            if (s[i].brace && !strncmp(op, "mov.b64", 7))
                want = PTX_B32; /* mov.b64 %d, {%lo, %hi} */
            else if (s[i].brace && !strncmp(op, "mov.b32", 7))
                want = PTX_B16; /* mov.b32 %r, {%lo, %hi} */
            else if (r == 'T')
                want = nt ? types[nt - 1] : 0;
            else if (r == 'D')
                want = nt ? types[0] : 0;
            else if (r == 'S')
                want = nt > 1 ? types[1] : 0;
            else if (r == 'P')
                want = PTX_PRED;
            else
                want = PTX_B32;
            if (!want) {
                ptx_bug(f, "%s: no type suffix to check operand %d against", ins, s[i].pos);
                return;
            }
            if (!cls_ok(want, s[i].cls, r == 'T' && last_bits)) {
                ptx_bug(f, "%s: operand %d is a %s register, the instruction takes %s", ins,
                        s[i].pos, cls_name[s[i].cls], cls_name[want]);
                return;
            }
            continue;
        }
        if (!cls_ok(want, s[i].cls, 0)) {
            ptx_bug(f, "%s: operand %d is a %s register, the instruction takes %s", ins,
                    s[i].pos, cls_name[s[i].cls], cls_name[want]);
            return;
        }
    }
}

/* ------------------------------------------------------------------ the formatter */

#define MAX_SEEN 512

void ptx_ins(ptx_fn *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const size_t start = f->body.len;
    fa3_emitf(&f->body, "\t");
    seen s[MAX_SEEN];
    int ns = 0, pos = -1, bracket = 0, brace = 0, opcode_seen = 0;
    /* the opcode ends at the first space, or at the second after a guard (@$ or @!$) */
    const char *op_end = strchr(fmt, ' ');
    if (fmt[0] == '@' && op_end)
        op_end = strchr(op_end + 1, ' ');
    for (const char *p = fmt; *p; p++) {
        if (*p == '$') {
            if (p[1] == '{') { /* a slice of a register array: ptx_r, int count */
                p++;
                ptx_r r = va_arg(ap, ptx_r);
                int n = va_arg(ap, int);
                if (!r.arr || n < 1)
                    ptx_bug(f, "%s: ${ takes an array register and a count", fmt);
                fa3_emitf(&f->body, "{");
                for (int i = 0; i < n; i++) {
                    if (i)
                        fa3_emitf(&f->body, ", ");
                    put_reg(f, ptx_at(r, i));
                }
                fa3_emitf(&f->body, "}");
                if (ns < MAX_SEEN)
                    s[ns++] = (seen){pos, r.cls, bracket, 1};
                continue;
            }
            ptx_r r = va_arg(ap, ptx_r);
            if (!r.cls) {
                ptx_bug(f, "%s: an unset register", fmt);
                continue;
            }
            put_reg(f, r);
            if (ns < MAX_SEEN)
                s[ns++] = (seen){opcode_seen ? pos : -1, r.cls, bracket, brace};
            continue;
        }
        if (*p == '%') {
            p++;
            switch (*p) {
            case 'd': {
                char num[16];
                int k = snprintf(num, sizeof num, "%d", va_arg(ap, int));
                fa3_emitn(&f->body, num, (size_t)k);
                break;
            }
            case 'u': fa3_emitf(&f->body, "%u", va_arg(ap, unsigned)); break;
            case 'x': fa3_emitf(&f->body, "%x", va_arg(ap, unsigned)); break;
            case 's': fa3_emitf(&f->body, "%s", va_arg(ap, const char *)); break;
            case '%': fa3_emitf(&f->body, "%%"); break;
            default: ptx_bug(f, "%s: unknown conversion %%%c", fmt, *p ? *p : '0');
                if (!*p)
                    p--;
            }
            continue;
        }
        /* operand positions: commas outside brackets and braces, after the opcode */
        if (p == op_end) {
            opcode_seen = 1;
            pos = 0;
        } else if (*p == '[') {
            bracket++;
        } else if (*p == ']') {
            bracket--;
        } else if (*p == '{') {
            brace++;
        } else if (*p == '}') {
            brace--;
        } else if (*p == ',' && !bracket && !brace && opcode_seen) {
            pos++;
        }
        fa3_emitn(&f->body, p, 1);
    }
    va_end(ap);
    fa3_emitf(&f->body, "\n");
    if (bracket || brace)
        ptx_bug(f, "%s: unbalanced brackets", fmt);
    if (!f->body.oom)
        check_operands(f, f->body.data + start + 1, s, ns);
}

void ptx_comment(ptx_fn *f, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fa3_emitf(&f->body, "\t// %s\n", text);
}

/* ------------------------------------------------------------------ labels */

int ptx_label(ptx_fn *f, const char *name)
{
    if (f->nlabels >= PTX_MAX_LABELS) {
        ptx_bug(f, "more than %d labels", PTX_MAX_LABELS);
        return 0;
    }
    f->label_name[f->nlabels] = name;
    return f->nlabels++;
}

void ptx_place(ptx_fn *f, int label)
{
    if (label < 0 || label >= f->nlabels)
        return ptx_bug(f, "label %d was never made", label);
    if (f->label_defined[label]++)
        ptx_bug(f, "label $L%s_%d placed twice", f->label_name[label], label);
    fa3_emitf(&f->body, "$L%s_%d:\n", f->label_name[label], label);
}

const char *ptx_lab(ptx_fn *f, int label)
{
    static _Thread_local char buf[4][64];
    static _Thread_local int next;
    if (label < 0 || label >= f->nlabels) {
        ptx_bug(f, "label %d was never made", label);
        return "$Lbad";
    }
    f->label_used[label] = 1;
    char *b = buf[next++ & 3];
    snprintf(b, 64, "$L%s_%d", f->label_name[label], label);
    return b;
}

/* ------------------------------------------------------------------ invariants */

void ptx_named_bar(ptx_fn *f, int id, int threads)
{
    if (id < 1 || id > 15)
        return ptx_bug(f, "named barrier id %d outside 1..15", id);
    if (threads <= 0 || threads % 32)
        return ptx_bug(f, "named barrier %d: %d threads is not a multiple of 32", id, threads);
    if (f->named_bar_count[id] && f->named_bar_count[id] != threads)
        return ptx_bug(f, "named barrier %d used with %d and %d threads", id,
                       f->named_bar_count[id], threads);
    f->named_bar_count[id] = threads;
}

int ptx_mbar_add(ptx_fn *f, const char *name, int offset, int count)
{
    if (f->nmbar >= PTX_MAX_MBARS) {
        ptx_bug(f, "more than %d mbarriers", PTX_MAX_MBARS);
        return 0;
    }
    if (offset % 8 || count < 1)
        ptx_bug(f, "mbarrier %s: offset %d not 8-aligned or count %d", name, offset, count);
    for (int i = 0; i < f->nmbar; i++)
        if (f->mbar[i].offset == offset)
            ptx_bug(f, "mbarriers %s and %s share offset %d", f->mbar[i].name, name, offset);
    f->mbar[f->nmbar] = (ptx_mbar){name, offset, count};
    return f->nmbar++;
}

static int mbar_ok(ptx_fn *f, int m)
{
    if (m >= 0 && m < f->nmbar)
        return 1;
    ptx_bug(f, "mbarrier %d is not in the table", m);
    return 0;
}

void ptx_mbar_inited(ptx_fn *f, int m)
{
    if (mbar_ok(f, m))
        f->mbar_inited[m] = 1;
}

void ptx_mbar_waited(ptx_fn *f, int m)
{
    if (mbar_ok(f, m))
        f->mbar_waited[m] = 1;
}

void ptx_mbar_release(ptx_fn *f, int m, int arrivals, const char *site)
{
    if (!mbar_ok(f, m))
        return;
    if (f->nrelease >= PTX_MAX_SITES)
        return ptx_bug(f, "more than %d arrive sites", PTX_MAX_SITES);
    f->release[f->nrelease].mbar = m;
    f->release[f->nrelease].arrivals = arrivals;
    f->release[f->nrelease].site = site;
    f->nrelease++;
}

void ptx_smem_use(ptx_fn *f, int offset, int bytes)
{
    if (offset < 0 || bytes < 0)
        return ptx_bug(f, "shared memory use at %d (%d bytes)", offset, bytes);
    if (offset + bytes > f->smem_max_used)
        f->smem_max_used = offset + bytes;
}

void ptx_regs_split(ptx_fn *f, int entry_regs, int threads, int producer_regs, int producer_threads,
                    int consumer_regs, int consumer_threads)
{
    const int regs[2] = {producer_regs, consumer_regs};
    for (int i = 0; i < 2; i++)
        if (regs[i] < 24 || regs[i] > 256 || regs[i] % 8)
            ptx_bug(f, "setmaxnreg %d: not in 24..256 or not a multiple of 8", regs[i]);
    if ((long)entry_regs * threads > 65536)
        ptx_bug(f, "%d registers at entry x %d threads exceed the register file", entry_regs,
                threads);
    /* setmaxnreg moves registers within the CTA's pool, which is what the launch allocated
       (entry_regs per thread), not the whole register file: asking beyond it waits forever (an
       e4m3 split of 48 x 128 + 232 x 256 = 65536 > 168 x 384 hung on the H200, 2026-12-01) */
    if ((long)producer_regs * producer_threads + (long)consumer_regs * consumer_threads >
        (long)entry_regs * threads)
        ptx_bug(f, "setmaxnreg split %d x %d + %d x %d exceeds the CTA's %d x %d registers",
                producer_regs, producer_threads, consumer_regs, consumer_threads, entry_regs,
                threads);
}

static void check_invariants(ptx_fn *f)
{
    for (int l = 0; l < f->nlabels; l++) {
        if (f->label_used[l] && !f->label_defined[l])
            ptx_bug(f, "label $L%s_%d used but never placed", f->label_name[l], l);
    }
    for (int m = 0; m < f->nmbar; m++) {
        if (f->mbar_waited[m] && !f->mbar_inited[m])
            ptx_bug(f, "mbarrier %s waited on but never initialized", f->mbar[m].name);
    }
    for (int i = 0; i < f->nrelease; i++) {
        const int m = f->release[i].mbar;
        if (f->release[i].arrivals != f->mbar[m].count)
            ptx_bug(f, "mbarrier %s expects %d arrivals per phase; the release at %s gives %d",
                    f->mbar[m].name, f->mbar[m].count, f->release[i].site,
                    f->release[i].arrivals);
    }
    if (f->smem_max_used > f->smem_bytes)
        ptx_bug(f, "shared memory used up to byte %d of the %d requested", f->smem_max_used,
                f->smem_bytes);
}

/* ------------------------------------------------------------------ finishing */

void ptx_discard(ptx_fn *f)
{
    free(f->body.data);
    f->body = (fa3_buf){0};
}

fa3_status ptx_finish(ptx_fn *f, fa3_buf *out)
{
    check_invariants(f);
    if (f->error[0]) {
        ptx_discard(f);
        return fa3_seterr(FA3_ERR_INTERNAL, "generator bug: %s", f->error);
    }
    /* declarations: the arrays, then the scalars of each class, 8 to a line */
    for (int a = 0; a < f->narr; a++)
        fa3_emitf(out, "\t.reg %s %%%s<%d>;\n", cls_decl[f->arr[a].cls], f->arr[a].name,
                  f->arr[a].n);
    for (int c = PTX_PRED; c <= PTX_B16; c++) {
        if (!f->named) {
            if (f->nscalar[c])
                fa3_emitf(out, "\t.reg %s %%%s<%d>;\n", cls_decl[c], cls_short[c], f->nscalar[c]);
            continue;
        }
        int k = 0;
        for (int id = 0; id < f->nscalars; id++) {
            if (f->scalar_cls[id] != c)
                continue;
            if (k % 8 == 0)
                fa3_emitf(out, "%s\t.reg %s ", k ? ";\n" : "", cls_decl[c]);
            else
                fa3_emitf(out, ", ");
            fa3_emitf(out, "%%%s_%d", f->scalar_name[id], id);
            k++;
        }
        if (k)
            fa3_emitf(out, ";\n");
    }
    if (f->body.oom)
        out->oom = 1;
    else if (f->body.len)
        fa3_emitf(out, "%s", f->body.data);
    ptx_discard(f);
    return out->oom ? fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory while generating PTX")
                    : FA3_OK;
}
