/* Growable text buffer behind every line of generated PTX. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/emit.h"

/* Room for n more bytes and a NUL; 0 (and b->oom set) when memory ran out. */
static int reserve(fa3_buf *b, size_t n)
{
    if (b->data && b->cap - b->len > n)
        return 1;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap - b->len <= n)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->oom = 1;
        return 0;
    }
    b->data = d;
    b->cap = cap;
    return 1;
}

static void vappend(fa3_buf *b, const char *fmt, va_list ap)
{
    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list cp;
        va_copy(cp, ap);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? room : 0, fmt, cp);
        va_end(cp);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->data && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        if (!reserve(b, (size_t)n))
            return;
    }
}

void fa3_emitn(fa3_buf *b, const char *text, size_t n)
{
    if (b->oom || !reserve(b, n))
        return;
    memcpy(b->data + b->len, text, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void fa3_emitf(fa3_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vappend(b, fmt, ap);
    va_end(ap);
}

void fa3_emitl(fa3_buf *b, const char *fmt, ...)
{
    va_list ap;
    fa3_emitf(b, "\t");
    va_start(ap, fmt);
    vappend(b, fmt, ap);
    va_end(ap);
    fa3_emitf(b, "\n");
}

fa3_status fa3_buf_finish(fa3_buf *b, char **out, size_t *len)
{
    if (b->oom || !b->data) {
        free(b->data);
        *b = (fa3_buf){0};
        return fa3_seterr(FA3_ERR_OUT_OF_MEMORY, "out of memory while generating PTX");
    }
    *out = b->data;
    if (len)
        *len = b->len;
    *b = (fa3_buf){0};
    return FA3_OK;
}
