"""Configs, contexts and kernels over the C API, without torch: emit_ptx, get_kernel, version."""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass

from . import _args, _lib
from ._lib import check, lib

__all__ = ["Context", "CacheWarning", "KernelInfo", "emit_ptx", "get_kernel", "version",
           "default_context", "configure", "make_config"]

_DTYPES = {
    "bf16": _lib.FA3_DTYPE_BF16, "bfloat16": _lib.FA3_DTYPE_BF16,
    "torch.bfloat16": _lib.FA3_DTYPE_BF16,
    "fp16": _lib.FA3_DTYPE_FP16, "float16": _lib.FA3_DTYPE_FP16, "half": _lib.FA3_DTYPE_FP16,
    "torch.float16": _lib.FA3_DTYPE_FP16,
    # FP8 (OCP e4m3, torch.float8_e4m3fn): Q/K/V only; O is bf16 (the default) or fp16.
    "e4m3": _lib.FA3_DTYPE_E4M3, "fp8": _lib.FA3_DTYPE_E4M3, "float8_e4m3fn": _lib.FA3_DTYPE_E4M3,
    "torch.float8_e4m3fn": _lib.FA3_DTYPE_E4M3,
}
DTYPE_NAMES = {_lib.FA3_DTYPE_BF16: "bf16", _lib.FA3_DTYPE_FP16: "fp16",
               _lib.FA3_DTYPE_E4M3: "e4m3"}


def _dtype_code(dtype, name="dtype") -> int:
    key = str(dtype).lower()   # 'bf16', 'fp16', ... and torch dtypes, without importing torch
    if key not in _DTYPES:
        hint = (" (FP8 e5m2 is not supported: quantize to e4m3)" if "e5m2" in key else "")
        names = "'bf16', 'fp16'" + (", 'e4m3'" if name == "dtype" else "")
        raise ValueError(f"fa3jit: {name} {dtype!r} is not supported (supported: {names}){hint}")
    return _DTYPES[key]


def make_config(head_dim=128, dtype="bf16", causal=False, softcap=False, window=False,
                head_dim_v=None, *, block_n=0, stages=0, out_dtype=None) -> _lib.Config:
    """A (non-canonical) fa3_config. window=True selects FA3_MASK_LOCAL (which also covers causal
    with a window: the window sizes are launch arguments); causal alone FA3_MASK_CAUSAL.
    out_dtype: the dtype of O, None = the default (dtype itself for bf16/fp16, bf16 for e4m3);
    e4m3 also takes 'fp16' (the library refuses other pairs, naming them)."""
    cfg = _lib.new_config()
    cfg.head_dim = _args.c_int("head_dim", head_dim)
    cfg.head_dim_v = 0 if head_dim_v is None else _args.c_int("head_dim_v", head_dim_v)
    cfg.dtype = _dtype_code(dtype)
    cfg.out_dtype = (_lib.FA3_DTYPE_AUTO if out_dtype is None
                     else _dtype_code(out_dtype, "out_dtype"))
    causal, softcap, window = (_args.flag("causal", causal), _args.flag("softcap", softcap),
                               _args.flag("window", window))
    cfg.mask = (_lib.FA3_MASK_LOCAL if window else
                _lib.FA3_MASK_CAUSAL if causal else _lib.FA3_MASK_NONE)
    cfg.softcap = 1 if softcap else 0
    cfg.block_n = _args.c_int("block_n", block_n)
    cfg.stages = _args.c_int("stages", stages)
    return cfg


def _config_key(cfg: _lib.Config) -> tuple:
    return tuple(getattr(cfg, name) for name, _ in cfg._fields_ if name != "struct_size")


def _describe(cfg: _lib.Config) -> str:
    buf = ctypes.create_string_buffer(256)
    check(lib.fa3_config_describe(ctypes.byref(cfg), buf, len(buf)))
    return buf.value.decode()


def emit_ptx(head_dim=128, dtype="bf16", causal=False, softcap=False, window=False,
             head_dim_v=None, *, block_n=0, stages=0, out_dtype=None) -> str:
    """PTX text of the kernel for this config (no GPU, no driver needed)."""
    cfg = make_config(head_dim, dtype, causal, softcap, window, head_dim_v,
                      block_n=block_n, stages=stages, out_dtype=out_dtype)
    ptr = ctypes.c_void_p()
    n = ctypes.c_size_t()
    check(lib.fa3_emit_ptx(ctypes.byref(cfg), ctypes.byref(ptr), ctypes.byref(n)))
    try:
        return ctypes.string_at(ptr.value, n.value).decode("ascii")
    finally:
        lib.fa3_free(ptr)


def version() -> str:
    """Version string of the loaded C library (e.g. '0.1.0')."""
    return lib.fa3_version_string().decode()


@dataclass(frozen=True)
class KernelInfo:
    """What fa3_kernel_get_info reports for a compiled kernel."""
    description: str        # e.g. "hd128 bf16 causal sm_90a bn128 st2" (canonical config)
    head_dim: int
    head_dim_v: int
    dtype: str              # 'bf16' / 'fp16' / 'e4m3'
    mask: str               # 'none' / 'causal' / 'local'
    softcap: bool
    backend: str            # 'ptx-compiler' / 'nvjitlink' / 'driver-jit'
    cache_key: str          # 32 hex digits
    registers: int          # per thread (-1 unknown)
    spill_store_bytes: int  # -1 unknown
    spill_load_bytes: int   # -1 unknown
    stack_bytes: int        # -1 unknown
    shared_bytes: int       # dynamic shared memory per CTA
    threads: int            # per CTA
    block_m: int
    block_n: int
    stages: int
    source: str             # 'compiled' / 'disk' / 'memory'
    compile_ms: float
    compile_log: str
    cubin_size: int
    out_dtype: str          # dtype of O: 'bf16' / 'fp16' (resolved: never 'auto')

    @property
    def spill_bytes(self) -> int:
        """Spill stores + loads (-1 if unknown)."""
        if self.spill_store_bytes < 0 or self.spill_load_bytes < 0:
            return -1
        return self.spill_store_bytes + self.spill_load_bytes

    def __getitem__(self, key):  # dict-style access too: info['registers']
        return getattr(self, key)


def _kernel_info(kernel: int) -> KernelInfo:
    info = _lib.kernel_info(kernel)
    c = info.config
    return KernelInfo(
        description=_describe(c),
        head_dim=c.head_dim, head_dim_v=c.head_dim_v,
        dtype=DTYPE_NAMES.get(c.dtype, str(c.dtype)),
        mask={0: "none", 1: "causal", 2: "local"}.get(c.mask, str(c.mask)),
        softcap=bool(c.softcap),
        backend=lib.fa3_backend_name(info.backend).decode(),
        cache_key=info.cache_key.decode(),
        registers=info.num_regs, spill_store_bytes=info.spill_store_bytes,
        spill_load_bytes=info.spill_load_bytes, stack_bytes=info.stack_bytes,
        shared_bytes=info.shared_bytes, threads=info.threads,
        block_m=info.block_m, block_n=info.block_n, stages=info.stages,
        source=_lib.SOURCES.get(info.source, str(info.source)),
        compile_ms=info.compile_ms,
        compile_log=(info.compile_log or b"").decode("utf-8", "replace"),
        cubin_size=info.cubin_size,
        out_dtype=DTYPE_NAMES.get(c.out_dtype, str(c.out_dtype)),
    )


def _context_options(cache_dir, disable_disk_cache, backend) -> tuple:
    """Context's (and configure's) arguments checked: (cache_dir, disable_disk_cache, backend)."""
    if not isinstance(backend, str) or backend not in _lib.BACKENDS:
        raise ValueError(f"fa3jit: backend {backend!r} is not one of {sorted(_lib.BACKENDS)}")
    if cache_dir is not None:
        cache_dir = _args.path("cache_dir", cache_dir)
    return cache_dir, _args.flag("disable_disk_cache", disable_disk_cache), backend


class CacheWarning(UserWarning):
    """A context's disk cache does not work as asked (fa3_context_warning: e.g. a folder that
    cannot be created or written). Kernels still work, from memory: they are compiled again in
    every new process. Issued once per context, when the problem first appears."""


def _warn_from_caller(text: str) -> None:
    """warnings.warn(CacheWarning) attributed to the first frame outside this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    level, f = 1, sys._getframe(0)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f, level = f.f_back, level + 1
    warnings.warn(f"fa3jit: {text}", CacheWarning, stacklevel=level)


def _free_context(handle: int) -> None:
    lib.fa3_context_free(handle)


class Context:
    """An fa3_context: the C in-memory kernel table plus the disk-cache settings.

    cache_dir: a str, bytes or os.PathLike folder (``cache_dir`` gives it back as a str, through
    os.fsdecode), or None for the library's default ($FA3JIT_CACHE_DIR, else
    $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit); backend one of 'auto', 'ptx-compiler',
    'nvjitlink', 'driver-jit'.

    Kernels belong to the context and stay valid while it lives. close(), the end of a ``with``
    block, or the garbage collection of a context no one holds frees them (never while another
    thread uses the context, or while launches on its kernels are queued); a closed context raises
    ValueError. A context still alive at interpreter exit is left to the process's end (no library
    call runs during shutdown). A disk-cache problem is ``warning`` and a CacheWarning, once."""

    def __init__(self, cache_dir=None, disable_disk_cache=False, backend="auto"):
        cache_dir, disable_disk_cache, backend = _context_options(cache_dir, disable_disk_cache,
                                                                  backend)
        opts = _lib.new_context_options()
        opts.cache_dir = cache_dir              # bytes; the library copies the string
        opts.disable_disk_cache = int(disable_disk_cache)
        opts.backend = _lib.BACKENDS[backend]
        handle = ctypes.c_void_p()
        check(lib.fa3_context_create(ctypes.byref(handle), ctypes.byref(opts)))
        self._handle = handle.value
        self._free = weakref.finalize(self, _free_context, handle.value)
        self._free.atexit = False
        self._lock = threading.Lock()
        self._kernels = {}   # config key tuple -> fa3_kernel * (int)
        self._warned = False
        self._note_warning()

    @property
    def handle(self) -> int:
        if not self._handle:
            raise ValueError("fa3jit: this Context is closed (close() or the end of its with "
                             "block freed it)")
        return self._handle

    @property
    def warning(self) -> str:
        """The disk-cache problem this context met first, with the path and the failing call
        (fa3_context_warning), or "" when there is none."""
        return os.fsdecode(lib.fa3_context_warning(self.handle))

    def _note_warning(self) -> None:
        if self._warned:
            return
        text = self.warning
        if not text:
            return
        with self._lock:
            if self._warned:
                return
            self._warned = True
        _warn_from_caller(text)

    @property
    def backend(self) -> str:
        return lib.fa3_backend_name(lib.fa3_context_backend(self.handle)).decode()

    @property
    def cache_dir(self):
        d = lib.fa3_context_cache_dir(self.handle)
        return os.fsdecode(d) if d else None

    def kernel_handle(self, cfg: _lib.Config) -> int:
        """fa3_kernel * for cfg; fa3_jit_get_kernel runs once per config key in this context."""
        key = _config_key(cfg)
        k = self._kernels.get(key)
        if k is not None:
            return k
        out = ctypes.c_void_p()
        # Outside the lock: the C side is thread-safe and builds one config once.
        try:
            check(lib.fa3_jit_get_kernel(self.handle, ctypes.byref(cfg), ctypes.byref(out)))
        finally:
            self._note_warning()
        with self._lock:
            return self._kernels.setdefault(key, out.value)

    def get_kernel(self, head_dim=128, dtype="bf16", causal=False, softcap=False, window=False,
                   head_dim_v=None, *, block_n=0, stages=0, out_dtype=None) -> KernelInfo:
        cfg = make_config(head_dim, dtype, causal, softcap, window, head_dim_v,
                          block_n=block_n, stages=stages, out_dtype=out_dtype)
        return _kernel_info(self.kernel_handle(cfg))

    def close(self) -> None:
        """Frees the context and its kernels now; closing again does nothing."""
        self._handle = None
        self._kernels = {}
        self._free()            # runs _free_context once, whoever calls it first

    def __enter__(self):
        self.handle             # a closed context cannot be entered again
        return self

    def __exit__(self, *exc):
        self.close()


_default_lock = threading.Lock()
_default = None
_default_options = {}


def configure(cache_dir=None, disable_disk_cache=False, backend="auto") -> None:
    """Options of the process-wide context; only before its first use (else RuntimeError)."""
    global _default_options
    _context_options(cache_dir, disable_disk_cache, backend)
    with _default_lock:
        if _default is not None:
            raise RuntimeError("fa3jit.configure() must be called before the first kernel is "
                               "requested (the process-wide context already exists)")
        _default_options = dict(cache_dir=cache_dir, disable_disk_cache=disable_disk_cache,
                                backend=backend)


def default_context() -> Context:
    """The process-wide context, created on first use (thread-safe). Never freed: its kernels
    and their loaded modules live as long as the process."""
    global _default
    ctx = _default
    if ctx is None:
        with _default_lock:
            if _default is None:
                _default = Context(**_default_options)
            ctx = _default
    return ctx


def get_kernel(head_dim=128, dtype="bf16", causal=False, softcap=False, window=False,
               head_dim_v=None, *, block_n=0, stages=0, out_dtype=None) -> KernelInfo:
    """Compiles (or fetches from the caches) the kernel for this config in the process-wide
    context and returns its KernelInfo. Needs no GPU (except with the driver-jit backend)."""
    return default_context().get_kernel(head_dim, dtype, causal, softcap, window, head_dim_v,
                                        block_n=block_n, stages=stages, out_dtype=out_dtype)
