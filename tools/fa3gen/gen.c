/*
 * fa3-gen --emit-ptx | --emit-cubin FILE | --info [CONFIG] [COMPILE]: the generator's PTX on
 * stdout, the compiled cubin into a file, and a description of the kernel (resources, tile plan,
 * cache key and source, compile time and warnings). Needs no GPU. Also takes --version and
 * --help (main.c prints them), as the command with no subcommand.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fa3gen.h"

static int write_file(const char *path, const void *data, size_t size)
{
    if (strcmp(path, "-") == 0) /* main's last check reports a failed write to stdout */
        return fwrite(data, 1, size, stdout) == size ? 0 : EXIT_FAIL;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot open '%s' for writing: %s\n", prog, path, strerror(errno));
        return EXIT_FAIL;
    }
    int bad = fwrite(data, 1, size, f) != size;
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "%s: writing '%s' failed: %s\n", prog, path, strerror(errno));
        return EXIT_FAIL;
    }
    return 0;
}

static const char *source_str(fa3_kernel_source s)
{
    switch (s) {
    case FA3_SOURCE_COMPILED: return "compiled";
    case FA3_SOURCE_DISK: return "disk";
    case FA3_SOURCE_MEMORY: return "memory";
    }
    return "?";
}

static int log_has_warning(const char *log)
{
    for (const char *p = log; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (fa3_log_line_is_diagnostic(p, n))
            return 1;
        p += n + (p[n] == '\n');
    }
    return 0;
}

static void print_count(const char *key, int v, const char *unit)
{
    if (v < 0)
        printf("%-18s unknown\n", key);
    else
        printf("%-18s %d%s\n", key, v, unit);
}

static void print_info(const fa3_context *ctx, const fa3_kernel *kern, const fa3_kernel_info *in)
{
    char desc[256];
    if (fa3_config_describe(&in->config, desc, sizeof desc) != FA3_OK)
        snprintf(desc, sizeof desc, "?");
    const char *dir = fa3_context_cache_dir(ctx);
    printf("%-18s %s\n", "config:", desc);
    const char *knobs = fa3_kernel_plan_debug(kern);
    if (knobs[0])
        printf("%-18s " DEBUG_PLAN_FMT "\n", "plan:", knobs);
    else
        printf("%-18s %s\n", "plan:", "default");
    printf("%-18s %s\n", "backend:", fa3_backend_name(in->backend));
    print_count("registers:", in->num_regs, "");
    print_count("spill stores:", in->spill_store_bytes, " bytes");
    print_count("spill loads:", in->spill_load_bytes, " bytes");
    print_count("stack frame:", in->stack_bytes, " bytes");
    printf("%-18s %d bytes\n", "shared memory:", in->shared_bytes);
    printf("%-18s %d\n", "threads:", in->threads);
    printf("%-18s block_m %d, block_n %d, stages %d\n", "tile plan:", in->block_m, in->block_n,
           in->stages);
    printf("%-18s %s\n", "cache key:", in->cache_key);
    printf("%-18s %s\n", "cache dir:", dir ? dir : "(disk cache off)");
    const char *cw = past_env_warning(fa3_context_warning(ctx));
    if (cw && *cw)
        printf("%-18s %s\n", "cache warning:", cw);
    printf("%-18s %s\n", "source:", source_str(in->source));
    printf("%-18s %.1f\n", "compile ms:", in->compile_ms);
    printf("%-18s %zu bytes\n", "cubin size:", in->cubin_size);
    int warn = log_has_warning(in->compile_log);
    printf("%-18s %s\n", "compile warnings:", warn ? "yes" : "no");
    if (warn) {
        /* Show the warning lines themselves. */
        const char *p = in->compile_log;
        while (*p) {
            size_t n = strcspn(p, "\n");
            if (fa3_log_line_is_diagnostic(p, n))
                printf("  %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    }
}

int cmd_gen(int argc, char **argv)
{
    common_opts o;
    common_init(&o);
    int emit_ptx = 0, info = 0, named = 0;
    const char *cubin_path = NULL;
    cli c = {.argc = argc, .argv = argv, .i = 0};
    while (cli_next(&c)) {
        if (parse_common(&c, &o))
            continue;
        if (cli_is(&c, "--emit-ptx")) {
            cli_noval(&c);
            emit_ptx = 1;
        } else if (cli_is(&c, "--named-registers")) {
            cli_noval(&c);
            named = 1;
        } else if (cli_is(&c, "--emit-cubin")) {
            cubin_path = cli_value(&c);
        } else if (cli_is(&c, "--info")) {
            cli_noval(&c);
            info = 1;
        } else if (cli_is(&c, "--version")) {
            return print_version();
        } else if (cli_is(&c, "--help") || cli_is(&c, "-h")) {
            print_help(stdout);
            return 0;
        } else {
            unknown_arg(&c);
        }
    }
    if (!emit_ptx && !info && !cubin_path)
        usage_error("nothing to do: give --emit-ptx, --emit-cubin FILE, --info, check or bench");

    fa3_config cfg;
    canonical_or_exit(&o.cfg, &cfg);

    if (emit_ptx) {
        char *ptx = NULL;
        size_t len = 0;
        fa3_status st = named ? fa3_tools_emit_ptx_named(&cfg, &ptx, &len)
                              : fa3_emit_ptx(&cfg, &ptx, &len);
        if (st != FA3_OK) {
            lib_error(st, named ? "fa3_tools_emit_ptx_named" : "fa3_emit_ptx");
            return exit_code_for(st);
        }
        int rc = write_file("-", ptx, len);
        fa3_free(ptx);
        if (rc)
            return rc;
    }
    if (!cubin_path && !info)
        return 0;

    fa3_context *ctx = context_or_exit(&o.ctx_opts);
    fa3_kernel *kern = NULL;
    fa3_status st = fa3_jit_get_kernel(ctx, &cfg, &kern);
    if (st != FA3_OK) {
        lib_error(st, "fa3_jit_get_kernel");
        fa3_context_free(ctx);
        return exit_code_for(st);
    }
    int rc = 0;
    if (cubin_path) {
        const void *data = NULL;
        size_t size = 0;
        st = fa3_kernel_get_cubin(kern, &data, &size);
        if (st != FA3_OK) {
            lib_error(st, "fa3_kernel_get_cubin");
            rc = exit_code_for(st);
        } else {
            rc = write_file(cubin_path, data, size);
        }
    }
    if (info && rc == 0) {
        fa3_kernel_info in;
        st = fa3_kernel_get_info(kern, &in);
        if (st != FA3_OK) {
            lib_error(st, "fa3_kernel_get_info");
            rc = exit_code_for(st);
        } else {
            print_info(ctx, kern, &in);
        }
    }
    fa3_context_free(ctx);
    return rc;
}
