"""pipeline_dot_operands for an mma.sync tf32 dot (fla's chunk_fwd_kernel_h at one warp): an fp32 tile the dot reads
as it was loaded is copied by cp.async into a K-major stage with padded rows (4 bytes at a time when it is contiguous
along M in global memory), so ldmatrix reads its fragments; an fp32 tile the dot reads only after elementwise math
(`k * exp2(g)`) rides in the stages too, in its load's order, and is read back right before its first reader. Before,
the loop loaded every tile into registers (240 registers; 255 and 200 bytes of spills with USE_GK)."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import allocate_shared, insert_barriers, pipeline_dot_operands
from kernellab.compiler.printer import print_module

# A: [32, 64] contiguous along M (fla's k + o_k[:, None] + o_t[None, :] * H*K); B: [64, 32] contiguous along N,
# scaled by exp2 of a second tile before the dot
LOOP = """
#L0 = #blocked<[4, 1], [8, 4], [1, 1], [0, 1]>
#L1 = #blocked<[1, 4], [4, 8], [1, 1], [1, 0]>
#L2 = #mma<[1, 1]>
tt.func @k(%a_ptrs: tensor<32x64x!ptr<f32>, #L0>, %b_ptrs: tensor<64x32x!ptr<f32>, #L1>, %g_ptrs: tensor<64x32x!ptr<f32>, #L1>, %c_ptrs: tensor<32x32x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %astep = arith.constant {value = 4096} : tensor<32x64xi32, #L0>
  %bstep = arith.constant {value = 2048} : tensor<64x32xi32, #L1>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L2>
  %acc, %pa, %pb, %pg = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs, %g_ptrs : tensor<32x32xf32, #L2>, tensor<32x64x!ptr<f32>, #L0>, tensor<64x32x!ptr<f32>, #L1>, tensor<64x32x!ptr<f32>, #L1> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L2>, %pa0: tensor<32x64x!ptr<f32>, #L0>, %pb0: tensor<64x32x!ptr<f32>, #L1>, %pg0: tensor<64x32x!ptr<f32>, #L1>):
    %a = tt.load %pa0 {vec = 4} : tensor<32x64xf32, #L0>
    %b = tt.load %pb0 {vec = 4} : tensor<64x32xf32, #L1>
    %g = tt.load %pg0 {vec = 4} : tensor<64x32xf32, #L1>
    %acc1 = arith.mulf %acc0, %acc0 : tensor<32x32xf32, #L2>
    %e = math.exp2 %g : tensor<64x32xf32, #L1>
    %bs = arith.mulf %b, %e : tensor<64x32xf32, #L1>
    %d = tt.dot %a, %bs, %acc1 {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [1, 1]} : tensor<32x32xf32, #L2>
    %pa1 = tt.addptr %pa0, %astep : tensor<32x64x!ptr<f32>, #L0>
    %pb1 = tt.addptr %pb0, %bstep : tensor<64x32x!ptr<f32>, #L1>
    %pg1 = tt.addptr %pg0, %bstep : tensor<64x32x!ptr<f32>, #L1>
    scf.yield %d, %pa1, %pb1, %pg1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def _run(passes, stages=2, text=LOOP):
    m = parse_module(text)
    stats = [p.run(m, GpuOptions(num_warps=1, num_stages=stages)) for p in passes]
    return m, stats


def _allocs(m):
    return {op.attrs["operand"] + str(i): op for i, op in
            enumerate(op for op in m.kernel.walk() if op.name == "ttg.local_alloc")}


def test_tf32_operand_and_math_tiles_are_staged(monkeypatch):
    monkeypatch.delenv("KERNELLAB_PIPELINE_SIDE_LOADS", raising=False)
    m, (stats,) = _run([pipeline_dot_operands])
    assert stats["pipelined"] == 1 and stats["buffers"] == 3 and stats["side_loads"] == 2, stats
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    a, b, g = allocs
    # A: K-major ([M][K], K contiguous), rows padded by 16 bytes, for ldmatrix
    assert a.attrs["operand"] == "a" and str(a.result.type) == "!memdesc<2x32x64xf32, order=1,0, pad=4>"
    # the math tiles: dense, in their load's order
    assert [x.attrs["operand"] for x in (b, g)] == ["side", "side"]
    assert str(b.result.type) == str(g.result.type) == "!memdesc<2x64x32xf32, order=1,0, pad=0>"
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    body = loop.regions[0].ops
    names = [op.name for op in body]
    assert "tt.load" not in names and names[0] == "ttg.async_wait"
    # A's copy runs across its global contiguity: one element a copy, runs of 4 from one pointer
    copies = [op for op in body if op.name == "ttg.async_copy"]
    (ca,) = [c for c in copies if c.operands[1].defining_op.operands[0] is a.result]
    assert ca.attrs == {"vec": 1, "run": 4}
    assert all(c.attrs == {"vec": 4} for c in copies if c is not ca)
    # the dot reads A from the stage; B is read back (ld.shared) right before the math, after the mulf of acc
    dot = next(op for op in body if op.name == "tt.dot")
    assert dot.operands[0].type.is_memdesc() and not dot.operands[1].type.is_memdesc()
    loads = [op for op in body if op.name == "ttg.local_load"]
    assert len(loads) == 2
    for ll in loads:
        user = min(ll.result.uses, key=body.index)
        assert body.index(ll) == body.index(user) - 1
    mulf_acc = next(op for op in body if op.name == "arith.mulf" and op.operands[0] is loop.regions[0].args[1])
    assert all(body.index(ll) > body.index(mulf_acc) for ll in loads)
    text = print_module(m, with_locs=False)
    assert print_module(parse_module(text), with_locs=False) == text


def test_math_tiles_stay_loads_when_side_loads_are_off(monkeypatch):
    monkeypatch.setenv("KERNELLAB_PIPELINE_SIDE_LOADS", "0")
    m, (stats,) = _run([pipeline_dot_operands])
    assert stats["buffers"] == 1 and "side_loads" not in stats
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert [op.result.type.shape for op in loop.regions[0].ops if op.name == "tt.load"] == [(64, 32), (64, 32)]


def test_only_math_tiles_still_pipeline(monkeypatch):
    """With A read through math too, the loop is pipelined for its math tiles alone."""
    monkeypatch.delenv("KERNELLAB_PIPELINE_SIDE_LOADS", raising=False)
    text = LOOP.replace("%d = tt.dot %a,", "%an = arith.negf %a : tensor<32x64xf32, #L0>\n    %d = tt.dot %an,")
    m, (stats,) = _run([pipeline_dot_operands], text=text)
    assert stats["pipelined"] == 1 and stats["buffers"] == 3 and stats["side_loads"] == 3, stats
    assert all(op.attrs["operand"] == "side" for op in m.kernel.walk() if op.name == "ttg.local_alloc")


def test_a_tile_read_by_other_than_math_into_a_dot_stays(monkeypatch):
    """A math tile also stored (not only a dot's operand) keeps its global load."""
    monkeypatch.delenv("KERNELLAB_PIPELINE_SIDE_LOADS", raising=False)
    text = LOOP.replace("    scf.yield %d,", "    tt.store %pg0, %e\n    scf.yield %d,")
    m, (stats,) = _run([pipeline_dot_operands], text=text)
    assert stats["buffers"] == 2 and stats["side_loads"] == 1, stats
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert [op.result.type.shape for op in loop.regions[0].ops if op.name == "tt.load"] == [(64, 32)]


def test_plan_and_barriers(monkeypatch):
    """Each stage buffer gets its own range; the pipeline's waits order the stages, so insert_barriers adds no
    barrier for them in the loop (the dot's own staging of B has its barriers inside the dot)."""
    monkeypatch.delenv("KERNELLAB_PIPELINE_SIDE_LOADS", raising=False)
    m, _ = _run([pipeline_dot_operands, allocate_shared, insert_barriers])
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    assert [a.attrs["smem_bytes"] for a in allocs] == [2 * 32 * 68 * 4, 2 * 64 * 32 * 4, 2 * 64 * 32 * 4]
    spans = sorted((a.attrs["smem_offset"], a.attrs["smem_offset"] + a.attrs["smem_bytes"]) for a in allocs)
    assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:]))
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert not any(op.name == "ttg.barrier" for op in loop.regions[0].ops)
