"""KERNELLAB_REDUCE_WARPS=1 (passes/assign_layouts.py): a tile reduced along its rows keeps its warps on the columns.
The kernel: each program sums K gathered rows of Y, weighted, into one output row (an MoE combine step), loading a
[BK, BH] tile with BK larger than K (the rows past K masked off by a constant mask)."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def combine_rows(y, w, rows, out, H: tl.constexpr, K: tl.constexpr, stride_y, BH: tl.constexpr, BK: tl.constexpr):
    t = tl.program_id(0)
    ks = tl.arange(0, BK)
    live = ks < K
    src = tl.load(rows + t * K + ks, mask=live, other=0)
    wk = tl.load(w + t * K + ks, mask=live, other=0.0)
    for h0 in tl.static_range(0, H, BH):
        hs = h0 + tl.arange(0, BH)
        tile = tl.load(y + src[:, None] * stride_y + hs[None, :], mask=live[:, None] & (hs < H)[None, :], other=0.0)
        tl.store(out + t * H + hs, tl.sum(tile * wk[:, None], axis=0), mask=hs < H)


def _problem(device, T=48, K=2, H=1024, seed=5):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(T * K, H, generator=g)
    y[0, :3] = torch.tensor([1e30, -0.0, -1e-30])  # edge values among the random ones
    w = torch.rand(T * K, generator=g)
    rows = torch.randperm(T * K, generator=g).to(torch.int32)
    ref = (y.double()[rows.long()].view(T, K, H) * w.double().view(T, K, 1)).sum(1)
    out = torch.full((T, H), float("nan"))
    return [t.to(device) for t in (y, w, rows, out)], ref


def _launch(args, BH, BK, warps, **kw):
    y, w, rows, out = args
    T, H = out.shape
    return combine_rows[(T,)](y, w, rows, out, H, rows.numel() // T, y.stride(0), BH=BH, BK=BK, num_warps=warps, **kw)


@pytest.mark.parametrize("knob", ["0", "1"])
def test_interpreter(knob, monkeypatch):
    monkeypatch.setenv("KERNELLAB_REDUCE_WARPS", knob)
    args, ref = _problem("cpu")
    _launch(args, 512, 8, 4)
    assert torch.allclose(args[3].double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_sm90_reduction_stays_in_each_thread(tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    args, _ = _problem("cpu")
    bars = {}
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_REDUCE_WARPS", knob)
        y, w, rows, out = args
        ck = combine_rows.warmup(y, w, rows, out, 1024, 2, y.stride(0), BH=512, BK=8, grid=(48,), num_warps=4)
        ck.build_gpu(Target(90))
        assert ck.n_spills == 0
        bars[knob] = ck.asm["ptx"].count("bar.sync")
    assert bars["0"] > 0 and bars["1"] == 0, bars  # the rows sum through shared memory by default, not with it


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("BH, BK, warps", [(512, 8, 4), (256, 4, 4), (128, 2, 8), (1024, 16, 8)])
def test_gpu(knob, BH, BK, warps, monkeypatch):
    monkeypatch.setenv("KERNELLAB_REDUCE_WARPS", knob)
    args, ref = _problem("cuda")
    _launch(args, BH, BK, warps)
    torch.cuda.synchronize()
    assert torch.allclose(args[3].cpu().double(), ref, rtol=1e-5, atol=1e-5)
