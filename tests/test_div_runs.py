"""KERNELLAB_DIV_RUNS (on by default; `0` turns it off): `rows // H` with rows = pid * BR + arange(BR) and H a
multiple of 16 (argument specialization) is constant over aligned 16-row blocks (Triton's axis rule for a quotient
by a splat divisor), and share_uniform_runs marks ops of slice layouts too, so codegen divides once per block:
rope_pairs (tests/idioms.py) at BR=16 / 4 warps holds two rows a thread (r, r + 8) and computed
`pos = (rows // H) % S` for both (2 div.s32 + 2 rem.s32, SASS 194; Triton 3.6: one of each, 155).
Axis-rule and pass tests (IR in / IR out), a PTX test, and interpreter / GPU results of rope_pairs with the knob."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.gpu.axis_info import AxisAnalysis  # noqa: E402
from kernellab.compiler.parser import parse_module  # noqa: E402
from kernellab.compiler.passes import share_uniform_runs as sur  # noqa: E402
from kernellab.compiler.printer import print_module  # noqa: E402

ROWS = """
tt.func @k(%h: i32 {tt.divisibility = 16}, %m: i32, %s: i32) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c16 = arith.constant {value = 16} : i32
  %start = arith.muli %pid, %c16 : i32
  %range = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %start : tensor<16xi32>
  %rows = arith.addi %base, %range : tensor<16xi32>
  %hs = tt.splat %h : tensor<16xi32>
  %ms = tt.splat %m : tensor<16xi32>
  %ss = tt.splat %s : tensor<16xi32>
  %q = arith.divsi %rows, %hs : tensor<16xi32>
  %pos = arith.remsi %q, %ss : tensor<16xi32>
  %qm = arith.divsi %rows, %ms : tensor<16xi32>
  %q8 = arith.divsi %rows, %rows : tensor<16xi32>
  tt.return
}
"""


def _consts(monkeypatch, knob):
    monkeypatch.setenv("KERNELLAB_DIV_RUNS", knob)
    m = parse_module(ROWS)
    axis = AxisAnalysis(m.kernel)
    named = {r.hint: r for op in m.kernel.walk() for r in op.results if r.hint}
    return {k: axis[named[k]].const for k in ("q", "pos", "qm", "q8")}


def test_a_quotient_by_a_multiple_of_16_is_constant_over_16_rows(monkeypatch):
    c = _consts(monkeypatch, "1")
    assert c["q"] == (16,) and c["pos"] == (16,)  # pid * 16 + [0, 16) over H = 16k: one quotient
    assert c["qm"] == (1,)  # a divisor of unknown divisibility: blocks of gcd(16, 1)
    assert c["q8"] == (1,)  # a divisor that varies along the dimension: nothing


def test_without_the_knob_the_quotient_is_per_element(monkeypatch):
    c = _consts(monkeypatch, "0")
    assert c == {"q": (1,), "pos": (1,), "qm": (1,), "q8": (1,)}


SLICED = """
#L0 = #slice<1, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>

tt.func @k(%h: i32 {{tt.divisibility = 16}}) {{
  %pid = tt.get_program_id {{axis = 0}} : i32
  %c16 = arith.constant {{value = 16}} : i32
  %start = arith.muli %pid, %c16 : i32
  %range = tt.make_range {{end = 16, start = 0}} : tensor<16xi32, #L0>
  %base = tt.splat %start : tensor<16xi32, #L0>
  %rows = arith.addi %base, %range : tensor<16xi32, #L0>
  %hs = tt.splat %h : tensor<16xi32, #L0>
  %q = arith.divsi %rows, %hs{marked} : tensor<16xi32, #L0>
  tt.return
}}
"""


def test_slice_layout_rows_an_extent_apart_share_the_quotient(monkeypatch):
    """The 16 rows in a slice of [1, 8] / [2, 16] / [4, 1]: a thread holds rows t and t + 8 (extent 8), the
    quotient is constant over 16: one block, one division."""
    monkeypatch.setenv("KERNELLAB_DIV_RUNS", "1")
    m = parse_module(SLICED.format(marked=""))
    stats = sur.run(m, None)
    expected = parse_module(SLICED.format(marked=" {uniform_blocks = [16]}"))
    assert print_module(m, with_locs=False) == print_module(expected, with_locs=False)
    assert stats == {"marked": 1}


def test_slice_layouts_are_not_marked_without_the_knob(monkeypatch):
    monkeypatch.setenv("KERNELLAB_DIV_RUNS", "0")
    m = parse_module(SLICED.format(marked=""))
    assert sur.run(m, None) == {"marked": 0}


def _rope():
    from tests.idioms import _rope

    return _rope(kl.jit, tl)


def _built(cfg, monkeypatch, knob, size=(2, 64, 32, 128)):
    from tests.idioms import gpu_build_of

    monkeypatch.setenv("KERNELLAB_DIV_RUNS", knob)
    w = _rope()
    return gpu_build_of(monkeypatch, w, "pairs", w.inputs(size, "cpu", 0), cfg)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("cfg, divs", [(dict(BR=16, num_warps=4), 1), (dict(BR=8, num_warps=2), 1),
                                       (dict(BR=32, num_warps=8), 2)])
def test_rope_pairs_divides_once_per_16_rows(monkeypatch, cfg, divs):
    """BR=16 / 4 warps and BR=8 / 2 warps: two rows a thread within one 16-row block: one div.s32 and one rem.s32
    (as Triton 3.6); BR=32 / 8 warps: rows t and t + 16 are in different blocks, two of each (as Triton)."""
    off = _built(cfg, monkeypatch, "0")
    on = _built(cfg, monkeypatch, "1")
    assert off.asm["ptx"].count("div.s32") == 2 and off.asm["ptx"].count("rem.s32") == 2
    assert on.asm["ptx"].count("div.s32") == divs and on.asm["ptx"].count("rem.s32") == divs
    for ck in (off, on):
        assert ck.asm["ptx"].count("ld.global.v4.b32") == 6 and ck.asm["ptx"].count("st.global.v4.b32") == 2
        assert ck.n_spills == 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_heads_not_a_multiple_of_16_keep_per_row_divisions(monkeypatch):
    """H = 12 (divisibility 4): blocks of 4 rows, smaller than the 8 rows between a thread's two: two divisions."""
    on = _built(dict(BR=16, num_warps=4), monkeypatch, "1", size=(2, 64, 12, 128))
    assert on.asm["ptx"].count("div.s32") == 2


def _check(device, cfg, size, seed):
    w = _rope()
    v = next(v for v in w.variants if v.name == "pairs")
    x = w.inputs(size, device, seed)
    v.launch(v.kernel, x, cfg)
    got, ref = w.result(x).cpu(), w.expected(x, v).cpu()
    assert not torch.isnan(got).any()  # every element written (the output is poisoned with NaN)
    err = (got - ref).norm() / ref.norm()
    assert err < w.tol, (cfg, size, float(err))


def test_interpreter_with_the_knob(monkeypatch):
    monkeypatch.setenv("KERNELLAB_DIV_RUNS", "1")
    _check("cpu", dict(BR=16, num_warps=4), (2, 5, 16, 64), 4)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
def test_gpu_rope_pairs_with_the_knob(monkeypatch, knob):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_DIV_RUNS", knob)
    w = _rope()
    v = next(v for v in w.variants if v.name == "pairs")
    for i, cfg in enumerate(v.configs):
        # heads a multiple of 16 (the shared division), 32 and 48 positions; heads of 12 and 3 (per row); a last
        # partial tile (n_rows not a multiple of BR)
        for size in ((2, 64, 32, 128), (3, 48, 16, 64), (2, 7, 12, 128), (1, 5, 3, 64)):
            _check("cuda", cfg, size, 30 + i)
