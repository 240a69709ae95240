"""A tile that a broadcast widens along a dimension a `#bits` layout spreads over warps: the interleaved rotary
embedding (flash-attn's `rotary_kernel`), whose cos/sin [M, K/2] tiles are expanded to [1, M, K/2] in the layout of
the split [H, M, K/2] halves (dimension 0 on a warp bit). The size-1 dimension's warps hold copies; codegen used to
assert that every #bits dimension is full size. Found on the H100 by the unseen-libraries run."""
import pytest
import torch

import kernellab
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target


@kernellab.jit
def _rotary_interleaved(X, OUT, COS, SIN, n_rows, BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    rh = tl.arange(0, BLOCK_H)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    rk_half = tl.arange(0, BLOCK_K // 2)
    cs = rm[:, None] * (BLOCK_K // 2) + rk_half[None, :]
    cos = tl.load(COS + cs, mask=rm[:, None] < n_rows, other=1.0)
    sin = tl.load(SIN + cs, mask=rm[:, None] < n_rows, other=0.0)
    offs = rh[:, None, None] * (n_rows * BLOCK_K) + rm[None, :, None] * BLOCK_K + rk[None, None, :]
    mask = rm[None, :, None] < n_rows
    x = tl.load(X + offs, mask=mask, other=0.0)
    x0, x1 = tl.split(tl.reshape(x, [BLOCK_H, BLOCK_M, BLOCK_K // 2, 2]))
    o = tl.reshape(tl.join(x0 * cos - x1 * sin, x0 * sin + x1 * cos), [BLOCK_H, BLOCK_M, BLOCK_K])
    tl.store(OUT + offs, o, mask=mask)


CASES = [(2, 8, 64, 4), (2, 8, 32, 4), (4, 16, 64, 8), (2, 4, 128, 4)]  # BLOCK_H, BLOCK_M, BLOCK_K, warps


def _run(device, bh, bm, bk, nw, rows=19):
    g = torch.Generator().manual_seed(bh * 100 + bm + bk)
    x = torch.randn(bh, rows, bk, generator=g).to(device)
    ang = torch.rand(rows, bk // 2, generator=g, dtype=torch.float64) * 6.28
    cos, sin = ang.cos().float().to(device), ang.sin().float().to(device)
    out = torch.full_like(x, float("nan"))
    _rotary_interleaved[(triton_cdiv(rows, bm),)](x, out, cos, sin, rows, BLOCK_H=bh, BLOCK_M=bm, BLOCK_K=bk,
                                                  num_warps=nw)
    xd, c, s = x.double().cpu(), cos.double().cpu(), sin.double().cpu()
    x0, x1 = xd[..., 0::2], xd[..., 1::2]
    ref = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)
    torch.testing.assert_close(out.double().cpu(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bh,bm,bk,nw", CASES)
def test_interpreter(bh, bm, bk, nw):
    _run("cpu", bh, bm, bk, nw)


@pytest.mark.parametrize("bh,bm,bk,nw", CASES)
def test_builds_for_sm90_and_sm80(bh, bm, bk, nw):
    x = torch.empty(bh, 19, bk)
    c = torch.empty(19, bk // 2)
    for arch in (90, 80):
        ck = _rotary_interleaved.warmup(x, x, c, c, 19, BLOCK_H=bh, BLOCK_M=bm, BLOCK_K=bk, num_warps=nw, grid=(1,))
        ck.build_gpu(Target(arch))
        assert ck.n_spills == 0 and "cubin" in ck.asm


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("bh,bm,bk,nw", CASES)
def test_gpu(bh, bm, bk, nw):
    _run("cuda", bh, bm, bk, nw)


def triton_cdiv(a, b):
    return (a + b - 1) // b
