"""sink_conversions (on by default; KERNELLAB_SINK_CONVERSIONS=0 turns it off): a conversion whose uses all sit in one region of one `scf.if`
(a fused persistent loop's epilogue, taken once a tile) moves into it, before its first reader there; chains follow.
IR in, IR out; what is not taken (a use outside, uses in both regions, a loop)."""
from __future__ import annotations

from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import sink_conversions
from tests.gpu_passes.conftest import normalize, printed, run_gpu_pass

LAYOUTS = """
#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L1 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>
"""

LOOP = LAYOUTS + """
tt.func @k(%off: tensor<64x32xi32, #L0>, %v: tensor<64x32xf32, #L1>, %p: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %o = ttg.convert_layout %off : tensor<64x32xi32, #L1>
    %last = arith.cmpi %i, %n {predicate = "eq"} : i1
    scf.if %last {
      %q = tt.addptr %p, %o : tensor<64x32x!ptr<f32>, #L1>
      tt.store %q, %v
      scf.yield
    } {
      scf.yield
    }
    scf.yield
  }
  tt.return
}
"""

SUNK = LAYOUTS + """
tt.func @k(%off: tensor<64x32xi32, #L0>, %v: tensor<64x32xf32, #L1>, %p: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %last = arith.cmpi %i, %n {predicate = "eq"} : i1
    scf.if %last {
      %o = ttg.convert_layout %off : tensor<64x32xi32, #L1>
      %q = tt.addptr %p, %o : tensor<64x32x!ptr<f32>, #L1>
      tt.store %q, %v
      scf.yield
    } {
      scf.yield
    }
    scf.yield
  }
  tt.return
}
"""


def _same(m, text):
    assert normalize(printed(m)) == normalize(printed(parse_module(text)))


def test_the_epilogue_conversion_moves_into_the_if(monkeypatch):
    monkeypatch.setenv(sink_conversions.KNOB, "1")
    m, stats = run_gpu_pass(sink_conversions, LOOP)
    assert stats == {"sunk": 1}
    _same(m, SUNK)


def test_a_chain_follows(monkeypatch):
    monkeypatch.setenv(sink_conversions.KNOB, "1")
    text = LOOP.replace("    %o = ttg.convert_layout %off : tensor<64x32xi32, #L1>\n",
                        "    %o0 = ttg.convert_layout %off : tensor<64x32xi32, #L1>\n"
                        "    %o = ttg.convert_layout %o0 : tensor<64x32xi32, #L0>\n")
    text = text.replace("%q = tt.addptr %p, %o :", "%o1 = ttg.convert_layout %o : tensor<64x32xi32, #L1>\n"
                        "      %q = tt.addptr %p, %o1 :")
    m, stats = run_gpu_pass(sink_conversions, text)
    assert stats == {"sunk": 2}  # %o, then %o0 (%o1 was in the if already)
    body = printed(m)
    assert body.index("scf.if") < body.index("%o0 = ttg.convert_layout")


def _unchanged(text, monkeypatch, knob="1"):
    monkeypatch.setenv(sink_conversions.KNOB, knob)
    m, stats = run_gpu_pass(sink_conversions, text)
    assert stats == {}
    _same(m, text)


def test_on_by_default_and_off_with_the_knob(monkeypatch):
    monkeypatch.delenv(sink_conversions.KNOB, raising=False)
    m, stats = run_gpu_pass(sink_conversions, LOOP)
    assert stats == {"sunk": 1}
    _unchanged(LOOP, monkeypatch, knob="0")


def test_a_use_outside_the_if_keeps_it(monkeypatch):
    _unchanged(LOOP.replace("    %last = arith.cmpi", "    %w = tt.addptr %p, %o : tensor<64x32x!ptr<f32>, #L1>\n"
                            "    tt.store %w, %v\n    %last = arith.cmpi"), monkeypatch)


def test_uses_in_both_regions_keep_it(monkeypatch):
    _unchanged(LOOP.replace("    } {\n      scf.yield\n    }\n    scf.yield\n  }",
                            "    } {\n      %w = tt.addptr %p, %o : tensor<64x32x!ptr<f32>, #L1>\n"
                            "      tt.store %w, %v\n      scf.yield\n    }\n    scf.yield\n  }"), monkeypatch)


def test_never_into_a_loop(monkeypatch):
    text = LAYOUTS + """
tt.func @k(%off: tensor<64x32xi32, #L0>, %v: tensor<64x32xf32, #L1>, %p: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %o = ttg.convert_layout %off : tensor<64x32xi32, #L1>
  scf.for %c0, %n, %c1 {
  ^bb(%i: i32):
    %q = tt.addptr %p, %o : tensor<64x32x!ptr<f32>, #L1>
    tt.store %q, %v
    scf.yield
  }
  tt.return
}
"""
    _unchanged(text, monkeypatch)
