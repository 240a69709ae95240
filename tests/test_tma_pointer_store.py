"""KERNELLAB_TMA_POINTER_STORE=1 (passes/tma_pointer_store.py): a pointer tile store that is a box of a strided
tensor, masked by exactly its bounds, goes to tma_store as a block-pointer store and is written by TMA on sm_90.

- the interpreter runs the tile IR before and after the pass (the pass's output is tile IR: a block pointer and a
  boundary-checked store) on ragged shapes, masks active, outputs poisoned with NaN and padded rows whose padding
  must stay poisoned: the same bits, and torch's float64 product within fp16 rounding;
- built for sm_90a (ptxas, no GPU): the tutorial text at the benchmark's config, persistent, stores by
  cp.async.bulk.tensor with no st.global; the knob is a codegen knob;
- on the GPU (marked gpu): the same forms and the tutorial text (as written and persistent) against torch."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import tma_pointer_store
from kernellab.runtime import persistent, split_k
from kernellab.runtime.interpreter import Interpreter
from tests import pointer_store_kernels as psk
from tests.corpus import make_kernels

KNOB = tma_pointer_store.KNOB
LIFTED = [n for n, (_, lifted, _) in psk.FORMS.items() if lifted]


def operands(M, N, K, pad=0, dtype=torch.float16, device="cpu", seed=0, colmajor=False):
    """a, b uniform in [-1, 1) with the extremes in corners; c an M x N view of NaN rows N + pad long (or its
    column-major counterpart), and the whole buffer (its padding must stay NaN)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(M, K, generator=g) * 2 - 1
    b = torch.rand(K, N, generator=g) * 2 - 1
    a[0, 0], b[-1, -1] = 1.0, -1.0
    a, b = a.to(dtype).to(device), b.to(dtype).to(device)
    if colmajor:
        full = torch.full((N, M + pad), float("nan"), dtype=dtype, device=device)
        c = full[:, :M].t()
    else:
        full = torch.full((M, N + pad), float("nan"), dtype=dtype, device=device)
        c = full[:, :N]
    return a, b, c, full


def _check_product(a, b, c, full, colmajor=False):
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double().cpu(), ref.cpu(), rtol=2e-2, atol=2e-2)
    pad = full[:, c.shape[0]:] if colmajor else full[:, c.shape[1]:]
    assert torch.isnan(pad).all(), "the store wrote outside [0, M) x [0, N)"


def _interpret(module, ck, grid, args):
    Interpreter(module, ck.name, ck.source_lines, arg_names=ck.arg_names).run(grid, args)


def _before_after(ck, grid, make_args, monkeypatch, variant=False):
    """Run the tile IR of `ck` (or its persistent variant) before and after the pass: returns both outputs' full
    buffers and the pass's stats."""
    monkeypatch.setenv(KNOB, "1")
    m0 = parse_module(ck.asm["tile"])
    m1 = parse_module(ck.asm["tile"])
    stats = tma_pointer_store.run(m1, GpuOptions(num_warps=4, arch=90))
    outs = []
    for m in (m0, m1):
        args, full = make_args()
        _interpret(m, ck, grid, args)
        outs.append((args, full))
    return outs, stats


@pytest.mark.parametrize("name", LIFTED)
@pytest.mark.parametrize("M,N,K,pad", [(70, 100, 30, 28), (33, 64, 17, 16), (64, 128, 32, 0)])
def test_interpreter_same_bits_before_and_after(name, M, N, K, pad, monkeypatch):
    kernel = psk.FORMS[name][0]
    bm, bn, bk = 32, 64, 32
    a, b, c, full = operands(M, N, K, pad)
    grid = psk.grid(kernel, M, N, bm, bn)
    ck = kernel.warmup(*psk.args(a, b, c), **psk.meta(kernel, bm, bn, bk), grid=grid)

    def make_args():
        a2, b2, c2, full2 = operands(M, N, K, pad)
        return psk.args(a2, b2, c2), full2

    ((args0, full0), (args1, full1)), stats = _before_after(ck, grid, make_args, monkeypatch)
    assert stats["tma_pointer_store"] == 1, stats
    assert torch.equal(full0.nan_to_num(7.0), full1.nan_to_num(7.0))
    _check_product(args1[0], args1[1], args1[2], full1)


@pytest.mark.parametrize("name", LIFTED)
def test_interpreter_column_major_output(name, monkeypatch):
    kernel = psk.FORMS[name][0]
    M, N, K = 70, 100, 30
    a, b, c, full = operands(M, N, K, pad=10, colmajor=True)
    grid = psk.grid(kernel, M, N, 32, 64)
    ck = kernel.warmup(*psk.args(a, b, c), **psk.meta(kernel, 32, 64, 32), grid=grid)

    def make_args():
        a2, b2, c2, full2 = operands(M, N, K, pad=10, colmajor=True)
        return psk.args(a2, b2, c2), full2

    ((args0, full0), (args1, full1)), stats = _before_after(ck, grid, make_args, monkeypatch)
    assert stats["tma_pointer_store"] == 1
    assert torch.equal(full0.nan_to_num(7.0), full1.nan_to_num(7.0))
    _check_product(args1[0], args1[1], args1[2], full1, colmajor=True)


@pytest.mark.parametrize("M,N,K,P", [(70, 100, 50, 3), (33, 40, 17, 1), (130, 72, 64, 5)])
def test_interpreter_tutorial_text_persistent_variant(M, N, K, P, monkeypatch):
    """The tutorial text (tests/corpus.py) as its persistent variant (the tile loop), before and after the pass:
    the same bits, one offset checked at run time (the check holds)."""
    monkeypatch.setenv(split_k.KNOB, "0")
    monkeypatch.setenv(persistent.KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    bm, bn, bk = 16, 32, 16
    pad = (-N) % 16 + 16  # (rows a multiple of 16 elements: the specialization proves the stride 16-byte aligned)

    def make_args():
        a, b, c, full = operands(M, N, K, pad)
        return [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                kl.cdiv(M, bm) * kl.cdiv(N, bn)], full

    args, _ = make_args()
    ck = kernel.warmup(*args[:-1], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, grid=(args[-1],))
    v = persistent.state(kernel, ck).get_variant()
    assert v is not None
    ((args0, full0), (args1, full1)), stats = _before_after(v, (P, 1, 1), make_args, monkeypatch)
    assert stats == {"tma_pointer_store": 1, "offsets_checked_at_run_time": 1}
    assert torch.equal(full0.nan_to_num(7.0), full1.nan_to_num(7.0))
    _check_product(args1[0], args1[1], args1[2], full1)


@pytest.mark.parametrize("M,N,K,S,pad", [(20, 40, 200, 3, 8), (33, 31, 17, 4, 1)])
def test_interpreter_split_k_variant(M, N, K, S, pad, monkeypatch):
    """The tutorial text's split-K variant (the last split sums the partials and runs the epilogue): its C store is
    lifted, the workspace's (read back by the last split) is not; the same bits before and after the pass."""
    from tests import matmul_variants as mv

    monkeypatch.setenv(split_k.KNOB, str(S))
    monkeypatch.setenv(persistent.KNOB, "0")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    tiles = kl.cdiv(M, 16) * kl.cdiv(N, 32)

    def make_args():
        a, b, _ = mv.operands(M, N, K, seed=M + S)
        full = torch.full((M, N + pad), float("nan"))
        c = full[:, :N]
        ws, counters = st.buffers(S, (tiles, 1, 1))
        return mv.args(a, b, c) + [ws, counters], full

    a, b, _ = mv.operands(M, N, K)
    full = torch.full((M, N + pad), float("nan"))
    mv.launch(kernel, a, b, full[:, :N])
    st = mv.state(kernel, "_split_state")
    assert st.refused is None and st.variant is not None
    ((args0, full0), (args1, full1)), stats = _before_after(st.variant, (tiles, 1, S), make_args, monkeypatch)
    assert stats["tma_pointer_store"] == 1, stats
    assert torch.equal(full0.nan_to_num(7.0), full1.nan_to_num(7.0))
    torch.testing.assert_close(args1[2].double(), args1[0].double() @ args1[1].double(), rtol=1e-5, atol=1e-5)
    assert torch.isnan(full1[:, N:]).all()


@kl.jit
def shifted_rows(x_ptr, c_ptr, M, N, stride_cm, SHIFT, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows from pid_m * BLOCK_M - SHIFT: the row offset is not proven >= 0 (checked at run time)."""
    rm = tl.program_id(0) * BLOCK_M - SHIFT + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :])
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], x, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_interpreter_negative_offset_is_checked(monkeypatch):
    """The row offset `pid_m * BLOCK_M - SHIFT` is not proven >= 0: a run-time check after the store. With SHIFT 0 it
    holds (same bits as before the pass); with SHIFT 8 the first tile's rows start at -8, which the pointer store
    would write before the tensor (the interpreter faults on that too) and TMA would drop: the check aborts, naming
    the knob."""
    from kernellab.errors import KernelLabError

    monkeypatch.setenv(KNOB, "1")
    x = torch.randn(32, 64)
    c = torch.full((96, 64), float("nan"))
    ck = shifted_rows.warmup(x, c, 96, 64, 64, 0, BLOCK_M=32, BLOCK_N=64, grid=(3, 1))
    m = parse_module(ck.asm["tile"])
    stats = tma_pointer_store.run(m, GpuOptions(num_warps=4, arch=90))
    assert stats == {"tma_pointer_store": 1, "offsets_checked_at_run_time": 1}
    _interpret(m, ck, (3, 1, 1), [x, c, 96, 64, 64, 0])
    assert torch.equal(c, x.repeat(3, 1))
    c.fill_(float("nan"))
    with pytest.raises(KernelLabError, match="KERNELLAB_TMA_POINTER_STORE"):
        _interpret(m, ck, (3, 1, 1), [x, c, 96, 64, 64, 8])


@pytest.mark.parametrize("how", ["0", "1"])
def test_cpu_launches_do_not_change_with_the_knob(how, monkeypatch):
    """The interpreter runs the tile IR, which the pass (a GPU pass) never touches: a CPU launch of the tutorial text
    with the knob on gives the bits it gives with the knob off (and torch's product)."""
    from tests import matmul_variants as mv

    monkeypatch.setenv(persistent.KNOB, how)
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    out = {}
    for knob in ("0", "1"):
        monkeypatch.setenv(KNOB, knob)
        a, b, c = mv.operands(70, 100, 50, out=torch.float16, seed=4)
        ck = mv.launch(kernel, a, b, c)
        assert "tt.make_block_ptr" not in ck.asm["tile"]
        out[knob] = c
    assert torch.equal(out["0"], out["1"])
    torch.testing.assert_close(out["1"].double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)


def test_knob_is_a_codegen_knob_and_the_pass_is_recorded(monkeypatch):
    from kernellab.compiler.pipeline import gpu_passes
    from kernellab.runtime.codegen_env import CODEGEN_ENV

    assert KNOB in CODEGEN_ENV
    names = [p.NAME for p in gpu_passes()]
    assert names.index("tma_pointer_store") < names.index("flatten_loops") < names.index("tma_store")
    monkeypatch.delenv(KNOB, raising=False)
    assert tma_pointer_store.mode() == "off"
    monkeypatch.setenv(KNOB, "1")
    assert tma_pointer_store.mode() == "on"
    monkeypatch.setenv(KNOB, "2")
    assert tma_pointer_store.mode() == "unchecked"


# -------------------------------------------------------------------------------------------- built for sm_90a
def _tutorial_build(tmp_path, monkeypatch, knob, K=512, variant=True):
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / f"cache{knob}{K}{variant}"))
    monkeypatch.setenv(KNOB, knob)
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    M = N = 8192
    a, b, c = (torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16),
               torch.empty(M, N, dtype=torch.float16))
    ck = kernel.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1), BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3,
                       grid=(1,))
    v = persistent.state(kernel, ck).get_variant() if variant else ck
    try:
        v.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return v


def test_sm90_tutorial_text_persistent_stores_by_tma(tmp_path, monkeypatch):
    """The benchmark's config (128x256x64, 8 warps, 3 stages, fp16) at 8192x8192x512, the persistent variant
    (what auto launches): with the knob the epilogue stores by cp.async.bulk.tensor (4 boxes of 64 x 128 a tile, in
    each branch of the versioned fused loop) and no st.global is left; still fused, no spills, fewer registers and
    shared bytes than the st.global epilogue (CPU numbers: benchmarks/NOTES.md)."""
    off = _tutorial_build(tmp_path, monkeypatch, "0")
    on = _tutorial_build(tmp_path, monkeypatch, "1")
    assert re.search(r"\bst\.global", off.asm["ptx"]) and "cp.async.bulk.tensor.2d.global.shared" not in off.asm["ptx"]
    ptx = on.asm["ptx"]
    assert not re.search(r"\bst\.global", ptx)
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") >= 4
    assert "cp.async.bulk.wait_group.read" in ptx
    stats = {rec.name: rec.stats for rec in on.trace.passes}
    assert stats["tma_pointer_store"] == {"tma_pointer_store": 1, "offsets_checked_at_run_time": 1}
    assert stats["flatten_loops"] == {"flattened": 1} and stats["tma_store"]["tma_store"] >= 1
    assert on.n_spills == 0 and on.n_regs <= off.n_regs and on.shared <= off.shared
    # the next tile's copies are issued before the epilogue's wait_group 0, the TMA store after it
    wait1 = ptx.index("wgmma.wait_group.sync.aligned 1;")
    wait0 = ptx.index("wgmma.wait_group.sync.aligned 0;", wait1)
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx[wait0:]


def test_sm90_host_tensor_map_of_a_padded_ragged_output(tmp_path, monkeypatch):
    """The map the launcher makes for the lifted store (evaluated and checked here without a driver): C's data
    pointer, extents (N, M) from the mask's bounds, the row stride of the padded view in bytes, a 64 x 128 box under
    the 128-byte swizzle."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError
    from kernellab.runtime import tensormap

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(KNOB, "1")
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    M, N, K = 8120, 8000, 512
    c = torch.empty(M, N + 48, dtype=torch.float16)[:, :N]
    a, b = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
    args = [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]
    ck = kernel.warmup(*args, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3, grid=(1,))
    v = persistent.state(kernel, ck).get_variant()
    try:
        v.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    recipes = [k["tensormap"] for k in v.arg_kinds if isinstance(k, dict)]
    assert len(recipes) == 1
    key = tensormap.evaluate(recipes[0], args + [kl.cdiv(M, 128) * kl.cdiv(N, 256)])
    assert key == ("f16", c.data_ptr(), (N, M), ((N + 48) * 2,), (64, 128), 128)
    tensormap.check(key, "matmul_kernel")


def test_sm90_tutorial_text_as_written_stores_by_tma(tmp_path, monkeypatch):
    on = _tutorial_build(tmp_path, monkeypatch, "1", variant=False)
    ptx = on.asm["ptx"]
    assert not re.search(r"\bst\.global", ptx) and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert on.n_spills == 0


@pytest.mark.parametrize("name", LIFTED)
@pytest.mark.parametrize("colmajor", [False, True])
def test_sm90_forms_store_by_tma(name, colmajor, tmp_path, monkeypatch):
    """Every accepted form, C row- or column-major (order [0, 1]: the rows are the contiguous dim), 64x64 tiles at
    4 warps: one cp.async.bulk.tensor store, no st.global, no spills; with the knob off the same kernel stores by
    st.global."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    kernel = psk.FORMS[name][0]
    M, N, K = 256, 192, 64
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.empty(N, M).half().t() if colmajor else torch.empty(M, N).half()
    ptx = {}
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / knob))
        monkeypatch.setenv(KNOB, knob)
        ck = kernel.warmup(*psk.args(a, b, c), **psk.meta(kernel, 64, 64, 64), grid=psk.grid(kernel, M, N, 64, 64),
                           num_warps=4)
        try:
            ck.build_gpu(Target(90))
        except ToolchainError as e:
            pytest.skip(f"no ptxas here: {e}")
        assert ck.n_spills == 0
        ptx[knob] = ck.asm["ptx"]
    assert re.search(r"\bst\.global", ptx["0"]) and "cp.async.bulk.tensor" not in ptx["0"]
    assert not re.search(r"\bst\.global", ptx["1"])
    assert ptx["1"].count("cp.async.bulk.tensor.2d.global.shared::cta") == 1


# ---------------------------------------------------------------------------------------------------- on the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", LIFTED)
@pytest.mark.parametrize("M,N,K,pad", [(300, 200, 70, 24), (129, 257, 64, 15), (64, 64, 16, 16)])
def test_gpu_forms_against_torch(name, M, N, K, pad, monkeypatch):
    monkeypatch.setenv(KNOB, "1")
    kernel = psk.FORMS[name][0]
    bm, bn = 64, 64
    bk = max(16, triton_next_pow2(K))
    a, b, c, full = operands(M, N, K, pad, device="cuda", seed=M + N)
    ck = kernel[psk.grid(kernel, M, N, bm, bn)](*psk.args(a, b, c), **psk.meta(kernel, bm, bn, bk), num_warps=4)
    torch.cuda.synchronize()
    _check_product(a, b, c, full)
    stats = {rec.name: rec.stats for rec in ck.trace.passes}
    # an N not divisible by 16 (a row of C not known to be whole 16-byte chunks) keeps st.global: on an H200 the
    # TMA store wrote past column N into the padding there (tma_store.py)
    assert stats["tma_pointer_store"]["tma_pointer_store"] == 1
    assert stats["tma_store"]["tma_store"] == (1 if N % 16 == 0 else 0)


def triton_next_pow2(n):
    return 1 << (max(1, n) - 1).bit_length()


@pytest.mark.gpu
def test_gpu_column_major_output(monkeypatch):
    monkeypatch.setenv(KNOB, "1")
    M, N, K = 300, 200, 64
    a, b, c, full = operands(M, N, K, pad=20, device="cuda", colmajor=True)
    psk.grid2d[psk.grid(psk.grid2d, M, N, 64, 64)](*psk.args(a, b, c), **psk.meta(psk.grid2d, 64, 64, 64))
    torch.cuda.synchronize()
    _check_product(a, b, c, full, colmajor=True)


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["0", "30", "auto"])
@pytest.mark.parametrize("M,N,K", [(8192 - 72, 8192 - 192, 512), (8192 - 72, 8192 - 200, 512), (1000, 1500, 1024),
                                   (8192, 8192, 512)])
def test_gpu_tutorial_text_against_torch(how, M, N, K, monkeypatch):
    """The tutorial text at the benchmark's config (128x256x64, 8 warps, 3 stages), as written (0), persistent over 30
    programs (each walks many tiles: the buffer's wait between tiles) and auto, ragged M and N (the last tiles'
    boxes cross the tensor's end: TMA drops what lies outside, the padding stays NaN)."""
    monkeypatch.setenv(KNOB, "1")
    monkeypatch.setenv(persistent.KNOB, how)
    kernel = make_kernels(kl, tl)["matmul_kernel"]
    a, b, c, full = operands(M, N, K, pad=(-N) % 16 + 32, device="cuda", seed=K)
    grid = (kl.cdiv(M, 128) * kl.cdiv(N, 256),)
    ck = kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    ref = (a.float() @ b.float())
    torch.testing.assert_close(c.float(), ref, rtol=1e-2, atol=1e-2)
    assert torch.isnan(full[:, N:]).all()
    st = persistent.state(kernel, ck)
    built = st.variant if (st is not None and st.last) else ck
    stats = {rec.name: rec.stats for rec in built.trace.passes}
    assert stats["tma_pointer_store"]["tma_pointer_store"] == 1
    assert (stats["tma_store"]["tma_store"] >= 1) == (N % 16 == 0)  # see test_gpu_forms_against_torch



def test_sm90_extent_not_whole_16_byte_chunks_keeps_st_global(tmp_path, monkeypatch):
    """N = 257 fp16 (514 bytes a row): the lifted store stays a masked st.global, and the trace says why."""
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(KNOB, "1")
    kernel = psk.FORMS["grid2d"][0]
    a, b, c, _ = operands(129, 257, 64, 15)
    ck = kernel.warmup(*psk.args(a, b, c), **psk.meta(kernel, 64, 64, 64), grid=psk.grid(kernel, 129, 257, 64, 64),
                       num_warps=4)
    try:
        ck.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    stats = {rec.name: rec.stats for rec in ck.trace.passes}["tma_store"]
    assert stats["tma_store"] == 0 and "multiple of 16 bytes" in stats["no_tma_store"][0]
    assert re.search(r"\bst\.global", ck.asm["ptx"]) and "cp.async.bulk.tensor" not in ck.asm["ptx"]
