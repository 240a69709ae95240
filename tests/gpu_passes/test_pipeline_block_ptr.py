"""pipeline_dot_operands on block-pointer loads (`tl.load(block_ptr, boundary_check=...)` carried through the
loop by `tl.advance`): the same stages and structure as pointer tiles, filled by cp.async from the block's
addresses and bounds mask (zeros outside); what cannot be pipelined says why. On sm_90 fill_stages_with_tma
then puts swizzled stages on TMA (test_fill_stages_with_tma.py)."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import pipeline_dot_operands

MMA_SYNC_LOOP = """
#L0 = #blocked<[1, 1], [2, 16], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
tt.func @k(%a_ptr: !ptr<f16> {tt.divisibility = 16}, %b_ptr: !ptr<f16> {tt.divisibility = 16}, %c_ptrs: tensor<64x64x!ptr<f32>, #L1>, %M: i32, %N: i32 {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}, %sa: i32 {tt.divisibility = 16}, %sb: i32 {tt.divisibility = 16}) {
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
  %zero = arith.constant {value = 0.0} : tensor<64x64xf32, #L1>
  %acc, %pa_end, %pb_end = scf.for %c0, %K, %c32, %zero, %pa, %pb : tensor<64x64xf32, #L1>, !blockptr<f16, 64x32>, !blockptr<f16, 32x64> {
  ^bb(%k: i32, %acc0: tensor<64x64xf32, #L1>, %pa0: !blockptr<f16, 64x32>, %pb0: !blockptr<f16, 32x64>):
    %a = tt.load %pa0 {boundary_check = [0, 1]} : tensor<64x32xf16, #L0>
    %b = tt.load %pb0 {boundary_check = [0, 1]} : tensor<32x64xf16, #L0>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<64x64xf32, #L1>
    %pa1 = tt.advance %pa0, %c0, %c32 : !blockptr<f16, 64x32>
    %pb1 = tt.advance %pb0, %c32, %c0 : !blockptr<f16, 32x64>
    scf.yield %d, %pa1, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

CP_ASYNC_2 = """
#L0 = #mma<[2, 2]>
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
  %a_stages = ttg.local_alloc {operand = "a", stages = 2} : !memdesc<2x64x32xf16, order=1,0, pad=8>
  %b_stages = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x32x64xf16, order=1,0, pad=8>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %K {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %a_stages, %0 : !memdesc<64x32xf16, order=1,0, pad=8>
  %3, %4 = ttg.block_ptr_addresses %pa {boundary_check = [0, 1]} : tensor<64x32x!ptr<f16>, #L1>, tensor<64x32xi1, #L1>
  ttg.async_copy %3, %2, %1, %4 {vec = 8}
  %5 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x64xf16, order=1,0, pad=8>
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
    %14 = arith.constant {value = 32} : i32
    %15 = arith.addi %k, %14 : i32
    %16 = arith.cmpi %15, %K {predicate = "slt"} : i1
    %17 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<64x32xf16, order=1,0, pad=8>
    %18, %19 = ttg.block_ptr_addresses %pa0_ahead {boundary_check = [0, 1]} : tensor<64x32x!ptr<f16>, #L1>, tensor<64x32xi1, #L1>
    ttg.async_copy %18, %17, %16, %19 {vec = 8}
    %20 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x64xf16, order=1,0, pad=8>
    %21, %22 = ttg.block_ptr_addresses %pb0_ahead {boundary_check = [0, 1]} : tensor<32x64x!ptr<f16>, #L2>, tensor<32x64xi1, #L2>
    ttg.async_copy %21, %20, %16, %22 {vec = 8}
    ttg.async_commit
    %pa1_1 = tt.advance %pa0_ahead, %c0, %c32 : !blockptr<f16, 64x32>
    %pb1_1 = tt.advance %pb0_ahead, %c32, %c0 : !blockptr<f16, 32x64>
    %23 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=8>
    %24 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x64xf16, order=1,0, pad=8>
    %d = tt.dot %23, %24, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<64x64xf32, #L0>
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
    scf.yield %d, %pa1_1, %pb1_1, %30, %34
  }
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  tt.store %c_ptrs, %acc
  tt.return
}
"""

# the same loop read by wgmma: all four warps along M
WGMMA_LOOP = MMA_SYNC_LOOP.replace("#L1 = #mma<[2, 2]>", "#L1 = #mma<[4, 1]>").replace(
    'mma = [2, 2]}', 'instr = "wgmma.m64n64k16.f16", mma = [4, 1]}')


def test_block_pointer_tiles_are_copied_by_cp_async(check):
    _, stats = check(pipeline_dot_operands, MMA_SYNC_LOOP, CP_ASYNC_2, GpuOptions(num_warps=4, num_stages=2, arch=80))
    assert stats == {"pipelined": 1, "buffers": 2, "skipped": []}


def _ops(m):
    return [op.name for op in m.kernel.walk()]


def test_wgmma_stages_are_swizzled_and_still_filled_by_cp_async(run_pass):
    m, stats = run_pass(pipeline_dot_operands, WGMMA_LOOP, GpuOptions(num_warps=4, num_stages=3, arch=90))
    assert stats["pipelined"] == 1 and stats["overlapped_wgmma"] == 1
    assert "ttg.tma_copy" not in _ops(m) and _ops(m).count("ttg.async_copy") == 2 * 3
    assert _ops(m).count("ttg.block_ptr_addresses") == 2 * 3
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    assert [a.result.type.swizzle for a in allocs] == [64, 128] and all("fill" not in a.attrs for a in allocs)


def test_nan_padding_is_not_pipelined(run_pass):
    text = MMA_SYNC_LOOP.replace('%a = tt.load %pa0 {boundary_check = [0, 1]}',
                                 '%a = tt.load %pa0 {boundary_check = [0, 1], padding = "nan"}')
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3, arch=80))
    assert stats["pipelined"] == 1 and _ops(m).count("tt.load") == 1  # B still is
    assert any('operand a: padding_option="nan"' in s for s in stats["skipped"])


def test_unknown_stride_alignment_keeps_the_register_path(run_pass):
    # without the %16 specialization of A's row stride the copies could only move 2 bytes
    text = MMA_SYNC_LOOP.replace("%sa: i32 {tt.divisibility = 16}", "%sa: i32")
    m, stats = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3, arch=80))
    assert any("operand a: 2-byte runs" in s for s in stats["skipped"])
    assert _ops(m).count("tt.load") == 1
