from kernellab.compiler.passes import dce


def test_unused_pure_chain_removed(check):
    stats = check(dce, """
tt.func @k(%x: i32) {
  %a = arith.addi %x, %x : i32
  %b = arith.muli %a, %a : i32
  %c = arith.subi %b, %x : i32
  %r = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  tt.print %x
  tt.return
}
""", """
tt.func @k(%x: i32) {
  tt.print %x
  tt.return
}
""")
    assert stats["removed"] == 4


def test_side_effects_kept(check):
    text = """
tt.func @k(%p: !ptr<f32>, %v: f32, %c: i1) {
  %a = tt.load %p : f32
  %b = tt.atomic_rmw %p, %v {kind = "fadd"} : f32
  tt.store %p, %v
  tt.assert %c {message = "boom"}
  tt.debug_barrier
  tt.print %v
  tt.return
}
"""
    assert not any(check(dce, text, text).values())


def test_pure_loop_and_if_removed_impure_kept(check):
    check(dce, """
tt.func @k(%p: !ptr<f32>, %n: i32, %c: i1, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %dead = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %a: f32):
    %s = arith.mulf %a, %a : f32
    scf.yield %s
  }
  %live = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%j: i32, %b: f32):
    tt.store %p, %b
    scf.yield %b
  }
  %q = scf.if %c : f32 {
    %e = arith.negf %x : f32
    scf.yield %e
  } {
    scf.yield %x
  }
  scf.if %c {
    tt.store %p, %x
    scf.yield
  } {
    scf.yield
  }
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %n: i32, %c: i1, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %live = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%j: i32, %b: f32):
    tt.store %p, %b
    scf.yield %b
  }
  scf.if %c {
    tt.store %p, %x
    scf.yield
  } {
    scf.yield
  }
  tt.return
}
""")


def test_dead_loop_carried_value_removed(check):
    stats = check(dce, """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %acc, %cnt = scf.for %c0, %n, %c1, %x, %c0 : f32, i32 {
  ^bb(%i: i32, %a: f32, %k: i32):
    %v = tt.load %p : f32
    %s = arith.addf %a, %v : f32
    %k1 = arith.addi %k, %c1 : i32
    %k2 = arith.muli %k1, %k1 : i32
    scf.yield %s, %k2
  }
  tt.store %p, %acc
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %acc = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %a: f32):
    %v = tt.load %p : f32
    %s = arith.addf %a, %v : f32
    scf.yield %s
  }
  tt.store %p, %acc
  tt.return
}
""")
    assert stats["iter_args_removed"] == 1


def test_dead_loop_carried_value_through_an_if_removed(check):
    """A fused loop's tile prologue (flatten_loops) yields the carried value or a new one; once nothing reads it,
    the slot goes from the loop and from the if."""
    stats = check(dce, """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %acc, %cnt = scf.for %c0, %n, %c1, %x, %c0 : f32, i32 {
  ^bb(%i: i32, %a: f32, %k: i32):
    %t, %k0 = scf.if %c : i32, i32 {
      %m = arith.muli %i, %i : i32
      scf.yield %i, %m
    } {
      scf.yield %c0, %k
    }
    %v = tt.load %p : f32
    %s = arith.addf %a, %v : f32
    %k1 = arith.addi %k0, %t : i32
    scf.yield %s, %k1
  }
  tt.store %p, %acc
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %n: i32, %x: f32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %acc = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %a: f32):
    %v = tt.load %p : f32
    %s = arith.addf %a, %v : f32
    scf.yield %s
  }
  tt.store %p, %acc
  tt.return
}
""")
    assert stats["iter_args_removed"] == 1


def test_loop_carried_value_feeding_others_kept(check):
    # %k's result is unused, but %k feeds the stored value, so it must stay.
    text = """
tt.func @k(%p: !ptr<i32>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %acc, %cnt = scf.for %c0, %n, %c1, %c0, %c0 : i32, i32 {
  ^bb(%i: i32, %a: i32, %k: i32):
    %k1 = arith.addi %k, %c1 : i32
    %s = arith.addi %a, %k1 : i32
    scf.yield %s, %k1
  }
  tt.store %p, %acc
  tt.return
}
"""
    assert not any(check(dce, text, text).values())


def test_iter_arg_swapped_into_other_slot_kept(check):
    text = """
tt.func @k(%p: !ptr<i32>, %n: i32, %x: i32, %y: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a, %b = scf.for %c0, %n, %c1, %x, %y : i32, i32 {
  ^bb(%i: i32, %u: i32, %v: i32):
    scf.yield %v, %u
  }
  tt.store %p, %a
  tt.return
}
"""
    assert not any(check(dce, text, text).values())


def test_unused_if_results_dropped(check):
    check(dce, """
tt.func @k(%p: !ptr<f32>, %c: i1, %x: f32) {
  %a, %b = scf.if %c : f32, f32 {
    tt.store %p, %x
    %n = arith.negf %x : f32
    %m = arith.mulf %x, %x : f32
    scf.yield %n, %m
  } {
    %z = arith.constant {value = 0.0} : f32
    scf.yield %x, %z
  }
  tt.store %p, %a
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %c: i1, %x: f32) {
  %a = scf.if %c : f32 {
    tt.store %p, %x
    %n = arith.negf %x : f32
    scf.yield %n
  } {
    scf.yield %x
  }
  tt.store %p, %a
  tt.return
}
""")


def test_while_is_kept(check):
    text = """
tt.func @k(%x: i32) {
  %c10 = arith.constant {value = 10} : i32
  %r = scf.while %x : i32 {
  ^bb(%a: i32):
    %c = arith.cmpi %a, %c10 {predicate = "slt"} : i1
    scf.condition %c, %a
  } {
  ^bb(%b: i32):
    %b1 = arith.addi %b, %b : i32
    scf.yield %b1
  }
  tt.return
}
"""
    assert not any(check(dce, text, text).values())


def test_unused_reduce_removed(check):
    check(dce, """
tt.func @k(%t: tensor<8xf32>) {
  %a = tt.reduce %t {axis = 0} : f32 {
  ^bb(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    tt.reduce.return %s
  }
  tt.return
}
""", """
tt.func @k(%t: tensor<8xf32>) {
  tt.return
}
""")
