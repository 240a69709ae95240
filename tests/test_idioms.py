"""Equivalent formulations (tests/idioms.py) compute the same thing on the interpreter and the GPU, and
the matmul ones compile to the same fast form: no spills, tensor cores in the loop."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

from .idioms import make_idioms

WORKLOADS = {w.name: w for w in make_idioms(kl.jit, tl)}
CASES = [(w.name, v.name) for w in WORKLOADS.values() for v in w.variants]


def _variant(workload, variant):
    w = WORKLOADS[workload]
    return w, next(v for v in w.variants if v.name == variant)


def _check(w, v, config, device, seed, kernel=None):
    x = w.inputs(v.test_size or w.sizes["test"], device, seed)
    v.launch(kernel or v.kernel, x, config)
    got = w.result(x).cpu()
    ref = w.expected(x, v).cpu()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    err = (got - ref).norm() / ref.norm()
    assert err < w.tol, f"{w.name}/{v.name} {config}: relative error {err:.2e}"


@pytest.mark.parametrize("workload, variant", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_interpreter(workload, variant):
    w, v = _variant(workload, variant)
    _check(w, v, v.configs[-1], "cpu", seed=1)


AUTOTUNED = [(w.name, v.name) for w in WORKLOADS.values() for v in w.variants if v.autotune]


@pytest.mark.parametrize("workload, variant", AUTOTUNED, ids=[f"{a}-{b}" for a, b in AUTOTUNED])
def test_autotuned_launch_interpreter(workload, variant):
    """benchmarks/idioms.py's autotune rows: the variant's own launcher with no config, the grid asking the config
    the autotuner picked (two small configs here)."""
    from benchmarks.idioms import _autotuned

    w, v = _variant(workload, variant)
    small = [dict(c, BM=32, BN=32, BK=32) for c in v.configs[-2:]]
    _check(w, v, None, "cpu", seed=2, kernel=_autotuned(kl, v.kernel, small))


@pytest.mark.gpu
@pytest.mark.parametrize("workload, variant", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_gpu(workload, variant):
    w, v = _variant(workload, variant)
    for i, config in enumerate(v.configs):
        _check(w, v, config, "cuda", seed=10 + i)


def _build(v, config, workload="matmul"):
    import kernellab.runtime.jit as jit

    x = WORKLOADS[workload].inputs((512, 512, 512), "cpu", 0)
    built = []
    real_run = jit.CompiledKernel.run

    def build_only(self, grid, args):
        built.append(self.build_gpu())

    jit.CompiledKernel.run = build_only
    try:
        v.launch(v.kernel, x, config)
    finally:
        jit.CompiledKernel.run = real_run
    return built[0]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("variant", [v.name for v in WORKLOADS["matmul"].variants])
def test_matmul_idioms_compile_alike(variant):
    """Every way of writing the accumulation reaches the accumulating wgmma with no spills, within a few
    registers of the tutorial's `tl.dot(a, b, acc)` text."""
    w = WORKLOADS["matmul"]
    base = _build(w.variants[0], w.variants[0].configs[0])
    ck = _build(_variant("matmul", variant)[1], w.variants[0].configs[0])
    assert ck.n_spills == 0
    assert ck.n_regs <= base.n_regs + 24
    loop = ck.asm["ptx"]
    assert "wgmma.mma_async" in loop
    assert "tt.dot" in ck.asm["tile"] and "arith.addf" not in ck.trace.ir_after("fold_dot_accumulator").split(
        "tt.dot")[1].split("scf.yield")[0]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("variant", [v.name for v in WORKLOADS["linear"].variants])
def test_linear_idioms_compile_to_wgmma(variant):
    """The linear layer's texts (B = w.T, K-major; the fused bias and activation): the accumulating wgmma in the
    loop, fed by cp.async or TMA (descriptors), no spills, within a few registers of the matmul tutorial text."""
    base = _build(WORKLOADS["matmul"].variants[0], MATMUL_CONFIG)
    ck = _build(_variant("linear", variant)[1], MATMUL_CONFIG, "linear")
    assert ck.n_spills == 0
    assert ck.n_regs <= base.n_regs + 24, (ck.n_regs, base.n_regs)
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async" in ptx
    assert ("cp.async.bulk.tensor" if "descriptor" in variant else "cp.async.cg") in ptx


MATMUL_CONFIG = dict(BM=128, BN=256, BK=64, GM=8, num_stages=3, num_warps=8)


def test_linear_activation_is_a_parameter_of_the_variant():
    """linear's activation is fixed by each variant's text, so it is the variant's (params), not an entry of the
    inputs: the reference reads it from the variant, the inputs hold the tensors only."""
    w = WORKLOADS["linear"]
    assert {v.name: v.params for v in w.variants} == {"swizzle2d_leaky": {"act": "leaky"},
                                                       "descriptor_gelu": {"act": "gelu"}}
    assert all(not v.params for v in WORKLOADS["matmul"].variants)
    x = w.inputs(w.sizes["test"], "cpu", seed=2)
    assert set(x) == {"x", "w", "bias", "y"}
    y = x["x"].double() @ x["w"].double().T + x["bias"].double()
    leaky, gelu = (w.expected(x, v) for v in w.variants)
    torch.testing.assert_close(leaky, torch.where(y >= 0, y, 0.01 * y))
    torch.testing.assert_close(gelu, y * torch.sigmoid(1.702 * y))
