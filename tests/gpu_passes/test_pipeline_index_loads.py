"""pipeline_dot_operands with KERNELLAB_PIPELINE_INDEX_LOADS (on by default): a dot loop whose tiles' addresses need a scalar
loaded in the body (a block-sparse matmul's k-block index, `kb = tl.load(KIDX + i)`) is pipelined; the index is
loaded in registers one iteration ahead of the copies it addresses, predicated by whether that iteration runs."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import pipeline_dot_operands

# the block-sparse loop: `for i in range(start, end): kb = load(KIDX + i); A[:, kb*32 + k], B[kb*32 + k, :]`
LOOP = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
#L2 = #slice<0, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>
#L3 = #slice<1, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>
tt.func @k(%a_rows: tensor<32x32x!ptr<f16>, #L0>, %b_cols: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %kidx: !ptr<i32>, %start: i32, %end: i32, %sbk: tensor<32x1xi32, #L0>) {
  %c1 = arith.constant {value = 1} : i32
  %c32 = arith.constant {value = 32} : i32
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %acc = scf.for %start, %end, %c1, %zero : tensor<32x32xf32, #L1> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>):
    %p = tt.addptr %kidx, %i : !ptr<i32>
    %kb = tt.load %p : i32
    %k0 = arith.muli %kb, %c32 : i32
    %ka = tt.splat %k0 : tensor<32xi32, #L2>
    %ra = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
    %kka = arith.addi %ka, %ra : tensor<32xi32, #L2>
    %ea = tt.expand_dims %kka {axis = 0} : tensor<1x32xi32, #L0>
    %ba = tt.broadcast %ea : tensor<32x32xi32, #L0>
    %pa = tt.addptr %a_rows, %ba : tensor<32x32x!ptr<f16>, #L0>
    %a = tt.load %pa {vec = 8} : tensor<32x32xf16, #L0>
    %kbb = tt.splat %k0 : tensor<32xi32, #L3>
    %rb = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L3>
    %kkb = arith.addi %kbb, %rb : tensor<32xi32, #L3>
    %eb = tt.expand_dims %kkb {axis = 1} : tensor<32x1xi32, #L0>
    %mb = arith.muli %eb, %sbk : tensor<32x1xi32, #L0>
    %bb = tt.broadcast %mb : tensor<32x32xi32, #L0>
    %pb = tt.addptr %b_cols, %bb : tensor<32x32x!ptr<f16>, #L0>
    %b = tt.load %pb {vec = 8} : tensor<32x32xf16, #L0>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    scf.yield %d
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

PIPELINED_2 = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
#L2 = #slice<0, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>
#L3 = #slice<1, #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>>

tt.func @k(%a_rows: tensor<32x32x!ptr<f16>, #L0>, %b_cols: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %kidx: !ptr<i32>, %start: i32, %end: i32, %sbk: tensor<32x1xi32, #L0>) {
  %c1 = arith.constant {value = 1} : i32
  %c32 = arith.constant {value = 32} : i32
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %a_stages = ttg.local_alloc {operand = "a", stages = 2} : !memdesc<2x32x32xf16, order=1,0, pad=8>
  %b_stages = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x32x32xf16, order=1,0, pad=8>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %start, %end {predicate = "slt"} : i1
  %p = tt.addptr %kidx, %start : !ptr<i32>
  %2 = arith.constant {value = 0} : i32
  %kb = tt.load %p, %1, %2 : i32
  %k0 = arith.muli %kb, %c32 : i32
  %ka = tt.splat %k0 : tensor<32xi32, #L2>
  %ra = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
  %kka = arith.addi %ka, %ra : tensor<32xi32, #L2>
  %ea = tt.expand_dims %kka {axis = 0} : tensor<1x32xi32, #L0>
  %ba = tt.broadcast %ea : tensor<32x32xi32, #L0>
  %pa = tt.addptr %a_rows, %ba : tensor<32x32x!ptr<f16>, #L0>
  %3 = ttg.memdesc_index %a_stages, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %pa, %3, %1 {vec = 8}
  %kbb = tt.splat %k0 : tensor<32xi32, #L3>
  %rb = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L3>
  %kkb = arith.addi %kbb, %rb : tensor<32xi32, #L3>
  %eb = tt.expand_dims %kkb {axis = 1} : tensor<32x1xi32, #L0>
  %mb = arith.muli %eb, %sbk : tensor<32x1xi32, #L0>
  %bb = tt.broadcast %mb : tensor<32x32xi32, #L0>
  %pb = tt.addptr %b_cols, %bb : tensor<32x32x!ptr<f16>, #L0>
  %4 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %pb, %4, %1 {vec = 8}
  ttg.async_commit
  %5 = arith.constant {value = 1} : i32
  %6 = arith.addi %start, %5 : i32
  %7 = arith.cmpi %6, %end {predicate = "slt"} : i1
  %p_1 = tt.addptr %kidx, %6 : !ptr<i32>
  %8 = arith.constant {value = 0} : i32
  %kb_1 = tt.load %p_1, %7, %8 : i32
  %9 = arith.constant {value = 0} : i32
  %10 = arith.constant {value = 1} : i32
  %acc, %11, %12, %13 = scf.for %start, %end, %c1, %zero, %9, %10, %kb_1 {pipelined_stages = 2} : tensor<32x32xf32, #L1>, i32, i32, i32 {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %read_stage: i32, %write_stage: i32, %kb_ahead: i32):
    %14 = arith.constant {value = 2} : i32
    %15 = arith.addi %i, %14 : i32
    %16 = arith.cmpi %15, %end {predicate = "slt"} : i1
    %p_2 = tt.addptr %kidx, %15 : !ptr<i32>
    %17 = arith.constant {value = 0} : i32
    %kb_2 = tt.load %p_2, %16, %17 : i32
    ttg.async_wait %a_stages, %b_stages {pending = 0}
    %18 = arith.constant {value = 1} : i32
    %19 = arith.addi %i, %18 : i32
    %20 = arith.cmpi %19, %end {predicate = "slt"} : i1
    %k0_1 = arith.muli %kb_ahead, %c32 : i32
    %ka_1 = tt.splat %k0_1 : tensor<32xi32, #L2>
    %ra_1 = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L2>
    %kka_1 = arith.addi %ka_1, %ra_1 : tensor<32xi32, #L2>
    %ea_1 = tt.expand_dims %kka_1 {axis = 0} : tensor<1x32xi32, #L0>
    %ba_1 = tt.broadcast %ea_1 : tensor<32x32xi32, #L0>
    %pa_1 = tt.addptr %a_rows, %ba_1 : tensor<32x32x!ptr<f16>, #L0>
    %21 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    ttg.async_copy %pa_1, %21, %20 {vec = 8}
    %kbb_1 = tt.splat %k0_1 : tensor<32xi32, #L3>
    %rb_1 = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L3>
    %kkb_1 = arith.addi %kbb_1, %rb_1 : tensor<32xi32, #L3>
    %eb_1 = tt.expand_dims %kkb_1 {axis = 1} : tensor<32x1xi32, #L0>
    %mb_1 = arith.muli %eb_1, %sbk : tensor<32x1xi32, #L0>
    %bb_1 = tt.broadcast %mb_1 : tensor<32x32xi32, #L0>
    %pb_1 = tt.addptr %b_cols, %bb_1 : tensor<32x32x!ptr<f16>, #L0>
    %22 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    ttg.async_copy %pb_1, %22, %20 {vec = 8}
    ttg.async_commit
    %23 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    %24 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    %d = tt.dot %23, %24, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %25 = arith.constant {value = 1} : i32
    %26 = arith.constant {value = 1} : i32
    %27 = arith.cmpi %read_stage, %26 {predicate = "eq"} : i1
    %28 = arith.constant {value = 0} : i32
    %29 = arith.addi %read_stage, %25 : i32
    %30 = arith.select %27, %28, %29 : i32
    %31 = arith.cmpi %write_stage, %26 {predicate = "eq"} : i1
    %32 = arith.constant {value = 0} : i32
    %33 = arith.addi %write_stage, %25 : i32
    %34 = arith.select %31, %32, %33 : i32
    scf.yield %d, %30, %34, %kb_2
  }
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  tt.store %c_ptrs, %acc
  tt.return
}
"""


@pytest.fixture
def index_loads(monkeypatch):
    monkeypatch.delenv("KERNELLAB_PIPELINE_INDEX_LOADS", raising=False)  # the default


def test_off_the_loop_keeps_the_register_path(run_pass, monkeypatch):
    monkeypatch.setenv("KERNELLAB_PIPELINE_INDEX_LOADS", "0")
    m, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=2))
    assert stats["pipelined"] == 0
    assert "operand a: its address needs a value the loop cannot recompute" in stats["skipped"][0]


def test_two_stages_index_loaded_one_iteration_ahead_of_the_copies(check, index_loads):
    _, stats = check(pipeline_dot_operands, LOOP, PIPELINED_2, GpuOptions(num_warps=4, num_stages=2))
    assert stats == {"pipelined": 1, "buffers": 2, "skipped": [], "index_loads": 1}


def _loads(block):
    return [op for op in block.ops if op.name == "tt.load"]


@pytest.mark.parametrize("stages", [3, 4])
def test_each_iteration_loads_the_index_of_the_iteration_after_its_copies(run_pass, index_loads, stages):
    m, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=stages))
    assert stats["pipelined"] == 1 and stats["index_loads"] == 1
    top = m.kernel.body.ops
    loop = next(op for op in top if op.name == "scf.for")
    body = loop.regions[0]
    # prologue: the indices of iterations 0 .. stages-2 (their copies) and of stages-1 (carried in), each masked by
    # whether its iteration runs
    pro = _loads(m.kernel.body)
    assert len(pro) == stages and all(len(ld.operands) == 3 for ld in pro)
    assert loop.operands[-1] is pro[-1].result
    # body: one index load, first thing, for iteration i + stages (i + stages-1 is carried in), no other load
    (ld,) = _loads(body)
    assert body.ops.index(ld) < [op.name for op in body.ops].index("ttg.async_wait")
    addptr = ld.operands[0].defining_op
    ahead = addptr.operands[1].defining_op
    assert ahead.name == "arith.addi" and ahead.operands[0] is body.args[0]
    assert ahead.operands[1].defining_op.attrs["value"] == stages
    mask = ld.operands[1].defining_op
    assert mask.name == "arith.cmpi" and mask.operands[0] is ahead.result
    assert body.terminator.operands[-1] is ld.result
    # the copies read the carried index
    carried = body.args[-1]
    assert [u.name for u in carried.uses] == ["arith.muli"]


def test_an_index_of_a_loop_carried_pointer_is_not_taken(run_pass, index_loads):
    # the index table walked by a carried pointer: reloading iteration i + S's index would need the pointer S ahead
    text = LOOP.replace("%acc = scf.for %start, %end, %c1, %zero : tensor<32x32xf32, #L1> {",
                        "%acc, %q = scf.for %start, %end, %c1, %zero, %kidx : tensor<32x32xf32, #L1>, !ptr<i32> {") \
        .replace("^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>):",
                 "^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %q0: !ptr<i32>):") \
        .replace("%p = tt.addptr %kidx, %i : !ptr<i32>\n    %kb = tt.load %p : i32",
                 "%kb = tt.load %q0 : i32\n    %q1 = tt.addptr %q0, %c1 : !ptr<i32>") \
        .replace("scf.yield %d", "scf.yield %d, %q1")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 0
    assert "its address needs a value the loop cannot recompute" in stats["skipped"][0]


def test_a_loop_that_stores_is_not_taken(run_pass, index_loads):
    # a store in the loop could write the index table: its loads must stay where they are
    text = LOOP.replace("    scf.yield %d\n", "    tt.store %kidx, %kb\n    scf.yield %d\n")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 0


def test_a_masked_index_load_keeps_its_mask_and_other(run_pass, index_loads):
    text = LOOP.replace("%kb = tt.load %p : i32", "%kb = tt.load %p, %ok, %c1 : i32").replace(
        "%c32 = arith.constant {value = 32} : i32", "%c32 = arith.constant {value = 32} : i32\n"
        "  %ok = arith.cmpi %start, %end {predicate = \"slt\"} : i1")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=2))
    assert stats["pipelined"] == 1
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    (ld,) = _loads(loop.regions[0])
    both = ld.operands[1].defining_op
    assert both.name == "arith.andi" and both.operands[0].defining_op.attrs["predicate"] == "slt"
    assert both.operands[0].defining_op.operands[0].hint == "start"
    assert ld.operands[2].defining_op.attrs["value"] == 1  # its own `other`
