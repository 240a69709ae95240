"""assign_layouts with KERNELLAB_COALESCE_TIES: which of a memory op's equally contiguous dimensions its layout
makes the fastest ("last", the default; "first", Triton's rule; "size", the largest). Issue 14: attorch's conv2d / AvgPool kernels load
tiles with no contiguous dimension whose rows are made by divisions; with the lanes over the columns each thread
computes 32x as many rows as Triton's threads do (IR, ptxas time and spills grow with it)."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import assign_layouts

# A [64, 32] gather off two runtime strides (no dimension is contiguous), stored through the same offsets
GATHER = """
tt.func @gather(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}, %s0: i32, %s1: i32) {
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %s0s = tt.splat %s0 : tensor<64xi32>
  %ro = arith.muli %r, %s0s : tensor<64xi32>
  %re = tt.expand_dims %ro {axis = 1} : tensor<64x1xi32>
  %rb = tt.broadcast %re : tensor<64x32xi32>
  %c = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %s1s = tt.splat %s1 : tensor<32xi32>
  %co = arith.muli %c, %s1s : tensor<32xi32>
  %ce = tt.expand_dims %co {axis = 0} : tensor<1x32xi32>
  %cb = tt.broadcast %ce : tensor<64x32xi32>
  %off = arith.addi %rb, %cb : tensor<64x32xi32>
  %xs = tt.splat %x_ptr : tensor<64x32x!ptr<f32>>
  %xp = tt.addptr %xs, %off : tensor<64x32x!ptr<f32>>
  %x = tt.load %xp : tensor<64x32xf32>
  %zs = tt.splat %z_ptr : tensor<64x32x!ptr<f32>>
  %zp = tt.addptr %zs, %off : tensor<64x32x!ptr<f32>>
  tt.store %zp, %x
  tt.return
}
"""


def expected(layout: str) -> str:
    """GATHER with every tensor in `layout` (#L1; its slices #L0 along the rows, #L2 along the columns)."""
    return f"""
#L0 = #slice<1, {layout}>
#L1 = {layout}
#L2 = #slice<0, {layout}>

tt.func @gather(%x_ptr: !ptr<f32> {{tt.divisibility = 16}}, %z_ptr: !ptr<f32> {{tt.divisibility = 16}}, %s0: i32, %s1: i32) {{
  %r = tt.make_range {{end = 64, start = 0}} : tensor<64xi32, #L0>
  %s0s = tt.splat %s0 : tensor<64xi32, #L0>
  %ro = arith.muli %r, %s0s : tensor<64xi32, #L0>
  %re = tt.expand_dims %ro {{axis = 1}} : tensor<64x1xi32, #L1>
  %rb = tt.broadcast %re : tensor<64x32xi32, #L1>
  %c = tt.make_range {{end = 32, start = 0}} : tensor<32xi32, #L2>
  %s1s = tt.splat %s1 : tensor<32xi32, #L2>
  %co = arith.muli %c, %s1s : tensor<32xi32, #L2>
  %ce = tt.expand_dims %co {{axis = 0}} : tensor<1x32xi32, #L1>
  %cb = tt.broadcast %ce : tensor<64x32xi32, #L1>
  %off = arith.addi %rb, %cb : tensor<64x32xi32, #L1>
  %xs = tt.splat %x_ptr : tensor<64x32x!ptr<f32>, #L1>
  %xp = tt.addptr %xs, %off : tensor<64x32x!ptr<f32>, #L1>
  %x = tt.load %xp {{vec = 1}} : tensor<64x32xf32, #L1>
  %zs = tt.splat %z_ptr : tensor<64x32x!ptr<f32>, #L1>
  %zp = tt.addptr %zs, %off : tensor<64x32x!ptr<f32>, #L1>
  tt.store %zp, %x {{vec = 1}}
  tt.return
}}
"""


def test_last_makes_the_last_tied_dimension_fastest(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_COALESCE_TIES", "last")
    # lanes over the 32 columns, warps over the rows: each thread holds 16 rows of the row index math
    check(assign_layouts, GATHER, expected("#blocked<[1, 1], [1, 32], [4, 1], [1, 0]>"),
          GpuOptions(num_warps=4))


@pytest.mark.parametrize("knob", ["first", "size", None, "bogus"])
def test_first_or_the_larger_makes_the_first_tied_dimension_fastest(check, monkeypatch, knob):
    """"first"; and "size" (the default, also for an unknown value), since the 64 rows outnumber the 32 columns."""
    if knob is None:
        monkeypatch.delenv("KERNELLAB_COALESCE_TIES", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_COALESCE_TIES", knob)
    # lanes over the 64 rows (2 a thread), warps over the columns, as Triton's coalescing lays this load out
    check(assign_layouts, GATHER, expected("#blocked<[1, 1], [32, 1], [1, 4], [0, 1]>"),
          GpuOptions(num_warps=4))


def test_first_keeps_a_contiguous_dimension_fastest(run_pass, monkeypatch):
    """The knob only breaks ties: a load contiguous along the columns keeps them fastest."""
    monkeypatch.setenv("KERNELLAB_COALESCE_TIES", "first")
    contiguous = GATHER.replace("%co = arith.muli %c, %s1s : tensor<32xi32>",
                                "%co = arith.addi %c, %s1s : tensor<32xi32>")
    m, _ = run_pass(assign_layouts, contiguous, GpuOptions(num_warps=4))
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    assert load.result.type.layout.order == (1, 0)


@pytest.mark.parametrize("contig, shape, ties, want", [
    ((1, 1), (64, 32), "size", [0, 1]),
    ((1, 1), (32, 64), "size", [1, 0]),
    ((1, 1), (64, 64), "size", [1, 0]),  # equal sizes: the last, as before
    ((1, 1, 1, 1), (2, 2, 8, 64), "size", [3, 2, 1, 0]),  # the largest dim; the others in the "last" order
    ((1, 1, 1, 1, 1), (8, 2, 32, 4, 16), "size", [2, 4, 3, 1, 0]),
    ((1, 1, 1, 1), (2, 2, 8, 64), "first", [0, 1, 2, 3]),
    ((1, 1), (64, 32), "last", [1, 0]),
    ((1, 4), (256, 32), "size", [1, 0]),  # a contiguous dim stays fastest whatever its size
])
def test_fastest_first(contig, shape, ties, want):
    from kernellab.compiler.passes.assign_layouts import _fastest_first

    assert _fastest_first(contig, shape, ties) == want
