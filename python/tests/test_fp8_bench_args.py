"""The FP8 benchmark scripts without a GPU: bench/fp8_accuracy.py's and bench/compare_fp8.py's
command lines, the accuracy script end to end on the CPU (its emulation rows; the fa3jit rows
report why they cannot run), and the cuDNN FP8 peer's graph (bench/cudnn_fp8.py) as far as the
cudnn frontend builds it without a device. Needs torch (CPU); the peer test the frontend too.
"""
import functools
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):  # pragma: no cover - torch < 2.1
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compare_fp8  # noqa: E402
import cudnn_fp8  # noqa: E402
import fp8_accuracy  # noqa: E402


def test_fp8_accuracy_arguments():
    a = fp8_accuracy.parse_args([])
    assert (a.batch, a.seqlen, a.heads, a.head_dim, a.block) == (2, 2048, 16, 128, 128)
    assert isinstance(a.seed, int) and a.quantizer == "auto"
    assert fp8_accuracy.parse_args(["--seed", "7"]).seed == 7
    for bad in (["--seqlen", "1000"], ["--head-dim", "96"], ["--batch", "0"],
                ["--quantizer", "cuda"]):
        with pytest.raises(SystemExit):
            fp8_accuracy.parse_args(bad)


def test_fp8_accuracy_runs_its_emulations_on_the_cpu(capsys):
    """--device cpu: the emulation rows are measured; the fa3jit rows say why they cannot run
    and the exit status says the targets were not measured."""
    rc = fp8_accuracy.main(["--device", "cpu", "--seqlen", "128", "--heads", "2",
                            "--head-dim", "64", "--seed", "11", "--no-cudnn"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "seed 11" in out and "| emu_had_head_P |" in out
    assert "targets not measured" in out
    line = [x for x in out.splitlines() if x.startswith("FP8_ACCURACY_JSON ")][0]
    res = json.loads(line.split(" ", 1)[1])
    assert res["rows"]["emu_had_head"]["rmse"] < res["rows"]["emu_tensor"]["rmse"]
    assert "error" in res["rows"]["fa3jit_fp8_had"] and res["targets_met"] is False


def test_compare_fp8_arguments():
    a = compare_fp8.parse_args([])
    assert a.head_dims == [64, 128, 256] and a.seqlens == [1024, 2048, 4096, 8192, 16384]
    assert a.causals == [False, True] and a.repeat == 1
    a = compare_fp8.parse_args(["--head-dims", "128", "--seqlens", "4096", "--masks", "causal"])
    assert (a.head_dims, a.seqlens, a.causals) == ([128], [4096], [True])
    for bad in (["--head-dims", "96"], ["--seqlens", "3000"], ["--masks", "local"],
                ["--repeat", "0"], ["--head-dims", "x"]):
        with pytest.raises(SystemExit):
            compare_fp8.parse_args(bad)


def _frontend():
    cudnn, why = cudnn_fp8.load()
    if cudnn is None:
        pytest.skip(why)
    return cudnn


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cudnn_peer_graph_reaches_the_backend(causal):
    """Without a device every graph is refused, but by the backend (the step that needs a
    device), for each output kind and causal form tried: the frontend took the graph as built."""
    cudnn = _frontend()
    if torch.cuda.is_available():
        pytest.skip("a device is present: the GPU run builds the graph for real")
    with pytest.raises(RuntimeError, match="cuDNN refused every FP8 SDPA graph") as ei:
        cudnn_fp8.CudnnFp8Attention(cudnn, None, 2, 256, 4, 64, causal, 0.125)
    tries = str(ei.value).split(": ", 1)[1].split(" | ")
    assert len(tries) == (4 if causal else 2), tries
    for t in tries:
        assert "the backend declined" in t, t


def test_cudnn_peer_graph_on_sm90_takes_e4m3_output_only(monkeypatch):
    """Told it runs on sm90 (a private frontend hook; skipped when absent), cuDNN's own checks
    refuse bf16 O ("only supported on Blackwell") and let the e4m3-O graph through to engine
    selection, which needs the device."""
    cudnn = _frontend()
    if torch.cuda.is_available():
        pytest.skip("a device is present")
    try:
        from cudnn import _pygraph
        _pygraph.pygraph._backend_handle_for_lowering  # noqa: B018
    except (ImportError, AttributeError) as e:
        pytest.skip(f"this frontend has no lowering hook: {e}")
    monkeypatch.setattr(_pygraph.pygraph, "_backend_handle_for_lowering", lambda self, kw: None)
    monkeypatch.setattr(cudnn, "pygraph", functools.partial(cudnn.pygraph, sm_version=90,
                                                            sm_count=132))
    for out in ("bf16", "fp8"):
        with pytest.raises(RuntimeError) as ei:
            cudnn_fp8.CudnnFp8Attention(cudnn, None, 2, 256, 4, 128, True, 0.09, out=out)
        msg = str(ei.value)
        if out == "bf16":
            assert "HALF/BFLOAT16" in msg, msg
        else:
            assert "HALF/BFLOAT16" not in msg and "the backend declined" in msg, msg


def test_backend_words_keep_the_backends_reason():
    long = ("[create_execution_plans] cudnnGraphNotSupportedError: no engine proposed a plan "
            "(the backend declined: bf16 O needs Blackwell; python engines declined: x, y)")
    assert cudnn_fp8.backend_words(long) == "the backend declined: bf16 O needs Blackwell"
    assert cudnn_fp8.backend_words("plain  text\n here") == "plain text here"
