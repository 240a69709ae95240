"""assign_layouts with KERNELLAB_REDUCE_WARPS=1: a load whose tile is reduced along one axis keeps its warps off that
axis where another dim can take them (as Triton's layouts, which fill the fastest dims with warps first). Liger's
fused-MoE token gather sums an [8, 512] tile over its 8 rows: with the warps over the rows the sum crossed warps
through shared memory and the kernel ran at 0.46x Triton on an H200 (benchmarks/NOTES.md, thirteenth session)."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import assign_layouts

COLUMN_SUM = """
tt.func @colsum(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %c512 = arith.constant {value = 512} : i32
  %s = tt.splat %c512 : tensor<8xi32>
  %ro = arith.muli %r, %s : tensor<8xi32>
  %re = tt.expand_dims %ro {axis = 1} : tensor<8x1xi32>
  %rb = tt.broadcast %re : tensor<8x512xi32>
  %c = tt.make_range {end = 512, start = 0} : tensor<512xi32>
  %ce = tt.expand_dims %c {axis = 0} : tensor<1x512xi32>
  %cb = tt.broadcast %ce : tensor<8x512xi32>
  %off = arith.addi %rb, %cb : tensor<8x512xi32>
  %xs = tt.splat %x_ptr : tensor<8x512x!ptr<f32>>
  %xp = tt.addptr %xs, %off : tensor<8x512x!ptr<f32>>
  %x = tt.load %xp : tensor<8x512xf32>
  %y = arith.mulf %x, %x : tensor<8x512xf32>
  %t = tt.reduce %y {axis = REDUCED} : tensor<SUMMED> {
  ^bb(%a: f32, %b: f32):
    %z = arith.addf %a, %b : f32
    tt.reduce.return %z
  }
  %zs = tt.splat %z_ptr : tensor<SUMMED x!ptr<f32>>
  %zp = tt.addptr %zs, %OFFS : tensor<SUMMED x!ptr<f32>>
  tt.store %zp, %t
  tt.return
}
"""


def _kernel(axis: int) -> str:
    summed, offs = ("512", "%c") if axis == 0 else ("8", "%r")
    text = COLUMN_SUM.replace("REDUCED", str(axis)).replace("%OFFS", offs)
    return text.replace("tensor<SUMMED x!ptr<f32>>", f"tensor<{summed}x!ptr<f32>>").replace(
        "tensor<SUMMED>", f"tensor<{summed}xf32>")


def _load_layout(run_pass, monkeypatch, knob, axis):
    if knob is None:
        monkeypatch.delenv("KERNELLAB_REDUCE_WARPS", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_REDUCE_WARPS", knob)
    m, _ = run_pass(assign_layouts, _kernel(axis), GpuOptions(num_warps=4))
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    return load.result.type.layout


@pytest.mark.parametrize("knob", [None, "0"])
def test_default_puts_the_warps_over_the_rows(run_pass, monkeypatch, knob):
    lay = _load_layout(run_pass, monkeypatch, knob, 0)
    assert (lay.spt, lay.tpw, lay.wpc) == ((1, 4), (1, 32), (4, 1))


def test_knob_keeps_the_warps_off_the_reduced_rows(run_pass, monkeypatch):
    lay = _load_layout(run_pass, monkeypatch, "1", 0)
    # 4 floats a thread, 32 lanes and 4 warps along the 512 columns: each thread holds all 8 rows of its columns
    assert (lay.spt, lay.tpw, lay.wpc, lay.order) == ((1, 4), (1, 32), (1, 4), (1, 0))


def test_knob_leaves_a_row_sum_alone(run_pass, monkeypatch):
    """Reduced along the columns: the warps were off them already (over the rows)."""
    assert _load_layout(run_pass, monkeypatch, "1", 1) == _load_layout(run_pass, monkeypatch, "0", 1)
