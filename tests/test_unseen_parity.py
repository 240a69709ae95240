"""Kernels of real libraries built the way Triton builds them (issue 14). Each test pins one difference found by
compiling a library's specialization with both compilers for sm_90a and comparing SASS: the fix is general, the
kernel here is a small stand-in. Interpreter and GPU runs against float64 with NaN-poisoned outputs; the GPU
stages (ptxas, no GPU needed) check the instruction that differed."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


def _built(kernel, *args, **kw):
    compiled = kernel.warmup(*args, **kw)
    try:
        return compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")


# --- tl.sqrt is the fast square root (FlagGems' hypot: 400 SASS instructions to Triton's 232) ----------------

@kl.jit
def hypot_kernel(X, Y, Out, Rn, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.abs(tl.load(X + offs, mask=m, other=0.0))
    y = tl.abs(tl.load(Y + offs, mask=m, other=0.0))
    t, s = tl.maximum(x, y), tl.minimum(x, y)
    r = s / tl.where(t > 0, t, 1.0)
    tl.store(Out + offs, tl.where(t > 0, t * tl.sqrt(1.0 + r * r), s), mask=m)
    tl.store(Rn + offs, tl.sqrt_rn(x), mask=m)


def _hypot_args(n, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen, dtype=torch.float64) * 1e3
    y = torch.randn(n, generator=gen, dtype=torch.float64) * 1e-2
    x[:4] = torch.tensor([3.0, 0.0, 1e-30, 1e30])
    y[:4] = torch.tensor([4.0, 0.0, 1e-30, -1e30])
    out = [torch.full((n,), float("nan"), device=device) for _ in range(2)]
    return x.float().to(device), y.float().to(device), out


def _check_hypot(x, y, out, rn):
    want = torch.hypot(x.double().cpu(), y.double().cpu())
    torch.testing.assert_close(out.double().cpu(), want, rtol=1e-6, atol=0)
    torch.testing.assert_close(rn.double().cpu(), x.double().cpu().abs().sqrt(), rtol=1.2e-7, atol=0)


def test_hypot_interpreter():
    x, y, (out, rn) = _hypot_args(1000)
    hypot_kernel[(2,)](x, y, out, rn, 1000, BLOCK=512)
    _check_hypot(x, y, out, rn)


def test_sqrt_is_approximate_and_sqrt_rn_is_ieee(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y, (out, rn) = _hypot_args(1000)
    ptx = _built(hypot_kernel, x, y, out, rn, 1000, BLOCK=512, grid=(2,)).asm["ptx"]
    assert "sqrt.approx.ftz.f32" in ptx  # Triton's tl.sqrt
    assert "sqrt.rn.f32" in ptx  # tl.sqrt_rn stays correctly rounded


@pytest.mark.gpu
def test_hypot_gpu():
    for seed in range(3):
        x, y, (out, rn) = _hypot_args(3000, "cuda", seed)
        hypot_kernel[(6,)](x, y, out, rn, 3000, BLOCK=512)
        _check_hypot(x, y, out, rn)
