"""The corpus on the CPU interpreter, against torch in float64 on fresh random inputs."""
import pytest

import kernellab as kl
import kernellab.language as tl

from .corpus import CASES, check, make_kernels

KERNELS = make_kernels(kl, tl)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_corpus_on_interpreter(case, seed):
    outs, refs, tol = case.run(KERNELS, "cpu", seed=seed)
    check(outs, refs, tol)
