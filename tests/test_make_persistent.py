"""Persistent kernels (compiler/passes/make_persistent.py + runtime/persistent.py): the pass's IR in and out and its
refusals; the tutorial matmul text run persistent over several program counts (P = 1, P > tiles) gives the kernel
as written's result bit for bit and torch's float64 product, on ragged shapes into NaN-poisoned outputs, on the
interpreter (the tile IR's nest, and the same IR fused by flatten_loops as the GPU gets it) and on the GPU; split-K
and persistent never both apply to one launch (split-K decides first); built for sm_90a at 8192x8192x1024 the
fused loop copies the next tile's operands before the tile's epilogue waits for its last wgmma and stores."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import flatten_loops, make_persistent
from kernellab.compiler.printer import print_module
from kernellab.compiler.trip_count import evaluate
from kernellab.compiler.verifier import verify
from kernellab.runtime import persistent, split_k
from kernellab.runtime.interpreter import Interpreter
from tests import matmul_variants as mv
from tests.corpus import make_kernels
from tests.passes.conftest import check_uses, normalize, run_check

SLOT = "_persistent_state"
KNOB = persistent.KNOB


# ------------------------------------------------------------------------------------------- the pass, IR in/out
KERNEL = """
tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pc: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %pid = tt.get_program_id {axis = 0} : i32
  %np = tt.get_num_programs {axis = 0} : i32
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %zero = arith.constant {value = 0.0} : tensor<16x16xf32>
  %off = arith.muli %pid, %c16 : i32
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %offs = tt.splat %off : tensor<16xi32>
  %rows = arith.addi %offs, %r : tensor<16xi32>
  %r2 = tt.expand_dims %rows {axis = 1} : tensor<16x1xi32>
  %r3 = tt.broadcast %r2 : tensor<16x16xi32>
  %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %pa0 = tt.addptr %ta, %r3 : tensor<16x16x!ptr<f16>>
  %step = arith.constant {value = 16} : tensor<16x16xi32>
  %acc, %p = scf.for %c0, %n, %c1, %zero, %pa0 : tensor<16x16xf32>, tensor<16x16x!ptr<f16>> {
  ^bb(%i: i32, %a0: tensor<16x16xf32>, %p0: tensor<16x16x!ptr<f16>>):
    %a = tt.load %p0 : tensor<16x16xf16>
    %d = tt.dot %a, %a, %a0 {input_precision = "ieee"} : tensor<16x16xf32>
    %p1 = tt.addptr %p0, %step : tensor<16x16x!ptr<f16>>
    scf.yield %d, %p1
  }
  %tc = tt.splat %pc : tensor<16x16x!ptr<f32>>
  %pcs = tt.addptr %tc, %r3 : tensor<16x16x!ptr<f32>>
  %lim = arith.muli %np, %c16 : i32
  %lims = tt.splat %lim : tensor<16x16xi32>
  %m = arith.cmpi %r3, %lims {predicate = "slt"} : tensor<16x16xi1>
  tt.store %pcs, %acc, %m
  tt.return
}
"""

PERSISTENT = """
tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pc: !ptr<f32> {tt.divisibility = 16}, %n: i32, %persistent_tiles: i32) {
  %program = tt.get_program_id {axis = 0} : i32
  %programs = tt.get_num_programs {axis = 0} : i32
  %0 = arith.constant {value = 1} : i32
  %1 = arith.constant {value = 0} : i32
  %2 = arith.subi %persistent_tiles, %program : i32
  %3 = arith.addi %2, %programs : i32
  %4 = arith.subi %3, %0 : i32
  %5 = arith.divsi %4, %programs : i32
  %my_tiles = arith.maxsi %5, %1 : i32
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %lim = arith.muli %persistent_tiles, %c16 : i32
  scf.for %1, %my_tiles, %0 {flatten = true} {
  ^bb(%tile_iter: i32):
    %6 = arith.muli %tile_iter, %programs : i32
    %tile = arith.addi %program, %6 : i32
    %zero = arith.constant {value = 0.0} : tensor<16x16xf32>
    %off = arith.muli %tile, %c16 : i32
    %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
    %offs = tt.splat %off : tensor<16xi32>
    %rows = arith.addi %offs, %r : tensor<16xi32>
    %r2 = tt.expand_dims %rows {axis = 1} : tensor<16x1xi32>
    %r3 = tt.broadcast %r2 : tensor<16x16xi32>
    %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
    %pa0 = tt.addptr %ta, %r3 : tensor<16x16x!ptr<f16>>
    %step = arith.constant {value = 16} : tensor<16x16xi32>
    %acc, %p = scf.for %c0, %n, %c1, %zero, %pa0 : tensor<16x16xf32>, tensor<16x16x!ptr<f16>> {
    ^bb(%i: i32, %a0: tensor<16x16xf32>, %p0: tensor<16x16x!ptr<f16>>):
      %a = tt.load %p0 : tensor<16x16xf16>
      %d = tt.dot %a, %a, %a0 {input_precision = "ieee"} : tensor<16x16xf32>
      %p1 = tt.addptr %p0, %step : tensor<16x16x!ptr<f16>>
      scf.yield %d, %p1
    }
    %tc = tt.splat %pc : tensor<16x16x!ptr<f32>>
    %pcs = tt.addptr %tc, %r3 : tensor<16x16x!ptr<f32>>
    %lims = tt.splat %lim : tensor<16x16xi32>
    %m = arith.cmpi %r3, %lims {predicate = "slt"} : tensor<16x16xi1>
    tt.store %pcs, %acc, %m
    scf.yield
  }
  tt.return
}
"""


def test_body_becomes_the_tile_loop():
    """program_id(0) -> pid + i * P, num_programs(0) -> the tile count parameter; the shared scalars (constants,
    the bound the epilogue derives from the tile count) move before the tile loop, tensors stay in it."""
    stats = run_check(make_persistent, KERNEL, PERSISTENT)
    trip = stats.pop("trip_count")
    assert stats == {"persistent": 1, "program_ids_replaced": 2}
    assert evaluate(trip, [0, 0, 37]) == 37 and evaluate(trip, [0, 0, -5]) == 0  # the loop's `%n` iterations


def test_trip_count_of_a_strided_loop_and_of_bounds_from_memory():
    """The trip count the runtime's auto reads: cdiv(ub - lb, step) of the kernel's parameters; None where a bound
    is loaded from memory."""
    strided = KERNEL.replace("%c1 = arith.constant {value = 1} : i32",
                             "%c1 = arith.constant {value = 1} : i32\n  %c64 = arith.constant {value = 64} : i32")
    strided = strided.replace("scf.for %c0, %n, %c1,", "scf.for %c16, %n, %c64,")
    stats = make_persistent.run(parse_module(strided))
    assert [evaluate(stats["trip_count"], [0, 0, n]) for n in (16, 17, 80, 81, 1040, 3)] == [0, 1, 1, 2, 16, 0]
    loaded = KERNEL.replace("%n: i32)", "%n: i32, %pn: !ptr<i32>)").replace(
        "%c16 = arith.constant {value = 16} : i32", "%c16 = arith.constant {value = 16} : i32\n"
        "  %ln = tt.load %pn : i32").replace("scf.for %c0, %n,", "scf.for %c0, %ln,")
    stats = make_persistent.run(parse_module(loaded))
    assert stats["persistent"] == 1 and stats["trip_count"] is None


def _refused(text: str, why: str):
    m = parse_module(text)
    before = print_module(m, with_locs=False)
    stats = make_persistent.run(m)
    assert stats["persistent"] == 0 and why in stats["refused"], stats
    assert print_module(m, with_locs=False) == before  # the kernel as it was


def test_program_id_of_axis_1_is_refused():
    _refused(KERNEL.replace("%np = tt.get_num_programs {axis = 0}", "%np = tt.get_program_id {axis = 1}"),
             "axis 1 or 2")


def test_num_programs_of_axis_2_is_refused():
    _refused(KERNEL.replace("%np = tt.get_num_programs {axis = 0}", "%np = tt.get_num_programs {axis = 2}"),
             "axis 1 or 2")


def test_kernel_without_program_id_is_refused():
    _refused(KERNEL.replace("%pid = tt.get_program_id {axis = 0} : i32", "%pid = arith.constant {value = 3} : i32"),
             "does not read program_id(0)")


def test_store_before_the_loop_is_refused():
    _refused(KERNEL.replace("  %step = arith.constant {value = 16} : tensor<16x16xi32>\n",
                            "  %step = arith.constant {value = 16} : tensor<16x16xi32>\n"
                            "  %cp = tt.splat %pc : tensor<16x16x!ptr<f32>>\n"
                            "  tt.store %cp, %zero\n"), "before the dot loop has a side effect")


def test_store_in_the_loop_is_refused():
    _refused(KERNEL.replace("    %p1 = tt.addptr", "    %cp = tt.splat %pc : tensor<16x16x!ptr<f32>>\n"
                                                  "    tt.store %cp, %d\n    %p1 = tt.addptr"),
             "in the dot loop has a side effect")


def test_loop_without_dot_is_refused():
    _refused(KERNEL.replace('%d = tt.dot %a, %a, %a0 {input_precision = "ieee"} : tensor<16x16xf32>',
                            "%af = arith.extf %a : tensor<16x16xf32>\n    %d = arith.addf %af, %a0 : "
                            "tensor<16x16xf32>"), "no tl.dot")


def test_two_loops_are_refused():
    second = ("  %x = scf.for %c0, %n, %c1, %c0 : i32 {\n  ^bb(%j: i32, %s: i32):\n    %s1 = arith.addi %s, %j : i32\n"
              "    scf.yield %s1\n  }\n  tt.return")
    _refused(KERNEL.replace("  tt.return", second), "2 top-level loops")


def test_loop_inside_the_dot_loop_is_refused():
    inner = ("    %x = scf.for %c0, %n, %c1, %c0 : i32 {\n    ^bb(%j: i32, %s: i32):\n      %s1 = arith.addi %s, %j : i32\n"
             "      scf.yield %s1\n    }\n    %p1 = tt.addptr")
    _refused(KERNEL.replace("    %p1 = tt.addptr", inner), "a loop besides the dot loop")


def test_bounds_from_the_program_id_are_refused():
    _refused(KERNEL.replace("scf.for %c0, %n,", "scf.for %c0, %off,"), "bounds depend on the program id")


def test_atomic_cas_is_refused():
    text = KERNEL.replace("%pc: !ptr<f32> {tt.divisibility = 16}, %n: i32)",
                          "%pc: !ptr<f32> {tt.divisibility = 16}, %n: i32, %lock: !ptr<i32>)")
    text = text.replace("  tt.return", "  %old = tt.atomic_cas %lock, %c0, %c1 : i32\n  tt.return")
    _refused(text, "compare-and-swap")


def test_pipeline_adds_the_pass_only_for_the_variant():
    from kernellab.compiler.pipeline import tile_passes

    assert make_persistent not in tile_passes()
    assert tile_passes(persistent=True)[-1] is make_persistent
    both = tile_passes(split_k=True, persistent=True)
    assert both[-1] is make_persistent and split_k_pass_name() in [p.NAME for p in both]


def split_k_pass_name():
    from kernellab.compiler.passes import split_k as split_k_pass

    return split_k_pass.NAME


def test_choose():
    assert persistent.choose(2048, 132, "on") == 132
    assert persistent.choose(100, 132, "on") == 100
    assert persistent.choose(100, 132, "auto", 16) == 0  # one wave: as written
    assert persistent.choose(2048, 132, "auto", 16) == 132
    assert persistent.choose(5, 132, 7) == 7  # a forced P, more programs than tiles
    assert persistent.choose(2048, 132, "off") == 0


@pytest.mark.parametrize("trip", [8, 16, 32, 33, 64, 128, None])
@pytest.mark.parametrize("tiles,slots", [(2048, 132), (133, 132), (132, 132), (32, 132)])
def test_auto_wants_many_tiles_and_a_short_k_loop(trip, tiles, slots):
    """auto: persistent (min(tiles, slots) programs) only where the tiles take more than one wave and the dot loop
    runs at most MAX_TRIP iterations (8192x8192x1024 at BLOCK_K 64: 16, 1.05-1.07x on an H100; 4096^3: 64,
    1.00x; 8192^3: 128, 0.97-1.00x); an unknown trip count runs as written. `on` and a forced P ignore both."""
    assert persistent.MAX_TRIP == 32
    want = min(tiles, slots) if tiles > slots and trip is not None and trip <= 32 else 0
    assert persistent.choose(tiles, slots, "auto", trip) == want
    assert persistent.short_loop(trip) == (trip is not None and trip <= 32)
    assert persistent.choose(tiles, slots, "on", trip) == min(tiles, slots)
    assert persistent.choose(tiles, slots, 5, trip) == 5


def test_mode(monkeypatch):
    for v, want in (("0", "off"), ("off", "off"), ("1", "on"), ("auto", "auto"), ("AUTO ", "auto"), ("264", 264)):
        monkeypatch.setenv(KNOB, v)
        assert persistent.mode() == want
    monkeypatch.setattr(persistent, "DEFAULT", "0")  # the default is one constant: unset and empty read it
    for unset in (True, False):
        if unset:
            monkeypatch.delenv(KNOB)
        else:
            monkeypatch.setenv(KNOB, "")
        assert persistent.mode() == "off"
    monkeypatch.undo()
    monkeypatch.delenv(KNOB, raising=False)
    assert persistent.DEFAULT == "auto" and persistent.mode() == "auto"  # auto since the H200 timings (NOTES)


def test_knob_is_part_of_the_codegen_key():
    from kernellab.runtime.jit import CODEGEN_ENV

    assert KNOB in CODEGEN_ENV


# ------------------------------------------------------------------------------------------- the interpreter


def _tol(dtype, out, K):
    if out != torch.float32:
        return 1e-2
    return 2e-3 * max(1, K) ** 0.5 if dtype == torch.float32 else 1e-5 * max(1, K) ** 0.5  # tf32 for f32 inputs


# (M, N, K): M and N not multiples of the 16x32 tile, K not a multiple of BLOCK_K, K shorter than it
SHAPES = [(40, 70, 50), (33, 31, 17), (16, 64, 8), (5, 100, 40)]


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("dtype,out", [(torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16),
                                       (torch.float16, torch.float16), (torch.float32, torch.float32)])
def test_interpreter_persistent_matches_the_kernel_as_written(monkeypatch, M, N, K, dtype, out):
    """P = 2, 3, 7 and 100 (more programs than tiles) through the knob, `1` (min(tiles, 132)), and P = 1 through the
    variant: the same bits as the kernel as written, which matches float64."""
    monkeypatch.setenv(split_k.KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(M, N, K, dtype, out, seed=M * N + K)
    monkeypatch.setenv(KNOB, "0")
    mv.launch(kernel, a, b, c)
    plain = c.clone()
    assert not plain.isnan().any()
    ref = (a.double() @ b.double())
    tol = _tol(dtype, out, K)
    torch.testing.assert_close(plain.double(), ref.to(out).double(), rtol=tol, atol=tol)
    tiles = kl.cdiv(M, 16) * kl.cdiv(N, 32)
    for p in ("2", "3", "7", "100", "1"):
        monkeypatch.setenv(KNOB, p)
        c.fill_(float("nan"))
        mv.launch(kernel, a, b, c)
        st = mv.state(kernel, SLOT)
        assert st.refused is None and st.last == (min(tiles, 132) if p == "1" else int(p)), (p, st.last)
        assert torch.equal(c, plain), p
    c.fill_(float("nan"))
    st.variant.run((1, 1, 1), mv.args(a, b, c) + [tiles])  # P = 1: one program walks every tile
    assert torch.equal(c, plain)


@pytest.mark.parametrize("M,N,K,P", [(40, 70, 50, 1), (40, 70, 50, 4), (33, 31, 17, 3), (5, 100, 40, 9),
                                     (64, 64, 0, 2)])
def test_interpreter_flattened_variant(monkeypatch, M, N, K, P):
    """The variant's tile IR as the GPU pipeline gets it: flatten_loops fuses the tile loop with the K loop (the
    GPU's first pass), then the interpreter runs it: the same bits as the kernel as written (K = 0: zeros)."""
    monkeypatch.setenv(split_k.KNOB, "0")
    monkeypatch.setenv(KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(M, N, K, seed=P)
    mv.launch(kernel, a, b, c)
    plain = c.clone()
    ck = next(iter(kernel.cache.values()))
    st = persistent.state(kernel, ck)
    v = st.get_variant()
    module = parse_module(v.trace.final_ir)
    stats = flatten_loops.run(module)
    assert stats["flattened"] == 1, stats
    verify(module, after="flatten_loops")
    check_uses(module)
    c.fill_(float("nan"))
    tiles = kl.cdiv(M, 16) * kl.cdiv(N, 32)
    Interpreter(module, v.name, v.source_lines, arg_names=v.arg_names).run((P, 1, 1), mv.args(a, b, c) + [tiles])
    assert torch.equal(c, plain)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_variant_trace_records_the_pass(monkeypatch):
    """The lab reads passes from the trace: the variant's trace ends with make_persistent (changed, with a
    snapshot), the kernel as written's has no such pass."""
    monkeypatch.setenv(KNOB, "3")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(40, 70, 50)
    mv.launch(kernel, a, b, c)
    st = mv.state(kernel, SLOT)
    names = [p.name for p in st.variant.trace.passes if p.stage == "tile"]
    assert names[-1] == "make_persistent"
    rec = st.variant.trace.passes[names.index("make_persistent")]
    assert rec.changed and rec.stats["persistent"] == 1 and rec.snapshot is not None
    assert st.variant.arg_names[-1] == make_persistent.TILES
    assert st.ck.persistent_variant is st.variant
    assert "make_persistent" not in [p.name for p in st.ck.trace.passes]
    assert "{flatten = true}" in normalize(st.variant.trace.final_ir)


def test_split_k_decides_first(monkeypatch):
    """Both knobs forced: a launch split-K splits is not made persistent (its persistent variant is never
    compiled); with split-K off the same launch runs persistent; the results match the kernel as written."""
    M, N, K = 20, 40, 200
    a, b, c = mv.operands(M, N, K)
    monkeypatch.setenv(split_k.KNOB, "0")
    monkeypatch.setenv(KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    mv.launch(kernel, a, b, c)
    plain = c.clone()
    monkeypatch.setenv(split_k.KNOB, "3")
    monkeypatch.setenv(KNOB, "2")
    c.fill_(float("nan"))
    ck = mv.launch(kernel, a, b, c)
    assert ck._split_state.last == 3 and ck._split_state.variant is not None
    assert getattr(ck, "_persistent_state", None) is None or ck._persistent_state.variant is None
    torch.testing.assert_close(c, plain, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv(split_k.KNOB, "0")
    c.fill_(float("nan"))
    mv.launch(kernel, a, b, c)
    assert ck._persistent_state.last == 2 and torch.equal(c, plain)
    # split-K's own `on` leaves a launch with many programs alone (2 x programs > SMs): persistent takes it
    monkeypatch.setenv(split_k.KNOB, "1")
    a, b, c = mv.operands(16 * 20, 32 * 7, 40)
    mv.launch(kernel, a, b, c)
    ck = next(ck for ck in kernel.cache.values() if getattr(ck, "_persistent_state", None) is not None
              and ck._persistent_state.last)
    assert ck._split_state.last == 1 and ck._persistent_state.last == 2
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_refused_kernel_runs_as_written(monkeypatch):
    """A 2-D grid kernel (program_id(1)) and a kernel with no dot loop run as written under KERNELLAB_PERSISTENT=1;
    the first says why."""
    monkeypatch.setenv(KNOB, "1")
    kernel = make_kernels(kl, tl)["block_ptr_matmul_kernel"]
    M, N, K = 40, 70, 50
    a, b, c = mv.operands(M, N, K)
    kernel[(kl.cdiv(M, 16), kl.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                             c.stride(0), c.stride(1), BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    # a 2-D launch never asks for the variant; forced on a 1-D launch of the same kernel, the pass refuses it
    st = persistent.state(kernel, next(iter(kernel.cache.values())))
    assert st.programs((4, 1, 1), [], False) == 0 and "axis 1 or 2" in st.refused

    @kl.jit
    def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    x = torch.rand(100)
    y = torch.full((100,), float("nan"))
    ck = add[(4,)](x, y, 100, BLOCK=32)
    assert ck._persistent_state.refused == "no dot loop" and ck._persistent_state.variant is None
    torch.testing.assert_close(y, x + 1.0)


def test_off_compiles_no_variant(monkeypatch):
    monkeypatch.setenv(KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c = mv.operands(40, 70, 50)
    ck = mv.launch(kernel, a, b, c)
    assert getattr(ck, "_persistent_state", None) is None


def test_fast_path_wrapper(monkeypatch):
    """The warm-launch path: a 1-D grid goes to the variant's launcher over (P, 1, 1) with the tile count appended;
    a 2-D grid or the knob off keep the plain launch; auto leaves one wave and a long K loop alone (its decisions
    cached per trip count). The wrapper acts on the knob's value when it was made (a change of the knob drops the
    fast path's entry: test_codegen_env.py)."""
    class Ck:
        asm = {"tile": "scf.for tt.dot"}

    st = persistent.PersistentState(None, Ck(), None)
    st.variant, st.sms[0], st._built = object(), 132, True
    st.stats = {"persistent": 1, "trip_count": ["div", ["arg", 1], ["const", 64]]}  # K / 64 iterations
    st.slots = lambda on_gpu, device=0: 132
    st.fused = lambda: True
    st.fewer_blocks_per_sm = lambda: False
    calls = []
    st._go = lambda grid, stream, args: calls.append(("persistent", grid, stream, list(args)))

    def wrapper(how):
        monkeypatch.setenv(KNOB, how)
        return persistent.fast_wrapper(st, lambda grid, stream, args: calls.append(("plain", grid, stream,
                                                                                   list(args))), 0)

    go = wrapper("1")
    go((2048,), 7, [123, 4096])
    assert calls.pop() == ("persistent", (132, 1, 1), 7, [123, 4096, 2048]) and st.last == 132
    go((64,), 7, [123])
    assert calls.pop() == ("persistent", (64, 1, 1), 7, [123, 64])
    go((64, 2), 7, [123])
    assert calls.pop()[0] == "plain"
    go = wrapper("auto")
    go((64,), 7, [123, 1024])
    assert calls.pop()[0] == "plain" and st.last == 0
    go((2048,), 7, [123, 1024])  # 16 iterations
    assert calls.pop() == ("persistent", (132, 1, 1), 7, [123, 1024, 2048])
    for k, want in ((4096, "plain"), (2048, "persistent"), (2112, "plain"), (1024, "persistent"), (512, "persistent")):
        go((2048,), 7, [123, k])  # 64, 32, 33, 16, 8 iterations
        assert calls.pop()[0] == want, k
    assert {key[2] for key in st.decisions if key[1] == "auto"} == {16, 64, 32, 33, 8}
    st.fused = lambda: False  # the build kept the nest: auto leaves the launch as written, a forced P does not
    st.decisions.clear()
    go((2048,), 7, [123, 1024])
    assert calls.pop()[0] == "plain"
    st.fused = lambda: True
    st.stats = {"persistent": 1, "trip_count": None}  # unknown trip count: as written
    st.decisions.clear()
    go((2048,), 7, [123, 1024])
    assert calls.pop()[0] == "plain"
    go = wrapper("5")
    go((3,), 7, [123])
    assert calls.pop() == ("persistent", (5, 1, 1), 7, [123, 3])
    go = wrapper("0")
    go((2048,), 7, [123])
    assert calls.pop()[0] == "plain" and st.last == 0


def test_gpu_launch_path_with_a_stub_driver(monkeypatch):
    """The GPU launch path end to end on the CPU (stand-in CUDA tensors, a stub cuLaunchKernel): a big 1-D grid
    launches the persistent variant over (P, 1, 1) with one more argument, on the slow path and the warm fast path;
    a skinny grid is split by split-K (auto) instead; with the knob off at the first launch the warm path is the
    plain one."""
    lo = mv.launch_overhead_tool()
    warm = mv.stub_variants(monkeypatch)
    monkeypatch.setenv(split_k.KNOB, "auto")
    monkeypatch.setenv(KNOB, "1")
    K, N = 1024, 8192

    def go(kernel, M):
        mv.launch_fake(kernel, M, N, K)

    launches = []
    with lo.fake_gpu(launches):
        first = make_kernels(kl, tl)["matmul_kernel"]
        go(first, 8192)  # slow path: 2048 tiles on 132 programs, 12 arguments + the tile count
        (gx, gy, gz, _), = launches
        assert (gx, gy, gz) == (132, 1, 1)
        st = mv.state(first, SLOT)
        assert st.variant.arg_names[-1] == make_persistent.TILES and st.last == 132
        go(first, 8192)  # warm: the fast path's wrappers (split-K's, then persistent's)
        go(first, 16)  # warm, skinny (32 tiles, 16 K-iterations): split-K's auto leaves it (too short), persistent
        assert warm == [("p", (132, 1, 1), 13, 2048), ("p", (32, 1, 1), 13, 32)] and len(launches) == 1

        monkeypatch.setenv(KNOB, "0")
        second = make_kernels(kl, tl)["matmul_kernel"]
        launches.clear()
        warm.clear()
        go(second, 8192)
        go(second, 8192)
        assert [(x, y, z) for x, y, z, _ in launches] == [(64 * 32, 1, 1)] * 2 and warm == []
        assert getattr(next(iter(second.cache.values())), "_persistent_state", None) is None


def test_auto_on_the_launch_path_with_a_stub_driver(monkeypatch):
    """KERNELLAB_PERSISTENT=auto on the GPU launch path (stub driver, 132 SMs, a block each, a fused build), the
    benchmark's 128x256x64 config: 8192x8192xK (2048 tiles) runs persistent over 132 programs at K = 512, 1024, 2048
    (8, 16, 32 iterations) and as written at K = 2112, 4096, 8192 (33, 64, 128); one-wave grids (1024^3: 32 tiles,
    2048^3: 128) run as written whatever K. The first launch takes the slow path, the rest the warm fast path (its
    decisions keyed by the trip count: every K here is one specialization); a first launch's slow path decides
    alike."""
    lo = mv.launch_overhead_tool()
    warm = mv.stub_variants(monkeypatch)
    monkeypatch.setenv(split_k.KNOB, "auto")
    monkeypatch.setenv(KNOB, "auto")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    cases = [(8192, 8192, 4096, False), (8192, 8192, 1024, True), (8192, 8192, 512, True),
             (8192, 8192, 2048, True), (8192, 8192, 2112, False), (8192, 8192, 8192, False),
             (1024, 1024, 1024, False), (2048, 2048, 2048, False), (2048, 2048, 512, False), (8192, 8192, 1024, True)]
    launches = []
    with lo.fake_gpu(launches):
        for i, (M, N, K, want) in enumerate(cases):
            launches.clear()
            warm.clear()
            mv.launch_fake(kernel, M, N, K)
            tiles = (M // 128) * (N // 256)
            st = mv.state(kernel, SLOT)
            if i == 0:  # the slow path (the kernel as written: the fast path then loads no kernel lazily)
                assert [(x, y, z) for x, y, z, _ in launches] == [(tiles, 1, 1)] and not warm
            elif want:
                assert warm == [("p", (132, 1, 1), 13, tiles)] and not launches, (M, N, K)
            else:
                assert [(x, y, z) for x, y, z, _ in launches] == [(tiles, 1, 1)] and not warm, (M, N, K)
            assert st.last == (132 if want else 0), (M, N, K)
        for K, want in ((1024, 132), (4096, 2048)):  # the slow path decides alike (a fresh kernel each)
            launches.clear()
            mv.launch_fake(make_kernels(kl, tl)["matmul_kernel"], 8192, 8192, K)
            assert [(x, y, z) for x, y, z, _ in launches] == [(want, 1, 1)], K
    assert len(kernel.cache) == 1 and st.variant is not None
    assert st.trip([0, 0, 0, 8192, 8192, 2048]) == 32 and st.trip([0, 0, 0, 8192, 8192, 2112]) == 33


# ------------------------------------------------------------------------------------------- built for sm_90a
def test_sm90_fused_loop_loads_the_next_tile_before_the_epilogue(tmp_path, monkeypatch):
    """The benchmark's config (128x256x64, 8 warps, 3 stages, fp16) at 8192x8192x1024 for sm_90a: the variant's
    tile loop is fused with its K loop and pipelined (wgmma overlapped), nothing spills; in the PTX the fused
    loop's body issues the cp.async copies of later K-tiles (at a tile's last K-tile: the next tile's first two)
    before the tile's epilogue waits for its last wgmma (wait_group 0) and stores, and the loop branches back
    after the stores."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    M = N = 8192
    K = 1024
    a, b, c = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16), \
        torch.empty(M, N, dtype=torch.float16)
    ck = kernel.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                       BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, grid=(1,))
    v = persistent.state(kernel, ck).get_variant()
    assert v is not None
    try:
        v.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    stats = {rec.name: rec.stats for rec in v.trace.passes}
    assert stats["flatten_loops"] == {"flattened": 1}
    assert stats["pipeline_dot_operands"]["pipelined"] == 1 and stats["pipeline_dot_operands"]["overlapped_wgmma"] == 1
    assert v.n_spills == 0, (v.n_regs, v.n_spills)
    assert v.shared <= 232448
    lines = v.asm["ptx"].splitlines()

    def where(pattern, start=0):
        return next(i for i in range(start, len(lines)) if re.search(pattern, lines[i]))

    wait1 = where(r"wgmma\.wait_group\.sync\.aligned 1;")  # the fused loop's: one wgmma group left in flight
    copies = where(r"cp\.async\.commit_group", wait1)  # this iteration's copies of a later K-tile
    wait0 = where(r"wgmma\.wait_group\.sync\.aligned 0;", wait1)  # the epilogue's, inside the loop
    store = where(r"st\.global", wait0)
    assert wait1 < copies < wait0 < store
    assert sum("cp.async.cg" in ln for ln in lines[wait1:wait0]) >= 8
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"(\$L__\w+):", ln))}
    back = [i for i in range(store, len(lines)) if (m := re.search(r"bra(?:\.uni)?\s+(\$L__\w+);", lines[i]))
            and labels.get(m.group(1), len(lines)) < wait1]
    assert back, "the epilogue is inside the loop (a branch back after its stores)"


def _bp_kernel():
    from benchmarks.block_ptr_matmul import block_ptr_kernel_for

    return block_ptr_kernel_for(kl, tl)


@pytest.mark.parametrize("M,N,K,P", [(40, 70, 50, 3), (33, 31, 17, 1), (5, 100, 40, 20)])
def test_interpreter_block_pointer_text(monkeypatch, M, N, K, P):
    """Triton's block-pointer matmul (block pointers made from the tile in its prologue, advanced along K; a TMA
    loop on sm_90) run persistent: the same bits as the kernel as written."""
    monkeypatch.setenv(split_k.KNOB, "0")
    monkeypatch.setenv(KNOB, "0")
    kernel = _bp_kernel()
    a, b, c = mv.operands(M, N, K, seed=M + P)
    mv.launch(kernel, a, b, c)
    plain = c.clone()
    torch.testing.assert_close(plain.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    ck = next(iter(kernel.cache.values()))
    v = persistent.state(kernel, ck).get_variant()
    assert v is not None
    c.fill_(float("nan"))
    v.run((P, 1, 1), mv.args(a, b, c) + [kl.cdiv(M, 16) * kl.cdiv(N, 32)])
    assert torch.equal(c, plain)


def test_sm90_block_pointer_text_keeps_tma(tmp_path, monkeypatch):
    """The block-pointer text at the benchmark's config, 8192x8192x1024 for sm_90a: fused, TMA loads (2 buffers)
    and TMA store kept, no spills; the next tile's TMA copies are issued before the epilogue's wait_group 0."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    kernel = _bp_kernel()
    M = N = 8192
    K = 1024
    a, b, c = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16), \
        torch.empty(M, N, dtype=torch.float16)
    ck = kernel.warmup(*mv.args(a, b, c), BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3,
                       grid=(1,))
    v = persistent.state(kernel, ck).get_variant()
    try:
        v.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    stats = {rec.name: rec.stats for rec in v.trace.passes}
    assert stats["flatten_loops"] == {"flattened": 1}
    assert stats["fill_stages_with_tma"]["tma"] == 2 and stats["tma_store"]["tma_store"] >= 1
    assert v.n_spills == 0, (v.n_regs, v.n_spills)
    ptx = v.asm["ptx"]
    wait1 = ptx.index("wgmma.wait_group.sync.aligned 1;")
    wait0 = ptx.index("wgmma.wait_group.sync.aligned 0;", wait1)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global", wait1, wait0) >= 2
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx[wait0:]


# ------------------------------------------------------------------------------------------- on a GPU
GPU_SHAPES = [(8192, 8192, 512), (1000, 3000, 1000), (130, 260, 4100), (257, 129, 64), (20, 300, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("out", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("P", ["1", "auto", "2", "7", "1000"])
def test_gpu_persistent_matches_the_kernel_as_written(monkeypatch, out, P):
    """The benchmark's config: P = 1 (`on`: min(tiles, SMs x blocks per SM)), auto, 2, 7, and 1000 (more programs
    than tiles on the small shapes), fp16/bf16/fp32 out, ragged shapes, NaN-poisoned, three launches each (the
    fast path takes the later ones): the same bits as the kernel as written, close to float64."""
    monkeypatch.setenv(split_k.KNOB, "0")
    dtype = torch.bfloat16 if out == torch.bfloat16 else torch.float16
    for M, N, K in GPU_SHAPES:
        a, b, c = mv.operands(M, N, K, dtype, out, device="cuda", seed=M + N + K)
        monkeypatch.setenv(KNOB, "0")
        plain_kernel = make_kernels(kl, tl)["matmul_kernel"]
        mv.launch(plain_kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
        torch.cuda.synchronize()
        plain = c.clone()
        monkeypatch.setenv(KNOB, P)
        kernel = make_kernels(kl, tl)["matmul_kernel"]
        for _ in range(3):
            c.fill_(float("nan"))
            mv.launch(kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            assert not c.isnan().any()
            assert torch.equal(c, plain), (M, N, K, P)
        tol = 1e-4 if out == torch.float32 else 2e-2
        torch.testing.assert_close(c.double(), (a.double() @ b.double()).to(out).double(), rtol=tol,
                                   atol=tol * K ** 0.5)
        st = mv.state(kernel, SLOT)
        tiles = kl.cdiv(M, 128) * kl.cdiv(N, 256)
        if P not in ("1", "auto"):
            assert st.last == int(P)
        elif P == "1":
            assert 1 <= st.last <= tiles
        elif tiles <= torch.cuda.get_device_properties(0).multi_processor_count:
            assert st.last == 0  # auto: one wave runs as written
            continue
        elif not persistent.short_loop(st.trip(mv.args(a, b, c))):
            assert st.last == 0  # auto: a long K loop runs as written
            continue
        elif st.fused():
            assert st.last >= 1
        else:  # auto: the GPU build kept the nest (fp32 128x256 output tile + stages over shared memory)
            assert st.last == 0
        assert st.variant is not None, st.refused


@pytest.mark.gpu
def test_gpu_persistent_variant_with_one_program_and_repeated_launches(monkeypatch):
    """P = 1 through the variant (one program walks all tiles), then alternating launches of the variant and the
    kernel as written on the same output."""
    monkeypatch.setenv(split_k.KNOB, "0")
    monkeypatch.setenv(KNOB, "3")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    M, N, K = 300, 700, 200
    a, b, c = mv.operands(M, N, K, device="cuda")
    mv.launch(kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    first = c.clone()
    st = mv.state(kernel, SLOT)
    tiles = kl.cdiv(M, 128) * kl.cdiv(N, 256)
    for p in (1, 2, tiles, tiles + 5):
        c.fill_(float("nan"))
        st.variant.run((p, 1, 1), mv.args(a, b, c) + [tiles])
        torch.cuda.synchronize()
        assert torch.equal(c, first), p
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_gpu_split_k_and_persistent_together(monkeypatch):
    """Both on (split-K auto, persistent 1): the skinny shape splits (and is not made persistent), the big one runs
    persistent; both right."""
    monkeypatch.setenv(split_k.KNOB, "auto")
    monkeypatch.setenv(KNOB, "1")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    for M, N, K in [(16, 4096, 4096), (4096, 4096, 512)]:
        a, b, c = mv.operands(M, N, K, device="cuda")
        for _ in range(2):
            c.fill_(float("nan"))
            ck = mv.launch(kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
        splits = ck._split_state.last
        pers = getattr(ck, "_persistent_state", None)
        if M == 16:
            assert splits > 1 and (pers is None or pers.last == 0)
        else:
            assert splits == 1 and pers.last >= 1


def test_benchmark_also_env_column(monkeypatch):
    """benchmarks/matmul.py --also-env KERNELLAB_PERSISTENT=...: the column's fresh kernel, launched with the switch
    set around it (here on the interpreter, the benchmark's 128x256x64 config), runs persistent and the row says
    so; the switch is restored after."""
    from benchmarks.matmul import _launched, also_env_implementations, env_setting, launch, variant_launched

    monkeypatch.delenv(KNOB, raising=False)
    (k, setting), = also_env_implementations([f"{KNOB}=3"]).values()
    M, N, K = 130, 260, 70
    a, b, c = mv.operands(M, N, K)
    with env_setting(setting):
        ck = launch(k, a, b, c)
    assert persistent.mode() == "auto"  # restored: unset, the default
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    got = variant_launched(ck)
    assert got["persistent_programs"] == 3 and "n_regs_as_written" in got
    assert "persistent P=3" in _launched(got)


@pytest.mark.gpu
@pytest.mark.parametrize("P", ["1", "5"])
def test_gpu_block_pointer_text(monkeypatch, P):
    """The block-pointer text (TMA loads and store on sm_90) persistent: ragged, poisoned, three launches each; the
    same bits as the kernel as written."""
    monkeypatch.setenv(split_k.KNOB, "0")
    for M, N, K in [(4096, 4096, 512), (1000, 3000, 1000), (257, 129, 64)]:
        a, b, c = mv.operands(M, N, K, device="cuda", out=torch.float16, seed=M + K)
        monkeypatch.setenv(KNOB, "0")
        mv.launch(_bp_kernel(), a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
        torch.cuda.synchronize()
        plain = c.clone()
        monkeypatch.setenv(KNOB, P)
        kernel = _bp_kernel()
        for _ in range(3):
            c.fill_(float("nan"))
            mv.launch(kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            assert torch.equal(c, plain), (M, N, K)
        assert mv.state(kernel, SLOT).last >= 1
        torch.testing.assert_close(c.double(), (a.double() @ b.double()).half().double(), rtol=2e-2,
                                   atol=2e-2 * K ** 0.5)
