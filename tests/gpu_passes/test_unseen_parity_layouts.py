"""Layout choices that differed from Triton's on real libraries' kernels (issue 14); IR in, layouts out."""
from __future__ import annotations

from kernellab.compiler.passes import assign_layouts

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
