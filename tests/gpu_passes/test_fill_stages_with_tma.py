"""fill_stages_with_tma: in a loop pipeline_dot_operands pipelined, the block-pointer stages wgmma reads
(swizzled) whose tensor the host can describe are filled by TMA on sm_90: a tensor map per operand (a kernel
parameter made from the kernel's arguments), one mbarrier per stage announced the stage's bytes, the phase
parity carried by the loop; the cp.async copies, their commit and their wait go. What keeps cp.async says
why."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import allocate_shared, fill_stages_with_tma, insert_barriers

# pipeline_dot_operands' output for a block-pointer matmul loop read by wgmma (2 stages, sm_90): cp.async copies
# from the blocks' addresses into swizzled stages, one wgmma in flight
PIPELINED_2 = """
#L0 = #mma<[4, 1]>
#L1 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L2 = #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>

tt.func @k(%a_ptr: !ptr<f16> {tt.divisibility = 16}, %b_ptr: !ptr<f16> {tt.divisibility = 16}, %c_ptrs: tensor<64x64x!ptr<f32>, #L0>, %M: i32, %N: i32 {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}, %sa: i32 {tt.divisibility = 16}, %sb: i32 {tt.divisibility = 16}) {
  %c0 = arith.constant {value = 0} : i32
  %c32 = arith.constant {value = 32} : i32
  %one = arith.constant {value = 1} : i64
  %m64 = arith.extsi %M : i64
  %n64 = arith.extsi %N : i64
  %k64 = arith.extsi %K : i64
  %sa64 = arith.extsi %sa : i64
  %sb64 = arith.extsi %sb : i64
  %pa = tt.make_block_ptr %a_ptr, %m64, %k64, %sa64, %one, %c0, %c0 {block_shape = [64, 32], order = [1, 0]} : !blockptr<f16, 64x32>
  %pb = tt.make_block_ptr %b_ptr, %k64, %n64, %sb64, %one, %c0, %c0 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L0>
  %a_stages = ttg.local_alloc {operand = "a", stages = 2} : !memdesc<2x64x32xf16, order=1,0, pad=0, swizzle=64>
  %b_stages = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x32x64xf16, order=1,0, pad=0, swizzle=128>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %K {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %a_stages, %0 : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
  %3, %4 = ttg.block_ptr_addresses %pa {boundary_check = [0, 1]} : tensor<64x32x!ptr<f16>, #L1>, tensor<64x32xi1, #L1>
  ttg.async_copy %3, %2, %1, %4 {vec = 8}
  %5 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
  %6, %7 = ttg.block_ptr_addresses %pb {boundary_check = [0, 1]} : tensor<32x64x!ptr<f16>, #L2>, tensor<32x64xi1, #L2>
  ttg.async_copy %6, %5, %1, %7 {vec = 8}
  ttg.async_commit
  %pa1 = tt.advance %pa, %c0, %c32 : !blockptr<f16, 64x32>
  %pb1 = tt.advance %pb, %c32, %c0 : !blockptr<f16, 32x64>
  %8 = arith.constant {value = 0} : i32
  %9 = arith.constant {value = 1} : i32
  %acc, %10, %11, %12, %13 = scf.for %c0, %K, %c32, %zero, %pa1, %pb1, %8, %9 {pipelined_stages = 2} : tensor<64x64xf32, #L0>, !blockptr<f16, 64x32>, !blockptr<f16, 32x64>, i32, i32 {
  ^bb(%k: i32, %acc0: tensor<64x64xf32, #L0>, %pa0_ahead: !blockptr<f16, 64x32>, %pb0_ahead: !blockptr<f16, 32x64>, %read_stage: i32, %write_stage: i32):
    ttg.async_wait %a_stages, %b_stages {pending = 0}
    %14 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %15 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    %d = tt.dot %14, %15, %acc0 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1], wgmma_async = true} : tensor<64x64xf32, #L0>
    %d_1 = ttg.dot_wait %d {pending = 1} : tensor<64x64xf32, #L0>
    ttg.barrier {reason = "every warpgroup's previous wgmma has read the stage refilled next"}
    %16 = arith.constant {value = 32} : i32
    %17 = arith.addi %k, %16 : i32
    %18 = arith.cmpi %17, %K {predicate = "slt"} : i1
    %19 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %20, %21 = ttg.block_ptr_addresses %pa0_ahead {boundary_check = [0, 1]} : tensor<64x32x!ptr<f16>, #L1>, tensor<64x32xi1, #L1>
    ttg.async_copy %20, %19, %18, %21 {vec = 8}
    %22 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    %23, %24 = ttg.block_ptr_addresses %pb0_ahead {boundary_check = [0, 1]} : tensor<32x64x!ptr<f16>, #L2>, tensor<32x64xi1, #L2>
    ttg.async_copy %23, %22, %18, %24 {vec = 8}
    ttg.async_commit
    %pa1_1 = tt.advance %pa0_ahead, %c0, %c32 : !blockptr<f16, 64x32>
    %pb1_1 = tt.advance %pb0_ahead, %c32, %c0 : !blockptr<f16, 32x64>
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
    scf.yield %d_1, %pa1_1, %pb1_1, %30, %34
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<64x64xf32, #L0>
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  tt.store %c_ptrs, %acc_1
  tt.return
}
"""

TMA_2 = """
#L0 = #mma<[4, 1]>

tt.func @k(%a_ptr: !ptr<f16> {tt.divisibility = 16}, %b_ptr: !ptr<f16> {tt.divisibility = 16}, %c_ptrs: tensor<64x64x!ptr<f32>, #L0>, %M: i32, %N: i32 {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}, %sa: i32 {tt.divisibility = 16}, %sb: i32 {tt.divisibility = 16}) {
  %c0 = arith.constant {value = 0} : i32
  %c32 = arith.constant {value = 32} : i32
  %one = arith.constant {value = 1} : i64
  %m64 = arith.extsi %M : i64
  %n64 = arith.extsi %N : i64
  %k64 = arith.extsi %K : i64
  %sa64 = arith.extsi %sa : i64
  %sb64 = arith.extsi %sb : i64
  %pa = tt.make_block_ptr %a_ptr, %m64, %k64, %sa64, %one, %c0, %c0 {block_shape = [64, 32], order = [1, 0]} : !blockptr<f16, 64x32>
  %pb = tt.make_block_ptr %b_ptr, %k64, %n64, %sb64, %one, %c0, %c0 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L0>
  %a_tensormap = ttg.tensormap %a_ptr, %K, %M, %sa {box = [32, 64], swizzle = 64} : i64
  %a_stages = ttg.local_alloc {fill = "tma", operand = "a", stages = 2} : !memdesc<2x64x32xf16, order=1,0, pad=0, swizzle=64>
  %b_tensormap = ttg.tensormap %b_ptr, %N, %K, %sb {box = [64, 32], swizzle = 128} : i64
  %b_stages = ttg.local_alloc {fill = "tma", operand = "b", stages = 2} : !memdesc<2x32x64xf16, order=1,0, pad=0, swizzle=128>
  %stage_bars = ttg.mbarrier_alloc {stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %K {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %stage_bars, %0 : !memdesc<1x1xi64, order=1,0, pad=0>
  ttg.mbarrier_expect %2, %1 {bytes = 8192}
  %3 = ttg.memdesc_index %a_stages, %0 : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
  ttg.tma_copy %a_tensormap, %pa, %3, %2, %1
  %4 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
  ttg.tma_copy %b_tensormap, %pb, %4, %2, %1
  %pa1 = tt.advance %pa, %c0, %c32 : !blockptr<f16, 64x32>
  %pb1 = tt.advance %pb, %c32, %c0 : !blockptr<f16, 32x64>
  %5 = arith.constant {value = 0} : i32
  %6 = arith.constant {value = 1} : i32
  %7 = arith.constant {value = 0} : i32
  %acc, %8, %9, %10, %11, %12 = scf.for %c0, %K, %c32, %zero, %pa1, %pb1, %5, %6, %7 {pipelined_stages = 2} : tensor<64x64xf32, #L0>, !blockptr<f16, 64x32>, !blockptr<f16, 32x64>, i32, i32, i32 {
  ^bb(%k: i32, %acc0: tensor<64x64xf32, #L0>, %pa0_ahead: !blockptr<f16, 64x32>, %pb0_ahead: !blockptr<f16, 32x64>, %read_stage: i32, %write_stage: i32, %phase: i32):
    %13 = ttg.memdesc_index %stage_bars, %read_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %13, %phase
    %14 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %15 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    %d = tt.dot %14, %15, %acc0 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1], wgmma_async = true} : tensor<64x64xf32, #L0>
    %d_1 = ttg.dot_wait %d {pending = 1} : tensor<64x64xf32, #L0>
    ttg.barrier {reason = "every warpgroup's previous wgmma has read the stage refilled next"}
    %16 = arith.constant {value = 32} : i32
    %17 = arith.addi %k, %16 : i32
    %18 = arith.cmpi %17, %K {predicate = "slt"} : i1
    %19 = ttg.memdesc_index %stage_bars, %write_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_expect %19, %18 {bytes = 8192}
    %20 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    ttg.tma_copy %a_tensormap, %pa0_ahead, %20, %19, %18
    %21 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.tma_copy %b_tensormap, %pb0_ahead, %21, %19, %18
    %pa1_1 = tt.advance %pa0_ahead, %c0, %c32 : !blockptr<f16, 64x32>
    %pb1_1 = tt.advance %pb0_ahead, %c32, %c0 : !blockptr<f16, 32x64>
    %22 = arith.constant {value = 1} : i32
    %23 = arith.constant {value = 1} : i32
    %24 = arith.cmpi %read_stage, %23 {predicate = "eq"} : i1
    %25 = arith.constant {value = 0} : i32
    %26 = arith.addi %read_stage, %22 : i32
    %27 = arith.select %24, %25, %26 : i32
    %28 = arith.xori %phase, %22 : i32
    %29 = arith.select %24, %28, %phase : i32
    %30 = arith.cmpi %write_stage, %23 {predicate = "eq"} : i1
    %31 = arith.constant {value = 0} : i32
    %32 = arith.addi %write_stage, %22 : i32
    %33 = arith.select %30, %31, %32 : i32
    scf.yield %d_1, %pa1_1, %pb1_1, %27, %33, %29
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<64x64xf32, #L0>
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  ttg.mbarrier_inval %stage_bars
  tt.store %c_ptrs, %acc_1
  tt.return
}
"""


SM90 = GpuOptions(num_warps=4, num_stages=2, arch=90)


def _ops(m):
    return [op.name for op in m.kernel.walk()]


def test_block_pointer_stages_are_filled_by_tma(check):
    _, stats = check(fill_stages_with_tma, PIPELINED_2, TMA_2, SM90)
    assert stats == {"tma": 2}


def test_sm80_and_disabled_tma_keep_cp_async(check):
    for options, why in ((GpuOptions(num_warps=4, num_stages=2, arch=80), "sm_80 has no TMA"),
                         (GpuOptions(num_warps=4, num_stages=2, tma=False), "TMA disabled (enable_tma=False)")):
        _, stats = check(fill_stages_with_tma, PIPELINED_2, PIPELINED_2, options)
        assert stats == {"tma": 0, "no_tma": [f"line ? operand a: {why}", f"line ? operand b: {why}"]}


def test_a_per_program_base_keeps_cp_async_for_that_operand(run_pass):
    """A's base moved by a per-program offset: no tensor map can be made on the host, so A keeps cp.async (its
    commit group and its wait stay) while B's stages are filled by TMA."""
    text = PIPELINED_2.replace("%pa = tt.make_block_ptr %a_ptr,", "%a_off = tt.addptr %a_ptr, %c32 : !ptr<f16>\n"
                               "  %pa = tt.make_block_ptr %a_off,")
    m, stats = run_pass(fill_stages_with_tma, text, SM90)
    assert stats == {"tma": 1, "no_tma": ["line ? operand a: the base has a per-program offset (pass offsets= to "
                                          "tl.make_block_ptr instead)"]}
    names = _ops(m)
    assert names.count("ttg.tma_copy") == 2 and names.count("ttg.async_copy") == 2
    assert names.count("ttg.async_commit") == 2 and names.count("ttg.mbarrier_expect") == 2
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0].ops
    assert [op.name for op in body[:3]] == ["ttg.memdesc_index", "ttg.mbarrier_wait", "ttg.async_wait"]
    a_stages = next(op for op in m.kernel.body.ops if op.name == "ttg.local_alloc").result
    assert list(body[2].operands) == [a_stages] and body[2].attrs == {"pending": 0}


def test_a_descriptor_over_a_per_program_base_gets_a_map_made_in_the_kernel(run_pass):
    """The same per-program base on a tensor descriptor's block pointer (`descriptor` attribute, whose 16-byte
    alignment Triton's contract promises): A's map is a ttg.make_tensormap before the prologue's first copy, after
    the offset it depends on; B keeps its host map (a kernel parameter)."""
    text = PIPELINED_2.replace("%pa = tt.make_block_ptr %a_ptr,", "%a_off = tt.addptr %a_ptr, %c32 : !ptr<f16>\n"
                               "  %pa = tt.make_block_ptr %a_off,")
    text = text.replace("{block_shape = [64, 32], order = [1, 0]}", "{block_shape = [64, 32], descriptor = true, "
                        "order = [1, 0]}", 1)
    m, stats = run_pass(fill_stages_with_tma, text, SM90)
    assert stats == {"tma": 2, "device_tensormaps": 1}, stats
    ops = list(m.kernel.walk())
    names = [op.name for op in ops]
    made = names.index("ttg.make_tensormap")
    assert names.count("ttg.tensormap") == 1 and names.count("ttg.async_copy") == 0
    assert names.index("tt.addptr") < made < names.index("ttg.tma_copy")
    assert ops[made].attrs["box"] == [32, 64] and ops[made].attrs["dtype"] == "f16"


def test_a_shape_computed_in_the_kernel_keeps_cp_async(run_pass):
    text = PIPELINED_2.replace("%n64 = arith.extsi %N : i64", "%n2 = arith.subi %N, %N : i32\n"
                               "  %n64 = arith.extsi %n2 : i64")
    _, stats = run_pass(fill_stages_with_tma, text, SM90)
    assert stats == {"tma": 1, "no_tma": ["line ? operand b: its shape is computed in the kernel (the host makes "
                                          "the tensor map from arguments)"]}


@pytest.mark.parametrize("op", ["addi", "muli"])
def test_a_shape_the_host_computes_takes_tma(run_pass, op):
    """Sums and products of arguments (tutorial 06's `Z * H * N_CTX` rows): the launcher evaluates them, so TMA
    fills both operands; the tensor map keeps the in-kernel value as its operand (the recipe names the op)."""
    text = PIPELINED_2.replace("%n64 = arith.extsi %N : i64", f"%n2 = arith.{op} %N, %N : i32\n"
                               "  %n64 = arith.extsi %n2 : i64")
    m, stats = run_pass(fill_stages_with_tma, text, SM90)
    assert stats == {"tma": 2}
    from kernellab.compiler.codegen.lower_tma import tensormap_recipes

    recipes, _ = tensormap_recipes(m.kernel)
    assert any(d[0] == op and d[1] == 32 for r in recipes for d in r["dims"])


def test_mbarriers_and_tma_buffers_in_the_shared_plan(run_pass):
    m, _ = run_pass(fill_stages_with_tma, PIPELINED_2, SM90)
    allocate_shared.run(m)
    assert insert_barriers.run(m) == {"barriers": 0}
    plan = {b["op"] + str(b["line"]) + str(i): b for i, b in enumerate(m.shared_plan)}
    bufs = [b for b in plan.values() if b["op"] == "ttg.local_alloc"]
    bars = [b for b in plan.values() if b["op"] == "ttg.mbarrier_alloc"]
    assert len(bars) == 1 and bars[0]["size"] == 2 * 16 and bars[0]["stages"] == 2
    assert bars[0]["mbarriers"] == [bars[0]["offset"] + 16 * s for s in range(2)]
    assert [(b["filled_by"], b["stages"], b["swizzle"][:7]) for b in bufs] == [("TMA", 2, "64-byte"),
                                                                              ("TMA", 2, "128-byt")]
    assert all(b["mbarriers"] == bars[0]["mbarriers"] and b["offset"] % 1024 == 0 for b in bufs)
    # the barriers live from their initialization to their invalidation after the loop, apart from the stages
    assert all(bars[0]["offset"] >= b["offset"] + b["size"] or b["offset"] >= bars[0]["offset"] + 32 for b in bufs)

