#!/bin/sh
# libfa3jit.so must export the fa3_ API and nothing else: the statically linked PTX Compiler API's
# symbols, if exported, interpose on the CUDA driver's JIT compiler and crash processes that load
# both (seen on the H200: segfaults in fa3_fwd until src/fa3jit.map hid them).
lib=$1
extra=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^fa3_' | grep -v '^_\(init\|fini\)$')
if [ -n "$extra" ]; then
  echo "libfa3jit.so exports non-fa3 symbols:"; echo "$extra" | head -20
  echo "1 passed, 1 failed"; exit 1
fi
n=$(nm -D --defined-only "$lib" | grep -c ' fa3_')
[ "$n" -ge 20 ] || { echo "only $n fa3_ symbols exported"; echo "0 passed, 1 failed"; exit 1; }
echo "exports: $n fa3_ symbols, nothing else"
echo "1 passed, 0 failed"
