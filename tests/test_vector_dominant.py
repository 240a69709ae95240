"""KERNELLAB_VECTOR_DOMINANT (passes/assign_layouts.py): a gather does not set the kernel's usual layout where a
contiguous access as large follows it. The kernel: a bilinear upsample (align_corners=False) of NCHW planes by four
gathers, stored contiguously (heldout_texts5's text, written here again), checked against torch's interpolate in
float64, the output poisoned with NaN and sizes that leave partial blocks."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def upsample(X, Y, H, W, OH, OW, scale_h, scale_w, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nc = tl.program_id(1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < OH * OW
    oy = offs // OW
    ox = offs % OW
    sy = tl.maximum((oy.to(tl.float32) + 0.5) * scale_h - 0.5, 0.)
    sx = tl.maximum((ox.to(tl.float32) + 0.5) * scale_w - 0.5, 0.)
    y0 = sy.to(tl.int32)
    x0 = sx.to(tl.int32)
    y1 = tl.minimum(y0 + 1, H - 1)
    x1 = tl.minimum(x0 + 1, W - 1)
    ly = sy - y0
    lx = sx - x0
    base = X + nc.to(tl.int64) * H * W
    v00 = tl.load(base + y0 * W + x0, mask=m, other=0.)
    v01 = tl.load(base + y0 * W + x1, mask=m, other=0.)
    v10 = tl.load(base + y1 * W + x0, mask=m, other=0.)
    v11 = tl.load(base + y1 * W + x1, mask=m, other=0.)
    out = (1. - ly) * ((1. - lx) * v00 + lx * v01) + ly * ((1. - lx) * v10 + lx * v11)
    tl.store(Y + nc.to(tl.int64) * OH * OW + offs, out, mask=m)


def _problem(device, NC, H, W, OH, OW, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(NC, H, W, generator=g)
    x[0, 0, :3] = torch.tensor([1e30, -0.0, -1e-30])  # edge values among the random ones
    ref = torch.nn.functional.interpolate(x.double()[None], size=(OH, OW), mode="bilinear", align_corners=False)[0]
    y = torch.full((NC, OH, OW), float("nan"))
    return [t.to(device) for t in (x, y)], ref


def _launch(x, y, BLOCK, warps):
    NC, H, W = x.shape
    OH, OW = y.shape[1:]
    return upsample[((OH * OW + BLOCK - 1) // BLOCK, NC)](x, y, H, W, OH, OW, H / OH, W / OW, BLOCK=BLOCK,
                                                           num_warps=warps)


def _close(got, ref):
    got = got.cpu().double()
    assert not got.isnan().any()
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), (got - ref).abs().max()


@pytest.mark.parametrize("knob", ["0", "1"])
def test_interpreter(knob, monkeypatch):
    monkeypatch.setenv("KERNELLAB_VECTOR_DOMINANT", knob)
    (x, y), ref = _problem("cpu", 3, 13, 10, 32, 48)
    _launch(x, y, 256, 4)
    _close(y, ref)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_sm90_store_is_vectorized(tmp_path, monkeypatch):
    """With the knob the four gathers take the store's 4 a thread: the outputs go 16 bytes an instruction."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y = torch.empty(2, 128, 128), torch.empty(2, 256, 256)
    stores = {}
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_VECTOR_DOMINANT", knob)
        ck = upsample.warmup(x, y, 128, 128, 256, 256, 0.5, 0.5, BLOCK=1024, grid=(64, 2), num_warps=4)
        ck.build_gpu(Target(90))
        assert ck.n_spills == 0
        ptx = ck.asm["ptx"]
        stores[knob] = (ptx.count("st.global.v4.b32"), ptx.count("st.global.b32"))
    assert stores == {"0": (0, 8), "1": (2, 0)}, stores


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("BLOCK, warps, size", [(1024, 4, (8, 128, 128, 256, 256)), (256, 2, (3, 13, 10, 29, 17)),
                                                (2048, 8, (4, 64, 48, 256, 192)), (1024, 4, (2, 40, 40, 72, 56))])
def test_gpu(knob, BLOCK, warps, size, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_VECTOR_DOMINANT", knob)
    NC, H, W, OH, OW = size
    (x, y), ref = _problem("cuda", NC, H, W, OH, OW)
    _launch(x, y, BLOCK, warps)
    torch.cuda.synchronize()
    _close(y, ref)
