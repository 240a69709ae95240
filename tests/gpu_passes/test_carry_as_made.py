"""assign_layouts with KERNELLAB_CARRY_AS_MADE=1: a loop-carried tensor each iteration replaces by a value made in
another layout (a column reduction of a tile), read in the body only through conversions into that layout (`h[None, :]`
over the tile), enters the loop in it: no conversion left in the body (the Mamba-style scan's state `h`, heldout_texts5's
h5_selective_scan, carried in the default 1-D layout cost two shared-memory round trips an iteration)."""
from __future__ import annotations

from kernellab.compiler.passes import assign_layouts

CARRY = """
tt.func @carry(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %rows = tt.expand_dims %r {axis = 1} : tensor<64x1xi32>
  %c16 = arith.constant {value = 16} : tensor<64x1xi32>
  %ro = arith.muli %rows, %c16 : tensor<64x1xi32>
  %q = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %cols = tt.expand_dims %q {axis = 0} : tensor<1x16xi32>
  %rb = tt.broadcast %ro : tensor<64x16xi32>
  %cb = tt.broadcast %cols : tensor<64x16xi32>
  %offs = arith.addi %rb, %cb : tensor<64x16xi32>
  %0 = tt.splat %x_ptr : tensor<64x16x!ptr<f32>>
  %p = tt.addptr %0, %offs : tensor<64x16x!ptr<f32>>
  %h = arith.constant {value = 0.0} : tensor<16xf32>
  %1 = arith.constant {value = 0} : i32
  %2 = arith.constant {value = 1} : i32
  %h_1 = scf.for %1, %n, %2, %h : tensor<16xf32> {
  ^bb(%i: i32, %h_2: tensor<16xf32>):
    %x = tt.load %p : tensor<64x16xf32>
    %he = tt.expand_dims %h_2 {axis = 0} : tensor<1x16xf32>
    %hb = tt.broadcast %he : tensor<64x16xf32>
    %hs = arith.addf %x, %hb : tensor<64x16xf32>
    %s = tt.reduce %hs {axis = 0} : tensor<16xf32> {
    ^bb(%a: f32, %b: f32):
      %c = arith.maxnumf %a, %b : f32
      tt.reduce.return %c
    }
    scf.yield %s
  }
  %3 = tt.splat %y_ptr : tensor<16x!ptr<f32>>
  %4 = tt.addptr %3, %q : tensor<16x!ptr<f32>>
  tt.store %4, %h_1
  tt.return
}
"""

CARRIED_AS_MADE = """
#L0 = #slice<1, #blocked<[1, 4], [8, 4], [4, 1], [1, 0]>>
#L1 = #blocked<[1, 4], [8, 4], [4, 1], [1, 0]>
#L2 = #slice<0, #blocked<[1, 4], [8, 4], [4, 1], [1, 0]>>
#L3 = #blocked<[1], [32], [4], [0]>

tt.func @carry(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L0>
  %rows = tt.expand_dims %r {axis = 1} : tensor<64x1xi32, #L1>
  %c16 = arith.constant {value = 16} : tensor<64x1xi32, #L1>
  %ro = arith.muli %rows, %c16 : tensor<64x1xi32, #L1>
  %q = tt.make_range {end = 16, start = 0} : tensor<16xi32, #L2>
  %cols = tt.expand_dims %q {axis = 0} : tensor<1x16xi32, #L1>
  %rb = tt.broadcast %ro : tensor<64x16xi32, #L1>
  %cb = tt.broadcast %cols : tensor<64x16xi32, #L1>
  %offs = arith.addi %rb, %cb : tensor<64x16xi32, #L1>
  %0 = tt.splat %x_ptr : tensor<64x16x!ptr<f32>, #L1>
  %p = tt.addptr %0, %offs : tensor<64x16x!ptr<f32>, #L1>
  %h = arith.constant {value = 0.0} : tensor<16xf32, #L3>
  %1 = arith.constant {value = 0} : i32
  %2 = arith.constant {value = 1} : i32
  %3 = ttg.convert_layout %h : tensor<16xf32, #L2>
  %h_1 = scf.for %1, %n, %2, %3 : tensor<16xf32, #L2> {
  ^bb(%i: i32, %h_2: tensor<16xf32, #L2>):
    %x = tt.load %p {vec = 4} : tensor<64x16xf32, #L1>
    %he = tt.expand_dims %h_2 {axis = 0} : tensor<1x16xf32, #L1>
    %hb = tt.broadcast %he : tensor<64x16xf32, #L1>
    %hs = arith.addf %x, %hb : tensor<64x16xf32, #L1>
    %s = tt.reduce %hs {axis = 0} : tensor<16xf32, #L2> {
    ^bb(%a: f32, %b: f32):
      %c = arith.maxnumf %a, %b : f32
      tt.reduce.return %c
    }
    scf.yield %s
  }
  %4 = tt.splat %y_ptr : tensor<16x!ptr<f32>, #L3>
  %5 = ttg.convert_layout %q : tensor<16xi32, #L3>
  %6 = tt.addptr %4, %5 : tensor<16x!ptr<f32>, #L3>
  %7 = ttg.convert_layout %h_1 : tensor<16xf32, #L3>
  tt.store %6, %7 {vec = 1}
  tt.return
}
"""


def _loop(m):
    return next(op for op in m.kernel.body.ops if op.name == "scf.for")


def test_the_carry_enters_in_the_layout_it_is_made_and_read_in(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "1")
    m, stats = check(assign_layouts, CARRY, CARRIED_AS_MADE)
    assert stats["loop_layouts_followed"] == 1
    assert not [op for op in _loop(m).regions[0].ops if op.name == "ttg.convert_layout"]


def test_off_by_default_the_carry_keeps_the_default_layout(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "0")
    m, stats = run_pass(assign_layouts, CARRY)
    assert "loop_layouts_followed" not in stats
    body = _loop(m).regions[0]
    assert [op.name for op in body.ops].count("ttg.convert_layout") == 2  # read, and the yield
    assert str(body.args[1].type.layout) == "#blocked<[1], [32], [4], [0]>"


def test_a_carry_also_read_in_its_own_layout_is_not_moved(run_pass, monkeypatch):
    # the carry is also stored as it is each iteration: carrying it in the slice would only move that conversion
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "1")
    text = CARRY.replace("    scf.yield %s\n",
                         "    %y = tt.splat %y_ptr : tensor<16x!ptr<f32>>\n"
                         "    %yp = tt.addptr %y, %r16 : tensor<16x!ptr<f32>>\n"
                         "    tt.store %yp, %h_2\n    scf.yield %s\n").replace(
        "  %h = arith.constant", "  %r16 = tt.make_range {end = 16, start = 0} : tensor<16xi32>\n  %h = arith.constant")
    m, stats = run_pass(assign_layouts, text)
    assert "loop_layouts_followed" not in stats


def test_an_enclosing_loop_carries_it_in_that_layout_too(run_pass, monkeypatch):
    # the carry passes through an outer loop (an implicit-GEMM conv's accumulator through its kh / kw loops): once the
    # inner loop carries it in the made layout, the outer one reads and yields it through conversions into it, and
    # a second round of assignment carries it there as well
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "1")
    text = CARRY.replace("  %h_1 = scf.for %1, %n, %2, %h : tensor<16xf32> {\n",
                         "  %g_1 = scf.for %1, %n, %2, %h : tensor<16xf32> {\n"
                         "  ^bb(%j: i32, %g_2: tensor<16xf32>):\n"
                         "  %h_1 = scf.for %1, %n, %2, %g_2 : tensor<16xf32> {\n").replace(
        "    scf.yield %s\n  }\n", "    scf.yield %s\n  }\n  scf.yield %h_1\n  }\n").replace(
        "tt.store %4, %h_1", "tt.store %4, %g_1")
    m, stats = run_pass(assign_layouts, text)
    assert stats["loop_layouts_followed"] == 2
    outer = _loop(m)
    inner = next(op for op in outer.regions[0].ops if op.name == "scf.for")
    for loop in (outer, inner):
        assert str(loop.regions[0].args[1].type.layout).startswith("#slice<0, #blocked")
        assert not [op for op in loop.regions[0].ops if op.name == "ttg.convert_layout"]
    monkeypatch.setenv("KERNELLAB_CARRY_AS_MADE", "0")
    m, stats = run_pass(assign_layouts, text)
    assert "loop_layouts_followed" not in stats
