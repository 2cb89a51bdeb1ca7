/*
 * FA3JIT_PLAN_DEBUG's parser and knob table (grammar in knobs.h). The planner's defaults and the
 * reasons for them stay in plan.c; this file only reads the overrides.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/knobs.h"

/* Benchmark knob, not API: FA3JIT_PLAN_DEBUG="pingpong=0,arrive_per_warp=0,..." switches
   scheduling features on or off to time variants against each other in one device run
   (bench/ab.py, tools/gpu-run.sh ab). Each feature's measured effect (H200, same-run A/B):
   - l2_sections (masked configs: tiles in L2-sized sections of heads, fwd.c section_hb):
     causal hd128 1024/2048/8192 352/524/644 vs 325/423/583, hd256 1024/2048 397/528 vs
     308/467 TFLOP/s; off for non-masked (nc_sections, tried: −5 to −13%);
   - pp_continuous (ping-pong order kept across tiles): non-causal 512/1024 +3–5%;
   - q_double, k_before_q: see fa3_plan_make; wg3: three consumer warpgroups for hd64;
   - dbg_no_softmax (timing only, wrong results): P = S, no softcap/mask/max/exp/sum/rescale;
     the GEMMs and the pipeline alone. Fair timing, bf16, 16k non-causal (call 3 of 2026-11-29 session 4):
     hd64/128/256 778/769/757 TFLOP/s vs 527/648/725 with the softmax.
   The PTX changes, so cache keys do too. */
static const struct knob {
    const char *name;
    size_t off;
    int lo, hi; /* accepted values */
} knobs[] = {
    {"pingpong", offsetof(fa3_plan, pingpong), 0, 1},
    {"arrive_per_warp", offsetof(fa3_plan, arrive_per_warp), 0, 1},
    {"early_q_release", offsetof(fa3_plan, early_q_release), 0, 1},
    {"l2_sections", offsetof(fa3_plan, l2_sections), 0, 1},
    {"pp_continuous", offsetof(fa3_plan, pp_continuous), 0, 1},
    {"q_double", offsetof(fa3_plan, q_double), 0, 1},
    {"k_before_q", offsetof(fa3_plan, k_before_q), 0, 1},
    {"wg3", offsetof(fa3_plan, wg3), 0, 1},
    {"stages", offsetof(fa3_plan, stages), 2, 8}, /* the range config.c accepts */
    {"o_tma_store", offsetof(fa3_plan, o_tma_store), 0, 1},
    {"o_stage_in_q", offsetof(fa3_plan, o_stage_in_q), 0, 1},
    {"dbg_no_o_store", offsetof(fa3_plan, dbg_no_o_store), 0, 1},
    {"pv_split", offsetof(fa3_plan, pv_split), 0, 1},
    {"masked_overlap", offsetof(fa3_plan, masked_overlap), 0, 1},
    {"section_search", offsetof(fa3_plan, section_search), 0, 1},
    {"dbg_no_softmax", offsetof(fa3_plan, dbg_no_softmax), 0, 1},
};
#define NUM_KNOBS (sizeof knobs / sizeof knobs[0])

static const struct knob *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NUM_KNOBS; i++)
        if (strlen(knobs[i].name) == len && memcmp(knobs[i].name, name, len) == 0)
            return &knobs[i];
    return NULL;
}

int fa3_knobs_parse(const char *text, fa3_plan *plan, char *warn, size_t warn_size)
{
    if (warn && warn_size)
        warn[0] = '\0';
    else
        warn = NULL;
    if (!text || !text[0])
        return 0;
    int bad = 0, unknown = 0;
    size_t n = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        const struct knob *k = eq ? find(p, (size_t)(eq - p)) : NULL;
        long v = -1;
        if (k && fa3_parse_whole(eq + 1, len - (size_t)(eq + 1 - p), k->hi, &v) && v >= k->lo) {
            if (plan)
                *(int *)((char *)plan + k->off) = (int)v;
        } else {
            if (bad)
                fa3_append(warn, warn_size, &n, ", ");
            else
                fa3_append(warn, warn_size, &n, "%s='%.200s': ignored ", FA3_KNOBS_ENV, text);
            fa3_append(warn, warn_size, &n, "'%.*s' ", len > 64 ? 64 : (int)len, p);
            if (!len)
                fa3_append(warn, warn_size, &n, "(an empty item)");
            else if (!eq)
                fa3_append(warn, warn_size, &n, "(not name=value)");
            else if (!k)
                fa3_append(warn, warn_size, &n, "(unknown knob)");
            else
                fa3_append(warn, warn_size, &n, "(%s takes %d..%d)", k->name, k->lo, k->hi);
            unknown |= len && eq && !k;
            bad++;
        }
        p += len;
        if (!*p)
            break;
        p++;
    }
    if (bad) {
        fa3_append(warn, warn_size, &n, "; the other items apply");
        if (unknown) {
            fa3_append(warn, warn_size, &n, " (knobs:");
            for (size_t i = 0; i < NUM_KNOBS; i++)
                fa3_append(warn, warn_size, &n, "%s %s", i ? "," : "", knobs[i].name);
            fa3_append(warn, warn_size, &n, ")");
        }
    }
    return bad;
}

void fa3_knobs_apply_env(fa3_plan *plan)
{
    const char *env = getenv(FA3_KNOBS_ENV);
    const fa3_plan def = *plan;
    (void)fa3_knobs_parse(env, plan, NULL, 0);
    /* A plan the knobs changed is a debug plan: it carries their text (printable bytes, cut with
       "..."), which the PTX header, the cache entry and fa3-gen show. fa3_plan holds ints and
       chars only, so memcmp compares its values. */
    if (!env || memcmp(&def, plan, sizeof def) == 0)
        return;
    size_t n = strlen(env), max = sizeof plan->debug - 1;
    for (size_t i = 0; i < n && i < max; i++)
        plan->debug[i] = env[i] >= 0x20 && env[i] < 0x7f ? env[i] : '?';
    if (n > max)
        memcpy(plan->debug + max - 3, "...", 3);
}
