import math

import numpy as np
import pytest

from kernellab.compiler.passes import constant_fold
from kernellab.compiler.rewrite import int_to_float, round_float
from kernellab.compiler.types import bfloat16, float16, float32, float64


def test_integer_wraparound_and_c_division(check):
    check(constant_fold, """
tt.func @k() {
  %max = arith.constant {value = 2147483647} : i32
  %one = arith.constant {value = 1} : i32
  %m7 = arith.constant {value = -7} : i32
  %two = arith.constant {value = 2} : i32
  %s = arith.addi %max, %one : i32
  %q = arith.divsi %m7, %two : i32
  %r = arith.remsi %m7, %two : i32
  %qu = arith.divui %m7, %two : i32
  %ru = arith.remui %m7, %two : i32
  %mu = arith.muli %max, %max : i32
  %sl = arith.shli %one, %max : i32
  %sr = arith.shrsi %m7, %one : i32
  %sra = arith.shrsi %m7, %max : i32
  %srl = arith.shrui %m7, %one : i32
  %mn = arith.minui %m7, %two : i32
  %mx = arith.maxsi %m7, %two : i32
  tt.print %s, %q, %r, %qu, %ru, %mu, %sl, %sr, %sra, %srl, %mn, %mx
  tt.return
}
""", """
tt.func @k() {
  %max = arith.constant {value = 2147483647} : i32
  %one = arith.constant {value = 1} : i32
  %m7 = arith.constant {value = -7} : i32
  %two = arith.constant {value = 2} : i32
  %s = arith.constant {value = -2147483648} : i32
  %q = arith.constant {value = -3} : i32
  %r = arith.constant {value = -1} : i32
  %qu = arith.constant {value = 2147483644} : i32
  %ru = arith.constant {value = 1} : i32
  %mu = arith.constant {value = 1} : i32
  %sl = arith.constant {value = 0} : i32
  %sr = arith.constant {value = -4} : i32
  %sra = arith.constant {value = -1} : i32
  %srl = arith.constant {value = 2147483644} : i32
  %mn = arith.constant {value = 2} : i32
  %mx = arith.constant {value = 2} : i32
  tt.print %s, %q, %r, %qu, %ru, %mu, %sl, %sr, %sra, %srl, %mn, %mx
  tt.return
}
""")


def test_unsigned_and_small_types(check):
    check(constant_fold, """
tt.func @k() {
  %a = arith.constant {value = 250} : u8
  %b = arith.constant {value = 10} : u8
  %c = arith.constant {value = 100} : i8
  %s = arith.addi %a, %b : u8
  %d = arith.subi %b, %a : u8
  %e = arith.addi %c, %c : i8
  %lt = arith.cmpi %a, %b {predicate = "ult"} : i1
  %gt = arith.cmpi %a, %b {predicate = "ugt"} : i1
  %t = arith.constant {value = true} : i1
  %x = arith.xori %t, %t : i1
  tt.print %s, %d, %e, %lt, %gt, %x
  tt.return
}
""", """
tt.func @k() {
  %a = arith.constant {value = 250} : u8
  %b = arith.constant {value = 10} : u8
  %c = arith.constant {value = 100} : i8
  %s = arith.constant {value = 4} : u8
  %d = arith.constant {value = 16} : u8
  %e = arith.constant {value = -56} : i8
  %lt = arith.constant {value = false} : i1
  %gt = arith.constant {value = true} : i1
  %t = arith.constant {value = true} : i1
  %x = arith.constant {value = false} : i1
  tt.print %s, %d, %e, %lt, %gt, %x
  tt.return
}
""")


def test_division_by_zero_and_overflow_not_folded(check):
    text = """
tt.func @k() {
  %z = arith.constant {value = 0} : i32
  %one = arith.constant {value = 1} : i32
  %min = arith.constant {value = -2147483648} : i32
  %m1 = arith.constant {value = -1} : i32
  %a = arith.divsi %one, %z : i32
  %b = arith.remui %one, %z : i32
  %c = arith.divsi %min, %m1 : i32
  tt.print %a, %b, %c
  tt.return
}
"""
    assert not any(check(constant_fold, text, text).values())


def test_floats(check):
    check(constant_fold, """
tt.func @k() {
  %a = arith.constant {value = 0.1} : f32
  %b = arith.constant {value = 0.2} : f32
  %h = arith.constant {value = 65504.0} : f16
  %pz = arith.constant {value = 0.0} : f32
  %nz = arith.constant {value = -0.0} : f32
  %nan = arith.constant {value = nan} : f32
  %s = arith.addf %a, %b : f32
  %hh = arith.addf %h, %h : f16
  %z = arith.addf %nz, %nz : f32
  %z2 = arith.addf %nz, %pz : f32
  %d = arith.divf %a, %pz : f32
  %mx = arith.maxnumf %nan, %a : f32
  %mm = arith.maximumf %nan, %a : f32
  %mz = arith.maximumf %nz, %pz : f32
  %r = arith.remf %b, %a : f32
  %ng = arith.negf %pz : f32
  %eq = arith.cmpf %nan, %nan {predicate = "oeq"} : i1
  %ne = arith.cmpf %nan, %a {predicate = "une"} : i1
  %lt = arith.cmpf %a, %b {predicate = "olt"} : i1
  tt.print %s, %hh, %z, %z2, %d, %mx, %mm, %mz, %r, %ng, %eq, %ne, %lt
  tt.return
}
""", """
tt.func @k() {
  %a = arith.constant {value = 0.1} : f32
  %b = arith.constant {value = 0.2} : f32
  %h = arith.constant {value = 65504.0} : f16
  %pz = arith.constant {value = 0.0} : f32
  %nz = arith.constant {value = -0.0} : f32
  %nan = arith.constant {value = nan} : f32
  %s = arith.constant {value = 0.30000001192092896} : f32
  %hh = arith.constant {value = inf} : f16
  %z = arith.constant {value = -0.0} : f32
  %z2 = arith.constant {value = 0.0} : f32
  %d = arith.constant {value = inf} : f32
  %mx = arith.constant {value = 0.10000000149011612} : f32
  %mm = arith.constant {value = nan} : f32
  %mz = arith.constant {value = 0.0} : f32
  %r = arith.constant {value = 0.0} : f32
  %ng = arith.constant {value = -0.0} : f32
  %eq = arith.constant {value = false} : i1
  %ne = arith.constant {value = true} : i1
  %lt = arith.constant {value = true} : i1
  tt.print %s, %hh, %z, %z2, %d, %mx, %mm, %mz, %r, %ng, %eq, %ne, %lt
  tt.return
}
""")


def test_bf16_rounds_to_nearest_even(check):
    # 1 + 2**-8 is halfway between bf16 neighbours 1 and 1 + 2**-7: ties go to the even one (1.0);
    # 1 + 3 * 2**-8 is halfway between 1 + 2**-7 and 1 + 2**-6: ties go to 1 + 2**-6.
    check(constant_fold, """
tt.func @k() {
  %one = arith.constant {value = 1.0} : bf16
  %e1 = arith.constant {value = 0.00390625} : bf16
  %e3 = arith.constant {value = 0.01171875} : bf16
  %a = arith.addf %one, %e1 : bf16
  %b = arith.addf %one, %e3 : bf16
  %f = arith.constant {value = 3.14159} : f32
  %t = arith.truncf %f : bf16
  tt.print %a, %b, %t
  tt.return
}
""", """
tt.func @k() {
  %one = arith.constant {value = 1.0} : bf16
  %e1 = arith.constant {value = 0.00390625} : bf16
  %e3 = arith.constant {value = 0.01171875} : bf16
  %a = arith.constant {value = 1.0} : bf16
  %b = arith.constant {value = 1.015625} : bf16
  %f = arith.constant {value = 3.14159} : f32
  %t = arith.constant {value = 3.140625} : bf16
  tt.print %a, %b, %t
  tt.return
}
""")


def test_casts(check):
    check(constant_fold, """
tt.func @k() {
  %m7 = arith.constant {value = -7} : i32
  %big = arith.constant {value = 16777217} : i32
  %x = arith.constant {value = -2.75} : f32
  %u = arith.constant {value = 200} : u8
  %e = arith.extsi %m7 : i64
  %eu = arith.extui %m7 : i64
  %tr = arith.trunci %m7 : i8
  %f = arith.sitofp %big : f32
  %fu = arith.uitofp %m7 : f32
  %i = arith.fptosi %x : i32
  %ext = arith.extsi %u : i32
  %bits = arith.bitcast %x : i32
  %back = arith.bitcast %bits : f32
  %one = arith.constant {value = 1.0} : f16
  %hb = arith.bitcast %one : i16
  tt.print %e, %eu, %tr, %f, %fu, %i, %ext, %back, %hb
  tt.return
}
""", """
tt.func @k() {
  %m7 = arith.constant {value = -7} : i32
  %big = arith.constant {value = 16777217} : i32
  %x = arith.constant {value = -2.75} : f32
  %u = arith.constant {value = 200} : u8
  %e = arith.constant {value = -7} : i64
  %eu = arith.constant {value = 4294967289} : i64
  %tr = arith.constant {value = -7} : i8
  %f = arith.constant {value = 16777216.0} : f32
  %fu = arith.constant {value = 4294967296.0} : f32
  %i = arith.constant {value = -2} : i32
  %ext = arith.constant {value = -56} : i32
  %bits = arith.constant {value = -1070596096} : i32
  %back = arith.constant {value = -2.75} : f32
  %one = arith.constant {value = 1.0} : f16
  %hb = arith.constant {value = 15360} : i16
  tt.print %e, %eu, %tr, %f, %fu, %i, %ext, %back, %hb
  tt.return
}
""")


def test_out_of_range_float_to_int_not_folded(check):
    text = """
tt.func @k() {
  %x = arith.constant {value = 3e9} : f32
  %nan = arith.constant {value = nan} : f32
  %neg = arith.constant {value = -1.5} : f32
  %a = arith.fptosi %x : i32
  %b = arith.fptosi %nan : i32
  %c = arith.fptoui %neg : u32
  tt.print %a, %b, %c
  tt.return
}
"""
    assert not any(check(constant_fold, text, text.replace("3e9", "3000000000.0")).values())


def test_tensors_splat_and_shape_ops(check):
    check(constant_fold, """
tt.func @k(%x: tensor<4xi32>) {
  %c = arith.constant {value = 3} : i32
  %sp = tt.splat %c : tensor<4xi32>
  %e = tt.expand_dims %sp {axis = 1} : tensor<4x1xi32>
  %b = tt.broadcast %e : tensor<4x8xi32>
  %m = arith.muli %sp, %sp : tensor<4xi32>
  %rng = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %add = arith.addi %m, %rng : tensor<4xi32>
  %y = arith.addi %x, %sp : tensor<4xi32>
  tt.print %b, %add, %y
  tt.return
}
""", """
tt.func @k(%x: tensor<4xi32>) {
  %c = arith.constant {value = 3} : i32
  %sp = arith.constant {value = 3} : tensor<4xi32>
  %e = arith.constant {value = 3} : tensor<4x1xi32>
  %b = arith.constant {value = 3} : tensor<4x8xi32>
  %m = arith.constant {value = 9} : tensor<4xi32>
  %rng = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %add = arith.addi %m, %rng : tensor<4xi32>
  %y = arith.addi %x, %sp : tensor<4xi32>
  tt.print %b, %add, %y
  tt.return
}
""")


def test_transcendentals_and_impure_ops_not_folded(check):
    text = """
tt.func @k(%p: !ptr<f32>) {
  %a = arith.constant {value = 1.0} : f32
  %e = math.exp %a : f32
  %s = math.sin %a : f32
  %pid = tt.get_program_id {axis = 0} : i32
  tt.store %p, %a
  tt.print %e, %s, %pid
  tt.return
}
"""
    assert not any(check(constant_fold, text, text).values())


def test_folds_inside_regions_and_select(check):
    check(constant_fold, """
tt.func @k(%n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %t = arith.constant {value = true} : i1
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %a: i32):
    %two = arith.addi %c1, %c1 : i32
    %sel = arith.select %t, %two, %c0 : i32
    %s = arith.addi %a, %sel : i32
    scf.yield %s
  }
  tt.print %r
  tt.return
}
""", """
tt.func @k(%n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %t = arith.constant {value = true} : i1
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %a: i32):
    %two = arith.constant {value = 2} : i32
    %sel = arith.constant {value = 2} : i32
    %s = arith.addi %a, %sel : i32
    scf.yield %s
  }
  tt.print %r
  tt.return
}
""")


@pytest.mark.parametrize("t,npt", [(float16, np.float16), (float32, np.float32)])
def test_round_float_matches_numpy(t, npt):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal(3000) * 10.0 ** rng.integers(-50, 42, 3000)
    with np.errstate(all="ignore"):
        for x in map(float, xs):
            want = float(npt(x))
            got = round_float(x, t)
            assert got == want and math.copysign(1, got) == math.copysign(1, want), x


def test_int_to_float_is_correctly_rounded():
    assert int_to_float(2**24 + 1, float32) == 2.0**24  # tie to even
    assert int_to_float(2**24 + 3, float32) == 2.0**24 + 4
    assert int_to_float(65519, float16) == 65504.0
    assert int_to_float(65520, float16) == math.inf
    assert int_to_float(2**64 - 1, float64) == 2.0**64
    assert int_to_float(-(2**62 + 2**38 + 1), float32) == -(2.0**62 + 2**39)  # no double rounding
    assert round_float(1e-45, bfloat16) == 0.0 and round_float(-1e-45, bfloat16) == -0.0


def test_float_operands_are_rounded_to_their_type_first(check):
    # 0.1 and 0.10000000149011612 are different doubles but the same f32.
    check(constant_fold, """
tt.func @k() {
  %a = arith.constant {value = 0.1} : f32
  %b = arith.constant {value = 0.10000000149011612} : f32
  %eq = arith.cmpf %a, %b {predicate = "oeq"} : i1
  %d = arith.subf %a, %b : f32
  tt.print %eq, %d
  tt.return
}
""", """
tt.func @k() {
  %a = arith.constant {value = 0.1} : f32
  %b = arith.constant {value = 0.10000000149011612} : f32
  %eq = arith.constant {value = true} : i1
  %d = arith.constant {value = 0.0} : f32
  tt.print %eq, %d
  tt.return
}
""")
