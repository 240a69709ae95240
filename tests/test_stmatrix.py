"""16-bit mma/wgmma accumulator tiles go to shared memory by `stmatrix` on sm_90 (codegen/lower_async.py): the
epilogue of a descriptor (TMA) store and a layout conversion of the accumulator before pointer stores. A model of
the instruction checks that the lane addresses and the registers each thread gives put every element where the
stage's encoding says; compile-only checks that the PTX has stmatrix and ptxas takes it; GPU runs (marked `gpu`)
compare matmuls against torch float64 with poisoned outputs."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.lower_async import stmatrix_plan
from kernellab.compiler.gpu.layouts import Bits, Mma
from kernellab.compiler.gpu.smem_layout import element_byte, swizzled
from kernellab.compiler.types import MemDescType, float16

from .test_tensor_descriptor import desc_matmul

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")

SHAPES = [((64, 64), (4, 1)), ((128, 128), (4, 1)), ((128, 128), (4, 2)), ((128, 256), (4, 2)), ((64, 128), (2, 2)),
          ((256, 128), (8, 1))]
# a split half of a 128x256 wgmma accumulator over 8 warps (the subtiled epilogue, gpu/reshape_layout.py)
HALF = Bits.make([["l2", "l3", "l4", "r1", "w0", "w1", "w2"], ["r0", "l0", "l1", "r2", "r3", "r4", "r5"]])
CASES = [(Mma(w), s) for s, w in SHAPES] + [(HALF, (128, 128))]


def _plan(layout, shape, view):
    lw = SimpleNamespace(arch=90, opts=SimpleNamespace(num_warps=layout.num_warps))
    return stmatrix_plan(lw, SimpleNamespace(layout=layout, shape=shape, scalar=float16), view)


@pytest.mark.parametrize("layout, shape", CASES, ids=[f"{lay}-{s[0]}x{s[1]}" for lay, s in CASES])
@pytest.mark.parametrize("swizzle", [True, False], ids=["swizzled", "padded"])
def test_stmatrix_model_puts_every_element_in_place(layout, shape, swizzle):
    """stmatrix .x4: lane 8q + r gives the address of row r of matrix q; word w of that row comes from register q
    of lane 4r + w (two 16-bit elements). Every element of the tile must land, once, at its stage byte."""
    m, n = shape
    view = swizzled((1, m, n), float16, (1, 0)).tile() if swizzle else MemDescType((m, n), float16, (1, 0), 8)
    plan = _plan(layout, shape, view)
    assert plan is not None
    written = {}
    for warp in range(layout.num_warps):
        for k in plan.runs:
            shift = (plan.offs[k][0] - plan.offs[0][0], plan.offs[k][1] - plan.offs[0][1])
            for q in range(4):
                for r in range(8):
                    row, col = (a + b for a, b in zip(plan.lane_row(warp, 8 * q + r), shift))
                    for w in range(4):
                        for h in range(2):  # the pair's low half is the lower column
                            elem = tuple(a + b for a, b in zip(plan.thread_part(warp, 4 * r + w),
                                                                plan.offs[k + 2 * q + h]))
                            assert elem not in written, elem
                            written[elem] = element_byte(view, row, col + 2 * w + h)
    assert len(written) == m * n
    assert all(written[(r, c)] == element_byte(view, r, c) for r, c in written)


def test_stmatrix_refuses_what_it_cannot_store():
    view = MemDescType((64, 64), float16, (1, 0), 8)
    assert _plan(Mma((4, 1)), (64, 64), MemDescType((64, 64), float16, (1, 0), 4)) is None  # rows not 16-byte aligned
    assert _plan(Mma((4, 1)), (64, 64), MemDescType((64, 64), float16, (0, 1), 8)) is None  # contiguous along M
    assert _plan(Mma((4, 1)), (64, 8), MemDescType((64, 8), float16, (1, 0), 8)) is None  # one n8 tile: pairs only
    assert _plan(Mma((4, 2)), (64, 64), view) is not None
    assert _plan(Mma((8, 1)), (64, 64), view) is None  # 8 warps over 64 rows: copies


def _desc_matmul(a, b, c, bm, bn, bk, warps, warmup=False):
    D = kl.TensorDescriptor.from_tensor
    M, K = a.shape
    N = b.shape[1]
    grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
    args = (D(a, [bm, bk]), D(b, [bk, bn]), D(c, [bm, bn]), K)
    meta = dict(BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=3)
    return desc_matmul.warmup(*args, grid=grid, **meta) if warmup else desc_matmul[grid](*args, **meta)


@kl.jit
def ptr_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Pointer loads and a masked pointer store: the accumulator is converted to a coalesced layout through
    shared memory (the conversion's stores are stmatrix)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _ptr_matmul(a, b, c, bm, bn, bk, warps, warmup=False):
    M, K = a.shape
    N = b.shape[1]
    grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
    args = (a, b, c, M, N, K)
    meta = dict(BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=3)
    return ptr_matmul.warmup(*args, grid=grid, **meta) if warmup else ptr_matmul[grid](*args, **meta)


TILES = [(64, 64, 64, 4), (128, 128, 64, 4), (128, 128, 64, 8), (128, 256, 64, 8)]
DTYPES = [torch.float16, torch.bfloat16]


@needs_ptxas
@pytest.mark.parametrize("which", ["descriptor", "pointer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bm, bn, bk, warps", [TILES[0], TILES[3]])
def test_sm90_epilogue_uses_stmatrix(which, dtype, bm, bn, bk, warps, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b, c = (torch.empty(512, 512, dtype=dtype) for _ in range(3))
    ck = (_desc_matmul if which == "descriptor" else _ptr_matmul)(a, b, c, bm, bn, bk, warps, warmup=True)
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF" and ck.n_spills == 0
    # each thread stores its bm * bn / (32 * warps) elements 8 at a time, and no st.shared is left for them
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == bm * bn // (32 * warps * 8)
    if which == "descriptor":
        assert "st.shared" not in ptx
        assert next(p.stats for p in ck.trace.passes if p.name == "tma_store")["tma_store"] == 1


# ---------------------------------------------------------------------------------------------- GPU
def _operands(M, N, K, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) + 0.25).to(dtype).cuda()
    b = (torch.randn(K, N, generator=g) * 0.1).to(dtype).cuda()
    return a, b, torch.full((M, N), float("nan"), dtype=dtype, device="cuda")


def _check(a, b, c):
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-2, err


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["descriptor", "pointer"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bm, bn, bk, warps", TILES)
@pytest.mark.parametrize("shape", [(512, 512, 256), (328, 200, 136)], ids=["even", "ragged"])
def test_gpu_matmul_epilogue(which, dtype, bm, bn, bk, warps, shape):
    a, b, c = _operands(*shape, dtype)
    (_desc_matmul if which == "descriptor" else _ptr_matmul)(a, b, c, bm, bn, bk, warps)
    _check(a, b, c)
