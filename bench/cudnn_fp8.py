"""cuDNN's FP8 (e4m3) attention forward as a peer for the FP8 benchmarks: one cudnn-frontend
graph (`cudnn.pygraph(...).sdpa_fp8`) per shape, on (batch, seqlen, heads, head_dim) e4m3
tensors (the layout flash_attn_func takes), with one fp32 descale per tensor (cuDNN's FP8 SDPA
takes scalars, not per-head descales).

The frontend is not part of the GPU image: ../shared/peers/README.md says how it travels
(`.peers/a`, `.peers/b`, `source .peers/a/env.sh`); without it load() says so and the callers
print the reason in the peer's column. On Hopper cuDNN 9.19 refuses bf16 O for FP8 SDPA
("only supported on Blackwell"): O is then e4m3 with scale_o = 448 / amax(O), taken from a first
run (the graph's amax_o output). P goes to e4m3 with the static scale_s = 448 (cuDNN's
documented choice). Causal is top-left aligned in cuDNN; the benchmarks use seqlen_q = seqlen_k,
where it is the same mask as fa3jit's bottom-right one.
"""
from __future__ import annotations

import time

FP8_MAX = 448.0


def load():
    """(cudnn module, None) or (None, why it cannot be used)."""
    try:
        import torch  # noqa: F401  (first: the frontend binds the libcudnn torch loaded)
        import cudnn
    except Exception as e:  # noqa: BLE001 - any import failure is "peer missing"
        return None, (f"cuDNN frontend not importable ({type(e).__name__}: {e}); it travels as "
                      f".peers (../shared/peers/README.md): bash .peers/a/gpu-setup.sh, then "
                      f"source .peers/a/env.sh")
    return cudnn, None


def backend_words(err) -> str:
    """The backend's own reason inside the frontend's long 'no engine proposed a plan' text."""
    msg = " ".join(str(err).split())
    i = msg.find("the backend declined:")
    if i < 0:
        return msg[:400]
    j = msg.find("; python engines declined", i)
    return msg[i: j if j > 0 else None][:400]


class CudnnFp8Attention:
    """A built cuDNN FP8 SDPA forward graph for q, k, v of shape (batch, seqlen, heads,
    head_dim), contiguous, no GQA. run() executes it on torch's current stream (so it can be
    captured in a CUDA graph); output() gives O as fp32 (batch, seqlen, heads, head_dim)."""

    def __init__(self, cudnn, handle, batch, seqlen, heads, head_dim, causal, softmax_scale,
                 out="auto"):
        import torch
        self.cudnn, self.handle = cudnn, handle
        self.shape = (batch, seqlen, heads, head_dim)
        self.refusals = []
        kinds = ["bf16", "fp8"] if out == "auto" else [out]
        masks = ["bounds", "use_causal_mask"] if causal else [None]
        t0 = time.time()
        for kind in kinds:
            for mask in masks:
                try:
                    self._build(kind, mask, causal, softmax_scale)
                except Exception as e:  # noqa: BLE001 - the frontend raises several types
                    self.refusals.append(f"O {kind}, mask {mask}: {backend_words(e)}")
                    continue
                self.out_kind, self.mask_api = kind, mask
                break
            else:
                continue
            break
        else:
            raise RuntimeError("cuDNN refused every FP8 SDPA graph: " + " | ".join(self.refusals))
        self.build_s = time.time() - t0
        dev = "cuda"
        b, s, h, d = self.shape
        self.o = torch.empty(b, s, h, d, device=dev,
                             dtype=torch.bfloat16 if self.out_kind == "bf16"
                             else torch.float8_e4m3fn)
        self.stats = torch.empty(b, h, s, 1, device=dev, dtype=torch.float32)
        self.scalars = {n: torch.ones(1, 1, 1, 1, device=dev, dtype=torch.float32)
                        for n in ("descale_q", "descale_k", "descale_v", "scale_o",
                                  "amax_s", "amax_o")}
        self.scalars["scale_s"] = torch.full((1, 1, 1, 1), FP8_MAX, device=dev)
        self.scalars["descale_s"] = torch.full((1, 1, 1, 1), 1.0 / FP8_MAX, device=dev)
        ws = int(self.graph.get_workspace_size())
        self.workspace = torch.empty(max(ws, 1), device=dev, dtype=torch.uint8)
        self.pack = None
        self.scale_o = 1.0

    def _build(self, kind, mask, causal, softmax_scale):
        cudnn = self.cudnn
        dt = cudnn.data_type
        b, s, h, d = self.shape
        dims, strides = [b, h, s, d], [s * h * d, d, h * d, 1]   # (b, h, s, d) view of bshd
        g = cudnn.pygraph(io_data_type=dt.FP8_E4M3, intermediate_data_type=dt.FLOAT,
                          compute_data_type=dt.FLOAT, handle=self.handle)
        t = {n: g.tensor(name=n, dim=dims, stride=strides, data_type=dt.FP8_E4M3)
             for n in ("q", "k", "v")}
        for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
            t[n] = g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.FLOAT)
        kw = {n: t[n] for n in t}
        kw.update(generate_stats=True, attn_scale=float(softmax_scale), name="fa3jit_fp8_peer")
        if mask == "bounds":
            kw.update(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, right_bound=0)
        elif mask == "use_causal_mask":
            kw["use_causal_mask"] = True
        o, stats, amax_s, amax_o = g.sdpa_fp8(**kw)
        o.set_output(True).set_dim(dims).set_stride(strides).set_data_type(
            dt.BFLOAT16 if kind == "bf16" else dt.FP8_E4M3)
        stats.set_output(True).set_dim([b, h, s, 1]).set_stride([h * s, s, 1, 1]) \
            .set_data_type(dt.FLOAT)
        for a in (amax_s, amax_o):
            a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]) \
                .set_data_type(dt.FLOAT)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        t.update(o=o, stats=stats, amax_s=amax_s, amax_o=amax_o)
        self.graph, self.tensors = g, t

    def bind(self, q8, k8, v8, descale_q, descale_k, descale_v):
        """e4m3 (batch, seqlen, heads, head_dim) contiguous inputs and their float descales;
        with e4m3 O, one run calibrates scale_o = 448 / amax(O)."""
        import torch
        for name, x in (("q", q8), ("k", k8), ("v", v8)):
            if tuple(x.shape) != self.shape or not x.is_contiguous() or \
                    x.dtype != torch.float8_e4m3fn:
                raise ValueError(f"cuDNN FP8 peer: {name} must be a contiguous e4m3 tensor of "
                                 f"shape {self.shape}, got {x.dtype} {tuple(x.shape)}")
        for n, val in (("descale_q", descale_q), ("descale_k", descale_k),
                       ("descale_v", descale_v)):
            self.scalars[n].fill_(float(val))
        t = self.tensors
        b, s, h, d = self.shape
        view = lambda x: x.view(b, s, h, d).transpose(1, 2)   # noqa: E731 - (b, h, s, d)
        self.pack = {t["q"]: view(q8), t["k"]: view(k8), t["v"]: view(v8),
                     t["o"]: view(self.o), t["stats"]: self.stats}
        for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o",
                  "amax_s", "amax_o"):
            self.pack[t[n]] = self.scalars[n]
        self.scalars["scale_o"].fill_(1.0)
        self.scale_o = 1.0
        if self.out_kind == "fp8":
            self.run()
            torch.cuda.synchronize()
            amax = float(self.scalars["amax_o"].item())
            if amax > 0 and amax == amax and amax != float("inf"):
                self.scale_o = FP8_MAX / amax
            self.scalars["scale_o"].fill_(self.scale_o)

    def run(self):
        import torch
        self.cudnn.set_stream(self.handle, torch.cuda.current_stream().cuda_stream)
        self.graph.execute(self.pack, self.workspace, handle=self.handle)

    def output(self):
        """O as fp32 (batch, seqlen, heads, head_dim), dequantized (e4m3 O: / scale_o)."""
        return self.o.float() / self.scale_o

    def describe(self) -> str:
        return (f"cuDNN FP8 SDPA, O {'bf16' if self.out_kind == 'bf16' else 'e4m3'}"
                + (" (bf16 O refused: " + self.refusals[0] + ")" if self.refusals else ""))
