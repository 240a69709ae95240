"""remove_layout_conversions: cheap index math is recomputed in the wanted layout; conversions of
real data stay; chains of conversions collapse; identity conversions vanish."""
from __future__ import annotations

from kernellab.compiler.passes import remove_layout_conversions as rlc


def converts(module):
    return [op for op in module.kernel.walk() if op.name == "ttg.convert_layout"]


def test_transposed_index_math_is_rematerialized(check):
    """The output of assign_layouts for y[n, m] = x[m, n]: the store's pointer math is recomputed
    from the ranges in the store's layout; only the loaded tile still goes through shared memory."""
    m, stats = check(rlc, """
#L0 = #slice<1, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>
#L3 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>

tt.func @trans_kernel(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L0>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32, #L2>
  %1 = arith.constant {value = 64} : tensor<32x1xi32, #L2>
  %2 = arith.muli %0, %1 : tensor<32x1xi32, #L2>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>, #L2>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>, #L2>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32, #L2>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>, #L2>
  %7 = tt.broadcast %5 : tensor<32x64xi32, #L2>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>, #L2>
  %x = tt.load %8 {vec = 4} : tensor<32x64xf32, #L2>
  %9 = tt.splat %y_ptr : tensor<32x1x!ptr<f32>, #L3>
  %10 = ttg.convert_layout %0 : tensor<32x1xi32, #L3>
  %11 = tt.addptr %9, %10 : tensor<32x1x!ptr<f32>, #L3>
  %12 = arith.constant {value = 32} : tensor<1x64xi32, #L3>
  %13 = ttg.convert_layout %12 : tensor<1x64xi32, #L2>
  %14 = arith.muli %5, %13 : tensor<1x64xi32, #L2>
  %15 = tt.broadcast %11 : tensor<32x64x!ptr<f32>, #L3>
  %16 = tt.broadcast %14 : tensor<32x64xi32, #L2>
  %17 = ttg.convert_layout %16 : tensor<32x64xi32, #L3>
  %18 = tt.addptr %15, %17 : tensor<32x64x!ptr<f32>, #L3>
  %19 = ttg.convert_layout %x : tensor<32x64xf32, #L3>
  tt.store %18, %19 {vec = 4}
  tt.return
}
""", """
#L0 = #slice<1, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>
#L3 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>
#L4 = #slice<1, #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>>
#L5 = #slice<0, #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>>

tt.func @trans_kernel(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L0>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32, #L2>
  %1 = arith.constant {value = 64} : tensor<32x1xi32, #L2>
  %2 = arith.muli %0, %1 : tensor<32x1xi32, #L2>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>, #L2>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>, #L2>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32, #L2>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>, #L2>
  %7 = tt.broadcast %5 : tensor<32x64xi32, #L2>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>, #L2>
  %x = tt.load %8 {vec = 4} : tensor<32x64xf32, #L2>
  %9 = tt.splat %y_ptr : tensor<32x1x!ptr<f32>, #L3>
  %rm_1 = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L4>
  %10 = tt.expand_dims %rm_1 {axis = 1} : tensor<32x1xi32, #L3>
  %11 = tt.addptr %9, %10 : tensor<32x1x!ptr<f32>, #L3>
  %12 = tt.broadcast %11 : tensor<32x64x!ptr<f32>, #L3>
  %rn_1 = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L5>
  %13 = tt.expand_dims %rn_1 {axis = 0} : tensor<1x64xi32, #L3>
  %14 = arith.constant {value = 32} : tensor<1x64xi32, #L3>
  %15 = arith.muli %13, %14 : tensor<1x64xi32, #L3>
  %16 = tt.broadcast %15 : tensor<32x64xi32, #L3>
  %17 = tt.addptr %12, %16 : tensor<32x64x!ptr<f32>, #L3>
  %18 = ttg.convert_layout %x : tensor<32x64xf32, #L3>
  tt.store %17, %18 {vec = 4}
  tt.return
}
""")
    assert stats == {"removed": 0, "rematerialized": 3, "narrowed": 0, "remaining": 1}
    (left,) = converts(m)
    assert left.operands[0].defining_op.name == "tt.load"


def test_splat_constant_and_range_chain(check):
    """offs = pid * 1024 + range and a splat constant, converted for a store: recomputed, no convert."""
    m, stats = check(rlc, """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%p: !ptr<i32> {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c : i32
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %base = tt.splat %start : tensor<1024xi32, #L0>
  %offs = arith.addi %base, %range : tensor<1024xi32, #L0>
  %seven = arith.constant {value = 7} : tensor<1024xi32, #L0>
  %val = arith.remsi %offs, %seven : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<i32>, #L1>
  %o1 = ttg.convert_layout %offs : tensor<1024xi32, #L1>
  %pp = tt.addptr %ps, %o1 : tensor<1024x!ptr<i32>, #L1>
  %v1 = ttg.convert_layout %val : tensor<1024xi32, #L1>
  tt.store %pp, %v1 {vec = 1}
  tt.return
}
""", """
#L0 = #blocked<[1], [32], [4], [0]>

tt.func @k(%p: !ptr<i32> {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c : i32
  %ps = tt.splat %p : tensor<1024x!ptr<i32>, #L0>
  %base = tt.splat %start : tensor<1024xi32, #L0>
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %offs = arith.addi %base, %range : tensor<1024xi32, #L0>
  %pp = tt.addptr %ps, %offs : tensor<1024x!ptr<i32>, #L0>
  %base_1 = tt.splat %start : tensor<1024xi32, #L0>
  %range_1 = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %offs_1 = arith.addi %base_1, %range_1 : tensor<1024xi32, #L0>
  %seven = arith.constant {value = 7} : tensor<1024xi32, #L0>
  %val = arith.remsi %offs_1, %seven : tensor<1024xi32, #L0>
  tt.store %pp, %val {vec = 1}
  tt.return
}
""")
    assert stats == {"removed": 0, "rematerialized": 2, "narrowed": 0, "remaining": 0}


def test_rematerialized_chain_keeps_the_original_for_other_users(check):
    check(rlc, """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%p: !ptr<i32> {tt.divisibility = 16}, %q: !ptr<i32> {tt.divisibility = 16}) {
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<i32>, #L0>
  %pp = tt.addptr %ps, %range : tensor<1024x!ptr<i32>, #L0>
  tt.store %pp, %range {vec = 4}
  %qs = tt.splat %q : tensor<1024x!ptr<i32>, #L1>
  %r1 = ttg.convert_layout %range : tensor<1024xi32, #L1>
  %qp = tt.addptr %qs, %r1 : tensor<1024x!ptr<i32>, #L1>
  tt.store %qp, %r1 {vec = 1}
  tt.return
}
""", """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%p: !ptr<i32> {tt.divisibility = 16}, %q: !ptr<i32> {tt.divisibility = 16}) {
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<i32>, #L0>
  %pp = tt.addptr %ps, %range : tensor<1024x!ptr<i32>, #L0>
  tt.store %pp, %range {vec = 4}
  %qs = tt.splat %q : tensor<1024x!ptr<i32>, #L1>
  %range_1 = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L1>
  %qp = tt.addptr %qs, %range_1 : tensor<1024x!ptr<i32>, #L1>
  tt.store %qp, %range_1 {vec = 1}
  tt.return
}
""")


def test_convert_of_loaded_values_stays(check):
    """A loaded tile, and index math that depends on a load (a gather), are real data: they stay."""
    text = """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%idx: !ptr<i32> {tt.divisibility = 16}, %p: !ptr<f32> {tt.divisibility = 16}) {
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %is = tt.splat %idx : tensor<1024x!ptr<i32>, #L0>
  %ip = tt.addptr %is, %range : tensor<1024x!ptr<i32>, #L0>
  %i = tt.load %ip {vec = 4} : tensor<1024xi32, #L0>
  %one = arith.constant {value = 1} : tensor<1024xi32, #L0>
  %j = arith.addi %i, %one : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L1>
  %j1 = ttg.convert_layout %j : tensor<1024xi32, #L1>
  %pp = tt.addptr %ps, %j1 : tensor<1024x!ptr<f32>, #L1>
  %v = tt.load %pp {vec = 1} : tensor<1024xf32, #L1>
  %v0 = ttg.convert_layout %v : tensor<1024xf32, #L0>
  %op = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %opp = tt.addptr %op, %range : tensor<1024x!ptr<f32>, #L0>
  tt.store %opp, %v0 {vec = 4}
  tt.return
}
"""
    m, stats = check(rlc, text, text)
    assert stats == {"removed": 0, "rematerialized": 0, "narrowed": 0, "remaining": 2}


def test_convert_of_convert_collapses(check):
    m, stats = check(rlc, """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>
#L2 = #blocked<[2], [32], [4], [0]>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %pp = tt.addptr %ps, %r : tensor<1024x!ptr<f32>, #L0>
  %v = tt.load %pp {vec = 4} : tensor<1024xf32, #L0>
  %a = ttg.convert_layout %v : tensor<1024xf32, #L1>
  %b = ttg.convert_layout %a : tensor<1024xf32, #L2>
  %c = ttg.convert_layout %v : tensor<1024xf32, #L1>
  %d = ttg.convert_layout %c : tensor<1024xf32, #L0>
  %s = arith.addf %b, %b : tensor<1024xf32, #L2>
  %t = arith.addf %d, %v : tensor<1024xf32, #L0>
  tt.print %s, %t
  tt.return
}
""", """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[2], [32], [4], [0]>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %pp = tt.addptr %ps, %r : tensor<1024x!ptr<f32>, #L0>
  %v = tt.load %pp {vec = 4} : tensor<1024xf32, #L0>
  %b = ttg.convert_layout %v : tensor<1024xf32, #L1>
  %s = arith.addf %b, %b : tensor<1024xf32, #L1>
  %t = arith.addf %v, %v : tensor<1024xf32, #L0>
  tt.print %s, %t
  tt.return
}
""")
    # L0 -> L1 -> L2 became one L0 -> L2 conversion; L0 -> L1 -> L0 became nothing
    assert stats["remaining"] == 1


def test_convert_to_the_same_layout_disappears(check):
    m, stats = check(rlc, """
#L0 = #blocked<[4], [32], [4], [0]>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %pp = tt.addptr %ps, %r : tensor<1024x!ptr<f32>, #L0>
  %v = tt.load %pp {vec = 4} : tensor<1024xf32, #L0>
  %same = ttg.convert_layout %v : tensor<1024xf32, #L0>
  tt.store %pp, %same {vec = 4}
  tt.return
}
""", """
#L0 = #blocked<[4], [32], [4], [0]>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %pp = tt.addptr %ps, %r : tensor<1024x!ptr<f32>, #L0>
  %v = tt.load %pp {vec = 4} : tensor<1024xf32, #L0>
  tt.store %pp, %v {vec = 4}
  tt.return
}
""")
    assert stats == {"removed": 1, "rematerialized": 0, "narrowed": 0, "remaining": 0}


def test_rematerialization_inside_a_loop_body(run_pass):
    """Index math using the induction variable: recomputed next to the conversion, inside the body."""
    m, stats = run_pass(rlc, """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %ps = tt.splat %p : tensor<1024x!ptr<f32>, #L0>
  %pp = tt.addptr %ps, %r : tensor<1024x!ptr<f32>, #L0>
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %is = tt.splat %i : tensor<1024xi32, #L0>
    %o = arith.addi %r, %is : tensor<1024xi32, #L0>
    %q = tt.addptr %pp, %o : tensor<1024x!ptr<f32>, #L0>
    %q1 = ttg.convert_layout %q : tensor<1024x!ptr<f32>, #L1>
    %v = tt.load %q1 {vec = 1} : tensor<1024xf32, #L1>
    tt.store %q1, %v {vec = 1}
    scf.yield
  }
  tt.return
}
""")
    assert stats == {"removed": 0, "rematerialized": 1, "narrowed": 0, "remaining": 0}
    assert not converts(m)
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0]
    load = next(op for op in body.ops if op.name == "tt.load")
    assert str(load.operands[0].type.layout) == "#blocked<[1], [32], [4], [0]>"
    assert load.operands[0].defining_op.block is body


ROW_BROADCAST = """
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #slice<1, #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>
#L3 = #mma<[4, 1]>
tt.func @k(%lse_ptr: !ptr<f32> {tt.divisibility = 16}, %s0: tensor<128x32xf32, #L3>, %o_ptrs: tensor<128x32x!ptr<f32>, #L3>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L0>
  %p = tt.splat %lse_ptr : tensor<128x!ptr<f32>, #L0>
  %pp = tt.addptr %p, %r : tensor<128x!ptr<f32>, #L0>
  %lse = tt.load %pp {vec = 1} : tensor<128xf32, #L0>
  %lse1 = ttg.convert_layout %lse : tensor<128xf32, #L1>
  %e = tt.expand_dims %lse1 {axis = 1} : tensor<128x1xf32, #L2>
  %b = tt.broadcast %e : tensor<128x32xf32, #L2>
  %acc = scf.for %c0, %n, %c1, %s0 : tensor<128x32xf32, #L3> {
  ^bb(%i: i32, %a: tensor<128x32xf32, #L3>):
    %bm = ttg.convert_layout %b : tensor<128x32xf32, #L3>
    %d = arith.subf %a, %bm : tensor<128x32xf32, #L3>
    scf.yield %d
  }
  tt.store %o_ptrs, %acc
  tt.return
}
"""


def test_a_broadcast_row_vector_is_converted_as_a_vector_where_it_is_defined(run_pass):
    """lse[:, None] (loaded outside the loop, 64 values) subtracted from a #mma tile inside it: instead of the
    128x32 broadcast through shared memory every iteration, the 64-value vector is converted once, right after its
    load, to the #mma tile's row slice, and the broadcast is rebuilt in #mma (registers only)."""
    m, stats = run_pass(rlc, ROW_BROADCAST)
    assert stats["narrowed"] == 1 and stats["remaining"] == 1, stats
    (conv,) = converts(m)
    assert conv.block is m.kernel.body and conv.operands[0].defining_op.name == "tt.load"
    assert conv.result.type.shape == (128,) and str(conv.result.type.layout) == "#slice<1, #mma<[4, 1]>>"
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert not any(op.name == "ttg.convert_layout" for op in loop.walk())


def test_a_small_load_is_issued_in_the_wanted_layout(run_pass):
    """A load of fewer elements than the program has threads, read only by the broadcast: loaded again in the
    #mma tile's row slice (each thread reads the rows it holds), no conversion at all, the first load gone."""
    text = ROW_BROADCAST.replace("128", "64")
    m, stats = run_pass(rlc, text)
    assert stats["remaining"] == 0, stats
    (ld,) = [op for op in m.kernel.walk() if op.name == "tt.load"]
    assert str(ld.result.type.layout) == "#slice<1, #mma<[4, 1]>>" and ld.attrs["vec"] == 1
    assert ld.block is m.kernel.body


RESHAPED_RANGE = """
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #blocked<[8, 1, 1], [1, 2, 16], [1, 4, 1], [2, 1, 0]>
#L2 = #blocked<[1, 1, 4], [1, 8, 4], [4, 1, 1], [2, 1, 0]>

tt.func @reshaped(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %idx = tt.reshape %r : tensor<8x8x16xi32, #L1>
  %0 = tt.splat %x_ptr : tensor<8x8x16x!ptr<f32>, #L1>
  %1 = tt.addptr %0, %idx : tensor<8x8x16x!ptr<f32>, #L1>
  %2 = ttg.convert_layout %1 : tensor<8x8x16x!ptr<f32>, #L2>
  %x = tt.load %2 {vec = 4} : tensor<8x8x16xf32, #L2>
  %3 = tt.splat %y_ptr : tensor<8x8x16x!ptr<f32>, #L2>
  %4 = ttg.convert_layout %idx : tensor<8x8x16xi32, #L2>
  %5 = tt.addptr %3, %4 : tensor<8x8x16x!ptr<f32>, #L2>
  tt.store %5, %x {vec = 4}
  tt.return
}
"""


def test_a_reshaped_range_is_recomputed_in_the_accesses_layout(check):
    """`arange(1024).reshape(8, 8, 16)` addressing a load and a store: assign_layouts gave the reshape the layout
    that keeps the range's registers (#L1), the accesses want a coalesced one (#L2). Instead of converting the
    pointer tile (8-byte elements) through shared memory, the range is made in the layout (#L3) that the reshape
    maps onto #L2 register for register, and the reshape and the address math follow in #L2 (the store's copy is
    merged with the load's by the CSE pass that follows)."""
    m, stats = check(rlc, RESHAPED_RANGE, """
#L0 = #blocked<[1, 1, 4], [1, 8, 4], [4, 1, 1], [2, 1, 0]>
#L1 = #blocked<[4], [32], [4], [0]>

tt.func @reshaped(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %0 = tt.splat %x_ptr : tensor<8x8x16x!ptr<f32>, #L0>
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L1>
  %idx = tt.reshape %r : tensor<8x8x16xi32, #L0>
  %1 = tt.addptr %0, %idx : tensor<8x8x16x!ptr<f32>, #L0>
  %x = tt.load %1 {vec = 4} : tensor<8x8x16xf32, #L0>
  %2 = tt.splat %y_ptr : tensor<8x8x16x!ptr<f32>, #L0>
  %r_1 = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L1>
  %idx_1 = tt.reshape %r_1 : tensor<8x8x16xi32, #L0>
  %3 = tt.addptr %2, %idx_1 : tensor<8x8x16x!ptr<f32>, #L0>
  tt.store %3, %x {vec = 4}
  tt.return
}
""")
    assert stats["remaining"] == 0 and stats["rematerialized"] == 2, stats


def test_a_reshape_that_would_move_data_is_not_recomputed(run_pass):
    """A reshape of a loaded tile (not index math) is no recomputation: its conversion stays."""
    text = RESHAPED_RANGE.replace("%r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>",
                                  "%rp = tt.splat %x_ptr : tensor<1024x!ptr<i32>, #L0>\n"
                                  "  %rr = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>\n"
                                  "  %rq = tt.addptr %rp, %rr : tensor<1024x!ptr<i32>, #L0>\n"
                                  "  %r = tt.load %rq {vec = 1} : tensor<1024xi32, #L0>")
    m, stats = run_pass(rlc, text)
    assert stats["remaining"] == 2, stats


_RELOAD = """
#L1 = #slice<0, #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>>
#L2 = #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>
#L3 = #blocked<[1], [32], [8], [0]>
tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %q: !ptr<f32> {tt.divisibility = 16}) {
  %r0 = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %r = ttg.convert_layout %r0 : tensor<64xi32, #L3>
  %s = tt.splat %p : tensor<64x!ptr<f32>, #L3>
  %a = tt.addptr %s, %r : tensor<64x!ptr<f32>, #L3>
  %x = tt.load %a {vec = 1} : tensor<64xf32, #L3>
  %y = ttg.convert_layout %x : tensor<64xf32, #L1>
  %z = tt.expand_dims %y {axis = 0} : tensor<1x64xf32, #L2>
  %w = tt.broadcast %z : tensor<32x64xf32, #L2>
  %rows = tt.make_range {end = 32, start = 0} : tensor<32xi32, #slice<1, #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>>>
  %re = tt.expand_dims %rows {axis = 1} : tensor<32x1xi32, #L2>
  %c64 = arith.constant {value = 64} : tensor<32x1xi32, #L2>
  %ro = arith.muli %re, %c64 : tensor<32x1xi32, #L2>
  %rb = tt.broadcast %ro : tensor<32x64xi32, #L2>
  %ce = tt.expand_dims %r0 {axis = 0} : tensor<1x64xi32, #L2>
  %cb = tt.broadcast %ce : tensor<32x64xi32, #L2>
  %o = arith.addi %rb, %cb : tensor<32x64xi32, #L2>
  %qs = tt.splat %q : tensor<32x64x!ptr<f32>, #L2>
  %qp = tt.addptr %qs, %o : tensor<32x64x!ptr<f32>, #L2>
  tt.store %qp, %w {vec = 4}
  tt.return
}
"""


def test_reloaded_row_vector_keeps_its_vectors(check):
    """A small load reissued in a row vector's slice of a blocked layout (rotary's cos/sin rows: 64 f32 over 8 warps,
    8 contiguous elements a thread there) moves 16 bytes an instruction, as its addresses allow (seen through the
    conversion assign_layouts put on them), not one element: 16 scalar loads -> 4 vector loads a thread in the
    rope idiom at 8 warps (SASS 152 -> 136, Triton 136)."""
    from kernellab.compiler.gpu.options import GpuOptions

    check(rlc, _RELOAD, """
#L0 = #slice<0, #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>>
#L1 = #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>
#L2 = #slice<1, #blocked<[1, 8], [4, 8], [8, 1], [1, 0]>>

tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %q: !ptr<f32> {tt.divisibility = 16}) {
  %r0 = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L0>
  %s = tt.splat %p : tensor<64x!ptr<f32>, #L0>
  %r0_1 = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L0>
  %a = tt.addptr %s, %r0_1 : tensor<64x!ptr<f32>, #L0>
  %x = tt.load %a {vec = 4} : tensor<64xf32, #L0>
  %z = tt.expand_dims %x {axis = 0} : tensor<1x64xf32, #L1>
  %w = tt.broadcast %z : tensor<32x64xf32, #L1>
  %rows = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
  %re = tt.expand_dims %rows {axis = 1} : tensor<32x1xi32, #L1>
  %c64 = arith.constant {value = 64} : tensor<32x1xi32, #L1>
  %ro = arith.muli %re, %c64 : tensor<32x1xi32, #L1>
  %rb = tt.broadcast %ro : tensor<32x64xi32, #L1>
  %ce = tt.expand_dims %r0 {axis = 0} : tensor<1x64xi32, #L1>
  %cb = tt.broadcast %ce : tensor<32x64xi32, #L1>
  %o = arith.addi %rb, %cb : tensor<32x64xi32, #L1>
  %qs = tt.splat %q : tensor<32x64x!ptr<f32>, #L1>
  %qp = tt.addptr %qs, %o : tensor<32x64x!ptr<f32>, #L1>
  tt.store %qp, %w {vec = 4}
  tt.return
}
""", GpuOptions(num_warps=8))


def test_reloaded_vector_stops_at_the_alignment(run_pass):
    """The same reload off a pointer known only 4-byte aligned: one element an instruction."""
    from kernellab.compiler.gpu.options import GpuOptions

    m, _ = run_pass(rlc, _RELOAD.replace("%p: !ptr<f32> {tt.divisibility = 16}", "%p: !ptr<f32>"),
                    GpuOptions(num_warps=8))
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    assert load.attrs["vec"] == 1 and str(load.result.type.layout).startswith("#slice<0")
