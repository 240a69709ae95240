"""KERNELLAB_BATCHED_SPLIT=1: decompose_batched_dot takes a batched (3-D) dot apart at its loads and its loop-carried
accumulator instead of at the dot (benchmarks/NOTES.md, "Held-out texts, third screen"): IR in -> IR out, the rewritten
tile IR on the interpreter against float64 references (the interpreter runs the GPU pass's output: it is still tile
IR), the sm_90a build (pipelined loads, no spills) and the GPU."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import decompose_batched_dot
from kernellab.compiler.printer import print_module
from kernellab.compiler.verifier import verify
from kernellab.runtime.interpreter import Interpreter

IR_IN = """
tt.func @k(%pa: !ptr<f16>, %pb: !ptr<f16>, %pc: !ptr<f32>, %n: i32, %sb: i32) {
  %r = tt.make_range {end = 2, start = 0} : tensor<2xi32>
  %s = tt.splat %sb : tensor<2xi32>
  %o = arith.muli %r, %s : tensor<2xi32>
  %e1 = tt.expand_dims %o {axis = 1} : tensor<2x1xi32>
  %e2 = tt.expand_dims %e1 {axis = 2} : tensor<2x1x1xi32>
  %ob = tt.broadcast %e2 : tensor<2x16x16xi32>
  %ta0 = tt.splat %pa : tensor<2x16x16x!ptr<f16>>
  %ta = tt.addptr %ta0, %ob : tensor<2x16x16x!ptr<f16>>
  %tb = tt.splat %pb : tensor<2x16x16x!ptr<f16>>
  %tc = tt.splat %pc : tensor<2x16x16x!ptr<f32>>
  %zero = arith.constant {value = 0.0} : tensor<2x16x16xf32>
  %lo = arith.constant {value = 0} : i32
  %one = arith.constant {value = 1} : i32
  %step = arith.constant {value = 16} : tensor<2x16x16xi32>
  %acc, %pend = scf.for %lo, %n, %one, %zero, %ta : tensor<2x16x16xf32>, tensor<2x16x16x!ptr<f16>> {
  ^bb(%k: i32, %c: tensor<2x16x16xf32>, %ap: tensor<2x16x16x!ptr<f16>>):
    %a = tt.load %ap : tensor<2x16x16xf16>
    %b = tt.load %tb : tensor<2x16x16xf16>
    %d = tt.dot %a, %b, %c {input_precision = "ieee"} : tensor<2x16x16xf32>
    %an = tt.addptr %ap, %step : tensor<2x16x16x!ptr<f16>>
    scf.yield %d, %an
  }
  tt.store %tc, %acc
  tt.return
}
"""

# the loop carries the two entries of the accumulator and of A's pointer tile (each advanced as the 3-D tile was);
# B's invariant pointer tile is rebuilt per entry outside the loop; the entries are put back together once
IR_OUT = """
tt.func @k(%pa: !ptr<f16>, %pb: !ptr<f16>, %pc: !ptr<f32>, %n: i32, %sb: i32) {
  %0 = arith.constant {value = 0} : i32
  %1 = arith.constant {value = 1} : i32
  %2 = arith.muli %0, %sb : i32
  %3 = arith.muli %1, %sb : i32
  %4 = tt.splat %2 : tensor<1xi32>
  %5 = tt.splat %3 : tensor<1xi32>
  %6 = tt.expand_dims %4 {axis = 1} : tensor<1x1xi32>
  %7 = tt.expand_dims %5 {axis = 1} : tensor<1x1xi32>
  %8 = tt.broadcast %6 : tensor<16x16xi32>
  %9 = tt.broadcast %7 : tensor<16x16xi32>
  %10 = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %11 = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %12 = tt.addptr %10, %8 : tensor<16x16x!ptr<f16>>
  %13 = tt.addptr %11, %9 : tensor<16x16x!ptr<f16>>
  %14 = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %15 = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %tc = tt.splat %pc : tensor<2x16x16x!ptr<f32>>
  %lo = arith.constant {value = 0} : i32
  %one = arith.constant {value = 1} : i32
  %16 = arith.constant {value = 16} : tensor<16x16xi32>
  %17 = arith.constant {value = 16} : tensor<16x16xi32>
  %18 = arith.constant {value = 0.0} : tensor<16x16xf32>
  %19, %20, %21, %22 = scf.for %lo, %n, %one, %12, %13, %18, %18 : tensor<16x16x!ptr<f16>>, tensor<16x16x!ptr<f16>>, tensor<16x16xf32>, tensor<16x16xf32> {
  ^bb(%k: i32, %23: tensor<16x16x!ptr<f16>>, %24: tensor<16x16x!ptr<f16>>, %25: tensor<16x16xf32>, %26: tensor<16x16xf32>):
    %27 = tt.load %23 : tensor<16x16xf16>
    %28 = tt.load %24 : tensor<16x16xf16>
    %29 = tt.load %14 : tensor<16x16xf16>
    %30 = tt.load %15 : tensor<16x16xf16>
    %31 = tt.dot %27, %29, %25 {input_precision = "ieee"} : tensor<16x16xf32>
    %32 = tt.dot %28, %30, %26 {input_precision = "ieee"} : tensor<16x16xf32>
    %33 = tt.addptr %23, %16 : tensor<16x16x!ptr<f16>>
    %34 = tt.addptr %24, %17 : tensor<16x16x!ptr<f16>>
    scf.yield %33, %34, %31, %32
  }
  %35 = tt.reshape %21 : tensor<16x16x1xf32>
  %36 = tt.reshape %22 : tensor<16x16x1xf32>
  %37 = tt.join %35, %36 : tensor<16x16x1x2xf32>
  %38 = tt.reshape %37 : tensor<16x16x2xf32>
  %39 = tt.trans %38 {order = [2, 0, 1]} : tensor<2x16x16xf32>
  tt.store %tc, %39
  tt.return
}
"""


def _run(text, monkeypatch, on=True):
    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", "1" if on else "0")
    m = parse_module(text)
    stats = decompose_batched_dot.run(m)
    verify(m, after=decompose_batched_dot.NAME)
    return print_module(m, with_locs=False), stats


def _norm(text):
    return "\n".join(ln.strip() for ln in text.strip().splitlines() if ln.strip())


def test_split_at_loads_and_loop_carried_values(monkeypatch):
    got, stats = _run(IR_IN, monkeypatch)
    assert _norm(got) == _norm(IR_OUT), got
    assert stats == {"batched_dots": 1, "carried_per_entry": 1}
    assert _norm(print_module(parse_module(got), with_locs=False)) == _norm(got)


def test_on_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_BATCHED_SPLIT", raising=False)
    assert decompose_batched_dot.split_enabled()
    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", "0")
    assert not decompose_batched_dot.split_enabled()


def test_off_keeps_the_split_at_the_dot(monkeypatch):
    got, stats = _run(IR_IN, monkeypatch, on=False)
    assert stats == {"batched_dots": 1}
    assert "tensor<2x16x16xf32>, tensor<2x16x16x!ptr<f16>> {" in got  # the loop still carries the 3-D tiles
    assert got.count("tt.split") == 3  # accumulator, A and B taken apart every iteration


def test_a_load_of_opaque_pointers_is_split_after_loading(monkeypatch):
    # a pointer tile loaded from memory cannot be rebuilt per entry: its values are taken apart after the load
    text = IR_IN.replace("%ta = tt.addptr %ta0, %ob : tensor<2x16x16x!ptr<f16>>",
                         "%tq = tt.splat %pa : tensor<2x16x16x!ptr<i64>>\n"
                         "  %ti = tt.load %tq : tensor<2x16x16xi64>\n"
                         "  %ta = tt.int_to_ptr %ti : tensor<2x16x16x!ptr<f16>>")
    got, stats = _run(text, monkeypatch)
    assert stats == {"batched_dots": 1, "carried_per_entry": 1}
    assert got.count("tt.split") == 1  # A's loaded tile; B was loaded per entry


@kl.jit
def bmm_loop(A, B, C, NB, M, N, K, sab, sam, sbb, sbk, scb, scm,
             BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ADVANCE: tl.constexpr):
    rb = tl.program_id(0) * BB + tl.arange(0, BB)
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(2) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    bmask = (rb < NB)[:, None, None]
    a_ptrs = A + rb[:, None, None] * sab + rm[None, :, None] * sam + rk[None, None, :]
    acc = tl.zeros((BB, BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        if ADVANCE:  # the pointer tile advanced by the user
            a = tl.load(a_ptrs, mask=bmask & (rm < M)[None, :, None] & ((k + rk) < K)[None, None, :], other=0.)
            a_ptrs += BK
        else:  # rebuilt from the counter
            a = tl.load(A + rb[:, None, None] * sab + rm[None, :, None] * sam + (k + rk)[None, None, :],
                        mask=bmask & (rm < M)[None, :, None] & ((k + rk) < K)[None, None, :], other=0.)
        b = tl.load(B + rb[:, None, None] * sbb + (k + rk)[None, :, None] * sbk + rn[None, None, :],
                    mask=bmask & ((k + rk) < K)[None, :, None] & (rn < N)[None, None, :], other=0.)
        acc = tl.dot(a, b, acc)
    tl.store(C + rb[:, None, None] * scb + rm[None, :, None] * scm + rn[None, None, :], acc.to(C.dtype.element_ty),
             mask=bmask & (rm < M)[None, :, None] & (rn < N)[None, None, :])


CONFIGS = [dict(BB=2, BM=64, BN=64, BK=32, num_warps=4, num_stages=3),
           dict(BB=4, BM=32, BN=64, BK=32, num_warps=4, num_stages=2),
           dict(BB=1, BM=128, BN=128, BK=64, num_warps=4, num_stages=3)]


def _inputs(NB, M, N, K, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(NB, M, K, generator=g) * 0.5).to(torch.float16)
    b = (torch.randn(NB, K, N, generator=g) * 0.5).to(torch.float16)
    a.view(-1)[:4] = torch.tensor([8.0, -8.0, 1e-3, -0.0])
    c = torch.full((NB, M, N), float("nan"), dtype=torch.float16)
    return a.to(device), b.to(device), c.to(device)


def _launch(kernel_or_run, a, b, c, cfg, advance):
    NB, M, K = a.shape
    N = b.shape[2]
    meta = {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}
    grid = (triton_cdiv(NB, cfg["BB"]), triton_cdiv(M, cfg["BM"]), triton_cdiv(N, cfg["BN"]))
    args = (a, b, c, NB, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return kernel_or_run(grid, args, dict(meta, ADVANCE=advance, num_warps=cfg["num_warps"],
                                          num_stages=cfg["num_stages"]))


def triton_cdiv(a, b):
    return (a + b - 1) // b


def _check(a, b, c):
    ref = a.cpu().double() @ b.cpu().double()
    got = c.cpu().double()
    assert not torch.isnan(got).any()
    assert ((got - ref).norm() / ref.norm()).item() < 2e-3


@pytest.mark.parametrize("advance", [False, True])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['BB']}x{c['BM']}x{c['BN']}x{c['BK']}")
def test_rewritten_tile_ir_on_the_interpreter(cfg, advance, monkeypatch):
    """The pass's output (tile IR) run by the interpreter gives the float64 product, ragged sizes included."""
    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", "1")
    a, b, c = _inputs(5, 40, 70, 50)

    def run(grid, args, kw):
        ck = bmm_loop.warmup(*args, **kw, grid=grid)
        m = ck.module.clone()
        stats = decompose_batched_dot.run(m)
        assert stats["carried_per_entry"] == 1
        assert not [op for op in m.kernel.walk() if op.name == "tt.dot" and len(op.result.type.shape) == 3]
        Interpreter(m, ck.name, ck.source_lines, arg_names=ck.arg_names).run(grid, list(args))

    _launch(run, a, b, c, cfg, advance)
    _check(a, b, c)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=lambda c: f"{c['BB']}x{c['BM']}x{c['BN']}x{c['BK']}")
def test_sm90_build_pipelines_the_entries(cfg, monkeypatch):
    """Built for sm_90a at the benchmark's specialization: with the knob, cp.async copies and no spills (without
    it: no cp.async and 9.4 / 21 KB spilled, benchmarks/NOTES.md)."""
    a, b, c = _inputs(1024, 128, 128, 128)
    got = {}
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", on)

        def build(grid, args, kw):
            ck = bmm_loop.warmup(*args, **kw, grid=grid)
            ck.build_gpu()
            return ck

        ck = _launch(build, a, b, c, cfg, False)
        got[on] = (ck.n_spills, "cp.async" in ck.asm["ptx"])
    assert got["1"] == (0, True), got
    assert got["0"][1] is False  # KERNELLAB_BATCHED_SPLIT=0: the split at the dot, unpipelined


@pytest.mark.gpu
@pytest.mark.parametrize("on", ["0", "1"])
@pytest.mark.parametrize("advance", [False, True])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['BB']}x{c['BM']}x{c['BN']}x{c['BK']}")
def test_gpu(cfg, advance, on, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", on)
    for shape in ((5, 40, 70, 50), (64, 128, 128, 128)):
        a, b, c = _inputs(*shape, device="cuda")
        _launch(lambda grid, args, kw: bmm_loop[grid](*args, **kw), a, b, c, cfg, advance)
        torch.cuda.synchronize()
        _check(a, b, c)


@pytest.mark.parametrize("case", __import__("tests.test_dot3d", fromlist=["CASES"]).CASES,
                         ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2:6]))}-acc{c[6]}")
def test_dot3d_cases_rewritten_on_the_interpreter(case, monkeypatch):
    """test_dot3d's straight-line batched dots (int8, fp32, fp16 out, an accumulator loaded, one batch entry): the
    loads taken apart per entry, the rewritten tile IR on the interpreter against torch."""
    from tests import test_dot3d as d

    monkeypatch.setenv("KERNELLAB_BATCHED_SPLIT", "1")
    dtype, out_dtype, B, M, N, K, with_acc = case
    a, w, c = d._inputs(dtype, out_dtype, B, M, N, K, "cpu")
    out = torch.full((B, M, N), -7 if out_dtype == torch.int32 else float("nan"), dtype=out_dtype)
    args = (a, w, c, out, B, M, N, K, with_acc, d._TL[out_dtype])
    ck = d.bmm_kernel.warmup(*args, grid=(1,))
    m = ck.module.clone()
    decompose_batched_dot.run(m)
    assert not [op for op in m.kernel.walk() if op.name == "tt.load" and len(op.result.type.shape) == 3] or \
        with_acc, "the operands' loads are taken apart"
    Interpreter(m, ck.name, ck.source_lines, arg_names=ck.arg_names).run((1,), [a, w, c, out])
    if dtype == torch.int8:
        ref = torch.bmm(a.long(), w.long()) + (c.long() if with_acc else 0)
        assert torch.equal(out.long(), ref)
        return
    ref = torch.bmm(a.double(), w.double()) + (c.double() if with_acc else 0)
    tol = 2e-2 if out_dtype == torch.float16 or dtype == torch.float32 else 2e-3
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol * K ** 0.5)
