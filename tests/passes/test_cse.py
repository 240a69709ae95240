from kernellab.compiler.passes import cse


def test_merge_in_one_block(check):
    stats = check(cse, """
tt.func @k(%x: i32, %y: i32) {
  %a = arith.addi %x, %y : i32
  %b = arith.addi %x, %y : i32
  %c = arith.muli %a, %b : i32
  %d = arith.muli %a, %a : i32
  tt.print %c, %d
  tt.return
}
""", """
tt.func @k(%x: i32, %y: i32) {
  %a = arith.addi %x, %y : i32
  %c = arith.muli %a, %a : i32
  tt.print %c, %c
  tt.return
}
""")
    assert stats == {"merged": 2}


def test_commutative_operands_swapped(check):
    check(cse, """
tt.func @k(%x: f32, %y: f32) {
  %a = arith.mulf %x, %y : f32
  %b = arith.mulf %y, %x : f32
  %c = arith.subf %x, %y : f32
  %d = arith.subf %y, %x : f32
  tt.print %a, %b, %c, %d
  tt.return
}
""", """
tt.func @k(%x: f32, %y: f32) {
  %a = arith.mulf %x, %y : f32
  %c = arith.subf %x, %y : f32
  %d = arith.subf %y, %x : f32
  tt.print %a, %a, %c, %d
  tt.return
}
""")


def test_attributes_and_types_must_match(check):
    text = """
tt.func @k(%x: i32, %t: tensor<4x8xf32>) {
  %a = arith.constant {value = 0} : i32
  %b = arith.constant {value = 0} : i64
  %c = arith.constant {value = 0.0} : f32
  %d = arith.constant {value = -0.0} : f32
  %e = arith.cmpi %x, %a {predicate = "slt"} : i1
  %f = arith.cmpi %x, %a {predicate = "sle"} : i1
  %p0 = tt.get_program_id {axis = 0} : i32
  %p1 = tt.get_program_id {axis = 1} : i32
  %t1 = tt.trans %t {order = [1, 0]} : tensor<8x4xf32>
  %r1 = tt.reshape %t : tensor<32xf32>
  %r2 = tt.reshape %t : tensor<2x16xf32>
  tt.print %a, %b, %c, %d, %e, %f, %p0, %p1, %t1, %r1, %r2
  tt.return
}
"""
    assert not any(check(cse, text, text).values())


def test_impure_ops_not_merged(check):
    text = """
tt.func @k(%p: !ptr<f32>, %v: f32) {
  %a = tt.load %p : f32
  tt.store %p, %v
  %b = tt.load %p : f32
  %c = tt.atomic_rmw %p, %v {kind = "fadd"} : f32
  %d = tt.atomic_rmw %p, %v {kind = "fadd"} : f32
  tt.print %a, %b, %c, %d
  tt.return
}
"""
    assert not any(check(cse, text, text).values())


def test_outer_value_reused_in_nested_regions(check):
    check(cse, """
tt.func @k(%x: i32, %n: i32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a = arith.muli %x, %x : i32
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %acc: i32):
    %one = arith.constant {value = 1} : i32
    %b = arith.muli %x, %x : i32
    %s = arith.addi %acc, %b : i32
    %s2 = arith.addi %s, %one : i32
    scf.yield %s2
  }
  %q = scf.if %c : i32 {
    %e = arith.muli %x, %x : i32
    scf.yield %e
  } {
    scf.yield %a
  }
  tt.print %r, %q
  tt.return
}
""", """
tt.func @k(%x: i32, %n: i32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a = arith.muli %x, %x : i32
  %r = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%i: i32, %acc: i32):
    %s = arith.addi %acc, %a : i32
    %s2 = arith.addi %s, %c1 : i32
    scf.yield %s2
  }
  %q = scf.if %c : i32 {
    scf.yield %a
  } {
    scf.yield %a
  }
  tt.print %r, %q
  tt.return
}
""")


def test_sibling_regions_and_later_outer_ops_not_merged_with_inner(check):
    check(cse, """
tt.func @k(%x: i32, %c: i1) {
  %q = scf.if %c : i32 {
    %a = arith.muli %x, %x : i32
    scf.yield %a
  } {
    %b = arith.muli %x, %x : i32
    scf.yield %b
  }
  %d = arith.muli %x, %x : i32
  %e = arith.muli %x, %x : i32
  tt.print %q, %d, %e
  tt.return
}
""", """
tt.func @k(%x: i32, %c: i1) {
  %q = scf.if %c : i32 {
    %a = arith.muli %x, %x : i32
    scf.yield %a
  } {
    %b = arith.muli %x, %x : i32
    scf.yield %b
  }
  %d = arith.muli %x, %x : i32
  tt.print %q, %d, %d
  tt.return
}
""")


def test_ops_with_regions_not_merged(check):
    text = """
tt.func @k(%t: tensor<8xf32>) {
  %a = tt.reduce %t {axis = 0} : f32 {
  ^bb(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    tt.reduce.return %s
  }
  %b = tt.reduce %t {axis = 0} : f32 {
  ^bb(%x_1: f32, %y_1: f32):
    %s_1 = arith.addf %x_1, %y_1 : f32
    tt.reduce.return %s_1
  }
  tt.print %a, %b
  tt.return
}
"""
    assert not any(check(cse, text, text).values())


def test_chains_merge_transitively(check):
    check(cse, """
tt.func @k(%p: !ptr<f32>) {
  %r = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %sp = tt.splat %p : tensor<4x!ptr<f32>>
  %ptrs = tt.addptr %sp, %r : tensor<4x!ptr<f32>>
  %r2 = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %sp2 = tt.splat %p : tensor<4x!ptr<f32>>
  %ptrs2 = tt.addptr %sp2, %r2 : tensor<4x!ptr<f32>>
  %v = tt.load %ptrs : tensor<4xf32>
  tt.store %ptrs2, %v
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>) {
  %r = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %sp = tt.splat %p : tensor<4x!ptr<f32>>
  %ptrs = tt.addptr %sp, %r : tensor<4x!ptr<f32>>
  %v = tt.load %ptrs : tensor<4xf32>
  tt.store %ptrs, %v
  tt.return
}
""")


def test_reduce_combine_region_is_isolated(check):
    check(cse, """
tt.func @k(%t: tensor<8xf32>) {
  %one = arith.constant {value = 1.0} : f32
  %a = tt.reduce %t {axis = 0} : f32 {
  ^bb(%x: f32, %y: f32):
    %c = arith.constant {value = 1.0} : f32
    %c2 = arith.constant {value = 1.0} : f32
    %s = arith.addf %x, %y : f32
    %s1 = arith.mulf %s, %c : f32
    %s2 = arith.mulf %s1, %c2 : f32
    tt.reduce.return %s2
  }
  tt.print %a, %one
  tt.return
}
""", """
tt.func @k(%t: tensor<8xf32>) {
  %one = arith.constant {value = 1.0} : f32
  %a = tt.reduce %t {axis = 0} : f32 {
  ^bb(%x: f32, %y: f32):
    %c = arith.constant {value = 1.0} : f32
    %s = arith.addf %x, %y : f32
    %s1 = arith.mulf %s, %c : f32
    %s2 = arith.mulf %s1, %c : f32
    tt.reduce.return %s2
  }
  tt.print %a, %one
  tt.return
}
""")
