/* Internal helpers shared by codegen and runtime: per-thread error message, status forwarding. */
#ifndef FA3JIT_COMMON_H
#define FA3JIT_COMMON_H

#include "fa3jit.h"

#if defined(__GNUC__)
#define FA3_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FA3_INTERNAL __attribute__((visibility("hidden")))
/* Exported from the shared library for fa3jit's own CLI and tests only (not in fa3jit.h, no
   stability promise): runtime/tools_api.h lists them and why. */
#define FA3_TOOLS_API __attribute__((visibility("default")))
#else
#define FA3_PRINTF(a, b)
#define FA3_INTERNAL
#define FA3_TOOLS_API
#endif

/* Formats the calling thread's last-error message and returns st (so: return fa3_seterr(...)). */
FA3_INTERNAL fa3_status fa3_seterr(fa3_status st, const char *fmt, ...) FA3_PRINTF(2, 3);
/* Appends to the calling thread's message (e.g. a compiler log), keeps it NUL-terminated. */
FA3_INTERNAL void fa3_appenderr(const char *fmt, ...) FA3_PRINTF(1, 2);
/* Clears the calling thread's message. */
FA3_INTERNAL void fa3_clearerr(void);
/* The calling thread's message, detached as a malloc'd string the caller owns ("" when there is
   none; NULL if the heap is exhausted), leaving the thread's message empty: how a message set on
   one thread is carried to another (build.c's helper threads). */
FA3_INTERNAL char *fa3_takeerr(void);
/* Makes msg (from fa3_takeerr, taken over; NULL: an out-of-memory note) the calling thread's
   message and returns st. */
FA3_INTERNAL fa3_status fa3_puterr(fa3_status st, char *msg);

/* Text helpers (common.c). Appends formatted text to buf (size bytes; *len its current length,
   updated): kept NUL-terminated, cut to fit. Does nothing when buf is NULL or full. */
FA3_INTERNAL void fa3_append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    FA3_PRINTF(4, 5);
/* The greatest common divisor of a and b (a when b is 0). */
FA3_INTERNAL uint32_t fa3_gcd(uint32_t a, uint32_t b);
/* s[0..len) as a whole number written in digits only (no sign, space or other base), at most
   max: 1 and *out set if it is one, else 0. */
FA3_INTERNAL int fa3_parse_whole(const char *s, size_t len, long max, long *out);
/* s[0..len) (len < 0: up to its NUL) as printable text for a message: bytes outside 0x20..0x7e
   become '?', cut to fit out (size bytes, NUL-terminated). Returns out. */
FA3_INTERNAL const char *fa3_printable(const char *s, long len, char *out, size_t size);

/*
 * The public structs' sizes ("Growing structs" in fa3jit.h). Each struct starts with uint32_t
 * struct_size; a caller's struct has the size of the release it was built against: this library's
 * own sizeof, or an earlier release's (listed in older). Fields are only ever appended, so a struct
 * of an earlier size is a prefix of this library's.
 */
typedef struct fa3_struct_kind {
    const char *name;    /* "fa3_config" */
    const char *fix;     /* how a caller gets the size right, e.g. "fa3_config_init()" */
    size_t own;          /* this library's sizeof */
    const size_t *older; /* the sizes of earlier releases (none yet) */
    int num_older;
} fa3_struct_kind;

/* FA3_OK if size is one of the struct's sizes, else FA3_ERR_INVALID_ARGUMENT with a message
   naming the struct, the size and the cause (0: not initialised; larger: built against a newer
   fa3jit.h). */
FA3_INTERNAL fa3_status fa3_struct_check(const fa3_struct_kind *k, size_t size);
/* Initialises the caller's struct dst of size bytes: zeroes, the first size bytes of defaults
   (an own-sized struct), struct_size = size (a size this library does not know is kept, so the
   first call using the struct names it). */
FA3_INTERNAL void fa3_struct_init(const fa3_struct_kind *k, void *dst, size_t size,
                                  const void *defaults);
/* Copies the caller's struct src into dst (own-sized): defaults, then the struct_size bytes src
   has; dst's struct_size becomes own. Errors: those of fa3_struct_check (dst untouched). */
FA3_INTERNAL fa3_status fa3_struct_in(const fa3_struct_kind *k, const void *src, void *dst,
                                      const void *defaults);
/* Copies the own-sized src out to the caller's struct dst of size bytes (struct_size = size).
   Errors: those of fa3_struct_check (dst untouched). */
FA3_INTERNAL fa3_status fa3_struct_out(const fa3_struct_kind *k, void *dst, size_t size,
                                       const void *src);

/*
 * Fault injection for the tests, compiled in always and inert unless $FA3JIT_TEST_FAIL is set to a
 * comma-separated list of sites: returns 1 if site is in it (read at each call), else 0. Sites:
 *   mkdir, open, write, fsync, rename, read, lock          disk cache (cache.c)
 *   nvJitLinkCreate, nvPTXCompilerCreate, oom-cubin         compile backends (compile.c)
 *   ptx, oom-context, oom-kernel, oom-log                   fa3_context_create / fa3_jit_get_kernel
 *   ptx-combine                                             ptx for the combine kernel only
 *   pthread_create                                          build.c's helper thread: the parts of
 *                                                           a kernel compile one after the other
 *   oom-cache-load                                          cache loader (a miss)
 *   dlopen                                                  libcuda (driver.c; read once per process)
 *   dlopen-nvJitLink                                        libnvJitLink (compile.c; once per process)
 * Each injected failure takes the same path as the real one (same status, same kind of message).
 */
FA3_INTERNAL int fa3_test_fail(const char *site);

/* CLOCK_MONOTONIC in milliseconds. */
FA3_INTERNAL double fa3_now_ms(void);

#define FA3_TRY(expr)                        \
    do {                                     \
        fa3_status fa3_try_st_ = (expr);     \
        if (fa3_try_st_ != FA3_OK)           \
            return fa3_try_st_;              \
    } while (0)

#endif
