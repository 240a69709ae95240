"""KERNELLAB_CARRY_MMA (assign_layouts, on by default; =0 turns it off): a loop that only hands its carried
value to a nested loop that accumulates it with `tl.dot` carries it in the dot's accumulator layout. An implicit-GEMM
convolution (`for kh: for kw: for c0: acc += tl.dot(a, b)`, heldout_texts5's conv3x3) otherwise carried the
accumulator in a blocked layout through the tap loops and converted it into the mma layout and back through shared
memory around every tap's K loop. IR text in, IR text out."""
from __future__ import annotations

from kernellab.compiler.gpu.layouts import Mma
from kernellab.compiler.passes import assign_layouts, remove_layout_conversions

TAPS = """tt.func @taps(%A: !ptr<f16> {tt.divisibility = 16}, %B: !ptr<f16> {tt.divisibility = 16}, %C: !ptr<f32> {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %rk = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rn = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %c16 = arith.constant {value = 16} : tensor<64x1xi32>
  %c32 = arith.constant {value = 32} : tensor<16x1xi32>
  %c32m = arith.constant {value = 32} : tensor<64x1xi32>
  %am = tt.expand_dims %rm {axis = 1} : tensor<64x1xi32>
  %ao = arith.muli %am, %c16 : tensor<64x1xi32>
  %ak = tt.expand_dims %rk {axis = 0} : tensor<1x16xi32>
  %aob = tt.broadcast %ao : tensor<64x16xi32>
  %akb = tt.broadcast %ak : tensor<64x16xi32>
  %aoff = arith.addi %aob, %akb : tensor<64x16xi32>
  %as = tt.splat %A : tensor<64x16x!ptr<f16>>
  %ap = tt.addptr %as, %aoff : tensor<64x16x!ptr<f16>>
  %bk = tt.expand_dims %rk {axis = 1} : tensor<16x1xi32>
  %bo = arith.muli %bk, %c32 : tensor<16x1xi32>
  %bn = tt.expand_dims %rn {axis = 0} : tensor<1x32xi32>
  %bob = tt.broadcast %bo : tensor<16x32xi32>
  %bnb = tt.broadcast %bn : tensor<16x32xi32>
  %boff = arith.addi %bob, %bnb : tensor<16x32xi32>
  %bs = tt.splat %B : tensor<16x32x!ptr<f16>>
  %bp = tt.addptr %bs, %boff : tensor<16x32x!ptr<f16>>
  %co = arith.muli %am, %c32m : tensor<64x1xi32>
  %cob = tt.broadcast %co : tensor<64x32xi32>
  %cnb = tt.broadcast %bn : tensor<64x32xi32>
  %coff = arith.addi %cob, %cnb : tensor<64x32xi32>
  %cs = tt.splat %C : tensor<64x32x!ptr<f32>>
  %cp = tt.addptr %cs, %coff : tensor<64x32x!ptr<f32>>
  %acc = arith.constant {value = 0.0} : tensor<64x32xf32>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.constant {value = 3} : i32
  %2 = arith.constant {value = 1} : i32
  %acc_1 = scf.for %0, %1, %2, %acc : tensor<64x32xf32> {
  ^bb(%t: i32, %acc_2: tensor<64x32xf32>):
    %acc_3 = scf.for %0, %K, %2, %acc_2 : tensor<64x32xf32> {
    ^bb(%k: i32, %acc_4: tensor<64x32xf32>):
      %a = tt.load %ap : tensor<64x16xf16>
      %b = tt.load %bp : tensor<16x32xf16>
      %acc_5 = tt.dot %a, %b, %acc_4 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32>
      scf.yield %acc_5
    }
    scf.yield %acc_3
  }
  tt.store %cp, %acc_1
  tt.return
}
"""

CARRIED = """
#L0 = #slice<1, #blocked<[1, 8], [16, 2], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 8], [16, 2], [4, 1], [1, 0]>>
#L2 = #slice<0, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L3 = #blocked<[1, 8], [16, 2], [4, 1], [1, 0]>
#L4 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L5 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L6 = #mma<[4, 1]>

tt.func @taps(%A: !ptr<f16> {tt.divisibility = 16}, %B: !ptr<f16> {tt.divisibility = 16}, %C: !ptr<f32> {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L0>
  %rk = tt.make_range {end = 16, start = 0} : tensor<16xi32, #L1>
  %rn = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
  %c16 = arith.constant {value = 16} : tensor<64x1xi32, #L3>
  %c32 = arith.constant {value = 32} : tensor<16x1xi32, #L4>
  %c32m = arith.constant {value = 32} : tensor<64x1xi32, #L4>
  %am = tt.expand_dims %rm {axis = 1} : tensor<64x1xi32, #L3>
  %ao = arith.muli %am, %c16 : tensor<64x1xi32, #L3>
  %ak = tt.expand_dims %rk {axis = 0} : tensor<1x16xi32, #L3>
  %aob = tt.broadcast %ao : tensor<64x16xi32, #L3>
  %akb = tt.broadcast %ak : tensor<64x16xi32, #L3>
  %aoff = arith.addi %aob, %akb : tensor<64x16xi32, #L3>
  %as = tt.splat %A : tensor<64x16x!ptr<f16>, #L3>
  %ap = tt.addptr %as, %aoff : tensor<64x16x!ptr<f16>, #L3>
  %0 = ttg.convert_layout %rk : tensor<16xi32, #L5>
  %bk = tt.expand_dims %0 {axis = 1} : tensor<16x1xi32, #L4>
  %bo = arith.muli %bk, %c32 : tensor<16x1xi32, #L4>
  %bn = tt.expand_dims %rn {axis = 0} : tensor<1x32xi32, #L4>
  %bob = tt.broadcast %bo : tensor<16x32xi32, #L4>
  %bnb = tt.broadcast %bn : tensor<16x32xi32, #L4>
  %boff = arith.addi %bob, %bnb : tensor<16x32xi32, #L4>
  %bs = tt.splat %B : tensor<16x32x!ptr<f16>, #L4>
  %bp = tt.addptr %bs, %boff : tensor<16x32x!ptr<f16>, #L4>
  %1 = ttg.convert_layout %c32m : tensor<64x1xi32, #L3>
  %co = arith.muli %am, %1 : tensor<64x1xi32, #L3>
  %cob = tt.broadcast %co : tensor<64x32xi32, #L3>
  %cnb = tt.broadcast %bn : tensor<64x32xi32, #L4>
  %2 = ttg.convert_layout %cnb : tensor<64x32xi32, #L3>
  %coff = arith.addi %cob, %2 : tensor<64x32xi32, #L3>
  %cs = tt.splat %C : tensor<64x32x!ptr<f32>, #L4>
  %3 = ttg.convert_layout %coff : tensor<64x32xi32, #L4>
  %cp = tt.addptr %cs, %3 : tensor<64x32x!ptr<f32>, #L4>
  %acc = arith.constant {value = 0.0} : tensor<64x32xf32, #L4>
  %4 = arith.constant {value = 0} : i32
  %5 = arith.constant {value = 3} : i32
  %6 = arith.constant {value = 1} : i32
  %7 = ttg.convert_layout %acc : tensor<64x32xf32, #L6>
  %acc_1 = scf.for %4, %5, %6, %7 : tensor<64x32xf32, #L6> {
  ^bb(%t: i32, %acc_2: tensor<64x32xf32, #L6>):
    %acc_3 = scf.for %4, %K, %6, %acc_2 : tensor<64x32xf32, #L6> {
    ^bb(%k: i32, %acc_4: tensor<64x32xf32, #L6>):
      %a = tt.load %ap {vec = 8} : tensor<64x16xf16, #L3>
      %b = tt.load %bp {vec = 4} : tensor<16x32xf16, #L4>
      %acc_5 = tt.dot %a, %b, %acc_4 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L6>
      scf.yield %acc_5
    }
    scf.yield %acc_3
  }
  %8 = ttg.convert_layout %acc_1 : tensor<64x32xf32, #L4>
  tt.store %cp, %8 {vec = 4}
  tt.return
}
"""


def _loops(m):
    return [op for op in m.kernel.walk() if op.name == "scf.for"]


def _converts_in_loops(m):
    return [op for loop in _loops(m) for op in loop.walk() if op.name == "ttg.convert_layout"]


def test_the_tap_loop_carries_the_accumulator_in_the_mma_layout(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "1")
    m, stats = check(assign_layouts, TAPS, CARRIED)
    assert stats["converts_inserted"] == 6
    assert not _converts_in_loops(m)
    outer, inner = _loops(m)
    assert outer.regions[0].args[1].type.layout == Mma((4, 1)) == inner.regions[0].args[1].type.layout


def test_knob_off_the_tap_loop_converts_around_the_k_loop(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "0")
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "0")  # the other rule that carries this accumulator in the mma layout
    m, _ = run_pass(assign_layouts, TAPS)
    outer, inner = _loops(m)
    assert outer.regions[0].args[1].type.layout != Mma((4, 1))
    assert len([op for op in outer.regions[0].ops if op.name == "ttg.convert_layout"]) == 2  # in and out


def test_remove_layout_conversions_leaves_one_conversion_after_the_nest(run_pass, monkeypatch):
    # the zeros rebuilt in the mma layout before the nest; the store's conversion after it is all that is left
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "1")
    m, _ = run_pass(assign_layouts, TAPS)
    stats = remove_layout_conversions.run(m, None)
    assert stats["remaining"] == 1 and not _converts_in_loops(m)
    zeros = _loops(m)[0].operands[3].defining_op
    assert zeros.name == "arith.constant" and zeros.result.type.layout == Mma((4, 1))


def test_three_deep_nest(run_pass, monkeypatch):
    # kh, kw, c0: the value reaches the dot through two nested loops' carried values
    text = TAPS.replace(
        "    %acc_3 = scf.for %0, %K, %2, %acc_2 : tensor<64x32xf32> {\n",
        "    %acc_3 = scf.for %0, %1, %2, %acc_2 : tensor<64x32xf32> {\n"
        "    ^bb(%s: i32, %acc_6: tensor<64x32xf32>):\n"
        "    %acc_7 = scf.for %0, %K, %2, %acc_6 : tensor<64x32xf32> {\n").replace(
        "      scf.yield %acc_5\n    }\n",
        "      scf.yield %acc_5\n    }\n    scf.yield %acc_7\n    }\n")
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "1")
    m, _ = run_pass(assign_layouts, text)
    assert len(_loops(m)) == 3 and not _converts_in_loops(m)
    assert all(loop.regions[0].args[1].type.layout == Mma((4, 1)) for loop in _loops(m))


def test_a_carry_also_read_by_other_math_keeps_its_layout(run_pass, monkeypatch):
    # the outer body scales the carried value before the K loop: not only handed to the nested loop, so the rule
    # leaves it to the blocked layout (and the conversions) as without the switch
    text = TAPS.replace("    %acc_3 = scf.for %0, %K, %2, %acc_2 : tensor<64x32xf32> {",
                        "    %h = arith.constant {value = 0.5} : tensor<64x32xf32>\n"
                        "    %acc_h = arith.mulf %acc_2, %h : tensor<64x32xf32>\n"
                        "    %acc_3 = scf.for %0, %K, %2, %acc_h : tensor<64x32xf32> {")
    monkeypatch.setenv("KERNELLAB_CARRY_MMA", "1")
    m, _ = run_pass(assign_layouts, text)
    outer = _loops(m)[0]
    assert outer.regions[0].args[1].type.layout != Mma((4, 1))
