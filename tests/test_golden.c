/*
 * test_golden: the generated PTX of two configs, compared byte for byte with the files in tests/golden/.
 * Any change to the generator's output makes this fail until the golden files are regenerated
 * on purpose (and the change reviewed in the diff):
 *
 *     FA3JIT_REGEN_GOLDEN=1 meson test -C build golden
 *
 * Usage: test_golden GOLDEN_DIR
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fa3jit.h"

static const char *golden_dir;

typedef struct golden_case {
    const char *file;
    int head_dim;
    fa3_dtype dtype;
    fa3_mask mask;
} golden_case;

static const golden_case cases[] = {
    {"hd128_bf16_causal.ptx", 128, FA3_DTYPE_BF16, FA3_MASK_CAUSAL},
    {"hd64_fp16_none.ptx", 64, FA3_DTYPE_FP16, FA3_MASK_NONE},
};

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

/* Prints the first line where want and got differ (1-based), both versions of it. */
static void report_first_diff(const char *name, const char *want, size_t wlen, const char *got,
                              size_t glen)
{
    size_t i = 0, line = 1, line_start = 0;
    while (i < wlen && i < glen && want[i] == got[i]) {
        if (want[i] == '\n') {
            line++;
            line_start = i + 1;
        }
        i++;
    }
    const char *we = memchr(want + line_start, '\n', wlen - line_start);
    const char *ge = memchr(got + line_start, '\n', glen - line_start);
    int wl = (int)((we ? we : want + wlen) - (want + line_start));
    int gl = (int)((ge ? ge : got + glen) - (got + line_start));
    printf("%s: generated PTX differs from the golden file at line %zu (byte %zu)\n"
           "  golden:    %s%.*s\n  generated: %s%.*s\n"
           "  (golden %zu bytes, generated %zu bytes). If the change is intended, regenerate with\n"
           "  FA3JIT_REGEN_GOLDEN=1 meson test -C build golden   and review the diff.\n",
           name, line, i, i >= wlen ? "<end of file> " : "", wl, want + line_start,
           i >= glen ? "<end of output> " : "", gl, got + line_start, wlen, glen);
}

static void test_golden_case(void **state)
{
    const golden_case *gc = *state;
    fa3_config c;
    fa3_config_init(&c);
    c.head_dim = gc->head_dim;
    c.dtype = gc->dtype;
    c.mask = gc->mask;
    char *ptx = NULL;
    size_t len = 0;
    fa3_status st = fa3_emit_ptx(&c, &ptx, &len);
    if (st != FA3_OK)
        fail_msg("fa3_emit_ptx: %s: %s", fa3_strerror(st), fa3_last_error_message());

    char path[4096];
    snprintf(path, sizeof path, "%s/%s", golden_dir, gc->file);
    const char *regen = getenv("FA3JIT_REGEN_GOLDEN");
    if (regen && *regen && strcmp(regen, "0") != 0) {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(ptx, 1, len, f) != len || fclose(f) != 0)
            fail_msg("cannot write %s", path);
        printf("regenerated %s (%zu bytes)\n", path, len);
    }

    size_t glen = 0;
    char *golden = read_file(path, &glen);
    if (!golden)
        fail_msg("cannot read %s; create it with FA3JIT_REGEN_GOLDEN=1 meson test -C build golden",
                 path);
    int same = glen == len && memcmp(golden, ptx, len) == 0;
    if (!same)
        report_first_diff(gc->file, golden, glen, ptx, len);
    free(golden);
    fa3_free(ptx);
    assert_true(same);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    golden_dir = argv[1];
    const struct CMUnitTest tests[] = {
        {cases[0].file, test_golden_case, NULL, NULL, (void *)&cases[0]},
        {cases[1].file, test_golden_case, NULL, NULL, (void *)&cases[1]},
    };
    return cmocka_run_group_tests_name("golden", tests, NULL, NULL);
}
