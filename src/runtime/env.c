/*
 * Environment variables (the rules are in env.h): read once per context, each value checked, a
 * bad one named in the context's warning and replaced by its default.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/knobs.h"
#include "runtime/env.h"

/* $name, or NULL when unset or empty. */
static const char *value_of(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* Starts the next problem's text ("; " after the first). */
static void next_problem(char *warn, size_t size, size_t *n, int *count)
{
    if ((*count)++)
        fa3_append(warn, size, n, "; ");
}

/* $name when it is an absolute path; a relative one is a problem and NULL. */
static const char *absolute(const char *name, char *warn, size_t size, size_t *n, int *count)
{
    const char *v = value_of(name);
    if (v && v[0] != '/') {
        next_problem(warn, size, n, count);
        char pv[301];
        fa3_append(warn, size, n, "%s='%s' is not an absolute path: ignored", name,
                   fa3_printable(v, -1, pv, sizeof pv));
        return NULL;
    }
    return v;
}

int fa3_env_read(fa3_env *env, char *warn, size_t warn_size)
{
    size_t n = 0;
    int count = 0;
    if (warn && warn_size)
        warn[0] = '\0';
    else
        warn = NULL;
    memset(env, 0, sizeof *env);
    env->cache_dir = absolute("FA3JIT_CACHE_DIR", warn, warn_size, &n, &count);
    env->xdg_cache_home = absolute("XDG_CACHE_HOME", warn, warn_size, &n, &count);
    env->home = absolute("HOME", warn, warn_size, &n, &count);

    char pv[101];
    const char *v = value_of("FA3JIT_CACHE_DISABLE");
    if (v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        next_problem(warn, warn_size, &n, &count);
        fa3_append(warn, warn_size, &n, "FA3JIT_CACHE_DISABLE='%s' is not 0 or 1: ignored "
                   "(disk cache on)", fa3_printable(v, -1, pv, sizeof pv));
    }
    env->cache_disable = v && strcmp(v, "1") == 0;

    v = value_of("FA3JIT_CACHE_FSYNC");
    if (v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        next_problem(warn, warn_size, &n, &count);
        fa3_append(warn, warn_size, &n, "FA3JIT_CACHE_FSYNC='%s' is not 0 or 1: ignored "
                   "(cache entries not fsync'd)", fa3_printable(v, -1, pv, sizeof pv));
    }
    env->cache_fsync = v && strcmp(v, "1") == 0;

    v = value_of("FA3JIT_DEBUG_VARLEN");
    if (v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        next_problem(warn, warn_size, &n, &count);
        fa3_append(warn, warn_size, &n, "FA3JIT_DEBUG_VARLEN='%s' is not 0 or 1: ignored "
                   "(no read-back of the varlen/paged arrays)", fa3_printable(v, -1, pv, sizeof pv));
    }
    env->debug_varlen = v && strcmp(v, "1") == 0;

    env->lock_timeout_s = FA3_LOCK_TIMEOUT_DEFAULT_S;
    long sec = 0;
    if ((v = value_of("FA3JIT_CACHE_LOCK_TIMEOUT")) && !fa3_parse_whole(v, strlen(v), FA3_LOCK_TIMEOUT_MAX_S, &sec)) {
        next_problem(warn, warn_size, &n, &count);
        fa3_append(warn, warn_size, &n, "FA3JIT_CACHE_LOCK_TIMEOUT='%s' is not whole seconds "
                   "in 0..%d: using %d", fa3_printable(v, -1, pv, sizeof pv),
                   FA3_LOCK_TIMEOUT_MAX_S, FA3_LOCK_TIMEOUT_DEFAULT_S);
    } else if (v) {
        env->lock_timeout_s = (int)sec;
    }

    char knobs[512];
    if (fa3_knobs_parse(getenv(FA3_KNOBS_ENV), NULL, knobs, sizeof knobs)) {
        next_problem(warn, warn_size, &n, &count);
        fa3_append(warn, warn_size, &n, "%s", knobs);
    }
    return count;
}

int fa3_env_warnings(char *warn, size_t warn_size)
{
    fa3_env env;
    return fa3_env_read(&env, warn, warn_size);
}
