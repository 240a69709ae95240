"""`tl.reshape` moves no data where a layout keeps every element in its thread (gpu/reshape_layout.py): unit
dims inserted at different positions, removed, 2-D <-> 3-D splits and merges, a flatten and a re-split. Each
variant runs on the interpreter against torch float64; its GPU stages (built here without a GPU, PTX through
ptxas) have no `ttg.convert_layout` and no shared memory for a reshape; on a GPU it runs against float64 into a
NaN-poisoned output."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def reshape_variants_kernel(X, Y, R: tl.constexpr, C: tl.constexpr, V: tl.constexpr):
    rows = tl.arange(0, R)
    cols = tl.arange(0, C)
    offs = rows[:, None] * C + cols[None, :]
    x = tl.load(X + offs)
    if V == 0:  # a row result as a column: unit dim inserted last (softmax's max)
        y = x - tl.reshape(tl.max(x, axis=1), (R, 1))
    elif V == 1:  # a column result as a row: unit dim inserted first
        y = x - tl.reshape(tl.sum(x, axis=0), (1, C))
    elif V == 2:  # unit dim removed: a [R, 1, C] tile read as [R, C]
        x3 = tl.load(X + rows[:, None, None] * C + cols[None, None, :])
        y = tl.reshape(x3, (R, C)) * 2.0
    elif V == 3:  # 2-D -> 3-D (columns in groups of 4), a sum per group, 3-D -> 2-D
        g = tl.reshape(x, (R, C // 4, 4))
        y = tl.reshape(g - tl.sum(g, axis=2)[:, :, None], (R, C))
    elif V == 4:  # unit dims inserted in the middle and at both ends, then the row max through them
        m = tl.max(tl.reshape(x, (1, R, 1, C, 1)), axis=3)
        y = x - tl.reshape(m, (R, 1))
    else:  # flattened, split the other way and back: [R, C] -> [R * C] -> [2 * R, C // 2] -> [R, C]
        z = tl.reshape(tl.reshape(x, (R * C,)) * 3.0, (2 * R, C // 2))
        y = tl.reshape(z + tl.max(z, axis=1)[:, None] * 0.0, (R, C))
    tl.store(Y + offs, y)


def reference(x: torch.Tensor, v: int) -> torch.Tensor:
    x = x.double()
    R, C = x.shape
    if v == 0:
        return x - x.max(dim=1, keepdim=True).values
    if v == 1:
        return x - x.sum(dim=0, keepdim=True)
    if v == 2:
        return x * 2
    if v == 3:
        g = x.reshape(R, C // 4, 4)
        return (g - g.sum(dim=2, keepdim=True)).reshape(R, C)
    if v == 4:
        return x - x.max(dim=1, keepdim=True).values
    return x * 3


VARIANTS = [0, 1, 2, 3, 4, 5]
SHAPES = [(4, 128, 4), (1, 1024, 4), (32, 32, 4), (16, 64, 8), (2, 16, 2)]  # R, C, num_warps


def _args(R, C, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(R, C, generator=g, dtype=torch.float64) * 10).float()
    return x.to(device), torch.full((R, C), float("nan"), device=device)


@pytest.mark.parametrize("v", VARIANTS)
@pytest.mark.parametrize("R,C,nw", SHAPES)
def test_interpreter(v, R, C, nw):
    x, y = _args(R, C)
    reshape_variants_kernel[(1,)](x, y, R=R, C=C, V=v, num_warps=nw)
    torch.testing.assert_close(y.double(), reference(x, v), rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("v", VARIANTS)
@pytest.mark.parametrize("R,C,nw", SHAPES)
def test_gpu_ir_has_no_conversion_and_no_reshape_buffer(v, R, C, nw, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, y = _args(R, C)
    compiled = reshape_variants_kernel.warmup(x, y, R=R, C=C, V=v, num_warps=nw, grid=(1,))
    try:
        compiled = compiled.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    gpu = compiled.asm["gpu"]
    assert "ttg.convert_layout" not in gpu, gpu
    assert not [b for b in compiled.shared_plan if b["op"] != "tt.reduce"], compiled.shared_plan
    assert ".entry" in compiled.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("v", VARIANTS)
@pytest.mark.parametrize("R,C,nw", SHAPES)
def test_gpu(v, R, C, nw):
    for seed in range(3):
        x, y = _args(R, C, "cuda", seed)
        reshape_variants_kernel[(1,)](x, y, R=R, C=C, V=v, num_warps=nw)
        torch.testing.assert_close(y.double().cpu(), reference(x.cpu(), v), rtol=1e-6, atol=1e-4)


@kl.jit
def reshape_through_shared_kernel(X, Y, R: tl.constexpr, C: tl.constexpr):
    """A reshape no register renaming can do (a transposed tile flattened): still correct, through shared memory."""
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.trans(tl.load(X + offs))  # [C, R]
    tl.store(Y + tl.arange(0, R * C), tl.reshape(x, (R * C,)))


def test_a_reshape_that_moves_data_still_interprets_and_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x, _ = _args(16, 32)
    y = torch.full((512,), float("nan"))
    reshape_through_shared_kernel[(1,)](x, y, R=16, C=32)
    torch.testing.assert_close(y.double(), x.double().t().reshape(-1), rtol=0, atol=0)
    try:
        reshape_through_shared_kernel.warmup(x, y, R=16, C=32, grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")


@pytest.mark.gpu
def test_a_reshape_that_moves_data_on_the_gpu():
    x, _ = _args(16, 32, "cuda")
    y = torch.full((512,), float("nan"), device="cuda")
    reshape_through_shared_kernel[(1,)](x, y, R=16, C=32)
    torch.testing.assert_close(y.double().cpu(), x.double().cpu().t().reshape(-1), rtol=0, atol=0)


@kl.jit
def bias_kernel(X, B, Y, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    b = tl.load(B + tl.arange(0, C))
    tl.store(Y + offs, tl.load(X + offs) + b[None, :] * 2.0)


def test_a_vector_expanded_then_broadcast_converts_the_vector_not_the_tile(tmp_path, monkeypatch):
    """expand_dims keeps a computed tile's registers only where the result is not broadcast later: a bias
    vector added to a tile is converted while it is a [C] vector, never as the [R, C] tile."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    R, C = 4, 1024
    x, y = _args(R, C)
    b = torch.randn(C)
    bias_kernel[(1,)](x, b, y, R=R, C=C)
    torch.testing.assert_close(y.double(), x.double() + 2 * b.double()[None, :], rtol=1e-6, atol=1e-5)
    try:
        compiled = bias_kernel.warmup(x, b, y, R=R, C=C, grid=(1,)).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert [(p["op"], p["size"]) for p in compiled.shared_plan] == [("ttg.convert_layout", C * 4)]
