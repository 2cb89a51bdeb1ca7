/*
 * The fields of fa3_config as one table. Everything that walks a config field by field walks this
 * table: fa3_config_init (defaults, after struct_size), fa3_config_equal, fa3_config_describe, the zero-means-derived
 * rules of fa3_config_canonicalize, the cache key's and the cache header's serialization (a
 * count, then each value as a little-endian 32-bit integer in table order) and the check of a
 * config read back from a cache entry. Adding a config field: a member at the end of fa3_config
 * (include/fa3jit.h, appended), one row here, its validation in config.c, then the planner and
 * the emitter that use it (docs/kernel.md, "Adding a config field").
 */
#ifndef FA3JIT_CONFIG_FIELDS_H
#define FA3JIT_CONFIG_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* How fa3_config_describe writes a field. */
typedef enum fa3_field_show {
    FA3_SHOW_NUMBER, /* prefix, the value in decimal, suffix */
    FA3_SHOW_NAME,   /* prefix, names[value] ("?" outside the names) */
    FA3_SHOW_FLAG,   /* prefix when the value is not 0, else nothing */
    FA3_SHOW_UNPLANNED /* as FA3_SHOW_NUMBER where the value is not 0 and not the planner's
                          choice (block_m: " bm64", head_dim 64's " bm128"; the planner's
                          128/192 go unsaid) */
} fa3_field_show;

/* What a value of 0 means, resolved by fa3_config_canonicalize (canonical configs hold no 0 in
   such a field). */
typedef enum fa3_field_canon {
    FA3_CANON_NONE = 0,     /* 0 is a value like any other */
    FA3_CANON_HEAD_DIM,     /* 0 = head_dim's value (and describe omits the field when equal) */
    FA3_CANON_PLANNER,      /* 0 = the planner's choice (fa3_plan_default_tiles) */
    FA3_CANON_OUT_DTYPE     /* FA3_DTYPE_AUTO (-1, not 0) = the input dtype's default output
                               (describe omits the field when it holds that default) */
} fa3_field_canon;

typedef struct fa3_config_field {
    const char *name;        /* the member's name in fa3_config (and in python/fa3jit/_lib.py) */
    size_t offset;           /* offsetof(fa3_config, name); every field is a 32-bit int or enum */
    int32_t init;            /* fa3_config_init's value */
    int32_t lo, hi;          /* the range a canonical value lies in, as a cache entry must hold it
                                (plausibility; what this build supports is config.c's check) */
    fa3_field_canon canon;
    fa3_field_show show;
    const char *prefix, *suffix;
    const char *const *names; /* FA3_SHOW_NAME: names[0..num_names) of the values 0.. */
    int num_names;
} fa3_config_field;

#define FA3_CONFIG_NUM_FIELDS 14
/* The most fields a cache header has room for (cache.h: the config slots). */
#define FA3_CONFIG_MAX_FIELDS 32
_Static_assert(FA3_CONFIG_NUM_FIELDS <= FA3_CONFIG_MAX_FIELDS, "room in the cache header");

FA3_INTERNAL extern const fa3_config_field fa3_config_fields[FA3_CONFIG_NUM_FIELDS];

/* A caller's config copied into out (this library's size; the fields an older, smaller struct
   lacks at their defaults), and an own-sized config copied out to a caller's struct of
   struct_size bytes ("Growing structs" in fa3jit.h). Errors: FA3_ERR_INVALID_ARGUMENT for a
   struct_size this library does not know. */
FA3_INTERNAL fa3_status fa3_config_in(const fa3_config *cfg, fa3_config *out);
FA3_INTERNAL fa3_status fa3_config_out(fa3_config *dst, size_t struct_size, const fa3_config *src);

/* The value of field f of c, and setting it. */
FA3_INTERNAL int32_t fa3_config_get(const fa3_config *c, const fa3_config_field *f);
FA3_INTERNAL void fa3_config_set(fa3_config *c, const fa3_config_field *f, int32_t v);

/* 1 if the two configs are equal field by field (compare canonical forms). */
FA3_INTERNAL int fa3_config_equal(const fa3_config *a, const fa3_config *b);

/* Sets each field of c with rule canon that holds 0 (FA3_DTYPE_AUTO for FA3_CANON_OUT_DTYPE) to
   its derived value: head_dim's value (FA3_CANON_HEAD_DIM), the same field of planned
   (FA3_CANON_PLANNER; planned may be NULL for the other rules), or the dtype's default output
   (FA3_CANON_OUT_DTYPE: fa3_default_out_dtype). */
FA3_INTERNAL void fa3_config_fill_zero(fa3_config *c, fa3_field_canon canon,
                                       const fa3_config *planned);

/* The output dtype of a config whose out_dtype is FA3_DTYPE_AUTO: bf16 for e4m3, else dtype. */
FA3_INTERNAL int32_t fa3_default_out_dtype(int32_t dtype);

/* FA3_OK if out_dtype (FA3_DTYPE_AUTO or a dtype) is an output of the supported dtype dtype: its
   default, or fp16 for e4m3; else FA3_ERR_BAD_DTYPE with a message naming both by number and
   name, after who (e.g. "reference: "). */
FA3_INTERNAL fa3_status fa3_check_out_dtype(const char *who, int32_t dtype, int32_t out_dtype);

/* c's values in table order (FA3_CONFIG_NUM_FIELDS of them). */
FA3_INTERNAL void fa3_config_to_values(const fa3_config *c, int32_t *values);

/* The config of FA3_CONFIG_NUM_FIELDS values in table order. */
FA3_INTERNAL void fa3_config_from_values(fa3_config *c, const int32_t *values);

/* NULL if every field of c lies in its [lo, hi], else the name of the first that does not. */
FA3_INTERNAL const char *fa3_config_out_of_range(const fa3_config *c);

#endif
