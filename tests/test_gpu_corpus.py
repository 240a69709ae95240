"""The corpus on the GPU through kernellab's own backend: same results as torch (float64
reference, fresh random inputs, poisoned outputs), and the same as the CPU interpreter."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

from .corpus import CASES, check, make_kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KERNELS = make_kernels(kl, tl)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_corpus_on_gpu(case, seed):
    outs, refs, tol = case.run(KERNELS, "cuda", seed=seed)
    torch.cuda.synchronize()
    check(outs, refs, tol)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gpu_agrees_with_interpreter(case):
    gpu_outs, _, tol = case.run(KERNELS, "cuda", seed=5)
    cpu_outs, _, _ = case.run(KERNELS, "cpu", seed=5)
    for g, c in zip(gpu_outs, cpu_outs):
        g = g.cpu()
        if g.is_floating_point():
            torch.testing.assert_close(g.double(), c.double(), atol=max(tol, 1e-6), rtol=max(tol, 1e-6))
        else:
            assert torch.equal(g.to(c.dtype), c)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_large_on_gpu(case):
    outs, refs, tol = case.run(KERNELS, "cuda", seed=2, size="large")
    torch.cuda.synchronize()
    check(outs, refs, tol)
