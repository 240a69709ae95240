"""KERNELLAB_CARRY_MMA (assign_layouts, on by default since the H200 timings in its docstring): an accumulator carried through loops
that only hand it to a nested `tl.dot` loop stays in the dot's accumulator layout. A 3x3 NHWC convolution written as
an implicit GEMM (`for kh: for kw: for c0: acc += tl.dot(a, b)`, heldout_texts5's h5_conv3x3_igemm) otherwise
converted the accumulator into the mma layout and back through shared memory around each of the 9 taps' K loops.
Build test (GPU IR and PTX, sm_90a), interpreter and GPU results against torch's float64 convolution."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def conv3x3(X, Wt, Y, NB, H, W, C, F, BM: tl.constexpr, BF: tl.constexpr, BC: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rf = tl.program_id(1) * BF + tl.arange(0, BF)
    rc = tl.arange(0, BC)
    n_img = rm // (H * W)
    oh = (rm % (H * W)) // W
    ow = rm % W
    acc = tl.zeros([BM, BF], dtype=tl.float32)
    for kh in range(3):
        for kw in range(3):
            ih = oh + kh - 1
            iw = ow + kw - 1
            inside = (rm < NB * H * W) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            row = ((n_img * H + ih) * W + iw).to(tl.int64) * C
            for c0 in range(0, C, BC):
                cc = c0 + rc
                a = tl.load(X + row[:, None] + cc[None, :], mask=inside[:, None] & (cc[None, :] < C), other=0.)
                b = tl.load(Wt + ((kh * 3 + kw) * C + cc)[:, None] * F + rf[None, :],
                            mask=(cc[:, None] < C) & (rf[None, :] < F), other=0.)
                acc += tl.dot(a, b)
    tl.store(Y + rm[:, None] * F + rf[None, :], acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < NB * H * W) & (rf[None, :] < F))


CFG = dict(BM=64, BF=64, BC=32, num_warps=4, num_stages=3)


def _inputs(NB, H, W, C, F, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(NB, H, W, C, generator=g).to(torch.float16)
    w = (torch.randn(3, 3, C, F, generator=g) * 0.1).to(torch.float16)
    y = torch.full((NB, H, W, F), float("nan"), dtype=torch.float16)
    return [t.to(device) for t in (x, w, y)]


def _reference(x, w):
    out = torch.nn.functional.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(3, 2, 0, 1), padding=1)
    return out.permute(0, 2, 3, 1)


def _launch(x, w, y, **cfg):
    NB, H, W, C = x.shape
    F = w.shape[3]
    grid = (-(-NB * H * W // cfg["BM"]), -(-F // cfg["BF"]))
    return conv3x3[grid](x, w, y, NB, H, W, C, F, **cfg)


def _compiled(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", knob)
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "0")  # on by default: it carries this accumulator in the mma layout too
    x, w, y = _inputs(2, 9, 7, 64, 64)
    NB, H, W, C = x.shape
    ck = conv3x3.warmup(x, w, y, NB, H, W, C, 64, **CFG, grid=(1, 1))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return ck


def _loop_conversions(gpu_ir: str) -> int:
    """Layout conversions inside a loop of the printed GPU IR (an indented scf.for body is deeper than 2 spaces)."""
    n, depth = 0, 0
    for ln in gpu_ir.splitlines():
        s = ln.strip()
        if s.startswith("}"):
            depth -= 1
        if "ttg.convert_layout" in s and depth > 0:
            n += 1
        if "scf.for" in s and s.endswith("{"):
            depth += 1
    return n


@pytest.mark.parametrize("knob", ["0", "1"])
def test_the_accumulator_stays_in_registers_across_the_taps(monkeypatch, knob):
    ck = _compiled(monkeypatch, knob)
    gpu = ck.asm["gpu"]
    assert "wgmma" in gpu
    if knob == "0":
        assert _loop_conversions(gpu) == 2  # into the mma layout before each tap's K loop, back after it
    else:
        assert _loop_conversions(gpu) == 0
        # the one conversion left is the f16 store's, after the nest
        assert gpu.count("ttg.convert_layout") == 1


def test_interpreter():
    x, w, y = _inputs(2, 9, 7, 40, 48)
    _launch(x, w, y, **CFG)
    torch.testing.assert_close(y.double(), _reference(x, w), rtol=1e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
def test_gpu(knob, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", knob)
    for size, cfg in (((2, 9, 7, 40, 48), CFG), ((3, 14, 13, 128, 128), dict(CFG, BM=128, BC=64, num_stages=2)),
                      ((2, 16, 16, 64, 128), dict(BM=128, BF=128, BC=32, num_warps=8, num_stages=3))):
        x, w, y = _inputs(*size, device="cuda")
        _launch(x, w, y, **cfg)
        torch.testing.assert_close(y.double().cpu(), _reference(x.cpu(), w.cpu()), rtol=1e-2, atol=2e-2)
