"""Issue 14: attorch's conv2d forward (its AvgPool layers are depthwise conv2ds) loads a [positions, channels] tile
through addresses with no contiguous dimension: its rows are (batch, height, width) positions made by divisions and
remainders, its columns channels with a runtime stride. Which dimension the lanes spread over decides how many
rows (each with two divisions, two remainders, four compares and an address) a thread computes. Bounded here by
the LLVM IR's integer divisions (the build stops at LLVM IR: no LLVM, no ptxas), not by a clock: with
KERNELLAB_COALESCE_TIES=first (Triton's rule) or =size (the larger dim) a thread holds a few rows; with the default
(last) the lanes are over the channels and it holds a few hundred divisions' worth (ptxas time and spills follow: benchmarks/NOTES.md)."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def conv_rows(x_ptr, w_ptr, o_ptr, n_img, H, W, out_h, out_w, sx_n, sx_c, sx_h, sw_c, sw_h, so_n, so_c, so_h,
              KH: tl.constexpr, KW: tl.constexpr, PAD: tl.constexpr, BP: tl.constexpr, BC: tl.constexpr,
              BO: tl.constexpr):
    """A direct 2-D convolution of one input channel (a depthwise one's shape): rows are output positions."""
    pos = tl.program_id(0) * BP + tl.arange(0, BP)
    nh = pos // out_w
    n = nh // out_h
    oh = nh % out_h
    ow = pos % out_w
    ch = tl.arange(0, BC)
    oc = tl.arange(0, BO)
    acc = tl.zeros((BP, BO), dtype=tl.float32)
    for kh in range(KH):
        for kw in range(KW):
            ih = oh - PAD + kh
            iw = ow - PAD + kw
            x = tl.load(x_ptr + (n * sx_n + ih * sx_h + iw)[:, None] + (ch * sx_c)[None, :],
                        mask=(n < n_img)[:, None] & (0 <= ih)[:, None] & (ih < H)[:, None] & (0 <= iw)[:, None]
                        & (iw < W)[:, None] & (ch < 1)[None, :], other=0.0)
            w = tl.load(w_ptr + (ch * sw_c)[:, None] + (oc * sw_c + kh * sw_h + kw)[None, :], mask=(ch < 1)[:, None],
                        other=0.0)
            acc += tl.dot(x, w)
    tl.store(o_ptr + (n * so_n + oh * so_h + ow)[:, None] + (oc * so_c)[None, :], acc,
             mask=(n < n_img)[:, None] & (oh < out_h)[:, None])


def _llir(monkeypatch, ties, bp=256, stages=2):
    from kernellab.compiler.backend import Build, run_stages
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module
    from kernellab.compiler.trace import CompileTrace

    if ties is None:
        monkeypatch.delenv("KERNELLAB_COALESCE_TIES", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_COALESCE_TIES", ties)
    x, w, o = torch.rand(3, 3, 57, 55), torch.rand(3, 16, 3, 3), torch.empty(3, 16, 55, 53)
    conv_rows.cache.clear()
    # odd sizes and strides keep every runtime argument unspecialized: no stride is known to be 1
    ck = conv_rows.warmup(x, w, o, 3, 57, 55, 55, 53, 3 * 57 * 55 + 7, 57 * 55 + 3, 57, 9, 3, 55 * 53 + 5, 55 * 53 + 1,
                          53, KH=3, KW=3, PAD=1, BP=bp, BC=32, BO=16, grid=(1,), num_warps=2)
    build = Build(CompileTrace("conv_rows"), parse_module(ck.asm["tile"]), GpuOptions(num_warps=2, num_stages=stages),
                  Target(90))
    return run_stages(run_stages(build, "gpu", "gpu"), "llir", "llir").out["llir"]


def _divisions(monkeypatch, ties):
    return len(re.findall(r"= (?:sdiv|srem) ", _llir(monkeypatch, ties)))


def test_lanes_over_the_rows_compute_few_row_divisions(monkeypatch):
    # 256 positions, the lanes over them and the 2 warps over the channels: 8 a thread, 4 divisions each; the channel
    # loads and the stores add none
    first = _divisions(monkeypatch, "first")
    assert first <= 4 * 8, first


@pytest.mark.parametrize("ties", ["size", None])
def test_size_puts_the_lanes_over_the_larger_rows(monkeypatch, ties):
    """KERNELLAB_COALESCE_TIES=size (the default): the 256 positions outnumber the 32 channels, so the lanes go
    over the positions, as with "first"."""
    assert _divisions(monkeypatch, ties) == _divisions(monkeypatch, "first")


def test_last_keeps_the_old_layout(monkeypatch):
    """"last" (the default before 2026-11-27's fourteenth session): lanes over the channels, 128 rows a thread, a
    division of each by each of the two sizes, twice."""
    assert _divisions(monkeypatch, "last") >= 4 * 128


def test_slsr_pairs_mode_bounds_the_code_generator(monkeypatch):
    """LLVM 22's SLSR compares every pair of candidates sharing an operand whose difference is not a constant. The
    default layout's kernel stays under the per-pointer limit (so `auto` keeps SLSR: seconds of it at attorch's
    sizes) but has far more such pairs than SLSR_MAX_PAIRS: KERNELLAB_LLVM_SLSR=pairs (the default) turns it off.
    (The old layout, ties=last: the default's has few pairs.)"""
    from kernellab.compiler.codegen.llvm_to_ptx import (
        SLSR_MAX_ADDRESSES_PER_POINTER,
        SLSR_MAX_PAIRS,
        compile_llvm,
    )
    from kernellab.compiler.codegen.target import Target

    llir = _llir(monkeypatch, "last", bp=128)  # 64 rows a thread: 128 addresses off the input pointer, 14.6k pairs
    monkeypatch.setenv("KERNELLAB_LLVM_SLSR", "pairs")
    res = compile_llvm(llir, Target(90), "conv_rows")
    assert res.max_addresses_per_pointer <= SLSR_MAX_ADDRESSES_PER_POINTER  # `auto` would have run SLSR
    assert res.slsr_pairs > SLSR_MAX_PAIRS and not res.slsr
    assert ".entry conv_rows" in res.ptx


def test_slsr_pairs_counts_variable_candidates_sharing_an_operand():
    from kernellab.compiler.codegen.llvm_to_ptx import slsr_pairs

    ir = """
  %a = getelementptr float, ptr addrspace(1) %p, i64 %i
  %b = getelementptr inbounds float, ptr addrspace(1) %p, i64 %j
  %c = getelementptr float, ptr addrspace(1) %p, i64 7
  %g = getelementptr float, ptr addrspace(1) %q, i64 %i
  %d = add i32 %x, %y
  %e = add nsw i32 %x, %z
  %f = add i32 %x, 5
  %h = add i64 %x, %y
"""
    # %p: two variable indices (1 pair; the constant one stops the walk); i32 %x: two sums with values (1 pair);
    # %y, %z, i64 %x, i64 %y, %q: one each
    assert slsr_pairs(ir) == 2


def _run_conv(device, monkeypatch, ties, bp, warps, stages):
    """conv_rows on (3, 2, 57, 55) images (channel 0 convolved, zero padding 1) against float64 torch."""
    if ties is None:
        monkeypatch.delenv("KERNELLAB_COALESCE_TIES", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_COALESCE_TIES", ties)
    g = torch.Generator().manual_seed(14)
    x = (torch.rand(3, 2, 57, 55, generator=g) * 2 - 1).to(device)
    x[0, 0, 0, :4] = torch.tensor([1e-30, -0.0, 3.5, -2.25])  # edge values among the random ones
    w = (torch.rand(16, 1, 3, 3, generator=g) * 2 - 1).to(device)
    o = torch.full((3, 16, 55, 53), float("nan"), device=device)  # poisoned: every element must be written
    n_pos = 3 * 55 * 53
    conv_rows.cache.clear()
    conv_rows[(triton_cdiv(n_pos, bp),)](x, w, o, 3, 57, 55, 55, 53, *x.stride()[:3], w.stride(0), w.stride(2),
                                         o.stride(0), o.stride(1), o.stride(2), KH=3, KW=3, PAD=1, BP=bp, BC=32,
                                         BO=16, num_warps=warps, num_stages=stages)
    ref = torch.nn.functional.conv2d(x[:, :1].double().cpu(), w.double().cpu(), padding=1)[:, :, :55, :53]
    # tl.dot of float32 tiles is TF32 on the GPU (10-bit mantissas): 9 products of magnitude < 1
    torch.testing.assert_close(o.double().cpu(), ref, atol=2e-2 if device == "cuda" else 1e-5, rtol=0)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_conv_rows_interpreter(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs without a GPU")
    _run_conv("cpu", monkeypatch, None, 128, 2, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("ties", [None, "first", "size"])
@pytest.mark.parametrize("bp,warps,stages", [(256, 2, 4), (128, 4, 3), (64, 2, 2)])
def test_conv_rows_gpu(monkeypatch, ties, bp, warps, stages):
    _run_conv("cuda", monkeypatch, ties, bp, warps, stages)
