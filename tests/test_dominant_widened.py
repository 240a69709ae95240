"""KERNELLAB_DOMINANT_WIDENED (assign_layouts, on by default since its H200 timing; =0 turns it off): where the largest access of a rank
is a load that `_widen_unaligned_loads` widens (a causal conv's first, shifted tap), that rank's usual layout, which
fresh values take, is the widened one too. heldout_texts3's causal conv1d (benchmarks/NOTES.md): its accumulator,
`zeros + bias[:, None]`, took the unwidened layout (one element a thread along the row) and every tap's product was
converted into it through shared memory. Pass test on the kernel's tile IR (layouts and conversions with the knob
on and off), the sm_90a build (no shared memory, fewer registers), the interpreter and the GPU."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import assign_layouts
from kernellab.compiler.verifier import verify


@kl.jit
def conv1d_silu(X, W, BIAS, Y, D, L, sxb, sxd, KW: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_L: tl.constexpr):
    ls = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    ds = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    b = tl.program_id(2)
    dmask = ds < D
    acc = tl.zeros([BLOCK_D, BLOCK_L], tl.float32) + tl.load(BIAS + ds, mask=dmask, other=0.)[:, None]
    for k in tl.static_range(KW):
        pos = ls - (KW - 1 - k)
        m = dmask[:, None] & (pos[None, :] >= 0) & (pos[None, :] < L)
        x = tl.load(X + b * sxb + ds[:, None] * sxd + pos[None, :], mask=m, other=0.)
        w = tl.load(W + ds * KW + k, mask=dmask, other=0.)
        acc += x.to(tl.float32) * w[:, None]
    y = acc * tl.sigmoid(acc)
    tl.store(Y + b * sxb + ds[:, None] * sxd + ls[None, :], y.to(Y.dtype.element_ty),
             mask=dmask[:, None] & (ls[None, :] < L))


def _inputs(B, D, L, KW, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, D, L, generator=g).to(torch.bfloat16)
    x.view(-1)[:4] = torch.tensor([8.0, -8.0, 1e-3, -0.0])
    w = torch.randn(D, KW, generator=g) * 0.5
    bias = torch.randn(D, generator=g)
    y = torch.full((B, D, L), float("nan"), dtype=torch.bfloat16)
    return [t.to(device) for t in (x, w, bias, y)]


def _launch(fn, x, w, bias, y, cfg):
    B, D, L = x.shape
    grid = ((L + cfg["BLOCK_L"] - 1) // cfg["BLOCK_L"], (D + cfg["BLOCK_D"] - 1) // cfg["BLOCK_D"], B)
    args = (x, w, bias, y, D, L, x.stride(0), x.stride(1))
    return fn(grid, args, dict(KW=w.shape[1], **cfg))


def _reference(x, w, bias):
    xx, ww = x.cpu().double(), w.cpu().double()
    D, KW = ww.shape
    z = torch.nn.functional.conv1d(torch.nn.functional.pad(xx, (KW - 1, 0)), ww[:, None, :], bias.cpu().double(),
                                   groups=D)
    return torch.nn.functional.silu(z)


CONFIGS = [dict(BLOCK_D=64, BLOCK_L=64, num_warps=4), dict(BLOCK_D=16, BLOCK_L=256, num_warps=4),
           dict(BLOCK_D=8, BLOCK_L=512, num_warps=8)]


def _tile_ir(cfg):
    x, w, bias, y = _inputs(2, 4096, 1024, 4)
    return _launch(lambda grid, args, kw: conv1d_silu.warmup(*args, **kw, grid=grid), x, w, bias, y, cfg)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=lambda c: f"{c['BLOCK_D']}x{c['BLOCK_L']}")
def test_fresh_values_take_the_widened_layout(cfg, monkeypatch):
    """assign_layouts on the kernel's tile IR: with the knob the accumulator's constant and the bias' expand_dims
    take the taps' widened layout (8 elements a thread along the row) and no 2-D value converts; without it the
    accumulator is laid out one element a thread and the taps' products convert into it."""
    text = _tile_ir(cfg).asm["tile"]
    got = {}
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_DOMINANT_WIDENED", on)
        m = parse_module(text)
        assign_layouts.run(m, GpuOptions(num_warps=cfg["num_warps"]))
        verify(m, after=assign_layouts.NAME)
        bias = next(op for op in m.kernel.walk() if op.name == "arith.addf")  # zeros + bias[:, None]
        converts_2d = [op for op in m.kernel.walk() if op.name == "ttg.convert_layout" and
                       len(op.result.type.shape) == 2]
        got[on] = (bias.result.type.layout.spt, len(converts_2d))
    assert got["1"] == ((1, 8), 0), got  # the taps' widened run: nothing 2-D converts
    assert got["0"][0] == (1, 1) and got["0"][1] > 0, got


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['BLOCK_D']}x{c['BLOCK_L']}")
def test_sm90_build_has_no_conversion_through_shared_memory(cfg, monkeypatch):
    built = {}
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_DOMINANT_WIDENED", on)
        ck = _tile_ir(cfg)
        ck.build_gpu()
        built[on] = ck
    assert "bar.sync" in built["0"].asm["ptx"]
    assert "bar.sync" not in built["1"].asm["ptx"] and built["1"].n_spills == 0
    assert built["1"].n_regs < built["0"].n_regs


def test_interpreter(monkeypatch):
    monkeypatch.setenv("KERNELLAB_DOMINANT_WIDENED", "1")
    x, w, bias, y = _inputs(2, 20, 300, 4)
    _launch(lambda grid, args, kw: conv1d_silu[grid](*args, **kw), x, w, bias, y, CONFIGS[0])
    ref = _reference(x, w, bias)
    assert not torch.isnan(y.double()).any()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("on", ["0", "1"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['BLOCK_D']}x{c['BLOCK_L']}")
def test_gpu(cfg, on, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("KERNELLAB_DOMINANT_WIDENED", on)
    for shape in ((2, 20, 300, 4), (8, 4096, 1024, 4), (3, 100, 77, 3)):
        x, w, bias, y = _inputs(*shape, device="cuda")
        _launch(lambda grid, args, kw: conv1d_silu[grid](*args, **kw), x, w, bias, y, cfg)
        torch.cuda.synchronize()
        ref = _reference(x, w, bias)
        got = y.cpu().double()
        assert not torch.isnan(got).any()
        assert ((got - ref).norm() / ref.norm()).item() < 1e-2


def test_on_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_DOMINANT_WIDENED", raising=False)
    assert assign_layouts.dominant_widened_enabled()
    monkeypatch.setenv("KERNELLAB_DOMINANT_WIDENED", "0")
    assert not assign_layouts.dominant_widened_enabled()
