/*
 * On-disk kernel cache: one file <dir>/<key>.fa3k per compiled kernel, where key is the XXH3-128
 * of everything that determines the binary (fa3_cache_key_for), and an index file per kernel
 * naming its entry (below). In four files: cache_format.c (the key, the header's and the index
 * file's bytes, pure), cache.c (the folder, load, store, the lock), cache_index.c (the index key
 * and its files) and cache_list.c (fa3-gen's ls and clear). Files are
 * written to a temporary name in the same directory (.<key>.tmp.XXXXXX) and renamed into place, so
 * readers only ever see complete entries (fsync'd first only with FA3JIT_CACHE_FSYNC=1: cache.c
 * says why); a file that fails any check (magic, version, key, sizes, config, checksums) is treated
 * as a miss, never loaded, and replaced on the next store.
 *
 * Concurrency: compile-and-store of a key runs under an advisory lock, flock(LOCK_EX) on
 * <dir>/<key>.lock (one lock file per key, so different kernels build in parallel; flock rather
 * than fcntl locks because flock locks belong to the open file, so they also exclude threads of one
 * process, and closing another descriptor of the file does not drop them). After taking the lock
 * the caller looks at the disk again, so a waiter loads what the holder wrote instead of compiling.
 * The holder removes the lock file before releasing it; a waiter that then gets the lock on the
 * removed file notices (the path no longer names its file) and starts over. A lock that cannot be
 * taken (read-only folder, NFS without lockd, a holder stuck past the timeout) never fails a call:
 * the caller compiles without it; the atomic rename keeps the entry whole either way. (On NFS,
 * Linux maps flock onto POSIX locks, which belong to the process: there, threads of one process
 * may both compile; processes still exclude each other.)
 *
 * File layout (all integers little-endian), FA3_CACHE_FORMAT 4:
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
 *   100  u32 backend                 (fa3_backend that built the cubin, resolved)
 *   104  i32 canonical config, 32 slots: the values of the field table (config_fields.c) in its
 *        order (head_dim first), then 0 in the slots past the count
 *   232  u32 config field count      (FA3_CONFIG_NUM_FIELDS of the library that wrote it)
 *   236  u32 kernel kind             (fa3_kernel_kind, kernel_abi.h)
 *   240  i64 created                 (seconds since the Unix epoch)
 *   248  u64 reserved (0)
 *   256  plan debug text, 256 bytes: fa3_plan.debug (printable ASCII, then NULs to the end;
 *        all NULs for the default plan), the FA3JIT_PLAN_DEBUG value of a benchmark variant
 *   512  u64 XXH3-64 of header bytes [0, 512)
 *   520  payload: the cubin, then the compiler log
 * A config field added later needs no new format: an entry whose count differs from this
 * library's is refused (it lists as written by another fa3jit version; its key could not match
 * anyway, the count being hashed). Older formats (1: no config,
 * 112-byte header; 2: no plan debug text, 160-byte header; 3: no kernel kind, 8 config fields,
 * 416-byte header) are refused as foreign and rebuilt.
 */
#ifndef FA3JIT_CACHE_H
#define FA3JIT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"
#include "kernel_abi.h"
#include "runtime/env.h"

#define FA3_CACHE_FORMAT 4u
#define FA3_CACHE_HEADER_SIZE 520u
#define FA3_CACHE_SUFFIX ".fa3k"
#define FA3_CACHE_LOCK_SUFFIX ".lock"
#define FA3_CACHE_MAGIC "FA3JITK\0"

/* Header field offsets (layout above). */
#define FA3_CACHE_OFF_VERSION 8
#define FA3_CACHE_OFF_HEADER_SIZE 12
#define FA3_CACHE_OFF_KEY 16
#define FA3_CACHE_OFF_CUBIN_SIZE 48
#define FA3_CACHE_OFF_LOG_SIZE 56
#define FA3_CACHE_OFF_PAYLOAD_SIZE 64
#define FA3_CACHE_OFF_PAYLOAD_SUM 72
#define FA3_CACHE_OFF_RESOURCES 80
#define FA3_CACHE_OFF_FLAGS 96
#define FA3_CACHE_OFF_BACKEND 100
#define FA3_CACHE_OFF_CONFIG 104
#define FA3_CACHE_CONFIG_SLOTS 32
#define FA3_CACHE_OFF_CONFIG_COUNT 232
#define FA3_CACHE_OFF_KIND 236
#define FA3_CACHE_OFF_CREATED 240
#define FA3_CACHE_OFF_PLAN_DEBUG 256
#define FA3_CACHE_PLAN_DEBUG_SIZE 256
#define FA3_CACHE_OFF_HEADER_SUM 512

/* Largest cubin (and largest log) an entry may claim. */
#define FA3_CACHE_MAX_PART ((uint64_t)1 << 30)

/* What a cache entry records besides the cubin. */
typedef struct fa3_cache_meta {
    int num_regs, spill_store_bytes, spill_load_bytes, stack_bytes; /* -1 = unknown */
    int has_warning;
    fa3_backend backend; /* resolved backend that built the cubin */
    fa3_kernel_kind kind; /* which kernel of the config's operation */
    fa3_config config;   /* canonical config */
    int64_t created;     /* Unix seconds when stored (0 = let fa3_cache_store use the clock) */
    char plan_debug[FA3_CACHE_PLAN_DEBUG_SIZE]; /* fa3_plan.debug: "" for the default plan */
} fa3_cache_meta;

/* A parsed entry: points into the bytes given to fa3_cache_parse. */
typedef struct fa3_cache_view {
    char key[33];
    const uint8_t *cubin;
    size_t cubin_size;
    const char *log; /* not NUL-terminated */
    size_t log_size;
    fa3_cache_meta meta;
} fa3_cache_view;

/* What a cache key is the hash of: everything that changes a kernel's binary, nothing that
   changes per call. The caller names each part (the cache calls no other layer). */
typedef struct fa3_cache_key_input {
    fa3_kernel_kind kind;
    const fa3_config *config;    /* canonical */
    const char *ptx;             /* ptx[0..ptx_len) */
    size_t ptx_len;
    const char *generator;       /* FA3_GENERATOR_VERSION */
    const char *backend;         /* fa3_backend_name of the resolved backend */
    const char *backend_version; /* fa3_backend_version's string */
    const char *arch;            /* fa3_arch_name, e.g. "sm_90a" */
} fa3_cache_key_input;

/* Cache key of a kernel: XXH3-128 (32 lowercase hex digits + NUL into out) of in's parts, each
   in a fixed little-endian or length-prefixed form. Pure. Errors: FA3_ERR_INVALID_ARGUMENT (a
   NULL part), FA3_ERR_OUT_OF_MEMORY. */
FA3_INTERNAL fa3_status fa3_cache_key(const fa3_cache_key_input *in, char out[33]);

/*
 * The key of the forward kernel (FA3_KERNEL_FWD) of cfg: fa3_cache_key of the canonical form of
 * cfg (canonicalized again here, so equal kernels share a key), the PTX text ptx[0..len), the
 * generator version FA3_GENERATOR_VERSION, backend's name (AUTO is resolved first) and
 * backend_version (fa3_backend_version's string), and the arch name. Pure.
 * Errors: FA3_ERR_INVALID_ARGUMENT, the config errors, FA3_ERR_OUT_OF_MEMORY.
 */
FA3_INTERNAL fa3_status fa3_cache_key_for(const fa3_config *canonical, const char *ptx, size_t len,
                                          fa3_backend backend, const char *backend_version,
                                          char out[33]);

/*
 * Decides the cache directory: opt_dir if non-empty, else env's FA3JIT_CACHE_DIR, else
 * XDG_CACHE_HOME/fa3jit, else HOME/.cache/fa3jit (env: fa3_env_read, which has already dropped
 * relative paths). *dir receives a malloc'd path, or NULL when the disk cache is off: disable != 0,
 * FA3JIT_CACHE_DISABLE=1, or no directory could be named (then warn receives why; warn may be
 * NULL). Nothing is created here. Errors: FA3_ERR_OUT_OF_MEMORY.
 */
FA3_INTERNAL fa3_status fa3_cache_dir_resolve(const char *opt_dir, int disable, const fa3_env *env,
                                              char **dir, char *warn, size_t warn_size);

/*
 * Checks the header at data[0..size) (size = the whole file's size; only the first
 * FA3_CACHE_HEADER_SIZE bytes are read): magic, version, header size, a well-formed key (equal to
 * key unless key is NULL), header checksum, sizes consistent with size. Fills view's key, sizes
 * and meta (cubin/log pointers stay NULL). Returns 1 if good, else 0 with *why (may be NULL) set
 * to a static reason. Pure: no I/O, no allocation, no error message.
 */
FA3_INTERNAL int fa3_cache_parse_header(const void *data, size_t size, const char *key,
                                        fa3_cache_view *view, const char **why);

/* As fa3_cache_parse_header, and also verifies the payload checksum and points view's cubin and
   log into data. Pure. */
FA3_INTERNAL int fa3_cache_parse(const void *data, size_t size, const char *key,
                                 fa3_cache_view *view, const char **why);

/*
 * Looks key up in dir. Returns 1 on a valid hit: *cubin (malloc'd, *cubin_size bytes), *log
 * (malloc'd, NUL-terminated) and *meta are filled. expect (may be NULL): the canonical config the
 * entry must have been built for. Returns 0 on a miss, including any missing, unreadable,
 * truncated, corrupted or foreign file (never loaded) and a failed allocation.
 * Never sets the thread's error message.
 */
FA3_INTERNAL int fa3_cache_load(const char *dir, const char *key, const fa3_config *expect,
                                void **cubin, size_t *cubin_size, char **log,
                                fa3_cache_meta *meta);

/*
 * Writes an entry for key (creating dir and its parents, mode 0700, if missing): temporary file in
 * dir, rename over <dir>/<key>.fa3k. durable (FA3JIT_CACHE_FSYNC): fsync the file before the
 * rename (a failure fails the store) and the folder after it (best effort). log may be NULL.
 * meta->created 0 = now.
 * Errors: FA3_ERR_CACHE_IO with the failing call, path and reason in the message (callers keep it
 * as a warning and carry on from memory); *sys_errno (may be NULL) receives the errno.
 */
FA3_INTERNAL fa3_status fa3_cache_store(const char *dir, const char *key, const void *cubin,
                                        size_t cubin_size, const char *log,
                                        const fa3_cache_meta *meta, int durable,
                                        int *sys_errno);

/*
 * Writes parts[0..nparts) (sizes[i] bytes each) as the file path in dir (creating dir and its
 * parents, mode 0700): a temporary file .<key>.tmp.XXXXXX in dir renamed over path, fsync'd as
 * fa3_cache_store says when durable. The one writer of the cache's files (entries, index).
 * Errors: FA3_ERR_CACHE_IO naming the failing call and path; *sys_errno (may be NULL) its errno.
 */
FA3_INTERNAL fa3_status fa3_cache_write_file(const char *dir, const char *key, const char *path,
                                             const void *const *parts, const size_t *sizes,
                                             int nparts, int durable, int *sys_errno);

/* Reads the regular file path (not a link, FIFO or device) into buf when it is exactly size
   bytes long; 1 on success, else 0 (missing, another size, unreadable). No error message. */
FA3_INTERNAL int fa3_cache_read_file(const char *path, void *buf, size_t size);

/* Writes the entry path of key in dir into buf; FA3_ERR_CACHE_IO if it does not fit. */
FA3_INTERNAL fa3_status fa3_cache_entry_path(const char *dir, const char *key, char *buf,
                                             size_t size);

/* 1 if errno e from creating a file in the cache folder means the folder is read-only to us
   (the lock and the store classify a folder alike). */
FA3_INTERNAL int fa3_cache_errno_readonly(int e);

/* ------------------------------------------------------------------ shared by the cache's files */

/* 1 if p[0..32) are lowercase hex digits (a key). */
FA3_INTERNAL int fa3_cache_hex32(const char *p);

/* 1 if key is a NUL-terminated key: 32 lowercase hex digits. */
FA3_INTERNAL int fa3_cache_valid_key(const char *key);

/* buf = "<dir>/<name><suffix>"; 0, or -1 when it does not fit (no error message set). */
FA3_INTERNAL int fa3_cache_join_path(char *buf, size_t size, const char *dir, const char *name,
                                     const char *suffix);

/* Writes the FA3_CACHE_HEADER_SIZE header bytes h of an entry for key holding cubin and the
   lsize bytes of log, with meta (created 0 = now). Errors: FA3_ERR_OUT_OF_MEMORY. */
FA3_INTERNAL fa3_status fa3_cache_header_write(uint8_t *h, const char *key, const void *cubin,
                                               size_t cubin_size, const char *log, size_t lsize,
                                               const fa3_cache_meta *meta);

/* 1 if the payload (cubin then log, as sized by the parsed header h) matches h's checksum. */
FA3_INTERNAL int fa3_cache_payload_ok(const uint8_t *h, const uint8_t *payload,
                                      const fa3_cache_view *v);

/*
 * Reads and checks the entry open on fd (key: the key its file name gives): a regular file of a
 * plausible size; the header first, so that sizes are checked before anything large is
 * allocated; the config (expect, may be NULL); then the payload (cubin and log) against its
 * checksum. Returns 1 with *v filled and *payload (malloc'd, v->cubin_size + v->log_size bytes,
 * v's pointers into it); else 0 with *payload NULL and *why (may be NULL) a static reason. The
 * one check of an entry on disk: the loader and the listing share it.
 */
FA3_INTERNAL int fa3_cache_read_entry(int fd, const char *key, const fa3_config *expect,
                                      fa3_cache_view *v, uint8_t **payload, const char **why);

/* ------------------------------------------------------------------ index (cache_index.c) */

/*
 * <dir>/<index key>.fa3x: which entry holds the kernel of a config, so that a warm load skips
 * generating the PTX that the entry key hashes. The index key is fa3_cache_key of the kernel
 * kind, the canonical config the plan is made from, and in the place of the PTX a text naming
 * this library binary's ELF build ID and FA3JIT_PLAN_DEBUG (the generator's other inputs), the
 * generator version, the backend, its version and the arch. File (88 bytes, little-endian):
 *     0  magic "FA3JITX\0"
 *     8  u32 format version (FA3_CACHE_INDEX_FORMAT)
 *    12  u32 file size (FA3_CACHE_INDEX_SIZE)
 *    16  the index key, 32 lowercase hex digits (its file's name)
 *    48  the entry key, 32 lowercase hex digits
 *    80  u64 XXH3-64 of bytes [0, 80)
 * Written like entries (temporary file, rename), without a lock: writers of one index key write
 * the same bytes. A file that fails any check is a miss. The entry it names is loaded only after
 * the usual checks against the config, kind and knobs wanted (build.c).
 */
#define FA3_CACHE_INDEX_FORMAT 1u
#define FA3_CACHE_INDEX_SIZE 88u
#define FA3_CACHE_INDEX_SUFFIX ".fa3x"
#define FA3_CACHE_INDEX_MAGIC "FA3JITX\0"

/* This library binary's ELF build ID (the shared library's, or the program's that linked the
   static library): *id receives its bytes (valid for the process's life); the length, 0 when the
   binary has none (then there is no index). */
FA3_INTERNAL size_t fa3_cache_build_id(const uint8_t **id);

typedef struct fa3_cache_index_input {
    fa3_kernel_kind kind;
    const fa3_config *config;    /* the canonical config the plan is made from */
    const char *backend;         /* fa3_backend_name of the resolved backend */
    const char *backend_version; /* fa3_backend_version's string */
    const char *arch;            /* fa3_arch_name */
} fa3_cache_index_input;

/* The index key of in (32 hex digits + NUL into out); 0 when there is none (no build ID, no
   memory). Never sets the thread's error message. */
FA3_INTERNAL int fa3_cache_index_key(const fa3_cache_index_input *in, char out[33]);

/* The FA3_CACHE_INDEX_SIZE bytes of an index file mapping ikey to ekey (both 32 hex digits). */
FA3_INTERNAL void fa3_cache_index_write(uint8_t *out, const char *ikey, const char *ekey);

/* Checks an index file's bytes (ikey: the key its name gives; NULL: any); 1 with *ekey (33 bytes)
   the entry key it names, else 0. Pure. */
FA3_INTERNAL int fa3_cache_index_parse(const uint8_t *data, size_t size, const char *ikey,
                                       char *ekey);

/* Reads <dir>/<ikey>.fa3x: 1 with ekey (33 bytes) the entry key it names, 0 on any miss (missing,
   damaged, foreign, another key's). Never sets the thread's error message. */
FA3_INTERNAL int fa3_cache_index_load(const char *dir, const char *ikey, char *ekey);

/* Writes <dir>/<ikey>.fa3x naming ekey, unless it already does (fa3_cache_write_file; durable as
   there). Errors: FA3_ERR_INVALID_ARGUMENT, FA3_ERR_CACHE_IO (the caller may ignore them: the
   index only saves time). */
FA3_INTERNAL fa3_status fa3_cache_index_store(const char *dir, const char *ikey, const char *ekey,
                                              int durable);

/* ------------------------------------------------------------------ lock */

typedef enum fa3_cache_lock_result {
    FA3_CACHE_LOCKED = 0,      /* held: release with fa3_cache_lock_release */
    FA3_CACHE_LOCK_NODIR,      /* dir missing and cannot be created */
    FA3_CACHE_LOCK_READONLY,   /* the lock file cannot be created: dir not writable */
    FA3_CACHE_LOCK_UNAVAILABLE /* flock refused (e.g. NFS without locks) or timed out */
} fa3_cache_lock_result;

typedef struct fa3_cache_lock {
    int fd;          /* -1 when not held */
    char path[4096]; /* <dir>/<key>.lock */
} fa3_cache_lock;

/*
 * Takes the advisory lock of key in dir (creating dir if missing), waiting up to timeout_ms for a
 * holder (polling flock LOCK_NB with a short back-off). Anything but FA3_CACHE_LOCKED leaves lk
 * not held and why (why_size bytes) saying what failed (call, path, errno text); never sets the
 * thread's error message.
 */
FA3_INTERNAL fa3_cache_lock_result fa3_cache_lock_take(const char *dir, const char *key,
                                                       int timeout_ms, fa3_cache_lock *lk,
                                                       char *why, size_t why_size);

/* Removes the lock file and releases the lock (no-op when not held). */
FA3_INTERNAL void fa3_cache_lock_release(fa3_cache_lock *lk);

/* ------------------------------------------------------------------ listing (fa3-gen cache) */

typedef enum fa3_cache_file_kind {
    FA3_CACHE_FILE_OTHER = 0, /* not fa3jit's: never listed or removed */
    FA3_CACHE_FILE_ENTRY,     /* <key>.fa3k */
    FA3_CACHE_FILE_LOCK,      /* <key>.lock */
    FA3_CACHE_FILE_TEMP,      /* .<key>.tmp.XXXXXX, a store in progress or left by a crash */
    FA3_CACHE_FILE_INDEX      /* <index key>.fa3x */
} fa3_cache_file_kind;

typedef struct fa3_cache_file {
    char name[64];            /* file name within the folder */
    fa3_cache_file_kind kind;
    uint64_t file_size;
    int64_t mtime;            /* Unix seconds */
    int valid;                /* ENTRY: the whole file checks out, as the loader checks it
                                 (header, sizes, both checksums; not the config wanted) */
    const char *why;          /* ENTRY, !valid: static reason */
    fa3_cache_view view;      /* ENTRY, valid: key, sizes, meta (no payload pointers) */
} fa3_cache_file;

/* Which of fa3jit's file kinds a directory entry name is (exact patterns, 32 lowercase hex). */
FA3_TOOLS_API fa3_cache_file_kind fa3_cache_file_kind_of(const char *name);

/*
 * Lists fa3jit's files in dir (entries read whole and checked as the loader checks them, locks,
 * temporaries; other files ignored), sorted by name. *files is malloc'd (release with
 * fa3_free), *count its length; a missing dir gives 0 files. Errors: FA3_ERR_CACHE_IO (opendir failed, named), _OUT_OF_MEMORY.
 */
FA3_TOOLS_API fa3_status fa3_cache_list(const char *dir, fa3_cache_file **files, size_t *count);

/*
 * Removes fa3jit's files (entries, locks, temporaries: fa3_cache_file_kind_of != OTHER) from dir,
 * never anything else and never the folder. *removed / *bytes (may be NULL) count them. A missing
 * dir is not an error. Errors: FA3_ERR_CACHE_IO naming the first file that could not be removed
 * (the others are still tried).
 */
FA3_TOOLS_API fa3_status fa3_cache_clear(const char *dir, size_t *removed, uint64_t *bytes);

#endif
