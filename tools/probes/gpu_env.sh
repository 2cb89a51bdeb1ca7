# Sourced by the device probes (tools/probes/*.sh): the bundle's environment on the device,
# after tools/gpu-bundle.sh (carry .gpu). Sets root (the repository), LD_LIBRARY_PATH (the
# bundle's libraries), FA3JIT_LIBRARY (the library; an xz'd one, XZ_LIB=1 or SLIM=1, unpacked
# beside it first, as gpu-run.sh does), FA3JIT_CACHE_DIR (/tmp/fa3c unless set: shared with
# gpu-run.sh's steps while the machine is warm) and g (the bundle's fa3-gen).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for z in "$root"/.gpu/libfa3jit.so*.xz; do
  [ -f "$z" ] && xz -dc "$z" > "${z%.xz}" && rm -f "$z"
done
export LD_LIBRARY_PATH=$root/.gpu
FA3JIT_LIBRARY=$(ls "$root"/.gpu/libfa3jit.so* | head -n 1)
export FA3JIT_LIBRARY FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-/tmp/fa3c}
g=$root/.gpu/fa3-gen
