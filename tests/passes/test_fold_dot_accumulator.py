from kernellab.compiler.passes import fold_dot_accumulator as fold

LOOP = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {{
  %c0 = arith.constant {{value = 0}} : i32
  %c1 = arith.constant {{value = 1}} : i32
  %zero = arith.constant {{value = {zero}}} : tensor<16x16x{acc}>
  %init = arith.constant {{value = 1{dot0}}} : tensor<16x16x{acc}>
  %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %r = scf.for %c0, %n, %c1, %init : tensor<16x16x{acc}> {{
  ^bb(%i: i32, %acc: tensor<16x16x{acc}>):
    %a = tt.load %ta : tensor<16x16xf16>
    %d = tt.dot %a, %a, %zero {{input_precision = "ieee"}} : tensor<16x16x{acc}>
    %s = {add} {lhs}, {rhs} : tensor<16x16x{acc}>
    scf.yield %s
  }}
  tt.print %r
  tt.return
}}
"""

FOLDED = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {{
  %c0 = arith.constant {{value = 0}} : i32
  %c1 = arith.constant {{value = 1}} : i32
  %zero = arith.constant {{value = {zero}}} : tensor<16x16x{acc}>
  %init = arith.constant {{value = 1{dot0}}} : tensor<16x16x{acc}>
  %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %r = scf.for %c0, %n, %c1, %init : tensor<16x16x{acc}> {{
  ^bb(%i: i32, %acc: tensor<16x16x{acc}>):
    %a = tt.load %ta : tensor<16x16xf16>
    %s = tt.dot %a, %a, %acc {{input_precision = "ieee"}} : tensor<16x16x{acc}>
    scf.yield %s
  }}
  tt.print %r
  tt.return
}}
"""


def test_acc_plus_dot_becomes_the_accumulator(check):
    for lhs, rhs in (("%acc", "%d"), ("%d", "%acc")):
        kw = dict(zero="0.0", dot0=".0", acc="f32", add="arith.addf", lhs=lhs, rhs=rhs)
        assert check(fold, LOOP.format(**kw), FOLDED.format(**kw)) == {"folded": 1}


def test_integer_dot(check):
    kw = dict(zero="0", dot0="", acc="i32", add="arith.addi", lhs="%acc", rhs="%d")
    assert check(fold, LOOP.format(**kw), FOLDED.format(**kw)) == {"folded": 1}


def test_nonzero_accumulator_is_kept(check):
    text = LOOP.format(zero="2.0", dot0=".0", acc="f32", add="arith.addf", lhs="%acc", rhs="%d")
    assert check(fold, text, text) == {"folded": 0}


def test_dot_with_another_user_is_kept(check):
    text = LOOP.format(zero="0.0", dot0=".0", acc="f32", add="arith.addf", lhs="%acc", rhs="%d")
    text = text.replace("    scf.yield %s", "    tt.print %d\n    scf.yield %s")
    assert check(fold, text, text) == {"folded": 0}


def test_dot_added_to_itself_is_kept(check):
    text = LOOP.format(zero="0.0", dot0=".0", acc="f32", add="arith.addf", lhs="%d", rhs="%d")
    assert check(fold, text, text) == {"folded": 0}
