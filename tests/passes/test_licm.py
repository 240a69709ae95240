from kernellab.compiler.passes import licm


def test_hoist_invariant_chain(check):
    stats = check(licm, """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %acc: f32):
    %two = arith.constant {value = 2.0} : f32
    %y = arith.mulf %x, %two : f32
    %z = math.exp %y : f32
    %rng = tt.make_range {end = 4, start = 0} : tensor<4xi32>
    %s = arith.addf %acc, %z : f32
    %off = arith.addi %i, %c1 : i32
    scf.yield %s
  }
  tt.store %p, %r
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %two = arith.constant {value = 2.0} : f32
  %y = arith.mulf %x, %two : f32
  %z = math.exp %y : f32
  %rng = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %r = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %acc: f32):
    %s = arith.addf %acc, %z : f32
    %off = arith.addi %i, %c1 : i32
    scf.yield %s
  }
  tt.store %p, %r
  tt.return
}
""")
    assert stats == {"hoisted": 4}


def test_loads_and_stores_stay(check):
    text = """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %acc: f32):
    %v = tt.load %p : f32
    %s = arith.addf %acc, %v : f32
    tt.store %p, %s
    tt.print %x
    scf.yield %s
  }
  tt.return
}
"""
    assert not any(check(licm, text, text).values())


def test_integer_division_not_hoisted(check):
    check(licm, """
tt.func @k(%p: !ptr<i32>, %n: i32, %d: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c4 = arith.constant {value = 4} : i32
  %m1 = arith.constant {value = -1} : i32
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %acc: i32):
    %q = arith.divsi %n, %d : i32
    %rm = arith.remui %n, %d : i32
    %q4 = arith.divsi %n, %c4 : i32
    %qm = arith.divsi %n, %m1 : i32
    %fd = arith.divsi %d, %c0 : i32
    %s = arith.addi %acc, %q : i32
    %s2 = arith.addi %s, %rm : i32
    %s3 = arith.addi %s2, %q4 : i32
    %s4 = arith.addi %s3, %qm : i32
    %s5 = arith.addi %s4, %fd : i32
    scf.yield %s5
  }
  tt.store %p, %r
  tt.return
}
""", """
tt.func @k(%p: !ptr<i32>, %n: i32, %d: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c4 = arith.constant {value = 4} : i32
  %m1 = arith.constant {value = -1} : i32
  %q4 = arith.divsi %n, %c4 : i32
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %acc: i32):
    %q = arith.divsi %n, %d : i32
    %rm = arith.remui %n, %d : i32
    %qm = arith.divsi %n, %m1 : i32
    %fd = arith.divsi %d, %c0 : i32
    %s = arith.addi %acc, %q : i32
    %s2 = arith.addi %s, %rm : i32
    %s3 = arith.addi %s2, %q4 : i32
    %s4 = arith.addi %s3, %qm : i32
    %s5 = arith.addi %s4, %fd : i32
    scf.yield %s5
  }
  tt.store %p, %r
  tt.return
}
""")


def test_nested_loops_hoist_through_both(check):
    check(licm, """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    scf.for %c0, %n, %c1 {
    ^bb(%j: i32):
      %a = arith.mulf %x, %x : f32
      %b = arith.addi %i, %c1 : i32
      %c = arith.addi %b, %j : i32
      %q = tt.addptr %p, %c : !ptr<f32>
      tt.store %q, %a
      scf.yield
    }
    scf.yield
  }
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a = arith.mulf %x, %x : f32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %b = arith.addi %i, %c1 : i32
    scf.for %c0, %n, %c1 {
    ^bb(%j: i32):
      %c = arith.addi %b, %j : i32
      %q = tt.addptr %p, %c : !ptr<f32>
      tt.store %q, %a
      scf.yield
    }
    scf.yield
  }
  tt.return
}
""")


def test_ops_in_if_inside_loop_stay(check):
    text = """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    scf.if %c {
      %a = arith.mulf %x, %x : f32
      tt.store %p, %a
      scf.yield
    } {
      scf.yield
    }
    scf.yield
  }
  tt.return
}
"""
    assert not any(check(licm, text, text).values())


def test_while_body_hoisting(check):
    check(licm, """
tt.func @k(%x: i32, %y: i32) {
  %r = scf.while %x : i32 {
  ^bb(%a: i32):
    %lim = arith.muli %y, %y : i32
    %c = arith.cmpi %a, %lim {predicate = "slt"} : i1
    scf.condition %c, %a
  } {
  ^bb(%b: i32):
    %step = arith.addi %y, %y : i32
    %b1 = arith.addi %b, %step : i32
    scf.yield %b1
  }
  tt.print %r
  tt.return
}
""", """
tt.func @k(%x: i32, %y: i32) {
  %lim = arith.muli %y, %y : i32
  %step = arith.addi %y, %y : i32
  %r = scf.while %x : i32 {
  ^bb(%a: i32):
    %c = arith.cmpi %a, %lim {predicate = "slt"} : i1
    scf.condition %c, %a
  } {
  ^bb(%b: i32):
    %b1 = arith.addi %b, %step : i32
    scf.yield %b1
  }
  tt.print %r
  tt.return
}
""")


def test_reduce_with_region_not_hoisted(check):
    text = """
tt.func @k(%t: tensor<8xf32>, %n: i32, %p: !ptr<f32>) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %s = tt.reduce %t {axis = 0} : f32 {
    ^bb(%a: f32, %b: f32):
      %m = arith.addf %a, %b : f32
      tt.reduce.return %m
    }
    tt.store %p, %s
    scf.yield
  }
  tt.return
}
"""
    assert not any(check(licm, text, text).values())


def test_a_disable_licm_loop_keeps_its_code(check):
    """`tl.range(..., disable_licm=True)` (and `tl.condition(..., disable_licm=True)`): nothing leaves the loop;
    an inner loop without the hint still hoists into it."""
    text = """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = scf.for %c0, %n, %c1, %x {disable_licm = true} : f32 {
  ^bb(%i: i32, %acc: f32):
    %two = arith.constant {value = 2.0} : f32
    %y = arith.mulf %x, %two : f32
    %s = arith.addf %acc, %y : f32
    %t = scf.for %c0, %n, %c1, %s : f32 {
    ^bb(%j: i32, %b: f32):
      %three = arith.constant {value = 3.0} : f32
      %u = arith.addf %b, %three : f32
      scf.yield %u
    }
    scf.yield %t
  }
  tt.store %p, %r
  tt.return
}
"""
    stats = check(licm, text, text.replace("""    %s = arith.addf %acc, %y : f32
    %t = scf.for %c0, %n, %c1, %s : f32 {
    ^bb(%j: i32, %b: f32):
      %three = arith.constant {value = 3.0} : f32
""", """    %s = arith.addf %acc, %y : f32
    %three = arith.constant {value = 3.0} : f32
    %t = scf.for %c0, %n, %c1, %s : f32 {
    ^bb(%j: i32, %b: f32):
"""))
    assert stats == {"hoisted": 1}
