/* Small helpers shared by the generator and the runtime (declared in common.h): text, the public
   structs' sizes, and fa3_free for what the library's functions return. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

uint32_t fa3_gcd(uint32_t a, uint32_t b)
{
    while (b) {
        const uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
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

fa3_status fa3_struct_check(const fa3_struct_kind *k, size_t size)
{
    if (size == k->own)
        return FA3_OK;
    for (int i = 0; i < k->num_older; i++)
        if (size == k->older[i])
            return FA3_OK;
    if (size == 0)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "%s.struct_size is 0: the struct was not initialised (use %s)", k->name,
                          k->fix);
    if (size > k->own)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                          "%s.struct_size %zu is larger than this library's %zu: the program was "
                          "built against a newer fa3jit.h than the library it runs with",
                          k->name, size, k->own);
    return fa3_seterr(FA3_ERR_INVALID_ARGUMENT,
                      "%s.struct_size %zu is not a size of %s this library knows (%zu; use %s)",
                      k->name, size, k->name, k->own, k->fix);
}

static void set_size(void *p, size_t size)
{
    uint32_t v = (uint32_t)size;
    memcpy(p, &v, sizeof v);
}

void fa3_struct_init(const fa3_struct_kind *k, void *dst, size_t size, const void *defaults)
{
    memset(dst, 0, size);
    if (size < sizeof(uint32_t))
        return;
    memcpy(dst, defaults, size < k->own ? size : k->own);
    set_size(dst, size);
}

fa3_status fa3_struct_in(const fa3_struct_kind *k, const void *src, void *dst, const void *defaults)
{
    uint32_t size;
    memcpy(&size, src, sizeof size);
    FA3_TRY(fa3_struct_check(k, size));
    if (dst != defaults)
        memcpy(dst, defaults, k->own);
    memmove(dst, src, size);
    set_size(dst, k->own);
    return FA3_OK;
}

fa3_status fa3_struct_out(const fa3_struct_kind *k, void *dst, size_t size, const void *src)
{
    FA3_TRY(fa3_struct_check(k, size));
    memmove(dst, src, size);
    set_size(dst, size);
    return FA3_OK;
}

const char *fa3_printable(const char *s, long len, char *out, size_t size)
{
    size_t i = 0;
    if (!size)
        return out;
    for (; s && s[i] && (len < 0 || (long)i < len) && i + 1 < size; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
    return out;
}
