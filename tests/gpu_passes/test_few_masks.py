"""assign_layouts with KERNELLAB_FEW_MASKS=1: a masked access whose threads would each hold more than
FEW_MASKS_LIMIT distinct mask predicates with the warps over the rows (the default) takes Triton's placement, the
warps over the columns, where a thread then holds fewer. heldout_texts5's ALiBi softmax: a [16, 1024] tile masked by
`rows < Lq` (one value over its 16 rows: Lq divisible by 16) and `cols < Lk`; with 4 warps over the rows a thread
held 8 column chunks, 8 predicates live from the loads to the stores, and ptxas issued its 32 LDG.128 about one at a
time (0.53x Triton's GB/s on the H200; benchmarks/NOTES.md)."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.layouts import Blocked
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import assign_layouts
from tests.gpu_passes.conftest import normalize, printed

# rows = 16 * pid + arange(16), cols = arange(1024); x = load(S + rows * s_q + cols, rows < Lq & cols < Lk);
# a row max, and the tile stored back under the same mask
ROW_SOFTMAX = """
tt.func @rows(%S: !ptr<f32> {tt.divisibility = 16}, %P: !ptr<f32> {tt.divisibility = 16}, %Lq: i32 LQ_ATTR, %Lk: i32 {tt.divisibility = 16}, %s_q: i32 {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c16 = arith.constant {value = 16} : i32
  %r0 = arith.muli %pid, %c16 : i32
  %ar = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rs = tt.splat %r0 : tensor<16xi32>
  %rows = arith.addi %rs, %ar : tensor<16xi32>
  %cols = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %re = tt.expand_dims %rows {axis = 1} : tensor<16x1xi32>
  %sq = tt.splat %s_q : tensor<16x1xi32>
  %ro = arith.muli %re, %sq : tensor<16x1xi32>
  %ce = tt.expand_dims %cols {axis = 0} : tensor<1x1024xi32>
  %rb = tt.broadcast %ro : tensor<16x1024xi32>
  %cb = tt.broadcast %ce : tensor<16x1024xi32>
  %off = arith.addi %rb, %cb : tensor<16x1024xi32>
  %lq = tt.splat %Lq : tensor<16x1xi32>
  %rm = arith.cmpi %re, %lq {predicate = "slt"} : tensor<16x1xi1>
  %lk = tt.splat %Lk : tensor<1x1024xi32>
  %cm = arith.cmpi %ce, %lk {predicate = "slt"} : tensor<1x1024xi1>
  %rmb = tt.broadcast %rm : tensor<16x1024xi1>
  %cmb = tt.broadcast %cm : tensor<16x1024xi1>
  %inb = arith.andi %rmb, %cmb : tensor<16x1024xi1>
  %ss = tt.splat %S : tensor<16x1024x!ptr<f32>>
  %sp = tt.addptr %ss, %off : tensor<16x1024x!ptr<f32>>
  %ninf = arith.constant {value = -inf} : tensor<16x1024xf32>
  %x = tt.load %sp, %inb, %ninf : tensor<16x1024xf32>
  %mx = tt.reduce %x {axis = 1} : tensor<16xf32> {
  ^bb(%a: f32, %b: f32):
    %m = arith.maxnumf %a, %b : f32
    tt.reduce.return %m
  }
  %me = tt.expand_dims %mx {axis = 1} : tensor<16x1xf32>
  %mb = tt.broadcast %me : tensor<16x1024xf32>
  %y = arith.subf %x, %mb : tensor<16x1024xf32>
  %ps = tt.splat %P : tensor<16x1024x!ptr<f32>>
  %pp = tt.addptr %ps, %off : tensor<16x1024x!ptr<f32>>
  tt.store %pp, %y, %inb
  tt.return
}
"""

DIVISIBLE = "{tt.divisibility = 16}"


def _run(run_pass, monkeypatch, knob, lq_attr=DIVISIBLE, warps=4):
    if knob is None:
        monkeypatch.delenv("KERNELLAB_FEW_MASKS", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_FEW_MASKS", knob)
    m, _ = run_pass(assign_layouts, ROW_SOFTMAX.replace("LQ_ATTR", lq_attr), GpuOptions(num_warps=warps))
    return m


def _access_layouts(m):
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    store = next(op for op in m.kernel.walk() if op.name == "tt.store")
    return load.result.type.layout, store.operands[0].type.layout


@pytest.mark.parametrize("knob", [None, "0"])
def test_default_puts_the_warps_over_the_rows(run_pass, monkeypatch, knob):
    load, store = _access_layouts(_run(run_pass, monkeypatch, knob))
    assert (load.spt, load.tpw, load.wpc) == ((1, 4), (1, 32), (4, 1))
    assert store == load


def test_knob_puts_the_warps_over_the_columns(run_pass, monkeypatch):
    m = _run(run_pass, monkeypatch, "1")
    load, store = _access_layouts(m)
    # 4 floats a thread, 32 lanes and 4 warps along the 1024 columns: 2 chunks of 4 a thread, all 16 rows
    assert (load.spt, load.tpw, load.wpc, load.order) == ((1, 4), (1, 32), (1, 4), (1, 0))
    assert store == load
    # the whole kernel in that layout: the text out, the reduction's result a slice of it
    out = normalize(printed(m))
    assert "#blocked<[1, 4], [1, 32], [1, 4], [1, 0]>" in out and "#blocked<[1, 4], [1, 32], [4, 1]" not in out
    assert "ttg.convert_layout" not in out


@pytest.mark.parametrize("warps, rows_per_thread", [(4, 16), (8, 16)])
def test_predicates_per_thread(warps, rows_per_thread):
    """mask_predicates counts a thread's distinct mask values: constant over [16, 4] blocks, the default placement
    leaves 8 (4 warps) or 8 (8 warps: 2 rows a thread, one 16-row block, 8 column chunks) of them, Triton's 2 or 1."""
    from kernellab.compiler.gpu.layouts import default_blocked

    shape, const = (16, 1024), (16, 4)
    slow = default_blocked(shape, warps, order=(1, 0), spt_fast=4)
    fast = default_blocked(shape, warps, order=(1, 0), spt_fast=4, warps_fast_first=True)
    assert assign_layouts.mask_predicates(slow, shape, const) == 8
    assert assign_layouts.mask_predicates(fast, shape, const) == 1024 // (4 * 32 * warps)
    assert isinstance(fast, Blocked) and fast.wpc == (1, warps)


def test_knob_leaves_rows_of_unknown_bound_alone(run_pass, monkeypatch):
    """Lq of unknown divisibility: every row its own predicate, 32 a thread either way; nothing gained, layout kept."""
    off = _access_layouts(_run(run_pass, monkeypatch, "0", lq_attr=""))
    on = _access_layouts(_run(run_pass, monkeypatch, "1", lq_attr=""))
    assert on == off and on[0].wpc == (4, 1)


def test_knob_leaves_a_narrow_tile_alone(run_pass, monkeypatch):
    """[16, 1024] at 1 warp: no warps to move."""
    off = _access_layouts(_run(run_pass, monkeypatch, "0", warps=1))
    on = _access_layouts(_run(run_pass, monkeypatch, "1", warps=1))
    assert on == off


def test_knob_leaves_a_tile_of_few_registers_alone(run_pass, monkeypatch):
    """[4, 1024] at 4 warps: 32 elements a thread, under FEW_MASKS_ELEMS. Its 8 predicates a thread did not hold the
    loads back (ptxas is not short of registers there), and moving the warps only adds shared-memory round trips."""
    text = ROW_SOFTMAX.replace("16x", "4x").replace("end = 16", "end = 4").replace("{value = 16}", "{value = 4}")
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_FEW_MASKS", knob)
        m, _ = run_pass(assign_layouts, text.replace("LQ_ATTR", DIVISIBLE), GpuOptions(num_warps=4))
        load = next(op for op in m.kernel.walk() if op.name == "tt.load")
        assert load.result.type.shape == [4, 1024] or tuple(load.result.type.shape) == (4, 1024)
        assert load.result.type.layout.wpc == (4, 1)
