"""Decode-step kernels: head vectors of 16-64 elements over 128-256 threads (mamba-3's step kernel, rotary
embeddings applied to one token). Each thread holds at most one element, so the compiler keeps rotary pairs in
registers for `tl.split`/`tl.join`, re-reads small loads and recomputes elementwise math in the layout a user
wants, and stores a small result in the layout it was computed in: no shared-memory round trip and no barrier
where a thread can do the work itself (Triton does the same; before, this text had 10 barriers to Triton's 1).
Interpreter and GPU runs against float64, outputs NaN-poisoned; the GPU stages (ptxas, no GPU) count barriers."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def rotary_step_kernel(X, B, Ang, G, Y, Sq, Rows, N: tl.constexpr, R: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    x = tl.load(X + pid * N + offs) + tl.load(B + offs)
    a = tl.load(Ang + pid * (N // 2) + tl.arange(0, N // 2))
    c, s = tl.cos(a), tl.sin(a)
    x0, x1 = tl.split(tl.reshape(x, [N // 2, 2]))
    y = tl.reshape(tl.join(x0 * c - x1 * s, x0 * s + x1 * c), [N])
    g = tl.load(G + pid * N + offs)
    y = y * (g / (1.0 + tl.exp(-g)))  # silu gate, computed in the load's layout
    tl.store(Y + pid * N + offs, y)
    tl.store(Sq + pid, tl.sum(y * y, axis=0))
    rows = tl.arange(0, R)
    t = tl.reshape(y, [R, N // R]) + rows[:, None].to(tl.float32)
    tl.store(Rows + pid * R + rows, tl.max(t, axis=1))  # a small row result, stored as it was reduced


def reference(x, b, ang, g, N, R):
    x, b, ang, g = (t.double() for t in (x, b, ang, g))
    v = (x + b).reshape(-1, N // 2, 2)
    c, s = ang.cos(), ang.sin()
    y = torch.stack((v[..., 0] * c - v[..., 1] * s, v[..., 0] * s + v[..., 1] * c), -1).reshape(-1, N)
    y = y * (g * torch.sigmoid(g))
    rows = (y.reshape(-1, R, N // R) + torch.arange(R, dtype=torch.float64)[:, None]).amax(-1)
    return y, (y * y).sum(-1), rows


def _args(P, N, R, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).float().to(device)

    x, b, ang, g = rnd(P, N, scale=3), rnd(N), rnd(P, N // 2, scale=4), rnd(P, N, scale=2)
    x[0, :2] = torch.tensor([1e-30, -65504.0])  # edge values in the first pair
    outs = [torch.full(s, float("nan"), device=device) for s in ((P, N), (P,), (P, R))]
    return (x, b, ang, g), outs


CASES = [(16, 4, 4), (32, 8, 4), (64, 4, 8), (256, 16, 4)]  # N, R, num_warps (the last: larger than the threads)


@pytest.mark.parametrize("N,R,nw", CASES)
def test_interpreter(N, R, nw):
    (x, b, ang, g), (y, sq, rows) = _args(3, N, R)
    rotary_step_kernel[(3,)](x, b, ang, g, y, sq, rows, N=N, R=R, num_warps=nw)
    want = reference(x, b, ang, g, N, R)
    for got, ref in zip((y, sq, rows), want):
        torch.testing.assert_close(got.double(), ref, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("N,R,nw", CASES[:3])
def test_small_tiles_need_no_barrier_but_the_reductions(N, R, nw, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    (x, b, ang, g), (y, sq, rows) = _args(3, N, R)
    compiled = rotary_step_kernel.warmup(x, b, ang, g, y, sq, rows, N=N, R=R, num_warps=nw, grid=(3,))
    try:
        compiled = compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    gpu = compiled.asm["gpu"]
    assert "ttg.convert_layout" not in gpu, gpu
    assert not [b for b in compiled.shared_plan if b["op"] not in ("tt.reduce",)], compiled.shared_plan


@pytest.mark.gpu
@pytest.mark.parametrize("N,R,nw", CASES)
def test_gpu(N, R, nw):
    for seed in range(3):
        (x, b, ang, g), (y, sq, rows) = _args(5, N, R, "cuda", seed)
        rotary_step_kernel[(5,)](x, b, ang, g, y, sq, rows, N=N, R=R, num_warps=nw)
        want = reference(x.cpu(), b.cpu(), ang.cpu(), g.cpu(), N, R)
        for got, ref in zip((y, sq, rows), want):
            torch.testing.assert_close(got.double().cpu(), ref, rtol=2e-5, atol=2e-4)
