/*
 * libFuzzer harness: fa3-gen's command-line parsing (tools/fa3gen/cli.c, the shared flag reader,
 * and tools/fa3gen/cache.c with cache_warm.c, the cache subcommand's parser and what it dispatches
 * to; compiled into this file), on argument vectors cut from the input at NUL and newline bytes.
 *   input[0] % 3 == 0: "fa3-gen cache <args>"  → cache_parse (the cache subcommand's parser, which
 *                                                 uses the shared config/compile flag parser)
 *                 1: "fa3-gen <args>"        → the --emit-ptx/--info loop of cmd_gen, parse only
 *                 2: value parsers (cli_int, cli_double, cli_u64) on each argument
 * then fa3_config_canonicalize / fa3_config_describe on whatever config came out. A usage error
 * ends the run through exit(), which this harness turns into a longjmp back here (so libFuzzer
 * keeps going); messages go to /dev/null.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf g_jmp;
static FILE *g_null;

static _Noreturn void fuzz_exit(int code)
{
    longjmp(g_jmp, code + 1);
}

#define exit(code) fuzz_exit(code)
#undef stderr
#define stderr g_null
#undef stdout
#define stdout g_null
#include "tools/fa3gen/cli.c"
#include "tools/fa3gen/cache.c"
#include "tools/fa3gen/cache_warm.c"
#undef exit
#undef stderr
#undef stdout

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_null && !(g_null = fopen("/dev/null", "w")))
        abort();
    if (size < 1 || size > 4096)
        return 0;
    int mode = data[0] % 3;
    static char buf[4097];
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    static char *argv[MAX_ARGS + 3];
    int argc = 0;
    argv[argc++] = (char *)"fa3-gen";
    if (mode == 0)
        argv[argc++] = (char *)"cache";
    char *p = buf, *end = buf + size - 1;
    while (p <= end && argc < MAX_ARGS) {
        size_t n = strcspn(p, "\n");
        p[n] = '\0';
        argv[argc++] = p;
        p += n + 1;
        while (p <= end && *p == '\0' && p < end) /* collapse empty runs */
            p++;
    }
    argv[argc] = NULL;

    static fa3_config cfg;
    fa3_config_init(&cfg);
    if (setjmp(g_jmp) == 0) {
        if (mode == 0) {
            static cache_args a;
            cache_parse(argc, argv, &a);
            cfg = a.o.cfg;
        } else if (mode == 1) {
            static common_opts o;
            common_init(&o);
            cli c = {.argc = argc, .argv = argv, .i = 0};
            while (cli_next(&c)) {
                if (parse_common(&c, &o))
                    continue;
                if (cli_is(&c, "--emit-ptx") || cli_is(&c, "--info"))
                    cli_noval(&c);
                else if (cli_is(&c, "--emit-cubin"))
                    (void)cli_value(&c);
                else
                    unknown_arg(&c);
            }
            cfg = o.cfg;
        } else {
            for (int i = 1; i < argc; i++) {
                cli c = {.argc = argc, .argv = argv, .i = i - 1};
                if (!cli_next(&c))
                    break;
                switch (i % 3) {
                case 0: (void)cli_int(&c, -1000, 1000); break;
                case 1: (void)cli_double(&c); break;
                default: (void)cli_u64(&c); break;
                }
            }
        }
    }
    fa3_config canon;
    char desc[128];
    if (fa3_config_canonicalize(&cfg, &canon) == FA3_OK) {
        if (fa3_config_describe(&canon, desc, sizeof desc) != FA3_OK)
            abort();
    }
    (void)fa3_config_describe(&cfg, desc, sizeof desc); /* as given, any values */
    return 0;
}
