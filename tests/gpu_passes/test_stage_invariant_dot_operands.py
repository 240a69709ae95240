"""stage_invariant_dot_operands: a tile loaded once outside any loop and read only by tensor-core dots is copied
into a one-stage shared-memory buffer where it was loaded (cp.async, commit, wait at once); tiles loaded in a
loop, read by anything else, or that cp.async cannot copy stay in registers."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import allocate_shared, pipeline_dot_operands, stage_invariant_dot_operands

# the dot reads %q, loaded once before the loop, and %b, loaded every iteration
INVARIANT_A = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %q = tt.load %a_ptrs {vec = 8} : tensor<32x32xf16, #L0>
  %acc, %pb = scf.for %c0, %n, %c1, %zero, %b_ptrs : tensor<32x32xf32, #L1>, tensor<32x32x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %pb0: tensor<32x32x!ptr<f16>, #L0>):
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xf16, #L0>
    %d = tt.dot %q, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f16>, #L0>
    scf.yield %d, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

STAGED_A = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>

tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %a_tile = ttg.local_alloc {operand = "a", stages = 1} : !memdesc<1x32x32xf16, order=1,0, pad=8>
  %0 = arith.constant {value = 0} : i32
  %1 = ttg.memdesc_index %a_tile, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  %2 = arith.constant {value = true} : i1
  ttg.async_copy %a_ptrs, %1, %2 {vec = 8}
  ttg.async_commit
  ttg.async_wait %a_tile {pending = 0}
  %acc, %pb = scf.for %c0, %n, %c1, %zero, %b_ptrs : tensor<32x32xf32, #L1>, tensor<32x32x!ptr<f16>, #L0> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %pb0: tensor<32x32x!ptr<f16>, #L0>):
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xf16, #L0>
    %d = tt.dot %1, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f16>, #L0>
    scf.yield %d, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""

OPTIONS = GpuOptions(num_warps=4, num_stages=3)


def test_a_tile_loaded_once_is_copied_where_it_was_loaded(check):
    _, stats = check(stage_invariant_dot_operands, INVARIANT_A, STAGED_A, OPTIONS)
    assert stats == {"staged_once": 1}


def test_tiles_loaded_in_the_loop_are_left_to_the_pipeline(run_pass):
    text = INVARIANT_A.replace("%q = tt.load %a_ptrs {vec = 8} : tensor<32x32xf16, #L0>\n", "").replace(
        "tt.dot %q, %b", "tt.dot %b, %b")
    m, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats == {"staged_once": 0}
    assert "ttg.local_alloc" not in [op.name for op in m.kernel.walk()]


def test_a_tile_read_by_more_than_dots_stays_in_registers(run_pass):
    text = INVARIANT_A.replace("  tt.store %c_ptrs, %acc\n", "  tt.store %c_ptrs, %acc\n  tt.store %a_ptrs, %q\n")
    m, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats["staged_once"] == 0 and [op.name for op in m.kernel.walk()].count("tt.load") == 2


def test_narrow_accesses_stay_in_registers(run_pass):
    _, stats = run_pass(stage_invariant_dot_operands, INVARIANT_A.replace("%a_ptrs {vec = 8}", "%a_ptrs {vec = 1}"),
                        OPTIONS)
    assert stats["staged_once"] == 0


def test_sm75_has_no_cp_async(run_pass):
    _, stats = run_pass(stage_invariant_dot_operands, INVARIANT_A, GpuOptions(num_warps=4, num_stages=3, arch=75))
    assert stats == {"staged_once": 0, "skipped": ["sm_75 has no cp.async"]}


def test_the_staged_tile_stays_live_across_the_pipelined_loop(run_passes):
    m, (staged, piped) = run_passes([stage_invariant_dot_operands, pipeline_dot_operands], INVARIANT_A, OPTIONS)
    assert staged["staged_once"] == 1 and piped["pipelined"] == 1 and piped["buffers"] == 1
    ops = list(m.kernel.walk())
    names = [op.name for op in ops]
    assert "tt.load" not in names
    first = ops[names.index("ttg.local_alloc")]
    assert first.result.type.shape == (1, 32, 32) and first.attrs["stages"] == 1
    allocate_shared.run(m, GpuOptions(num_warps=4))
    loop_end = max(k for k, op in enumerate(m.kernel.walk()) if op.block is not m.kernel.body)
    tile = m.shared_plan[0]
    assert tile["stages"] == 1 and tile["live"][1] >= loop_end  # read again by every iteration
