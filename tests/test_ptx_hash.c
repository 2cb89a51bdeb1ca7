/*
 * test_ptx_hash: the XXH3-64 of the generated PTX of every supported config under every benchmark
 * knob set the planner keeps, and of a few tile overrides (stages up to 8), against tests/ptx_hashes.txt. A change
 * of the generator that means to move code without changing it keeps every hash; one that changes
 * the PTX on purpose regenerates the file (and says so in its commit):
 *
 *     FA3JIT_REGEN_PTX_HASHES=1 meson test -C build ptx-hash
 *
 * Usage: test_ptx_hash HASH_FILE. Each line: "<name> <16 hex digits>". The test fails on a hash
 * that differs, a case missing from the file and a line of the file no case produced.
 * FA3JIT_PTX_DUMP_DIR=DIR also writes each case's PTX to DIR/<name>.ptx (tools/sass_same.sh: whether
 * a PTX change leaves the machine code as it was).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "codegen/codegen.h"
#include "fa3jit.h"

static const char *hash_file;

/* The knob sets of FA3JIT_PLAN_DEBUG the planner keeps ("" = the default plan). */
static const char *const knob_sets[] = {"",
                                        "wg3=0",
                                        "dbg_no_o_store=1",
                                        "dbg_no_softmax=1",
                                        "fast_exp=0",
                                        "fast_exp=0,cond_rescale=0",
                                        "uniform_desc=0,late_v_wait=0",
                                        "dyn_sched=0",
                                        "ring_stage=0"};
#define NKNOBS (sizeof knob_sets / sizeof knob_sets[0])

/* Tile overrides (config fields): block_n / stages on some head dims. */
static const struct {
    int hd, block_n, stages;
} tiles[] = {{64, 64, 2},  {64, 128, 3}, {128, 64, 2}, {128, 176, 2},
             {128, 128, 3}, {256, 64, 2}, {64, 16, 8}, {128, 32, 8}}; /* stages 8: the most */
#define NTILES (sizeof tiles / sizeof tiles[0])

typedef struct entry {
    char name[160];
    unsigned long long hash;
    int seen;
} entry;

static int make_name(char *out, size_t cap, const fa3_config *c, const char *knobs)
{
    char desc[128];
    fa3_config_describe(c, desc, sizeof desc);
    for (char *p = desc; *p; p++)
        if (*p == ' ')
            *p = '_';
    return snprintf(out, cap, "%s%s%s", desc, *knobs ? "+" : "", knobs) >= (int)cap;
}

/* Writes len bytes of ptx to dir/name.ptx; 0 on success. */
static int dump(const char *dir, const char *name, const char *ptx, size_t len)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s.ptx", dir, name) >= (int)sizeof path)
        return -1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    const int bad = fwrite(ptx, 1, len, f) != len;
    return fclose(f) != 0 || bad ? -1 : 0;
}

/* PTX of cfg (canonicalized) planned under knobs; its hash in *h; written to
   $FA3JIT_PTX_DUMP_DIR/name.ptx where that is set. 0 on success. */
static int ptx_hash(const fa3_config *cfg, const char *knobs, const char *name,
                    unsigned long long *h)
{
    fa3_config canon;
    if (fa3_config_canonicalize(cfg, &canon) != FA3_OK)
        return -1;
    if (*knobs)
        setenv("FA3JIT_PLAN_DEBUG", knobs, 1);
    else
        unsetenv("FA3JIT_PLAN_DEBUG");
    fa3_plan plan;
    fa3_status st = fa3_plan_make(&canon, &plan);
    unsetenv("FA3JIT_PLAN_DEBUG");
    if (st != FA3_OK)
        return -1;
    char *ptx;
    size_t len;
    if (fa3_codegen_ptx(&plan, &ptx, &len) != FA3_OK)
        return -1;
    *h = (unsigned long long)XXH3_64bits(ptx, len);
    const char *dir = getenv("FA3JIT_PTX_DUMP_DIR");
    const int bad = dir && *dir && dump(dir, name, ptx, len) != 0;
    free(ptx);
    return bad ? -2 : 0;
}

static entry *load(size_t *n)
{
    FILE *f = fopen(hash_file, "r");
    size_t cap = 1024;
    entry *e = calloc(cap, sizeof *e);
    *n = 0;
    if (!f || !e) {
        if (f)
            fclose(f);
        return e;
    }
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (*n == cap) { /* the file has more lines: room for twice as many */
            entry *g = realloc(e, 2 * cap * sizeof *e);
            if (!g)
                break;
            memset(g + cap, 0, cap * sizeof *g);
            e = g;
            cap *= 2;
        }
        if (sscanf(line, "%159s %llx", e[*n].name, &e[*n].hash) == 2)
            (*n)++;
    }
    fclose(f);
    return e;
}

static void test_hashes(void **state)
{
    (void)state;
    const int regen = getenv("FA3JIT_REGEN_PTX_HASHES") && *getenv("FA3JIT_REGEN_PTX_HASHES");
    size_t nold;
    entry *old = load(&nold);
    assert_non_null(old);
    int ncfg = fa3_supported_configs(NULL, 0);
    fa3_config *cfgs = calloc((size_t)ncfg + NTILES, sizeof *cfgs);
    assert_non_null(cfgs);
    fa3_supported_configs(cfgs, ncfg);
    const int ntotal = ncfg + (int)NTILES;
    for (size_t t = 0; t < NTILES; t++) {
        fa3_config *c = &cfgs[ncfg + t];
        fa3_config_init(c);
        c->head_dim = tiles[t].hd;
        c->block_n = tiles[t].block_n;
        c->stages = tiles[t].stages;
    }
    FILE *out = NULL;
    if (regen) {
        out = fopen(hash_file, "w");
        assert_non_null(out);
    }
    int changed = 0, missing = 0, cases = 0;
    for (int i = 0; i < ntotal; i++)
        for (size_t k = 0; k < (i < ncfg ? NKNOBS : 1); k++) {
            char name[160];
            assert_int_equal(make_name(name, sizeof name, &cfgs[i], knob_sets[k]), 0);
            unsigned long long h = 0;
            const int r = ptx_hash(&cfgs[i], knob_sets[k], name, &h);
            if (r == -2)
                fail_msg("%s: cannot write its PTX into FA3JIT_PTX_DUMP_DIR", name);
            if (r != 0)
                fail_msg("%s: no PTX (%s)", name, fa3_last_error_message());
            cases++;
            if (out) {
                fprintf(out, "%s %016llx\n", name, h);
                continue;
            }
            entry *e = NULL;
            for (size_t j = 0; j < nold && !e; j++)
                if (!strcmp(old[j].name, name))
                    e = &old[j];
            if (!e) {
                if (missing++ < 10)
                    printf("  %s: not in %s\n", name, hash_file);
            } else {
                e->seen = 1;
                if (e->hash != h && changed++ < 10)
                    printf("  %s: PTX hash %016llx, the file has %016llx\n", name, h, e->hash);
            }
        }
    int stale = 0;
    for (size_t j = 0; j < nold && !out; j++)
        if (!old[j].seen && stale++ < 10)
            printf("  %s: in %s but no case produces it\n", old[j].name, hash_file);
    if (out)
        fclose(out);
    free(cfgs);
    free(old);
    printf("%d PTX hashes %s (%d changed, %d missing, %d stale)\n", cases,
           regen ? "written" : "checked", changed, missing, stale);
    if (changed || missing || stale)
        fail_msg("PTX changed for %d cases (%d not in the file, %d stale lines): if on purpose, "
                 "FA3JIT_REGEN_PTX_HASHES=1 meson test -C build ptx-hash", changed, missing,
                 stale);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s HASH_FILE\n", argv[0]);
        return 2;
    }
    hash_file = argv[1];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hashes)};
    return cmocka_run_group_tests_name("ptx-hash", tests, NULL, NULL);
}
