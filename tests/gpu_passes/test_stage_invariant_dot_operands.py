"""stage_invariant_dot_operands: a tile loaded once outside any loop and read only by tensor-core dots is stored
into a one-stage shared-memory buffer where it was loaded (the load stays a vectorized global load, then
st.shared, one barrier before the first dot, as Triton does outside pipelined loops); tiles loaded in a loop,
read by anything else, or not 16-bit stay in registers. A register tile made before a loop and read only by the
loop's wgmma dots (attorch's `q * scale`, fp32 tiles) is stored into a one-stage buffer just before the loop, in
the encoding the dot would have staged it in every iteration."""
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
  %q = tt.load %a_ptrs {vec = 8} : tensor<32x32xf16, #L0>
  %a_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x32x32xf16, order=1,0, pad=8>
  %0 = arith.constant {value = 0} : i32
  %1 = ttg.memdesc_index %a_tile, %0 : !memdesc<32x32xf16, order=1,0, pad=8>
  ttg.local_store %q, %1
  ttg.barrier {reason = "the dot operands stored above are in shared memory"}
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


def test_a_tile_loaded_once_is_stored_where_it_was_loaded(check):
    _, stats = check(stage_invariant_dot_operands, INVARIANT_A, STAGED_A, OPTIONS)
    assert stats == {"staged_once": 1, "stored_once": 0}


# test_dot's kernel: one dot of two tiles loaded once, no loop
ONE_DOT = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>) {
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %a = tt.load %a_ptrs {vec = 8} : tensor<32x32xf16, #L0>
  %b = tt.load %b_ptrs {vec = 8} : tensor<32x32xf16, #L0>
  %d = tt.dot %a, %b, %zero {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
  tt.store %c_ptrs, %d
  tt.return
}
"""


def test_both_operands_of_a_dot_outside_loops_are_stored_with_one_barrier(run_pass):
    m, stats = run_pass(stage_invariant_dot_operands, ONE_DOT, OPTIONS)
    names = [op.name for op in m.kernel.walk()]
    assert stats == {"staged_once": 2, "stored_once": 0} and "ttg.async_copy" not in names
    assert names.count("tt.load") == 2 and names.count("ttg.local_store") == 2 and names.count("ttg.barrier") == 1
    assert names.index("ttg.barrier") == names.index("tt.dot") - 1
    assert names.index("ttg.local_store") < names.index("tt.load", names.index("tt.load") + 1)  # A stored at once
    dot = next(op for op in m.kernel.walk() if op.name == "tt.dot")
    assert all(v.type.is_memdesc() for v in dot.operands[:2])


def test_tiles_loaded_in_the_loop_are_left_to_the_pipeline(run_pass):
    text = INVARIANT_A.replace("%q = tt.load %a_ptrs {vec = 8} : tensor<32x32xf16, #L0>\n", "").replace(
        "tt.dot %q, %b", "tt.dot %b, %b")
    m, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats == {"staged_once": 0, "stored_once": 0}
    assert "ttg.local_alloc" not in [op.name for op in m.kernel.walk()]


def test_a_tile_read_by_more_than_dots_stays_in_registers(run_pass):
    text = INVARIANT_A.replace("  tt.store %c_ptrs, %acc\n", "  tt.store %c_ptrs, %acc\n  tt.store %a_ptrs, %q\n")
    m, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats["staged_once"] == 0 and [op.name for op in m.kernel.walk()].count("tt.load") == 2


def test_narrow_accesses_are_stored_too(run_pass):
    """No cp.async: any access width and any `other` go through registers."""
    _, stats = run_pass(stage_invariant_dot_operands, INVARIANT_A.replace("%a_ptrs {vec = 8}", "%a_ptrs {vec = 1}"),
                        OPTIONS)
    assert stats["staged_once"] == 1


def test_tiles_smaller_than_one_mma_block_stay_in_registers(run_pass):
    """A dot of fewer than 16 rows wraps its rows onto the instruction's: the dot stages such tiles itself."""
    text = ONE_DOT.replace("32x32xf32", "8x32xf32").replace("%a_ptrs: tensor<32x32", "%a_ptrs: tensor<8x32").replace(
        "%c_ptrs: tensor<32x32", "%c_ptrs: tensor<8x32").replace("%a_ptrs {vec = 8} : tensor<32x32", "%a_ptrs {vec = 8} : tensor<8x32")
    _, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats == {"staged_once": 0, "stored_once": 0}


def test_sm75_is_left_alone(run_pass):
    _, stats = run_pass(stage_invariant_dot_operands, INVARIANT_A, GpuOptions(num_warps=4, num_stages=3, arch=75))
    assert stats["staged_once"] == 0 and stats["skipped"]


def test_the_staged_tile_stays_live_across_the_pipelined_loop(run_passes):
    m, (staged, piped) = run_passes([stage_invariant_dot_operands, pipeline_dot_operands], INVARIANT_A, OPTIONS)
    assert staged["staged_once"] == 1 and piped["pipelined"] == 1 and piped["buffers"] == 1
    ops = list(m.kernel.walk())
    names = [op.name for op in ops]
    assert names.count("tt.load") == 1 and names.index("tt.load") < names.index("scf.for")  # q, before the loop
    first = ops[names.index("ttg.local_alloc")]
    assert first.result.type.shape == (1, 32, 32) and first.attrs["stages"] == 1
    allocate_shared.run(m, GpuOptions(num_warps=4))
    loop_end = max(k for k, op in enumerate(m.kernel.walk()) if op.block is not m.kernel.body)
    tile = m.shared_plan[0]
    assert tile["stages"] == 1 and tile["live"][1] >= loop_end and tile["filled_by"] == "st.shared"


# a wgmma (tf32) dot in a loop reads %qs = %q * %s, computed before the loop
SCALED_A = """
#L0 = #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>
#L1 = #mma<[4, 1]>
tt.func @k(%a_ptrs: tensor<64x32x!ptr<f32>, #L0>, %b_ptrs: tensor<32x32x!ptr<f32>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>, %s: f32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %q = tt.load %a_ptrs {vec = 4} : tensor<64x32xf32, #L0>
  %sc = tt.splat %s : tensor<64x32xf32, #L0>
  %qs = arith.mulf %q, %sc : tensor<64x32xf32, #L0>
  %acc, %pb = scf.for %c0, %n, %c1, %zero, %b_ptrs : tensor<64x32xf32, #L1>, tensor<32x32x!ptr<f32>, #L0> {
  ^bb(%i: i32, %acc0: tensor<64x32xf32, #L1>, %pb0: tensor<32x32x!ptr<f32>, #L0>):
    %b = tt.load %pb0 {vec = 4} : tensor<32x32xf32, #L0>
    %d = tt.dot %qs, %b, %acc0 {input_precision = "tf32", instr = "wgmma.m64n32k8.tf32", mma = [4, 1]} : tensor<64x32xf32, #L1>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f32>, #L0>
    scf.yield %d, %pb1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def test_a_register_tile_made_before_the_loop_is_stored_once(run_pass):
    m, stats = run_pass(stage_invariant_dot_operands, SCALED_A, OPTIONS)
    assert stats == {"staged_once": 0, "stored_once": 1}
    top = [op.name for op in m.kernel.body.ops]
    loop = top.index("scf.for")
    store = next(op for op in m.kernel.body.ops if op.name == "ttg.local_store")
    assert top[loop - 2:loop] == ["ttg.local_store", "ttg.barrier"]  # just before the loop, once
    assert store.operands[0].defining_op.name == "arith.mulf" and store.attrs["tf32"] is True
    alloc = next(op for op in m.kernel.body.ops if op.name == "ttg.local_alloc")
    t = alloc.result.type
    assert t.shape == (1, 64, 32) and t.order == (1, 0) and t.swizzle == 128  # A K-major, as the dot stages it
    assert alloc.attrs["fill"] == "registers"
    dot = next(op for op in m.kernel.walk() if op.name == "tt.dot")
    assert dot.operands[0] is store.operands[1] and dot.operands[0].type.is_memdesc()
    allocate_shared.run(m, GpuOptions(num_warps=4))
    plan = {b["op"]: b for b in m.shared_plan}
    assert "filled by st.shared" in plan["ttg.local_alloc"]["reason"]


def test_a_register_tile_read_by_more_than_the_dots_stays(run_pass):
    text = SCALED_A.replace("  tt.store %c_ptrs, %acc\n", "  tt.store %c_ptrs, %acc\n  tt.store %a_ptrs, %qs\n")
    _, stats = run_pass(stage_invariant_dot_operands, text, OPTIONS)
    assert stats["stored_once"] == 0


def test_mma_sync_dots_keep_staging_their_register_operands(run_pass):
    _, stats = run_pass(stage_invariant_dot_operands, SCALED_A.replace('instr = "wgmma.m64n32k8.tf32", ', ""),
                        OPTIONS)
    assert stats["stored_once"] == 0


# fla's chunk_gla_bwd_kernel_inter at 2 warps: fp32 tiles loaded once, read by two mma.sync tf32 dots in a row
TF32_MMA_SYNC = """
#L0 = #blocked<[1, 4], [2, 16], [2, 1], [1, 0]>
#L1 = #mma<[2, 1]>
tt.func @k(%a_ptrs: tensor<64x64x!ptr<f32>, #L0>, %b_ptrs: tensor<64x32x!ptr<f32>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>) {
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %v = tt.load %a_ptrs {vec = 4} : tensor<64x64xf32, #L0>
  %a = tt.load %a_ptrs {vec = 4} : tensor<64x64xf32, #L0>
  %b = tt.load %b_ptrs {vec = 4} : tensor<64x32xf32, #L0>
  %d = tt.dot %a, %b, %zero {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [2, 1]} : tensor<64x32xf32, #L1>
  %e = tt.dot %v, %b, %d {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [2, 1]} : tensor<64x32xf32, #L1>
  tt.store %c_ptrs, %e
  tt.return
}
"""

TF32_MMA_SYNC_STAGED = """
#L0 = #blocked<[1, 4], [2, 16], [2, 1], [1, 0]>
#L1 = #mma<[2, 1]>

tt.func @k(%a_ptrs: tensor<64x64x!ptr<f32>, #L0>, %b_ptrs: tensor<64x32x!ptr<f32>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>) {
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %v = tt.load %a_ptrs {vec = 4} : tensor<64x64xf32, #L0>
  %a_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x64x64xf32, order=1,0, pad=4>
  %0 = arith.constant {value = 0} : i32
  %1 = ttg.memdesc_index %a_tile, %0 : !memdesc<64x64xf32, order=1,0, pad=4>
  ttg.local_store %v, %1 {tf32 = true}
  %a = tt.load %a_ptrs {vec = 4} : tensor<64x64xf32, #L0>
  %b = tt.load %b_ptrs {vec = 4} : tensor<64x32xf32, #L0>
  %d = tt.dot %a, %b, %zero {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [2, 1]} : tensor<64x32xf32, #L1>
  ttg.barrier {reason = "the dot operands stored above are in shared memory"}
  %e = tt.dot %1, %b, %d {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [2, 1]} : tensor<64x32xf32, #L1>
  tt.store %c_ptrs, %e
  tt.return
}
"""


def test_an_fp32_mma_sync_operand_held_across_another_dot_is_stored_at_its_load(check):
    """%v waits in registers while the first dot runs: stored right after its load (tf32-rounded, as the dot's own
    staging rounds it), K-major with rows padded by 16 bytes for ldmatrix (fla's chunk_gla_bwd_kernel_inter: 624 ->
    384 bytes of spill traffic, Triton 520). %a is read by the next dot and %b by both: left to the dots' own
    staging (a buffer of their own cost fla's chunk_gla_fwd_kernel_o 112 bytes of spills)."""
    _, stats = check(stage_invariant_dot_operands, TF32_MMA_SYNC, TF32_MMA_SYNC_STAGED, OPTIONS)
    assert stats == {"staged_once": 1, "stored_once": 0}
