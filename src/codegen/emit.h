/* One output path for generated text (chibicc's emit): a growable buffer and printf into it. */
#ifndef FA3JIT_EMIT_H
#define FA3JIT_EMIT_H

#include <stddef.h>
#include "common.h"

typedef struct fa3_buf {
    char *data;
    size_t len, cap;
    int oom; /* set once an allocation failed; later writes are dropped */
} fa3_buf;

/* Appends formatted text (no newline added). */
FA3_INTERNAL void fa3_emitf(fa3_buf *b, const char *fmt, ...) FA3_PRINTF(2, 3);
/* Appends n bytes of text as they are. */
FA3_INTERNAL void fa3_emitn(fa3_buf *b, const char *text, size_t n);
/* Appends one line: a tab, the formatted text, ";\n" is NOT added; "\n" is. */
FA3_INTERNAL void fa3_emitl(fa3_buf *b, const char *fmt, ...) FA3_PRINTF(2, 3);
/* Takes the buffer's string (NUL-terminated); FA3_ERR_OUT_OF_MEMORY if any write failed. */
FA3_INTERNAL fa3_status fa3_buf_finish(fa3_buf *b, char **out, size_t *len);

#endif
