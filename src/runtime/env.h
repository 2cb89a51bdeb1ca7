/*
 * The environment variables the library reads, each parsed strictly in one place (env.c). A value
 * that breaks its variable's rule is not used: the documented default applies, and the warning
 * names the variable and the value. An empty value is the same as an unset variable.
 *   FA3JIT_CACHE_DIR            an absolute path (a relative one is ignored, as the XDG Base
 *                               Directory spec has it for XDG_CACHE_HOME)
 *   XDG_CACHE_HOME, HOME        absolute paths, likewise
 *   FA3JIT_CACHE_DISABLE        0 (disk cache on, the default) or 1 (memory only)
 *   FA3JIT_CACHE_LOCK_TIMEOUT   whole seconds, digits only, 0..86400 (default 300)
 *   FA3JIT_CACHE_FSYNC          0 (the default) or 1: a cache store fsyncs the entry and its
 *                               folder, so that it survives a crash of the machine (cache.c says
 *                               why that is not needed by default)
 *   FA3JIT_DEBUG_VARLEN         0 (the default) or 1: fa3_fwd reads the varlen / paged-KV device
 *                               arrays back and checks them before each launch (varlen.c)
 *   FA3JIT_PLAN_DEBUG           benchmark knobs (grammar in codegen/knobs.h; the planner applies
 *                               them at each plan, this only checks them)
 */
#ifndef FA3JIT_ENV_H
#define FA3JIT_ENV_H

#include <stddef.h>

#include "common.h"

#define FA3_LOCK_TIMEOUT_DEFAULT_S 300
#define FA3_LOCK_TIMEOUT_MAX_S 86400

typedef struct fa3_env {
    const char *cache_dir;      /* $FA3JIT_CACHE_DIR when valid, else NULL */
    const char *xdg_cache_home; /* $XDG_CACHE_HOME when valid, else NULL */
    const char *home;           /* $HOME when valid, else NULL */
    int cache_disable;          /* $FA3JIT_CACHE_DISABLE, 0 or 1 */
    int lock_timeout_s;         /* $FA3JIT_CACHE_LOCK_TIMEOUT */
    int cache_fsync;            /* $FA3JIT_CACHE_FSYNC, 0 or 1 */
    int debug_varlen;           /* $FA3JIT_DEBUG_VARLEN, 0 or 1 */
} fa3_env;

/* Reads and checks every variable above into env (the strings point into the environment: use
   them before it changes). warn (may be NULL) receives the problems, "; "-separated, or "".
   Returns the number of problems. */
FA3_INTERNAL int fa3_env_read(fa3_env *env, char *warn, size_t warn_size);

/* The problems fa3_env_read finds now (for fa3-gen, which prints them once at start; a context
   created now starts its fa3_context_warning with the same text). Returns their number. */
FA3_TOOLS_API int fa3_env_warnings(char *warn, size_t warn_size);

#endif
