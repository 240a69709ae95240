"""store_in_value_layout under KERNELLAB_STORE_SECTOR_VECTORS=1: a store keeps its conversion where its value's
layout holds a longer run a thread than one store vector (bf16 in the [1, 16] layout of a u8 mask's 16-byte loads,
stored 8 elements an instruction: each instruction writes half of every sector); without the knob, and where the
value's run is one vector, the store takes the value's layout as before."""
from __future__ import annotations

from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import store_in_value_layout
from kernellab.compiler.printer import print_module

# heldout_texts4's bias-dropout-residual backward at 32x128 / 4 warps, reduced: dx (f32, in the u8 mask's layout
# L1) truncated to bf16 and converted into the store's layout L0 (8 bf16 = 16 bytes a thread)
TEXT = """
#L0 = #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>
#L1 = #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>
#L2 = #slice<0, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>
#L3 = #slice<1, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>
#L4 = #slice<0, #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>>
#L5 = #slice<1, #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>>
tt.func @k(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<bf16> {tt.divisibility = 16}) {
  %c = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L4>
  %r = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L5>
  %ce = tt.expand_dims %c {axis = 0} : tensor<1x128xi32, #L1>
  %re = tt.expand_dims %r {axis = 1} : tensor<32x1xi32, #L1>
  %n = arith.constant {value = 128} : tensor<32x1xi32, #L1>
  %rm = arith.muli %re, %n : tensor<32x1xi32, #L1>
  %rb = tt.broadcast %rm : tensor<32x128xi32, #L1>
  %cb = tt.broadcast %ce : tensor<32x128xi32, #L1>
  %off = arith.addi %rb, %cb : tensor<32x128xi32, #L1>
  %xs = tt.splat %x_ptr : tensor<32x128x!ptr<f32>, #L1>
  %xp = tt.addptr %xs, %off : tensor<32x128x!ptr<f32>, #L1>
  %x = tt.load %xp {vec = 4} : tensor<32x128xf32, #L1>
  %t = arith.truncf %x : tensor<32x128xbf16, #L1>
  %tc = ttg.convert_layout %t : tensor<32x128xbf16, #L0>
  %c0 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L2>
  %r0 = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L3>
  %ce0 = tt.expand_dims %c0 {axis = 0} : tensor<1x128xi32, #L0>
  %re0 = tt.expand_dims %r0 {axis = 1} : tensor<32x1xi32, #L0>
  %n0 = arith.constant {value = 128} : tensor<32x1xi32, #L0>
  %rm0 = arith.muli %re0, %n0 : tensor<32x1xi32, #L0>
  %rb0 = tt.broadcast %rm0 : tensor<32x128xi32, #L0>
  %cb0 = tt.broadcast %ce0 : tensor<32x128xi32, #L0>
  %off0 = arith.addi %rb0, %cb0 : tensor<32x128xi32, #L0>
  %ys = tt.splat %y_ptr : tensor<32x128x!ptr<bf16>, #L0>
  %yp = tt.addptr %ys, %off0 : tensor<32x128x!ptr<bf16>, #L0>
  tt.store %yp, %tc {vec = 8}
  tt.return
}
"""


def _store(m):
    return next(op for op in m.kernel.walk() if op.name == "tt.store")


def test_default_stores_in_the_values_layout(run_pass, monkeypatch):
    monkeypatch.delenv("KERNELLAB_STORE_SECTOR_VECTORS", raising=False)
    m, stats = run_pass(store_in_value_layout, TEXT)
    assert stats == {"stores_in_value_layout": 1}
    st = _store(m)
    assert str(st.operands[1].type.layout) == "#blocked<[1, 16], [4, 8], [4, 1], [1, 0]>" and st.attrs["vec"] == 8
    assert not [op for op in m.kernel.walk() if op.name == "ttg.convert_layout"]


def test_knob_keeps_the_conversion_where_a_run_takes_two_vectors(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_STORE_SECTOR_VECTORS", "1")
    m, stats = run_pass(store_in_value_layout, TEXT)
    assert stats == {}
    assert print_module(m, with_locs=False) == print_module(parse_module(TEXT), with_locs=False)  # IR out = IR in


def test_knob_still_moves_a_store_whose_run_is_one_vector(run_pass, monkeypatch):
    # f32 computed 4 a thread ([1, 4]), stored as bf16: a run of 8 bytes, one vector an instruction
    monkeypatch.setenv("KERNELLAB_STORE_SECTOR_VECTORS", "1")
    text = TEXT.replace("[1, 16], [4, 8]", "[1, 4], [1, 32]")
    m, stats = run_pass(store_in_value_layout, text)
    assert stats == {"stores_in_value_layout": 1}
    assert _store(m).attrs["vec"] == 4
