"""register_dot_operand (KERNELLAB_REGISTER_DOT_OPERAND=1): a tf32 mma.sync dot's A operand computed by elementwise
math from tiles read back out of pipeline stages (fla's chunk_fwd_kernel_h with USE_GK:
`k * exp2(g_last[:, None] - g)`) is computed in the #mma layout, so the dot takes its fragments from registers
instead of storing the tile into its scratch, a barrier and ldmatrix. IR in (a loop before pipeline_dot_operands,
which stages the tiles) -> IR out after both passes."""
from __future__ import annotations

import re

import pytest

from kernellab.compiler.gpu.layouts import Mma, Slice
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.gpu.scratch import a_from_registers, scratch_bytes
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import pipeline_dot_operands, register_dot_operand
from kernellab.compiler.printer import print_module

# A (k): [32, 64] contiguous along M; G (gk): the same; B (v): [64, 32] contiguous along N; gl: a row vector
# broadcast along K. The dot reads A = k * exp2(gl[:, None] - g).
LOOP = """
#L0 = #blocked<[4, 1], [8, 4], [1, 1], [0, 1]>
#L1 = #blocked<[1, 4], [4, 8], [1, 1], [1, 0]>
#L2 = #mma<[1, 1]>
#L3 = #slice<1, #blocked<[4, 1], [8, 4], [1, 1], [0, 1]>>
tt.func @k(%a_ptrs: tensor<32x64x!ptr<f32>, #L0>, %b_ptrs: tensor<64x32x!ptr<f32>, #L1>, %g_ptrs: tensor<32x64x!ptr<f32>, #L0>, %gl: tensor<32xf32, #L3>, %c_ptrs: tensor<32x32x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %astep = arith.constant {value = 4096} : tensor<32x64xi32, #L0>
  %bstep = arith.constant {value = 2048} : tensor<64x32xi32, #L1>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L2>
  %acc, %pa, %pb, %pg = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs, %g_ptrs : tensor<32x32xf32, #L2>, tensor<32x64x!ptr<f32>, #L0>, tensor<64x32x!ptr<f32>, #L1>, tensor<32x64x!ptr<f32>, #L0> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L2>, %pa0: tensor<32x64x!ptr<f32>, #L0>, %pb0: tensor<64x32x!ptr<f32>, #L1>, %pg0: tensor<32x64x!ptr<f32>, #L0>):
    %a = tt.load %pa0 {vec = 4} : tensor<32x64xf32, #L0>
    %b = tt.load %pb0 {vec = 4} : tensor<64x32xf32, #L1>
    %g = tt.load %pg0 {vec = 4} : tensor<32x64xf32, #L0>
    %ge = tt.expand_dims %gl {axis = 1} : tensor<32x1xf32, #L0>
    %gb = tt.broadcast %ge : tensor<32x64xf32, #L0>
    %s = arith.subf %gb, %g : tensor<32x64xf32, #L0>
    %e = math.exp2 %s : tensor<32x64xf32, #L0>
    %as = arith.mulf %a, %e : tensor<32x64xf32, #L0>
    %d = tt.dot %as, %b, %acc0 {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [1, 1]} : tensor<32x32xf32, #L2>
    %pa1 = tt.addptr %pa0, %astep : tensor<32x64x!ptr<f32>, #L0>
    %pb1 = tt.addptr %pb0, %bstep : tensor<64x32x!ptr<f32>, #L1>
    %pg1 = tt.addptr %pg0, %astep : tensor<32x64x!ptr<f32>, #L0>
    scf.yield %d, %pa1, %pb1, %pg1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def _run(text=LOOP, warps=1):
    m = parse_module(text)
    opts = GpuOptions(num_warps=warps, num_stages=2)
    pipeline_dot_operands.run(m, opts)
    before = print_module(m)
    stats = register_dot_operand.run(m, opts)
    return m, before, stats


def _ops(m, name):
    return [op for op in m.kernel.walk() if op.name == name]


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", "1")


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_REGISTER_DOT_OPERAND", raising=False)
    m, before, stats = _run()
    assert stats == {} and print_module(m) == before


def test_a_chain_in_mma_layout(on):
    m, before, stats = _run()
    assert stats == {"operands": 1, "vector_conversions": 1, "b_stages_in_load_order": 1, "stages_padded": 2}, stats
    (dot,) = _ops(m, "tt.dot")
    a = dot.operands[0]
    assert a.type.layout == Mma((1, 1)) and a_from_registers(dot)
    # the dot stages nothing now: no scratch, so no barrier before it
    assert scratch_bytes(dot) == (0, "")
    loads = _ops(m, "ttg.local_load")
    assert len(loads) == 2 and all(ld.result.type.layout == Mma((1, 1)) for ld in loads)
    for name in ("arith.subf", "math.exp2", "arith.mulf", "tt.broadcast", "tt.expand_dims"):
        (op,) = [op for op in _ops(m, name) if op.result.type.shape[0] == 32]
        assert op.result.type.layout == Mma((1, 1)), (name, op.result.type)
    # the row vector: one conversion to the slice of the #mma layout, right before its expand_dims
    (conv,) = _ops(m, "ttg.convert_layout")
    assert conv.result.type.layout == Slice(1, Mma((1, 1)))
    text = print_module(m)
    # the math tiles' stages: rows of 32 + 4 elements (the lanes' reads of rows 2t apart on 32 banks)
    assert text.count("!memdesc<2x32x64xf32, order=0,1, pad=4>") == 2, text
    # B: back in its load's order (N contiguous), copied 16 bytes at a time, rows of 32 + 4
    assert "!memdesc<2x64x32xf32, order=1,0, pad=4>" in text
    assert "!memdesc<2x64x32xf32, order=0,1, pad=4>" in before  # it was K-major for ldmatrix
    copies = [c for c in _ops(m, "ttg.async_copy") if c.operands[1].type.shape == (64, 32)]
    assert copies and all(c.attrs == {"vec": 4} for c in copies), [c.attrs for c in copies]


def test_other_user_keeps_the_chain(on):
    """The scaled tile is also stored: the chain is not the dot's alone, nothing changes."""
    text = LOOP.replace("    %d = tt.dot", "    tt.store %a_ptrs, %as\n    %d = tt.dot")
    m, before, stats = _run(text)
    assert stats == {} and print_module(m) == before


def test_operand_read_as_loaded_is_untouched(on):
    """No math: A is a pipelined stage the dot reads with ldmatrix; nothing to do."""
    text = re.sub(r"%d = tt\.dot %as,", "%d = tt.dot %a,", LOOP)
    text = text.replace("    %ge = tt.expand_dims %gl {axis = 1} : tensor<32x1xf32, #L0>\n", "")
    for line in ("%gb = ", "%s = ", "%e = ", "%as = ", "%g = "):
        text = "\n".join(ln for ln in text.splitlines() if line not in ln)
    m, before, stats = _run(text)
    assert stats == {} and print_module(m) == before
    (dot,) = _ops(m, "tt.dot")
    assert dot.operands[0].type.is_memdesc()


def test_warps_along_n_untouched(on):
    """mma = [1, 2]: each warp needs all of A (the #mma layout would split it along K): nothing changes."""
    text = LOOP.replace("[1, 1], [0, 1]>", "[1, 2], [0, 1]>").replace("[1, 1], [1, 0]>", "[1, 2], [1, 0]>")
    text = text.replace("#L2 = #mma<[1, 1]>", "#L2 = #mma<[1, 2]>").replace("mma = [1, 1]", "mma = [1, 2]")
    m, before, stats = _run(text, warps=2)
    assert stats == {} and print_module(m) == before


ACC_A = """
#L1 = #blocked<[1, 4], [4, 8], [1, 1], [1, 0]>
#L2 = #mma<[1, 1]>
tt.func @k(%p: tensor<32x64xf32, #L2>, %b: tensor<64x32xf32, #L1>, %c_ptrs: tensor<32x32x!ptr<f32>, #L2>) {
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L2>
  %d = tt.dot %p, %b, %zero {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [1, 1]} : tensor<32x32xf32, #L2>
  tt.store %c_ptrs, %d
  tt.return
}
"""


@pytest.mark.parametrize("knob", ["1", "2"])
def test_accumulator_operand_only_with_2(knob, monkeypatch):
    """An A that already is an fp32 accumulator in the #mma layout: staged as before at 1 (fla's parallel attention
    spilled more from registers), from registers at 2."""
    monkeypatch.setenv("KERNELLAB_REGISTER_DOT_OPERAND", knob)
    m = parse_module(ACC_A)
    stats = register_dot_operand.run(m, GpuOptions(num_warps=1, num_stages=2))
    (dot,) = _ops(m, "tt.dot")
    assert bool(a_from_registers(dot)) == (knob == "2")
    assert stats == ({"accumulators": 1} if knob == "2" else {})
    # B (a register tile) is still staged for the dot; A only when it is not taken from registers
    assert scratch_bytes(dot)[0] == (4 * 32 * (64 + 4) if knob == "2" else 16 * ((32 * 68 * 4 + 15) // 16) * 2)
