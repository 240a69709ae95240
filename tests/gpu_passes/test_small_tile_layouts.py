"""Tiles with fewer elements than the program has threads (a decode step's head vectors: rotary pairs split and
joined, a few loads, a store of a reduced row): each thread holds at most one element in any layout, so nothing
should go through shared memory that recomputing or re-reading can avoid. assign_layouts picks split/join layouts
that keep the pairs in a thread's registers and lets a small store take its value's layout;
remove_layout_conversions re-issues small loads and recomputes elementwise chains in the wanted layout."""
from __future__ import annotations

from kernellab.compiler.gpu.layouts import Blocked
from kernellab.compiler.gpu.reshape_layout import join_map, split_map
from kernellab.compiler.passes import assign_layouts, remove_layout_conversions
from kernellab.compiler.passes.assign_layouts import blocked_halves, blocked_pairs

ROTARY = """
tt.func @rotary(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %b_ptr: !ptr<f32> {tt.divisibility = 16}, %c_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %0 = tt.splat %x_ptr : tensor<32x!ptr<f32>>
  %1 = tt.addptr %0, %r : tensor<32x!ptr<f32>>
  %x = tt.load %1 : tensor<32xf32>
  %2 = tt.splat %b_ptr : tensor<32x!ptr<f32>>
  %3 = tt.addptr %2, %r : tensor<32x!ptr<f32>>
  %b = tt.load %3 : tensor<32xf32>
  %xb = arith.addf %x, %b : tensor<32xf32>
  %pairs = tt.reshape %xb : tensor<16x2xf32>
  %x0, %x1 = tt.split %pairs : tensor<16xf32>, tensor<16xf32>
  %h = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %4 = tt.splat %c_ptr : tensor<16x!ptr<f32>>
  %5 = tt.addptr %4, %h : tensor<16x!ptr<f32>>
  %c = tt.load %5 : tensor<16xf32>
  %e = math.exp %c : tensor<16xf32>
  %y0 = arith.mulf %x0, %e : tensor<16xf32>
  %y1 = arith.subf %x1, %e : tensor<16xf32>
  %j = tt.join %y0, %y1 : tensor<16x2xf32>
  %y = tt.reshape %j : tensor<32xf32>
  %6 = tt.splat %y_ptr : tensor<32x!ptr<f32>>
  %7 = tt.addptr %6, %r : tensor<32x!ptr<f32>>
  tt.store %7, %y
  tt.return
}
"""


def _ops(m, name):
    return [op for op in m.kernel.walk() if op.name == name]


def test_rotary_pairs_stay_in_registers(run_passes):
    """Before: the split and the join went through shared memory (the pairs' 2 sat on two lanes) and the store
    converted its value. After: no conversion, the split and join rename registers, and the two loads feeding
    the pairs are issued in a layout holding both elements of a pair."""
    m, (a, r) = run_passes([assign_layouts, remove_layout_conversions], ROTARY)
    assert not _ops(m, "ttg.convert_layout"), r
    (split,) = _ops(m, "tt.split")
    src = split.operands[0]
    assert all(split_map(src.type.layout, src.type.shape, h.type.layout, h.type.shape, k) is not None
               for k, h in enumerate(split.results))
    (join,) = _ops(m, "tt.join")
    assert join.operands[0].type.layout == join.operands[1].type.layout
    assert join_map(join.operands[0].type.layout, (16,), join.result.type.layout, (16, 2)) is not None
    loads = _ops(m, "tt.load")
    assert {ld.result.type.layout.spt for ld in loads if ld.result.type.shape == (32,)} == {(2,)}
    (store,) = _ops(m, "tt.store")
    assert store.operands[1].type.layout == store.operands[0].type.layout


def test_a_store_of_a_large_tile_keeps_its_coalesced_layout(run_passes):
    """At 256 elements over 128 threads the store's own layout (two consecutive elements a thread) is kept: the
    joined value is converted, not stored lane by lane."""
    text = ROTARY.replace("32x", "512x").replace("16x", "256x").replace("<32x", "<512x").replace(
        "end = 32", "end = 512").replace("end = 16", "end = 256").replace("tensor<16", "tensor<256").replace(
        "tensor<32", "tensor<512")
    m, _ = run_passes([assign_layouts, remove_layout_conversions], text)
    (store,) = _ops(m, "tt.store")
    assert store.operands[1].defining_op.name in ("ttg.convert_layout", "tt.reshape")


def test_blocked_halves_and_pairs_are_inverse():
    half = Blocked((1,), (32,), (4,), (0,))
    whole = blocked_pairs(half)
    assert whole == Blocked((1, 2), (32, 1), (4, 1), (1, 0))
    assert blocked_halves(whole, (16, 2)) == half
    assert all(split_map(whole, (16, 2), half, (16,), k) is not None for k in range(2))
    assert join_map(half, (16,), whole, (16, 2)) is not None
    # the pair split over two lanes has no register halves
    assert blocked_halves(Blocked((1, 1), (16, 2), (4, 1), (1, 0)), (16, 2)) is None
