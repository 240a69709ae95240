import pytest

from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import inline
from kernellab.errors import CompilationError


def test_simple_call(check):
    stats = check(inline, """
tt.func @k(%x: i32) {
  %y = tt.call @add1 %x : i32
  tt.print %y
  tt.return
}

tt.func @add1(%a: i32) -> i32 {
  %one = arith.constant {value = 1} : i32
  %s = arith.addi %a, %one : i32
  tt.return %s
}
""", """
tt.func @k(%x: i32) {
  %one = arith.constant {value = 1} : i32
  %y = arith.addi %x, %one : i32
  tt.print %y
  tt.return
}
""")
    assert stats == {"inlined": 1, "functions_removed": 1}


def test_nested_calls_and_multiple_results(check):
    check(inline, """
tt.func @k(%x: f32, %y: f32) {
  %s, %d = tt.call @sumdiff %x, %y : f32, f32
  tt.print %s, %d
  tt.return
}

tt.func @sumdiff(%a: f32, %b: f32) -> f32, f32 {
  %s = tt.call @add %a, %b : f32
  %d = arith.subf %a, %b : f32
  tt.return %s, %d
}

tt.func @add(%a: f32, %b: f32) -> f32 {
  %r = arith.addf %a, %b : f32
  tt.return %r
}
""", """
tt.func @k(%x: f32, %y: f32) {
  %s = arith.addf %x, %y : f32
  %d = arith.subf %x, %y : f32
  tt.print %s, %d
  tt.return
}
""")


def test_call_returning_its_argument(check):
    check(inline, """
tt.func @k(%x: i32) {
  %y = tt.call @id %x : i32
  %z = arith.muli %y, %y : i32
  tt.print %z
  tt.return
}

tt.func @id(%a: i32) -> i32 {
  tt.return %a
}
""", """
tt.func @k(%x: i32) {
  %z = arith.muli %x, %x : i32
  tt.print %z
  tt.return
}
""")


def test_calls_inside_regions(check):
    check(inline, """
tt.func @k(%x: tensor<8xf32>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %m = tt.reduce %x {axis = 0} : f32 {
  ^bb(%a: f32, %b: f32):
    %r = tt.call @mx %a, %b : f32
    tt.reduce.return %r
  }
  %acc = scf.for %c0, %n, %c1, %m : f32 {
  ^bb(%i: i32, %v: f32):
    %w = tt.call @mx %v, %v : f32
    scf.yield %w
  }
  tt.print %acc
  tt.return
}

tt.func @mx(%a: f32, %b: f32) -> f32 {
  %r = arith.maxnumf %a, %b : f32
  tt.return %r
}
""", """
tt.func @k(%x: tensor<8xf32>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %m = tt.reduce %x {axis = 0} : f32 {
  ^bb(%a: f32, %b: f32):
    %r = arith.maxnumf %a, %b : f32
    tt.reduce.return %r
  }
  %acc = scf.for %c0, %n, %c1, %m : f32 {
  ^bb(%i: i32, %v: f32):
    %w = arith.maxnumf %v, %v : f32
    scf.yield %w
  }
  tt.print %acc
  tt.return
}
""")


def test_callee_with_control_flow_is_cloned_per_call(check):
    check(inline, """
tt.func @k(%p: !ptr<f32>, %c: i1) {
  %a = tt.call @pick %p, %c : f32
  %b = tt.call @pick %p, %c : f32
  tt.print %a, %b
  tt.return
}

tt.func @pick(%p: !ptr<f32>, %c: i1) -> f32 {
  %r = scf.if %c : f32 {
    %v = tt.load %p : f32
    scf.yield %v
  } {
    %z = arith.constant {value = 0.0} : f32
    scf.yield %z
  }
  tt.return %r
}
""", """
tt.func @k(%p: !ptr<f32>, %c: i1) {
  %a = scf.if %c : f32 {
    %v = tt.load %p : f32
    scf.yield %v
  } {
    %z = arith.constant {value = 0.0} : f32
    scf.yield %z
  }
  %b = scf.if %c : f32 {
    %v_1 = tt.load %p : f32
    scf.yield %v_1
  } {
    %z_1 = arith.constant {value = 0.0} : f32
    scf.yield %z_1
  }
  tt.print %a, %b
  tt.return
}
""")


def test_no_calls_drops_unused_helpers(check):
    stats = check(inline, """
tt.func @k(%x: i32) {
  tt.print %x
  tt.return
}

tt.func @unused(%a: i32) -> i32 {
  tt.return %a
}
""", """
tt.func @k(%x: i32) {
  tt.print %x
  tt.return
}
""")
    assert stats == {"inlined": 0, "functions_removed": 1}


def test_kernel_alone_is_unchanged(check):
    text = """
tt.func @k(%x: i32) {
  %y = arith.addi %x, %x : i32
  tt.print %y
  tt.return
}
"""
    stats = check(inline, text, text)
    assert not any(stats.values())


def test_recursion_is_an_error():
    m = parse_module("""
tt.func @k(%x: i32) {
  %y = tt.call @f %x : i32
  tt.return
}

tt.func @f(%a: i32) -> i32 {
  %b = tt.call @f %a : i32
  tt.return %b
}
""")
    with pytest.raises(CompilationError, match="recursive"):
        inline.run(m)


def test_unknown_callee_is_an_error():
    m = parse_module("""
tt.func @k(%x: i32) {
  %y = tt.call @nope %x : i32
  tt.return
}
""")
    with pytest.raises(CompilationError, match="unknown function"):
        inline.run(m)
