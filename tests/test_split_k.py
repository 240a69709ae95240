"""Split-K (compiler/passes/split_k.py + runtime/split_k.py): the tutorial matmul text split over grid z gives the
unsplit kernel's result and torch's float64 product, on the interpreter and the GPU, ragged shapes included."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.passes import split_k as split_k_pass
from kernellab.runtime import split_k
from tests import matmul_variants as mv
from tests.corpus import make_kernels

SLOT = "_split_state"
KNOB = split_k.KNOB


@pytest.fixture(scope="module")
def matmul():
    return make_kernels(kl, tl)["matmul_kernel"]


# (M, N, K): M and N not multiples of the 16x32 tile, K not a multiple of BLOCK_K nor of S, K shorter than S
SHAPES = [(20, 40, 200), (16, 64, 64), (33, 31, 17), (5, 70, 300)]


@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("S", ["3", "4", "7"])
def test_interpreter_split_matches_unsplit_and_float64(matmul, monkeypatch, M, N, K, S):
    a, b, c = mv.operands(M, N, K)
    monkeypatch.setenv(KNOB, "0")
    mv.launch(matmul, a, b, c)
    unsplit = c.clone()
    c.fill_(float("nan"))
    monkeypatch.setenv(KNOB, S)
    mv.launch(matmul, a, b, c)
    st = mv.state(matmul, SLOT)
    assert st.refused is None and st.variant is not None
    ref = a.double() @ b.double()
    assert not c.isnan().any()
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c, unsplit, rtol=1e-5, atol=1e-5)  # fp32 sums in another order
    ws, counters = st.buffers(int(S), (kl.cdiv(M, 16) * kl.cdiv(N, 32), 1, 1))
    assert not counters.any(), "the last split of every tile resets its counter"


@pytest.mark.parametrize("chunk_elems,unroll", [(64, 2), (32, 3), (512, 8)])
def test_interpreter_chunked_sum_equals_the_simple_sum_bitwise(monkeypatch, chunk_elems, unroll):
    """The last split's chunked sum (chunks without a stored element skipped, partials read `unroll` at a time)
    adds in the same order as the one-tile-a-step sum: equal bits, and float64's product."""
    monkeypatch.setattr(split_k_pass, "CHUNK_ELEMS", chunk_elems)
    monkeypatch.setattr(split_k_pass, "UNROLL", unroll)
    outs = {}
    for how in ("simple", "chunked"):
        monkeypatch.setenv(split_k_pass.REDUCE_KNOB, how)
        monkeypatch.setenv(KNOB, "7")
        kernel = make_kernels(kl, tl)["matmul_kernel"]  # a fresh variant for each sum
        a, b, c = mv.operands(20, 40, 200)
        mv.launch(kernel, a, b, c)
        assert mv.state(kernel, SLOT).stats["reduce"] == how
        outs[how] = c
    torch.testing.assert_close(outs["chunked"].double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    assert torch.equal(outs["chunked"], outs["simple"])


@pytest.mark.parametrize("S", ["2", "5"])
def test_interpreter_block_pointer_matmul(monkeypatch, S):
    """Block pointers advanced in the loop start `lo` steps in (tl.advance by offsets * lo); the epilogue's
    boundary-checked store has no mask, so the whole tile goes through the workspace."""
    monkeypatch.setenv(KNOB, S)
    kernel = make_kernels(kl, tl)["block_ptr_matmul_kernel"]
    M, N, K = 40, 50, 150
    a, b, c = mv.operands(M, N, K)
    kernel[(kl.cdiv(M, 32), kl.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                           c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    st = mv.state(kernel, SLOT)
    assert st.variant is not None and st.stats["masked"] == 0 and st.stats["reduce"] == "simple", st.refused
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_interpreter_repeated_launches_and_changing_s(matmul, monkeypatch):
    """The counters come back to zero, so launch after launch (with another S or shape) stays right."""
    for i, (S, shape) in enumerate([("2", (20, 40, 96)), ("2", (20, 40, 96)), ("5", (20, 40, 96)),
                                    ("3", (40, 20, 50))]):
        monkeypatch.setenv(KNOB, S)
        a, b, c = mv.operands(*shape, seed=i)
        mv.launch(matmul, a, b, c)
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_interpreter_fp16_output(matmul, monkeypatch):
    monkeypatch.setenv(KNOB, "4")
    a, b, c = mv.operands(24, 48, 130, out=torch.float16)
    mv.launch(matmul, a, b, c)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2e-3, atol=2e-3)


def test_interpreter_int8_dot_accumulates_in_int32(monkeypatch):
    """An i32 accumulator: i32 workspace, exact sums."""
    @kl.jit
    def imm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    g = torch.Generator().manual_seed(3)
    M, N, K = 18, 20, 150
    a = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), generator=g, dtype=torch.int8)
    c = torch.full((M, N), -7, dtype=torch.int32)
    monkeypatch.setenv(KNOB, "4")
    imm[(2, 2)](a, b, c, M, N, K, BM=16, BN=16, BK=32)
    st = mv.state(imm, SLOT)
    assert st.variant is not None and st.stats["acc_dtype"] == "i32", st.refused
    assert st.stats["trip_count"] is not None and split_k.evaluate_trip(st.stats["trip_count"], [0, 0, 0, M, N, K]) == 5
    assert torch.equal(c.long(), a.long() @ b.long())


def test_auto_does_not_split_on_the_interpreter_and_off_never_compiles_the_variant(matmul, monkeypatch):
    for how in ("auto", "0"):
        monkeypatch.setenv(KNOB, how)
        a, b, c = mv.operands(16, 32, 256)
        ker = make_kernels(kl, tl)["matmul_kernel"]
        mv.launch(ker, a, b, c)
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
        assert all(getattr(ck, "_split_state", None) is None or ck._split_state.variant is None
                   for ck in ker.cache.values())


def test_choose():
    """auto: fill the SMs once, at least MIN_ITERS iterations a split, at most MAX_SPLITS; big grids never."""
    assert split_k.choose(64, 16, 132, "auto") == 8  # the skinny 16x4096x4096 at 128x256x64
    assert split_k.choose(128, 32, 132, "auto") == 4  # 16x8192x8192
    assert split_k.choose(16, 32, 132, "auto") == 1  # 1024^3: 32 tiles, 16 iterations (split in two: 0.90x, H200)
    assert split_k.choose(32, 32, 132, "auto") == 4
    assert split_k.choose(8, 16, 132, "auto") == 1
    assert split_k.choose(64, 80, 132, "auto") == 1
    assert split_k.choose(1000, 1, 132, "auto") == split_k.MAX_SPLITS
    assert split_k.choose(None, 16, 132, "auto") == 1
    assert split_k.choose(3, 500, 132, 6) == 6
    assert split_k.choose(64, 16, 132, "off") == 1


def test_fast_path_wrapper(monkeypatch):
    """The warm-launch path: a small grid goes to the split variant's launcher over (x, y, S) with the workspace
    and counters appended; a big grid, grid z > 1 or KERNELLAB_SPLIT_K=0 keep the plain launch; a number forces S."""
    class Ck:
        asm = {"tile": "scf.for tt.dot"}

    st = split_k.SplitState(None, Ck(), None)
    st.variant, st.sms[0], st._built = object(), 132, True
    st.stats = {"split": 1, "trip_count": ["div", ["arg", 1], ["const", 64]], "tile_elems": 4, "acc_dtype": "f32"}
    calls = []
    st._go = lambda grid, stream, args: calls.append(("split", grid, stream, list(args)))
    bufs = (torch.zeros(1), torch.zeros(1, dtype=torch.int32))
    st.buffers = lambda s, g, device=None, stream=0: bufs
    go = split_k.fast_wrapper(st, lambda grid, stream, args: calls.append(("plain", grid, stream, list(args))), 0)
    ptrs = [bufs[0].data_ptr(), bufs[1].data_ptr()]
    monkeypatch.setenv(KNOB, "auto")
    go((16,), 7, [123, 4096])
    assert calls.pop() == ("split", (16, 1, 8), 7, [123, 4096] + ptrs) and st.last == 8
    go((4, 4), 7, [123, 256])  # 4 iterations: 1 a split
    assert calls.pop() == ("plain", (4, 4), 7, [123, 256]) and st.last == 1
    for grid in ((100,), (16, 1, 2)):
        go(grid, 7, [123, 4096])
        assert calls.pop()[0] == "plain"
    monkeypatch.setenv(KNOB, "0")
    go((16,), 7, [123, 4096])
    assert calls.pop()[0] == "plain"
    monkeypatch.setenv(KNOB, "3")
    go((100,), 7, [123, 4096])
    assert calls.pop() == ("split", (100, 1, 3), 7, [123, 4096] + ptrs)


def test_gpu_launch_path_with_a_stub_driver(monkeypatch):
    """The GPU launch path end to end on the CPU (launch_overhead's fake_gpu: stand-in CUDA tensors, a stub
    cuLaunchKernel): a skinny grid launches the split variant over (x, 1, S) with two more pointer arguments, the
    slow path and the warm fast path alike; a big grid, or KERNELLAB_SPLIT_K=0, launches the kernel as written."""
    lo = mv.launch_overhead_tool()
    warm = mv.stub_variants(monkeypatch)
    monkeypatch.setenv(KNOB, "auto")
    K, N = 4096, 4096

    def go(kernel, M):
        mv.launch_fake(kernel, M, N, K)

    launches = []
    with lo.fake_gpu(launches):
        first = make_kernels(kl, tl)["matmul_kernel"]
        go(first, 16)  # slow path: the split variant, 12 arguments + workspace + counters
        (gx, gy, gz, packed), = launches
        assert (gx, gy, gz) == (16, 1, 8)
        st = mv.state(first, SLOT)
        assert st.variant.arg_names[-2:] == [split_k.WORKSPACE, split_k.COUNTERS] and st.last == 8
        go(first, 16)  # warm: the fast path's wrapper
        assert warm == [("s", (16, 1, 8), 14, 0x7F0000200000)] and len(launches) == 1

        second = make_kernels(kl, tl)["matmul_kernel"]
        launches.clear()
        warm.clear()
        go(second, 1024)  # 128 programs: as written (and the fast path's entry)
        go(second, 16)  # warm, skinny: split
        go(second, 1024)  # warm, big: as written
        monkeypatch.setenv(KNOB, "0")
        go(second, 16)
        assert [(x, y, z) for x, y, z, _ in launches] == [(128, 1, 1), (128, 1, 1), (16, 1, 1)]
        assert warm == [("s", (16, 1, 8), 14, 0x7F0000200000)]


def test_refused_kernel_runs_unsplit(monkeypatch):
    """A kernel the pass refuses (a store in its loop) runs as written under a forced S, and says why."""
    @kl.jit
    def rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for i in range(n):
            x = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
            acc = tl.dot(x, x, acc)
            tl.store(y_ptr + i, tl.sum(tl.sum(acc, axis=1), axis=0))
        tl.store(x_ptr + offs[:, None] * BLOCK + offs[None, :], acc)

    monkeypatch.setenv(KNOB, "4")
    x = torch.eye(16) * 0.5
    y = torch.zeros(3)
    rows[(1,)](x, y, 3, BLOCK=16)
    st = mv.state(rows, SLOT)
    assert st.variant is None and "side effect" in st.refused
    torch.testing.assert_close(y, torch.tensor([4.0, 8.0, 12.0]))
    torch.testing.assert_close(x, torch.eye(16) * 0.75)


def test_split_variant_trace_records_the_pass(matmul, monkeypatch):
    """The lab reads passes from the trace: the split variant's trace has split_k (changed), after licm, and the
    viz rows mirror it; the unsplit trace is the pipeline as before."""
    from kernellab.compiler.pipeline import tile_passes
    from kernellab.viz import data as D

    monkeypatch.setenv(KNOB, "2")
    a, b, c = mv.operands(16, 32, 64)
    mv.launch(matmul, a, b, c)
    st = mv.state(matmul, SLOT)
    names = [p.name for p in st.variant.trace.passes]
    assert names[names.index("licm") + 1] == "split_k"
    rec = st.variant.trace.passes[names.index("split_k")]
    assert rec.changed and rec.stats["split"] == 1 and rec.snapshot is not None
    assert [r["name"] for r in D.pass_rows(st.variant.trace)] == names
    from kernellab.viz.graph_model import build_graph

    for snap in (rec.snapshot, st.variant.trace.snapshot("tile")):  # the lab's graph view draws it
        build_graph(snap).check()
    assert "split_k" not in [p.name for p in st.ck.trace.passes]
    assert "split_k" not in [p.NAME for p in tile_passes()]


def test_skinny_benchmark_config_builds_without_spills(matmul):
    """The benchmark's config (128x256x64, 8 warps, 3 stages) at 16x4096x4096: the split variant compiles to a
    cubin with no spills (ptxas on the CPU)."""
    from kernellab.runtime.jit import _can_assemble

    if not _can_assemble():
        pytest.skip("no ptxas")
    M, N, K = 16, 4096, 4096
    a, b, c = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16), \
        torch.empty(M, N, dtype=torch.float16)
    ck = matmul.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                       BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, grid=(1,))
    st = split_k.state(matmul, ck)
    v = st.get_variant()
    assert v is not None and st.stats["masked"] == 1
    assert split_k.evaluate_trip(st.stats["trip_count"], [0, 0, 0, M, N, K]) == 64
    v.build_gpu()
    assert v.n_spills == 0
    ptx = v.asm["ptx"]
    # the partial tile's stores, a barrier, then one thread's release/acquire add on the tile's counter
    assert re.search(r"bar\.sync\s+0;(?:(?!st\.global)[\s\S])*atom\.global\.gpu\.acq_rel\.add\.u32", ptx)
    assert "ld.global.cg" in ptx


# ------------------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("out", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("S", ["2", "5", "8"])
def test_gpu_split_matches_float64(matmul, monkeypatch, out, S):
    monkeypatch.setenv(KNOB, S)
    dtype = torch.bfloat16 if out == torch.bfloat16 else torch.float16
    tol = 1e-4 if out == torch.float32 else 2e-2
    for M, N, K in [(16, 4096, 4096), (20, 300, 1000), (130, 260, 4100)]:
        a, b, c = mv.operands(M, N, K, dtype=dtype, out=out, device="cuda")
        for _ in range(3):  # repeated launches: the counters reset; the fast path takes the later ones
            c.fill_(float("nan"))
            mv.launch(matmul, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            assert not c.isnan().any()
            torch.testing.assert_close(c.double(), (a.double() @ b.double()).to(out).double(), rtol=tol, atol=tol * K
                                       ** 0.5)
    assert mv.state(matmul, SLOT).variant is not None


@pytest.mark.gpu
def test_gpu_split_is_deterministic_and_auto_splits_the_skinny_shape(matmul, monkeypatch):
    monkeypatch.setenv(KNOB, "auto")
    a, b, c = mv.operands(16, 4096, 4096, device="cuda")
    outs = []
    for _ in range(4):
        c.fill_(float("nan"))
        mv.launch(matmul, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
        torch.cuda.synchronize()
        outs.append(c.clone())
    assert all(torch.equal(outs[0], o) for o in outs)
    st = mv.state(matmul, SLOT)
    assert st.variant is not None and max(st.decisions.values()) >= 2
    torch.testing.assert_close(outs[0].double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
    monkeypatch.setenv(KNOB, "0")
    c.fill_(float("nan"))
    mv.launch(matmul, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
    # the unsplit kernel adds the K products in another order: fp32 rounding apart (|c| ~ 64 here)
    torch.testing.assert_close(c, outs[0], rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_gpu_chunked_and_simple_sums_agree_bitwise(monkeypatch):
    """Both sums of the last split (KERNELLAB_SPLIT_K_REDUCE) add in split order: equal bits on the GPU."""
    monkeypatch.setenv(KNOB, "6")
    for M, N, K in [(16, 4096, 4096), (130, 260, 4100), (1, 512, 8192)]:
        outs = {}
        for how in ("simple", "chunked"):
            monkeypatch.setenv(split_k_pass.REDUCE_KNOB, how)
            kernel = make_kernels(kl, tl)["matmul_kernel"]
            a, b, c = mv.operands(M, N, K, device="cuda")
            mv.launch(kernel, a, b, c, block=(128, 256, 64), num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            assert mv.state(kernel, SLOT).stats["reduce"] == how
            outs[how] = c
        assert not outs["chunked"].isnan().any()
        torch.testing.assert_close(outs["chunked"].double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
        assert torch.equal(outs["chunked"], outs["simple"])


@pytest.mark.gpu
@pytest.mark.parametrize("S", ["3", "8"])
def test_gpu_block_pointer_matmul_split(monkeypatch, S):
    """The block-pointer text (TMA loads on sm_90) split S ways: f32 out, poisoned, ragged, twice (counters)."""
    monkeypatch.setenv(KNOB, S)
    kernel = make_kernels(kl, tl)["block_ptr_matmul_kernel"]
    for M, N, K in [(16, 4096, 4096), (100, 300, 1000)]:
        a, b, c = mv.operands(M, N, K, device="cuda")
        for _ in range(2):
            c.fill_(float("nan"))
            kernel[(kl.cdiv(M, 64), kl.cdiv(N, 128))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                     b.stride(1), c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=128,
                                                     BLOCK_K=64, num_warps=4, num_stages=3)
            torch.cuda.synchronize()
            assert not c.isnan().any()
            torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)
    assert mv.state(kernel, SLOT).variant is not None
