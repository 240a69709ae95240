"""Axis analysis: contiguity / divisibility / constancy of index and pointer tensors."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.axis_info import AxisAnalysis
from kernellab.compiler.parser import parse_module


def analyze(text: str):
    """Parse `text`, run the analysis; returns {value name: AxisInfo} for every named value."""
    m = parse_module(text)
    fn = m.kernel
    axis = AxisAnalysis(fn)
    named = {a.hint: a for a in fn.args}
    for op in fn.walk():
        for reg in op.regions:
            named.update({a.hint: a for a in reg.args if a.hint})
        named.update({r.hint: r for r in op.results if r.hint})
    return {k: axis[v] for k, v in named.items()}


def cdc(ai):
    """(contiguity, divisibility, constancy) as tuples."""
    return ai.contig, ai.div, ai.const


VECADD = """
tt.func @k(%x: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}, %m: i32, %q: !ptr<f16>) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c1024 = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c1024 : i32
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %r16 = tt.make_range {end = 48, start = 16} : tensor<32xi32>
  %base = tt.splat %start : tensor<1024xi32>
  %offs = arith.addi %base, %range : tensor<1024xi32>
  %ns = tt.splat %n : tensor<1024xi32>
  %mask = arith.cmpi %offs, %ns {predicate = "slt"} : tensor<1024xi1>
  %ms = tt.splat %m : tensor<1024xi32>
  %mask_m = arith.cmpi %offs, %ms {predicate = "slt"} : tensor<1024xi1>
  %eq = arith.cmpi %offs, %ns {predicate = "eq"} : tensor<1024xi1>
  %xs = tt.splat %x : tensor<1024x!ptr<f32>>
  %ptrs = tt.addptr %xs, %offs : tensor<1024x!ptr<f32>>
  %qs = tt.splat %q : tensor<1024x!ptr<f16>>
  %qptrs = tt.addptr %qs, %offs : tensor<1024x!ptr<f16>>
  %v = tt.load %ptrs, %mask : tensor<1024xf32>
  %c4 = arith.constant {value = 4} : tensor<1024xi32>
  %twice = arith.muli %offs, %c4 : tensor<1024xi32>
  tt.return
}
"""


def test_make_range_and_constant():
    info = analyze(VECADD)
    assert cdc(info["range"]) == ((1024,), (1 << 30,), (1,))  # start 0: divisible by anything
    assert cdc(info["r16"]) == ((32,), (16,), (1,))
    assert cdc(info["c4"]) == ((1,), (4,), (1024,)) and info["c4"].value == 4
    assert info["c1024"].value == 1024 and info["c1024"].div == (1024,)


def test_splat_of_divisible_argument():
    info = analyze(VECADD)
    assert info["n"].div == (16,)
    assert cdc(info["ns"]) == ((1,), (16,), (1024,))
    assert cdc(info["ms"]) == ((1,), (1,), (1024,))          # %m has no divisibility attribute
    assert info["start"].div[0] >= 1024                       # pid * 1024
    assert cdc(info["base"]) == ((1,), (1024,), (1024,))


def test_offsets_and_addptr_of_divisible_pointer():
    info = analyze(VECADD)
    assert cdc(info["offs"]) == ((1024,), (1024,), (1,))
    # the pointer's divisibility is in bytes: 16-byte aligned base, offsets of 1024 floats
    assert cdc(info["ptrs"]) == ((1024,), (16,), (1,))
    # %q has no attribute: nothing is known about its alignment
    assert cdc(info["qptrs"]) == ((1024,), (1,), (1,))
    assert cdc(info["v"]) == ((1,), (1,), (1,))
    assert info["twice"].contig == (1,) and info["twice"].div[0] >= 4


def test_mask_constancy_depends_on_divisibility_of_n():
    info = analyze(VECADD)
    # offs < n with n % 16 == 0: the mask is constant over runs of 16 (one run never straddles n)
    assert info["mask"].const == (16,)
    # unknown m: any element may be the last in bounds
    assert info["mask_m"].const == (1,)
    # equality says nothing about runs
    assert info["eq"].const == (1,)


def test_expand_dims_and_broadcast():
    info = analyze("""
tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %stride: i32 {tt.divisibility = 16}) {
  %rows = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %cols = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %r2 = tt.expand_dims %rows {axis = 1} : tensor<16x1xi32>
  %c2 = tt.expand_dims %cols {axis = 0} : tensor<1x64xi32>
  %ss = tt.splat %stride : tensor<16x1xi32>
  %roff = arith.muli %r2, %ss : tensor<16x1xi32>
  %rb = tt.broadcast %roff : tensor<16x64xi32>
  %cb = tt.broadcast %c2 : tensor<16x64xi32>
  %off = arith.addi %rb, %cb : tensor<16x64xi32>
  %ps = tt.splat %p : tensor<16x64x!ptr<f32>>
  %ptrs = tt.addptr %ps, %off : tensor<16x64x!ptr<f32>>
  tt.return
}
""")
    # the inserted size-1 dim: each element starts its own run, so only a divisor of every element counts
    assert cdc(info["r2"]) == ((16, 1), (1 << 30, 1), (1, 1))
    assert cdc(info["c2"]) == ((1, 64), (1, 1 << 30), (1, 1))
    assert cdc(info["roff"]) == ((1, 1), (16, 16), (1, 1))
    assert cdc(info["rb"]) == ((1, 1), (16, 16), (1, 64))     # each row's offset repeats along dim 1
    assert cdc(info["cb"]) == ((1, 64), (1, 1 << 30), (16, 1))  # each column repeats along dim 0
    assert cdc(info["off"]) == ((1, 64), (1, 16), (1, 1))
    # rows of 64 contiguous floats, each starting 16-byte aligned
    assert cdc(info["ptrs"]) == ((1, 64), (4, 16), (1, 1))


def test_remsi_keeps_contiguity_up_to_the_modulus():
    info = analyze("""
tt.func @k(%n: i32 {tt.divisibility = 16}, %m: i32) {
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32>
  %c64 = arith.constant {value = 64} : tensor<256xi32>
  %a = arith.remsi %r, %c64 : tensor<256xi32>
  %ns = tt.splat %n : tensor<256xi32>
  %b = arith.remsi %r, %ns : tensor<256xi32>
  %ms = tt.splat %m : tensor<256xi32>
  %c = arith.remsi %r, %ms : tensor<256xi32>
  tt.return
}
""")
    assert info["a"].contig == (64,) and info["a"].div == (64,)
    assert info["b"].contig == (16,) and info["b"].div == (16,)
    assert info["c"].contig == (1,)


def test_multiple_of_and_max_contiguous_hints():
    info = analyze("""
tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %m: i32) {
  %r = tt.make_range {end = 128, start = 0} : tensor<128xi32>
  %ms = tt.splat %m : tensor<128xi32>
  %raw = arith.addi %ms, %r : tensor<128xi32>
  %hinted = tt.hint %raw {max_contiguous = [128], multiple_of = [8]} : tensor<128xi32>
  %ps = tt.splat %p : tensor<128x!ptr<f32>>
  %p0 = tt.addptr %ps, %raw : tensor<128x!ptr<f32>>
  %p1 = tt.addptr %ps, %hinted : tensor<128x!ptr<f32>>
  %ma = tt.hint %m {multiple_of = [16]} : i32
  tt.return
}
""")
    assert cdc(info["raw"]) == ((128,), (1,), (1,))
    assert cdc(info["hinted"]) == ((128,), (8,), (1,))
    assert info["p0"].div == (4,)     # gcd(16 bytes, 1 element * 4 bytes)
    assert info["p1"].div == (16,)    # gcd(16, 8 elements * 4 bytes = 32)
    assert info["ma"].div == (16,)


def test_loop_carried_pointer_keeps_contiguity():
    info = analyze("""
tt.func @k(%p: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32>
  %ps = tt.splat %p : tensor<256x!ptr<f32>>
  %ptrs = tt.addptr %ps, %r : tensor<256x!ptr<f32>>
  %step = arith.constant {value = 256} : tensor<256xi32>
  %odd = arith.constant {value = 3} : tensor<256xi32>
  %out, %out2 = scf.for %c0, %n, %c1, %ptrs, %ptrs : tensor<256x!ptr<f32>>, tensor<256x!ptr<f32>> {
  ^bb(%i: i32, %cur: tensor<256x!ptr<f32>>, %cur2: tensor<256x!ptr<f32>>):
    %v = tt.load %cur : tensor<256xf32>
    %next = tt.addptr %cur, %step : tensor<256x!ptr<f32>>
    %next2 = tt.addptr %cur2, %odd : tensor<256x!ptr<f32>>
    scf.yield %next, %next2
  }
  tt.return
}
""")
    assert cdc(info["ptrs"]) == ((256,), (16,), (1,))
    # advancing by 256 floats keeps both contiguity and 16-byte alignment across iterations
    assert cdc(info["cur"]) == ((256,), (16,), (1,))
    assert cdc(info["next"]) == ((256,), (16,), (1,))
    assert cdc(info["out"]) == ((256,), (16,), (1,))
    # advancing by 3 floats keeps contiguity, but only 4-byte alignment survives the back edge
    assert cdc(info["cur2"]) == ((256,), (4,), (1,))
    assert cdc(info["out2"]) == ((256,), (4,), (1,))


@pytest.mark.parametrize("pred, swapped, const", [
    # offs (runs of 1024 contiguous values starting at multiples of 1024) against n (a multiple of 16):
    # every run of 16 falls entirely on one side of a boundary at n ...
    ("slt", False, 16), ("sge", False, 16), ("ult", False, 16), ("uge", False, 16),
    ("sgt", True, 16), ("sle", True, 16),          # n > offs, n <= offs
    # ... but not of one at n + 1: offs <= n is true for offs = n and false for n + 1
    ("sle", False, 1), ("sgt", False, 1), ("ule", False, 1), ("ugt", False, 1),
    ("slt", True, 1), ("sge", True, 1),            # n < offs, n >= offs
])
def test_mask_constancy_per_predicate(pred, swapped, const):
    lhs, rhs = ("%ns", "%offs") if swapped else ("%offs", "%ns")
    info = analyze(f"""
tt.func @k(%n: i32 {{tt.divisibility = 16}}) {{
  %pid = tt.get_program_id {{axis = 0}} : i32
  %c1024 = arith.constant {{value = 1024}} : i32
  %start = arith.muli %pid, %c1024 : i32
  %range = tt.make_range {{end = 1024, start = 0}} : tensor<1024xi32>
  %base = tt.splat %start : tensor<1024xi32>
  %offs = arith.addi %base, %range : tensor<1024xi32>
  %ns = tt.splat %n : tensor<1024xi32>
  %mask = arith.cmpi {lhs}, {rhs} {{predicate = "{pred}"}} : tensor<1024xi1>
  tt.return
}}
""")
    assert info["mask"].const == (const,)


def test_mask_constancy_matches_brute_force():
    """Check the claimed constancy of `offs <pred> n` by evaluating it for every n in a window."""
    import operator

    ops = {"slt": operator.lt, "sle": operator.le, "sgt": operator.gt, "sge": operator.ge}
    for pred, fn in ops.items():
        for swapped in (False, True):
            lhs, rhs = ("%ns", "%offs") if swapped else ("%offs", "%ns")
            info = analyze(f"""
tt.func @k(%n: i32 {{tt.divisibility = 16}}) {{
  %offs = tt.make_range {{end = 64, start = 0}} : tensor<64xi32>
  %ns = tt.splat %n : tensor<64xi32>
  %mask = arith.cmpi {lhs}, {rhs} {{predicate = "{pred}"}} : tensor<64xi1>
  tt.return
}}
""")
            k = info["mask"].const[0]
            for n in range(-32, 96, 16):
                vals = [fn(n, o) if swapped else fn(o, n) for o in range(64)]
                runs = [vals[i:i + k] for i in range(0, 64, k)]
                assert all(len(set(r)) == 1 for r in runs), (pred, swapped, n, k)


BLOCK_PTR_LOAD = """
tt.func @k(%d: !ptr<i32> {tt.divisibility = 16}, %p: !ptr<i32> {tt.divisibility = 16}) {
  %c0 = arith.constant {value = 0} : i32
  %s8 = arith.constant {value = 8} : i64
  %s32 = arith.constant {value = 32} : i64
  %one = arith.constant {value = 1} : i64
  %bp = tt.make_block_ptr %d, %s8, %s32, %s32, %one, %c0, %c0 {block_shape = [8, 32], order = [1, 0]} : !blockptr<i32, 8x32>
  %v = tt.load %bp {boundary_check = [0, 1], padding = "zero"} : tensor<8x32xi32>
  %k1 = arith.constant {value = 1} : tensor<8x32xi32>
  %w = arith.addi %v, %k1 : tensor<8x32xi32>
  %ps = tt.splat %p : tensor<8x32x!ptr<i32>>
  %same = tt.load %ps : tensor<8x32xi32>
  %one_p = tt.load %p : i32
  tt.return
}
"""


def test_a_block_pointer_load_is_a_tile_of_its_own_rank():
    """A block pointer's load (tile IR, before block_ptr lowering: a host descriptor's load) has a scalar operand;
    its tile knows nothing per dimension, at the tile's rank (it was the scalar's rank 1, and the add of the tile
    raised an IndexError); a tile of pointers loads runs as long as the pointers' own."""
    info = analyze(BLOCK_PTR_LOAD)
    assert cdc(info["v"]) == ((1, 1), (1, 1), (1, 1))
    assert cdc(info["w"]) == ((1, 1), (1, 1), (1, 1))
    assert info["same"].const == (8, 32) and info["one_p"].rank == 1


RESHAPED = """
tt.func @k(%x: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %range = tt.make_range {end = 2048, start = 0} : tensor<2048xi32>
  %five = tt.reshape %range : tensor<4x32x4x2x2xi32>
  %rows = tt.reshape %range : tensor<32x64xi32>
  %c16 = arith.constant {value = 16} : tensor<2048xi32>
  %by16 = arith.divsi %range, %c16 : tensor<2048xi32>
  %blocks = tt.reshape %by16 : tensor<8x256xi32>
  %narrow = tt.reshape %blocks : tensor<256x8xi32>
  %r16 = tt.make_range {end = 272, start = 16} : tensor<256xi32>
  %r16x = tt.reshape %r16 : tensor<32x8xi32>
  %xs = tt.splat %x : tensor<32x64x!ptr<f32>>
  %ptrs = tt.addptr %xs, %rows : tensor<32x64x!ptr<f32>>
  tt.return
}
"""


def test_runs_along_the_last_dimension_pass_through_a_reshape():
    info = analyze(RESHAPED)
    # arange(2048).reshape(4, 32, 4, 2, 2): the last dim holds pairs of consecutive values (Triton's chained
    # reductions form), each pair starting at an even value; the other dims know nothing (stride > 1)
    assert cdc(info["five"]) == ((1, 1, 1, 1, 2), (1, 1, 1, 1, 2), (1, 1, 1, 1, 1))
    assert cdc(info["rows"]) == ((1, 64), (1, 64), (1, 1))
    # x // 16 is constant over aligned blocks of 16: rows of 256 keep 16, rows of 8 within a block keep 8
    assert cdc(info["blocks"])[2] == (1, 16) and cdc(info["narrow"])[2] == (1, 8)
    # a run starting at 16 cut into rows of 8: each row starts at a multiple of 8
    assert cdc(info["r16x"]) == ((1, 8), (1, 8), (1, 1))
    ptrs = info["ptrs"]
    assert ptrs.contig == (1, 64) and ptrs.div[1] == 16  # 16-byte aligned 4-wide loads along the rows


def test_reshape_rule_off(monkeypatch):
    monkeypatch.setenv("KERNELLAB_RESHAPE_AXIS", "0")
    assert cdc(analyze(RESHAPED)["rows"]) == ((1, 1), (1, 1), (1, 1))
