/*
 * FA3JIT_PLAN_DEBUG: benchmark knobs that override plan fields (not API). The text is a
 * comma-separated list of name=value items: name exactly one of the knob table's names
 * (src/codegen/knobs.c), value a decimal integer (digits only) in the knob's range; a later item
 * overrides an earlier one with the same name. An item that breaks a rule is skipped and named in
 * the warning; the other items still apply. Empty text is the same as no text.
 *
 * Parsing only: the planner calls fa3_knobs_apply_env, the runtime reports what
 * fa3_knobs_parse refuses (codegen has no context to keep a warning in).
 */
#ifndef FA3JIT_KNOBS_H
#define FA3JIT_KNOBS_H

#include <stddef.h>

#include "codegen/codegen.h"

#define FA3_KNOBS_ENV "FA3JIT_PLAN_DEBUG"

/* Parses text (NULL = none). Sets the field of each valid item in plan when plan is not NULL.
   Returns the number of items refused; when there are any and warn is not NULL, warn receives one
   line naming the variable, its text and each refused item with the reason (cut to warn_size). */
FA3_INTERNAL int fa3_knobs_parse(const char *text, fa3_plan *plan, char *warn, size_t warn_size);

/* Applies $FA3JIT_PLAN_DEBUG's valid items to plan (read at each call); when they changed the
   plan, its debug field receives the variable's text (the kernel is then a benchmark variant). */
FA3_INTERNAL void fa3_knobs_apply_env(fa3_plan *plan);

#endif
