"""Dots whose 64-row tile is split over 8 warps as [4 along M, 2 along N] (mma.sync, or wgmma side by side), with
what attention does to the result: store it, reduce its rows across the two warps that share them, exponentiate
against the row max, and feed it to a second dot. Each step is its own GPU test, so a failure names the step."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@kl.jit
def chain(Q, K, V, O, M_out, STEP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
          ITERS: tl.constexpr):
    rm, rn, rd = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :])
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for it in range(ITERS):
        kt = tl.load(K + (it * BN + rn)[None, :] * D + rd[:, None])
        s = tl.dot(q, kt)
        if STEP == 0:
            tl.store(O + rm[:, None] * BN + rn[None, :], s)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            if STEP == 1:
                tl.store(M_out + rm, m_new)
            else:
                p = tl.exp(s - m_new[:, None])
                alpha = tl.exp(m_i - m_new)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(V + (it * BN + rn)[:, None] * D + rd[None, :])
                acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
                m_i = m_new
    if STEP == 2:
        tl.store(O + rm[:, None] * D + rd[None, :], acc / l_i[:, None])
        tl.store(M_out + rm, m_i)


def _run(step, bm, bn, d, iters, warps, device):
    g = torch.Generator().manual_seed(bm + bn + d + iters + step)
    q = torch.randn(bm, d, generator=g).half()
    k = torch.randn(iters * bn, d, generator=g).half()
    v = torch.randn(iters * bn, d, generator=g).half()
    o = torch.full((bm, bn if step == 0 else d), float("nan"), device=device)
    m = torch.full((bm,), float("nan"), device=device)
    chain[(1,)](q.to(device), k.to(device), v.to(device), o, m, STEP=step, BM=bm, BN=bn, D=d, ITERS=iters,
                num_warps=warps)
    s = q.float() @ k.float().T
    if step == 0:
        return o.cpu(), s
    if step == 1:
        return m.cpu(), s[:, -bn:].max(1).values if iters == 1 else s.max(1).values
    return o.cpu(), torch.softmax(s, 1) @ v.float()


CASES = [(step, bm, bn, d, iters, w) for step in (0, 1, 2) for bm, bn, d, w in
         ((64, 64, 64, 8), (64, 128, 64, 8), (64, 64, 128, 8), (128, 64, 64, 8), (64, 64, 64, 4),
          (32, 64, 64, 4), (16, 64, 32, 4)) for iters in (1, 3)
         if not (step < 2 and iters == 3)]


@pytest.mark.parametrize("step, bm, bn, d, iters, warps", CASES[:6])
def test_interpreter(step, bm, bn, d, iters, warps):
    got, ref = _run(step, bm, bn, d, iters, warps, "cpu")
    torch.testing.assert_close(got, ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("bm, warps, split", [(64, 8, 2), (32, 4, 2), (16, 4, 4), (128, 8, 1)])
def test_row_reductions_of_a_split_accumulator_get_scratch(bm, warps, split):
    """A row max/sum of an accumulator whose columns are split over `split` warps needs one partial per warp in
    shared memory: the allocator must reserve it (it reserved nothing for mma layouts, so the partials were written
    over whatever lived at offset 0, the staged q here) and a barrier must order it against the loop's next turn."""
    from kernellab.compiler.codegen.target import Target

    q = torch.empty(bm, 64, dtype=torch.float16)
    k = torch.empty(3 * 64, 64, dtype=torch.float16)
    ck = chain.warmup(q, k, k, torch.empty(bm, 64), torch.empty(bm), STEP=2, BM=bm, BN=64, D=64, ITERS=3,
                      num_warps=warps, grid=(1,))
    ck.build_gpu(Target(90))
    gpu = ck.asm["gpu"]
    reduces = [line for line in gpu.splitlines() if "tt.reduce %" in line]
    assert len(reduces) == 2
    assert all(("smem_bytes" in line) == (split > 1) for line in reduces), reduces
    if split > 1:
        body = gpu[gpu.index("scf.for"):gpu.index("scf.yield")]
        assert "ttg.barrier" in body


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("step, bm, bn, d, iters, warps", CASES)
def test_gpu(step, bm, bn, d, iters, warps):
    got, ref = _run(step, bm, bn, d, iters, warps, "cuda")
    assert not torch.isnan(got).any(), f"{int(torch.isnan(got).sum())} NaN (unwritten?) elements"
    torch.testing.assert_close(got, ref, atol=2e-2, rtol=2e-2)
