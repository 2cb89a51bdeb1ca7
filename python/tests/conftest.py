"""Shared test setup: kernels compiled by the tests go to a temporary disk cache (unless the
caller chose one with $FA3JIT_CACHE_DIR), so test runs never write to ~/.cache."""
import os
import shutil
import tempfile

_tmp_cache = None
if not os.environ.get("FA3JIT_CACHE_DIR"):
    _tmp_cache = tempfile.mkdtemp(prefix="fa3jit-test-cache-")
    os.environ["FA3JIT_CACHE_DIR"] = _tmp_cache


def pytest_unconfigure(config):
    if _tmp_cache:
        shutil.rmtree(_tmp_cache, ignore_errors=True)
