/*
 * On-disk kernel cache: one file <dir>/<key>.fa3k per compiled kernel, where key is the XXH3-128
 * of everything that determines the binary (fa3_cache_key_for, declared in runtime.h). Files are
 * written to a temporary name in the same directory, fsync'd and renamed into place, so readers
 * only ever see complete entries; a file that fails any check (magic, version, key, sizes,
 * checksums) is treated as a miss and replaced on the next store.
 *
 * File layout (all integers little-endian), FA3_CACHE_FORMAT 1:
 *     0  magic "FA3JITK\0"          8 bytes
 *     8  u32 format version          (FA3_CACHE_FORMAT)
 *    12  u32 header size             (FA3_CACHE_HEADER_SIZE)
 *    16  key, 32 lowercase hex digits (no NUL)
 *    48  u64 cubin size              (> 0)
 *    56  u64 log size                (compiler log, no NUL)
 *    64  u64 payload size            (= cubin size + log size)
 *    72  u64 XXH3-64 of the payload
 *    80  i32 num_regs, spill_store_bytes, spill_load_bytes, stack_bytes (-1 = unknown)
 *    96  u32 flags                   (bit 0: the compiler log has a warning)
 *   100  u32 reserved (0)
 *   104  u64 XXH3-64 of header bytes [0, 104)
 *   112  payload: the cubin, then the compiler log
 */
#ifndef FA3JIT_CACHE_H
#define FA3JIT_CACHE_H

#include <stddef.h>
#include "common.h"

#define FA3_CACHE_FORMAT 1u
#define FA3_CACHE_HEADER_SIZE 112u
#define FA3_CACHE_SUFFIX ".fa3k"

/* What a cache entry records besides the cubin. */
typedef struct fa3_cache_meta {
    int num_regs, spill_store_bytes, spill_load_bytes, stack_bytes; /* -1 = unknown */
    int has_warning;
} fa3_cache_meta;

/*
 * Decides the cache directory: opt_dir if non-empty, else $FA3JIT_CACHE_DIR, else
 * $XDG_CACHE_HOME/fa3jit (absolute XDG_CACHE_HOME only), else $HOME/.cache/fa3jit.
 * *dir receives a malloc'd path, or NULL when the disk cache is off: disable != 0,
 * $FA3JIT_CACHE_DISABLE set to anything but "" or "0", or no directory could be named (then warn
 * receives why; warn may be NULL). Nothing is created here. Errors: FA3_ERR_OUT_OF_MEMORY.
 */
FA3_INTERNAL fa3_status fa3_cache_dir_resolve(const char *opt_dir, int disable, char **dir,
                                              char *warn, size_t warn_size);

/*
 * Looks key up in dir. Returns 1 on a valid hit: *cubin (malloc'd, *cubin_size bytes), *log
 * (malloc'd, NUL-terminated) and *meta are filled. Returns 0 on a miss, including any missing,
 * unreadable, truncated, corrupted or foreign file (never loaded) and a failed allocation.
 * Never sets the thread's error message.
 */
FA3_INTERNAL int fa3_cache_load(const char *dir, const char *key, void **cubin, size_t *cubin_size,
                                char **log, fa3_cache_meta *meta);

/*
 * Writes an entry for key (creating dir and its parents, mode 0700, if missing): temporary file in
 * dir, fsync, rename over <dir>/<key>.fa3k. log may be NULL. Errors: FA3_ERR_CACHE_IO with the
 * failing path and reason in the message (callers keep it as a warning and carry on from memory).
 */
FA3_INTERNAL fa3_status fa3_cache_store(const char *dir, const char *key, const void *cubin,
                                        size_t cubin_size, const char *log,
                                        const fa3_cache_meta *meta);

/* Writes the entry path of key in dir into buf; FA3_ERR_CACHE_IO if it does not fit. */
FA3_INTERNAL fa3_status fa3_cache_entry_path(const char *dir, const char *key, char *buf,
                                             size_t size);

#endif
