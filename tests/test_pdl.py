"""Programmatic dependent launch (Triton's `launch_pdl=True` with `tl.extra.cuda.gdc_wait` /
`gdc_launch_dependents`): the kernel's griddepcontrol instructions on sm_90+, the launch through
cuLaunchKernelEx, and the same results as stream-ordered launches everywhere else."""
import pytest
import torch

import kernellab
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target
from kernellab.language.extra import cuda
from kernellab.runtime.driver import LoadedKernel


@kernellab.jit
def _scale(x, y, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    if USE_GDC:
        cuda.gdc_launch_dependents()  # as tutorial 11 does: the next grid may start right away
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0 + 1.0, mask=m)


@kernellab.jit
def _add_next(y, z, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if USE_GDC:
        cuda.gdc_wait()  # y is written by the grid before this one
    tl.store(z + offs, tl.load(y + offs, mask=m) + tl.load(z + offs, mask=m), mask=m)


def test_griddepcontrol_on_sm90_nothing_before():
    x = torch.randn(1000)
    ck = _add_next.warmup(x, x, 1000, BLOCK=256, USE_GDC=True, grid=(4,))
    ptx90 = ck.build_gpu(Target(90)).asm["ptx"]
    lines = [ln.strip() for ln in ptx90.splitlines()]
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("griddepcontrol.wait"))
    first_load = next(i for i, ln in enumerate(lines) if "ld.global" in ln)
    assert wait < first_load, "no load of the previous grid's output may move above the wait"
    assert ptx90.count("griddepcontrol") == 1
    ck80 = _add_next.warmup(x, x, 1000, BLOCK=256, USE_GDC=True, grid=(4,))
    assert "griddepcontrol" not in ck80.build_gpu(Target(80)).asm["ptx"]
    ck_scale = _scale.warmup(x, x, 1000, BLOCK=256, USE_GDC=True, grid=(4,))
    assert "griddepcontrol.launch_dependents;" in ck_scale.build_gpu(Target(90)).asm["ptx"]


def test_interpreter_runs_a_dependent_chain():
    n = 1000
    x = torch.randn(n)
    y = torch.full((n,), float("nan"))
    z = torch.randn(n)
    want = (x.double() * 2 + 1 + z.double()).float()
    _scale[(4,)](x, y, n, BLOCK=256, USE_GDC=True, launch_pdl=True)
    _add_next[(4,)](y, z, n, BLOCK=256, USE_GDC=True, launch_pdl=True)
    torch.testing.assert_close(z, want)


def test_a_pdl_launch_without_launch_ex_is_a_plain_launch():
    """Before sm_90 (or with a test's launcher) the dependent launch is a stream-ordered one: same program."""
    calls = []
    props = {"max_grid_dims": (2**31 - 1, 65535, 65535), "max_threads_per_block": 1024, "warp_size": 32,
             "cc": (9, 0)}
    k = LoadedKernel("k", "F", ["i32"], device_index=0, props=props, attributes={},
                     launch_fn=lambda *a: calls.append(a) or (0,))
    k.launch((2,), 4, 0, 7, [5], pdl=True)
    assert calls and calls[0][1:9] == (2, 1, 1, 128, 1, 1, 0, 7)
    ex_calls = []
    props80 = dict(props, cc=(8, 0))
    k80 = LoadedKernel("k", "F", ["i32"], device_index=0, props=props80, attributes={},
                       launch_fn=lambda *a: calls.append(a) or (0,), launch_ex_fn=lambda *a: ex_calls.append(a))
    k80.launch((2,), 4, 0, 7, [5], pdl=True)
    assert len(calls) == 2 and not ex_calls


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [1000, 1 << 20])
def test_pdl_chain_on_the_gpu(n, monkeypatch):
    """Many back-to-back dependent launches: every result as with stream order, and (sm_90+) each went through
    cuLaunchKernelEx with programmatic stream serialization."""
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    z = torch.randn(n, device="cuda")
    want = z.double().clone()
    grid = (triton_cdiv(n, 1024),)
    _scale[grid](x, y, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)  # compiles and loads both first
    _add_next[grid](y, z, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)
    want += (x.double() * 2 + 1)
    ex = []
    loaded = [ck._loaded for ck in _add_next.cache.values() if ck._loaded is not None]
    for ld in loaded:
        if ld._launch_ex is not None:
            real = ld._launch_ex
            monkeypatch.setattr(ld, "_launch_ex", lambda *a, _r=real: ex.append(1) or _r(*a))
    for i in range(20):
        x.add_(0.5)
        _scale[grid](x, y, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)
        _add_next[grid](y, z, n, BLOCK=1024, USE_GDC=True, launch_pdl=True)
        want += (x.double() * 2 + 1)
    torch.cuda.synchronize()
    torch.testing.assert_close(z.double(), want, rtol=1e-5, atol=1e-4)
    if torch.cuda.get_device_capability()[0] >= 9:
        assert len(ex) == 20, "each _add_next launch is a programmatic dependent launch on sm_90+"


def triton_cdiv(a, b):
    return (a + b - 1) // b
