"""split_loop_offsets: pointers rebuilt from the loop counter become invariant tile + splat(scalar)."""
from kernellab.compiler.passes import dce
from kernellab.compiler.passes import split_loop_offsets as split


def _then_dce():
    """The pass leaves the replaced index ops for DCE; test them together."""

    class Both:
        NAME = split.NAME

        @staticmethod
        def run(module):
            stats = split.run(module)
            dce.run(module)
            return stats

    return Both


REBUILT_1D = """tt.func @k(%pa: !ptr<f16>, %sb: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  scf.for %c0, %n, %c1 {
  ^bb(%k: i32):
    %kk = arith.muli %k, %c16 : i32
    %s = tt.splat %kk : tensor<16xi32>
    %o = arith.addi %s, %rng : tensor<16xi32>
    %sbt = tt.splat %sb : tensor<16xi32>
    %o2 = arith.muli %o, %sbt : tensor<16xi32>
    %p = tt.addptr %base, %o2 : tensor<16x!ptr<f16>>
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    scf.yield
  }
  tt.return
}
"""

SPLIT_1D = """tt.func @k(%pa: !ptr<f16>, %sb: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  scf.for %c0, %n, %c1 {
  ^bb(%k: i32):
    %kk = arith.muli %k, %c16 : i32
    %sbt = tt.splat %sb : tensor<16xi32>
    %0 = arith.muli %rng, %sbt : tensor<16xi32>
    %1 = arith.muli %kk, %sb : i32
    %2 = tt.addptr %base, %0 : tensor<16x!ptr<f16>>
    %3 = tt.splat %1 : tensor<16xi32>
    %4 = tt.addptr %2, %3 : tensor<16x!ptr<f16>>
    %x = tt.load %4 : tensor<16xf16>
    tt.print %x
    scf.yield
  }
  tt.return
}

"""


def test_offsets_from_the_counter_split_into_invariant_tile_and_scalar(check):
    # (splat(k*16) + r) * splat(sb) -> r*sb (invariant, licm hoists it) + splat(k*16*sb)
    assert check(_then_dce(), REBUILT_1D, SPLIT_1D) == {"split": 1}


REBUILT_2D = """tt.func @k(%pa: !ptr<f16>, %sa: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c8 = arith.constant {value = 8} : i32
  %rm = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %rk = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %sat = tt.splat %sa : tensor<4xi32>
  %rows = arith.muli %rm, %sat : tensor<4xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %pbase = tt.splat %pa : tensor<4x1x!ptr<f16>>
  %prow = tt.addptr %pbase, %rows2 : tensor<4x1x!ptr<f16>>
  %prowb = tt.broadcast %prow : tensor<4x8x!ptr<f16>>
  scf.for %c0, %n, %c8 {
  ^bb(%k0: i32):
    %s = tt.splat %k0 : tensor<8xi32>
    %ok = arith.addi %s, %rk : tensor<8xi32>
    %ok2 = tt.expand_dims %ok {axis = 0} : tensor<1x8xi32>
    %okb = tt.broadcast %ok2 : tensor<4x8xi32>
    %p = tt.addptr %prowb, %okb : tensor<4x8x!ptr<f16>>
    %x = tt.load %p : tensor<4x8xf16>
    %q = tt.addptr %p, %okb : tensor<4x8x!ptr<f16>>
    tt.store %q, %x
    scf.yield
  }
  tt.return
}
"""

SPLIT_2D = """tt.func @k(%pa: !ptr<f16>, %sa: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c8 = arith.constant {value = 8} : i32
  %rm = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %rk = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %sat = tt.splat %sa : tensor<4xi32>
  %rows = arith.muli %rm, %sat : tensor<4xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %pbase = tt.splat %pa : tensor<4x1x!ptr<f16>>
  %prow = tt.addptr %pbase, %rows2 : tensor<4x1x!ptr<f16>>
  %prowb = tt.broadcast %prow : tensor<4x8x!ptr<f16>>
  scf.for %c0, %n, %c8 {
  ^bb(%k0: i32):
    %0 = tt.expand_dims %rk {axis = 0} : tensor<1x8xi32>
    %1 = tt.broadcast %0 : tensor<4x8xi32>
    %2 = tt.addptr %prowb, %1 : tensor<4x8x!ptr<f16>>
    %3 = tt.splat %k0 : tensor<4x8xi32>
    %4 = tt.addptr %2, %3 : tensor<4x8x!ptr<f16>>
    %x = tt.load %4 : tensor<4x8xf16>
    %5 = tt.expand_dims %rk {axis = 0} : tensor<1x8xi32>
    %6 = tt.broadcast %5 : tensor<4x8xi32>
    %7 = tt.addptr %prowb, %6 : tensor<4x8x!ptr<f16>>
    %8 = tt.expand_dims %rk {axis = 0} : tensor<1x8xi32>
    %9 = tt.broadcast %8 : tensor<4x8xi32>
    %10 = tt.addptr %7, %9 : tensor<4x8x!ptr<f16>>
    %11 = arith.addi %k0, %k0 : i32
    %12 = tt.splat %11 : tensor<4x8xi32>
    %13 = tt.addptr %10, %12 : tensor<4x8x!ptr<f16>>
    tt.store %13, %x
    scf.yield
  }
  tt.return
}

"""


def test_expand_dims_broadcast_and_pointer_chains(check):
    # a load and a store whose pointer adds the same per-iteration column offset twice
    assert check(_then_dce(), REBUILT_2D, SPLIT_2D) == {"split": 2}


CARRIED = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : tensor<16xi32>
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %p0 = tt.addptr %base, %rng : tensor<16x!ptr<f16>>
  %r = scf.for %c0, %n, %c1, %p0 : tensor<16x!ptr<f16>> {
  ^bb(%k: i32, %p: tensor<16x!ptr<f16>>):
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    %next = tt.addptr %p, %c16 : tensor<16x!ptr<f16>>
    scf.yield %next
  }
  tt.return
}
"""


def test_pointers_carried_by_the_loop_are_left_alone(check):
    assert check(split, CARRIED, CARRIED) == {"split": 0}


ALREADY_SPLIT = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %p0 = tt.addptr %base, %rng : tensor<16x!ptr<f16>>
  scf.for %c0, %n, %c1 {
  ^bb(%k: i32):
    %s = tt.splat %k : tensor<16xi32>
    %p = tt.addptr %p0, %s : tensor<16x!ptr<f16>>
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    scf.yield
  }
  tt.return
}
"""


def test_a_pointer_already_split_is_left_alone(check):
    assert check(split, ALREADY_SPLIT, ALREADY_SPLIT) == {"split": 0}


def test_offsets_of_two_widths_are_left_as_written(check):
    text = REBUILT_1D.replace("%rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>",
                              "%rng32 = tt.make_range {end = 16, start = 0} : tensor<16xi32>\n"
                              "  %rng = arith.extsi %rng32 : tensor<16xi64>")
    text = text.replace("%o = arith.addi %s, %rng : tensor<16xi32>", "%s64 = arith.extsi %s : tensor<16xi64>\n"
                        "    %o = arith.addi %s64, %rng : tensor<16xi64>")
    text = text.replace("%sbt = tt.splat %sb : tensor<16xi32>", "%sbt = tt.splat %sb : tensor<16xi64>")
    text = text.replace("%o2 = arith.muli %o, %sbt : tensor<16xi32>", "%o2 = arith.muli %o, %sbt : tensor<16xi64>")
    text = text.replace("%pa: !ptr<f16>, %sb: i32", "%pa: !ptr<f16>, %sb: i64")
    # the extsi of a per-iteration splat is not split (an extension does not distribute over a wrapping add)
    assert check(split, text, text) == {"split": 0}
