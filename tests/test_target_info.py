"""`tl.target_info` / `triton.language.target_info`: compile-time questions about the target, folded in kernels."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.language import target_info


@kl.jit
def _asks(Z):
    if target_info.cuda_capability_geq(9, 0):
        tl.store(Z, 90)
    elif target_info.cuda_capability_geq(8):
        tl.store(Z, 80)
    else:
        tl.store(Z, 1)
    if tl.target_info.is_hip() or target_info.is_hip_cdna3():
        tl.store(Z + 1, -1)
    else:
        tl.store(Z + 1, 1 if target_info.is_cuda() else 0)


def _expected():
    arch = target_info.current_target().arch
    return [90 if arch >= 90 else 80 if arch >= 80 else 1, 1]


def test_interpreter():
    z = torch.full((2,), -7, dtype=torch.int32)
    _asks[(1,)](z)
    assert z.tolist() == _expected()


def test_no_gpu_target_is_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert target_info.current_target() == target_info.GPUTarget("cuda", 90, 32)


def test_served_as_triton_module():
    import importlib

    import kernellab.compat

    was = kernellab.compat.installed()
    kernellab.compat.install()
    try:
        ti = importlib.import_module("triton.language.target_info")
        assert ti is tl.target_info and ti.is_cuda() and not ti.is_hip()
    finally:
        if not was:
            kernellab.compat.uninstall()


@pytest.mark.gpu
def test_gpu():
    z = torch.full((2,), -7, dtype=torch.int32, device="cuda")
    _asks[(1,)](z)
    torch.cuda.synchronize()
    major, minor = torch.cuda.get_device_capability()
    assert z.tolist() == [90 if major >= 9 else 80 if major >= 8 else 1, 1]
