#!/bin/sh
# meson install into a temporary DESTDIR, then build programs against the installed package the way
# a user would: through pkg-config, dynamically (fa3jit.pc: libfa3jit.so) and statically
# (fa3jit-static.pc: libfa3jit.a, with and without --static, exactly as pkg-config prints it), run
# both, and check with ldd that neither needs libcuda or libnvJitLink at run time (both dlopen'd
# at first use, nvJitLink only for its backend). The shared library's SONAME is
# versioned (libfa3jit.so.0.<minor> while the major version is 0, else libfa3jit.so.<major>),
# installed as a link, and what the dynamic program records as NEEDED.
# $1: build folder, $2: C compiler.
set -u
build=$1
cc=$2
dest=$(mktemp -d /tmp/fa3jit-test-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
dir=$dest
. "$(dirname "$0")/sh_util.sh"

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
for f in libfa3jit.so libfa3jit.a pkgconfig/fa3jit.pc pkgconfig/fa3jit-static.pc; do
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
version=
if $cc -o "$dest/prog-dyn" "$dest/prog.c" $($PC --cflags --libs fa3jit) 2> "$dest/err"; then
    ok "dynamic build with pkg-config"
    if LD_LIBRARY_PATH="$libdir" "$dest/prog-dyn" > "$dest/out"; then
        ok "dynamic program runs: $(cat "$dest/out")"
        version=$(sed -n 's/^fa3jit \([0-9.]*\):.*/\1/p' "$dest/out")
    else bad "dynamic run"; fi
else
    bad "dynamic build"; cat "$dest/err"
fi

# SONAME: versioned, installed as a link to the library, recorded by the program that links it.
soname=$(readelf -d "$libdir/libfa3jit.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
if [ "$major" = 0 ]; then want=libfa3jit.so.0.$minor; else want=libfa3jit.so.$major; fi
if [ -n "$version" ] && [ "$soname" = "$want" ]; then ok "SONAME $soname (version $version)"
else bad "SONAME '$soname', expected '$want' for version '$version'"; fi
if [ -n "$soname" ] && [ -L "$libdir/$soname" ] && [ -f "$libdir/$soname" ]; then ok "installed link $soname"
else bad "no link $libdir/$soname"; ls -l "$libdir" | sed 's/^/  | /'; fi
if LD_LIBRARY_PATH="$libdir" ldd "$dest/prog-dyn" | grep -q 'libnvJitLink'; then
    bad "the dynamic program loads libnvJitLink"; LD_LIBRARY_PATH="$libdir" ldd "$dest/prog-dyn" | sed 's/^/  | /'
else ok "libnvJitLink not needed by libfa3jit.so (dlopen'd for its backend)"; fi
needed=$(readelf -d "$dest/prog-dyn" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(libfa3jit[^]]*\)\]/\1/p')
if [ -n "$soname" ] && [ "$needed" = "$soname" ]; then ok "the dynamic program needs $needed"
else bad "the dynamic program needs '$needed', not the SONAME '$soname'"; fi

# Static: the line fa3jit-static.pc gives, as it is (with and without --static).
for how in "--libs" "--static --libs"; do
    if $cc -o "$dest/prog-static" "$dest/prog.c" $($PC --cflags $how fa3jit-static) 2> "$dest/err"; then
        ok "static build with pkg-config $how fa3jit-static"
        if "$dest/prog-static"; then ok "static program runs (no libfa3jit.so)"; else bad "static run"; fi
        echo "ldd of the static program:"
        ldd "$dest/prog-static" | sed 's/^/  /'
        if ldd "$dest/prog-static" | grep -q 'libfa3jit'; then bad "static program loads libfa3jit.so"; else ok "no libfa3jit.so"; fi
        if ldd "$dest/prog-static" | grep -q 'libcuda\.'; then bad "static program links libcuda"; else ok "libcuda not linked (dlopen'd)"; fi
        if ldd "$dest/prog-static" | grep -q 'libnvJitLink'; then bad "static program links libnvJitLink"; else ok "libnvJitLink not linked (dlopen'd)"; fi
    else
        bad "static build with pkg-config $how fa3jit-static"; cat "$dest/err"
    fi
done
if LD_LIBRARY_PATH="$libdir" "$root/bin/fa3-gen" --version > "$dest/out" 2>&1; then
    ok "installed fa3-gen runs: $(head -n 1 "$dest/out")"
else
    bad "installed fa3-gen"; cat "$dest/out"
fi
summary
