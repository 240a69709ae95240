"""remove_layout_conversions with KERNELLAB_LONG_REMAT=1: a conversion is rebuilt from chains of up to 160 values
(48 without), so a small load's math (at most one element a thread) is recomputed in the wanted layout with the load
issued again there (the selective scan's softplus'd `dt`). Either way a reload's mask is built right before it, not
taken from what the chain built at the conversion (later), which does not dominate it (the verifier refused that IR:
a load whose mask the chain also reads after it)."""
from __future__ import annotations

from kernellab.compiler.passes import remove_layout_conversions


def _chain(n: int) -> str:
    out, prev = [], "%v"
    for i in range(n):
        out.append(f"  %a{i} = arith.addf {prev}, %one : tensor<64xf32, #L0>")
        prev = f"%a{i}"
    return "\n".join(out)


def _kernel(n: int) -> str:
    return f"""
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #slice<1, #blocked<[1, 8], [16, 2], [4, 1], [1, 0]>>
tt.func @k(%x: !ptr<f32> {{tt.divisibility = 16}}, %y: !ptr<f32> {{tt.divisibility = 16}}, %n: i32) {{
  %r = tt.make_range {{end = 64, start = 0}} : tensor<64xi32, #L0>
  %nn = tt.splat %n : tensor<64xi32, #L0>
  %m = arith.cmpi %r, %nn {{predicate = "slt"}} : tensor<64xi1, #L0>
  %p0 = tt.splat %x : tensor<64x!ptr<f32>, #L0>
  %p = tt.addptr %p0, %r : tensor<64x!ptr<f32>, #L0>
  %z = arith.constant {{value = 0.0}} : tensor<64xf32, #L0>
  %one = arith.constant {{value = 1.0}} : tensor<64xf32, #L0>
  %v = tt.load %p, %m, %z : tensor<64xf32, #L0>
{_chain(n)}
  %s = arith.select %m, %a{n - 1}, %z : tensor<64xf32, #L0>
  %c = ttg.convert_layout %s : tensor<64xf32, #L1>
  %q0 = tt.splat %y : tensor<64x!ptr<f32>, #L1>
  %r1 = tt.make_range {{end = 64, start = 0}} : tensor<64xi32, #L1>
  %q = tt.addptr %q0, %r1 : tensor<64x!ptr<f32>, #L1>
  tt.store %q, %c
  tt.return
}}
"""


def _names(m):
    return [op.name for op in m.kernel.body.ops]


def test_a_long_chain_keeps_its_conversion_by_default(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_LONG_REMAT", "0")
    m, stats = run_pass(remove_layout_conversions, _kernel(50))
    assert stats["remaining"] == 1 and "ttg.convert_layout" in _names(m)


def test_a_short_chain_is_rebuilt_either_way(run_pass, monkeypatch):
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_LONG_REMAT", knob)
        m, stats = run_pass(remove_layout_conversions, _kernel(5))
        assert stats["remaining"] == 0


def test_a_long_chain_is_rebuilt_with_the_load_issued_again(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_LONG_REMAT", "1")
    m, stats = run_pass(remove_layout_conversions, _kernel(50))  # the verifier checks dominance
    assert stats["remaining"] == 0 and "ttg.convert_layout" not in _names(m)
    ops = m.kernel.body.ops
    (ld,) = [op for op in ops if op.name == "tt.load"]
    assert str(ld.result.type.layout).startswith("#slice<1")  # issued in the wanted layout
    # its mask is a comparison built ahead of it; the select after the chain reads one in the same layout
    mask = ld.operands[1].defining_op
    assert mask.name == "arith.cmpi" and ops.index(mask) < ops.index(ld)
    adds = [op for op in ops if op.name == "arith.addf"]
    assert len(adds) == 50 and all(str(a.result.type.layout).startswith("#slice<1") for a in adds)
    (sel,) = [op for op in ops if op.name == "arith.select"]
    assert ops.index(sel.operands[0].defining_op) < ops.index(sel)


TWO_READERS = """
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #slice<1, #blocked<[1, 8], [16, 2], [4, 1], [1, 0]>>
tt.func @k(%x: !ptr<f32> {tt.divisibility = 16}, %y: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L0>
  %p0 = tt.splat %x : tensor<64x!ptr<f32>, #L0>
  %p = tt.addptr %p0, %r : tensor<64x!ptr<f32>, #L0>
  %v = tt.load %p : tensor<64xf32, #L0>
  %two = arith.constant {value = 2.0} : tensor<64xf32, #L0>
  %w = arith.mulf %v, %two : tensor<64xf32, #L0>
  %c1 = ttg.convert_layout %v : tensor<64xf32, #L1>
  %c2 = ttg.convert_layout %w : tensor<64xf32, #L1>
  %s = arith.addf %c1, %c2 : tensor<64xf32, #L1>
  %q0 = tt.splat %y : tensor<64x!ptr<f32>, #L1>
  %r1 = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %q = tt.addptr %q0, %r1 : tensor<64x!ptr<f32>, #L1>
  tt.store %q, %s
  tt.return
}
"""


def test_two_conversions_of_one_small_load_issue_it_once(run_pass, monkeypatch):
    for knob, loads in (("0", 2), ("1", 1)):
        monkeypatch.setenv("KERNELLAB_LONG_REMAT", knob)
        m, stats = run_pass(remove_layout_conversions, TWO_READERS)
        assert stats["remaining"] == 0
        got = [op for op in m.kernel.body.ops if op.name == "tt.load"]
        assert len(got) == loads and all(str(ld.result.type.layout).startswith("#slice<1") for ld in got)
