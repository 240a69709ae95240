"""Runtime bookkeeping that must hold without a GPU: the in-memory compile cache keys on every launch option
that changes the code, autotuning leaves reset_to_zero / restore_value arguments as one launch would, and a
failed ptxas run still leaves the PTX it points at in compiled.asm."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler import backend
from kernellab.errors import ToolchainError
from kernellab.runtime import autotuner as A
from kernellab.runtime import jit as J


@kl.jit
def axpb(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * tl.load(y_ptr + offs, mask=m) + x, mask=m)


def _axpb_args():
    return torch.randn(64), torch.randn(64), torch.empty(64), 64


def test_compile_cache_keys_on_launch_options():
    base = axpb.warmup(*_axpb_args(), BLOCK=64)
    assert axpb.warmup(*_axpb_args(), BLOCK=64, enable_fp_fusion=True, num_warps=4) is base  # spelled-out defaults
    nofuse = axpb[(1,)](*_axpb_args(), BLOCK=64, enable_fp_fusion=False)  # a launch after the default one
    assert nofuse is not base and nofuse.options["enable_fp_fusion"] is False
    assert axpb.warmup(*_axpb_args(), BLOCK=64, enable_fp_fusion=False) is nofuse
    for opt in ({"enable_wgmma": False}, {"maxnreg": 128}, {"num_ctas": 2}, {"enable_reflect_ftz": False}):
        assert axpb.warmup(*_axpb_args(), BLOCK=64, **opt) not in (base, nofuse), opt


def test_fp_fusion_option_reaches_the_ptx(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(J, "_can_assemble", lambda: False)  # stop at PTX: no ptxas needed
    fused = axpb.warmup(*_axpb_args(), BLOCK=64).build_gpu()
    plain = axpb.warmup(*_axpb_args(), BLOCK=64, enable_fp_fusion=False).build_gpu()
    assert "fma.rn.f32" in fused.asm["ptx"]
    assert "fma.rn.f32" not in plain.asm["ptx"]


@kl.jit
def log_of(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.log(tl.load(x_ptr + offs, mask=m, other=1.0)), mask=m)


def test_reflect_ftz_option_reaches_libdevice(tmp_path, monkeypatch):
    """libdevice's subnormal-flushing variants by default (Triton's enable_reflect_ftz), exact ones on request."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(J, "_can_assemble", lambda: False)
    args = (torch.rand(64) + 0.5, torch.empty(64), 64)
    flush = log_of.warmup(*args, BLOCK=64).build_gpu()
    exact = log_of.warmup(*args, BLOCK=64, enable_reflect_ftz=False).build_gpu()
    assert exact is not flush
    assert ".ftz.f32" in flush.asm["ptx"]
    assert ".ftz.f32" not in exact.asm["ptx"]


def test_maxnreg_caps_the_registers(tmp_path, monkeypatch):
    """maxnreg reaches ptxas: a kernel that holds many values in registers is built under the cap."""
    import shutil

    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) is not on PATH")
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    args = (torch.rand(4096) + 0.5, torch.empty(4096), 4096)
    free = log_of.warmup(*args, BLOCK=4096, num_warps=1).build_gpu()
    capped = log_of.warmup(*args, BLOCK=4096, num_warps=1, maxnreg=32).build_gpu()
    assert free.n_regs > 32 >= capped.n_regs


@kl.jit
def count_ones(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@kl.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


_CONFIGS = [kl.Config({"BLOCK": 128}), kl.Config({"BLOCK": 256})]


def _grid(n):
    return lambda meta: (kl.cdiv(n, meta["BLOCK"]),)


def _fake_bench(runs):
    """Stands in for do_bench on the CPU: runs the benchmark call a few times, as the real one does."""
    def bench(call):
        for _ in range(3):
            call()
        runs.append(1)
        return float(len(runs))  # the first config is the fastest
    return bench


def test_autotune_reset_to_zero_and_restore_value_on_the_tuning_call(monkeypatch):
    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)  # take the benchmarking path on CPU tensors
    runs = []
    counter = kl.autotune(_CONFIGS, key=["n"], reset_to_zero=["out_ptr"], do_bench=_fake_bench(runs))(count_ones)
    x, out = torch.ones(1024), torch.zeros(1)
    counter[_grid(1024)](x, out, 1024)
    assert len(runs) == 2 and "fastest of 2" in counter.best_config_reason
    assert out.item() == 1024  # not 2048: zeroed again before the real launch

    inc = kl.autotune(_CONFIGS, key=["n"], restore_value=["x_ptr"], do_bench=_fake_bench([]))(add_one)
    x = torch.zeros(1000)
    inc[_grid(1000)](x, 1000)
    assert torch.equal(x, torch.ones(1000))  # the 6 benchmark runs left nothing behind


def test_autotune_restores_values_when_a_config_fails(monkeypatch):
    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)

    def failing(call):
        call()
        raise RuntimeError("out of resources")

    inc = kl.autotune(_CONFIGS, key=["n"], restore_value=["x_ptr"], do_bench=failing)(add_one)
    x = torch.zeros(100)
    with pytest.raises(RuntimeError):
        inc[_grid(100)](x, 100)
    assert torch.equal(x, torch.zeros(100))


@pytest.mark.gpu
def test_autotune_atomic_add_on_gpu():
    counter = kl.autotune(_CONFIGS, key=["n"], reset_to_zero=["out_ptr"])(count_ones)
    x, out = torch.ones(1024, device="cuda"), torch.zeros(1, device="cuda")
    counter[_grid(1024)](x, out, 1024)
    assert out.item() == 1024
    inc = kl.autotune(_CONFIGS, key=["n"], restore_value=["x_ptr"])(add_one)
    x = torch.zeros(1000, device="cuda")
    inc[_grid(1000)](x, 1000)
    assert torch.equal(x.cpu(), torch.ones(1000))


@kl.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def test_ptxas_failure_keeps_the_stages_in_asm(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(J, "_can_assemble", lambda: True)

    def reject(ptx, target, name, options=()):
        raise ToolchainError("ptxas fatal: fake failure")

    monkeypatch.setattr(backend, "ptx_to_cubin", reject)
    ck = double.warmup(torch.zeros(100), 100, BLOCK=128)
    with pytest.raises(ToolchainError, match=r"compiled.asm\['ptx'\]") as info:
        ck.build_gpu()
    assert "fake failure" in str(info.value)
    assert ".entry" in ck.asm["ptx"] and "define" in ck.asm["llir"] and ck.asm["gpu"]
    assert "cubin" not in ck.asm
    with pytest.raises(ToolchainError):  # not mistaken for a finished build
        ck.build_gpu()
