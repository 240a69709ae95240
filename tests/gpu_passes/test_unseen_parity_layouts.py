"""Choices that differed from Triton's on real libraries' kernels (issue 14); IR in, IR out."""
from __future__ import annotations

from dataclasses import replace

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import (
    assign_layouts,
    merge_conversions,
    prefetch_fma_dot_loads,
    store_in_value_layout,
)

OPTIONS = GpuOptions(num_warps=4)

# Inductor's welford reduction loop (torch_inductor welford_layer_norm), reduced: the running mean, m2 and weight
# are updated from a [2, 32] load and kept where `rmask & xmask` holds. `xmask` ([2, 1]) also masks the [2, 1]
# stores, so it is laid out for them and converted into the load's layout for the mask.
WELFORD = """
tt.func @welford_rows_kernel(%X: !ptr<f32> {tt.divisibility = 16}, %Mean: !ptr<f32> {tt.divisibility = 16}, %Var: !ptr<f32> {tt.divisibility = 16}, %xnumel: i32, %rnumel: i32) {
  %0 = tt.get_program_id {axis = 0} : i32
  %1 = arith.constant {value = 2} : i32
  %2 = arith.muli %0, %1 : i32
  %3 = tt.make_range {end = 2, start = 0} : tensor<2xi32>
  %4 = tt.expand_dims %3 {axis = 1} : tensor<2x1xi32>
  %5 = tt.splat %2 : tensor<2x1xi32>
  %xindex = arith.addi %5, %4 : tensor<2x1xi32>
  %6 = tt.splat %xnumel : tensor<2x1xi32>
  %xmask = arith.cmpi %xindex, %6 {predicate = "slt"} : tensor<2x1xi1>
  %7 = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %rbase = tt.expand_dims %7 {axis = 0} : tensor<1x32xi32>
  %mean = arith.constant {value = 0.0} : tensor<2x32xf32>
  %8 = arith.constant {value = 0} : i32
  %9 = arith.constant {value = 32} : i32
  %10 = tt.splat %rnumel : tensor<1x32xi32>
  %11 = tt.splat %rnumel : tensor<2x1xi32>
  %12 = arith.muli %11, %xindex : tensor<2x1xi32>
  %13 = tt.broadcast %12 : tensor<2x32xi32>
  %14 = tt.splat %X : tensor<2x32x!ptr<f32>>
  %15 = tt.broadcast %xmask : tensor<2x32xi1>
  %16 = arith.constant {value = 1.0} : tensor<2x32xf32>
  %17 = arith.constant {value = 1} : i32
  %18 = tt.broadcast %rbase : tensor<2x32xi32>
  %19 = arith.addi %18, %13 : tensor<2x32xi32>
  %20 = tt.addptr %14, %19 : tensor<2x32x!ptr<f32>>
  %21 = arith.muli %17, %8 : i32
  %22 = arith.addi %21, %8 : i32
  %23 = arith.muli %17, %9 : i32
  %mean_1, %m2, %weight, %24 = scf.for %8, %rnumel, %9, %mean, %mean, %mean, %22 : tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x32xf32>, i32 {
  ^bb(%roffset: i32, %mean_2: tensor<2x32xf32>, %m2_1: tensor<2x32xf32>, %weight_1: tensor<2x32xf32>, %x_ptrs_offset: i32):
    %25 = tt.splat %roffset : tensor<1x32xi32>
    %rindex = arith.addi %25, %rbase : tensor<1x32xi32>
    %rmask = arith.cmpi %rindex, %10 {predicate = "slt"} : tensor<1x32xi1>
    %26 = tt.broadcast %rmask : tensor<2x32xi1>
    %27 = arith.andi %26, %15 : tensor<2x32xi1>
    %28 = tt.splat %x_ptrs_offset : tensor<2x32xi32>
    %29 = tt.addptr %20, %28 : tensor<2x32x!ptr<f32>>
    %x = tt.load %29, %27, %mean : tensor<2x32xf32>
    %w_next = arith.addf %weight_1, %16 : tensor<2x32xf32>
    %delta = arith.subf %x, %mean_2 : tensor<2x32xf32>
    %30 = arith.divf %delta, %w_next : tensor<2x32xf32>
    %mean_next = arith.addf %mean_2, %30 : tensor<2x32xf32>
    %31 = arith.subf %x, %mean_next : tensor<2x32xf32>
    %32 = arith.mulf %delta, %31 : tensor<2x32xf32>
    %m2_next = arith.addf %m2_1, %32 : tensor<2x32xf32>
    %mean_3 = arith.select %27, %mean_next, %mean_2 : tensor<2x32xf32>
    %m2_2 = arith.select %27, %m2_next, %m2_1 : tensor<2x32xf32>
    %weight_2 = arith.select %27, %w_next, %weight_1 : tensor<2x32xf32>
    %33 = arith.addi %x_ptrs_offset, %23 : i32
    scf.yield %mean_3, %m2_2, %weight_2, %33
  }
  %34 = tt.reduce %weight {axis = 1} : tensor<2xf32> {
  ^bb(%35: f32, %36: f32):
    %37 = arith.addf %35, %36 : f32
    tt.reduce.return %37
  }
  %total = tt.expand_dims %34 {axis = 1} : tensor<2x1xf32>
  %38 = arith.mulf %mean_1, %weight : tensor<2x32xf32>
  %39 = tt.reduce %38 {axis = 1} : tensor<2xf32> {
  ^bb(%40: f32, %41: f32):
    %42 = arith.addf %40, %41 : f32
    tt.reduce.return %42
  }
  %43 = tt.expand_dims %39 {axis = 1} : tensor<2x1xf32>
  %row_mean = arith.divf %43, %total : tensor<2x1xf32>
  %44 = tt.broadcast %row_mean : tensor<2x32xf32>
  %45 = arith.subf %mean_1, %44 : tensor<2x32xf32>
  %46 = arith.mulf %weight, %45 : tensor<2x32xf32>
  %47 = arith.mulf %46, %45 : tensor<2x32xf32>
  %48 = arith.addf %m2, %47 : tensor<2x32xf32>
  %49 = tt.reduce %48 {axis = 1} : tensor<2xf32> {
  ^bb(%50: f32, %51: f32):
    %52 = arith.addf %50, %51 : f32
    tt.reduce.return %52
  }
  %row_m2 = tt.expand_dims %49 {axis = 1} : tensor<2x1xf32>
  %53 = tt.splat %Mean : tensor<2x1x!ptr<f32>>
  %54 = tt.addptr %53, %xindex : tensor<2x1x!ptr<f32>>
  tt.store %54, %row_mean, %xmask
  %55 = tt.splat %Var : tensor<2x1x!ptr<f32>>
  %56 = tt.addptr %55, %xindex : tensor<2x1x!ptr<f32>>
  %57 = arith.divf %row_m2, %total : tensor<2x1xf32>
  tt.store %56, %57, %xmask
  tt.return
}
"""


def test_loop_carries_keep_the_loads_layout_not_their_masks(run_pass):
    # a conversion feeding a select's mask is no vote for the carried value's layout: before, the three carries
    # entered in the stores' layout and every iteration converted 12 times (14 barriers to Triton's 3)
    m, stats = run_pass(assign_layouts, WELFORD)
    assert "loop_layouts_followed" not in stats
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0]
    converted = [op.result.type.scalar.ir for op in loop.walk() if op.name == "ttg.convert_layout"]
    assert all(t == "i1" for t in converted), converted  # the mask's own conversion (hoisted by the next pass)
    x = next(op for op in body.ops if op.name == "tt.load").result
    assert [a.type.layout for a in body.args[1:4]] == [x.type.layout] * 3


# A CUDA-core dot loop (fp32, input_precision="ieee"), as accelerate_matmul leaves it (no `mma` attribute).
FMA_LOOP = """
tt.func @k(%A: !ptr<f32> {tt.divisibility = 16}, %B: !ptr<f32> {tt.divisibility = 16}, %O: !ptr<f32> {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}) {
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %0 = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %1 = tt.splat %K : tensor<16x1xi32>
  %2 = arith.muli %0, %1 : tensor<16x1xi32>
  %3 = tt.splat %A : tensor<16x1x!ptr<f32>>
  %4 = tt.addptr %3, %2 : tensor<16x1x!ptr<f32>>
  %5 = tt.expand_dims %r {axis = 0} : tensor<1x16xi32>
  %6 = tt.broadcast %4 : tensor<16x16x!ptr<f32>>
  %7 = tt.broadcast %5 : tensor<16x16xi32>
  %a_ptrs = tt.addptr %6, %7 : tensor<16x16x!ptr<f32>>
  %8 = arith.constant {value = 16} : i32
  %9 = arith.constant {value = 16} : tensor<16x1xi32>
  %10 = arith.muli %0, %9 : tensor<16x1xi32>
  %11 = tt.splat %B : tensor<16x1x!ptr<f32>>
  %12 = tt.addptr %11, %10 : tensor<16x1x!ptr<f32>>
  %13 = tt.broadcast %12 : tensor<16x16x!ptr<f32>>
  %b_ptrs = tt.addptr %13, %7 : tensor<16x16x!ptr<f32>>
  %acc = arith.constant {value = 0.0} : tensor<16x16xf32>
  %14 = arith.constant {value = 0} : i32
  %15 = arith.constant {value = 16} : tensor<16x16xi32>
  %16 = arith.constant {value = 256} : tensor<16x16xi32>
  %acc_1, %a_ptrs_1, %b_ptrs_1 = scf.for %14, %K, %8, %acc, %a_ptrs, %b_ptrs : tensor<16x16xf32>, tensor<16x16x!ptr<f32>>, tensor<16x16x!ptr<f32>> {
  ^bb(%_: i32, %acc_2: tensor<16x16xf32>, %a_ptrs_2: tensor<16x16x!ptr<f32>>, %b_ptrs_2: tensor<16x16x!ptr<f32>>):
    %17 = tt.load %a_ptrs_2 : tensor<16x16xf32>
    %18 = tt.load %b_ptrs_2 : tensor<16x16xf32>
    %acc_3 = tt.dot %17, %18, %acc_2 {input_precision = "ieee", mma_fallback = "fp32 operands with input_precision='ieee': IEEE fp32 runs on CUDA cores"} : tensor<16x16xf32>
    %a_ptrs_3 = tt.addptr %a_ptrs_2, %15 : tensor<16x16x!ptr<f32>>
    %b_ptrs_3 = tt.addptr %b_ptrs_2, %16 : tensor<16x16x!ptr<f32>>
    scf.yield %acc_3, %a_ptrs_3, %b_ptrs_3
  }
  %19 = tt.splat %O : tensor<16x1x!ptr<f32>>
  %20 = tt.addptr %19, %10 : tensor<16x1x!ptr<f32>>
  %21 = tt.broadcast %20 : tensor<16x16x!ptr<f32>>
  %22 = tt.addptr %21, %7 : tensor<16x16x!ptr<f32>>
  tt.store %22, %acc_1
  tt.return
}
"""

FMA_LOOP_PREFETCHED = """
tt.func @k(%A: !ptr<f32> {tt.divisibility = 16}, %B: !ptr<f32> {tt.divisibility = 16}, %O: !ptr<f32> {tt.divisibility = 16}, %K: i32 {tt.divisibility = 16}) {
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %0 = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %1 = tt.splat %K : tensor<16x1xi32>
  %2 = arith.muli %0, %1 : tensor<16x1xi32>
  %3 = tt.splat %A : tensor<16x1x!ptr<f32>>
  %4 = tt.addptr %3, %2 : tensor<16x1x!ptr<f32>>
  %5 = tt.expand_dims %r {axis = 0} : tensor<1x16xi32>
  %6 = tt.broadcast %4 : tensor<16x16x!ptr<f32>>
  %7 = tt.broadcast %5 : tensor<16x16xi32>
  %a_ptrs = tt.addptr %6, %7 : tensor<16x16x!ptr<f32>>
  %8 = arith.constant {value = 16} : i32
  %9 = arith.constant {value = 16} : tensor<16x1xi32>
  %10 = arith.muli %0, %9 : tensor<16x1xi32>
  %11 = tt.splat %B : tensor<16x1x!ptr<f32>>
  %12 = tt.addptr %11, %10 : tensor<16x1x!ptr<f32>>
  %13 = tt.broadcast %12 : tensor<16x16x!ptr<f32>>
  %b_ptrs = tt.addptr %13, %7 : tensor<16x16x!ptr<f32>>
  %acc = arith.constant {value = 0.0} : tensor<16x16xf32>
  %14 = arith.constant {value = 0} : i32
  %15 = arith.constant {value = 16} : tensor<16x16xi32>
  %16 = arith.constant {value = 256} : tensor<16x16xi32>
  %17 = arith.cmpi %14, %K {predicate = "slt"} : i1
  %18 = tt.splat %17 : tensor<16x16xi1>
  %19 = tt.load %a_ptrs, %18 : tensor<16x16xf32>
  %20 = tt.splat %17 : tensor<16x16xi1>
  %21 = tt.load %b_ptrs, %20 : tensor<16x16xf32>
  %acc_1, %a_ptrs_1, %b_ptrs_1, %22, %23 = scf.for %14, %K, %8, %acc, %a_ptrs, %b_ptrs, %19, %21 : tensor<16x16xf32>, tensor<16x16x!ptr<f32>>, tensor<16x16x!ptr<f32>>, tensor<16x16xf32>, tensor<16x16xf32> {
  ^bb(%_: i32, %acc_2: tensor<16x16xf32>, %a_ptrs_2: tensor<16x16x!ptr<f32>>, %b_ptrs_2: tensor<16x16x!ptr<f32>>, %24: tensor<16x16xf32>, %25: tensor<16x16xf32>):
    %26 = arith.addi %_, %8 : i32
    %27 = arith.cmpi %26, %K {predicate = "slt"} : i1
    %a_ptrs_3 = tt.addptr %a_ptrs_2, %15 : tensor<16x16x!ptr<f32>>
    %b_ptrs_3 = tt.addptr %b_ptrs_2, %16 : tensor<16x16x!ptr<f32>>
    %28 = tt.splat %27 : tensor<16x16xi1>
    %29 = tt.load %a_ptrs_3, %28 : tensor<16x16xf32>
    %30 = tt.splat %27 : tensor<16x16xi1>
    %31 = tt.load %b_ptrs_3, %30 : tensor<16x16xf32>
    %acc_3 = tt.dot %24, %25, %acc_2 {input_precision = "ieee", mma_fallback = "fp32 operands with input_precision='ieee': IEEE fp32 runs on CUDA cores"} : tensor<16x16xf32>
    %a_ptrs_3_1 = tt.addptr %a_ptrs_2, %15 : tensor<16x16x!ptr<f32>>
    %b_ptrs_3_1 = tt.addptr %b_ptrs_2, %16 : tensor<16x16x!ptr<f32>>
    scf.yield %acc_3, %a_ptrs_3_1, %b_ptrs_3_1, %29, %31
  }
  %32 = tt.splat %O : tensor<16x1x!ptr<f32>>
  %33 = tt.addptr %32, %10 : tensor<16x1x!ptr<f32>>
  %34 = tt.broadcast %33 : tensor<16x16x!ptr<f32>>
  %35 = tt.addptr %34, %7 : tensor<16x16x!ptr<f32>>
  tt.store %35, %acc_1
  tt.return
}
"""


def test_fma_dot_loop_prefetches_its_next_tiles(check):
    # num_stages=2: the first tiles load before the loop, each iteration loads the next before its dot
    check(prefetch_fma_dot_loads, FMA_LOOP, FMA_LOOP_PREFETCHED, replace(OPTIONS, num_stages=2))


def test_fma_dot_loop_without_stages_or_on_tensor_cores_is_left_alone(run_pass):
    for text, options in ((FMA_LOOP, replace(OPTIONS, num_stages=1)),
                          (FMA_LOOP.replace('input_precision = "ieee", mma_fallback', 'mma = [4, 1], mma_fallback'),
                           replace(OPTIONS, num_stages=3))):
        m, stats = run_pass(prefetch_fma_dot_loads, text, options)
        assert stats == {}
        loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
        assert len(loop.regions[0].args) == 4  # the induction variable and the three carries


def test_fma_dot_loop_prefetches_no_more_than_its_register_budget(run_pass):
    big = FMA_LOOP.replace("16x16x", "128x128x").replace("16x16xf32", "128x128xf32")  # 2 x 128 regs a thread
    m, stats = run_pass(prefetch_fma_dot_loads, big.replace("16x16xi", "128x128xi"), replace(OPTIONS, num_stages=2))
    assert stats == {}


# fla's chunk_fwd_kernel_h, reduced (one warp): the state is stored, decayed and then the accumulator of a dot.
DECAYED_STATE = """
tt.func @decayed_state_kernel(%Kt: !ptr<f16> {tt.divisibility = 16}, %V: !ptr<f16> {tt.divisibility = 16}, %G: !ptr<f32> {tt.divisibility = 16}, %H: !ptr<f32> {tt.divisibility = 16}, %NT: i32) {
  %o_k = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %o_t = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %b_h = arith.constant {value = 0.0} : tensor<32x32xf32>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.constant {value = 1} : i32
  %2 = arith.constant {value = 32} : i32
  %3 = tt.expand_dims %o_k {axis = 1} : tensor<32x1xi32>
  %4 = arith.constant {value = 32} : tensor<32x1xi32>
  %5 = arith.muli %3, %4 : tensor<32x1xi32>
  %6 = tt.expand_dims %o_k {axis = 0} : tensor<1x32xi32>
  %7 = tt.broadcast %6 : tensor<32x32xi32>
  %8 = arith.constant {value = 64} : i32
  %9 = arith.muli %NT, %8 : i32
  %10 = tt.splat %9 : tensor<32x1xi32>
  %11 = arith.muli %3, %10 : tensor<32x1xi32>
  %12 = tt.splat %Kt : tensor<32x1x!ptr<f16>>
  %13 = tt.addptr %12, %11 : tensor<32x1x!ptr<f16>>
  %14 = tt.expand_dims %o_t {axis = 0} : tensor<1x64xi32>
  %15 = tt.broadcast %14 : tensor<32x64xi32>
  %16 = tt.expand_dims %o_t {axis = 1} : tensor<64x1xi32>
  %17 = arith.constant {value = 32} : tensor<64x1xi32>
  %18 = tt.splat %V : tensor<64x1x!ptr<f16>>
  %19 = tt.broadcast %6 : tensor<64x32xi32>
  %20 = tt.splat %H : tensor<32x1x!ptr<f32>>
  %21 = arith.muli %1, %2 : i32
  %22 = arith.muli %0, %2 : i32
  %23 = arith.muli %21, %2 : i32
  %24 = arith.muli %22, %2 : i32
  %25 = tt.addptr %20, %5 : tensor<32x1x!ptr<f32>>
  %26 = tt.broadcast %25 : tensor<32x32x!ptr<f32>>
  %27 = tt.addptr %26, %7 : tensor<32x32x!ptr<f32>>
  %28 = arith.muli %23, %0 : i32
  %29 = arith.addi %28, %24 : i32
  %30 = arith.muli %23, %1 : i32
  %31 = arith.muli %1, %8 : i32
  %32 = arith.muli %0, %8 : i32
  %33 = tt.broadcast %13 : tensor<32x64x!ptr<f16>>
  %34 = tt.addptr %33, %15 : tensor<32x64x!ptr<f16>>
  %35 = arith.muli %31, %0 : i32
  %36 = arith.addi %35, %32 : i32
  %37 = tt.splat %36 : tensor<32x64xi32>
  %38 = tt.addptr %34, %37 : tensor<32x64x!ptr<f16>>
  %39 = arith.muli %31, %1 : i32
  %40 = tt.splat %39 : tensor<32x64xi32>
  %41 = arith.muli %16, %17 : tensor<64x1xi32>
  %42 = arith.muli %31, %2 : i32
  %43 = arith.muli %32, %2 : i32
  %44 = tt.addptr %18, %41 : tensor<64x1x!ptr<f16>>
  %45 = tt.broadcast %44 : tensor<64x32x!ptr<f16>>
  %46 = tt.addptr %45, %19 : tensor<64x32x!ptr<f16>>
  %47 = arith.muli %42, %0 : i32
  %48 = arith.addi %47, %43 : i32
  %49 = tt.splat %48 : tensor<64x32xi32>
  %50 = tt.addptr %46, %49 : tensor<64x32x!ptr<f16>>
  %51 = arith.muli %42, %1 : i32
  %52 = tt.splat %51 : tensor<64x32xi32>
  %b_h_1, %53, %54, %55 = scf.for %0, %NT, %1, %b_h, %29, %38, %50 : tensor<32x32xf32>, i32, tensor<32x64x!ptr<f16>>, tensor<64x32x!ptr<f16>> {
  ^bb(%i_t: i32, %b_h_2: tensor<32x32xf32>, %56: i32, %b_k_ptrs: tensor<32x64x!ptr<f16>>, %b_v_ptrs: tensor<64x32x!ptr<f16>>):
    %57 = tt.splat %56 : tensor<32x32xi32>
    %58 = tt.addptr %27, %57 : tensor<32x32x!ptr<f32>>
    tt.store %58, %b_h_2
    %b_k = tt.load %b_k_ptrs : tensor<32x64xf16>
    %b_v = tt.load %b_v_ptrs : tensor<64x32xf16>
    %59 = tt.addptr %G, %i_t : !ptr<f32>
    %60 = tt.load %59 : f32
    %61 = math.exp %60 : f32
    %62 = tt.splat %61 : tensor<32x32xf32>
    %b_h_3 = arith.mulf %b_h_2, %62 : tensor<32x32xf32>
    %b_h_4 = tt.dot %b_k, %b_v, %b_h_3 {input_precision = "ieee", instr = "mma.sync.m16n8k16.f16", mma = [1, 1], not_wgmma = "no wgmma: a 32x32 tile over 1 warps; wgmma needs whole warpgroups, BLOCK_M a multiple of 64 per warpgroup along M, and the columns split evenly between warpgroups along N"} : tensor<32x32xf32>
    %63 = arith.addi %56, %30 : i32
    %64 = tt.addptr %b_k_ptrs, %40 : tensor<32x64x!ptr<f16>>
    %65 = tt.addptr %b_v_ptrs, %52 : tensor<64x32x!ptr<f16>>
    scf.yield %b_h_4, %63, %64, %65
  }
  %66 = arith.muli %NT, %2 : i32
  %67 = arith.muli %66, %2 : i32
  %68 = tt.addptr %H, %67 : !ptr<f32>
  %69 = tt.splat %68 : tensor<32x1x!ptr<f32>>
  %70 = tt.addptr %69, %5 : tensor<32x1x!ptr<f32>>
  %71 = tt.broadcast %70 : tensor<32x32x!ptr<f32>>
  %72 = tt.addptr %71, %7 : tensor<32x32x!ptr<f32>>
  tt.store %72, %b_h_1
  tt.return
}
"""


def test_a_dot_accumulator_carry_enters_in_the_accumulator_layout(run_pass):
    # the carry's first use is its store, so it took the store's layout; the body's dot yields it in the mma
    # layout, reached through the dot's accumulator: the loop now carries it there (one conversion, the store's)
    m, stats = run_pass(assign_layouts, DECAYED_STATE, replace(OPTIONS, num_warps=1))
    assert stats["loop_layouts_followed"] == 1
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert str(loop.regions[0].args[1].type.layout).startswith("#mma")
    converted = [op for op in loop.walk() if op.name == "ttg.convert_layout" and op.result.type.shape == (32, 32)]
    assert [c.result.uses[0].name for c in converted] == ["tt.store"]


# torchao's blockwise fp8 weight quantization after remove_layout_conversions: the fp8 tile, computed in the f32
# load's layout (4 values a thread), converted into the 16-byte store's layout (its chain passes a reduction).
FP8_QUANT = """
#L0 = #slice<1, #blocked<[1, 4], [1, 32], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 4], [1, 32], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 4], [1, 32], [4, 1], [1, 0]>
#L3 = #blocked<[4], [32], [4], [0]>
#L4 = #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>
#L5 = #slice<1, #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>>
#L6 = #slice<0, #blocked<[1, 16], [4, 8], [4, 1], [1, 0]>>

tt.func @fp8_block_quant_kernel(%X: !ptr<f32> {tt.divisibility = 16}, %Y: !ptr<f8e4nv> {tt.divisibility = 16}, %S: !ptr<f32> {tt.divisibility = 16}, %M: i32 {tt.divisibility = 16}, %N: i32 {tt.divisibility = 16}) {
  %pid_m = tt.get_program_id {axis = 0} : i32
  %pid_n = tt.get_program_id {axis = 1} : i32
  %0 = arith.constant {value = 128} : i32
  %1 = arith.muli %pid_m, %0 : i32
  %2 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L0>
  %3 = tt.splat %1 : tensor<128xi32, #L0>
  %offs_m = arith.addi %3, %2 : tensor<128xi32, #L0>
  %4 = arith.muli %pid_n, %0 : i32
  %5 = tt.splat %4 : tensor<128xi32, #L1>
  %6 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L1>
  %offs_n = arith.addi %5, %6 : tensor<128xi32, #L1>
  %7 = tt.expand_dims %offs_m {axis = 1} : tensor<128x1xi32, #L2>
  %8 = tt.splat %N : tensor<128x1xi32, #L2>
  %9 = arith.muli %7, %8 : tensor<128x1xi32, #L2>
  %10 = tt.expand_dims %offs_n {axis = 0} : tensor<1x128xi32, #L2>
  %11 = tt.broadcast %9 : tensor<128x128xi32, #L2>
  %12 = tt.broadcast %10 : tensor<128x128xi32, #L2>
  %offs = arith.addi %11, %12 : tensor<128x128xi32, #L2>
  %13 = tt.splat %M : tensor<128x1xi32, #L2>
  %14 = arith.cmpi %7, %13 {predicate = "slt"} : tensor<128x1xi1, #L2>
  %15 = tt.splat %N : tensor<1x128xi32, #L2>
  %16 = arith.cmpi %10, %15 {predicate = "slt"} : tensor<1x128xi1, #L2>
  %17 = tt.broadcast %14 : tensor<128x128xi1, #L2>
  %18 = tt.broadcast %16 : tensor<128x128xi1, #L2>
  %mask = arith.andi %17, %18 : tensor<128x128xi1, #L2>
  %19 = tt.splat %X : tensor<128x128x!ptr<f32>, #L2>
  %20 = tt.addptr %19, %offs : tensor<128x128x!ptr<f32>, #L2>
  %x = tt.load %20, %mask {vec = 4} : tensor<128x128xf32, #L2>
  %21 = math.absf %x : tensor<128x128xf32, #L2>
  %22 = tt.reshape %21 : tensor<16384xf32, #L3>
  %23 = tt.reduce %22 {axis = 0} : f32 {
  ^bb(%24: f32, %25: f32):
    %26 = arith.maxnumf %24, %25 : f32
    tt.reduce.return %26
  }
  %27 = arith.constant {value = 448.0} : f32
  %s = arith.divf %23, %27 : f32
  %28 = tt.splat %Y : tensor<128x128x!ptr<f8e4nv>, #L4>
  %29 = tt.splat %1 : tensor<128xi32, #L5>
  %30 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L5>
  %offs_m_1 = arith.addi %29, %30 : tensor<128xi32, #L5>
  %31 = tt.expand_dims %offs_m_1 {axis = 1} : tensor<128x1xi32, #L4>
  %32 = tt.splat %N : tensor<128x1xi32, #L4>
  %33 = arith.muli %31, %32 : tensor<128x1xi32, #L4>
  %34 = tt.broadcast %33 : tensor<128x128xi32, #L4>
  %35 = tt.splat %4 : tensor<128xi32, #L6>
  %36 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L6>
  %offs_n_1 = arith.addi %35, %36 : tensor<128xi32, #L6>
  %37 = tt.expand_dims %offs_n_1 {axis = 0} : tensor<1x128xi32, #L4>
  %38 = tt.broadcast %37 : tensor<128x128xi32, #L4>
  %offs_1 = arith.addi %34, %38 : tensor<128x128xi32, #L4>
  %39 = tt.addptr %28, %offs_1 : tensor<128x128x!ptr<f8e4nv>, #L4>
  %40 = tt.splat %s : tensor<128x128xf32, #L2>
  %41 = arith.divf %x, %40 : tensor<128x128xf32, #L2>
  %42 = tt.fp_to_fp %41 {rounding = "rtne"} : tensor<128x128xf8e4nv, #L2>
  %43 = ttg.convert_layout %42 : tensor<128x128xf8e4nv, #L4>
  %44 = tt.splat %1 : tensor<128xi32, #L5>
  %45 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L5>
  %offs_m_2 = arith.addi %44, %45 : tensor<128xi32, #L5>
  %46 = tt.expand_dims %offs_m_2 {axis = 1} : tensor<128x1xi32, #L4>
  %47 = tt.splat %M : tensor<128x1xi32, #L4>
  %48 = arith.cmpi %46, %47 {predicate = "slt"} : tensor<128x1xi1, #L4>
  %49 = tt.broadcast %48 : tensor<128x128xi1, #L4>
  %50 = tt.splat %4 : tensor<128xi32, #L6>
  %51 = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L6>
  %offs_n_2 = arith.addi %50, %51 : tensor<128xi32, #L6>
  %52 = tt.expand_dims %offs_n_2 {axis = 0} : tensor<1x128xi32, #L4>
  %53 = tt.splat %N : tensor<1x128xi32, #L4>
  %54 = arith.cmpi %52, %53 {predicate = "slt"} : tensor<1x128xi1, #L4>
  %55 = tt.broadcast %54 : tensor<128x128xi1, #L4>
  %mask_1 = arith.andi %49, %55 : tensor<128x128xi1, #L4>
  tt.store %39, %43, %mask_1 {vec = 16}
  %56 = arith.addi %N, %0 : i32
  %57 = arith.constant {value = 1} : i32
  %58 = arith.subi %56, %57 : i32
  %59 = arith.divsi %58, %0 : i32
  %60 = arith.muli %pid_m, %59 : i32
  %61 = tt.addptr %S, %60 : !ptr<f32>
  %62 = tt.addptr %61, %pid_n : !ptr<f32>
  tt.store %62, %s
  tt.return
}
"""


def test_a_store_takes_its_values_layout_where_that_writes_whole_sectors(run_pass):
    m, stats = run_pass(store_in_value_layout, FP8_QUANT)
    assert stats == {"stores_in_value_layout": 1}
    assert not [op for op in m.kernel.walk() if op.name == "ttg.convert_layout"]
    store = next(op for op in m.kernel.walk() if op.name == "tt.store" and op.operands[0].type.shape)
    assert store.attrs["vec"] == 4
    assert {str(v.type.layout) for v in store.operands} == {"#blocked<[1, 4], [1, 32], [4, 1], [1, 0]>"}


def test_a_store_keeps_its_layout_where_the_values_would_not_fill_sectors(run_pass):
    # one byte a thread along the row: a warp would write 32 scattered bytes; the conversion stays
    narrow = FP8_QUANT.replace("#blocked<[1, 4], [1, 32], [4, 1], [1, 0]>", "#blocked<[1, 1], [1, 32], [4, 1], [1, 0]>")
    m, stats = run_pass(store_in_value_layout, narrow)
    assert stats == {}
    assert [op.name for op in m.kernel.walk()].count("ttg.convert_layout") == 1


TWO_CONVERSIONS = """
#L0 = #blocked<[1], [32], [4], [0]>
#L1 = #blocked<[4], [32], [1], [0]>
tt.func @k(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %c: i1) {
  %r = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L0>
  %xs = tt.splat %x_ptr : tensor<128x!ptr<f32>, #L0>
  %xp = tt.addptr %xs, %r : tensor<128x!ptr<f32>, #L0>
  %x = tt.load %xp : tensor<128xf32, #L0>
  %a = ttg.convert_layout %x : tensor<128xf32, #L1>
  %b = ttg.convert_layout %x : tensor<128xf32, #L1>
  %s = arith.addf %a, %b : tensor<128xf32, #L1>
  scf.if %c {
    %d = ttg.convert_layout %x : tensor<128xf32, #L1>
    %e = arith.mulf %d, %s : tensor<128xf32, #L1>
    scf.yield
  } {
    scf.yield
  }
  tt.return
}
"""


def test_equal_conversions_of_one_value_merge(run_pass):
    # rotary's cos row, converted once per product it is broadcast into: the first conversion serves both (and
    # the one in the nested region, which it dominates)
    m, stats = run_pass(merge_conversions, TWO_CONVERSIONS)
    assert stats == {"merged": 2}
    assert [op.name for op in m.kernel.walk()].count("ttg.convert_layout") == 1


# fla's intra-chunk gating, reduced: `k * exp2(gn[:, None] - gk)` with k and gk read down their columns (a layout of
# their own) and gn a row vector broadcast over them.
GATED = """
tt.func @gated_pair_kernel(%Q: !ptr<f32> {tt.divisibility = 16}, %G: !ptr<f32> {tt.divisibility = 16}, %K: !ptr<f32> {tt.divisibility = 16}, %GK: !ptr<f32> {tt.divisibility = 16}, %GN: !ptr<f32> {tt.divisibility = 16}, %QG: !ptr<f32> {tt.divisibility = 16}, %KG: !ptr<f32> {tt.divisibility = 16}, %T: i32) {
  %o_i = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %o_k = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %0 = tt.splat %GN : tensor<32x!ptr<f32>>
  %1 = tt.addptr %0, %o_k : tensor<32x!ptr<f32>>
  %gn = tt.load %1 : tensor<32xf32>
  %2 = tt.expand_dims %o_i {axis = 1} : tensor<16x1xi32>
  %3 = arith.constant {value = 32} : tensor<16x1xi32>
  %4 = arith.muli %2, %3 : tensor<16x1xi32>
  %5 = tt.expand_dims %o_k {axis = 0} : tensor<1x32xi32>
  %6 = tt.broadcast %4 : tensor<16x32xi32>
  %7 = tt.broadcast %5 : tensor<16x32xi32>
  %rows = arith.addi %6, %7 : tensor<16x32xi32>
  %8 = tt.expand_dims %o_k {axis = 1} : tensor<32x1xi32>
  %9 = tt.expand_dims %o_i {axis = 0} : tensor<1x16xi32>
  %10 = arith.constant {value = 32} : tensor<1x16xi32>
  %11 = arith.muli %9, %10 : tensor<1x16xi32>
  %12 = tt.broadcast %8 : tensor<32x16xi32>
  %13 = tt.broadcast %11 : tensor<32x16xi32>
  %cols = arith.addi %12, %13 : tensor<32x16xi32>
  %14 = tt.splat %T : tensor<1x16xi32>
  %m = arith.cmpi %9, %14 {predicate = "slt"} : tensor<1x16xi1>
  %15 = tt.splat %Q : tensor<16x32x!ptr<f32>>
  %16 = tt.addptr %15, %rows : tensor<16x32x!ptr<f32>>
  %17 = tt.splat %T : tensor<16x1xi32>
  %18 = arith.cmpi %2, %17 {predicate = "slt"} : tensor<16x1xi1>
  %19 = tt.broadcast %18 : tensor<16x32xi1>
  %20 = arith.constant {value = 0.0} : tensor<16x32xf32>
  %qg = tt.load %16, %19, %20 : tensor<16x32xf32>
  %21 = tt.splat %G : tensor<16x32x!ptr<f32>>
  %22 = tt.addptr %21, %rows : tensor<16x32x!ptr<f32>>
  %23 = tt.load %22, %19, %20 : tensor<16x32xf32>
  %24 = tt.expand_dims %gn {axis = 0} : tensor<1x32xf32>
  %25 = tt.broadcast %24 : tensor<16x32xf32>
  %26 = arith.subf %23, %25 : tensor<16x32xf32>
  %27 = math.exp2 %26 : tensor<16x32xf32>
  %qg_1 = arith.mulf %qg, %27 : tensor<16x32xf32>
  %28 = tt.splat %K : tensor<32x16x!ptr<f32>>
  %29 = tt.addptr %28, %cols : tensor<32x16x!ptr<f32>>
  %30 = tt.broadcast %m : tensor<32x16xi1>
  %31 = arith.constant {value = 0.0} : tensor<32x16xf32>
  %32 = tt.load %29, %30, %31 : tensor<32x16xf32>
  %33 = tt.expand_dims %gn {axis = 1} : tensor<32x1xf32>
  %34 = tt.splat %GK : tensor<32x16x!ptr<f32>>
  %35 = tt.addptr %34, %cols : tensor<32x16x!ptr<f32>>
  %36 = tt.load %35, %30, %31 : tensor<32x16xf32>
  %37 = tt.broadcast %33 : tensor<32x16xf32>
  %38 = arith.subf %37, %36 : tensor<32x16xf32>
  %39 = math.exp2 %38 : tensor<32x16xf32>
  %kg = arith.mulf %32, %39 : tensor<32x16xf32>
  %40 = tt.splat %QG : tensor<16x32x!ptr<f32>>
  %41 = tt.addptr %40, %rows : tensor<16x32x!ptr<f32>>
  tt.store %41, %qg_1, %19
  %42 = tt.splat %KG : tensor<32x16x!ptr<f32>>
  %43 = tt.addptr %42, %cols : tensor<32x16x!ptr<f32>>
  tt.store %43, %kg, %30
  tt.return
}
"""


def test_broadcast_minus_tile_takes_the_tiles_layout(run_pass):
    m, _ = run_pass(assign_layouts, GATED, replace(OPTIONS, num_warps=1))
    converted = [op.operands[0] for op in m.kernel.walk() if op.name == "ttg.convert_layout"]
    loads = [op for op in m.kernel.walk() if op.name == "tt.load" and len(op.result.type.shape) == 2]
    assert not [v for v in converted if v.defining_op in loads], "a loaded tile was converted"
