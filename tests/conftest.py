"""Shared pytest setup: tests marked ``gpu`` are skipped unless torch sees a CUDA GPU; a fake GPU for the
lab's peak measurements."""
from __future__ import annotations

import os
import sys

import pytest

# The autotuner's compile workers (runtime/compile_pool.py) build in other processes, which do not see what a test
# monkeypatches in this one: off for the suite (machines with many cores would otherwise take another path than
# this one's two); tests/test_compile_pool.py turns them on where it tests them.
os.environ.setdefault("KERNELLAB_COMPILE_WORKERS", "0")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture()
def fake_gpu(tmp_path, monkeypatch):
    """The lab's roofline sees a GPU named "Fake GPU 9000" with no cached peaks; its "measurements" (3 TB/s,
    plus one byte/s per call so a re-measurement shows) are recorded in the returned list, nothing touches CUDA."""
    from kernellab.viz import roofline

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(roofline, "gpu_name", lambda device=0: "Fake GPU 9000")
    calls = []

    def measure(name, device, copy_bytes, matmul_n, dtype):
        calls.append(name)
        return {"gpu": name, "date": "2026-01-01", "bytes_per_s": 3e12 + len(calls), "flops_per_s": 5e14,
                "flops_dtype": dtype}

    monkeypatch.setattr(roofline, "_measure", measure)
    return calls


@pytest.fixture
def triton():  # shared by the compat tests
    """Serve `triton` from kernellab for one test; a real Triton imported by other tests is set aside and
    put back afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == "triton" or k.startswith("triton.")}
    for k in saved:
        del sys.modules[k]
    import kernellab.compat

    kernellab.compat.install()
    import triton

    try:
        yield triton
    finally:
        kernellab.compat.uninstall()
        sys.modules.update(saved)
