from kernellab.compiler.passes import canonicalize


def test_integer_identities(check):
    check(canonicalize, """
tt.func @k(%x: i32, %y: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %m1 = arith.constant {value = -1} : i32
  %a = arith.addi %x, %c0 : i32
  %b = arith.addi %c0, %y : i32
  %c = arith.muli %a, %c1 : i32
  %d = arith.muli %c1, %b : i32
  %e = arith.muli %x, %c0 : i32
  %f = arith.subi %y, %y : i32
  %g = arith.andi %x, %m1 : i32
  %h = arith.ori %x, %x : i32
  %i = arith.xori %y, %y : i32
  %j = arith.divsi %x, %c1 : i32
  %k = arith.remui %x, %c1 : i32
  %l = arith.shli %x, %c0 : i32
  %m = arith.maxsi %y, %y : i32
  %n = arith.andi %c0, %y : i32
  tt.print %c, %d, %e, %f, %g, %h, %i, %j, %k, %l, %m, %n
  tt.return
}
""", """
tt.func @k(%x: i32, %y: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %m1 = arith.constant {value = -1} : i32
  %e = arith.constant {value = 0} : i32
  %f = arith.constant {value = 0} : i32
  %i = arith.constant {value = 0} : i32
  %k = arith.constant {value = 0} : i32
  %n = arith.constant {value = 0} : i32
  tt.print %x, %y, %e, %f, %x, %x, %i, %x, %k, %x, %y, %n
  tt.return
}
""")


def test_integer_non_identities_stay(check):
    text = """
tt.func @k(%x: i32, %y: i32, %u: u8) {
  %c2 = arith.constant {value = 2} : i32
  %m1 = arith.constant {value = -1} : i32
  %all = arith.constant {value = 255} : u8
  %a = arith.addi %x, %c2 : i32
  %b = arith.subi %x, %y : i32
  %c = arith.divsi %x, %m1 : i32
  %d = arith.andi %u, %all : u8
  %e = arith.muli %x, %y : i32
  tt.print %a, %b, %c, %d, %e
  tt.return
}
"""
    stats = check(canonicalize, text, text.replace("%d = arith.andi %u, %all : u8\n", "")
                  .replace("%c, %d, %e", "%c, %u, %e"))
    assert stats["simplified"] == 1  # only the unsigned all-ones mask


def test_float_rules_respect_ieee(check):
    check(canonicalize, """
tt.func @k(%x: f32) {
  %pz = arith.constant {value = 0.0} : f32
  %nz = arith.constant {value = -0.0} : f32
  %one = arith.constant {value = 1.0} : f32
  %a = arith.addf %x, %pz : f32
  %b = arith.addf %x, %nz : f32
  %c = arith.subf %x, %pz : f32
  %d = arith.subf %x, %nz : f32
  %e = arith.mulf %x, %pz : f32
  %f = arith.mulf %one, %x : f32
  %g = arith.divf %x, %one : f32
  %h = arith.subf %x, %x : f32
  %n1 = arith.negf %x : f32
  %n2 = arith.negf %n1 : f32
  %m = arith.maximumf %x, %x : f32
  tt.print %a, %b, %c, %d, %e, %f, %g, %h, %n2, %m
  tt.return
}
""", """
tt.func @k(%x: f32) {
  %pz = arith.constant {value = 0.0} : f32
  %nz = arith.constant {value = -0.0} : f32
  %one = arith.constant {value = 1.0} : f32
  %a = arith.addf %x, %pz : f32
  %d = arith.subf %x, %nz : f32
  %e = arith.mulf %x, %pz : f32
  %h = arith.subf %x, %x : f32
  %n1 = arith.negf %x : f32
  tt.print %a, %x, %x, %d, %e, %x, %x, %h, %x, %x
  tt.return
}
""")


def test_select_and_cmpi(check):
    check(canonicalize, """
tt.func @k(%c: i1, %x: i32, %y: i32) {
  %t = arith.constant {value = true} : i1
  %f = arith.constant {value = false} : i1
  %a = arith.select %t, %x, %y : i32
  %b = arith.select %f, %x, %y : i32
  %d = arith.select %c, %x, %x : i32
  %e = arith.select %c, %t, %f : i1
  %g = arith.select %c, %x, %y : i32
  %h = arith.cmpi %x, %x {predicate = "sle"} : i1
  %i = arith.cmpi %x, %x {predicate = "ult"} : i1
  %j = arith.cmpi %x, %y {predicate = "eq"} : i1
  tt.print %a, %b, %d, %e, %g, %h, %i, %j
  tt.return
}
""", """
tt.func @k(%c: i1, %x: i32, %y: i32) {
  %t = arith.constant {value = true} : i1
  %f = arith.constant {value = false} : i1
  %g = arith.select %c, %x, %y : i32
  %h = arith.constant {value = true} : i1
  %i = arith.constant {value = false} : i1
  %j = arith.cmpi %x, %y {predicate = "eq"} : i1
  tt.print %x, %y, %x, %c, %g, %h, %i, %j
  tt.return
}
""")


def test_cmpf_of_same_value_is_not_folded(check):
    text = """
tt.func @k(%x: f32) {
  %a = arith.cmpf %x, %x {predicate = "oeq"} : i1
  tt.print %a
  tt.return
}
"""
    assert not any(check(canonicalize, text, text).values())


def test_shapes(check):
    check(canonicalize, """
tt.func @k(%s: f32, %t: tensor<4x8xf32>, %r: tensor<8xf32>) {
  %sp = tt.splat %s : tensor<8xf32>
  %e = tt.expand_dims %sp {axis = 0} : tensor<1x8xf32>
  %b = tt.broadcast %e : tensor<4x8xf32>
  %same = tt.broadcast %t : tensor<4x8xf32>
  %rs = tt.reshape %t : tensor<4x8xf32>
  %id = tt.trans %t {order = [0, 1]} : tensor<4x8xf32>
  %t1 = tt.trans %t {order = [1, 0]} : tensor<8x4xf32>
  %t2 = tt.trans %t1 {order = [1, 0]} : tensor<4x8xf32>
  %r1 = tt.reshape %t : tensor<32xf32>
  %r2 = tt.reshape %r1 : tensor<2x16xf32>
  %re = tt.expand_dims %r {axis = 0} : tensor<1x8xf32>
  %b1 = tt.broadcast %re : tensor<2x8xf32>
  tt.print %b, %same, %rs, %id, %t1, %t2, %r2, %b1
  tt.return
}
""", """
tt.func @k(%s: f32, %t: tensor<4x8xf32>, %r: tensor<8xf32>) {
  %sp = tt.splat %s : tensor<8xf32>
  %e = tt.splat %s : tensor<1x8xf32>
  %b = tt.splat %s : tensor<4x8xf32>
  %t1 = tt.trans %t {order = [1, 0]} : tensor<8x4xf32>
  %r1 = tt.reshape %t : tensor<32xf32>
  %r2 = tt.reshape %t : tensor<2x16xf32>
  %re = tt.expand_dims %r {axis = 0} : tensor<1x8xf32>
  %b1 = tt.broadcast %re : tensor<2x8xf32>
  tt.print %b, %t, %t, %t, %t1, %t, %r2, %b1
  tt.return
}
""")


def test_casts_and_pointers(check):
    check(canonicalize, """
tt.func @k(%p: !ptr<f32>, %ps: tensor<4x!ptr<f32>>, %x: i32, %h: f16) {
  %c0 = arith.constant {value = 0} : i32
  %z4 = arith.constant {value = 0} : tensor<4xi32>
  %q = tt.addptr %p, %c0 : !ptr<f32>
  %qs = tt.addptr %ps, %z4 : tensor<4x!ptr<f32>>
  %e = arith.extsi %x : i64
  %t = arith.trunci %e : i32
  %same = arith.bitcast %x : i32
  %bc1 = arith.bitcast %x : f32
  %bc2 = arith.bitcast %bc1 : i32
  %f1 = arith.extf %h : f32
  %f2 = arith.truncf %f1 : f16
  %e8 = arith.trunci %x : i8
  %e16 = arith.extsi %e8 : i16
  %e64 = arith.extsi %e16 : i64
  %hint = tt.hint %x : i32
  %keep = tt.hint %x {multiple_of = [16]} : i32
  tt.print %q, %qs, %t, %same, %bc2, %f2, %e64, %hint, %keep
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %ps: tensor<4x!ptr<f32>>, %x: i32, %h: f16) {
  %keep = tt.hint %x {multiple_of = [16]} : i32
  %c0 = arith.constant {value = 0} : i32
  %z4 = arith.constant {value = 0} : tensor<4xi32>
  %e = arith.extsi %keep : i64
  %bc1 = arith.bitcast %keep : f32
  %f1 = arith.extf %h : f32
  %e8 = arith.trunci %keep : i8
  %e16 = arith.extsi %e8 : i16
  %e64 = arith.extsi %e8 : i64
  tt.print %p, %ps, %keep, %keep, %keep, %h, %e64, %keep, %keep
  tt.return
}
""")


def test_if_on_constant_condition(check):
    check(canonicalize, """
tt.func @k(%p: !ptr<f32>, %x: f32) {
  %t = arith.constant {value = true} : i1
  %f = arith.constant {value = false} : i1
  %a = scf.if %t : f32 {
    %v = tt.load %p : f32
    %w = arith.mulf %v, %x : f32
    scf.yield %w
  } {
    scf.yield %x
  }
  %b = scf.if %f : f32 {
    %v2 = tt.load %p : f32
    scf.yield %v2
  } {
    scf.yield %x
  }
  scf.if %f {
    tt.store %p, %x
    scf.yield
  } {
    scf.yield
  }
  tt.store %p, %a
  tt.store %p, %b
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %x: f32) {
  %t = arith.constant {value = true} : i1
  %f = arith.constant {value = false} : i1
  %v = tt.load %p : f32
  %w = arith.mulf %v, %x : f32
  tt.store %p, %w
  tt.store %p, %x
  tt.return
}
""")


def test_if_with_same_yield_in_both_arms(check):
    check(canonicalize, """
tt.func @k(%c: i1, %x: f32, %p: !ptr<f32>) {
  %a, %b = scf.if %c : f32, f32 {
    tt.store %p, %x
    %y = arith.negf %x : f32
    scf.yield %x, %y
  } {
    scf.yield %x, %x
  }
  tt.print %a, %b
  tt.return
}
""", """
tt.func @k(%c: i1, %x: f32, %p: !ptr<f32>) {
  %a, %b = scf.if %c : f32, f32 {
    tt.store %p, %x
    %y = arith.negf %x : f32
    scf.yield %x, %y
  } {
    scf.yield %x, %x
  }
  tt.print %x, %b
  tt.return
}
""")


def test_for_passthrough_iter_args(check):
    check(canonicalize, """
tt.func @k(%n: i32, %x: f32, %y: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a, %b = scf.for %c0, %n, %c1, %x, %y : f32, f32 {
  ^bb(%i: i32, %acc: f32, %k: f32):
    %s = arith.addf %acc, %k : f32
    scf.yield %s, %k
  }
  tt.print %a, %b
  tt.return
}
""", """
tt.func @k(%n: i32, %x: f32, %y: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %a = scf.for %c0, %n, %c1, %x : f32 {
  ^bb(%i: i32, %acc: f32):
    %s = arith.addf %acc, %y : f32
    scf.yield %s
  }
  tt.print %a, %y
  tt.return
}
""")


def test_for_with_constant_trip_counts(check):
    check(canonicalize, """
tt.func @k(%p: !ptr<f32>, %x: f32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c4 = arith.constant {value = 4} : i32
  %c8 = arith.constant {value = 8} : i32
  %zero = scf.for %c4, %c0, %c4, %x : f32 {
  ^bb(%i: i32, %acc: f32):
    tt.store %p, %acc
    scf.yield %acc
  }
  %once = scf.for %c0, %c4, %c8, %x : f32 {
  ^bb(%j: i32, %acc2: f32):
    %v = tt.load %p : f32
    %s = arith.addf %acc2, %v : f32
    tt.print %j
    scf.yield %s
  }
  %many = scf.for %c0, %c8, %c4, %x : f32 {
  ^bb(%l: i32, %acc3: f32):
    %s3 = arith.mulf %acc3, %acc3 : f32
    scf.yield %s3
  }
  tt.print %zero, %once, %many
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %x: f32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c4 = arith.constant {value = 4} : i32
  %c8 = arith.constant {value = 8} : i32
  %v = tt.load %p : f32
  %s = arith.addf %x, %v : f32
  tt.print %c0
  %many = scf.for %c0, %c8, %c4, %x : f32 {
  ^bb(%l: i32, %acc3: f32):
    %s3 = arith.mulf %acc3, %acc3 : f32
    scf.yield %s3
  }
  tt.print %x, %s, %many
  tt.return
}
""")


def test_single_trip_check_respects_overflow(check):
    text = """
tt.func @k(%x: i8) {
  %lb = arith.constant {value = 100} : i8
  %ub = arith.constant {value = 127} : i8
  %st = arith.constant {value = 100} : i8
  %r = scf.for %lb, %ub, %st, %x : i8 {
  ^bb(%i: i8, %a: i8):
    %s = arith.addi %a, %i : i8
    scf.yield %s
  }
  tt.print %r
  tt.return
}
"""
    assert not any(check(canonicalize, text, text).values())


def test_impure_and_used_ops_stay(check):
    text = """
tt.func @k(%p: !ptr<f32>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %v = tt.load %p : f32
  %r = scf.for %c0, %n, %c1, %v : f32 {
  ^bb(%i: i32, %a: f32):
    %w = tt.load %p : f32
    %s = arith.addf %a, %w : f32
    scf.yield %s
  }
  tt.store %p, %r
  tt.return
}
"""
    assert not any(check(canonicalize, text, text).values())


def test_reshape_that_only_inserts_unit_dims_becomes_expand_dims(check):
    """`tl.reshape(m, (ROWS, 1))` of a reduction's result means `m[:, None]`: as expand_dims it keeps the
    reduction's layout on the GPU. Reshapes that remove unit dims or regroup elements stay reshapes; a reshape
    of an expand_dims reads the expand_dims' operand."""
    check(canonicalize, """
tt.func @k(%m: tensor<4xf32>, %t: tensor<4x8xf32>, %u: tensor<4x1x8xf32>) {
  %a = tt.reshape %m : tensor<4x1xf32>
  %b = tt.reshape %m : tensor<1x4x1xf32>
  %c = tt.reshape %t : tensor<4x1x8x1xf32>
  %d = tt.reshape %u : tensor<4x8xf32>
  %e = tt.reshape %t : tensor<4x2x4xf32>
  %f = tt.expand_dims %t {axis = 1} : tensor<4x1x8xf32>
  %g = tt.reshape %f : tensor<32xf32>
  %h = tt.reshape %f : tensor<4x8xf32>
  tt.print %a, %b, %c, %d, %e, %g, %h
  tt.return
}
""", """
tt.func @k(%m: tensor<4xf32>, %t: tensor<4x8xf32>, %u: tensor<4x1x8xf32>) {
  %0 = tt.expand_dims %m {axis = 1} : tensor<4x1xf32>
  %1 = tt.expand_dims %m {axis = 0} : tensor<1x4xf32>
  %2 = tt.expand_dims %1 {axis = 2} : tensor<1x4x1xf32>
  %3 = tt.expand_dims %t {axis = 1} : tensor<4x1x8xf32>
  %4 = tt.expand_dims %3 {axis = 3} : tensor<4x1x8x1xf32>
  %d = tt.reshape %u : tensor<4x8xf32>
  %e = tt.reshape %t : tensor<4x2x4xf32>
  %f = tt.expand_dims %t {axis = 1} : tensor<4x1x8xf32>
  %g = tt.reshape %t : tensor<32xf32>
  tt.print %0, %2, %4, %d, %e, %g, %t
  tt.return
}
""")


def test_a_hint_holds_wherever_its_value_is_read(check):
    # Triton's hints annotate the value: a hint made in a branch, its result unused, still makes every read of
    # the value (before it too) read the promise; a second hint on the same value chains after the first
    check(canonicalize, """
tt.func @k(%p: !ptr<f32>, %c: i1) {
  %r = tt.make_range {end = 128, start = 0} : tensor<128xi32>
  %ps = tt.splat %p : tensor<128x!ptr<f32>>
  %a = tt.addptr %ps, %r : tensor<128x!ptr<f32>>
  %v = tt.load %a : tensor<128xf32>
  scf.if %c {
    %h = tt.hint %r {multiple_of = [128]} : tensor<128xi32>
    scf.yield
  }
  %h2 = tt.hint %r {max_contiguous = [128]} : tensor<128xi32>
  %b = tt.addptr %ps, %r : tensor<128x!ptr<f32>>
  tt.store %b, %v
  tt.return
}
""", """
tt.func @k(%p: !ptr<f32>, %c: i1) {
  %r = tt.make_range {end = 128, start = 0} : tensor<128xi32>
  %h = tt.hint %r {multiple_of = [128]} : tensor<128xi32>
  %h2 = tt.hint %h {max_contiguous = [128]} : tensor<128xi32>
  %ps = tt.splat %p : tensor<128x!ptr<f32>>
  %a = tt.addptr %ps, %h2 : tensor<128x!ptr<f32>>
  %v = tt.load %a : tensor<128xf32>
  scf.if %c {
    scf.yield
  }
  %b = tt.addptr %ps, %h2 : tensor<128x!ptr<f32>>
  tt.store %b, %v
  tt.return
}
""")
