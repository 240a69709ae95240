"""KERNELLAB_STORE_RUN (assign_layouts._widen_to_store_runs, on by default since its H200 timing; =0 off): a load moving
full 16-byte vectors whose values are stored as narrower elements of the same shape and order (int8 quantization of
f16 rows) takes the store's longer run per thread, as Triton's coalescing does, so the store writes 16-byte vectors
(idioms quantize one_block at 8 warps: one STG.128 a thread where the load's 8-element run left two STG.64).
Pass test (IR in / IR out, knob on and off), codegen test (the PTX's stores against Triton's), interpreter and GPU
results of the quantize texts with the knob on."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.gpu.options import GpuOptions  # noqa: E402
from kernellab.compiler.parser import parse_module  # noqa: E402
from kernellab.compiler.passes import assign_layouts  # noqa: E402
from kernellab.compiler.printer import print_module  # noqa: E402
from kernellab.compiler.verifier import verify  # noqa: E402

QUANT = """
tt.func @quant(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %q_ptr: !ptr<i8> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %range = tt.make_range {end = 4096, start = 0} : tensor<4096xi32>
  %ns = tt.splat %n : tensor<4096xi32>
  %mask = arith.cmpi %range, %ns {predicate = "slt"} : tensor<4096xi1>
  %xs = tt.splat %x_ptr : tensor<4096x!ptr<f16>>
  %xp = tt.addptr %xs, %range : tensor<4096x!ptr<f16>>
  %x = tt.load %xp, %mask : tensor<4096xf16>
  %y = arith.extf %x : tensor<4096xf32>
  %q = arith.fptosi %y : tensor<4096xi8>
  %qs = tt.splat %q_ptr : tensor<4096x!ptr<i8>>
  %qp = tt.addptr %qs, %range : tensor<4096x!ptr<i8>>
  tt.store %qp, %q, %mask
  tt.return
}
"""

WIDENED = """
#L0 = #blocked<[16], [32], [8], [0]>

tt.func @quant(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %q_ptr: !ptr<i8> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %range = tt.make_range {end = 4096, start = 0} : tensor<4096xi32, #L0>
  %ns = tt.splat %n : tensor<4096xi32, #L0>
  %mask = arith.cmpi %range, %ns {predicate = "slt"} : tensor<4096xi1, #L0>
  %xs = tt.splat %x_ptr : tensor<4096x!ptr<f16>, #L0>
  %xp = tt.addptr %xs, %range : tensor<4096x!ptr<f16>, #L0>
  %x = tt.load %xp, %mask {vec = 8} : tensor<4096xf16, #L0>
  %y = arith.extf %x : tensor<4096xf32, #L0>
  %q = arith.fptosi %y : tensor<4096xi8, #L0>
  %qs = tt.splat %q_ptr : tensor<4096x!ptr<i8>, #L0>
  %qp = tt.addptr %qs, %range : tensor<4096x!ptr<i8>, #L0>
  tt.store %qp, %q, %mask {vec = 16}
  tt.return
}
"""


def _norm(text):
    return "\n".join(ln.strip() for ln in text.strip().splitlines() if ln.strip())


def _assign(text, num_warps=8):
    m = parse_module(text)
    stats = assign_layouts.run(m, GpuOptions(num_warps=num_warps))
    verify(m, after=assign_layouts.NAME)
    return m, stats


def test_load_takes_the_int8_stores_run(monkeypatch):
    """8 warps, 4096 elements: 16 a thread. The f16 load's own vector is 8 elements, the int8 store's 16; with the
    knob the load (and the ranges, splats and mask) take 16 a thread and nothing converts."""
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    m, stats = _assign(QUANT)
    assert _norm(print_module(m, with_locs=False)) == _norm(WIDENED)
    assert stats == {"anchors": 2, "converts_inserted": 0, "loads_to_store_run": 1}


def test_on_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_STORE_RUN", raising=False)
    m, stats = _assign(QUANT)
    assert stats.get("loads_to_store_run") == 1


def test_without_the_knob_the_load_keeps_its_vector_run(monkeypatch):
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "0")
    m, stats = _assign(QUANT)
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    assert load.result.type.layout.spt == (8,) and "loads_to_store_run" not in stats


def test_capped_by_the_elements_per_thread(monkeypatch):
    """16 warps: 8 elements a thread, the store's run is 8 too; nothing widens."""
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    m, stats = _assign(QUANT, num_warps=16)
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    assert load.result.type.layout.spt == (8,) and "loads_to_store_run" not in stats


def test_a_load_not_stored_keeps_its_run(monkeypatch):
    """The int8 store writes another tile's values (a second load's): only the load whose values it stores
    widens (this one moves full vectors of its own and feeds nothing stored)."""
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    src = QUANT.replace("  %x = tt.load %xp, %mask : tensor<4096xf16>\n",
                        "  %x = tt.load %xp, %mask : tensor<4096xf16>\n"
                        "  %x2 = tt.load %xp, %mask : tensor<4096xf16>\n"
                        "  %s = arith.addf %x2, %x2 : tensor<4096xf16>\n"
                        "  tt.store %xp, %s, %mask\n")
    m, stats = _assign(src)
    loads = [op for op in m.kernel.walk() if op.name == "tt.load"]
    assert [ld.result.type.layout.spt for ld in loads] == [(16,), (8,)]
    assert stats["loads_to_store_run"] == 1


def test_unmasked_narrow_store_of_a_loop_is_unchanged_by_a_float_store(monkeypatch):
    """A store of the loaded element type (f16 -> f16) has the load's run: nothing to widen."""
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    src = QUANT.replace("  %q = arith.fptosi %y : tensor<4096xi8>\n", "  %q = arith.truncf %y : tensor<4096xf16>\n") \
        .replace("!ptr<i8>", "!ptr<f16>")
    m, stats = _assign(src)
    assert "loads_to_store_run" not in stats


def _quantize():
    from tests.idioms import _quantize

    return _quantize(kl.jit, tl)


def _built(variant, cfg, monkeypatch, knob):
    from tests.idioms import gpu_build_of

    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1" if knob else "0")
    w = _quantize()
    return gpu_build_of(monkeypatch, w, variant, w.inputs((64, 4096), "cpu", 0), cfg)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("num_warps, stores", [(4, 2), (8, 1)])
def test_quantize_one_block_stores_16_bytes(monkeypatch, num_warps, stores):
    """The idioms text `quant_row` at N = 4096: Triton 3.6 stores the int8 row with `num_warps=8` as one
    st.global.v4.b32 a thread (4 warps: two); kernellab did so only with the knob (two / four st.global.v2.b32
    without), the loads the same two / four ld.global.v4.b32, no shared memory but the reduction's."""
    off = _built("one_block", dict(num_warps=num_warps), monkeypatch, knob=False)
    on = _built("one_block", dict(num_warps=num_warps), monkeypatch, knob=True)
    assert on.asm["ptx"].count("st.global.v4.b32") == stores
    assert "st.global.v2.b32" not in on.asm["ptx"]
    assert off.asm["ptx"].count("st.global.v2.b32") == 2 * stores
    for ck in (off, on):
        assert ck.asm["ptx"].count("ld.global.v4.b32") == 2 * stores
        assert ck.asm["ptx"].count("bar.sync") == 1 and ck.n_spills == 0
    assert "ttg.convert_layout" not in on.asm["gpu"]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_two_pass_is_unchanged(monkeypatch):
    """The two-pass text's blocks hold 4-8 elements a thread: the store's run is the load's; same PTX."""
    for cfg in _quantize().variants[1].configs:
        off = _built("two_pass", cfg, monkeypatch, knob=False)
        on = _built("two_pass", cfg, monkeypatch, knob=True)
        assert off.asm["ptx"] == on.asm["ptx"]


def _check(device, variant, cfg, size, seed):
    w = _quantize()
    v = next(v for v in w.variants if v.name == variant)
    x = w.inputs(size, device, seed)
    v.launch(v.kernel, x, cfg)
    got, ref = w.result(x).cpu(), w.expected(x, v).cpu()
    assert not torch.isnan(got).any()
    err = (got - ref).norm() / ref.norm()
    assert err < w.tol, (variant, cfg, float(err))
    q = x["q"].cpu()
    assert (q != -128).all()  # every element written (poisoned with -128, out of the clamped range)


@pytest.mark.parametrize("variant", ["one_block", "two_pass"])
def test_interpreter_with_the_knob(monkeypatch, variant):
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    w = _quantize()
    v = next(v for v in w.variants if v.name == variant)
    _check("cpu", variant, v.configs[-1], (9, 1000), 3)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("variant", ["one_block", "two_pass"])
def test_gpu_quantize_with_the_knob(monkeypatch, variant, knob):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_STORE_RUN", knob)
    w = _quantize()
    v = next(v for v in w.variants if v.name == variant)
    for i, cfg in enumerate(v.configs):
        for size in ((64, 4096), (9, 1000), (33, 4000)):
            _check("cuda", variant, cfg, size, 20 + i)


PEERS = """
tt.func @kl(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %t_ptr: !ptr<f32> {tt.divisibility = 16}, %d_ptr: !ptr<bf16> {tt.divisibility = 16}, %s_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %range = tt.make_range {end = 2048, start = 0} : tensor<2048xi32>
  %ns = tt.splat %n : tensor<2048xi32>
  %mask = arith.cmpi %range, %ns {predicate = "slt"} : tensor<2048xi1>
  %xs = tt.splat %x_ptr : tensor<2048x!ptr<f32>>
  %xp = tt.addptr %xs, %range : tensor<2048x!ptr<f32>>
  %x = tt.load %xp, %mask : tensor<2048xf32>
  %ts = tt.splat %t_ptr : tensor<2048x!ptr<f32>>
  %tp = tt.addptr %ts, %range : tensor<2048x!ptr<f32>>
  %t = tt.load %tp, %mask : tensor<2048xf32>
  %g = arith.truncf %t : tensor<2048xbf16>
  %ds = tt.splat %d_ptr : tensor<2048x!ptr<bf16>>
  %dp = tt.addptr %ds, %range : tensor<2048x!ptr<bf16>>
  tt.store %dp, %g, %mask
  %p = arith.mulf %t, %x : tensor<2048xf32>
  %r = tt.reduce %p {axis = 0} : f32 {
  ^bb(%a: f32, %b: f32):
    %c = arith.addf %a, %b : f32
    tt.reduce.return %c
  }
  tt.store %s_ptr, %r
  tt.return
}
"""


@pytest.mark.parametrize("knob", ["0", "1"])
def test_store_run_peers_knob(monkeypatch, knob):
    """KERNELLAB_STORE_RUN_PEERS=1 (default off): heldout_texts5's KL divergence, reduced. 8 warps, 2048 f32: the
    target load feeds a bf16 store (run 8) and takes 8 a thread; the input load, whose values meet the target's in
    the product, takes 8 too with the knob (no conversion), keeps 4 and converts through shared memory without."""
    monkeypatch.setenv("KERNELLAB_STORE_RUN", "1")
    monkeypatch.setenv("KERNELLAB_STORE_RUN_PEERS", knob)
    m, stats = _assign(PEERS)
    text = print_module(m, with_locs=False)
    loads = [ln for ln in text.splitlines() if "tt.load" in ln]
    assert len(loads) == 2
    if knob == "1":
        assert stats["converts_inserted"] == 0 and stats["loads_to_store_run"] == 2, stats
        assert "ttg.convert_layout" not in text
        assert len({ln.rsplit("#", 1)[1] for ln in loads}) == 1, loads
    else:
        assert stats["converts_inserted"] >= 1 and stats["loads_to_store_run"] == 1, stats
