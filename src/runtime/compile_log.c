/*
 * What the compilers' logs say: the two logs joined into the kernel's one log, and ptxas's
 * verbose output parsed for the entry function's registers, spills and stack frame and for any
 * diagnostic line (a warning or a "(Cnnnn)" advisory) that CI treats as a failure.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_abi.h"
#include "runtime/compile.h"

char *fa3_compile_join_logs(const char *info, const char *error)
{
    size_t ni = info ? strlen(info) : 0, ne = error ? strlen(error) : 0;
    char *s = malloc(ni + ne + 2);
    if (!s)
        return NULL;
    size_t n = 0;
    if (ni) {
        memcpy(s, info, ni);
        n = ni;
    }
    if (ne) {
        if (n && s[n - 1] != '\n')
            s[n++] = '\n';
        memcpy(s + n, error, ne);
        n += ne;
    }
    s[n] = '\0';
    return s;
}


/* ------------------------------------------------------------------ ptxas log parsing */

/* Case-insensitive substring search within [s, end). */
static const char *find_ci(const char *s, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = s; p + n <= end; p++) {
        size_t i = 0;
        while (i < n && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return p;
    }
    return NULL;
}

/* Case-sensitive substring search within [s, end). */
static const char *find_cs(const char *s, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = s; p + n <= end; p++)
        if (memcmp(p, needle, n) == 0)
            return p;
    return NULL;
}

/* The decimal integer that ends just before pos (spaces skipped), or -1. */
static int int_before(const char *line, const char *pos)
{
    const char *e = pos;
    while (e > line && e[-1] == ' ')
        e--;
    const char *b = e;
    while (b > line && isdigit((unsigned char)b[-1]))
        b--;
    if (b == e || e - b > 9)
        return -1;
    int v = 0;
    for (const char *p = b; p < e; p++)
        v = v * 10 + (*p - '0');
    return v;
}

/* 1 if [s, end) names exactly our kernel right after prefix (optionally quoted). */
static int names_kernel(const char *s, const char *end, const char *prefix)
{
    const char *p = find_cs(s, end, prefix);
    if (!p)
        return -1; /* the line is not of this kind */
    p += strlen(prefix);
    if (p < end && *p == '\'')
        p++;
    size_t n = strlen(FA3_KERNEL_NAME);
    if ((size_t)(end - p) < n || memcmp(p, FA3_KERNEL_NAME, n) != 0)
        return 0;
    p += n;
    return p == end || *p == '\'' || isspace((unsigned char)*p) ? 1 : 0;
}

/* 1 if [s, end) holds a ptxas message code "(Cnnnn)": ptxas prints performance diagnostics such
   as C7504/C7508 (setmaxnreg ignored) and C7509-C7515 (wgmma serialized) as "info" lines. */
static int has_diag_code(const char *s, const char *end)
{
    for (const char *p = s; p + 7 <= end; p++)
        if (p[0] == '(' && p[1] == 'C' && isdigit((unsigned char)p[2]) &&
            isdigit((unsigned char)p[3]) && isdigit((unsigned char)p[4]) &&
            isdigit((unsigned char)p[5]) && p[6] == ')')
            return 1;
    return 0;
}

int fa3_log_line_is_diagnostic(const char *p, size_t n)
{
    const char *end = p + n;
    return find_ci(p, end, "warning") || find_cs(p, end, "Performance Loss") ||
           has_diag_code(p, end);
}

void fa3_parse_ptxas_log(const char *log, fa3_compile_result *r)
{
    if (!log || !r)
        return;
    /* scope: which function the following "Used N registers" / "bytes stack frame" lines are
       about: 1 = ours, 0 = another or unknown. First-seen values are the fallback. */
    int entry_scope = 0, props_scope = 0;
    int regs = -1, st = -1, ss = -1, sl = -1;         /* ours */
    int any_regs = -1, any_st = -1, any_ss = -1, any_sl = -1; /* first seen */
    const char *p = log;
    while (*p) {
        const char *end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p);
        int k;
        if ((k = names_kernel(p, end, "Compiling entry function ")) >= 0)
            entry_scope = k;
        if ((k = names_kernel(p, end, "Function properties for ")) >= 0)
            props_scope = k;
        if (fa3_log_line_is_diagnostic(p, (size_t)(end - p)))
            r->has_warning = 1;
        const char *u = find_cs(p, end, "Used ");
        if (u) {
            char *num_end;
            long v = strtol(u + 5, &num_end, 10);
            if (num_end > u + 5 && num_end < end && strncmp(num_end, " register", 9) == 0 &&
                v >= 0 && v < 100000) {
                if (any_regs < 0)
                    any_regs = (int)v;
                if (entry_scope == 1)
                    regs = (int)v;
            }
        }
        const char *sf = find_cs(p, end, " bytes stack frame");
        if (sf) {
            int a = int_before(p, sf);
            const char *s1 = find_cs(sf, end, " bytes spill stores");
            const char *s2 = find_cs(sf, end, " bytes spill loads");
            int b = s1 ? int_before(p, s1) : -1;
            int c = s2 ? int_before(p, s2) : -1;
            if (any_st < 0 && a >= 0) {
                any_st = a;
                any_ss = b;
                any_sl = c;
            }
            if (props_scope == 1 && a >= 0) {
                st = a;
                ss = b;
                sl = c;
            }
        }
        p = *end ? end + 1 : end;
    }
    if (regs < 0)
        regs = any_regs;
    if (st < 0) {
        st = any_st;
        ss = any_ss;
        sl = any_sl;
    }
    if (regs >= 0)
        r->num_regs = regs;
    if (st >= 0)
        r->stack_bytes = st;
    if (ss >= 0)
        r->spill_store_bytes = ss;
    if (sl >= 0)
        r->spill_load_bytes = sl;
}
