"""Issue 14: attorch's conv2d forward (its AvgPool layers are depthwise conv2ds) loads a [positions, channels] tile
through addresses with no contiguous dimension: its rows are (batch, height, width) positions made by divisions and
remainders, its columns channels with a runtime stride. Which dimension the lanes spread over decides how many
rows (each with two divisions, two remainders, four compares and an address) a thread computes. Bounded here by
the LLVM IR's integer divisions (the build stops at LLVM IR: no LLVM, no ptxas), not by a clock: with
KERNELLAB_COALESCE_TIES=first (Triton's rule) a thread holds a few rows, with the default lanes over the channels
it holds a few hundred divisions' worth (ptxas time and spills follow: benchmarks/NOTES.md)."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def conv_rows(x_ptr, w_ptr, o_ptr, out_w, out_h, n_pos, sx_c, sx_h, sw_c, so_c,
              K: tl.constexpr, BP: tl.constexpr, BC: tl.constexpr, BO: tl.constexpr):
    pos = tl.program_id(0) * BP + tl.arange(0, BP)
    bh = pos // out_w
    b = bh // out_h
    oh = bh % out_h
    ow = pos % out_w
    ch = tl.arange(0, BC)
    oc = tl.arange(0, BO)
    acc = tl.zeros((BP, BO), dtype=tl.float32)
    for k in range(K):
        ih = oh + k
        x = tl.load(x_ptr + (b * out_h * out_w + ih * sx_h + ow)[:, None] + (ch * sx_c)[None, :],
                    mask=(b < n_pos)[:, None] & (ih < out_h)[:, None] & (ch < 1)[None, :], other=0.0)
        w = tl.load(w_ptr + (ch * sw_c)[:, None] + (oc * K + k)[None, :], mask=(ch < 1)[:, None], other=0.0)
        acc += tl.dot(x, w)
    tl.store(o_ptr + (pos * so_c)[:, None] + oc[None, :], acc, mask=(pos < n_pos)[:, None])


def _divisions(monkeypatch, ties):
    from kernellab.compiler.backend import Build, run_stages
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module
    from kernellab.compiler.trace import CompileTrace

    if ties is None:
        monkeypatch.delenv("KERNELLAB_COALESCE_TIES", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_COALESCE_TIES", ties)
    x, w, o = torch.rand(4, 3, 56, 56), torch.rand(3, 16), torch.empty(4 * 56 * 56, 16)
    conv_rows.cache.clear()
    # odd sizes (56 * 56 * 3 + 7...) keep every runtime argument unspecialized: no stride is known to be 1
    ck = conv_rows.warmup(x, w, o, 55, 53, 11, 3, 57, 17, 19, K=3, BP=256, BC=32, BO=16, grid=(1,), num_warps=2)
    build = Build(CompileTrace("conv_rows"), parse_module(ck.asm["tile"]), GpuOptions(num_warps=2, num_stages=2),
                  Target(90))
    llir = run_stages(run_stages(build, "gpu", "gpu"), "llir", "llir").out["llir"]
    return len(re.findall(r"= (?:sdiv|srem) ", llir))


def test_lanes_over_the_rows_compute_few_row_divisions(monkeypatch):
    # 256 positions, the lanes over them and the 2 warps over the channels: 8 a thread, 4 divisions each; the channel
    # loads and the stores add none
    first = _divisions(monkeypatch, "first")
    assert first <= 4 * 8, first


@pytest.mark.parametrize("ties", [None, "last"])
def test_default_keeps_its_layout(monkeypatch, ties):
    """The default is unchanged (lanes over the channels: 128 rows a thread, a division of each by each of the
    two sizes, twice): the knob is what bounds it, until a GPU run times the two."""
    assert _divisions(monkeypatch, ties) >= 4 * 128
