"""fa3jit: FlashAttention-3 forward attention for NVIDIA Hopper (sm_90a), generated as PTX at run
time by the fa3jit C library and launched on PyTorch tensors.

    import fa3jit
    out = fa3jit.flash_attn_func(q, k, v, causal=True)   # q, k, v: (batch, seqlen, heads, dim)
    out = fa3jit.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, causal=True)  # packed sequences
    out = fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                         cache_seqlens=lens, causal=True)  # decode step
    k8, descale_k = fa3jit.quantize_fp8(k, hadamard=True)  # e4m3 and its fp32 descales

`import fa3jit` needs neither torch nor a GPU nor the C library: the library (libfa3jit.so, found
through $FA3JIT_LIBRARY, the repository's meson build folders, or the system) is loaded on first
use, torch on the first flash_attn_func or quantize_fp8 call.
"""
from ._lib import Fa3Error, LibraryNotFoundError, candidate_paths, library_path
from ._core import (CacheWarning, Context, KernelInfo, configure, default_context, emit_ptx,
                    get_kernel, version)
from ._torch import flash_attn_func
from ._varlen import flash_attn_varlen_func
from ._kvcache import flash_attn_with_kvcache
from ._quantize import hadamard_signs, quantize_fp8

__version__ = "0.1.0"

__all__ = [
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "quantize_fp8", "hadamard_signs", "emit_ptx", "get_kernel", "version",
    "Fa3Error", "LibraryNotFoundError", "Context", "CacheWarning", "KernelInfo", "configure", "default_context", "library_path",
    "candidate_paths", "__version__",
]
