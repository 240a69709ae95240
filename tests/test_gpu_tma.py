"""Block-pointer matmul (Triton's block-pointer tutorial loop) through the dot pipeline: TMA
(cp.async.bulk.tensor + mbarriers) on sm_90 where the access allows it, cp.async otherwise, against torch in
float64 for fp16 and bf16, square and ragged shapes, row- and column-major A, 2 to 4 stages. Outputs are
poisoned with NaN so unwritten elements show. Compile-only checks (PTX through ptxas, the trace's buffer
records) run without a GPU."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def bp_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, A_ORDER: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block_ptr = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(stride_am, stride_ak),
                                    offsets=(pid_m * BLOCK_M, 0), block_shape=(BLOCK_M, BLOCK_K), order=A_ORDER)
    b_block_ptr = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(stride_bk, stride_bn),
                                    offsets=(0, pid_n * BLOCK_N), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_block_ptr, boundary_check=(0, 1))
        b = tl.load(b_block_ptr, boundary_check=(0, 1))
        acc = tl.dot(a, b, acc)
        a_block_ptr = tl.advance(a_block_ptr, (0, BLOCK_K))
        b_block_ptr = tl.advance(b_block_ptr, (BLOCK_K, 0))
    c_block_ptr = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(stride_cm, stride_cn),
                                    offsets=(pid_m * BLOCK_M, pid_n * BLOCK_N), block_shape=(BLOCK_M, BLOCK_N),
                                    order=(1, 0))
    tl.store(c_block_ptr, acc, boundary_check=(0, 1))


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def operands(kind, M, N, K, a_colmajor=False, device="cuda", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(DTYPES[kind]).to(device)
    b = torch.randn(K, N, generator=g).to(DTYPES[kind]).to(device)
    if a_colmajor:  # same values, column-major storage
        a = a.t().contiguous().t()
    return a, b


def launch(a, b, c, config, stages, tma=True, warmup=False):
    bm, bn, bk, warps = config
    M, K = a.shape
    N = b.shape[1]
    order = (0, 1) if a.stride(0) == 1 and a.stride(1) != 1 else (1, 0)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, A_ORDER=order, num_warps=warps, num_stages=stages,
                enable_tma=tma)
    grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
    if warmup:
        return bp_matmul_kernel.warmup(*args, grid=grid, **meta)
    return bp_matmul_kernel[grid](*args, **meta)


def run(kind, shape, config, stages, tma=True, a_colmajor=False, seed=0):
    M, N, K = shape
    a, b = operands(kind, M, N, K, a_colmajor, seed=seed)
    c = torch.full((M, N), float("nan"), dtype=torch.float32, device="cuda")
    ck = launch(a, b, c, config, stages, tma)
    torch.cuda.synchronize()
    ref = a.cpu().double() @ b.cpu().double()
    got = c.cpu()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    err = ((got.double() - ref).norm() / ref.norm()).item()
    assert err < {"fp16": 1e-3, "bf16": 8e-3}[kind], f"{kind}: relative error {err:.3g}"
    return ck


def pipeline_stats(ck):
    """The stats of the cp.async pipeline and of the TMA fills that follow it, in one dict."""
    return {k: v for p in ck.trace.passes if p.name in ("pipeline_dot_operands", "fill_stages_with_tma")
            for k, v in p.stats.items()}


# (BLOCK_M, BLOCK_N, BLOCK_K, warps): 128-byte swizzle (BK = 64), 64-byte (BK = 32) and 32-byte (BK = 16) A tiles,
# all read by wgmma (128 rows over 4 warps: two m64 blocks per warpgroup); the last reads with mma.sync (32 rows
# over 4 warps), so its stages are padded: cp.async
CONFIGS = [(128, 128, 64, 8), (64, 64, 32, 4), (64, 128, 16, 4), (128, 64, 32, 4), (32, 64, 32, 4)]
# square; ragged but 16-element aligned (TMA and 16-byte cp.async with zero-filled edges); fully ragged (no
# alignment: the register path); a K shorter than one block
SHAPES = [(256, 256, 256), (200, 208, 336), (70, 50, 90), (192, 160, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cp_async"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_block_ptr_matmul(shape, kind, config, tma, stages):
    ck = run(kind, shape, config, stages, tma, seed=sum(shape) + stages)
    stats = pipeline_stats(ck)
    _, N, K = shape  # the row strides of A and B: multiples of 16 elements allow 16-byte copies and TMA
    aligned = N % 16 == 0 and K % 16 == 0
    wgmma = config != (32, 64, 32, 4)
    assert stats["pipelined"] == (1 if aligned else 0)
    assert stats.get("tma", 0) == (2 if aligned and tma and wgmma else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cp_async"])
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (208, 208, 328)], ids=lambda s: "x".join(map(str, s)))
def test_column_major_a(shape, kind, tma):
    # A's tile is contiguous along M: the tensor map's inner dim is M, the stage is MN-major
    ck = run(kind, shape, (128, 128, 64, 8), 3, tma, a_colmajor=True, seed=5)
    assert pipeline_stats(ck).get("tma", 0) == (2 if tma else 0)


@pytest.mark.gpu
def test_misaligned_launch_gets_the_cp_async_variant():
    # a row stride that is not a multiple of 16 elements: another specialization, compiled without TMA
    a, b = operands("fp16", 256, 256, 256)
    a_pad = torch.zeros(256, 264, dtype=torch.float16, device="cuda")
    a_pad[:, :256] = a
    a_view = a_pad[:, :256]  # stride 264: 528 bytes, 16-byte aligned but not a multiple of 16 elements
    c = torch.full((256, 256), float("nan"), device="cuda")
    ck = launch(a_view, b, c, (128, 128, 64, 8), 3)
    torch.cuda.synchronize()
    ref = a.cpu().double() @ b.cpu().double()
    assert not torch.isnan(c).any()
    assert ((c.cpu().double() - ref).norm() / ref.norm()).item() < 1e-3
    stats = pipeline_stats(ck)
    assert stats.get("tma", 0) == 1  # B keeps TMA; A (stride 264) is not pipelined: 2-byte runs
    assert any("operand a" in r and "2-byte" in r for r in stats["skipped"])


@pytest.mark.gpu
def test_tensor_maps_are_cached_per_launch_arguments():
    from kernellab.runtime import tensormap

    tensormap._CACHE.clear()
    a, b = operands("fp16", 256, 256, 256)
    c = torch.full((256, 256), float("nan"), device="cuda")
    for _ in range(3):  # the same arguments: the maps are made once
        launch(a, b, c, (128, 128, 64, 8), 3)
    # one map per operand, and one for C: the block-pointer store of the accumulator goes out by TMA (tma_store)
    assert len(tensormap._CACHE) == 3
    assert sorted(k[0] for k in tensormap._CACHE) == ["f16", "f16", "f32"]
    b2 = b.clone()  # another B (alive with the first): one more map, A's is reused
    launch(a, b2, c, (128, 128, 64, 8), 3)
    torch.cuda.synchronize()
    ref = a.cpu().double() @ b2.cpu().double()
    assert ((c.cpu().double() - ref).norm() / ref.norm()).item() < 1e-3
    keys = [k for k in tensormap._CACHE if k[0] == "f16"]  # the operands' maps (C's is the same one again)
    assert len(tensormap._CACHE) == 4 and {k[1] for k in tensormap._CACHE if k[0] == "f32"} == {c.data_ptr()}
    assert len(keys) == 3 and {k[1] for k in keys} == {a.data_ptr(), b.data_ptr(), b2.data_ptr()}
    assert {k[3] for k in keys} == {(512,)} and {k[4] for k in keys} == {(64, 128), (64, 64)}


# ---------------------------------------------------------------------------------------------- no GPU needed


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("a_colmajor", [False, True], ids=["A_row", "A_col"])
def test_tma_ptx_assembles(stages, a_colmajor, tmp_path, monkeypatch):
    """sm_90a: the stages are filled by cp.async.bulk.tensor on mbarriers, and ptxas takes the PTX."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = operands("fp16", 256, 256, 256, a_colmajor, device="cpu")
    ck = launch(a, b, torch.empty(256, 256), (128, 128, 64, 8), stages, warmup=True)
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF" and "llvm.nvvm" not in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    for instr in ("mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
                  "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.inval.shared::cta.b64"):
        assert instr in ptx
    assert ".param .align 64 .b8 bp_matmul_kernel_param_12[128]" in ptx and "cvta.param" in ptx
    assert "cp.async.cg" not in ptx and "wgmma.mma_async" in ptx
    kinds = ck.arg_kinds
    # the fp32 result goes out by TMA too (passes/tma_store.py): its tensor map is last, one 32-float column
    assert [k["tensormap"]["box"] for k in kinds[12:]] == [[64, 64] if a_colmajor else [64, 128], [64, 64], [32, 128]]
    plan = ck.trace.shared_plan
    bars = [b for b in plan if b.op == "ttg.mbarrier_alloc"]
    stages_bufs = [b for b in plan if b.op == "ttg.local_alloc" and "dot operand" in b.reason]
    assert len([b for b in plan if "TMA store" in b.reason]) == 1
    assert len(bars) == 1 and list(bars[0].mbarriers) == [bars[0].offset + 16 * i for i in range(stages)]
    assert [b.filled_by for b in stages_bufs] == ["TMA", "TMA"]
    assert all(b.mbarriers == bars[0].mbarriers and b.stages == stages and b.offset % 1024 == 0
               and b.swizzle.startswith("128-byte") for b in stages_bufs)
    assert ck.n_spills == 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("arch, tma", [(80, True), (90, False)])
def test_cp_async_ptx_for_block_pointers(arch, tma, tmp_path, monkeypatch):
    """sm_80, or enable_tma=False: the same block-pointer loop is pipelined with 16-byte cp.async."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = operands("bf16", 256, 256, 256, device="cpu")
    ck = launch(a, b, torch.empty(256, 256), (128, 128, 64, 8), 3, tma=tma, warmup=True)
    ck.build_gpu(Target(arch))
    ptx = ck.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx and "cp.async.bulk" not in ptx and "mbarrier" not in ptx
    stats = pipeline_stats(ck)
    assert stats["pipelined"] == 1 and stats["tma"] == 0
    why = "sm_80 has no TMA" if arch == 80 else "TMA disabled (enable_tma=False)"
    assert stats["no_tma"] == [f"line 30 operand a: {why}", f"line 30 operand b: {why}"]
    assert [b.filled_by for b in ck.trace.shared_plan if b.op == "ttg.local_alloc"] == ["cp.async"] * 2
    # each iteration adds one offset per advanced block pointer; the per-element part of the addresses is
    # loop invariant (before, every 16-byte run recomputed its 64-bit position: 5 multiplies per iteration here)
    from tests.ptx import loop_bodies  # here, not at the top: the expected stats name the kernel's source lines

    loop, = loop_bodies(ptx)
    assert loop.count("cp.async.cg.shared.global") == 8
    assert loop.count("mul.lo.s64") + loop.count("mul.wide") <= 2


@pytest.mark.gpu
@pytest.mark.parametrize("N", [257, 250, 256])
def test_block_ptr_store_keeps_the_padding_past_a_ragged_row(N):
    """C a view of a padded float32 buffer (rows 16-byte aligned): with N * 4 bytes not a whole number of 16-byte
    chunks the store must not touch the padding (a TMA store wrote past N on an H200: tma_store.py keeps st.global
    there); N = 256 goes by TMA."""
    M, K = 130, 64
    a, b = operands("fp16", M, 272, K, seed=N)
    b = b[:, :N]  # B's rows stay 16-byte aligned too
    full = torch.full((M, 272), float("nan"), dtype=torch.float32, device="cuda")
    c = full[:, :N]
    ck = launch(a, b, c, (64, 64, 64, 4), 3, True)
    torch.cuda.synchronize()
    ref = a.cpu().double() @ b.cpu().double()
    assert not torch.isnan(c.cpu()).any(), "unwritten (poisoned) elements"
    assert ((c.cpu().double() - ref).norm() / ref.norm()).item() < 1e-3
    assert torch.isnan(full[:, N:]).all(), "the store wrote past column N"
    stores = next(p.stats for p in ck.trace.passes if p.name == "tma_store")
    assert stores.get("tma_store", 0) == (1 if N % 16 == 0 else 0)
