"""The codegen knobs (CODEGEN_ENV, kernellab/runtime/codegen_env.py) key every compile cache, the in-memory ones
too: a knob set after a kernel compiled in this process reaches its next launch, the slow path's and the warm fast
path's (a watch on os.environ drops the warm entries when a knob changes), and setting it back finds the first
kernel again. On the interpreter (a tile-IR knob) and on the GPU launch path with a stub driver (a GPU-build
knob: the two builds' PTX differ)."""
from __future__ import annotations

import os
from unittest import mock

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.runtime import codegen_env
from kernellab.runtime.codegen_env import CODEGEN_ENV
from kernellab.runtime.jit import JITFunction
from tests import matmul_variants as mv
from tests.corpus import make_kernels

STMATRIX = "KERNELLAB_STMATRIX"  # 0: sm_90's epilogue stores without stmatrix (the GPU build only)
DOT_FORM = "KERNELLAB_DOT_POINTER_FORM"  # tile: a tile pass carries dot operands' pointer tiles (the tile IR)


@pytest.fixture(autouse=True)
def _knobs_unset(monkeypatch):
    for k in (STMATRIX, DOT_FORM, "KERNELLAB_FLATTEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KERNELLAB_SPLIT_K", "0")  # (a launch-time switch, not a codegen knob)


def test_the_watch_keeps_the_fingerprint_current(monkeypatch):
    fp = codegen_env.current()
    assert type(os.environ) is codegen_env._Watched and isinstance(os.environ, os._Environ)
    assert codegen_env.NOW[0] is fp and fp == tuple(os.environ.get(k, "") for k in CODEGEN_ENV)
    monkeypatch.setenv(STMATRIX, "0")
    now = codegen_env.NOW[0]
    assert now != fp and now[CODEGEN_ENV.index(STMATRIX)] == "0"
    monkeypatch.setenv("KERNELLAB_NOT_A_CODEGEN_KNOB", "1")
    assert codegen_env.NOW[0] is now  # other variables leave it alone
    monkeypatch.delenv(STMATRIX)
    assert codegen_env.NOW[0] is fp  # interned: the same values, the same object
    with mock.patch.dict(os.environ, {"KERNELLAB_FLATTEN": "0"}):
        assert codegen_env.NOW[0][CODEGEN_ENV.index("KERNELLAB_FLATTEN")] == "0"
    assert codegen_env.NOW[0] is fp
    os.environ.setdefault(STMATRIX, "0")
    assert codegen_env.NOW[0] is not fp
    assert os.environ.pop(STMATRIX) == "0" and codegen_env.NOW[0] is fp
    os.environ.update({DOT_FORM: "tile"})
    assert codegen_env.NOW[0][CODEGEN_ENV.index(DOT_FORM)] == "tile"
    del os.environ[DOT_FORM]
    assert codegen_env.NOW[0] is fp and codegen_env.current() is fp


def test_an_environ_that_cannot_be_watched_is_read_each_time(monkeypatch):
    """os.environ replaced by a plain dict: current() reads it and the fast path remembers nothing (NOW is None);
    the real one back, the watch picks up again."""
    fp = codegen_env.current()
    monkeypatch.setattr(os, "environ", {**os.environ, STMATRIX: "0"})
    assert codegen_env.current()[CODEGEN_ENV.index(STMATRIX)] == "0" and codegen_env.NOW[0] is None
    monkeypatch.undo()
    assert codegen_env.current() is fp and codegen_env.NOW[0] is fp


def test_interpreter_launch_follows_a_tile_ir_knob(monkeypatch):
    """KERNELLAB_DOT_POINTER_FORM=tile (strength_reduce_pointers, a tile pass) set after the kernel compiled: the
    next launch compiles another specialization (another tile IR, the same result); unset again, the first."""
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(70, 90, 80)
    ref = a.double() @ b.double()
    block = (64, 64, 32)  # (a dot of 64 rows or more: its operands' pointers are where the knob acts)
    first = mv.launch(kernel, a, b, c, block)
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)
    assert mv.launch(kernel, a, b, c, block) is first
    monkeypatch.setenv(DOT_FORM, "tile")
    c.fill_(float("nan"))
    second = mv.launch(kernel, a, b, c, block)
    assert second is not first and second.asm["tile"] != first.asm["tile"]
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)
    monkeypatch.delenv(DOT_FORM)
    assert mv.launch(kernel, a, b, c, block) is first and len(kernel.cache) == 2


def test_options_sharing_a_tile_ir_do_not_cross_a_knob(monkeypatch):
    """Compiles differing only in num_warps share the tile IR (_share_frontend), not across a tile-IR knob."""
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(70, 90, 80)
    shapes = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, grid=(1,))
    plain = kernel.warmup(*mv.args(a, b, c), num_warps=4, **shapes)
    monkeypatch.setenv(DOT_FORM, "tile")
    tiled = kernel.warmup(*mv.args(a, b, c), num_warps=2, **shapes)
    fresh = make_kernels(kl, tl)["matmul_kernel"].warmup(*mv.args(a, b, c), num_warps=2, **shapes)
    assert tiled.asm["tile"] == fresh.asm["tile"] != plain.asm["tile"]


def test_gpu_launch_path_follows_a_gpu_build_knob(monkeypatch, tmp_path):
    """The GPU launch path on the CPU (launch_overhead's stub driver), each specialization built for sm_90a as its
    first launch builds it: KERNELLAB_STMATRIX=0 set after warm launches takes the next launch to the slow path and
    a new specialization, whose PTX has no stmatrix where the first's has; its own warm launches stay on it; unset
    again, the next launch runs the first, warm (the entries made under each value are kept), and so back."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    lo = mv.launch_overhead_tool()
    mv.stub_variants(monkeypatch)  # (132 SMs: the fast path's split-K wrapper asks)
    slow = []
    get_compiled = JITFunction._get_compiled

    def counted(self, *args, **kwargs):
        slow.append(1)
        return get_compiled(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "_get_compiled", counted)
    kernel = make_kernels(kl, tl)["matmul_kernel"]

    def go():
        return mv.launch_fake(kernel, 256, 256, 128, block=(64, 64, 32), num_warps=4, num_stages=2)

    launches = []
    with lo.fake_gpu(launches):
        first = go()
        assert go() is first and go() is first and len(slow) == 1  # warm
        assert kernel._fast
        monkeypatch.setenv(STMATRIX, "0")
        assert not kernel._fast  # the change switched to the entries made under "0": none yet
        second = go()
        assert second is not first and len(slow) == 2
        assert go() is second and len(slow) == 2  # warm, on the new entry
        try:
            second.build_gpu(Target(90))
        except ToolchainError as e:
            pytest.skip(f"no PTX toolchain here: {e}")
        monkeypatch.delenv(STMATRIX)
        assert go() is first and len(slow) == 2 and len(kernel.cache) == 2  # warm: the first's entries are back
        monkeypatch.setenv(STMATRIX, "0")
        assert go() is second and len(slow) == 2
        monkeypatch.delenv(STMATRIX)
        first.build_gpu(Target(90))
    assert len(launches) == 7
    assert "stmatrix" in first.asm["ptx"] and "stmatrix" not in second.asm["ptx"]


def test_a_knob_set_around_each_launch_keeps_both_kernels_warm(monkeypatch):
    """benchmarks/matmul.py's --also-env column: a kernel of its own launched with the knob set around each launch
    (env_setting), between launches of the plain column's kernel without it: after each one's first launch, every
    launch of both is warm, each on its own specialization."""
    from benchmarks.matmul import env_setting

    lo = mv.launch_overhead_tool()
    mv.stub_variants(monkeypatch)
    slow = []
    get_compiled = JITFunction._get_compiled
    monkeypatch.setattr(JITFunction, "_get_compiled", lambda self, *a, **k: slow.append(self) or get_compiled(
        self, *a, **k))
    plain, switched = make_kernels(kl, tl)["matmul_kernel"], make_kernels(kl, tl)["matmul_kernel"]
    with lo.fake_gpu():
        for _ in range(4):
            a = mv.launch_fake(plain, 256, 256, 128, block=(64, 64, 32), num_warps=4)
            with env_setting(f"{STMATRIX}=0"):
                b = mv.launch_fake(switched, 256, 256, 128, block=(64, 64, 32), num_warps=4)
    assert slow == [plain, switched]
    assert a._codegen_env[CODEGEN_ENV.index(STMATRIX)] == "" and b._codegen_env[CODEGEN_ENV.index(STMATRIX)] == "0"
