"""warp_specialize: a TMA-filled loop (fill_stages_with_tma's output) marked `warp_specialize` splits at a
`ttg.warp_specialize` op: its region (the producer warpgroup) keeps only the copies' slice of the loop (block
pointers, their advances, the induction variable), each fill counted and waiting on its stage's empty mbarrier; the
loop that stays (the consumers) loses its copies and its CTA barrier, and each warp releases the stage the retired
wgmma read (in the loop for iteration i-1, after it for the last). Loops that do not qualify say why."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import warp_specialize
from tests.gpu_passes.test_fill_stages_with_tma import PIPELINED_2, TMA_2

SM90 = GpuOptions(num_warps=4, num_stages=2, arch=90)
MARKED = TMA_2.replace("{pipelined_stages = 2}", "{pipelined_stages = 2, warp_specialize = true}")

SPECIALIZED = """
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
  %empty_bars = ttg.mbarrier_alloc {count = 4, purpose = "empty", stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  %0 = arith.cmpi %c0, %K {predicate = "slt"} : i1
  ttg.warp_specialize {producer_warps = 4} {
    %1 = arith.constant {value = 0} : i32
    %2 = arith.constant {value = 2} : i32
    %3 = arith.remui %1, %2 : i32
    %4 = arith.divui %1, %2 : i32
    %5 = arith.constant {value = 1} : i32
    %6 = arith.andi %4, %5 : i32
    %7 = arith.xori %6, %5 : i32
    %8 = ttg.memdesc_index %empty_bars, %3 : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %8, %7, %0
    %9 = ttg.memdesc_index %stage_bars, %3 : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_expect %9, %0 {bytes = 8192}
    %10 = ttg.memdesc_index %a_stages, %3 : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    ttg.tma_copy %a_tensormap, %pa, %10, %9, %0
    %11 = ttg.memdesc_index %b_stages, %3 : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    ttg.tma_copy %b_tensormap, %pb, %11, %9, %0
    %pa1 = tt.advance %pa, %c0, %c32 : !blockptr<f16, 64x32>
    %pb1 = tt.advance %pb, %c32, %c0 : !blockptr<f16, 32x64>
    %12 = arith.constant {value = 1} : i32
    %13 = arith.addi %1, %12 : i32
    %14, %15, %16 = scf.for %c0, %K, %c32, %pa1, %pb1, %13 : !blockptr<f16, 64x32>, !blockptr<f16, 32x64>, i32 {
    ^bb(%k: i32, %pa0_ahead: !blockptr<f16, 64x32>, %pb0_ahead: !blockptr<f16, 32x64>, %fill: i32):
      %17 = arith.constant {value = 32} : i32
      %18 = arith.addi %k, %17 : i32
      %19 = arith.cmpi %18, %K {predicate = "slt"} : i1
      %20 = arith.constant {value = 2} : i32
      %21 = arith.remui %fill, %20 : i32
      %22 = arith.divui %fill, %20 : i32
      %23 = arith.constant {value = 1} : i32
      %24 = arith.andi %22, %23 : i32
      %25 = arith.xori %24, %23 : i32
      %26 = ttg.memdesc_index %empty_bars, %21 : !memdesc<1x1xi64, order=1,0, pad=0>
      ttg.mbarrier_wait %26, %25, %19
      %27 = ttg.memdesc_index %stage_bars, %21 : !memdesc<1x1xi64, order=1,0, pad=0>
      ttg.mbarrier_expect %27, %19 {bytes = 8192}
      %28 = ttg.memdesc_index %a_stages, %21 : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
      ttg.tma_copy %a_tensormap, %pa0_ahead, %28, %27, %19
      %29 = ttg.memdesc_index %b_stages, %21 : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
      ttg.tma_copy %b_tensormap, %pb0_ahead, %29, %27, %19
      %pa1_1 = tt.advance %pa0_ahead, %c0, %c32 : !blockptr<f16, 64x32>
      %pb1_1 = tt.advance %pb0_ahead, %c32, %c0 : !blockptr<f16, 32x64>
      %30 = arith.constant {value = 1} : i32
      %31 = arith.addi %fill, %30 : i32
      scf.yield %pa1_1, %pb1_1, %31
    }
  }
  %32 = arith.constant {value = 0} : i32
  %33 = arith.constant {value = 1} : i32
  %34 = arith.constant {value = 0} : i32
  %acc, %35, %36, %37 = scf.for %c0, %K, %c32, %zero, %32, %33, %34 {pipelined_stages = 2, warp_specialize = true} : tensor<64x64xf32, #L0>, i32, i32, i32 {
  ^bb(%k_1: i32, %acc0: tensor<64x64xf32, #L0>, %read_stage: i32, %write_stage: i32, %phase: i32):
    %38 = ttg.memdesc_index %stage_bars, %read_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %38, %phase
    %39 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %40 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
    %d = tt.dot %39, %40, %acc0 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [4, 1], wgmma_async = true} : tensor<64x64xf32, #L0>
    %d_1 = ttg.dot_wait %d {pending = 1} : tensor<64x64xf32, #L0>
    %41 = ttg.memdesc_index %empty_bars, %write_stage : !memdesc<1x1xi64, order=1,0, pad=0>
    %42 = arith.cmpi %k_1, %c0 {predicate = "ne"} : i1
    ttg.mbarrier_arrive %41, %42
    %43 = arith.constant {value = 1} : i32
    %44 = arith.constant {value = 1} : i32
    %45 = arith.cmpi %read_stage, %44 {predicate = "eq"} : i1
    %46 = arith.constant {value = 0} : i32
    %47 = arith.addi %read_stage, %43 : i32
    %48 = arith.select %45, %46, %47 : i32
    %49 = arith.xori %phase, %43 : i32
    %50 = arith.select %45, %49, %phase : i32
    %51 = arith.cmpi %write_stage, %44 {predicate = "eq"} : i1
    %52 = arith.constant {value = 0} : i32
    %53 = arith.addi %write_stage, %43 : i32
    %54 = arith.select %51, %52, %53 : i32
    scf.yield %d_1, %48, %54, %50
  }
  %acc_1 = ttg.dot_wait %acc {pending = 0} : tensor<64x64xf32, #L0>
  %55 = ttg.memdesc_index %empty_bars, %36 : !memdesc<1x1xi64, order=1,0, pad=0>
  %56 = arith.cmpi %c0, %K {predicate = "slt"} : i1
  ttg.mbarrier_arrive %55, %56
  ttg.async_wait %a_stages, %b_stages {pending = 0}
  ttg.mbarrier_inval %stage_bars
  ttg.mbarrier_inval %empty_bars
  tt.store %c_ptrs, %acc_1
  tt.return
}
"""


def test_marked_tma_loop_is_split_into_producer_and_consumers(check):
    _, stats = check(warp_specialize, MARKED, SPECIALIZED, SM90)
    assert stats == {"warp_specialized": 1}


def test_unmarked_loop_is_left_alone_unless_the_knob_is_on(check, monkeypatch):
    monkeypatch.delenv("KERNELLAB_WARP_SPECIALIZE", raising=False)
    _, stats = check(warp_specialize, TMA_2, TMA_2, SM90)
    assert stats == {"warp_specialized": 0}
    monkeypatch.setenv("KERNELLAB_WARP_SPECIALIZE", "1")
    _, stats = check(warp_specialize, TMA_2, SPECIALIZED.replace(", warp_specialize = true", ""), SM90)
    assert stats == {"warp_specialized": 1}


def test_why_a_marked_loop_is_not_specialized(check):
    cases = [
        (MARKED, GpuOptions(num_warps=4, num_stages=2, arch=80), "sm_80 has no TMA or setmaxnreg"),
        (MARKED, GpuOptions(num_warps=2, num_stages=2, arch=90), "num_warps=2 is not a whole number of warpgroups"),
        (MARKED, GpuOptions(num_warps=32, num_stages=2, arch=90),
         "num_warps=32 leaves no room for a producer warpgroup (1024 threads per block)"),
        (PIPELINED_2.replace("{pipelined_stages = 2}", "{pipelined_stages = 2, warp_specialize = true}"), SM90,
         "its stages are filled by cp.async, not TMA (fill_stages_with_tma's no_tma says why)"),
        (MARKED.replace("  %zero = arith.constant", "  %old = tt.atomic_rmw %a_ptr, %c0 {kind = \"add\"} : i32\n"
                        "  %zero = arith.constant"),
         SM90, "tt.atomic_rmw before the loop (line ?) would run in the producer warps too"),
    ]
    for text, options, why in cases:
        _, stats = check(warp_specialize, text, text, options)
        assert stats == {"warp_specialized": 0, "not_specialized": [f"line ?: {why}"]}


def test_persistent_tile_loop(run_pass):
    """Tutorial 09's persistent descriptor matmul (the tile loop marked, the K loop inside it pipelined and filled by
    TMA): the buffers and mbarriers move before the tile loop; the producer's copy of the tile loop carries the fill
    count (and nothing of the accumulator or the epilogue); the consumers' tile loop carries the K loop's read stage,
    write stage and phase from one tile to the next; the mbarriers are invalidated after the tile loop."""
    from kernellab.compiler.codegen.target import Target
    from tests.test_warp_specialize import launch

    ck, _, _ = launch("persistent", "fp16", (256, 256, 512), (64, 64, 64, 3, 4), True, device="cpu", warmup=True)
    ck.build_gpu(Target(90))
    before = next(p.ir for p in ck.trace.passes if p.name == "warpgroup_turns")
    m, stats = run_pass(warp_specialize, before, SM90)
    assert stats == {"warp_specialized": 1}
    top = m.kernel.body.ops
    names = [o.name for o in top]
    ws, tiles = names.index("ttg.warp_specialize"), names.index("scf.for")
    assert ws < tiles and names.count("scf.for") == 1
    assert [o.attrs.get("purpose") for o in top[:ws] if o.name == "ttg.mbarrier_alloc"] == [None, "empty"]
    assert names[:ws].count("ttg.local_alloc") == 2 and names[:ws].count("ttg.tensormap") == 2
    assert [o.name for o in top[tiles + 1:]] == ["ttg.mbarrier_inval", "ttg.mbarrier_inval", "tt.return"]
    # the producer: a tile loop carrying the fill count, a K loop carrying it too, and no tensor anywhere
    region = top[ws].regions[0]
    (p_tiles,) = [o for o in region.ops if o.name == "scf.for"]
    assert [a.hint for a in p_tiles.regions[0].args[1:]] == ["fills"]
    (p_k,) = [o for o in p_tiles.regions[0].ops if o.name == "scf.for"]
    assert [a.hint for a in p_k.regions[0].args[1:]] == ["fill"]
    inner = list(top[ws].walk())
    assert not any(o.name in ("tt.dot", "ttg.dot_wait", "tt.store", "ttg.mbarrier_arrive") for o in inner)
    assert not any(r.type.is_block() for o in inner for r in o.results)
    assert sum(o.name == "ttg.mbarrier_expect" for o in inner) == 3  # the S-1 ahead of the K loop and its own
    assert sum(o.name == "ttg.mbarrier_wait" and len(o.operands) == 3 for o in inner) == 3
    # the consumers: no copies; the K loop's stage state comes from the tile loop and goes back to it
    consumer = top[tiles]
    assert not any(o.name in ("ttg.tma_copy", "ttg.mbarrier_expect") for o in consumer.walk())
    body = consumer.regions[0]
    (k_loop,) = [o for o in body.ops if o.name == "scf.for"]
    carried = body.args[-3:]
    assert list(k_loop.operands[-3:]) == carried
    assert list(body.terminator.operands[-3:]) == list(k_loop.results[-3:])
    assert [int(v.defining_op.attrs["value"]) for v in consumer.operands[-3:]] == [0, 2, 0]
    assert sum(o.name == "ttg.mbarrier_arrive" for o in consumer.walk()) == 2
