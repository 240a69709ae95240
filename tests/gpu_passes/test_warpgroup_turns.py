"""warpgroup_turns: attention's loop on two warpgroups (8 warps, sm_90), as pipeline_dot_operands pipelined it
(bar.sync after each stage's wait and before each refill), is rewritten to need no CTA-wide barrier: copies
complete on per-stage "full" mbarriers (every thread arrives), warps release stages on "empty" mbarriers (one
arrival per warp), and the warpgroups take turns on the tensor cores. Loops where the warpgroups must meet, or
with one warpgroup, keep bar.sync."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import (
    fill_stages_with_tma,
    pipeline_dot_operands,
    stage_invariant_dot_operands,
    warpgroup_turns,
)
from kernellab.compiler.printer import print_module

# pipeline_dot_operands' output for attention's loop on 8 warps, 3 stages (q staged once before it): s = q·k
# waited for at once, p·v kept in flight, a barrier before the refill
PIPELINED_ATTENTION = """
#L0 = #blocked<[1, 8], [8, 4], [8, 1], [1, 0]>
#L1 = #mma<[8, 1]>

tt.func @k(%q_ptrs: tensor<128x64x!ptr<f16>, #L0>, %k_ptrs: tensor<64x64x!ptr<f16>, #L0>, %v_ptrs: tensor<64x64x!ptr<f16>, #L0>, %o_ptrs: tensor<128x64x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 64} : tensor<64x64xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<128x64xf32, #L1>
  %q = tt.load %q_ptrs {vec = 8} : tensor<128x64xf16, #L0>
  %a_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x128x64xf16, order=1,0, pad=0, swizzle=128>
  %0 = arith.constant {value = 0} : i32
  %1 = ttg.memdesc_index %a_tile, %0 : !memdesc<128x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.local_store %q, %1
  ttg.barrier {reason = "the dot operands stored above are in shared memory"}
  %b_stages = ttg.local_alloc {operand = "b", stages = 3} : !memdesc<3x64x64xf16, order=1,0, pad=0, swizzle=128>
  %b_stages_1 = ttg.local_alloc {operand = "b", stages = 3} : !memdesc<3x64x64xf16, order=1,0, pad=0, swizzle=128>
  %2 = arith.constant {value = 0} : i32
  %3 = arith.cmpi %c0, %n {predicate = "slt"} : i1
  %4 = ttg.memdesc_index %b_stages, %2 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %k_ptrs, %4, %3 {vec = 8}
  %5 = ttg.memdesc_index %b_stages_1, %2 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %v_ptrs, %5, %3 {vec = 8}
  ttg.async_commit
  %pk1 = tt.addptr %k_ptrs, %step : tensor<64x64x!ptr<f16>, #L0>
  %pv1 = tt.addptr %v_ptrs, %step : tensor<64x64x!ptr<f16>, #L0>
  %6 = arith.constant {value = 1} : i32
  %7 = arith.addi %c0, %6 : i32
  %8 = arith.constant {value = 1} : i32
  %9 = arith.cmpi %7, %n {predicate = "slt"} : i1
  %10 = ttg.memdesc_index %b_stages, %8 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %pk1, %10, %9 {vec = 8}
  %11 = ttg.memdesc_index %b_stages_1, %8 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %pv1, %11, %9 {vec = 8}
  ttg.async_commit
  %pk1_1 = tt.addptr %pk1, %step : tensor<64x64x!ptr<f16>, #L0>
  %pv1_1 = tt.addptr %pv1, %step : tensor<64x64x!ptr<f16>, #L0>
  %12 = arith.constant {value = 0} : i32
  %13 = arith.constant {value = 2} : i32
  %acc, %14, %15, %16, %17 = scf.for %c0, %n, %c1, %zero, %pk1_1, %pv1_1, %12, %13 {pipelined_stages = 3} : tensor<128x64xf32, #L1>, tensor<64x64x!ptr<f16>, #L0>, tensor<64x64x!ptr<f16>, #L0>, i32, i32 {
  ^bb(%i: i32, %acc0: tensor<128x64xf32, #L1>, %pk0_ahead: tensor<64x64x!ptr<f16>, #L0>, %pv0_ahead: tensor<64x64x!ptr<f16>, #L0>, %read_stage: i32, %write_stage: i32):
    ttg.async_wait %b_stages, %b_stages_1 {pending = 1}
    %18 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %s = tt.dot %1, %18, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1]} : tensor<128x64xf32, #L1>
    %acc0_1 = ttg.dot_wait %acc0 {pending = 0} : tensor<128x64xf32, #L1>
    ttg.barrier {reason = "every warpgroup's previous wgmmas have read the stage refilled next"}
    %19 = arith.constant {value = 2} : i32
    %20 = arith.addi %i, %19 : i32
    %21 = arith.cmpi %20, %n {predicate = "slt"} : i1
    %22 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.async_copy %pk0_ahead, %22, %21 {vec = 8}
    %23 = ttg.memdesc_index %b_stages_1, %write_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.async_copy %pv0_ahead, %23, %21 {vec = 8}
    ttg.async_commit
    %pk1_2 = tt.addptr %pk0_ahead, %step : tensor<64x64x!ptr<f16>, #L0>
    %pv1_2 = tt.addptr %pv0_ahead, %step : tensor<64x64x!ptr<f16>, #L0>
    %p = arith.truncf %s : tensor<128x64xf16, #L1>
    %acc1 = arith.mulf %acc0_1, %s : tensor<128x64xf32, #L1>
    %24 = ttg.memdesc_index %b_stages_1, %read_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %d = tt.dot %p, %24, %acc1 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L1>
    %25 = arith.constant {value = 1} : i32
    %26 = arith.constant {value = 2} : i32
    %27 = arith.cmpi %read_stage, %26 {predicate = "eq"} : i1
    %28 = arith.constant {value = 0} : i32
    %29 = arith.addi %read_stage, %25 : i32
    %30 = arith.select %27, %28, %29 : i32
    %31 = arith.cmpi %write_stage, %26 {predicate = "eq"} : i1
    %32 = arith.constant {value = 0} : i32
    %33 = arith.addi %write_stage, %25 : i32
    %34 = arith.select %31, %32, %33 : i32
    scf.yield %d, %pk1_2, %pv1_2, %30, %34
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<128x64xf32, #L1>
  ttg.async_wait %b_stages, %b_stages_1 {pending = 0}
  tt.store %o_ptrs, %acc_1
  tt.return
}
"""

TURNS = """
#L0 = #blocked<[1, 8], [8, 4], [8, 1], [1, 0]>
#L1 = #mma<[8, 1]>

tt.func @k(%q_ptrs: tensor<128x64x!ptr<f16>, #L0>, %k_ptrs: tensor<64x64x!ptr<f16>, #L0>, %v_ptrs: tensor<64x64x!ptr<f16>, #L0>, %o_ptrs: tensor<128x64x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 64} : tensor<64x64xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<128x64xf32, #L1>
  %q = tt.load %q_ptrs {vec = 8} : tensor<128x64xf16, #L0>
  %a_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x128x64xf16, order=1,0, pad=0, swizzle=128>
  %0 = arith.constant {value = 0} : i32
  %1 = ttg.memdesc_index %a_tile, %0 : !memdesc<128x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.local_store %q, %1
  ttg.barrier {reason = "the dot operands stored above are in shared memory"}
  %b_stages = ttg.local_alloc {operand = "b", stages = 3} : !memdesc<3x64x64xf16, order=1,0, pad=0, swizzle=128>
  %b_stages_1 = ttg.local_alloc {operand = "b", stages = 3} : !memdesc<3x64x64xf16, order=1,0, pad=0, swizzle=128>
  %full_bars = ttg.mbarrier_alloc {count = 256, purpose = "full", stages = 3} : !memdesc<3x1x1xi64, order=1,0, pad=0>
  %empty_bars = ttg.mbarrier_alloc {count = 8, purpose = "empty", stages = 3} : !memdesc<3x1x1xi64, order=1,0, pad=0>
  %2 = arith.constant {value = 0} : i32
  %3 = arith.cmpi %c0, %n {predicate = "slt"} : i1
  %4 = ttg.memdesc_index %b_stages, %2 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %k_ptrs, %4, %3 {vec = 8}
  %5 = ttg.memdesc_index %b_stages_1, %2 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %v_ptrs, %5, %3 {vec = 8}
  ttg.async_commit
  %6 = ttg.memdesc_index %full_bars, %2 : !memdesc<1x1xi64, order=1,0, pad=0>
  ttg.async_arrive %6
  %pk1 = tt.addptr %k_ptrs, %step : tensor<64x64x!ptr<f16>, #L0>
  %pv1 = tt.addptr %v_ptrs, %step : tensor<64x64x!ptr<f16>, #L0>
  %7 = arith.constant {value = 1} : i32
  %8 = arith.addi %c0, %7 : i32
  %9 = arith.constant {value = 1} : i32
  %10 = arith.cmpi %8, %n {predicate = "slt"} : i1
  %11 = ttg.memdesc_index %b_stages, %9 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %pk1, %11, %10 {vec = 8}
  %12 = ttg.memdesc_index %b_stages_1, %9 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.async_copy %pv1, %12, %10 {vec = 8}
  ttg.async_commit
  %13 = ttg.memdesc_index %full_bars, %9 : !memdesc<1x1xi64, order=1,0, pad=0>
  ttg.async_arrive %13
  %pk1_1 = tt.addptr %pk1, %step : tensor<64x64x!ptr<f16>, #L0>
  %pv1_1 = tt.addptr %pv1, %step : tensor<64x64x!ptr<f16>, #L0>
  %14 = arith.constant {value = 0} : i32
  %15 = arith.constant {value = 2} : i32
  %16 = arith.constant {value = 0} : i32
  %17 = arith.constant {value = 1} : i32
  ttg.warpgroup_turn {kind = "start"}
  %acc, %18, %19, %20, %21, %22, %23 = scf.for %c0, %n, %c1, %zero, %pk1_1, %pv1_1, %14, %15, %16, %17 {pipelined_stages = 3} : tensor<128x64xf32, #L1>, tensor<64x64x!ptr<f16>, #L0>, tensor<64x64x!ptr<f16>, #L0>, i32, i32, i32, i32 {
  ^bb(%i: i32, %acc0: tensor<128x64xf32, #L1>, %pk0_ahead: tensor<64x64x!ptr<f16>, #L0>, %pv0_ahead: tensor<64x64x!ptr<f16>, #L0>, %read_stage: i32, %write_stage: i32, %phase: i32, %empty_phase: i32):
    %24 = ttg.memdesc_index %full_bars, %read_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %24, %phase {fence_proxy = true}
    %25 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %s = tt.dot %1, %25, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L1>
    ttg.warpgroup_turn {kind = "pass"}
    %s_1 = ttg.dot_wait %s {pending = 0} : tensor<128x64xf32, #L1>
    %acc0_1 = ttg.dot_wait %acc0 {pending = 0} : tensor<128x64xf32, #L1>
    %26 = ttg.memdesc_index %empty_bars, %write_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    %27 = arith.cmpi %i, %c0 {predicate = "ne"} : i1
    ttg.mbarrier_arrive %26, %27
    %p = arith.truncf %s_1 : tensor<128x64xf16, #L1>
    %acc1 = arith.mulf %acc0_1, %s_1 : tensor<128x64xf32, #L1>
    ttg.mbarrier_wait %26, %empty_phase
    %28 = arith.constant {value = 2} : i32
    %29 = arith.addi %i, %28 : i32
    %30 = arith.cmpi %29, %n {predicate = "slt"} : i1
    %31 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.async_copy %pk0_ahead, %31, %30 {vec = 8}
    %32 = ttg.memdesc_index %b_stages_1, %write_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.async_copy %pv0_ahead, %32, %30 {vec = 8}
    ttg.async_commit
    %33 = ttg.memdesc_index %full_bars, %write_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.async_arrive %33
    ttg.warpgroup_turn {kind = "wait"}
    %pk1_2 = tt.addptr %pk0_ahead, %step : tensor<64x64x!ptr<f16>, #L0>
    %pv1_2 = tt.addptr %pv0_ahead, %step : tensor<64x64x!ptr<f16>, #L0>
    %34 = ttg.memdesc_index %b_stages_1, %read_stage : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %d = tt.dot %p, %34, %acc1 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L1>
    %35 = arith.constant {value = 1} : i32
    %36 = arith.constant {value = 2} : i32
    %37 = arith.cmpi %read_stage, %36 {predicate = "eq"} : i1
    %38 = arith.constant {value = 0} : i32
    %39 = arith.addi %read_stage, %35 : i32
    %40 = arith.select %37, %38, %39 : i32
    %41 = arith.xori %phase, %35 : i32
    %42 = arith.select %37, %41, %phase : i32
    %43 = arith.cmpi %write_stage, %36 {predicate = "eq"} : i1
    %44 = arith.constant {value = 0} : i32
    %45 = arith.addi %write_stage, %35 : i32
    %46 = arith.select %43, %44, %45 : i32
    %47 = arith.xori %empty_phase, %35 : i32
    %48 = arith.select %43, %47, %empty_phase : i32
    scf.yield %d, %pk1_2, %pv1_2, %40, %46, %42, %48
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<128x64xf32, #L1>
  ttg.warpgroup_turn {kind = "finish"}
  ttg.async_wait %b_stages, %b_stages_1 {pending = 0}
  ttg.mbarrier_inval %full_bars
  ttg.mbarrier_inval %empty_bars
  tt.store %o_ptrs, %acc_1
  tt.return
}
"""

OPTIONS = GpuOptions(num_warps=8, num_stages=3, arch=90)


def test_attention_on_two_warpgroups_takes_turns(check):
    _, stats = check(warpgroup_turns, PIPELINED_ATTENTION, TURNS, OPTIONS)
    assert stats == {"warpgroup_turns": 1}


def test_the_protocol_of_the_turns(run_pass):
    """No CTA-wide barrier in the loop: q·k is issued async and the turn passes before its wait; the release of
    the previous iteration's stage follows the wait; the refill waits for every warp's release after the softmax;
    the turn is taken back right before p·v. Around the loop: start, then finish after the last wait."""
    m, _ = run_pass(warpgroup_turns, PIPELINED_ATTENTION, OPTIONS)
    top = m.kernel.body.ops
    names = [op.name for op in top]
    allocs = [op for op in top if op.name == "ttg.mbarrier_alloc"]
    assert [(a.attrs["purpose"], a.attrs["count"], a.attrs["stages"]) for a in allocs] == \
        [("full", 256, 3), ("empty", 8, 3)]
    at = names.index("scf.for")
    assert names[:at].count("ttg.async_arrive") == 2 and names[at - 1] == "ttg.warpgroup_turn"
    assert top[at - 1].attrs["kind"] == "start"
    loop = top[at]
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    assert "ttg.barrier" not in kinds and "ttg.async_wait" not in kinds
    first, second = [op for op in body if op.name == "tt.dot"]
    assert first.attrs["wgmma_async"] and second.attrs["wgmma_async"]
    full_wait, empty_wait = [op for op in body if op.name == "ttg.mbarrier_wait"]
    assert full_wait.attrs.get("fence_proxy") and not empty_wait.attrs.get("fence_proxy")
    turns = [op for op in body if op.name == "ttg.warpgroup_turn"]
    assert [t.attrs["kind"] for t in turns] == ["pass", "wait"]
    s_wait = next(op for op in body if op.name == "ttg.dot_wait" and op.operands[0] is first.result)
    release = next(op for op in body if op.name == "ttg.mbarrier_arrive")
    mul = next(op for op in body if op.name == "arith.mulf")
    i = body.index
    assert i(full_wait) < i(first) < i(turns[0]) < i(s_wait) < i(release) < i(mul) < i(empty_wait) \
        < kinds.index("ttg.async_copy") < kinds.index("ttg.async_arrive") < i(turns[1]) < i(second)
    # the release and the refill's wait name the same stage: the one the previous iteration read
    assert release.operands[0].defining_op.operands[1] is empty_wait.operands[0].defining_op.operands[1]
    after = [op.name for op in top[at + 1:]]
    assert after[:3] == ["ttg.dot_wait", "ttg.warpgroup_turn", "ttg.async_wait"]
    assert after.count("ttg.mbarrier_inval") == 2


def test_one_warpgroup_or_sm80_keeps_bar_sync(check):
    for options in (GpuOptions(num_warps=8, num_stages=3, arch=80),):
        _, stats = check(warpgroup_turns, PIPELINED_ATTENTION, PIPELINED_ATTENTION, options)
        assert stats == {"warpgroup_turns": 0}
    text = PIPELINED_ATTENTION.replace("mma = [8, 1]", "mma = [4, 2]")
    _, stats = check(warpgroup_turns, text, text, OPTIONS)
    assert stats == {"warpgroup_turns": 0}


def test_a_cta_barrier_in_the_body_keeps_bar_sync(check):
    """A CTA-wide barrier in the body (here `tl.debug_barrier()`) would deadlock against the turns."""
    text = PIPELINED_ATTENTION.replace("    %p = arith.truncf", "    tt.debug_barrier\n    %p = arith.truncf")
    _, stats = check(warpgroup_turns, text, text, OPTIONS)
    assert stats == {"warpgroup_turns": 0}


ATTENTION = """
#L0 = #blocked<[1, 8], [8, 4], [8, 1], [1, 0]>
#L1 = #mma<[8, 1]>
tt.func @k(%q_ptrs: tensor<128x64x!ptr<f16>, #L0>, %k_ptrs: tensor<64x64x!ptr<f16>, #L0>, %v_ptrs: tensor<64x64x!ptr<f16>, #L0>, %o_ptrs: tensor<128x64x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 64} : tensor<64x64xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<128x64xf32, #L1>
  %q = tt.load %q_ptrs {vec = 8} : tensor<128x64xf16, #L0>
  %acc, %pk, %pv = scf.for %c0, %n, %c1, %zero, %k_ptrs, %v_ptrs : tensor<128x64xf32, #L1>, tensor<64x64x!ptr<f16>, #L0>, tensor<64x64x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<128x64xf32, #L1>, %pk0: tensor<64x64x!ptr<f16>, #L0>, %pv0: tensor<64x64x!ptr<f16>, #L0>):
    %k = tt.load %pk0 {vec = 8} : tensor<64x64xf16, #L0>
    %s = tt.dot %q, %k, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1]} : tensor<128x64xf32, #L1>
    %p = arith.truncf %s : tensor<128x64xf16, #L1>
    %acc1 = arith.mulf %acc0, %s : tensor<128x64xf32, #L1>
    %v = tt.load %pv0 {vec = 8} : tensor<64x64xf16, #L0>
    %d = tt.dot %p, %v, %acc1 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1]} : tensor<128x64xf32, #L1>
    %pk1 = tt.addptr %pk0, %step : tensor<64x64x!ptr<f16>, #L0>
    %pv1 = tt.addptr %pv0, %step : tensor<64x64x!ptr<f16>, #L0>
    scf.yield %d, %pk1, %pv1
  }
  tt.store %o_ptrs, %acc
  tt.return
}
"""


def _text(m) -> str:
    return "\n".join(ln.strip() for ln in print_module(m, with_locs=False).splitlines() if ln.strip())


def test_the_dot_operand_passes_in_a_row(run_passes):
    """From tile loads to the turns: staging q and pipelining give the input above, the TMA pass leaves the
    pointer tiles alone, and the turns give the output above."""
    passes = [stage_invariant_dot_operands, pipeline_dot_operands, fill_stages_with_tma, warpgroup_turns]
    m, stats = run_passes(passes[:2], ATTENTION, OPTIONS)
    assert _text(m) == _text(parse_module(PIPELINED_ATTENTION))
    m, stats = run_passes(passes, ATTENTION, OPTIONS)
    assert stats[2] == {"tma": 0} and stats[3] == {"warpgroup_turns": 1}
    assert _text(m) == _text(parse_module(TURNS))
