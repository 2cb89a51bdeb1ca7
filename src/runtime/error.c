/*
 * Error reporting: the calling thread's last-error message (a heap buffer that grows to hold whole
 * compiler logs, freed at thread exit), the pinned names of the status codes, and the library's
 * run-time version.
 *
 * Messages are formatted into a fresh buffer before they replace or extend the current one, so a
 * caller may pass fa3_last_error_message() itself as an argument (e.g. to prefix context).
 */
#include <time.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* A message never grows beyond this (a runaway log is cut, with a note, rather than eating memory). */
#define MSG_MAX ((size_t)16 << 20)
#define TRUNC_NOTE "\n[... message truncated]"

typedef struct err_state {
    char *msg;  /* NUL-terminated, or NULL = "" */
    size_t len; /* strlen(msg) */
    size_t cap; /* bytes allocated */
} err_state;

static _Thread_local err_state *tls_err;
/* Used when the heap is exhausted: the message is cut to fit, never lost entirely. */
static _Thread_local char tls_fallback[512];
static _Thread_local int tls_use_fallback;

static pthread_key_t err_key;
static pthread_once_t err_key_once = PTHREAD_ONCE_INIT;
static int err_key_ok;

static void err_state_destroy(void *p)
{
    err_state *s = p;
    tls_err = NULL; /* runs in the exiting thread: a later destructor's fa3 call starts afresh */
    if (s) {
        free(s->msg);
        free(s);
    }
}

static void err_key_init(void)
{
    err_key_ok = pthread_key_create(&err_key, err_state_destroy) == 0;
}

/* The thread's state, created on first use (NULL if the heap is exhausted). */
static err_state *err_get(void)
{
    if (tls_err)
        return tls_err;
    pthread_once(&err_key_once, err_key_init);
    err_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    /* Registering the destructor frees the buffer when the thread exits. Without a key (only if
       pthread_key_create failed) the state lives until process exit. */
    if (err_key_ok)
        pthread_setspecific(err_key, s);
    tls_err = s;
    return s;
}

/* Formats into a new malloc'd string; NULL on allocation or format failure. */
static char *vformat(const char *fmt, va_list ap, size_t *out_len)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        return NULL;
    size_t len = (size_t)n;
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    vsnprintf(s, len + 1, fmt, ap);
    *out_len = len;
    return s;
}

/* Writes text into the fallback buffer (replace or append), cutting it to fit. */
static void fallback_put(const char *text, int append)
{
    size_t used = append && tls_use_fallback ? strlen(tls_fallback) : 0;
    size_t room = sizeof tls_fallback - used;
    if (room > 1)
        snprintf(tls_fallback + used, room, "%s", text ? text : "(out of memory)");
    tls_use_fallback = 1;
}

/* Replaces (append = 0) or extends (append = 1) the thread's message with text[0..len). Takes
   ownership of text. */
static void put_message(char *text, size_t len, int append)
{
    err_state *s = err_get();
    if (!s) {
        fallback_put(text, append);
        free(text);
        return;
    }
    if (append && tls_use_fallback) { /* the message lives in the fallback buffer: extend it */
        fallback_put(text, 1);
        free(text);
        return;
    }
    if (!append) {
        free(s->msg);
        s->msg = text;
        s->len = len;
        s->cap = len + 1;
        tls_use_fallback = 0;
        if (s->len > MSG_MAX) {
            s->msg[MSG_MAX - sizeof TRUNC_NOTE] = '\0';
            strcat(s->msg, TRUNC_NOTE);
            s->len = strlen(s->msg);
        }
        return;
    }
    size_t want = s->len + len;
    int cut = 0;
    if (want > MSG_MAX) {
        if (s->len + sizeof TRUNC_NOTE >= MSG_MAX) { /* already full: drop */
            free(text);
            return;
        }
        len = MSG_MAX - sizeof TRUNC_NOTE - s->len;
        want = s->len + len;
        cut = 1;
    }
    size_t need = want + (cut ? sizeof TRUNC_NOTE : 0) + 1;
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < need)
            cap *= 2;
        char *m = realloc(s->msg, cap);
        if (!m) {
            /* Keep what we have; the appended text is lost. */
            free(text);
            return;
        }
        s->msg = m;
        s->cap = cap;
    }
    memcpy(s->msg + s->len, text, len);
    s->len = want;
    s->msg[s->len] = '\0';
    if (cut) {
        memcpy(s->msg + s->len, TRUNC_NOTE, sizeof TRUNC_NOTE);
        s->len += sizeof TRUNC_NOTE - 1;
    }
    free(text);
}

fa3_status fa3_seterr(fa3_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t len = 0;
    char *text = vformat(fmt, ap, &len);
    va_end(ap);
    if (!text) {
        fallback_put(fmt, 0); /* at least the unformatted text */
        return st;
    }
    put_message(text, len, 0);
    return st;
}

void fa3_appenderr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t len = 0;
    char *text = vformat(fmt, ap, &len);
    va_end(ap);
    if (!text)
        return;
    put_message(text, len, 1);
}

void fa3_clearerr(void)
{
    tls_use_fallback = 0;
    tls_fallback[0] = '\0';
    err_state *s = tls_err;
    if (s && s->msg) {
        s->msg[0] = '\0';
        s->len = 0;
    }
}

char *fa3_takeerr(void)
{
    err_state *s = tls_err;
    char *m;
    if (!tls_use_fallback && s && s->msg) { /* hand the buffer over: no copy of a long log */
        m = s->msg;
        s->msg = NULL;
        s->len = s->cap = 0;
    } else {
        m = strdup(tls_use_fallback ? tls_fallback : "");
    }
    fa3_clearerr();
    return m;
}

fa3_status fa3_puterr(fa3_status st, char *msg)
{
    if (!msg)
        fallback_put("out of memory for an error message from another thread", 0);
    else
        put_message(msg, strlen(msg), 0);
    return st;
}

const char *fa3_last_error_message(void)
{
    if (tls_use_fallback)
        return tls_fallback;
    err_state *s = tls_err;
    return s && s->msg ? s->msg : "";
}

const char *fa3_strerror(fa3_status status)
{
    switch (status) {
    case FA3_OK: return "success";
    case FA3_ERR_INVALID_ARGUMENT: return "invalid argument";
    case FA3_ERR_BAD_HEAD_DIM: return "unsupported head_dim";
    case FA3_ERR_BAD_HEAD_DIM_V: return "unsupported head_dim_v";
    case FA3_ERR_BAD_DTYPE: return "unsupported dtype";
    case FA3_ERR_BAD_MASK: return "unsupported mask";
    case FA3_ERR_BAD_ARCH: return "unsupported target architecture";
    case FA3_ERR_BAD_SHAPE: return "invalid shape";
    case FA3_ERR_BAD_STRIDE: return "invalid stride";
    case FA3_ERR_BAD_ALIGNMENT: return "misaligned pointer";
    case FA3_ERR_BAD_SCALE: return "invalid softmax scale";
    case FA3_ERR_BAD_SOFTCAP: return "invalid softcap";
    case FA3_ERR_BAD_WINDOW: return "invalid window size";
    case FA3_ERR_OUT_OF_MEMORY: return "out of host memory";
    case FA3_ERR_COMPILE: return "PTX compilation failed";
    case FA3_ERR_LINK: return "nvJitLink failed";
    case FA3_ERR_NO_DRIVER: return "CUDA driver or device not available";
    case FA3_ERR_CUDA: return "CUDA driver call failed";
    case FA3_ERR_CACHE_IO: return "disk cache I/O error";
    case FA3_ERR_UNSUPPORTED: return "unsupported on this build or device";
    case FA3_ERR_BAD_BACKEND: return "compile backend not available";
    case FA3_ERR_INTERNAL: return "internal error";
    case FA3_ERR_BAD_BLOCK: return "invalid block_m, block_n or stages";
    case FA3_ERR_NO_NVRTC: return "NVRTC not available";
    }
    return "unknown status";
}

int fa3_test_fail(const char *site)
{
    const char *v = getenv("FA3JIT_TEST_FAIL");
    if (!v || !v[0] || !site)
        return 0;
    size_t n = strlen(site);
    for (const char *p = v; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && memcmp(p, site, n) == 0)
            return 1;
        p += m;
        if (*p == ',')
            p++;
    }
    return 0;
}

unsigned fa3_version_number(void)
{
    return FA3JIT_VERSION_NUMBER;
}

const char *fa3_version_string(void)
{
    return FA3JIT_VERSION_STRING;
}

double fa3_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
