#!/bin/sh
# meson install into a temporary DESTDIR, then build programs against the installed package the way
# a user would: through pkg-config, dynamically (libfa3jit.so) and statically (libfa3jit.a, with
# pkg-config --static), run both, and check with ldd what the static one still needs at run time
# (libnvJitLink.so from the toolkit; libcuda is dlopen'd, so it is not a link dependency).
# $1: build folder, $2: C compiler.
set -u
build=$1
cc=$2
dest=$(mktemp -d /tmp/fa3jit-test-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

if ! meson install -C "$build" --destdir "$dest" --no-rebuild > "$dest/install.log" 2>&1; then
    cat "$dest/install.log"; echo "0 passed, 1 failed"; exit 1
fi
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
    'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
pc=$(find "$dest" -name fa3jit.pc | head -n 1)
root="$dest$prefix"
for f in bin/fa3-gen include/fa3jit.h; do
    if [ -f "$root/$f" ]; then ok "installed $f"; else bad "missing $root/$f"; fi
done
for f in libfa3jit.so libfa3jit.a pkgconfig/fa3jit.pc; do
    if [ -n "$(find "$root" -path "*/$f")" ]; then ok "installed $f"; else bad "missing $f"; fi
done
[ -n "$pc" ] || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$(dirname "$pc")"
PC="pkg-config --define-variable=prefix=$root"

cat > "$dest/prog.c" <<'C'
#include <fa3jit.h>
#include <stdio.h>
int main(void)
{
    fa3_config cfg;
    fa3_config_init(&cfg);
    char desc[96];
    if (fa3_config_canonicalize(&cfg, &cfg) || fa3_config_describe(&cfg, desc, sizeof desc))
        return 1;
    printf("fa3jit %s: %d supported configs, default %s\n", fa3_version_string(),
           fa3_supported_configs(NULL, 0), desc);
    return 0;
}
C
if $cc -o "$dest/prog-dyn" "$dest/prog.c" $($PC --cflags --libs fa3jit) 2> "$dest/err"; then
    ok "dynamic build with pkg-config"
    if LD_LIBRARY_PATH="$libdir" "$dest/prog-dyn"; then ok "dynamic program runs"; else bad "dynamic run"; fi
else
    bad "dynamic build"; cat "$dest/err"
fi
if $cc -o "$dest/prog-static" "$dest/prog.c" $($PC --cflags fa3jit) \
       $($PC --static --libs fa3jit | sed 's/-lfa3jit/-l:libfa3jit.a/') 2> "$dest/err"; then
    ok "static build with pkg-config --static"
    if "$dest/prog-static"; then ok "static program runs (no libfa3jit.so)"; else bad "static run"; fi
    echo "ldd of the static program:"
    ldd "$dest/prog-static" | sed 's/^/  /'
    if ldd "$dest/prog-static" | grep -q 'libfa3jit'; then bad "static program loads libfa3jit.so"; else ok "no libfa3jit.so"; fi
    if ldd "$dest/prog-static" | grep -q 'libcuda\.'; then bad "static program links libcuda"; else ok "libcuda not linked (dlopen'd)"; fi
else
    bad "static build"; cat "$dest/err"
fi
if LD_LIBRARY_PATH="$libdir" "$root/bin/fa3-gen" --version > "$dest/out" 2>&1; then
    ok "installed fa3-gen runs: $(head -n 1 "$dest/out")"
else
    bad "installed fa3-gen"; cat "$dest/out"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
