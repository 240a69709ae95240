"""pipeline_loads: IR text in -> pass -> IR text out, plus the interpreter agreeing before and after."""
import numpy as np
import torch

from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import pipeline_loads
from kernellab.compiler.printer import print_module
from kernellab.runtime.interpreter import Interpreter

LOOP = """
tt.func @k(%a: !ptr<f32>, %c: !ptr<f32>, %n: i32) {
  %lb = arith.constant {value = 0} : i32
  %one = arith.constant {value = 1} : i32
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %acc0 = arith.constant {value = 0.0} : tensor<16x16xf32>
  %acc = scf.for %lb, %n, %one, %acc0 {num_stages = 2} : tensor<16x16xf32> {
  ^bb(%i: i32, %x: tensor<16x16xf32>):
    %s = arith.muli %i, %n : i32
    %p0 = tt.addptr %a, %s : !ptr<f32>
    %rr = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
    %rc = tt.expand_dims %r {axis = 0} : tensor<1x16xi32>
    %rb = tt.broadcast %rr : tensor<16x16xi32>
    %cb = tt.broadcast %rc : tensor<16x16xi32>
    %o16 = arith.constant {value = 16} : tensor<16x16xi32>
    %row = arith.muli %rb, %o16 : tensor<16x16xi32>
    %off = arith.addi %row, %cb : tensor<16x16xi32>
    %ps = tt.splat %p0 : tensor<16x16x!ptr<f32>>
    %p = tt.addptr %ps, %off : tensor<16x16x!ptr<f32>>
    %t = tt.load %p : tensor<16x16xf32>
    %d = tt.dot %t, %t, %x {input_precision = "ieee"} : tensor<16x16xf32>
    scf.yield %d
  }
  %cs = tt.splat %c : tensor<16x16x!ptr<f32>>
  %r2 = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %c2 = tt.expand_dims %r {axis = 0} : tensor<1x16xi32>
  %rb2 = tt.broadcast %r2 : tensor<16x16xi32>
  %cb2 = tt.broadcast %c2 : tensor<16x16xi32>
  %k16 = arith.constant {value = 16} : tensor<16x16xi32>
  %row2 = arith.muli %rb2, %k16 : tensor<16x16xi32>
  %off2 = arith.addi %row2, %cb2 : tensor<16x16xi32>
  %pc = tt.addptr %cs, %off2 : tensor<16x16x!ptr<f32>>
  tt.store %pc, %acc
  tt.return
}
"""


def _run(text, n, a):
    c = torch.full((256,), float("nan"))
    Interpreter(parse_module(text), "k").run((1, 1, 1), [a, c, n])
    return c


def test_prefetch_structure():
    m = parse_module(LOOP)
    stats = pipeline_loads.run(m)
    assert stats == {"prefetched_loads": 1}
    text = print_module(m)
    body_start = text.index("scf.for")
    prologue, loop = text[:body_start], text[body_start:]
    assert "tt.load" in prologue and 'predicate = "slt"' in prologue  # first iteration, guarded by lb < ub
    assert loop.count("tt.load") == 1 and "arith.andi" not in prologue
    assert "scf.yield %d, " in loop
    unstaged = parse_module(LOOP.replace(" {num_stages = 2}", ""))
    assert pipeline_loads.run(unstaged) == {"prefetched_loads": 0}  # opt-in per loop  # the prefetched tile is carried to the next iteration
    # the prefetch is masked with i + 1 < n and issued before the dot, so it overlaps the math
    assert loop.index("arith.addi %i, %one") < loop.index("tt.load") < loop.index("tt.dot")


def test_same_results_before_and_after_including_zero_trip():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16 * 16 + 16 * 8, generator=g)
    m = parse_module(LOOP)
    pipeline_loads.run(m)
    after = print_module(m)
    for n in (0, 1, 3, 8):
        before_c, after_c = _run(LOOP, n, a), _run(after, n, a)
        assert torch.equal(torch.nan_to_num(before_c, nan=7.0), torch.nan_to_num(after_c, nan=7.0)), n
    assert not np.isnan(_run(after, 3, a).numpy()).any()


def test_loops_without_dot_or_with_unknown_step_are_left_alone():
    no_dot = LOOP.replace('    %d = tt.dot %t, %t, %x {input_precision = "ieee"} : tensor<16x16xf32>\n',
                          "    %d = arith.addf %t, %x : tensor<16x16xf32>\n")
    m = parse_module(no_dot)
    assert pipeline_loads.run(m) == {"prefetched_loads": 0}
    runtime_step = LOOP.replace("scf.for %lb, %n, %one,", "scf.for %lb, %n, %n,")
    m = parse_module(runtime_step)
    assert pipeline_loads.run(m) == {"prefetched_loads": 0}
