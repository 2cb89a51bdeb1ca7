#!/usr/bin/env bash
# Installs what fa3jit needs to build and test on Debian 12 (bookworm), then fetches the pinned
# PTX Compiler API static library into .deps/ (not committed). Used by tools/setup-and-run.sh and
# by CI (.ci/run). Runs as root, or as a user with sudo.
#
# Expects the CUDA 13.0 toolkit (headers, nvJitLink, NVRTC, ptxas) in $FA3JIT_CUDA_DIR
# (default /usr/local/cuda). The toolkit's PTX Compiler static library is not on every machine,
# so the same release (13.0.88) comes from its PyPI wheel:
#   .deps/nvidia/cu13/lib/libnvptxcompiler_static.a, .deps/nvidia/cu13/include/nvPTXCompiler.h
set -euo pipefail
cd "$(dirname "$0")/.."

PTXC_VERSION=13.0.88
CUDA_DIR=${FA3JIT_CUDA_DIR:-/usr/local/cuda}
PACKAGES=(meson ninja-build gcc libc6-dev pkg-config python3 python3-pip python3-pytest
          python3-numpy libcmocka-dev libxxhash-dev unzip)

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then
    sudo_cmd=(sudo)
fi

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -q
    "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}"
else
    echo "install-deps: Debian packages already installed"
fi

for f in bin/ptxas include/cuda.h include/nvJitLink.h lib64/libnvJitLink.so; do
    if [ ! -e "$CUDA_DIR/$f" ]; then
        echo "install-deps: $CUDA_DIR/$f is missing: fa3jit needs the CUDA 13.0 toolkit there" \
             "(set FA3JIT_CUDA_DIR to its root)" >&2
        exit 1
    fi
done

# pytest runs the Python layer's CPU tests (meson test 'python'). Debian's python3 gets it from
# python3-pytest above; a python3 of its own earlier on PATH (pyenv, a venv) gets it from PyPI
# (Debian's own python3 refuses pip installs: PEP 668).
if ! python3 -c 'import pytest' 2>/dev/null; then
    echo "install-deps: pip install pytest (for $(command -v python3))"
    python3 -m pip install --disable-pip-version-check --quiet 'pytest>=7'
fi
# numpy for the CPU emulator's test (meson test 'ctasim'): python3-numpy above, or the same way.
if ! python3 -c 'import numpy' 2>/dev/null; then
    echo "install-deps: pip install numpy (for $(command -v python3))"
    python3 -m pip install --disable-pip-version-check --quiet 'numpy>=1.24'
fi

lib=.deps/nvidia/cu13/lib/libnvptxcompiler_static.a
if [ -f "$lib" ] && ls .deps/nvidia_nvptxcompiler-"$PTXC_VERSION"-*.whl >/dev/null 2>&1; then
    echo "install-deps: PTX Compiler $PTXC_VERSION already in .deps/"
else
    echo "install-deps: fetching nvidia-nvptxcompiler==$PTXC_VERSION into .deps/"
    rm -rf .deps/nvidia .deps/nvidia_nvptxcompiler-*.whl
    python3 -m pip download --no-deps --disable-pip-version-check --quiet \
        "nvidia-nvptxcompiler==$PTXC_VERSION" -d .deps
    (cd .deps && unzip -o -q nvidia_nvptxcompiler-"$PTXC_VERSION"-*.whl)
    test -f "$lib" && test -f .deps/nvidia/cu13/include/nvPTXCompiler.h
fi
