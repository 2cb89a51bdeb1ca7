"""ctypes binding of the fa3jit C library (include/fa3jit.h): library lookup, struct mirrors,
function prototypes, and the status → exception rule.

Nothing here imports torch, touches a GPU or loads libcuda: the shared library itself loads the
CUDA driver lazily, on the first launch.

Lookup order of the shared library (first hit wins, done once, at first use — never at import):
  1. $FA3JIT_LIBRARY (a path to libfa3jit.so; if set, it must exist — no fallback);
  2. the meson build folders of the source tree this package sits in, when it sits in one
     (<repo>/build/libfa3jit.so, then any <repo>/build*/libfa3jit.so, newest first);
  3. the installed library, through ctypes.util.find_library("fa3jit").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

__all__ = [
    "Fa3Error", "LibraryNotFoundError", "lib", "check", "library_path", "candidate_paths",
    "Config", "ContextOptions", "KernelInfo", "FwdArgs", "QuantizeArgs", "KvcacheAppendArgs",
    "new_config", "new_context_options", "new_fwd_args", "new_quantize_args",
    "new_kvcache_append_args", "kernel_info",
]

# ---------------------------------------------------------------- enums (pinned values, fa3jit.h)
FA3_OK = 0
FA3_ERR_BAD_HEAD_DIM = 2
STATUS_NAMES = {
    0: "FA3_OK", 1: "FA3_ERR_INVALID_ARGUMENT", 2: "FA3_ERR_BAD_HEAD_DIM",
    3: "FA3_ERR_BAD_HEAD_DIM_V", 4: "FA3_ERR_BAD_DTYPE", 5: "FA3_ERR_BAD_MASK",
    6: "FA3_ERR_BAD_ARCH", 7: "FA3_ERR_BAD_SHAPE", 8: "FA3_ERR_BAD_STRIDE",
    9: "FA3_ERR_BAD_ALIGNMENT", 10: "FA3_ERR_BAD_SCALE", 11: "FA3_ERR_BAD_SOFTCAP",
    12: "FA3_ERR_BAD_WINDOW", 13: "FA3_ERR_OUT_OF_MEMORY", 14: "FA3_ERR_COMPILE",
    15: "FA3_ERR_LINK", 16: "FA3_ERR_NO_DRIVER", 17: "FA3_ERR_CUDA", 18: "FA3_ERR_CACHE_IO",
    19: "FA3_ERR_UNSUPPORTED", 20: "FA3_ERR_BAD_BACKEND", 21: "FA3_ERR_INTERNAL",
    22: "FA3_ERR_BAD_BLOCK", 23: "FA3_ERR_NO_NVRTC",
}

FA3_DTYPE_BF16, FA3_DTYPE_FP16, FA3_DTYPE_E4M3 = 0, 1, 2
FA3_DTYPE_AUTO = -1
FA3_MASK_NONE, FA3_MASK_CAUSAL, FA3_MASK_LOCAL = 0, 1, 2
FA3_ARCH_SM90A = 90
BACKENDS = {"auto": 0, "ptx-compiler": 1, "nvjitlink": 2, "driver-jit": 3}
SOURCES = {0: "compiled", 1: "disk", 2: "memory"}


# ---------------------------------------------------------------- struct mirrors
# Enums are C ints (c_int). Every struct starts with struct_size ("Growing structs" in fa3jit.h):
# the new_* helpers below initialise it through the *_sized functions with the mirror's own size,
# so a library built from a later fa3jit.h reads only the fields this mirror has. Layout on
# x86-64 / aarch64 (LP64), checked against a C program that printed sizeof/offsetof of the
# header's structs:
#   fa3_config           56 bytes: struct_size@0, 13 ints at 4,8,...,52
#   fa3_context_options  24 bytes: struct_size@0 cache_dir@8 disable_disk_cache@16 backend@20
#   fa3_kernel_info     168 bytes: struct_size@0 config@4 backend@60 cache_key[33]@64
#                                  num_regs@100 ... compile_ms@144 compile_log@152
#                                  cubin_size@160
#   fa3_fwd_args        304 bytes: struct_size@0 q,k,v,o,lse@8..40 batch@48 ... num_heads_k@64
#                                  q_batch_stride@72 ... o_head_stride@160 softmax_scale@168
#                                  softcap@172 window_size_left@176 window_size_right@180
#                                  descale_q,k,v@184..200 descales_trusted@208
#                                  cu_seqlens_q,k@216,224 seqused_k@232 max_seqlen_q,k@240,244
#                                  page_table@248 num_pages@256 page_size@260
#                                  max_pages_per_seq@264 page_table_stride@272
#                                  num_splits@280 workspace@288 workspace_bytes@296
#   fa3_quantize_args   128 bytes: struct_size@0 dtype@4 x@8 out@16 descale@24 batch@32 ...
#                                  num_descale_heads@48 x_batch_stride@56 ... out_head_stride@96
#                                  hadamard@104 signs@112 seed@120
#   fa3_kvcache_append_args 224 bytes: struct_size@0 dtype@4 k_new,v_new,k_cache,v_cache@8..32
#                                  cache_seqlens@40 cache_batch_idx@48 seqused_out@56 batch@64
#                                  ... seqlen_cache@88 k_new_batch_stride@96 ...
#                                  v_cache_head_stride@184 page_table@192 num_pages@200
#                                  page_size@204 max_pages_per_seq@208 page_table_stride@216
class Config(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("head_dim", ctypes.c_int),
        ("head_dim_v", ctypes.c_int),
        ("dtype", ctypes.c_int),      # fa3_dtype
        ("mask", ctypes.c_int),       # fa3_mask
        ("softcap", ctypes.c_int),
        ("arch", ctypes.c_int),       # fa3_arch
        ("block_n", ctypes.c_int),
        ("stages", ctypes.c_int),
        ("out_dtype", ctypes.c_int),  # fa3_dtype, FA3_DTYPE_AUTO = -1
        ("varlen", ctypes.c_int),
        ("paged_kv", ctypes.c_int),
        ("split_kv", ctypes.c_int),
        ("pack_gqa", ctypes.c_int),
        ("block_m", ctypes.c_int),    # 0 = the planner's; 64 = the decode tile
    ]


class ContextOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cache_dir", ctypes.c_char_p),
        ("disable_disk_cache", ctypes.c_int),
        ("backend", ctypes.c_int),    # fa3_backend
    ]


class KernelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("config", Config),
        ("backend", ctypes.c_int),    # fa3_backend
        ("cache_key", ctypes.c_char * 33),
        ("num_regs", ctypes.c_int),
        ("spill_store_bytes", ctypes.c_int),
        ("spill_load_bytes", ctypes.c_int),
        ("stack_bytes", ctypes.c_int),
        ("shared_bytes", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("block_m", ctypes.c_int),
        ("block_n", ctypes.c_int),
        ("stages", ctypes.c_int),
        ("source", ctypes.c_int),     # fa3_kernel_source
        ("compile_ms", ctypes.c_double),
        ("compile_log", ctypes.c_char_p),
        ("cubin_size", ctypes.c_size_t),
    ]


class FwdArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),     # float * (device pointer) or NULL
        ("batch", ctypes.c_int),
        ("seqlen_q", ctypes.c_int),
        ("seqlen_k", ctypes.c_int),
        ("num_heads", ctypes.c_int),
        ("num_heads_k", ctypes.c_int),
        ("q_batch_stride", ctypes.c_int64),
        ("q_row_stride", ctypes.c_int64),
        ("q_head_stride", ctypes.c_int64),
        ("k_batch_stride", ctypes.c_int64),
        ("k_row_stride", ctypes.c_int64),
        ("k_head_stride", ctypes.c_int64),
        ("v_batch_stride", ctypes.c_int64),
        ("v_row_stride", ctypes.c_int64),
        ("v_head_stride", ctypes.c_int64),
        ("o_batch_stride", ctypes.c_int64),
        ("o_row_stride", ctypes.c_int64),
        ("o_head_stride", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("window_size_left", ctypes.c_int),
        ("window_size_right", ctypes.c_int),
        ("descale_q", ctypes.c_void_p),   # float * (device) or NULL
        ("descale_k", ctypes.c_void_p),
        ("descale_v", ctypes.c_void_p),
        ("descales_trusted", ctypes.c_int),
        ("cu_seqlens_q", ctypes.c_void_p),  # int32 * (device) or NULL
        ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
        ("max_seqlen_q", ctypes.c_int),
        ("max_seqlen_k", ctypes.c_int),
        ("page_table", ctypes.c_void_p),
        ("num_pages", ctypes.c_int),
        ("page_size", ctypes.c_int),
        ("max_pages_per_seq", ctypes.c_int),
        ("page_table_stride", ctypes.c_int64),
        ("num_splits", ctypes.c_int),
        ("workspace", ctypes.c_void_p),   # device pointer or NULL (the library allocates)
        ("workspace_bytes", ctypes.c_size_t),
    ]


class QuantizeArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),          # fa3_dtype of x
        ("x", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("descale", ctypes.c_void_p),     # float * (device)
        ("batch", ctypes.c_int),
        ("seqlen", ctypes.c_int),
        ("num_heads", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("num_descale_heads", ctypes.c_int),
        ("x_batch_stride", ctypes.c_int64),
        ("x_row_stride", ctypes.c_int64),
        ("x_head_stride", ctypes.c_int64),
        ("out_batch_stride", ctypes.c_int64),
        ("out_row_stride", ctypes.c_int64),
        ("out_head_stride", ctypes.c_int64),
        ("hadamard", ctypes.c_int),
        ("signs", ctypes.c_void_p),       # const float * (device) or NULL
        ("seed", ctypes.c_uint64),
    ]


class KvcacheAppendArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),          # fa3_dtype of the cache and the new rows
        ("k_new", ctypes.c_void_p),
        ("v_new", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("cache_seqlens", ctypes.c_void_p),    # const int32 * (device)
        ("cache_batch_idx", ctypes.c_void_p),  # const int32 * (device) or NULL
        ("seqused_out", ctypes.c_void_p),      # int32 * (device) or NULL
        ("batch", ctypes.c_int),
        ("seqlen_new", ctypes.c_int),
        ("num_heads_k", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("head_dim_v", ctypes.c_int),
        ("batch_cache", ctypes.c_int),
        ("seqlen_cache", ctypes.c_int),
        ("k_new_batch_stride", ctypes.c_int64),
        ("k_new_row_stride", ctypes.c_int64),
        ("k_new_head_stride", ctypes.c_int64),
        ("v_new_batch_stride", ctypes.c_int64),
        ("v_new_row_stride", ctypes.c_int64),
        ("v_new_head_stride", ctypes.c_int64),
        ("k_cache_batch_stride", ctypes.c_int64),
        ("k_cache_row_stride", ctypes.c_int64),
        ("k_cache_head_stride", ctypes.c_int64),
        ("v_cache_batch_stride", ctypes.c_int64),
        ("v_cache_row_stride", ctypes.c_int64),
        ("v_cache_head_stride", ctypes.c_int64),
        ("page_table", ctypes.c_void_p),       # const int32 * (device) or NULL
        ("num_pages", ctypes.c_int),
        ("page_size", ctypes.c_int),
        ("max_pages_per_seq", ctypes.c_int),
        ("page_table_stride", ctypes.c_int64),
    ]


# Sizes derived from the header's layout (LP64). A mismatch means this file and fa3jit.h disagree.
EXPECTED_SIZES_LP64 = {Config: 60, ContextOptions: 24, KernelInfo: 168, FwdArgs: 304,
                       QuantizeArgs: 128, KvcacheAppendArgs: 224}
if ctypes.sizeof(ctypes.c_void_p) == 8 and ctypes.sizeof(ctypes.c_long) == 8:
    for _t, _n in EXPECTED_SIZES_LP64.items():
        if ctypes.sizeof(_t) != _n:  # pragma: no cover - a programming error in this file
            raise AssertionError(f"fa3jit: ctypes mirror {_t.__name__} is {ctypes.sizeof(_t)} "
                                 f"bytes, fa3jit.h says {_n}")
    del _t, _n


# ---------------------------------------------------------------- errors
class Fa3Error(RuntimeError):
    """A non-zero fa3_status from the C library. ``status`` is the integer code, ``status_name``
    its FA3_ERR_* name, ``message`` the library's message for the failing call."""

    def __init__(self, status: int, message: str):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, f"status {self.status}")
        self.message = message
        super().__init__(f"{message} [{self.status_name}]")


class LibraryNotFoundError(OSError):
    """libfa3jit.so could not be found or loaded, or the library found is not fa3jit (it lacks an
    fa3_ function: the message names the file and the function); the message lists every path
    tried."""


# ---------------------------------------------------------------- library lookup
def _repo_root() -> Path:
    # python/fa3jit/_lib.py → parents[0] python/fa3jit, [1] python, [2] the repository root.
    return Path(__file__).resolve().parents[2]


def candidate_paths() -> list:
    """Paths tried for the library, in order, before ctypes.util.find_library("fa3jit")."""
    env = os.environ.get("FA3JIT_LIBRARY")
    if env:
        return [env]
    root = _repo_root()
    if not (root / "meson.build").is_file():      # an installed package: no source tree around
        return []
    paths = [root / "build" / "libfa3jit.so"]
    others = [p for p in root.glob("build*/libfa3jit.so") if p.parent.name != "build"]
    others.sort(key=lambda p: (-_mtime(p), str(p)))
    paths += others
    return [str(p) for p in paths]


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


_lock = threading.Lock()
_lib = None
_lib_path = None


def _load():
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        env = os.environ.get("FA3JIT_LIBRARY")
        if env:
            if not os.path.isfile(env):
                raise LibraryNotFoundError(
                    f"fa3jit: $FA3JIT_LIBRARY={env!r} is not a file "
                    f"(build the C library with `meson setup build && ninja -C build`)")
            try:
                _lib, _lib_path = _open(env), env
            except OSError as e:
                raise LibraryNotFoundError(
                    f"fa3jit: cannot use $FA3JIT_LIBRARY={env!r}: {e}") from None
            return _lib
        errors = []
        for p in candidate_paths():
            tried.append(p)
            if os.path.isfile(p):
                try:
                    _lib, _lib_path = _open(p), p
                    return _lib
                except OSError as e:
                    errors.append(str(e))
        found = ctypes.util.find_library("fa3jit")
        tried.append(f"ctypes.util.find_library('fa3jit') -> {found}")
        if found:
            try:
                _lib, _lib_path = _open(found), found
                return _lib
            except OSError as e:
                errors.append(str(e))
        msg = ("fa3jit: the C library libfa3jit.so was not found. Build it (`meson setup build && "
               "ninja -C build` in the repository), install it, or set $FA3JIT_LIBRARY to its "
               "path. Tried:\n  " + "\n  ".join(tried))
        if errors:
            msg += "\nLoad errors:\n  " + "\n  ".join(errors)
        raise LibraryNotFoundError(msg)


def library_path() -> str:
    """Path of the loaded shared library (loads it if needed)."""
    _load()
    return _lib_path


def _open(path: str):
    """The library at path, its fa3_ prototypes declared. OSError (the message starting with path)
    when it cannot be loaded, LibraryNotFoundError when it lacks a function this package calls:
    another library, or a libfa3jit.so older than this package."""
    try:
        handle = ctypes.CDLL(path)
    except OSError as e:
        raise OSError(f"{path}: {e}") from None
    return _declare(handle, path)


def _declare(h, path):
    P = ctypes.POINTER
    vp, cp, st = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int

    def fn(name, restype, *argtypes):
        try:
            f = getattr(h, name)
        except AttributeError:
            raise LibraryNotFoundError(
                f"{path}: not the fa3jit library, or older than this package: it has no {name} "
                f"(libfa3jit.so exports every fa3_ function this package calls)") from None
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("fa3_version_number", ctypes.c_uint)
    fn("fa3_version_string", cp)
    fn("fa3_strerror", cp, st)
    fn("fa3_last_error_message", cp)
    sz = ctypes.c_size_t
    fn("fa3_config_init_sized", None, P(Config), sz)
    fn("fa3_config_canonicalize", st, P(Config), P(Config))
    fn("fa3_config_describe", st, P(Config), cp, ctypes.c_size_t)
    fn("fa3_emit_ptx", st, P(Config), P(vp), P(ctypes.c_size_t))
    fn("fa3_free", None, vp)
    fn("fa3_context_options_init_sized", None, P(ContextOptions), sz)
    fn("fa3_context_create", st, P(vp), P(ContextOptions))
    fn("fa3_context_free", None, vp)
    fn("fa3_context_backend", ctypes.c_int, vp)
    fn("fa3_context_cache_dir", cp, vp)
    fn("fa3_context_warning", cp, vp)
    fn("fa3_backend_name", cp, ctypes.c_int)
    fn("fa3_jit_get_kernel", st, vp, P(Config), P(vp))
    fn("fa3_kernel_get_info_sized", st, vp, P(KernelInfo), sz)
    fn("fa3_kernel_get_cubin", st, vp, P(vp), P(ctypes.c_size_t))
    fn("fa3_fwd_args_init_sized", None, P(FwdArgs), sz)
    fn("fa3_fwd_args_set_contiguous", None, P(FwdArgs), ctypes.c_int, ctypes.c_int)
    fn("fa3_fwd", st, vp, P(FwdArgs), vp)
    fn("fa3_fwd_flops", ctypes.c_double, P(Config), P(FwdArgs))
    fn("fa3_fwd_tune", st, P(Config), P(FwdArgs), ctypes.c_int)
    fn("fa3_fwd_workspace_size", st, vp, P(FwdArgs), P(ctypes.c_size_t))
    fn("fa3_quantize_args_init_sized", None, P(QuantizeArgs), sz)
    fn("fa3_quantize_fp8", st, vp, P(QuantizeArgs), vp)
    fn("fa3_hadamard_signs", st, ctypes.c_uint64, ctypes.c_int, P(ctypes.c_float))
    fn("fa3_kvcache_append_args_init_sized", None, P(KvcacheAppendArgs), sz)
    fn("fa3_kvcache_append", st, vp, P(KvcacheAppendArgs), vp)
    return h


class _LazyLib:
    """``lib.fa3_xxx`` loads the library on first attribute access."""

    def __getattr__(self, name):
        return getattr(_load(), name)


lib = _LazyLib()


def _decode(b) -> str:
    return b.decode("utf-8", "replace") if b else ""


def check(status: int) -> None:
    """Raise Fa3Error for a non-zero fa3_status (message: fa3_last_error_message, else
    fa3_strerror). Call it right after the C call, in the same thread."""
    if status == FA3_OK:
        return
    h = _load()
    msg = _decode(h.fa3_last_error_message()) or _decode(h.fa3_strerror(status))
    raise Fa3Error(status, msg)


# ---------------------------------------------------------------- initialised structs
def new_config() -> Config:
    """An fa3_config with fa3_config_init's defaults (struct_size: this mirror's size)."""
    cfg = Config()
    lib.fa3_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg))
    return cfg


def new_context_options() -> ContextOptions:
    """An fa3_context_options with fa3_context_options_init's defaults."""
    opts = ContextOptions()
    lib.fa3_context_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
    return opts


def new_fwd_args() -> FwdArgs:
    """An fa3_fwd_args with fa3_fwd_args_init's defaults."""
    args = FwdArgs()
    lib.fa3_fwd_args_init_sized(ctypes.byref(args), ctypes.sizeof(args))
    return args


def new_quantize_args() -> QuantizeArgs:
    """An fa3_quantize_args with fa3_quantize_args_init's defaults."""
    args = QuantizeArgs()
    lib.fa3_quantize_args_init_sized(ctypes.byref(args), ctypes.sizeof(args))
    return args


def new_kvcache_append_args() -> KvcacheAppendArgs:
    """An fa3_kvcache_append_args with fa3_kvcache_append_args_init's defaults."""
    args = KvcacheAppendArgs()
    lib.fa3_kvcache_append_args_init_sized(ctypes.byref(args), ctypes.sizeof(args))
    return args


def kernel_info(kernel: int) -> KernelInfo:
    """fa3_kernel_get_info of a kernel handle (Fa3Error on failure)."""
    info = KernelInfo()
    check(lib.fa3_kernel_get_info_sized(kernel, ctypes.byref(info), ctypes.sizeof(info)))
    return info
