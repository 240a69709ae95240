"""pipeline_dot_operands: a loop feeding a tensor-core dot gets multi-stage shared-memory buffers filled by
cp.async num_stages-1 iterations ahead (prologue, steady state, drain; the copies after the wait when a wgmma
stays in flight); loops it cannot pipeline keep the register path and say why. TMA fills and warpgroup turns
are later passes (test_fill_stages_with_tma.py, test_warpgroup_turns.py)."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import (
    allocate_shared,
    insert_barriers,
    pipeline_dot_operands,
    stage_invariant_dot_operands,
)
from kernellab.compiler.rewrite import int_const

LOOP = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %acc, %pa, %pb = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs : tensor<32x32xf32, #L1>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %pa0: tensor<32x32x!ptr<f16>, #L0>, %pb0: tensor<32x32x!ptr<f16>, #L0>):
    %a = tt.load %pa0 {vec = 8} : tensor<32x32xf16, #L0>
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xf16, #L0>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %pa1 = tt.addptr %pa0, %step : tensor<32x32x!ptr<f16>, #L0>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f16>, #L0>
    scf.yield %d, %pa1, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

PIPELINED_3 = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>

tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %a_stages = ttg.local_alloc {operand = "a", stages = 3} : !memdesc<3x32x32xf16, order=1,0, pad=8>
  %b_stages = ttg.local_alloc {operand = "b", stages = 3} : !memdesc<3x32x32xf16, order=1,0, pad=8>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %n {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %a_stages, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %a_ptrs, %2, %1 {vec = 8}
  %3 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %b_ptrs, %3, %1 {vec = 8}
  ttg.async_commit
  %pa1 = tt.addptr %a_ptrs, %step : tensor<32x32x!ptr<f16>, #L0>
  %pb1 = tt.addptr %b_ptrs, %step : tensor<32x32x!ptr<f16>, #L0>
  %4 = arith.constant {value = 1} : i32
  %5 = arith.addi %c0, %4 : i32
  %6 = arith.constant {value = 1} : i32
  %7 = arith.cmpi %5, %n {predicate = "slt"} : i1
  %8 = ttg.memdesc_index %a_stages, %6 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %pa1, %8, %7 {vec = 8}
  %9 = ttg.memdesc_index %b_stages, %6 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.async_copy %pb1, %9, %7 {vec = 8}
  ttg.async_commit
  %pa1_1 = tt.addptr %pa1, %step : tensor<32x32x!ptr<f16>, #L0>
  %pb1_1 = tt.addptr %pb1, %step : tensor<32x32x!ptr<f16>, #L0>
  %10 = arith.constant {value = 0} : i32
  %11 = arith.constant {value = 2} : i32
  %acc, %12, %13, %14, %15 = scf.for %c0, %n, %c1, %zero, %pa1_1, %pb1_1, %10, %11 {pipelined_stages = 3} : tensor<32x32xf32, #L1>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0>, i32, i32 {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %pa0_ahead: tensor<32x32x!ptr<f16>, #L0>, %pb0_ahead: tensor<32x32x!ptr<f16>, #L0>, %read_stage: i32, %write_stage: i32):
    ttg.async_wait %a_stages, %b_stages {pending = 1}
    %16 = arith.constant {value = 2} : i32
    %17 = arith.addi %i, %16 : i32
    %18 = arith.cmpi %17, %n {predicate = "slt"} : i1
    %19 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    ttg.async_copy %pa0_ahead, %19, %18 {vec = 8}
    %20 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    ttg.async_copy %pb0_ahead, %20, %18 {vec = 8}
    ttg.async_commit
    %pa1_2 = tt.addptr %pa0_ahead, %step : tensor<32x32x!ptr<f16>, #L0>
    %pb1_2 = tt.addptr %pb0_ahead, %step : tensor<32x32x!ptr<f16>, #L0>
    %21 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    %22 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x32xf16, order=1,0, pad=8>
    %d = tt.dot %21, %22, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %23 = arith.constant {value = 1} : i32
    %24 = arith.constant {value = 2} : i32
    %25 = arith.cmpi %read_stage, %24 {predicate = "eq"} : i1
    %26 = arith.constant {value = 0} : i32
    %27 = arith.addi %read_stage, %23 : i32
    %28 = arith.select %25, %26, %27 : i32
    %29 = arith.cmpi %write_stage, %24 {predicate = "eq"} : i1
    %30 = arith.constant {value = 0} : i32
    %31 = arith.addi %write_stage, %23 : i32
    %32 = arith.select %29, %30, %31 : i32
    scf.yield %d, %pa1_2, %pb1_2, %28, %32
  }
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def test_three_stages_prologue_steady_state_and_drain(check):
    _, stats = check(pipeline_dot_operands, LOOP, PIPELINED_3, GpuOptions(num_warps=4, num_stages=3))
    assert stats == {"pipelined": 1, "buffers": 2, "skipped": []}


def _ops(module):
    return [op.name for op in module.kernel.walk()]


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
def test_stage_count_shapes_the_pipeline(run_pass, stages):
    m, _ = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=stages))
    top = [op.name for op in m.kernel.body.ops]
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = [op.name for op in loop.regions[0].ops]
    # prologue: one commit per stage filled ahead; body: wait first, one new group, the dot last before the slots
    assert top[:top.index("scf.for")].count("ttg.async_commit") == stages - 1
    assert body[0] == "ttg.async_wait" and loop.regions[0].ops[0].attrs["pending"] == stages - 2
    assert body.count("ttg.async_copy") == 2 and body.count("ttg.async_commit") == 1
    assert body.index("ttg.async_commit") < body.index("tt.dot")
    # after the loop: drain every group before anything else may reuse the addresses
    after = m.kernel.body.ops[top.index("scf.for") + 1]
    assert after.name == "ttg.async_wait" and after.attrs["pending"] == 0
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    assert [a.result.type.shape for a in allocs] == [(stages, 32, 32)] * 2
    assert loop.attrs["pipelined_stages"] == stages


def test_one_stage_keeps_the_register_path(run_pass):
    m, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=1))
    assert stats["pipelined"] == 0 and "num_stages < 2" in stats["skipped"][0]
    assert "ttg.async_copy" not in _ops(m) and _ops(m).count("tt.load") == 2


def test_per_loop_num_stages_overrides_the_kernel_option(run_pass):
    text = LOOP.replace("%a_ptrs, %b_ptrs : tensor<32x32xf32", "%a_ptrs, %b_ptrs {num_stages = 2} : tensor<32x32xf32")
    m, _ = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=4))
    assert [a.result.type.shape[0] for a in m.kernel.walk() if a.name == "ttg.local_alloc"] == [2, 2]


def test_a_nonzero_other_is_not_pipelined(run_pass):
    text = LOOP.replace("%a = tt.load %pa0 {vec = 8}", "%a = tt.load %pa0, %msk, %one {vec = 8}").replace(
        "%zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>",
        "%zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>\n"
        "  %one = arith.constant {value = 1.0} : tensor<32x32xf16, #L0>\n"
        "  %msk = arith.constant {value = true} : tensor<32x32xi1, #L0>")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 1  # B still is
    assert any("operand a: a non-zero `other`" in s for s in stats["skipped"])
    assert _ops(m).count("tt.load") == 1 and _ops(m).count("ttg.local_alloc") == 1


def test_narrow_accesses_are_not_pipelined(run_pass):
    text = LOOP.replace("{vec = 8}", "{vec = 1}")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 0 and "2-byte accesses" in stats["skipped"][0]


def test_sm75_has_no_cp_async(run_pass):
    _, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=3, arch=75))
    assert stats["pipelined"] == 0 and "no cp.async" in stats["skipped"][0]


def test_shared_plan_and_barriers_of_the_pipelined_loop(run_pass):
    m, _ = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=3))
    allocate_shared.run(m, GpuOptions(num_warps=4))
    plan = m.shared_plan
    # each buffer: 3 stages of 32 rows of (32 + 8 padding) halves, live from its allocation to the drain
    assert [(b["op"], b["size"], b["stages"], b["stage_bytes"]) for b in plan] == \
        [("ttg.local_alloc", 3 * 32 * 40 * 2, 3, 32 * 40 * 2)] * 2
    assert [b["offset"] for b in plan] == [0, 3 * 32 * 40 * 2]
    drain = [i for i, op in enumerate(m.kernel.walk()) if op.name == "ttg.async_wait"][-1]
    assert all(b["live"][1] == drain for b in plan)
    assert "rows padded by 16 bytes" in plan[0]["swizzle"]
    # the waits are the barriers: nothing else is inserted (the dot reads shared memory it does not own)
    stats = insert_barriers.run(m, GpuOptions(num_warps=4))
    assert stats == {"barriers": 0}


WGMMA_LOOP = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[4, 1]>
tt.func @k(%a_ptrs: tensor<64x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %step_a = arith.constant {value = 32} : tensor<64x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %acc, %pa, %pb = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs : tensor<64x32xf32, #L1>, tensor<64x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<64x32xf32, #L1>, %pa0: tensor<64x32x!ptr<f16>, #L0>, %pb0: tensor<32x32x!ptr<f16>, #L0>):
    %a = tt.load %pa0 {vec = 8} : tensor<64x32xf16, #L0>
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xf16, #L0>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L1>
    %pa1 = tt.addptr %pa0, %step_a : tensor<64x32x!ptr<f16>, #L0>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f16>, #L0>
    scf.yield %d, %pa1, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_a_wgmma_accumulation_keeps_one_group_in_flight(run_pass, stages):
    """acc = dot(a, b, acc) on wgmma: the group of iteration i is waited for in iteration i+1 (pending 1); the
    copies move after that wait and a barrier, so they still run stages-1 ahead; right after the loop, before
    anything else, a wait for the last group."""
    m, stats = run_pass(pipeline_dot_operands, WGMMA_LOOP, GpuOptions(num_warps=4, num_stages=stages))
    assert stats["overlapped_wgmma"] == 1
    top = m.kernel.body.ops
    names = [op.name for op in top]
    assert names[:names.index("scf.for")].count("ttg.async_commit") == stages - 1
    loop = next(op for op in top if op.name == "scf.for")
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    assert body[0].name == "ttg.async_wait" and body[0].attrs["pending"] == stages - 2
    dot = next(op for op in body if op.name == "tt.dot")
    wait = next(op for op in body if op.name == "ttg.dot_wait")
    assert dot.attrs["wgmma_async"] and dot.result.uses == [wait] and wait.attrs["pending"] == 1
    assert len(wait.operands) == 1 and body[-1].operands[0] is wait.result
    # dot, its wait, a barrier, then the copies of iteration i + stages - 1
    assert kinds.index("tt.dot") < kinds.index("ttg.dot_wait") < kinds.index("ttg.barrier") < kinds.index(
        "ttg.async_copy") < kinds.index("ttg.async_commit")
    # after the loop: the wait for the last group first, then the copies' drain; the store reads the waited value
    after = top[names.index("scf.for") + 1]
    assert after.name == "ttg.dot_wait" and after.attrs["pending"] == 0 and after.operands[0] is loop.results[0]
    assert top[names.index("scf.for") + 2].name == "ttg.async_wait"
    store = next(op for op in top if op.name == "tt.store")
    assert store.operands[1] is after.result


def test_an_mma_sync_dot_waits_every_iteration(run_pass):
    m, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=3))
    assert "overlapped_wgmma" not in stats and "ttg.dot_wait" not in _ops(m) and "ttg.barrier" not in _ops(m)



@pytest.mark.parametrize("stages", [2, 3, 4])
def test_mma_sync_copies_go_before_the_dot(run_pass, stages):
    """mma.sync loop: the copies of iteration i + stages - 1 go before the dot, into the stage iteration i - 1 read
    (one buffer per stage, no barrier of their own: the wait's barrier proves every warp has read it)."""
    m, stats = run_pass(pipeline_dot_operands, LOOP, GpuOptions(num_warps=4, num_stages=stages))
    allocs = [op for op in m.kernel.body.ops if op.name == "ttg.local_alloc"]
    assert [op.attrs["stages"] for op in allocs] == [stages, stages]
    top = [op.name for op in m.kernel.body.ops]
    assert top[:top.index("scf.for")].count("ttg.async_commit") == stages - 1  # still stages-1 ahead
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    assert body[0].name == "ttg.async_wait" and body[0].attrs["pending"] == stages - 2
    assert kinds.index("ttg.async_copy") < kinds.index("tt.dot") and "ttg.barrier" not in kinds
    read, write = loop.regions[0].args[-2:]
    copies = [op for op in body if op.name == "ttg.memdesc_index" and any(
        u.name == "ttg.async_copy" for u in op.result.uses)]
    assert copies and all(op.operands[1] is write for op in copies)
    assert [int_const(v) for v in loop.operands[-2:]] == [0, stages - 1]


def _attention_loop(warps):
    rows = 16 * warps
    return f"""
#L0 = #blocked<[1, 8], [8, 4], [{warps}, 1], [1, 0]>
#L1 = #mma<[{warps}, 1]>
tt.func @k(%q_ptrs: tensor<{rows}x64x!ptr<f16>, #L0>, %k_ptrs: tensor<64x64x!ptr<f16>, #L0>, %v_ptrs: tensor<64x64x!ptr<f16>, #L0>, %o_ptrs: tensor<{rows}x64x!ptr<f32>, #L1>, %n: i32) {{
  %c0 = arith.constant {{value = 0}} : i32
  %c1 = arith.constant {{value = 1}} : i32
  %step = arith.constant {{value = 64}} : tensor<64x64xi32, #L0>
  %zero = arith.constant {{value = 0.0}} : tensor<{rows}x64xf32, #L1>
  %q = tt.load %q_ptrs {{vec = 8}} : tensor<{rows}x64xf16, #L0>
  %acc, %pk, %pv = scf.for %c0, %n, %c1, %zero, %k_ptrs, %v_ptrs : tensor<{rows}x64xf32, #L1>, tensor<64x64x!ptr<f16>, #L0>, tensor<64x64x!ptr<f16>, #L0> {{
  ^bb(%i: i32, %acc0: tensor<{rows}x64xf32, #L1>, %pk0: tensor<64x64x!ptr<f16>, #L0>, %pv0: tensor<64x64x!ptr<f16>, #L0>):
    %k = tt.load %pk0 {{vec = 8}} : tensor<64x64xf16, #L0>
    %s = tt.dot %q, %k, %zero {{input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [{warps}, 1]}} : tensor<{rows}x64xf32, #L1>
    %p = arith.truncf %s : tensor<{rows}x64xf16, #L1>
    %acc1 = arith.mulf %acc0, %s : tensor<{rows}x64xf32, #L1>
    %v = tt.load %pv0 {{vec = 8}} : tensor<64x64xf16, #L0>
    %d = tt.dot %p, %v, %acc1 {{input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [{warps}, 1]}} : tensor<{rows}x64xf32, #L1>
    %pk1 = tt.addptr %pk0, %step : tensor<64x64x!ptr<f16>, #L0>
    %pv1 = tt.addptr %pv0, %step : tensor<64x64x!ptr<f16>, #L0>
    scf.yield %d, %pk1, %pv1
  }}
  tt.store %o_ptrs, %acc
  tt.return
}}
"""


@pytest.mark.parametrize("warps", [4])
def test_attention_keeps_the_second_wgmma_in_flight_behind_the_next_first_one(run_passes, warps):
    """s = dot(q, k); acc = dot(p, v, acc * ..) on wgmma with one warpgroup (q staged once before): the p·v group
    is not waited for in its iteration; the next iteration's q·k wait retires it, then a dot_wait ties the
    carried acc (every read of it comes after), a barrier, and only then the copies refill the stage both read."""
    m, (staged, stats) = run_passes([stage_invariant_dot_operands, pipeline_dot_operands], _attention_loop(warps),
                                    GpuOptions(num_warps=warps, num_stages=3))
    assert stats["overlapped_wgmma"] == 1 and stats["pipelined"] == 1 and staged["staged_once"] == 1
    top = m.kernel.body.ops
    names = [op.name for op in top]
    loop = top[names.index("scf.for")]
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    first, second = [op for op in body if op.name == "tt.dot"]
    assert not first.attrs.get("wgmma_async") and second.attrs["wgmma_async"]
    wait = next(op for op in body if op.name == "ttg.dot_wait")
    acc0 = loop.regions[0].args[1]
    assert wait.operands[0] is acc0 and wait.attrs["pending"] == 0 and acc0.uses == [wait]
    mul = next(op for op in body if op.name == "arith.mulf")
    assert mul.operands[0] is wait.result
    assert body.index(first) < body.index(wait) < kinds.index("ttg.barrier") < kinds.index("ttg.async_copy") \
        < body.index(mul) < body.index(second)
    assert body[-1].operands[0] is second.result  # yielded without a wait
    after = top[names.index("scf.for") + 1]
    assert after.name == "ttg.dot_wait" and after.attrs["pending"] == 0 and after.operands[0] is loop.results[0]


TWO_READERS = """
#L0 = #blocked<[8, 1], [8, 4], [1, 4], [0, 1]>
#L1 = #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>
#L2 = #mma<[4, 1]>
tt.func @k(%q: tensor<64x32xf16, #L2>, %kt_ptrs: tensor<32x64x!ptr<f16>, #L0>, %o_ptrs: tensor<64x32x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 64} : tensor<32x64xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L2>
  %zq = arith.constant {value = 0.0} : tensor<64x32xf32, #L2>
  %acc, %pk = scf.for %c0, %n, %c1, %zq, %kt_ptrs : tensor<64x32xf32, #L2>, tensor<32x64x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<64x32xf32, #L2>, %pk0: tensor<32x64x!ptr<f16>, #L0>):
    %kt = tt.load %pk0 {vec = 8} : tensor<32x64xf16, #L0>
    %s = tt.dot %q, %kt, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1]} : tensor<64x64xf32, #L2>
    %p = arith.truncf %s : tensor<64x64xf16, #L2>
    %k = tt.trans %kt {order = [1, 0]} : tensor<64x32xf16, #L1>
    %d = tt.dot %p, %k, %acc0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L2>
    %pk1 = tt.addptr %pk0, %step : tensor<32x64x!ptr<f16>, #L0>
    scf.yield %d, %pk1
  }
  tt.store %o_ptrs, %acc
  tt.return
}
"""


@pytest.mark.parametrize("instr", ["wgmma", "mma.sync"])
def test_a_tile_read_by_two_dots_one_transposed_fills_one_buffer(run_pass, instr):
    """Attention backward's dQ loop: kT is B of q·kT and, transposed, B of ds·k. One stage buffer (the load's
    order) is filled once per iteration; the second dot reads the same stage through a transposed view (shape and
    order swapped, same swizzle), so neither dot stages a register tile."""
    text = TWO_READERS
    if instr == "mma.sync":
        text = text.replace('instr = "wgmma.m64n64k16.f16", ', "").replace('instr = "wgmma.m64n32k16.f16", ', "")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 1 and stats["buffers"] == 1, stats
    (alloc,) = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    t = alloc.result.type
    assert t.shape == (3, 32, 64) and t.order == (0, 1) and bool(t.swizzle) == (instr == "wgmma")
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0].ops
    assert not any(op.name in ("tt.load", "tt.trans") for op in body)
    dots = [op for op in body if op.name == "tt.dot"]
    views = [d.operands[1].defining_op for d in dots]
    assert all(v.name == "ttg.memdesc_index" and v.operands[0] is alloc.result for v in views)
    assert views[0].operands[1] is views[1].operands[1]  # the same stage
    v0, v1 = (v.result.type for v in views)
    assert (v0.shape, v0.order) == ((32, 64), (0, 1)) and (v1.shape, v1.order) == ((64, 32), (1, 0))
    assert (v0.pad, v0.swizzle) == (v1.pad, v1.swizzle) == (t.pad, t.swizzle)
    assert sum(op.name == "ttg.async_copy" for op in body) == 1


def test_a_tile_with_a_reader_that_is_not_a_dot_is_not_pipelined(run_pass):
    text = TWO_READERS.replace("    %pk1 = tt.addptr", "    %x = arith.extf %kt : tensor<32x64xf32, #L0>\n"
                               "    %pk1 = tt.addptr")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 0 and "other users" in stats["skipped"][0], stats


DKDV_LOOP = """
#L0 = #blocked<[8, 1], [8, 4], [1, 4], [0, 1]>
#L1 = #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>
#L2 = #mma<[4, 1]>
tt.func @k(%kk: !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>, %vv: !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>, %qt_ptrs: tensor<64x32x!ptr<f16>, #L0>, %do_ptrs: tensor<32x64x!ptr<f16>, #L1>, %o_ptrs: tensor<64x64x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %sq = arith.constant {value = 32} : tensor<64x32xi32, #L0>
  %sd = arith.constant {value = 2048} : tensor<32x64xi32, #L1>
  %z32 = arith.constant {value = 0.0} : tensor<64x32xf32, #L2>
  %z64 = arith.constant {value = 0.0} : tensor<64x64xf32, #L2>
  %dk, %dv, %pq, %pd = scf.for %c0, %n, %c1, %z64, %z64, %qt_ptrs, %do_ptrs : tensor<64x64xf32, #L2>, tensor<64x64xf32, #L2>, tensor<64x32x!ptr<f16>, #L0>, tensor<32x64x!ptr<f16>, #L1> {
  ^bb(%i: i32, %dk0: tensor<64x64xf32, #L2>, %dv0: tensor<64x64xf32, #L2>, %pq0: tensor<64x32x!ptr<f16>, #L0>, %pd0: tensor<32x64x!ptr<f16>, #L1>):
    %qt = tt.load %pq0 {vec = 8} : tensor<64x32xf16, #L0>
    %st = tt.dot %kk, %qt, %z32 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L2>
    %pt = arith.truncf %st : tensor<64x32xf16, #L2>
    %do = tt.load %pd0 {vec = 8} : tensor<32x64xf16, #L1>
    %dv1 = tt.dot %pt, %do, %dv0 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1]} : tensor<64x64xf32, #L2>
    %dot = tt.trans %do {order = [1, 0]} : tensor<64x32xf16, #L0>
    %dpt = tt.dot %vv, %dot, %z32 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L2>
    %ds = arith.mulf %st, %dpt : tensor<64x32xf32, #L2>
    %dsh = arith.truncf %ds : tensor<64x32xf16, #L2>
    %q = tt.trans %qt {order = [1, 0]} : tensor<32x64xf16, #L1>
    %dk1 = tt.dot %dsh, %q, %dk0 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1]} : tensor<64x64xf32, #L2>
    %pq1 = tt.addptr %pq0, %sq : tensor<64x32x!ptr<f16>, #L0>
    %pd1 = tt.addptr %pd0, %sd : tensor<32x64x!ptr<f16>, #L1>
    scf.yield %dk1, %dv1, %pq1, %pd1
  }
  tt.store %o_ptrs, %dk
  tt.store %o_ptrs, %dv
  tt.return
}
"""


@pytest.mark.parametrize("where", ["auto", "end", "first"])
def test_attention_backward_loop_keeps_two_waits_per_iteration(run_pass, monkeypatch, where):
    """The dK/dV loop (s^T = k·qT, dV += p^T·do, dP^T = v·do^T, dK += ds^T·q): qT and do each fill one buffer read
    twice; dK stays in flight behind the next iteration's s^T (whose wait retires it, then the carried dK is tied),
    dV is retired by dP^T's wait and tied right after it; s^T and dP^T wait at once. The barrier and the copies come
    after dK's issue, last in the body, so the warps meet while dK runs (a chain of four dots; with
    KERNELLAB_CHAIN_COPIES=auto or end), or right after s^T's wait (=first, the default until auto is timed)."""
    monkeypatch.setenv("KERNELLAB_CHAIN_COPIES", where)
    m, stats = run_pass(pipeline_dot_operands, DKDV_LOOP, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 1 and stats["buffers"] == 2 and stats["overlapped_wgmma"] == 1, stats
    assert stats["retired_at_next_wait"] == 1
    top = m.kernel.body.ops
    names = [op.name for op in top]
    loop = top[names.index("scf.for")]
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    st, dv, dpt, dk = [op for op in body if op.name == "tt.dot"]
    assert [bool(d.attrs.get("wgmma_async")) for d in (st, dv, dpt, dk)] == [False, True, False, True]
    waits = [op for op in body if op.name == "ttg.dot_wait"]
    assert len(waits) == 2 and all(w.attrs["pending"] == 0 for w in waits)
    dk0, dv0 = loop.regions[0].args[1:3]
    assert waits[0].operands[0] is dk0 and body.index(waits[0]) == body.index(st) + 1 and dk0.uses == [waits[0]]
    assert waits[1].operands[0] is dv.result and body.index(waits[1]) == body.index(dpt) + 1
    bar, copy = kinds.index("ttg.barrier"), kinds.index("ttg.async_copy")
    if where == "first":
        assert body.index(waits[0]) < bar < copy < body.index(dv)
        assert "chain_copies_at_end" not in stats
    else:
        assert body.index(dk) < bar < copy and kinds.count("ttg.barrier") == 1
        assert not any(op.name == "tt.dot" for op in body[bar:]), kinds[bar:]
        assert stats["chain_copies_at_end"] == 1
    y = body[-1]
    assert y.operands[0] is dk.result and y.operands[1] is waits[1].result
    after = top[names.index("scf.for") + 1]
    assert after.name == "ttg.dot_wait" and after.operands[0] is loop.results[0]


# fp8 (and int8) wgmma operands: A [M, K] row-major, B [K, N] with K contiguous (b = w.T of a row-major [N, K] w, as
# torch._scaled_mm and Triton's fp8 tutorial take it). wgmma reads 8-bit operands K-major only, which is exactly how
# cp.async copies these tiles: both are pipelined like 16-bit ones, into 128-byte swizzled stages.
FP8_LOOP = """
#L0 = #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>
#L2 = #blocked<[16, 1], [8, 4], [1, 4], [0, 1]>
#L1 = #mma<[4, 1]>
tt.func @k(%a_ptrs: tensor<64x128x!ptr<f8e4nv>, #L0>, %b_ptrs: tensor<128x64x!ptr<f8e4nv>, #L2>, %c_ptrs: tensor<64x64x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step_a = arith.constant {value = 128} : tensor<64x128xi32, #L0>
  %step_b = arith.constant {value = 128} : tensor<128x64xi32, #L2>
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L1>
  %acc, %pa, %pb = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs : tensor<64x64xf32, #L1>, tensor<64x128x!ptr<f8e4nv>, #L0>, tensor<128x64x!ptr<f8e4nv>, #L2> {
  ^bb(%i: i32, %acc0: tensor<64x64xf32, #L1>, %pa0: tensor<64x128x!ptr<f8e4nv>, #L0>, %pb0: tensor<128x64x!ptr<f8e4nv>, #L2>):
    %a = tt.load %pa0 {vec = 16} : tensor<64x128xf8e4nv, #L0>
    %b = tt.load %pb0 {vec = 16} : tensor<128x64xf8e4nv, #L2>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", instr = "wgmma.m64n64k32.e4m3", mma = [4, 1]} : tensor<64x64xf32, #L1>
    %pa1 = tt.addptr %pa0, %step_a : tensor<64x128x!ptr<f8e4nv>, #L0>
    %pb1 = tt.addptr %pb0, %step_b : tensor<128x64x!ptr<f8e4nv>, #L2>
    scf.yield %d, %pa1, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

FP8_PIPELINED_2 = """
#L0 = #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>
#L1 = #blocked<[16, 1], [8, 4], [1, 4], [0, 1]>
#L2 = #mma<[4, 1]>

tt.func @k(%a_ptrs: tensor<64x128x!ptr<f8e4nv>, #L0>, %b_ptrs: tensor<128x64x!ptr<f8e4nv>, #L1>, %c_ptrs: tensor<64x64x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step_a = arith.constant {value = 128} : tensor<64x128xi32, #L0>
  %step_b = arith.constant {value = 128} : tensor<128x64xi32, #L1>
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L2>
  %a_stages = ttg.local_alloc {operand = "a", stages = 2} : !memdesc<2x64x128xf8e4nv, order=1,0, pad=0, swizzle=128>
  %b_stages = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x128x64xf8e4nv, order=0,1, pad=0, swizzle=128>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %n {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %a_stages, %0 : !memdesc<64x128xf8e4nv, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %a_ptrs, %2, %1 {vec = 16}
  %3 = ttg.memdesc_index %b_stages, %0 : !memdesc<128x64xf8e4nv, order=0,1, pad=0, swizzle=128>
  ttg.async_copy %b_ptrs, %3, %1 {vec = 16}
  ttg.async_commit
  %pa1 = tt.addptr %a_ptrs, %step_a : tensor<64x128x!ptr<f8e4nv>, #L0>
  %pb1 = tt.addptr %b_ptrs, %step_b : tensor<128x64x!ptr<f8e4nv>, #L1>
  %4 = arith.constant {value = 0} : i32
  %5 = arith.constant {value = 1} : i32
  %acc, %6, %7, %8, %9 = scf.for %c0, %n, %c1, %zero, %pa1, %pb1, %4, %5 {pipelined_stages = 2} : tensor<64x64xf32, #L2>, tensor<64x128x!ptr<f8e4nv>, #L0>, tensor<128x64x!ptr<f8e4nv>, #L1>, i32, i32 {
  ^bb(%i: i32, %acc0: tensor<64x64xf32, #L2>, %pa0_ahead: tensor<64x128x!ptr<f8e4nv>, #L0>, %pb0_ahead: tensor<128x64x!ptr<f8e4nv>, #L1>, %read_stage: i32, %write_stage: i32):
    ttg.async_wait %a_stages, %b_stages {pending = 0}
    %10 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x128xf8e4nv, order=1,0, pad=0, swizzle=128>
    %11 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<128x64xf8e4nv, order=0,1, pad=0, swizzle=128>
    %d = tt.dot %10, %11, %acc0 {input_precision = "ieee", instr = "wgmma.m64n64k32.e4m3", mma = [4, 1], wgmma_async = true} : tensor<64x64xf32, #L2>
    %d_1 = ttg.dot_wait %d {pending = 1} : tensor<64x64xf32, #L2>
    ttg.barrier {reason = "every warpgroup's previous wgmma has read the stage refilled next"}
    %12 = arith.constant {value = 1} : i32
    %13 = arith.addi %i, %12 : i32
    %14 = arith.cmpi %13, %n {predicate = "slt"} : i1
    %15 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<64x128xf8e4nv, order=1,0, pad=0, swizzle=128>
    ttg.async_copy %pa0_ahead, %15, %14 {vec = 16}
    %16 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<128x64xf8e4nv, order=0,1, pad=0, swizzle=128>
    ttg.async_copy %pb0_ahead, %16, %14 {vec = 16}
    ttg.async_commit
    %pa1_1 = tt.addptr %pa0_ahead, %step_a : tensor<64x128x!ptr<f8e4nv>, #L0>
    %pb1_1 = tt.addptr %pb0_ahead, %step_b : tensor<128x64x!ptr<f8e4nv>, #L1>
    %17 = arith.constant {value = 1} : i32
    %18 = arith.constant {value = 1} : i32
    %19 = arith.cmpi %read_stage, %18 {predicate = "eq"} : i1
    %20 = arith.constant {value = 0} : i32
    %21 = arith.addi %read_stage, %17 : i32
    %22 = arith.select %19, %20, %21 : i32
    %23 = arith.cmpi %write_stage, %18 {predicate = "eq"} : i1
    %24 = arith.constant {value = 0} : i32
    %25 = arith.addi %write_stage, %17 : i32
    %26 = arith.select %23, %24, %25 : i32
    scf.yield %d_1, %pa1_1, %pb1_1, %22, %26
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<64x64xf32, #L2>
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  tt.store %c_ptrs, %acc_1
  tt.return
}
"""


def test_fp8_k_major_operands_take_the_pipelined_path(check):
    _, stats = check(pipeline_dot_operands, FP8_LOOP, FP8_PIPELINED_2, GpuOptions(num_warps=4, num_stages=2))
    assert stats == {"pipelined": 1, "buffers": 2, "skipped": [], "overlapped_wgmma": 1}


def _b_n_contiguous(text):
    """B's layout with N contiguous: b = w of a row-major [K, N] w."""
    return text.replace("#L2 = #blocked<[16, 1], [8, 4], [1, 4], [0, 1]>", "#L2 = #blocked<[1, 16], [32, 1], [4, 1], [1, 0]>")


def test_fp8_n_contiguous_b_keeps_the_register_path(run_pass):
    """wgmma cannot transpose an 8-bit B and cp.async cannot either: B stays a load the dot stages K-major every
    iteration (as Triton 3.6 does), A is still pipelined, and the dot waits at once (no overlap)."""
    m, stats = run_pass(pipeline_dot_operands, _b_n_contiguous(FP8_LOOP), GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == 1 and stats["buffers"] == 1 and "overlapped_wgmma" not in stats
    assert any("e4m3 operand b is N-contiguous" in s for s in stats["skipped"]), stats
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    assert [(a.attrs["operand"], a.result.type.order, a.result.type.swizzle) for a in allocs] == [("a", (1, 0), 128)]
    dot = next(op for op in m.kernel.walk() if op.name == "tt.dot")
    assert dot.operands[0].type.is_memdesc() and dot.operands[1].defining_op.name == "tt.load"
    assert not dot.attrs.get("wgmma_async")


@pytest.mark.parametrize("k_contiguous", [True, False])
def test_fp8_a_read_through_a_transpose_must_be_k_major_in_the_stage(run_pass, k_contiguous):
    """A loaded as a [K, M] tile and transposed for the dot: pipelined when the load's contiguous dim is K (the
    stage, read transposed, is K-major), not when it is M."""
    text = FP8_LOOP.replace("%a = tt.load %pa0 {vec = 16} : tensor<64x128xf8e4nv, #L0>",
                            "%at = tt.load %pb0 {vec = 16} : tensor<128x64xf8e4nv, #L2>\n"
                            "    %a = tt.trans %at {order = [1, 0]} : tensor<64x128xf8e4nv, #L0>")
    text = text.replace("%b = tt.load %pb0", "%b = tt.load %pb0x").replace(
        "%pb0: tensor<128x64x!ptr<f8e4nv>, #L2>):", "%pb0: tensor<128x64x!ptr<f8e4nv>, #L2>):\n"
        "    %pb0x = tt.addptr %pb0, %step_b : tensor<128x64x!ptr<f8e4nv>, #L2>")
    m, stats = run_pass(pipeline_dot_operands, text if k_contiguous else _b_n_contiguous(text),
                        GpuOptions(num_warps=4, num_stages=3))
    if k_contiguous:
        assert stats["buffers"] == 2 and not stats["skipped"], stats
        dot = next(op for op in m.kernel.walk() if op.name == "tt.dot")
        assert dot.operands[0].type.order == (1, 0)  # the [K, M] stage (order 0,1) read transposed: K-major
    else:
        assert stats["pipelined"] == 0 and "e4m3 operand a is M-contiguous" in stats["skipped"][0], stats


@pytest.mark.parametrize("elem, instr, vec, ok", [
    ("i8", "wgmma.m64n64k32.s8", 16, True), ("f8e5", "wgmma.m64n64k32.e5m2", 4, True),
    ("f8e4nv", "wgmma.m64n64k32.e4m3", 2, False),
    ("i8", "mma.sync.m16n8k32.s8", 16, True)])  # int8 on mma.sync: staged too (`dot_stages.mma_sync_i8`)
def test_8bit_operands_need_wgmma_and_4_byte_runs(run_pass, elem, instr, vec, ok):
    text = FP8_LOOP.replace("f8e4nv", elem).replace("wgmma.m64n64k32.e4m3", instr).replace("{vec = 16}", f"{{vec = {vec}}}")
    if elem == "i8":
        text = text.replace("xf32", "xi32").replace("!ptr<f32>", "!ptr<i32>").replace("value = 0.0", "value = 0")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert stats["pipelined"] == int(ok), stats
    if not ok:
        want = "2-byte accesses" if vec == 2 else "i8 elements read by mma.sync"
        assert want in stats["skipped"][0], stats
