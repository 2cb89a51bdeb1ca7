"""fa3jit without a GPU and without torch: import, struct layout, library lookup, PTX emission,
errors, and compiling kernels through the library's default backend."""
import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fa3jit
from fa3jit import _core, _lib

PY_DIR = Path(__file__).resolve().parents[1]          # python/
REPO = PY_DIR.parent


def _library_or_none():
    try:
        return fa3jit.library_path()
    except fa3jit.LibraryNotFoundError:
        return None


LIBRARY = _library_or_none()
needs_library = pytest.mark.skipif(
    LIBRARY is None, reason="libfa3jit.so not built (meson setup build && ninja -C build, or set "
                            "$FA3JIT_LIBRARY)")


def _run_python(code, env_update=None, cwd=None, drop=()):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------ import, layout, lookup
def test_import_needs_neither_torch_nor_library():
    r = _run_python("""
        import sys
        import fa3jit
        assert 'torch' not in sys.modules, 'importing fa3jit imported torch'
        assert callable(fa3jit.flash_attn_func)
        print('ok')
        """, {"PYTHONPATH": str(PY_DIR), "FA3JIT_LIBRARY": "/nonexistent/libfa3jit.so"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_missing_library_error_names_paths_tried():
    r = _run_python("""
        import fa3jit
        try:
            fa3jit.emit_ptx()
        except fa3jit.LibraryNotFoundError as e:
            print(e)
        else:
            raise SystemExit('no error')
        """, {"PYTHONPATH": str(PY_DIR), "FA3JIT_LIBRARY": "/nonexistent/libfa3jit.so"})
    assert r.returncode == 0, r.stderr
    assert "/nonexistent/libfa3jit.so" in r.stdout


# Offsets printed by a C program compiled against include/fa3jit.h on x86-64 (LP64).
EXPECTED_LAYOUT = {
    "fa3_config": (_lib.Config, 60, {"struct_size": 0, "head_dim": 4, "head_dim_v": 8,
                                     "dtype": 12, "mask": 16, "softcap": 20, "arch": 24,
                                     "block_n": 28, "stages": 32, "out_dtype": 36,
                                     "varlen": 40, "paged_kv": 44, "split_kv": 48,
                                     "pack_gqa": 52, "block_m": 56}),
    "fa3_context_options": (_lib.ContextOptions, 24, {"struct_size": 0, "cache_dir": 8,
                                                      "disable_disk_cache": 16, "backend": 20}),
    "fa3_kernel_info": (_lib.KernelInfo, 168, {
        "struct_size": 0, "config": 4, "backend": 64, "cache_key": 68, "num_regs": 104,
        "spill_store_bytes": 108, "spill_load_bytes": 112, "stack_bytes": 116, "shared_bytes": 120,
        "threads": 124, "block_m": 128, "block_n": 132, "stages": 136, "source": 140,
        "compile_ms": 144, "compile_log": 152, "cubin_size": 160}),
    "fa3_fwd_args": (_lib.FwdArgs, 304, {
        "struct_size": 0, "q": 8, "k": 16, "v": 24, "o": 32, "lse": 40, "batch": 48,
        "seqlen_q": 52, "seqlen_k": 56, "num_heads": 60, "num_heads_k": 64,
        "q_batch_stride": 72, "q_row_stride": 80, "q_head_stride": 88, "k_batch_stride": 96,
        "k_row_stride": 104, "k_head_stride": 112, "v_batch_stride": 120, "v_row_stride": 128,
        "v_head_stride": 136, "o_batch_stride": 144, "o_row_stride": 152, "o_head_stride": 160,
        "softmax_scale": 168, "softcap": 172, "window_size_left": 176,
        "window_size_right": 180, "descale_q": 184, "descale_k": 192, "descale_v": 200,
        "descales_trusted": 208, "cu_seqlens_q": 216, "cu_seqlens_k": 224, "seqused_k": 232,
        "max_seqlen_q": 240, "max_seqlen_k": 244, "page_table": 248, "num_pages": 256,
        "page_size": 260, "max_pages_per_seq": 264, "page_table_stride": 272,
        "num_splits": 280, "workspace": 288, "workspace_bytes": 296}),
    "fa3_quantize_args": (_lib.QuantizeArgs, 128, {
        "struct_size": 0, "dtype": 4, "x": 8, "out": 16, "descale": 24, "batch": 32,
        "seqlen": 36, "num_heads": 40, "head_dim": 44, "num_descale_heads": 48,
        "x_batch_stride": 56, "x_row_stride": 64, "x_head_stride": 72, "out_batch_stride": 80,
        "out_row_stride": 88, "out_head_stride": 96, "hadamard": 104, "signs": 112,
        "seed": 120}),
    "fa3_kvcache_append_args": (_lib.KvcacheAppendArgs, 224, {
        "struct_size": 0, "dtype": 4, "k_new": 8, "v_new": 16, "k_cache": 24, "v_cache": 32,
        "cache_seqlens": 40, "cache_batch_idx": 48, "seqused_out": 56, "batch": 64,
        "seqlen_new": 68, "num_heads_k": 72, "head_dim": 76, "head_dim_v": 80,
        "batch_cache": 84, "seqlen_cache": 88, "k_new_batch_stride": 96, "k_new_row_stride": 104,
        "k_new_head_stride": 112, "v_new_batch_stride": 120, "v_new_row_stride": 128,
        "v_new_head_stride": 136, "k_cache_batch_stride": 144, "k_cache_row_stride": 152,
        "k_cache_head_stride": 160, "v_cache_batch_stride": 168, "v_cache_row_stride": 176,
        "v_cache_head_stride": 184, "page_table": 192, "num_pages": 200, "page_size": 204,
        "max_pages_per_seq": 208, "page_table_stride": 216}),
}


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="layout numbers are for LP64")
@pytest.mark.parametrize("cname", sorted(EXPECTED_LAYOUT))
def test_struct_mirrors_match_recorded_layout(cname):
    struct, size, offsets = EXPECTED_LAYOUT[cname]
    assert ctypes.sizeof(struct) == size
    assert [f[0] for f in struct._fields_] == list(offsets)      # every field, in order
    for field, off in offsets.items():
        assert getattr(struct, field).offset == off, field


@pytest.mark.skipif(not (REPO / "include" / "fa3jit.h").is_file() or shutil.which("cc") is None,
                    reason="needs a C compiler and the repository's include/fa3jit.h")
def test_struct_mirrors_match_the_header(tmp_path):
    """Compiles a program printing sizeof/offsetof of the header's structs and compares with the
    ctypes mirrors, field by field."""
    lines = []
    for cname, (struct, _, offsets) in EXPECTED_LAYOUT.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        for f in offsets:
            lines.append(f'printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));')
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include \"fa3jit.h\"\n"
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-I", str(REPO / "include"), str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    seen = 0
    for line in out.splitlines():
        cname, field, value = line.split()
        struct = EXPECTED_LAYOUT[cname][0]
        got = ctypes.sizeof(struct) if field == "size" else getattr(struct, field).offset
        assert got == int(value), f"{cname}.{field}: ctypes {got}, C {value}"
        seen += 1
    assert seen == sum(1 + len(o) for _, _, o in EXPECTED_LAYOUT.values())


@needs_library
def test_library_found_through_build_folder_search(tmp_path):
    """A copy of the package in a fake source tree finds <repo>/build*/libfa3jit.so, preferring
    <repo>/build/; outside a source tree (no meson.build: an installed package) it searches no
    build folders."""
    repo = tmp_path / "repo"
    shutil.copytree(PY_DIR / "fa3jit", repo / "python" / "fa3jit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = """
        import fa3jit
        print(fa3jit.candidate_paths())
        print(fa3jit.library_path())
        assert fa3jit.version()
        """
    env = {"PYTHONPATH": str(repo / "python")}
    (repo / "build-other").mkdir()
    (repo / "build-other" / "libfa3jit.so").symlink_to(LIBRARY)

    r = _run_python(probe, env, cwd=tmp_path, drop=("FA3JIT_LIBRARY",))
    assert r.stdout.splitlines()[0] == "[]", r.stdout      # not a source tree: not searched

    (repo / "meson.build").write_text("# marks the source tree\n")
    r = _run_python(probe, env, cwd=tmp_path, drop=("FA3JIT_LIBRARY",))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(repo / "build-other" / "libfa3jit.so")

    (repo / "build").mkdir()
    (repo / "build" / "libfa3jit.so").symlink_to(LIBRARY)
    r = _run_python(probe, env, cwd=tmp_path, drop=("FA3JIT_LIBRARY",))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(repo / "build" / "libfa3jit.so")


# ------------------------------------------------------------------ library calls
@needs_library
def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", fa3jit.version())
    assert fa3jit.version() == fa3jit.__version__


@needs_library
def test_emit_ptx_default():
    ptx = fa3jit.emit_ptx()
    assert isinstance(ptx, str)
    assert ".target sm_90a" in ptx
    assert "fa3_fwd_kernel" in ptx


@needs_library
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_emit_ptx_variants_differ(head_dim):
    variants = [
        dict(), dict(dtype="fp16"), dict(causal=True), dict(window=True), dict(softcap=True),
    ]
    texts = [fa3jit.emit_ptx(head_dim=head_dim, **kw) for kw in variants]
    for t in texts:
        assert ".target sm_90a" in t and "fa3_fwd_kernel" in t
    assert len(set(texts)) == len(texts)
    assert fa3jit.emit_ptx(head_dim=head_dim, head_dim_v=head_dim) == texts[0]
    assert fa3jit.emit_ptx(head_dim=head_dim, dtype="bfloat16") == texts[0]


@needs_library
def test_bad_head_dim_raises_fa3error_naming_it():
    with pytest.raises(fa3jit.Fa3Error, match="72") as ei:
        fa3jit.emit_ptx(head_dim=72)
    assert ei.value.status == 2 and ei.value.status_name == "FA3_ERR_BAD_HEAD_DIM"
    assert isinstance(ei.value, RuntimeError)
    with pytest.raises(fa3jit.Fa3Error, match="72"):
        fa3jit.get_kernel(head_dim=72)


@needs_library
def test_other_config_errors():
    with pytest.raises(fa3jit.Fa3Error) as ei:
        fa3jit.emit_ptx(head_dim=128, head_dim_v=64)
    assert ei.value.status_name == "FA3_ERR_BAD_HEAD_DIM_V"
    with pytest.raises(fa3jit.Fa3Error) as ei:
        fa3jit.emit_ptx(dtype="e4m3", block_n=96)
    assert ei.value.status_name == "FA3_ERR_BAD_BLOCK" and "96" in str(ei.value)
    with pytest.raises(fa3jit.Fa3Error) as ei:
        fa3jit.emit_ptx(block_n=24)
    assert ei.value.status_name == "FA3_ERR_BAD_BLOCK" and "24" in str(ei.value)
    with pytest.raises(ValueError, match="fp32"):
        fa3jit.emit_ptx(dtype="fp32")
    with pytest.raises(TypeError):
        fa3jit.emit_ptx(head_dim=128.0)
    with pytest.raises(ValueError):
        fa3jit.Context(backend="nvcc")


@needs_library
def test_out_dtype_reaches_the_config_and_the_library_judges_pairs():
    """out_dtype None is FA3_DTYPE_AUTO; a name or torch dtype string its code; the library
    refuses a pair it does not support (bf16 inputs with fp16 O), naming out_dtype; names that
    are no dtype at all are a ValueError naming out_dtype, e5m2 with a hint."""
    assert _core.make_config().out_dtype == _lib.FA3_DTYPE_AUTO
    assert _core.make_config(dtype="e4m3", out_dtype="fp16").out_dtype == _lib.FA3_DTYPE_FP16
    assert _core.make_config(dtype="e4m3", out_dtype="torch.bfloat16").out_dtype == \
        _lib.FA3_DTYPE_BF16
    assert fa3jit.emit_ptx(dtype="fp16", out_dtype="fp16") == fa3jit.emit_ptx(dtype="fp16")
    assert fa3jit.emit_ptx(out_dtype="bfloat16") == fa3jit.emit_ptx()
    with pytest.raises(fa3jit.Fa3Error, match=r"out_dtype 1 \(fp16\) is not supported with dtype bf16") as ei:
        fa3jit.emit_ptx(dtype="bf16", out_dtype="fp16")
    assert ei.value.status_name == "FA3_ERR_BAD_DTYPE"
    with pytest.raises(fa3jit.Fa3Error, match=r"out_dtype 2 \(e4m3\) is not supported with dtype e4m3"):
        fa3jit.get_kernel(dtype="e4m3", out_dtype="e4m3")
    with pytest.raises(ValueError, match=r"out_dtype 'fp32' is not supported \(supported: "
                                         r"'bf16', 'fp16'\)"):
        fa3jit.emit_ptx(out_dtype="fp32")
    with pytest.raises(ValueError, match="dtype 'float8_e5m2' is not supported.*e5m2"):
        fa3jit.emit_ptx(dtype="float8_e5m2")


@needs_library
def test_kernel_info_names_dtype_and_resolved_out_dtype():
    info = fa3jit.get_kernel(head_dim=64, dtype="fp16")
    assert (info.dtype, info.out_dtype) == ("fp16", "fp16")
    with fa3jit.Context(disable_disk_cache=True) as ctx:
        info = ctx.get_kernel(head_dim=64, out_dtype="bf16")
    assert (info.dtype, info.out_dtype) == ("bf16", "bf16")


@needs_library
def test_get_kernel_default_backend():
    info = fa3jit.get_kernel(head_dim=128, dtype="bf16", causal=True)
    assert info.registers > 0
    assert info["registers"] == info.registers
    assert info.shared_bytes > 0 and info.threads > 0
    assert info.block_m > 0 and info.block_n > 0 and info.stages >= 2
    assert re.fullmatch(r"[0-9a-f]{32}", info.cache_key)
    assert info.mask == "causal" and info.dtype == "bf16" and info.head_dim == 128
    assert info.backend in ("ptx-compiler", "nvjitlink", "driver-jit")
    assert info.source in ("compiled", "disk")
    if info.backend == "driver-jit":
        pytest.skip("driver-jit kernels have no ptxas statistics before their first launch")
    if info.backend != "ptx-compiler":
        pytest.skip(f"spill check needs the ptx-compiler backend: {info.backend} drops setmaxnreg "
                    f"(this library was built without the PTX Compiler API)")
    assert info.spill_store_bytes == 0 and info.spill_load_bytes == 0, info.compile_log
    assert info.spill_bytes == 0


@needs_library
def test_context_memory_and_disk_cache(tmp_path):
    with fa3jit.Context(cache_dir=tmp_path) as ctx:
        assert ctx.cache_dir == str(tmp_path)
        first = ctx.get_kernel(head_dim=64, dtype="fp16", softcap=True)
        assert first.source == "compiled" and first.compile_ms > 0
        again = ctx.get_kernel(head_dim=64, dtype="fp16", softcap=True)
        assert again.cache_key == first.cache_key
        other = ctx.get_kernel(head_dim=64, dtype="fp16", softcap=True, window=True)
        assert other.cache_key != first.cache_key and other.mask == "local" and other.softcap
    with fa3jit.Context(cache_dir=tmp_path) as ctx:
        reloaded = ctx.get_kernel(head_dim=64, dtype="fp16", softcap=True)
        assert reloaded.source == "disk"
        assert reloaded.cache_key == first.cache_key
        assert reloaded.registers == first.registers
    with fa3jit.Context(disable_disk_cache=True) as ctx:
        assert ctx.cache_dir is None
        assert ctx.get_kernel(head_dim=64).source == "compiled"


@needs_library
def test_configure_after_first_use_raises():
    fa3jit.get_kernel()                       # the process-wide context exists now
    with pytest.raises(RuntimeError, match="configure"):
        fa3jit.configure(backend="nvjitlink")


def test_flash_attn_func_without_torch_says_so():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed")
    with pytest.raises(ImportError, match="PyTorch"):
        fa3jit.flash_attn_func(None, None, None)


# ------------------------------------------------------------------ FP8 quantizer (no torch)
def _splitmix64_sign(seed, i):
    """fa3jit.h's rule, written out independently: bit 0 of one splitmix64 step from seed + i."""
    m = 2**64 - 1
    z = (seed + i + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return -1.0 if (z ^ (z >> 31)) & 1 else 1.0


@needs_library
@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63, 2**64 - 1])
@pytest.mark.parametrize("head_dim", [1, 64, 96, 256])
def test_hadamard_signs_follow_the_header_rule(seed, head_dim):
    signs = fa3jit.hadamard_signs(seed, head_dim)
    assert isinstance(signs, list) and len(signs) == head_dim
    assert signs == [_splitmix64_sign(seed, i) for i in range(head_dim)]
    assert fa3jit.hadamard_signs(seed, head_dim) == signs           # deterministic


@needs_library
def test_hadamard_signs_known_values_and_spread():
    # bit i of the mask is 1 where sign i is -1 (as tests/test_quantize_args.c records them)
    mask = sum(1 << i for i, s in enumerate(fa3jit.hadamard_signs(0, 64)) if s < 0)
    assert mask == 0xB345D63D0223B88B
    assert fa3jit.hadamard_signs(2**64 - 1, 2)[1] == fa3jit.hadamard_signs(0, 1)[0]  # wraps
    assert fa3jit.hadamard_signs(1, 128) != fa3jit.hadamard_signs(2, 128)
    neg = sum(s < 0 for seed in range(32) for s in fa3jit.hadamard_signs(seed, 256))
    assert abs(neg - 32 * 128) < 300


@needs_library
@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2**64, ValueError),
                                         (True, TypeError), (1.5, TypeError), ("7", TypeError)])
def test_hadamard_signs_refuses_bad_seeds_naming_them(seed, error):
    with pytest.raises(error, match="seed"):
        fa3jit.hadamard_signs(seed, 64)


@needs_library
@pytest.mark.parametrize("head_dim, error", [(0, ValueError), (-64, ValueError),
                                             (2**31, ValueError), (64.0, TypeError)])
def test_hadamard_signs_refuses_bad_head_dims_naming_them(head_dim, error):
    with pytest.raises(error, match=f"head_dim {head_dim}" if error is ValueError else "head_dim"):
        fa3jit.hadamard_signs(0, head_dim)


def test_quantize_fp8_without_torch_says_so():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed")
    with pytest.raises(ImportError, match="quantize_fp8 needs PyTorch"):
        fa3jit.quantize_fp8(None)


# ------------------------------------------------------------------ argument checks
INT_FIELDS = ("head_dim", "head_dim_v", "block_n", "stages")


@needs_library
@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [2**32 + 128, 2**40, 2**31, -2**31 - 1, -2**63])
def test_int_fields_out_of_c_int_range_are_refused_with_the_value_given(field, value):
    """A value the C int cannot hold is refused before ctypes (which would keep its low 32 bits:
    2**32+128 became head_dim 128), by emit_ptx, get_kernel and Context.get_kernel alike."""
    for call in (fa3jit.emit_ptx, fa3jit.get_kernel):
        with pytest.raises(ValueError, match=rf"{field} {value} .*-2147483648\.\.2147483647"):
            call(**{field: value})


@needs_library
@pytest.mark.parametrize("field", INT_FIELDS)
def test_int_fields_refuse_bool_and_non_integers(field):
    for value in (True, False, 128.0, "128"):
        pattern = rf"{field} must be an int, got {re.escape(repr(value))}"
        with pytest.raises(TypeError, match=pattern):
            fa3jit.emit_ptx(**{field: value})


@needs_library
def test_int_fields_accept_the_extremes_of_c_int_and_index_objects():
    """In range, the library itself judges the value (and names it)."""
    class Index:                              # numpy / torch integers behave like this
        def __index__(self):
            return 128
    assert fa3jit.emit_ptx(head_dim=Index()) == fa3jit.emit_ptx(head_dim=128)
    with pytest.raises(fa3jit.Fa3Error, match="head_dim 2147483647"):
        fa3jit.emit_ptx(head_dim=2**31 - 1)
    with pytest.raises(fa3jit.Fa3Error, match="block_n -2147483648"):
        fa3jit.emit_ptx(block_n=-2**31)


FLAG_FIELDS = ("causal", "softcap", "window")
NOT_FLAGS = ("no", "False", "", 2, -1, 0.0, 1.0, None, [], [0])


@needs_library
@pytest.mark.parametrize("field", FLAG_FIELDS)
@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
def test_flags_refuse_what_is_not_a_bool(field, value):
    """causal='no' used to emit a causal kernel: a flag takes True/False or 0/1, nothing else
    (the rule flash_attn_func applies to causal and return_lse)."""
    for call in (fa3jit.emit_ptx, fa3jit.get_kernel):
        pattern = rf"{field} must be a bool, got {re.escape(repr(value))}"
        with pytest.raises(TypeError, match=pattern):
            call(**{field: value})


@needs_library
@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
def test_disable_disk_cache_refuses_what_is_not_a_bool(value):
    pattern = rf"disable_disk_cache must be a bool, got {re.escape(repr(value))}"
    with pytest.raises(TypeError, match=pattern):
        fa3jit.Context(disable_disk_cache=value)
    with pytest.raises(TypeError, match="disable_disk_cache must be a bool"):
        fa3jit.configure(disable_disk_cache=value)      # checked when configured, not later


@needs_library
def test_flags_accept_bools_and_0_1():
    for field in FLAG_FIELDS:
        on = fa3jit.emit_ptx(**{field: True})
        assert fa3jit.emit_ptx(**{field: 1}) == on != fa3jit.emit_ptx(**{field: 0})
        assert fa3jit.emit_ptx(**{field: False}) == fa3jit.emit_ptx()
    with fa3jit.Context(disable_disk_cache=1) as ctx:
        assert ctx.cache_dir is None


@needs_library
def test_cache_dir_bytes_and_pathlike_name_the_folder_itself(tmp_path, monkeypatch):
    """bytes and os.PathLike go through os.fsencode: b"/x" is the folder /x, not "b'/x'"; the
    kernel is stored in that folder."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "bytes-dir"
    with fa3jit.Context(cache_dir=os.fsencode(target)) as ctx:
        assert ctx.cache_dir == str(target)
        key = ctx.get_kernel(head_dim=64).cache_key
    # the entry, and the index file that lets a warm load skip the generator
    assert sorted(p.suffix for p in target.iterdir()) == [".fa3k", ".fa3x"]
    assert f"{key}.fa3k" in [p.name for p in target.iterdir()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bytes-dir"]
    with fa3jit.Context(cache_dir=target) as ctx:                  # pathlib.Path
        assert ctx.cache_dir == str(target)


@needs_library
@pytest.mark.skipif(sys.getfilesystemencoding().lower() != "utf-8", reason="needs a UTF-8 fs")
def test_cache_dir_surrogate_escaped_str_is_the_undecodable_folder(tmp_path):
    """A folder whose name is not UTF-8 reaches Python as a surrogate-escaped str (os.listdir,
    sys.argv): it names that folder, byte for byte, rather than raising UnicodeEncodeError."""
    raw = os.fsencode(tmp_path) + b"/caf\xe9"
    name = os.fsdecode(raw)
    assert "\udce9" in name
    with fa3jit.Context(cache_dir=name) as ctx:
        assert ctx.cache_dir == name
        ctx.get_kernel(head_dim=64)
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9"]


@needs_library
@pytest.mark.parametrize("value, error", [
    (123, TypeError), (12.5, TypeError), (["/tmp"], TypeError), (True, TypeError),
    ("/tmp/a\0b", ValueError), (b"/tmp/a\0b", ValueError), (Path("/tmp/a\0b"), ValueError),
    ("", ValueError), (b"", ValueError),
], ids=repr)
def test_cache_dir_refuses_other_types_nul_and_empty(tmp_path, monkeypatch, value, error):
    """cache_dir=123 used to create ./123 and "a\\0b" the folder "a": refused, by Context and
    configure alike, with the value in the message; nothing is created."""
    monkeypatch.chdir(tmp_path)
    pattern = rf"cache_dir .*{re.escape(repr(value))}"
    with pytest.raises(error, match=pattern):
        fa3jit.Context(cache_dir=value)
    with pytest.raises(error, match=pattern):
        fa3jit.configure(cache_dir=value)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ context life, warnings, loading
def _loaded_libc():
    """Path of the C library this process runs on (a shared library that is not fa3jit)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if re.search(r"/libc[.-].*so", p) and os.path.isfile(p):
                    return p
    except OSError:
        pass
    return None


LIBC = _loaded_libc()


@pytest.mark.skipif(LIBC is None, reason="no /proc/self/maps naming libc")
def test_a_library_that_is_not_fa3jit_is_refused_naming_path_and_symbol(tmp_path):
    """$FA3JIT_LIBRARY=libc used to raise a raw AttributeError: LibraryNotFoundError (an OSError)
    naming the file loaded and the fa3_ symbol it lacks; a build folder holding such a file is
    skipped with the same reason listed."""
    probe = """
        import fa3jit
        try:
            fa3jit.emit_ptx()
        except fa3jit.LibraryNotFoundError as e:
            assert isinstance(e, OSError)
            print(e)
        else:
            raise SystemExit('no error')
        """
    r = _run_python(probe, {"PYTHONPATH": str(PY_DIR), "FA3JIT_LIBRARY": LIBC})
    assert r.returncode == 0, r.stderr
    assert LIBC in r.stdout and "fa3_version_number" in r.stdout, r.stdout
    assert "not the fa3jit library" in r.stdout

    repo = tmp_path / "repo"
    shutil.copytree(PY_DIR / "fa3jit", repo / "python" / "fa3jit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "meson.build").write_text("# marks the source tree\n")
    (repo / "build").mkdir()
    (repo / "build" / "libfa3jit.so").symlink_to(LIBC)
    r = _run_python(probe, {"PYTHONPATH": str(repo / "python")}, cwd=tmp_path,
                    drop=("FA3JIT_LIBRARY", "LD_LIBRARY_PATH"))   # meson's names build/
    if "no error" in r.stderr:
        pytest.skip("an installed libfa3jit.so was found after the build folder")
    assert r.returncode == 0, r.stderr
    assert f"{repo / 'build' / 'libfa3jit.so'}: not the fa3jit library" in r.stdout, r.stdout


@needs_library
def test_context_warning_surfaces_once(tmp_path):
    """A cache folder that cannot be created (its parent is a file): the context's warning is a
    property, and a CacheWarning is issued once, when the warning first appears."""
    (tmp_path / "file").write_text("")
    folder = tmp_path / "file" / "cache"
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with fa3jit.Context(cache_dir=folder) as ctx:
            assert ctx.warning == "" and seen == []
            ctx.get_kernel(head_dim=64)
            text = ctx.warning
            assert str(folder) in text and "memory" in text
            ctx.get_kernel(head_dim=96)                         # a second problem: no new warning
    assert [w.category for w in seen] == [fa3jit.CacheWarning]
    assert issubclass(fa3jit.CacheWarning, UserWarning)
    assert str(seen[0].message) == f"fa3jit: {text}"
    assert seen[0].filename == __file__                     # points at the caller, not fa3jit


@needs_library
def test_context_warning_at_creation_warns_in_the_constructor():
    """No folder can be named (no FA3JIT_CACHE_DIR, XDG_CACHE_HOME, HOME): Context() warns."""
    r = _run_python("""
        import warnings
        warnings.simplefilter("error")
        import fa3jit
        try:
            ctx = fa3jit.Context()
        except fa3jit.CacheWarning as w:
            print("warned:", w)
        warnings.simplefilter("ignore")
        print("property:", fa3jit.Context().warning)
        """, {"PYTHONPATH": str(PY_DIR)}, drop=("FA3JIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("warned: fa3jit: disk cache off") and "HOME" in lines[0], r.stdout
    assert lines[1].startswith("property: disk cache off"), r.stdout


@needs_library
def test_context_is_freed_when_dropped_and_by_close(monkeypatch):
    """A Context no one holds frees its fa3_context (a finalizer), once; close() and the end of a
    with block free it at once, and a closed context refuses every use, re-entry included."""
    import gc
    freed = []
    real = _core._free_context
    monkeypatch.setattr(_core, "_free_context", lambda h: (freed.append(h), real(h)))
    ctx = fa3jit.Context(disable_disk_cache=True)
    h = ctx.handle
    del ctx
    gc.collect()
    assert freed == [h]

    with fa3jit.Context(disable_disk_cache=True) as ctx:
        h = ctx.handle
    assert freed[1:] == [h]
    ctx.close()                                   # closing twice is harmless
    del ctx
    gc.collect()
    assert freed[1:] == [h]                       # freed once, not again by the finalizer

    ctx = fa3jit.Context(disable_disk_cache=True)
    ctx.close()
    for use in (lambda: ctx.get_kernel(head_dim=64), lambda: ctx.warning, lambda: ctx.backend,
                lambda: ctx.cache_dir, lambda: ctx.__enter__()):
        with pytest.raises(ValueError, match="Context is closed"):
            use()


@needs_library
def test_context_alive_at_exit_is_not_freed_during_shutdown():
    """At interpreter exit a live context (and the process-wide one) is left to the process's end:
    no library call runs while Python shuts down."""
    r = _run_python("""
        import fa3jit
        from fa3jit import _core
        def report(h):
            print("freed at exit", flush=True)
        _core._free_context = report
        ctx = fa3jit.Context(disable_disk_cache=True)
        fa3jit.get_kernel(head_dim=64)
        print("end", flush=True)
        """, {"PYTHONPATH": str(PY_DIR)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["end"]
