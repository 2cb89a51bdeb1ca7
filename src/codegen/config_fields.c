/*
 * The table of fa3_config's fields (config_fields.h) and what walks it: defaults (and the struct's
 * size rules), equality, the one-line description, zero-means-derived filling, and the value list
 * the cache key and the cache header serialize.
 */
#include <stddef.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/config_fields.h"

static const char *const dtype_names[] = {"bf16", "fp16", "e4m3"};
static const char *const mask_names[] = {"none", "causal", "local"};

#define FIELD(member) #member, offsetof(fa3_config, member)
#define NAMES(a) a, (int)(sizeof a / sizeof a[0])

/* Order: the cache key and the cache header serialize the values in this order; a new field goes
   at the end (it changes every key: the count is hashed). describe writes them in this order too,
   e.g. "hd192x128 fp16 local softcap sm_90a bn128 st2". */
const fa3_config_field fa3_config_fields[FA3_CONFIG_NUM_FIELDS] = {
    {FIELD(head_dim), 128, 1, 4096, FA3_CANON_NONE, FA3_SHOW_NUMBER, "hd", "", NULL, 0},
    {FIELD(head_dim_v), 0, 1, 4096, FA3_CANON_HEAD_DIM, FA3_SHOW_NUMBER, "x", "", NULL, 0},
    {FIELD(dtype), FA3_DTYPE_BF16, FA3_DTYPE_BF16, FA3_DTYPE_E4M3, FA3_CANON_NONE, FA3_SHOW_NAME,
     " ", "", NAMES(dtype_names)},
    {FIELD(mask), FA3_MASK_NONE, FA3_MASK_NONE, FA3_MASK_LOCAL, FA3_CANON_NONE, FA3_SHOW_NAME, " ",
     "", NAMES(mask_names)},
    {FIELD(softcap), 0, 0, 1, FA3_CANON_NONE, FA3_SHOW_FLAG, " softcap", "", NULL, 0},
    {FIELD(arch), FA3_ARCH_SM90A, FA3_ARCH_SM90A, FA3_ARCH_SM90A, FA3_CANON_NONE, FA3_SHOW_NUMBER,
     " sm_", "a", NULL, 0},
    {FIELD(block_n), 0, 1, 4096, FA3_CANON_PLANNER, FA3_SHOW_NUMBER, " bn", "", NULL, 0},
    {FIELD(stages), 0, 1, 64, FA3_CANON_PLANNER, FA3_SHOW_NUMBER, " st", "", NULL, 0},
    {FIELD(out_dtype), FA3_DTYPE_AUTO, FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_CANON_OUT_DTYPE,
     FA3_SHOW_NAME, " out ", "", NAMES(dtype_names)},
    {FIELD(varlen), 0, 0, 1, FA3_CANON_NONE, FA3_SHOW_FLAG, " varlen", "", NULL, 0},
    {FIELD(paged_kv), 0, 0, 1, FA3_CANON_NONE, FA3_SHOW_FLAG, " paged", "", NULL, 0},
    {FIELD(split_kv), 0, 0, 1, FA3_CANON_NONE, FA3_SHOW_FLAG, " split", "", NULL, 0},
    {FIELD(pack_gqa), 0, 0, 1, FA3_CANON_NONE, FA3_SHOW_FLAG, " packgqa", "", NULL, 0},
    {FIELD(block_m), 0, 64, 192, FA3_CANON_PLANNER, FA3_SHOW_UNPLANNED, " bm", "", NULL, 0},
};

/* Every member of fa3_config after struct_size is a 32-bit field of the table. */
_Static_assert(offsetof(fa3_config, struct_size) == 0 &&
                   sizeof(fa3_config) ==
                       offsetof(fa3_config, head_dim) + FA3_CONFIG_NUM_FIELDS * sizeof(int32_t),
               "every fa3_config member has a row in fa3_config_fields");

static const fa3_struct_kind config_kind = {"fa3_config", "fa3_config_init()",
                                            sizeof(fa3_config), NULL, 0};

int32_t fa3_config_get(const fa3_config *c, const fa3_config_field *f)
{
    int32_t v;
    memcpy(&v, (const char *)c + f->offset, sizeof v);
    return v;
}

void fa3_config_set(fa3_config *c, const fa3_config_field *f, int32_t v)
{
    memcpy((char *)c + f->offset, &v, sizeof v);
}

/* This library's fa3_config of init values. */
static void config_defaults(fa3_config *c)
{
    memset(c, 0, sizeof *c);
    c->struct_size = sizeof *c;
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        fa3_config_set(c, &fa3_config_fields[i], fa3_config_fields[i].init);
}

void fa3_config_init_sized(fa3_config *cfg, size_t struct_size)
{
    if (!cfg)
        return;
    fa3_config d;
    config_defaults(&d);
    fa3_struct_init(&config_kind, cfg, struct_size, &d);
}

fa3_status fa3_config_in(const fa3_config *cfg, fa3_config *out)
{
    fa3_config d;
    config_defaults(&d);
    return fa3_struct_in(&config_kind, cfg, out, &d);
}

fa3_status fa3_config_out(fa3_config *dst, size_t struct_size, const fa3_config *src)
{
    return fa3_struct_out(&config_kind, dst, struct_size, src);
}

int fa3_config_equal(const fa3_config *a, const fa3_config *b)
{
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        if (fa3_config_get(a, &fa3_config_fields[i]) != fa3_config_get(b, &fa3_config_fields[i]))
            return 0;
    return 1;
}

int32_t fa3_default_out_dtype(int32_t dtype)
{
    return dtype == FA3_DTYPE_E4M3 ? FA3_DTYPE_BF16 : dtype;
}

fa3_status fa3_check_out_dtype(const char *who, int32_t dtype, int32_t out_dtype)
{
    if (out_dtype == FA3_DTYPE_AUTO || out_dtype == fa3_default_out_dtype(dtype) ||
        (dtype == FA3_DTYPE_E4M3 && out_dtype == FA3_DTYPE_FP16))
        return FA3_OK;
    const int named = out_dtype >= 0 && out_dtype < (int32_t)(sizeof dtype_names /
                                                                sizeof dtype_names[0]);
    return fa3_seterr(FA3_ERR_BAD_DTYPE,
                      "%sout_dtype %d%s%s%s is not supported with dtype %s (supported: %s)", who,
                      (int)out_dtype, named ? " (" : "", named ? dtype_names[out_dtype] : "",
                      named ? ")" : "", dtype_names[dtype],
                      dtype == FA3_DTYPE_E4M3 ? "-1 = auto, bf16 = 0, fp16 = 1"
                      : dtype == FA3_DTYPE_FP16
                          ? "-1 = auto, fp16 = 1: O has the inputs' dtype"
                          : "-1 = auto, bf16 = 0: O has the inputs' dtype");
}

void fa3_config_fill_zero(fa3_config *c, fa3_field_canon canon, const fa3_config *planned)
{
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++) {
        const fa3_config_field *f = &fa3_config_fields[i];
        if (f->canon != canon || canon == FA3_CANON_NONE)
            continue;
        const int32_t v = fa3_config_get(c, f);
        if (canon == FA3_CANON_OUT_DTYPE) {
            if (v == FA3_DTYPE_AUTO)
                fa3_config_set(c, f, fa3_default_out_dtype(c->dtype));
            continue;
        }
        if (v != 0)
            continue;
        fa3_config_set(c, f, canon == FA3_CANON_HEAD_DIM ? c->head_dim : fa3_config_get(planned, f));
    }
}

void fa3_config_to_values(const fa3_config *c, int32_t *values)
{
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        values[i] = fa3_config_get(c, &fa3_config_fields[i]);
}

void fa3_config_from_values(fa3_config *c, const int32_t *values)
{
    config_defaults(c);
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++)
        fa3_config_set(c, &fa3_config_fields[i], values[i]);
}

const char *fa3_config_out_of_range(const fa3_config *c)
{
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++) {
        const fa3_config_field *f = &fa3_config_fields[i];
        int32_t v = fa3_config_get(c, f);
        if (v < f->lo || v > f->hi)
            return f->name;
    }
    return NULL;
}

/* The planner's block_m for cfg (its block_n, else the planner's): FA3_SHOW_UNPLANNED's test. */
static int planned_block_m(const fa3_config *cfg)
{
    int block_n = cfg->block_n, stages;
    if (!block_n)
        fa3_plan_default_tiles(cfg, &block_n, &stages);
    return fa3_plan_default_block_m(cfg, block_n);
}

fa3_status fa3_config_describe(const fa3_config *cfg, char *buf, size_t buf_size)
{
    if (!cfg || !buf || buf_size == 0)
        return fa3_seterr(FA3_ERR_INVALID_ARGUMENT, "fa3_config_describe: NULL argument");
    fa3_config c;
    FA3_TRY(fa3_config_in(cfg, &c));
    cfg = &c;
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < FA3_CONFIG_NUM_FIELDS; i++) {
        const fa3_config_field *f = &fa3_config_fields[i];
        int32_t v = fa3_config_get(cfg, f);
        if (f->canon == FA3_CANON_HEAD_DIM && (v == 0 || v == cfg->head_dim))
            continue; /* the same as head_dim: said by head_dim */
        if (f->canon == FA3_CANON_OUT_DTYPE &&
            (v == FA3_DTYPE_AUTO || v == fa3_default_out_dtype(cfg->dtype)))
            continue; /* the dtype's default output: said by dtype */
        switch (f->show) {
        case FA3_SHOW_UNPLANNED:
            if (v == 0 || v == planned_block_m(cfg))
                break;
            /* fall through */
        case FA3_SHOW_NUMBER:
            fa3_append(buf, buf_size, &n, "%s%d%s", f->prefix, (int)v, f->suffix);
            break;
        case FA3_SHOW_NAME:
            fa3_append(buf, buf_size, &n, "%s%s%s", f->prefix,
                       v >= 0 && v < f->num_names ? f->names[v] : "?", f->suffix);
            break;
        case FA3_SHOW_FLAG:
            if (v)
                fa3_append(buf, buf_size, &n, "%s%s", f->prefix, f->suffix);
            break;
        }
    }
    return FA3_OK;
}
