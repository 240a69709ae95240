"""pipeline_dot_operands with KERNELLAB_PIPELINE_SIDE_LOADS=1: a row vector loaded in a pipelined loop next to the
dots' tiles (the attention backward's lse and delta) is copied with them, S-1 iterations ahead, into a stage buffer
of [1, N] tiles, and read back with `ttg.local_load` from the stage the iteration reads; off (the default), it stays
a global load in the body. Then the shared-memory plan and barriers of the result."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import allocate_shared, insert_barriers, pipeline_dot_operands
from kernellab.compiler.printer import print_module

LOOP = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
#L2 = #slice<0, #mma<[2, 2]>>
tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<32x32x!ptr<f32>, #L1>, %v_ptrs: tensor<32x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %vstep = arith.constant {value = 32} : tensor<32xi32, #L2>
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L1>
  %acc, %pa, %pb, %pv = scf.for %c0, %n, %c1, %zero, %a_ptrs, %b_ptrs, %v_ptrs : tensor<32x32xf32, #L1>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x!ptr<f32>, #L2> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L1>, %pa0: tensor<32x32x!ptr<f16>, #L0>, %pb0: tensor<32x32x!ptr<f16>, #L0>, %pv0: tensor<32x!ptr<f32>, #L2>):
    %a = tt.load %pa0 {vec = 8} : tensor<32x32xf16, #L0>
    %b = tt.load %pb0 {vec = 8} : tensor<32x32xf16, #L0>
    %v = tt.load %pv0 {vec = 1} : tensor<32xf32, #L2>
    %d = tt.dot %a, %b, %acc0 {input_precision = "ieee", mma = [2, 2]} : tensor<32x32xf32, #L1>
    %ve = tt.expand_dims %v {axis = 0} : tensor<1x32xf32, #L1>
    %vb = tt.broadcast %ve : tensor<32x32xf32, #L1>
    %e = arith.addf %d, %vb : tensor<32x32xf32, #L1>
    %pa1 = tt.addptr %pa0, %step : tensor<32x32x!ptr<f16>, #L0>
    %pb1 = tt.addptr %pb0, %step : tensor<32x32x!ptr<f16>, #L0>
    %pv1 = tt.addptr %pv0, %vstep : tensor<32x!ptr<f32>, #L2>
    scf.yield %e, %pa1, %pb1, %pv1
  }
  tt.store %c_ptrs, %acc
  tt.return
}
"""


def _run(passes, stages=3):
    m = parse_module(LOOP)
    stats = [p.run(m, GpuOptions(num_warps=4, num_stages=stages)) for p in passes]
    return m, stats


def test_switched_off_the_row_vector_stays_a_global_load(monkeypatch):
    monkeypatch.setenv("KERNELLAB_PIPELINE_SIDE_LOADS", "0")
    m, (stats,) = _run([pipeline_dot_operands])
    assert stats["buffers"] == 2 and "side_loads" not in stats
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert [op.result.type.shape for op in loop.regions[0].ops if op.name == "tt.load"] == [(32,)]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_row_vector_rides_in_the_stages(monkeypatch, stages):
    monkeypatch.delenv("KERNELLAB_PIPELINE_SIDE_LOADS", raising=False)  # the default
    m, (stats,) = _run([pipeline_dot_operands], stages)
    assert stats["buffers"] == 3 and stats["side_loads"] == 1, stats
    allocs = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc"]
    side = [a for a in allocs if a.attrs["operand"] == "side"]
    assert len(side) == 1 and side[0].result.type.shape == (stages, 1, 32) and side[0].result.type.scalar.ir == "f32"
    assert side[0].result.type.pad == 0 and side[0].result.type.swizzle == 0
    top = m.kernel.body.ops
    loop = next(op for op in top if op.name == "scf.for")
    body = loop.regions[0].ops
    names = [op.name for op in body]
    assert "tt.load" not in names
    # the top wait covers the side stage too; the vector is read from the stage this iteration reads
    assert names[0] == "ttg.async_wait" and side[0].result in body[0].operands
    (ll,) = [op for op in body if op.name == "ttg.local_load"]
    view = ll.operands[0].defining_op
    read_slot, write_slot = loop.regions[0].args[-2:]
    assert view.operands == [side[0].result, read_slot] and ll.result.type.shape == (32,)
    assert str(ll.result.type.layout) == "#slice<0, #mma<[2, 2]>>"
    # the copy writes the stage S-1 iterations ahead, from the [1, 32] tile of the parent layout
    copies = [op for op in body if op.name == "ttg.async_copy"]
    (sc,) = [c for c in copies if c.operands[1].defining_op.operands[0] is side[0].result]
    assert sc.operands[1].defining_op.operands[1] is write_slot
    ptrs = sc.operands[0].defining_op
    assert ptrs.name == "tt.expand_dims" and ptrs.result.type.shape == (1, 32)
    assert str(ptrs.result.type.layout) == "#mma<[2, 2]>"
    # the prologue fills stages 0 .. S-2 of all three buffers, one commit group per stage
    pro = top[:top.index(loop)]
    assert sum(1 for op in pro if op.name == "ttg.async_copy") == 3 * (stages - 1)
    assert sum(1 for op in pro if op.name == "ttg.async_commit") == stages - 1
    after = top[top.index(loop) + 1]
    assert after.name == "ttg.async_wait" and side[0].result in after.operands
    text = print_module(m, with_locs=False)  # the new ops print as IR text that parses back
    assert print_module(parse_module(text), with_locs=False) == text


def test_plan_and_barriers(monkeypatch):
    """The side stage gets its own range in the plan (3 x 128 bytes); the pipeline's waits order it, so
    insert_barriers adds nothing in the loop."""
    monkeypatch.setenv("KERNELLAB_PIPELINE_SIDE_LOADS", "1")
    m, (_, plan, bars) = _run([pipeline_dot_operands, allocate_shared, insert_barriers])
    side = next(op for op in m.kernel.walk() if op.name == "ttg.local_alloc" and op.attrs["operand"] == "side")
    assert side.attrs["smem_bytes"] == 3 * 128
    others = [op for op in m.kernel.walk() if op.name == "ttg.local_alloc" and op is not side]
    lo, n = side.attrs["smem_offset"], side.attrs["smem_bytes"]
    assert all(lo + n <= o.attrs["smem_offset"] or o.attrs["smem_offset"] + o.attrs["smem_bytes"] <= lo for o in others)
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert not any(op.name == "ttg.barrier" for op in loop.regions[0].ops)
