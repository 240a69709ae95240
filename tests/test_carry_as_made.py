"""KERNELLAB_CARRY_AS_MADE (assign_layouts, on by default; `0` turns it off): a Mamba-style selective scan carries its
state `h` (made by a column reduction of the [BLOCK_L, N] tile, read as `h[None, :]` over it) in the tile's column
slice instead of the default 1-D layout: two conversions (shared-memory round trips with barriers) fewer each
iteration (heldout_texts5's h5_selective_scan: 0.81-0.86x Triton on the H200). Interpreter results against float64
(the knob changes GPU IR only), a build for sm_90a at both settings, GPU results at both settings, with
KERNELLAB_SCAN_LEAN (tests/test_scan_lean.py) and KERNELLAB_LONG_REMAT (tests/gpu_passes/test_long_remat.py), the
other two knobs that bring this kernel to Triton's code: with all three no conversion is left in the loop."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def _combine(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@kl.jit
def ssm_scan(X, DT, A, Bm, Cm, Y, L, D, N: tl.constexpr, BLOCK_L: tl.constexpr):
    pid_b = tl.program_id(0)
    d = tl.program_id(1)
    n = tl.arange(0, N)
    a = tl.load(A + d * N + n)
    h = tl.zeros([N], dtype=tl.float32)
    last = (tl.arange(0, BLOCK_L) == BLOCK_L - 1)[:, None]
    for l0 in range(0, L, BLOCK_L):
        t = l0 + tl.arange(0, BLOCK_L)
        tm = t < L
        row = pid_b * L + t
        x = tl.load(X + row * D + d, mask=tm, other=0.).to(tl.float32)
        dt = tl.load(DT + row * D + d, mask=tm, other=0.)
        dt = tl.where(tm, tl.where(dt > 20., dt, tl.log(1. + tl.exp(dt))), 0.)
        bmat = tl.load(Bm + row[:, None] * N + n[None, :], mask=tm[:, None], other=0.).to(tl.float32)
        cmat = tl.load(Cm + row[:, None] * N + n[None, :], mask=tm[:, None], other=0.).to(tl.float32)
        ga, gb = tl.associative_scan((tl.exp(dt[:, None] * a[None, :]), dt[:, None] * bmat * x[:, None]), 0, _combine)
        hs = ga * h[None, :] + gb
        tl.store(Y + row * D + d, tl.sum(hs * cmat, axis=1) + x, mask=tm)
        h = tl.sum(tl.where(last, hs, 0.), axis=0)


def _inputs(Bn, L, D, N, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(Bn, L, D, generator=g).bfloat16()
    dt = torch.randn(Bn, L, D, generator=g) * 2
    dt[0, 0, 0] = 25.0  # softplus' linear branch
    a = -torch.rand(D, N, generator=g) - 0.1
    b = (torch.randn(Bn, L, N, generator=g) * 0.5).bfloat16()
    c = (torch.randn(Bn, L, N, generator=g) * 0.5).bfloat16()
    y = torch.full((Bn, L, D), float("nan"))  # poisoned
    return [t.to(device) for t in (x, dt, a, b, c, y)]


def _reference(x, dt, a, b, c):
    xx, dt = x.double().cpu(), torch.nn.functional.softplus(dt.double().cpu())
    a, b, c = a.double().cpu(), b.double().cpu(), c.double().cpu()
    Bn, L, D = xx.shape
    h = torch.zeros(Bn, D, a.shape[1], dtype=torch.float64)
    ys = []
    for t in range(L):
        h = torch.exp(dt[:, t, :, None] * a[None]) * h + dt[:, t, :, None] * b[:, t, None, :] * xx[:, t, :, None]
        ys.append((h * c[:, t, None, :]).sum(-1) + xx[:, t])
    return torch.stack(ys, 1)


def _launch(x, dt, a, b, c, y, **cfg):
    Bn, L, D = x.shape
    ssm_scan[(Bn, D)](x, dt, a, b, c, y, L, D, N=a.shape[1], **cfg)


def test_interpreter_against_float64():
    x, dt, a, b, c, y = _inputs(2, 45, 3, 16, seed=1)
    _launch(x, dt, a, b, c, y, BLOCK_L=16)
    torch.testing.assert_close(y.double(), _reference(x, dt, a, b, c), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("knob", ["0", "1"])
def test_the_state_is_carried_in_the_tile_slice(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", knob)
    monkeypatch.setenv("KERNELLAB_LONG_REMAT", "0")  # on by default: it removes the dt conversion counted below
    x, dt, a, b, c, y = _inputs(1, 256, 4, 16)
    ck = ssm_scan.warmup(x, dt, a, b, c, y, 256, 4, N=16, BLOCK_L=64, num_warps=4, grid=(1,))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    gpu = ck.asm["gpu"]
    loop = gpu[gpu.index("scf.for"):]
    stats = next(r.stats for r in ck.trace.passes if r.name == "assign_layouts")
    # the dt conversion stays either way; the state's read and yield conversions go with the knob
    assert loop.count("ttg.convert_layout") == (1 if knob == "1" else 3)
    assert ("loop_layouts_followed" in stats) == (knob == "1")
    assert ck.n_spills == 0


KNOBS = ("KERNELLAB_CARRY_AS_MADE", "KERNELLAB_SCAN_LEAN", "KERNELLAB_LONG_REMAT")


@pytest.mark.parametrize("block_l,warps", [(64, 4), (32, 2)])
def test_with_all_three_knobs_no_conversion_is_left_in_the_loop(monkeypatch, block_l, warps):
    for k in KNOBS:
        monkeypatch.setenv(k, "1")
    x, dt, a, b, c, y = _inputs(1, 256, 4, 16)
    ck = ssm_scan.warmup(x, dt, a, b, c, y, 256, 4, N=16, BLOCK_L=block_l, num_warps=warps, grid=(1,))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    gpu = ck.asm["gpu"]
    loop = gpu[gpu.index("scf.for"):]
    assert "ttg.convert_layout" not in loop  # dt computed in the tile's row slice, h carried in its column slice
    assert ck.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("on", [(), KNOBS[:1], KNOBS[1:2], KNOBS[2:], KNOBS])  # the selective scan's three knobs
@pytest.mark.parametrize("cfg", [dict(BLOCK_L=64, num_warps=4), dict(BLOCK_L=128, num_warps=4),
                                 dict(BLOCK_L=32, num_warps=2), dict(BLOCK_L=16, num_warps=1)])
def test_gpu(on, cfg, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    for k in KNOBS:
        monkeypatch.setenv(k, "1" if k in on else "0")
    for size, seed in (((2, 300, 5, 16), 1), ((1, 1000, 3, 16), 2), ((3, 64, 2, 32), 3)):
        x, dt, a, b, c, y = _inputs(*size, "cuda", seed)
        _launch(x, dt, a, b, c, y, **cfg)
        torch.testing.assert_close(y.double().cpu(), _reference(x, dt, a, b, c), rtol=2e-3, atol=2e-3)


@kl.jit
def conv3x3(X, Wt, Y, NB, H, W, C, F, BM: tl.constexpr, BF: tl.constexpr, BC: tl.constexpr):
    """3x3 convolution, stride 1, padding 1, NHWC, as an implicit GEMM: the accumulator passes through the kh and kw
    loops around the channel loop's dots (carried in the mma layout through all three with the knob)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rf = tl.program_id(1) * BF + tl.arange(0, BF)
    rc = tl.arange(0, BC)
    img = rm // (H * W)
    oh = rm % (H * W) // W
    ow = rm % W
    acc = tl.zeros([BM, BF], dtype=tl.float32)
    for kh in range(3):
        for kw in range(3):
            ih = oh + kh - 1
            iw = ow + kw - 1
            ok = (rm < NB * H * W) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            base = ((img * H + ih) * W + iw) * C
            for c0 in range(0, C, BC):
                cc = c0 + rc
                a = tl.load(X + base[:, None] + cc[None, :], mask=ok[:, None] & (cc[None, :] < C), other=0.)
                b = tl.load(Wt + ((kh * 3 + kw) * C + cc)[:, None] * F + rf[None, :],
                            mask=(cc[:, None] < C) & (rf[None, :] < F), other=0.)
                acc += tl.dot(a, b)
    tl.store(Y + rm[:, None] * F + rf[None, :], acc.to(Y.dtype.element_ty), mask=(rm[:, None] < NB * H * W) & (rf[None, :] < F))


def _conv_inputs(NB, H, W, C, F, device="cpu", seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(NB, H, W, C, generator=g).to(dtype)
    w = (torch.randn(3, 3, C, F, generator=g) * 0.2).to(dtype)
    y = torch.full((NB, H, W, F), float("nan"), dtype=dtype)
    ref = torch.nn.functional.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(3, 2, 0, 1), padding=1)
    return x.to(device), w.to(device), y.to(device), ref.permute(0, 2, 3, 1)


def _conv_launch(x, w, y, **cfg):
    NB, H, W, C = x.shape
    F = w.shape[3]
    grid = (-(-(NB * H * W) // cfg["BM"]), -(-F // cfg["BF"]))
    conv3x3[grid](x, w, y, NB, H, W, C, F, **cfg)


def test_conv_interpreter_against_float64():
    x, w, y, ref = _conv_inputs(2, 5, 7, 6, 10, dtype=torch.float32)
    _conv_launch(x, w, y, BM=16, BF=16, BC=16)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("knob", ["0", "1"])
def test_conv_accumulator_carried_in_the_mma_layout(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", knob)
    # KERNELLAB_CARRY_MMA (on by default) carries this accumulator in the mma layout too: off, to see this rule alone
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "0")
    x, w, y, _ = _conv_inputs(2, 8, 8, 64, 64)
    NB, H, W, C = x.shape
    ck = conv3x3.warmup(x, w, y, NB, H, W, C, 64, BM=128, BF=64, BC=32, num_warps=4, num_stages=3, grid=(1,))
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    gpu = ck.asm["gpu"]
    loops = gpu[gpu.index("scf.for"):gpu.rindex("scf.yield")]
    # without it the 128x64 f32 accumulator goes through shared memory twice every kw iteration
    assert ("ttg.convert_layout" in loops) == (knob == "0")
    assert ck.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("cfg", [dict(BM=128, BF=64, BC=32, num_warps=4, num_stages=3),
                                 dict(BM=64, BF=64, BC=64, num_warps=4, num_stages=2),
                                 dict(BM=128, BF=128, BC=32, num_warps=8, num_stages=3)])
def test_conv_gpu(knob, cfg, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", knob)
    for size, seed in (((2, 9, 7, 40, 48), 1), ((3, 16, 16, 64, 128), 2)):
        x, w, y, ref = _conv_inputs(*size, "cuda", seed)
        _conv_launch(x, w, y, **cfg)
        torch.testing.assert_close(y.double().cpu(), ref, rtol=2e-2, atol=5e-2)
