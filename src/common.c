/* Small helpers shared by the generator and the runtime (declared in common.h): text, and
   fa3_free for what the library's functions return. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

void fa3_append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    if (!buf || *len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (r > 0)
        *len = *len + (size_t)r < size ? *len + (size_t)r : size - 1;
}

int fa3_parse_whole(const char *s, size_t len, long max, long *out)
{
    long x = 0;
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (s[i] - '0');
        if (x > max)
            return 0;
    }
    *out = x;
    return 1;
}

void fa3_free(void *p)
{
    free(p);
}
