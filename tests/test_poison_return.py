"""Functions that return values on some paths and fall off the end on others (Triton's rule): the path
without `return` gives values of the same types with undefined contents (`ub.poison`; LLVM `poison` on the
GPU, NaN / 0x7f.. bytes on the interpreter). Callers that only use the result where it was defined get the
right answer; outputs are poisoned so unwritten elements show. A `return` under an `if` on an assigned
literal (`a = False`, a tensor in Triton) still sets the result type."""
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

SENTINEL = -0x5A5A5A5B
has_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = pytest.mark.gpu


@kl.jit
def scaled_if_positive(x, s):
    if s > 0:
        return x * s, s + 1


@kl.jit
def first_nonzero(v):
    if v != 0:
        return v
    else:
        if v == 0:
            return 1


@kl.jit
def maybe_scaled(X, Out, Scales, Out2, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.load(Scales + pid)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    y, t = scaled_if_positive(x, s)
    if s > 0:  # only where the helper returned
        tl.store(Out + offs, y)
        tl.store(Out2 + pid, t)
    tl.store(Out2 + 4 + pid, first_nonzero(s))


def _check(device):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4 * 32, generator=g)
    scales = torch.tensor([3, -2, 0, 7], dtype=torch.int32)
    out = torch.full_like(x, float("nan"))
    out2 = torch.full((8,), SENTINEL, dtype=torch.int32)
    xd, od, o2d, sd = (t.to(device) for t in (x, out, out2, scales))
    maybe_scaled[(4,)](xd, od, sd, o2d, BLOCK=32)
    out, out2 = od.cpu().view(4, 32), o2d.cpu()
    xs = x.view(4, 32).double()
    for p, s in enumerate(scales.tolist()):
        if s > 0:
            torch.testing.assert_close(out[p].double(), xs[p] * s)
            assert out2[p] == s + 1
        else:
            assert torch.isnan(out[p]).all() and out2[p] == SENTINEL
    assert out2[4:].tolist() == [3, -2, 1, 7]


def test_fall_through_returns_poison_interpreter():
    _check("cpu")


def test_poison_reads_as_nan_and_7f_bytes_on_the_interpreter():
    """What the interpreter shows for an undefined result (any value is allowed; these make the bug visible)."""

    @kl.jit
    def k(Out, OutI, s):
        y, t = scaled_if_positive(tl.full((16,), 1.5, tl.float32), s)
        tl.store(Out + tl.arange(0, 16), y)
        tl.store(OutI, t)

    out, outi = torch.zeros(16), torch.zeros(1, dtype=torch.int32)
    k[(1,)](out, outi, -1)
    assert torch.isnan(out).all() and outi.item() == 0x7F7F7F7F
    k[(1,)](out, outi, 2)
    assert torch.equal(out, torch.full((16,), 3.0)) and outi.item() == 3


@kl.jit
def return_poison(x):
    a = False
    if a:
        return x


@kl.jit
def poison_kernel(Out):
    zero = 0
    tl.store(Out, return_poison(zero))


def test_assigned_literal_condition_sets_the_result_type():
    out = torch.full((1,), SENTINEL, dtype=torch.int32)
    ck = poison_kernel.warmup(out, grid=(1,))
    assert "ub.poison" in ck.asm["tile"]
    poison_kernel[(1,)](out)
    assert out.item() == 0x7F7F7F7F


def test_a_kernel_still_cannot_return_a_value():
    @kl.jit
    def k(X, s):
        if s > 0:
            return 1
        tl.store(X, s)

    with pytest.raises(kl.CompilationError, match="return"):
        k[(1,)](torch.zeros(1, dtype=torch.int32), 3)


@has_ptxas
def test_poison_assembles():
    ck = poison_kernel.warmup(torch.empty(1, dtype=torch.int32), grid=(1,))
    assert "poison" in ck.asm["llir"] and "cubin" in ck.asm
    ck = maybe_scaled.warmup(torch.empty(128), torch.empty(128), torch.empty(4, dtype=torch.int32),
                             torch.empty(8, dtype=torch.int32), BLOCK=32, grid=(4,))
    ck.build_gpu()
    assert "cubin" in ck.asm and "ub.poison" in ck.asm["tile"]


@gpu
def test_fall_through_returns_poison_gpu():
    _check("cuda")
