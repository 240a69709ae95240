"""issue_loads_early: a straight-line load (with its address math) moves above an earlier shared-memory round
trip it does not depend on, never above a store, an atomic, a barrier, a loop or a branch, and never inside
loops; large per-thread loads stay."""
from __future__ import annotations

from kernellab.compiler.passes import issue_loads_early

LAYOUTS = """
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #blocked<[2], [32], [4], [0]>
"""

BODY = """
tt.func @k(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L0>
  %0 = tt.splat %x_ptr : tensor<256x!ptr<f32>, #L0>
  %1 = tt.addptr %0, %r : tensor<256x!ptr<f32>, #L0>
  %x = tt.load %1 : tensor<256xf32, #L0>
  %xc = ttg.convert_layout %x : tensor<256xf32, #L1>
  %r1 = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L1>
  %4 = tt.splat %z_ptr : tensor<256x!ptr<f32>, #L1>
  %5 = tt.addptr %4, %r1 : tensor<256x!ptr<f32>, #L1>
  BARRIER
  %2 = tt.splat %y_ptr : tensor<256x!ptr<f32>, #L1>
  %3 = tt.addptr %2, %r1 : tensor<256x!ptr<f32>, #L1>
  %y = tt.load %3 : tensor<256xf32, #L1>
  %s = arith.addf %xc, %y : tensor<256xf32, #L1>
  tt.store %5, %s
  tt.return
}
"""


def test_a_load_and_its_addresses_move_above_a_conversion(check):
    _, stats = check(issue_loads_early, LAYOUTS + BODY.replace("  BARRIER\n", ""), LAYOUTS + """
tt.func @k(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L0>
  %0 = tt.splat %x_ptr : tensor<256x!ptr<f32>, #L0>
  %1 = tt.addptr %0, %r : tensor<256x!ptr<f32>, #L0>
  %x = tt.load %1 : tensor<256xf32, #L0>
  %r1 = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L1>
  %2 = tt.splat %y_ptr : tensor<256x!ptr<f32>, #L1>
  %3 = tt.addptr %2, %r1 : tensor<256x!ptr<f32>, #L1>
  %y = tt.load %3 : tensor<256xf32, #L1>
  %xc = ttg.convert_layout %x : tensor<256xf32, #L1>
  %4 = tt.splat %z_ptr : tensor<256x!ptr<f32>, #L1>
  %5 = tt.addptr %4, %r1 : tensor<256x!ptr<f32>, #L1>
  %s = arith.addf %xc, %y : tensor<256xf32, #L1>
  tt.store %5, %s
  tt.return
}
""")
    assert stats == {"loads_moved": 1}


def test_a_store_or_barrier_in_between_stops_it(run_pass):
    for between in ("tt.store %5, %xc", "tt.debug_barrier"):
        text = LAYOUTS + BODY.replace("BARRIER", between)
        m, stats = run_pass(issue_loads_early, text)
        assert stats == {}
        names = [op.name for op in m.kernel.body.ops]
        assert names.index("ttg.convert_layout") < names.index("tt.load", names.index("ttg.convert_layout"))


def test_a_load_that_needs_the_conversion_stays(run_pass):
    text = LAYOUTS + BODY.replace("  BARRIER\n", "").replace(
        "%3 = tt.addptr %2, %r1 : tensor<256x!ptr<f32>, #L1>",
        "%xi = arith.fptosi %xc : tensor<256xi32, #L1>\n  %3 = tt.addptr %2, %xi : tensor<256x!ptr<f32>, #L1>")
    _, stats = run_pass(issue_loads_early, text)
    assert stats == {}


def test_large_loads_and_loop_bodies_stay(run_pass):
    big = LAYOUTS + BODY.replace("  BARRIER\n", "").replace("256", "8192")  # 64 elements a thread
    _, stats = run_pass(issue_loads_early, big)
    assert stats == {}
    body = BODY.replace("  BARRIER\n", "").split("{\n", 1)[1].rsplit("  tt.return", 1)[0]
    looped = LAYOUTS + BODY.split("{\n", 1)[0] + """{
  %lo = arith.constant {value = 0} : i32
  %hi = arith.constant {value = 4} : i32
  %st = arith.constant {value = 1} : i32
  scf.for %lo, %hi, %st {
  ^bb(%i: i32):
""" + body.replace("\n  ", "\n    ") + """    scf.yield
  }
  tt.return
}
"""
    m, stats = run_pass(issue_loads_early, looped)
    assert stats == {}
    (loop,) = [op for op in m.kernel.body.ops if op.name == "scf.for"]
    assert [op.name for op in loop.regions[0].ops].count("tt.load") == 2  # the same body, in the loop


def test_address_math_above_the_conversion_stays_for_its_other_users(run_pass):
    """The load's address offset is computed before the conversion and read by another op before it too: only what
    lies below the conversion moves (moving the offset down past its reader broke the IR: fla's chunk kernels at
    1-2 warps)."""
    text = LAYOUTS + BODY.replace("  BARRIER\n", "").replace(
        "  %xc = ttg.convert_layout %x : tensor<256xf32, #L1>\n  %r1 = tt.make_range {end = 256, start = 0} : "
        "tensor<256xi32, #L1>\n",
        "  %r1 = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L1>\n"
        "  %rf = arith.sitofp %r1 : tensor<256xf32, #L1>\n"
        "  %xc = ttg.convert_layout %x : tensor<256xf32, #L1>\n").replace(
        "%s = arith.addf %xc, %y", "%s0 = arith.addf %xc, %y : tensor<256xf32, #L1>\n  %s = arith.addf %s0, %rf")
    m, stats = run_pass(issue_loads_early, text)  # run_pass verifies the IR
    assert stats == {"loads_moved": 1}
    names = [op.name for op in m.kernel.body.ops]
    assert names.index("tt.make_range", 1) < names.index("ttg.convert_layout")


# KERNELLAB_LOADS_PAST_DIVISION=1: a load whose addresses hold a 64-bit division by a runtime value goes, with that
# math, above the earlier load and its consumers (LLVM's NVPTX lowering branches around the division; the earlier
# load's unpacking must not sit before the branch), in loop bodies too

DIV_LAYOUTS = """
#L0 = #blocked<[8], [32], [4], [0]>
"""

DIV_HEAD = """
tt.func @k(%x_ptr: !ptr<bf16> {tt.divisibility = 16}, %b_ptr: !ptr<bf16> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i64, %lo: i32, %hi: i32, %st: i32) {
  %r = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %r64 = arith.extsi %r : tensor<1024xi64, #L0>
  %ns = tt.splat %n : tensor<1024xi64, #L0>
  %xs = tt.splat %x_ptr : tensor<1024x!ptr<bf16>, #L0>
  %bs = tt.splat %b_ptr : tensor<1024x!ptr<bf16>, #L0>
  %ys = tt.splat %y_ptr : tensor<1024x!ptr<f32>, #L0>
  scf.for %lo, %hi, %st {
  ^bb(%i: i32):
    %i64 = arith.extsi %i : i64
    %is = tt.splat %i64 : tensor<1024xi64, #L0>
    %offs = arith.addi %is, %r64 : tensor<1024xi64, #L0>
"""

DIV_IN = DIV_LAYOUTS + DIV_HEAD + """    %xp = tt.addptr %xs, %offs : tensor<1024x!ptr<bf16>, #L0>
    %x = tt.load %xp : tensor<1024xbf16, #L0>
    %xf = arith.extf %x : tensor<1024xf32, #L0>
    %col = DIVISION %offs, %ns : tensor<1024xi64, #L0>
    %bp = tt.addptr %bs, %col : tensor<1024x!ptr<bf16>, #L0>
    %b = tt.load %bp : tensor<1024xbf16, #L0>
    %bf = arith.extf %b : tensor<1024xf32, #L0>
    %s = arith.addf %xf, %bf : tensor<1024xf32, #L0>
    %yp = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>, #L0>
    tt.store %yp, %s
    scf.yield
  }
  tt.return
}
"""


def test_past_division_moves_the_load_above_the_earlier_load_in_a_loop(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_LOADS_PAST_DIVISION", "1")
    _, stats = check(issue_loads_early, DIV_IN.replace("DIVISION", "arith.remsi"), DIV_LAYOUTS + DIV_HEAD + """\
    %col = arith.remsi %offs, %ns : tensor<1024xi64, #L0>
    %bp = tt.addptr %bs, %col : tensor<1024x!ptr<bf16>, #L0>
    %b = tt.load %bp : tensor<1024xbf16, #L0>
    %xp = tt.addptr %xs, %offs : tensor<1024x!ptr<bf16>, #L0>
    %x = tt.load %xp : tensor<1024xbf16, #L0>
    %xf = arith.extf %x : tensor<1024xf32, #L0>
    %bf = arith.extf %b : tensor<1024xf32, #L0>
    %s = arith.addf %xf, %bf : tensor<1024xf32, #L0>
    %yp = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>, #L0>
    tt.store %yp, %s
    scf.yield
  }
  tt.return
}
""")
    assert stats == {"loads_past_division": 1}


def test_past_division_off_by_default_and_only_for_runtime_64_bit_divisions(run_pass, monkeypatch):
    text = DIV_IN.replace("DIVISION", "arith.divsi")
    monkeypatch.delenv("KERNELLAB_LOADS_PAST_DIVISION", raising=False)
    assert run_pass(issue_loads_early, text)[1] == {}
    monkeypatch.setenv("KERNELLAB_LOADS_PAST_DIVISION", "1")
    assert run_pass(issue_loads_early, text)[1] == {"loads_past_division": 1}
    # a constant divisor (LLVM multiplies by its inverse: no branch) and a 32-bit one (no bypass) leave it
    const = text.replace("%ns = tt.splat %n : tensor<1024xi64, #L0>",
                         "%ns = arith.constant {value = 4096} : tensor<1024xi64, #L0>")
    assert run_pass(issue_loads_early, const)[1] == {}
    narrow = (DIV_LAYOUTS + DIV_HEAD.replace("%n: i64", "%n: i32").replace("tensor<1024xi64, #L0>\n  %xs",
                                                                             "tensor<1024xi32, #L0>\n  %xs") + """\
    %xp = tt.addptr %xs, %r : tensor<1024x!ptr<bf16>, #L0>
    %x = tt.load %xp : tensor<1024xbf16, #L0>
    %xf = arith.extf %x : tensor<1024xf32, #L0>
    %col = arith.remsi %r, %ns : tensor<1024xi32, #L0>
    %bp = tt.addptr %bs, %col : tensor<1024x!ptr<bf16>, #L0>
    %b = tt.load %bp : tensor<1024xbf16, #L0>
    %bf = arith.extf %b : tensor<1024xf32, #L0>
    %s = arith.addf %xf, %bf : tensor<1024xf32, #L0>
    %yp = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>, #L0>
    tt.store %yp, %s
    scf.yield
  }
  tt.return
}
""")
    assert run_pass(issue_loads_early, narrow)[1] == {}


def test_past_division_never_passes_a_store(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_LOADS_PAST_DIVISION", "1")
    text = DIV_IN.replace("DIVISION", "arith.remsi").replace(
        "    %xf = arith.extf %x : tensor<1024xf32, #L0>\n",
        "    %xf = arith.extf %x : tensor<1024xf32, #L0>\n    %yp0 = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>, "
        "#L0>\n    tt.store %yp0, %xf\n")
    m, stats = run_pass(issue_loads_early, text)
    assert stats == {}
