"""pipeline_dot_operands for torchao's int8 matmul: the K loop counts down (`range(K, 0, -BLOCK_K)`) and the dot is
an mma.sync m16n8k32.s8. The int8 tiles go to stages with rows padded by 16 bytes, in their global order (A K-contiguous
for ldmatrix; an N-contiguous B is read byte by byte by the dot), and the copies ahead are predicated on `iv > ub`.
Before, neither the negative step nor int8 on mma.sync was pipelined: every iteration waited for its global loads."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import pipeline_dot_operands
from kernellab.compiler.printer import print_module

LOOP = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
tt.func @k(%a_ptrs: tensor<32x32x!ptr<i8>, #L0>, %b_ptrs: tensor<32x32x!ptr<i8>, #L0>, %c_ptrs: tensor<32x32x!ptr<i32>, #L1>, %K: i32) {
  %c0 = arith.constant {value = 0} : i32
  %step = arith.constant {value = STEP} : i32
  %astep = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %bstep = arith.constant {value = 1024} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0} : tensor<32x32xi32, #L1>
  %acc, %pa, %pb = scf.for LB, UB, %step, %zero, %a_ptrs, %b_ptrs : tensor<32x32xi32, #L1>, tensor<32x32x!ptr<i8>, #L0>, tensor<32x32x!ptr<i8>, #L0> {
  ^bb(%k: i32, %acc0: tensor<32x32xi32, #L1>, %pa0: tensor<32x32x!ptr<i8>, #L0>, %pb0: tensor<32x32x!ptr<i8>, #L0>):
    %a = tt.load %pa0 {vec = 8} : tensor<32x32xi8, #L0>
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xi8, #L0>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", instr = "mma.sync.m16n8k32.s8", mma = [2, 2]} : tensor<32x32xi32, #L1>
    %pa1 = tt.addptr %pa0, %astep : tensor<32x32x!ptr<i8>, #L0>
    %pb1 = tt.addptr %pb0, %bstep : tensor<32x32x!ptr<i8>, #L0>
    scf.yield %d, %pa1, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def _run(step, stages=3, a_order="[1, 0]"):
    text = LOOP.replace("STEP", str(step))
    text = text.replace("LB, UB", "%K, %c0" if step < 0 else "%c0, %K")
    if a_order != "[1, 0]":  # A contiguous along M: a second layout for A's tiles
        text = text.replace("#L1 = #mma<[2, 2]>", "#L1 = #mma<[2, 2]>\n#L2 = #blocked<[8, 1], [4, 8], [1, 4], [0, 1]>")
        text = text.replace("%a_ptrs: tensor<32x32x!ptr<i8>, #L0>", "%a_ptrs: tensor<32x32x!ptr<i8>, #L2>")
        text = text.replace("%pa0: tensor<32x32x!ptr<i8>, #L0>", "%pa0: tensor<32x32x!ptr<i8>, #L2>")
        text = text.replace("tensor<32x32x!ptr<i8>, #L0>, tensor<32x32x!ptr<i8>, #L0> {",
                            "tensor<32x32x!ptr<i8>, #L2>, tensor<32x32x!ptr<i8>, #L0> {")
        text = text.replace("%a = tt.load %pa0 {vec = 8} : tensor<32x32xi8, #L0>",
                            "%a = tt.load %pa0 {vec = 8} : tensor<32x32xi8, #L2>")
        text = text.replace("%astep = arith.constant {value = 32} : tensor<32x32xi32, #L0>",
                            "%astep = arith.constant {value = 32} : tensor<32x32xi32, #L2>")
        text = text.replace("%pa1 = tt.addptr %pa0, %astep : tensor<32x32x!ptr<i8>, #L0>",
                            "%pa1 = tt.addptr %pa0, %astep : tensor<32x32x!ptr<i8>, #L2>")
    m = parse_module(text)
    return m, pipeline_dot_operands.run(m, GpuOptions(num_warps=4, num_stages=stages))


def _loop(m):
    return next(op for op in m.kernel.body.ops if op.name == "scf.for")


def test_counting_down_pipelines_with_copies_predicated_on_iv_above_ub():
    m, stats = _run(-32)
    assert stats["pipelined"] == 1 and stats["buffers"] == 2, stats
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    # in their global order, rows padded by 16 bytes (ldmatrix's row addresses stay 16-byte aligned)
    assert [str(a.result.type) for a in allocs] == ["!memdesc<3x32x32xi8, order=1,0, pad=16>"] * 2
    top = m.kernel.body.ops
    loop = _loop(m)
    k_arg = m.kernel.args[-1]
    # the prologue's copies: iterations K and K - 32, each predicated on `iv > 0`
    preds = [op for op in top[:top.index(loop)] if op.name == "arith.cmpi"]
    assert [p.attrs["predicate"] for p in preds] == ["sgt", "sgt"]
    assert preds[0].operands[0] is k_arg
    body = loop.regions[0].ops
    (ahead,) = [op for op in body if op.name == "arith.cmpi" and op.attrs["predicate"] != "eq"]
    assert ahead.attrs["predicate"] == "sgt"
    iv_ahead = ahead.operands[0].defining_op
    assert iv_ahead.name == "arith.addi" and iv_ahead.operands[1].defining_op.attrs["value"] == -64
    assert "tt.load" not in [op.name for op in body]
    dot = next(op for op in body if op.name == "tt.dot")
    assert dot.operands[0].type.is_memdesc() and dot.operands[1].type.is_memdesc()
    text = print_module(m, with_locs=False)
    assert print_module(parse_module(text), with_locs=False) == text


def test_counting_up_keeps_slt():
    m, stats = _run(32)
    assert stats["pipelined"] == 1
    (ahead,) = [op for op in _loop(m).regions[0].ops if op.name == "arith.cmpi" and op.attrs["predicate"] != "eq"]
    assert ahead.attrs["predicate"] == "slt"


def test_an_m_contiguous_int8_a_stays_in_registers():
    m, stats = _run(-32, a_order="[0, 1]")
    assert stats["pipelined"] == 1 and stats["buffers"] == 1, stats
    assert any("M-contiguous" in s for s in stats["skipped"]), stats
    loads = [op for op in _loop(m).regions[0].ops if op.name == "tt.load"]
    assert len(loads) == 1 and str(loads[0].result.type.layout).startswith("#blocked<[8, 1]")
