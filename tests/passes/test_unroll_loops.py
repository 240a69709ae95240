"""unroll_loops: a loop with loop_unroll_factor=k becomes k body copies per iteration plus a remainder loop."""
from __future__ import annotations

from kernellab.compiler.passes import unroll_loops

RUNTIME_BOUNDS = """
tt.func @k(%p: !ptr<f32>, %lb: i32, %ub: i32, %x: f32) {
  %c2 = arith.constant {value = 2} : i32
  %r = scf.for %lb, %ub, %c2, %x {loop_unroll_factor = 3, num_stages = 2} : f32 {
  ^bb(%i: i32, %acc: f32):
    %f = arith.sitofp %i : f32
    %s = arith.addf %acc, %f : f32
    scf.yield %s
  }
  tt.store %p, %r
  tt.return
}
"""


def test_runtime_bounds_get_a_main_loop_and_a_remainder_loop(check):
    """Iterations in whole groups of 3 (step 6) run in the first loop, which keeps num_stages, the carried value
    threaded through the copies; the rest in the original loop from where the first stopped."""
    stats = check(unroll_loops, RUNTIME_BOUNDS, """
tt.func @k(%p: !ptr<f32>, %lb: i32, %ub: i32, %x: f32) {
  %c2 = arith.constant {value = 2} : i32
  %0 = arith.subi %ub, %lb : i32
  %1 = arith.constant {value = 0} : i32
  %2 = arith.maxsi %0, %1 : i32
  %3 = arith.constant {value = 6} : i32
  %4 = arith.divsi %2, %3 : i32
  %5 = arith.constant {value = 6} : i32
  %6 = arith.muli %4, %5 : i32
  %7 = arith.addi %lb, %6 : i32
  %8 = arith.constant {value = 2} : i32
  %9 = arith.constant {value = 4} : i32
  %10 = arith.constant {value = 6} : i32
  %r = scf.for %lb, %7, %10, %x {num_stages = 2} : f32 {
  ^bb(%i: i32, %acc: f32):
    %f = arith.sitofp %i : f32
    %s = arith.addf %acc, %f : f32
    %i_1 = arith.addi %i, %8 : i32
    %f_1 = arith.sitofp %i_1 : f32
    %s_1 = arith.addf %s, %f_1 : f32
    %i_2 = arith.addi %i, %9 : i32
    %f_2 = arith.sitofp %i_2 : f32
    %s_2 = arith.addf %s_1, %f_2 : f32
    scf.yield %s_2
  }
  %r_1 = scf.for %7, %ub, %c2, %r : f32 {
  ^bb(%i_3: i32, %acc_1: f32):
    %f_3 = arith.sitofp %i_3 : f32
    %s_3 = arith.addf %acc_1, %f_3 : f32
    scf.yield %s_3
  }
  tt.store %p, %r_1
  tt.return
}
""")
    assert stats == {"unrolled": 1, "kept": 0}


def test_constant_bounds_divisible_by_k_leave_no_remainder_loop(check):
    text = RUNTIME_BOUNDS.replace("%lb: i32, %ub: i32, ", "").replace(
        "  %c2 = arith.constant {value = 2} : i32\n",
        "  %c2 = arith.constant {value = 2} : i32\n  %lb = arith.constant {value = 1} : i32\n"
        "  %ub = arith.constant {value = 13} : i32\n")
    m = __import__("kernellab.compiler.parser", fromlist=["parse_module"]).parse_module(text)
    stats = unroll_loops.run(m)
    loops = [op for op in m.kernel.walk() if op.name == "scf.for"]
    assert stats == {"unrolled": 1, "kept": 0} and len(loops) == 1  # 6 iterations: 2 groups of 3
    assert [op.name for op in loops[0].regions[0].ops].count("arith.addf") == 3


def test_a_step_not_known_positive_keeps_the_loop(check):
    text = RUNTIME_BOUNDS.replace("%x: f32) {", "%x: f32, %st: i32) {").replace("%lb, %ub, %c2, %x", "%lb, %ub, %st, %x")
    stats = check(unroll_loops, text, text.replace("{loop_unroll_factor = 3, num_stages = 2}", "{num_stages = 2}"))
    assert stats == {"unrolled": 0, "kept": 1}
