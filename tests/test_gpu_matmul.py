"""Matmul on the GPU through the tensor-core path and its cp.async pipeline: the tutorial kernel against
torch in float64 for fp16, bf16, fp32 (tf32 and ieee) and int8, square and ragged shapes, transposed
operands, 1 to 4 stages, loops shorter than the pipeline and loops that do not run at all. Outputs are
poisoned (NaN / a sentinel) so unwritten elements show. The same kernel also runs through the interpreter
on CPU (tests below the GPU ones), so the kernel text itself is checked everywhere."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  INT: tl.constexpr, PREC: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    if INT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp32": torch.float32,
          "int8": torch.int8}


def _operands(kind, M, N, K, trans_a, trans_b, device, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "int8":
        a = torch.randint(-100, 100, (M, K), generator=g, dtype=torch.int8)
        b = torch.randint(-100, 100, (K, N), generator=g, dtype=torch.int8)
    else:
        a = torch.randn(M, K, generator=g).to(DTYPES[kind])
        b = torch.randn(K, N, generator=g).to(DTYPES[kind])
    a, b = a.to(device), b.to(device)
    if trans_a:  # same values, column-major storage
        a = a.t().contiguous().t()
    if trans_b:
        b = b.t().contiguous().t()
    return a, b


def run_matmul(kind, M, N, K, config, stages, trans_a=False, trans_b=False, device="cuda", seed=0, wgmma=True):
    bm, bn, bk, warps = config
    a, b = _operands(kind, M, N, K, trans_a, trans_b, device, seed)
    out_t = torch.int32 if kind == "int8" else torch.float32
    c = torch.full((M, N), -12345 if kind == "int8" else float("nan"), dtype=out_t, device=device)
    grid = (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=4, INT=kind == "int8",
                        PREC="tf32" if kind == "tf32" else "ieee", num_warps=warps, num_stages=stages,
                        enable_wgmma=wgmma)
    ref = a.cpu().double() @ b.cpu().double()
    return c.cpu(), ref


def check(kind, got, ref, K):
    if kind == "int8":
        assert torch.equal(got.long(), ref.long())
        return
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    tol = {"fp16": 2e-3, "bf16": 1.6e-2, "tf32": 2e-3, "fp32": 1e-5}[kind] * max(K, 16) ** 0.5
    err = ((got.double() - ref).abs() / (ref.abs() + 1)).max().item()
    assert err < tol, f"{kind}: max relative error {err:.3g} > {tol:.3g}"


CONFIGS = [(32, 32, 32, 4), (64, 64, 32, 4), (128, 128, 32, 8), (128, 64, 64, 4), (64, 128, 16, 8), (256, 64, 32, 8)]
SHAPES = [(256, 256, 256), (70, 50, 90), (192, 130, 40), (33, 257, 520), (64, 64, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tensor_core_matmul(shape, kind, config, stages):
    M, N, K = shape
    got, ref = run_matmul(kind, M, N, K, config, stages, seed=M + N + K + stages)
    check(kind, got, ref, K)



@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("trans", [(True, False), (False, True), (True, True)], ids=["At", "Bt", "AtBt"])
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (70, 50, 90)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config", [(64, 64, 32, 4), (128, 128, 32, 8), (128, 128, 64, 8)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma_sync"])
def test_transposed_operands(config, shape, kind, trans, stages, wgmma):
    M, N, K = shape
    got, ref = run_matmul(kind, M, N, K, config, stages, *trans, seed=7, wgmma=wgmma)
    check(kind, got, ref, K)



@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tf32", "fp32", "int8"])
@pytest.mark.parametrize("shape", [(128, 128, 128), (70, 50, 90)], ids=lambda s: "x".join(map(str, s)))
def test_other_dtypes(kind, shape):
    M, N, K = shape
    got, ref = run_matmul(kind, M, N, K, (64, 64, 32, 4), 3, seed=3)
    check(kind, got, ref, K)



@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 4])
def test_loop_shorter_than_the_pipeline_and_empty_loop(stages):
    # K = 16 with BLOCK_K = 32: one iteration, the prologue's other stages predicated off
    got, ref = run_matmul("fp16", 128, 128, 16, (64, 64, 32, 4), stages, seed=1)
    check("fp16", got, ref, 16)
    # K = 0: the loop never runs; the result is the zero accumulator
    got, ref = run_matmul("fp16", 64, 64, 0, (64, 64, 32, 4), stages, seed=1)
    assert torch.equal(got, torch.zeros(64, 64))



@pytest.mark.parametrize("kind", ["fp16", "int8"])
def test_interpreter_runs_the_same_kernel(kind):
    got, ref = run_matmul(kind, 70, 50, 90, (32, 32, 32, 4), 3, device="cpu", seed=5)
    check(kind, got, ref, 90)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("stages, trans", [(2, (False, False)), (3, (True, True)), (4, (False, True))])
def test_pipelined_matmul_assembles(arch, stages, trans, tmp_path, monkeypatch):
    """No GPU needed: the pipelined kernel goes to a cubin for sm_80 and sm_90a with cp.async copies (16 bytes,
    zero-filling masked-off rows), a wait per iteration and mma.sync fed by ldmatrix."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = _operands("fp16", 256, 256, 256, *trans, "cpu", 0)
    c = torch.empty(256, 256)
    ck = matmul_kernel.warmup(a, b, c, 256, 256, 256, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 256, 1,
                              BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=4, INT=False, PREC="ieee", num_warps=8,
                              num_stages=stages, grid=(4,))
    ck.build_gpu(Target(arch))
    ptx = ck.asm["ptx"]
    assert ck.asm["cubin"][:4] == b"\x7fELF" and "llvm.nvvm" not in ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.commit_group" in ptx
    # wgmma leaves one MMA group in flight across iterations; the copies still run stages-1 ahead
    assert f"cp.async.wait_group {stages - 2}" in ptx and "cp.async.wait_group 0" in ptx
    assert ("wgmma.wait_group.sync.aligned 1" in ptx) == (arch == 90)
    # ptxas would serialize every wgmma (C7514) if one were in flight where other code reads accumulators
    assert "C7514" not in ck.report.get("log", "") and not any("Performance Loss" in n for n in ck.trace.notes)
    plan = [b for b in ck.trace.shared_plan if b.op == "ttg.local_alloc"]
    assert [b.stages for b in plan] == [stages, stages]
    if arch == 90:  # 128 rows over 8 warps: one m64 block per warpgroup, read from swizzled stages
        assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx and "ldmatrix" not in ptx
        # cp.async stages feed wgmma with no proxy fence (see lower_async.CP_ASYNC_PROXY_FENCE)
        assert "fence.proxy.async" not in ptx and "wgmma.wait_group.sync.aligned 0" in ptx
        # the swizzle spans the contiguous extent: 32 halves of K (64 bytes) or 128 of M or N (128 bytes)
        want = [128 if trans[0] else 64, 64 if trans[1] else 128]
        assert [int(b.swizzle.split("-")[0]) for b in plan] == want
        assert all(b.offset % 1024 == 0 for b in plan)
        # a transposed operand is read MN-major: the instruction's transpose flags say which
        flags = re.search(r"wgmma\.mma_async[^;]*, p, 1, 1, (\d), (\d);", ptx).groups()
        assert flags == (str(int(trans[0])), str(int(not trans[1])))
    else:
        assert "ldmatrix.sync.aligned.m8n8.x4" in ptx and "mma.sync.aligned.m16n8k16" in ptx
        # A column-major is read with ldmatrix .trans; B row-major too; B column-major without
        assert ("ldmatrix.sync.aligned.m8n8.x4.trans" in ptx) == (trans != (False, True))
    # the epilogue's conversion to the store layout moves the accumulator's (f32) pairs into padded scratch as
    # 8-byte vectors and reads 16-byte rows out of it, never element by element
    assert "st.shared.v2.b32" in ptx and not re.search(r"st\.shared\.[bf]32", ptx) and "ld.shared.v4.b32" in ptx
    assert ck.n_spills == 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("bm, warps", [(128, 4), (256, 8)])
def test_taller_tiles_issue_several_wgmmas_per_warpgroup(bm, warps, tmp_path, monkeypatch):
    """BLOCK_M = 32 x num_warps: each warpgroup issues two m64 instructions per k-step (rows 64g and
    16 x num_warps + 64g of the tile, the interleaved #mma layout), both in the group kept in flight."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = _operands("fp16", 512, 512, 512, False, False, "cpu", 0)
    c = torch.empty(512, 512)
    ck = matmul_kernel.warmup(a, b, c, 512, 512, 512, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 512, 1,
                              BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_M=4, INT=False, PREC="ieee", num_warps=warps,
                              num_stages=3, grid=(4,))
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") == 2 * 64 // 16
    assert "wgmma.wait_group.sync.aligned 1" in ptx and "C7514" not in ck.report.get("log", "")
    assert ck.n_spills == 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("kind, instr", [("tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
                                         ("int8", "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"),
                                         ("fp32", None)])
def test_tf32_and_int8_take_tensor_cores(kind, instr, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b = _operands(kind, 128, 128, 128, False, False, "cpu", 0)
    c = torch.empty(128, 128, dtype=torch.int32 if kind == "int8" else torch.float32)
    ck = matmul_kernel.warmup(a, b, c, 128, 128, 128, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 128, 1,
                              BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, INT=kind == "int8",
                              PREC="tf32" if kind == "tf32" else "ieee", num_warps=4, grid=(4,))
    ck.build_gpu(Target(80))  # sm_80's form (sm_90a's wgmma: tests/test_mma_forms.py)
    ptx = ck.asm["ptx"]
    if instr is None:  # input_precision="ieee" on fp32: CUDA cores, and the trace says why
        assert "mma.sync" not in ptx and "IEEE fp32 runs on CUDA cores" in ck.asm["gpu"]
        return
    assert instr in ptx and "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    # the loop's tiles go to shared memory by cp.async (tf32 and int8 too, since ulib16), so the tensor cores read
    # fp32 stages as they are (truncated to tf32, as Triton's pipelined operands); only the register path rounds
    assert "cp.async" in ptx and "cvt.rna.tf32.f32" not in ptx
    assert ck.n_spills == 0
