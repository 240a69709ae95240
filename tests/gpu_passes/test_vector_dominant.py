"""assign_layouts with KERNELLAB_VECTOR_DOMINANT: where the first of a rank's largest accesses is a gather, the first
one as large that is not sets the kernel's usual layout of that rank (which fresh values and gathers take).
heldout_texts5's bilinear upsample gathers its neighbours first (one element a thread) and stores its outputs
contiguously: the first gather set the layout and the store went one element an instruction (0.74-0.77x Triton on
the H200; benchmarks/NOTES.md)."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import assign_layouts, remove_layout_conversions, store_in_value_layout
from tests.gpu_passes.conftest import normalize, printed

# offs = pid * 1024 + arange(1024); y[offs] = x[(offs // OW) * W + offs % OW // 2] (a gather, then a contiguous store)
GATHER_THEN_STORE = """
tt.func @up(%X: !ptr<f32> {tt.divisibility = 16}, %Y: !ptr<f32> {tt.divisibility = 16}, %W: i32 {tt.divisibility = 16}, %OW: i32 {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c1024 = arith.constant {value = 1024} : i32
  %p0 = arith.muli %pid, %c1024 : i32
  %ar = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %ps = tt.splat %p0 : tensor<1024xi32>
  %offs = arith.addi %ps, %ar : tensor<1024xi32>
  %ns = tt.splat %n : tensor<1024xi32>
  %m = arith.cmpi %offs, %ns {predicate = "slt"} : tensor<1024xi1>
  %ows = tt.splat %OW : tensor<1024xi32>
  %oy = arith.divsi %offs, %ows : tensor<1024xi32>
  %ox = arith.remsi %offs, %ows : tensor<1024xi32>
  %c2 = arith.constant {value = 2} : tensor<1024xi32>
  %x0 = arith.divsi %ox, %c2 : tensor<1024xi32>
  %ws = tt.splat %W : tensor<1024xi32>
  %row = arith.muli %oy, %ws : tensor<1024xi32>
  %src = arith.addi %row, %x0 : tensor<1024xi32>
  %xs = tt.splat %X : tensor<1024x!ptr<f32>>
  %xp = tt.addptr %xs, %src : tensor<1024x!ptr<f32>>
  %zero = arith.constant {value = 0.0} : tensor<1024xf32>
  %v = tt.load %xp, %m, %zero : tensor<1024xf32>
  %two = arith.constant {value = 2.0} : tensor<1024xf32>
  %out = arith.mulf %v, %two : tensor<1024xf32>
  %ys = tt.splat %Y : tensor<1024x!ptr<f32>>
  %yp = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>>
  tt.store %yp, %out, %m
  tt.return
}
"""


def _run(run_passes, monkeypatch, knob, warps=4):
    if knob is None:
        monkeypatch.delenv("KERNELLAB_VECTOR_DOMINANT", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_VECTOR_DOMINANT", knob)
    # the layouts, then the two passes that settle where the store's value and addresses are laid out
    m, _ = run_passes([assign_layouts, remove_layout_conversions, store_in_value_layout], GATHER_THEN_STORE,
                      GpuOptions(num_warps=warps))
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    store = next(op for op in m.kernel.walk() if op.name == "tt.store")
    return load, store, normalize(printed(m))


@pytest.mark.parametrize("knob", ["0"])
def test_off_takes_the_first_gathers_layout(run_passes, monkeypatch, knob):
    load, store, text = _run(run_passes, monkeypatch, knob)
    assert load.result.type.layout.spt == (1,) and store.operands[0].type.layout.spt == (1,)
    assert "ttg.convert_layout" not in text
    assert store.attrs["vec"] == 1


@pytest.mark.parametrize("knob", [None, "1"])  # on by default
@pytest.mark.parametrize("warps", [2, 4, 8])
def test_knob_takes_the_stores_vectors(run_passes, monkeypatch, warps, knob):
    load, store, text = _run(run_passes, monkeypatch, knob, warps)
    lay = load.result.type.layout
    # the gather in the store's layout, 4 a thread: one element a load still, the store 16 bytes an instruction,
    # and nothing converted between them
    assert (lay.spt, lay.tpw, lay.wpc) == ((4,), (32,), (warps,))
    assert load.attrs["vec"] == 1 and store.attrs["vec"] == 4
    assert store.operands[0].type.layout == lay and store.operands[1].type.layout == lay
    assert "ttg.convert_layout" not in text
    assert text.count("#blocked") == 1  # one layout for the whole kernel (its alias), as Triton's


# idx[offs] = (offs * 7) % n as int64 (a contiguous store, 2 a thread), then y[offs] = x[idx] (4 a thread)
INDEX_STORE_FIRST = """
tt.func @perm(%X: !ptr<f32> {tt.divisibility = 16}, %Y: !ptr<f32> {tt.divisibility = 16}, %I: !ptr<i64> {tt.divisibility = 16}, %n: i64) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c1024 = arith.constant {value = 1024} : i32
  %p0 = arith.muli %pid, %c1024 : i32
  %ar = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %ps = tt.splat %p0 : tensor<1024xi32>
  %o32 = arith.addi %ps, %ar : tensor<1024xi32>
  %offs = arith.extsi %o32 : tensor<1024xi64>
  %c7 = arith.constant {value = 7} : tensor<1024xi64>
  %t = arith.muli %offs, %c7 : tensor<1024xi64>
  %ns = tt.splat %n : tensor<1024xi64>
  %src = arith.remsi %t, %ns : tensor<1024xi64>
  %is = tt.splat %I : tensor<1024x!ptr<i64>>
  %ip = tt.addptr %is, %offs : tensor<1024x!ptr<i64>>
  tt.store %ip, %src
  %xs = tt.splat %X : tensor<1024x!ptr<f32>>
  %xp = tt.addptr %xs, %src : tensor<1024x!ptr<f32>>
  %v = tt.load %xp : tensor<1024xf32>
  %ys = tt.splat %Y : tensor<1024x!ptr<f32>>
  %yp = tt.addptr %ys, %offs : tensor<1024x!ptr<f32>>
  tt.store %yp, %v
  tt.return
}
"""


@pytest.mark.parametrize("knob", ["0", "1"])
def test_only_a_gather_gives_way(run_passes, monkeypatch, knob):
    """The first largest access is a contiguous store (int64, 2 a thread): it keeps setting the layout with the knob
    (the widest one, the f32 store, would put the `%` in two layouts, computed in both)."""
    monkeypatch.setenv("KERNELLAB_VECTOR_DOMINANT", knob)
    m, _ = run_passes([assign_layouts, remove_layout_conversions, store_in_value_layout], INDEX_STORE_FIRST)
    rems = [op for op in m.kernel.walk() if op.name == "arith.remsi"]
    assert len(rems) == 1 and rems[0].result.type.layout.spt == (2,)
    assert normalize(printed(m)).count("#blocked") == 1
