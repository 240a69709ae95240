"""fp8 (e4m3, e5m2) and int8 matmul in a K loop on sm_90a: the operands take the cp.async pipeline straight into
the 128-byte swizzled stages wgmma reads (K-major), as fp16/bf16 ones do, instead of being loaded into registers
and stored into shared memory every iteration.

The kernel is benchmarks/matmul.py's fp8 text (Triton's fp8 tutorial form, per-tensor scales in the epilogue).
CPU tests assemble it with ptxas and read the loop: cp.async and wgmma, no st.shared, no global load into registers,
no spills. An 8-bit B given N-contiguous (or K not a multiple of 16, which leaves 1-byte runs) keeps the register
path, as Triton 3.6 does; an fp32 (tf32) one is copied 4 bytes at a time into a K-major stage. GPU tests compare
with torch float32 on the fp8-decoded inputs, on ragged shapes, outputs poisoned.
"""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from benchmarks.matmul import fp8_block_ptr_kernel_for, fp8_matmul_kernel_for
from tests.ptx import loop_bodies

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

fp8_matmul = fp8_matmul_kernel_for(kl.jit, tl)
fp8_bp_matmul = fp8_block_ptr_kernel_for(kl.jit, tl)
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _operands(M, N, K, dtype, b_k_major, seed=0, device="cpu"):
    """fp8 A [M, K] and B [K, N] (K-major: w.T of a row-major [N, K] w; else row-major), edge values included:
    the largest finite magnitude's neighbourhood and subnormals; per-tensor fp32 scales."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g) * 2
    w = torch.randn(N, K, generator=g) * 2
    big = 448.0 if dtype == torch.float8_e4m3fn else 57344.0
    a[0, 0], a[1, 1], w[0, 0], w[1, 1] = big / 64, -(2.0 ** -9), 8.0, 2.0 ** -7
    a = a.to(dtype)
    b = w.to(dtype).t() if b_k_major else w.t().contiguous().to(dtype)
    scales = torch.tensor([0.75]), torch.tensor([0.125])
    return [t.to(device) for t in (a, b, *scales)]


def _launch(a, b, c, sa, sb, config, kernel=fp8_matmul, **kw):
    bm, bn, bk, warps, stages = config
    M, K = a.shape
    N = b.shape[1]
    grid = (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
    return kernel[grid](a, b, c, sa, sb, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                            num_stages=stages, **kw)


def _compile(M, N, K, config, dtype=torch.float8_e4m3fn, b_k_major=True, arch=90, kernel=fp8_matmul):
    from kernellab.compiler.codegen.target import Target

    a, b, sa, sb = _operands(M, N, K, dtype, b_k_major)
    c = torch.empty(M, N, dtype=torch.bfloat16)
    bm, bn, bk, warps, stages = config
    ck = kernel.warmup(a, b, c, sa, sb, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                           c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                           num_stages=stages, grid=(1,))
    ck.build_gpu(Target(arch))
    stats = next(p.stats for p in ck.trace.passes if p.name == "pipeline_dot_operands")
    stats["tma"] = next(p.stats for p in ck.trace.passes if p.name == "fill_stages_with_tma")["tma"]
    return ck, stats


def _wgmma_loop(ptx: str) -> str:
    loops = [body for body in loop_bodies(ptx) if "wgmma.mma_async" in body]
    assert len(loops) == 1, [len(b) for b in loops]
    return loops[0]


def _count(pattern, text):
    return len(re.findall(pattern, text, re.M))


CONFIGS = [(128, 256, 128, 8, 3), (128, 128, 128, 4, 4)]


@needs_ptxas
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
def test_k_major_fp8_loop_is_cp_async_and_wgmma_only(config, fp8, tmp_path, monkeypatch):
    """Triton's fp8 tutorial form at the configs Triton's fp8 matmuls launch: both operands are copied by cp.async
    into swizzled stages and read there by wgmma, one group in flight; no st.shared or ld.global in the loop."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, stats = _compile(1024, 1024, 1024, config, FP8[fp8])
    assert stats["pipelined"] == 1 and stats["buffers"] == 2 and stats.get("overlapped_wgmma") == 1, stats
    loop = _wgmma_loop(ck.asm["ptx"])
    bm, bn, bk, warps, _ = config
    per_thread = (bm * bk + bk * bn) // (16 * 32 * warps)  # 16-byte copies of both tiles per thread
    assert _count(r"^\s*cp\.async\.cg\.shared\.global(?:\.L2::\w+)? \[", loop) == per_thread
    assert _count(r"^\s*st\.shared", loop) == 0 and _count(r"^\s*ld\.global", loop) == 0
    assert _count(rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k32\.f32\.{fp8}\.{fp8}", loop) == bk // 32 * (
        bm // (16 * warps))
    assert _count(r"wgmma\.wait_group\.sync\.aligned 1;", loop) == 1
    assert ck.n_spills == 0 and "C7514" not in ck.report.get("log", "")
    allocs = [ln for ln in ck.asm["gpu"].splitlines() if "ttg.local_alloc" in ln]
    assert len(allocs) == 2 and all("swizzle=128" in ln for ln in allocs), allocs
    assert "order=0,1" in allocs[1]  # B's stage is stored N rows of K: K-major, what wgmma reads


@needs_ptxas
def test_block_pointer_fp8_loop_is_tma_and_wgmma_only(tmp_path, monkeypatch):
    """The block-pointer text (B's block K-major): both stages filled by TMA on sm_90, no copy by the threads."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, stats = _compile(1024, 1024, 1024, CONFIGS[0], kernel=fp8_bp_matmul)
    assert stats["pipelined"] == 1 and stats["buffers"] == 2 and stats["tma"] == 2, stats
    loop = _wgmma_loop(ck.asm["ptx"])
    assert loop.count("cp.async.bulk.tensor.2d") == 2  # (inside inline asm blocks)
    assert _count(r"^\s*st\.shared", loop) == 0 and _count(r"^\s*ld\.global", loop) == 0
    assert _count(r"^\s*cp\.async\.cg", loop) == 0 and ck.n_spills == 0


@needs_ptxas
def test_n_contiguous_b_keeps_the_register_path_for_b_only(tmp_path, monkeypatch):
    """B row-major [K, N]: wgmma cannot read an 8-bit B N-major and cp.async cannot transpose, so B is loaded
    into registers and stored K-major each iteration (Triton 3.6 does the same); A is still pipelined."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, stats = _compile(1024, 1024, 1024, (128, 256, 128, 8, 3), b_k_major=False)
    assert stats["pipelined"] == 1 and stats["buffers"] == 1 and "overlapped_wgmma" not in stats
    assert any("operand b is N-contiguous" in s for s in stats["skipped"]), stats
    loop = _wgmma_loop(ck.asm["ptx"])
    assert _count(r"^\s*cp\.async", loop) > 0 and _count(r"^\s*st\.shared", loop) > 0
    assert ck.n_spills == 0


@needs_ptxas
def test_k_not_a_multiple_of_16_keeps_the_register_path(tmp_path, monkeypatch):
    """K = 1000: rows 1000 bytes apart and a K mask that changes every element leave 1-byte runs, which cp.async
    cannot move (4 to 16 bytes): the loop keeps loading into registers, and says why."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _, stats = _compile(1000, 1000, 1000, (128, 128, 128, 4, 3))
    assert stats["pipelined"] == 0 and "1-byte accesses" in stats["skipped"][0], stats


@needs_ptxas
def test_k_multiple_of_16_but_not_of_the_tile_is_pipelined(tmp_path, monkeypatch):
    """K = 1040 (the last tile half masked off): 16-byte runs, so still cp.async (masked copies write zeros)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    _, stats = _compile(1000, 776, 1040, (128, 128, 128, 4, 3))
    assert stats["pipelined"] == 1 and stats["buffers"] == 2, stats


# --------------------------------------------------------------------------- the interpreter and the GPU


def _reference(a, b, sa, sb):
    return (a.float() @ b.float()) * (sa * sb).item()


def _check(got, a, b, sa, sb, out):
    """Against float32 on the decoded fp8 inputs: the output's rounding (2^-8 relative for bf16, 2^-11 for fp16)
    plus Hopper's fp8 accumulation (not full fp32: 2^-8 of the terms' sum, as tests/test_mma_forms.py allows)."""
    got = got.float().cpu()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    a, b = a.cpu(), b.cpu()
    ref = _reference(a, b, sa.cpu(), sb.cpu())
    terms = (a.float().abs() @ b.float().abs()) * (sa * sb).abs().item()
    rel_out = 2.0 ** -8 if out == torch.bfloat16 else 2.0 ** -11
    err = (got - ref).abs() - (1e-3 + rel_out * ref.abs() + 2.0 ** -8 * terms)
    assert (err <= 0).all(), f"{int((err > 0).sum())} elements out of tolerance, worst by {err.max().item():.3g}"


@pytest.mark.parametrize("kernel", [fp8_matmul, fp8_bp_matmul], ids=["pointers", "block_ptr"])
def test_interpreter_runs_the_fp8_kernel(kernel):
    a, b, sa, sb = _operands(70, 50, 96, torch.float8_e4m3fn, True, seed=1)
    c = torch.full((70, 50), float("nan"), dtype=torch.bfloat16)
    _launch(a, b, c, sa, sb, (32, 32, 32, 4, 3), kernel=kernel)
    _check(c, a, b, sa, sb, torch.bfloat16)


# (M, N, K): ragged everywhere; K a multiple of 16 but not of the tile (pipelined, last tile masked); K = 1000 (the
# register path); a loop shorter than the pipeline; one of a single iteration
SHAPES = [(1000, 776, 1040), (333, 517, 1000), (130, 260, 256), (64, 300, 96), (257, 129, 4112)]


def _needs_fp8():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an sm_90 GPU (fp8 wgmma)")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fp8, out, b_k_major", [("e4m3", "bf16", True), ("e5m2", "fp16", True),
                                                 ("e4m3", "bf16", False)])
def test_gpu_fp8_matmul_against_float32(shape, config, fp8, out, b_k_major):
    _needs_fp8()
    M, N, K = shape
    a, b, sa, sb = _operands(M, N, K, FP8[fp8], b_k_major, seed=M + N + K, device="cuda")
    c = torch.full((M, N), float("nan"), dtype=OUT[out], device="cuda")
    _launch(a, b, c, sa, sb, config)
    torch.cuda.synchronize()
    _check(c, a, b, sa, sb, OUT[out])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[2] % 16 == 0], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("b_k_major", [True, False], ids=["Bkmajor", "Bnmajor"])
def test_gpu_block_pointer_fp8_matmul_against_float32(shape, b_k_major):
    """The block-pointer text (TMA stages; B N-major: A by TMA, B through registers), ragged M and N (TMA and the
    boundary checks zero-fill), K a multiple of 16 (TMA's 16-byte strides)."""
    _needs_fp8()
    M, N, K = shape
    a, b, sa, sb = _operands(M, N, K, torch.float8_e4m3fn, b_k_major, seed=M + N, device="cuda")
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    _launch(a, b, c, sa, sb, CONFIGS[0], kernel=fp8_bp_matmul)
    torch.cuda.synchronize()
    _check(c, a, b, sa, sb, torch.bfloat16)


@pytest.mark.gpu
@needs_cuda
def test_gpu_fp8_matches_scaled_mm():
    """The benchmark's shapes' form (B column-major, fp32 scales, bf16 out) against torch._scaled_mm (cuBLAS)."""
    _needs_fp8()
    M, N, K = 1024, 768, 512
    a, b, sa, sb = _operands(M, N, K, torch.float8_e4m3fn, True, seed=7, device="cuda")
    c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    _launch(a, b, c, sa, sb, CONFIGS[0])
    ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    _check(c, a, b, sa, sb, torch.bfloat16)
    assert ((c.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2


# --------------------------------------------------------------------------- tf32 (fp32 inputs) and int8


def _compile_other(kind, b_k_major, config=(128, 128, 64, 4), stages=3):
    """tests/test_gpu_matmul.py's tutorial kernel on int8 or fp32 (tf32) operands, built for sm_90a."""
    from kernellab.compiler.codegen.target import Target
    from tests.test_gpu_matmul import _operands as mm_operands
    from tests.test_gpu_matmul import matmul_kernel

    a, b = mm_operands(kind, 512, 512, 512, False, b_k_major, "cpu", 0)
    c = torch.empty(512, 512, dtype=torch.int32 if kind == "int8" else torch.float32)
    bm, bn, bk, warps = config
    ck = matmul_kernel.warmup(a, b, c, 512, 512, 512, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 512, 1,
                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=4, INT=kind == "int8",
                              PREC="tf32" if kind == "tf32" else "ieee", num_warps=warps, num_stages=stages,
                              grid=(1,))
    ck.build_gpu(Target(90))
    return ck, next(p.stats for p in ck.trace.passes if p.name == "pipeline_dot_operands")


@needs_ptxas
@pytest.mark.parametrize("kind, config, instr", [("tf32", (128, 128, 64, 4), r"m64n128k8\.f32\.tf32\.tf32"),
                                                 ("int8", (128, 128, 128, 4), r"m64n128k32\.satfinite\.s32\.s8\.s8")])
def test_k_major_tf32_and_int8_loops_are_cp_async_and_wgmma_only(kind, config, instr, tmp_path, monkeypatch):
    """fp32 (tf32) and int8 tiles, B column-major: both pipelined like fp8. fp32 stages are read by wgmma as they
    are (truncated to tf32, as Triton's): no cvt.rna in the loop. Held in registers and staged every iteration
    instead, the fp32 loop spilled 1660 bytes at this config."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, stats = _compile_other(kind, True, config)
    assert stats["pipelined"] == 1 and stats["buffers"] == 2 and stats.get("overlapped_wgmma") == 1, stats
    loop = _wgmma_loop(ck.asm["ptx"])
    assert _count(r"^\s*cp\.async\.cg\.shared\.global", loop) > 0 and _count(rf"wgmma\.mma_async\.sync\.aligned\.{instr}",
                                                                           loop) > 0
    assert _count(r"^\s*st\.shared", loop) == 0 and _count(r"^\s*ld\.global", loop) == 0
    assert "cvt.rna.tf32" not in loop and ck.n_spills == 0


@needs_ptxas
@pytest.mark.parametrize("config", [(128, 128, 64, 4), (64, 64, 64, 4)], ids=lambda c: "x".join(map(str, c)))
def test_n_contiguous_tf32_b_is_copied_into_a_k_major_stage(config, tmp_path, monkeypatch):
    """fp32 B row-major [K, N] (N-contiguous): unlike an 8-bit one it is pipelined too, copied 4 bytes (one
    element) at a time into a K-major stage (as Triton does). The copies of a run of the load's contiguous
    elements address it from its first pointer plus immediates, so the carried pointer tile keeps one pointer
    per run: 128x128x64 216 registers, no spills (each element's own pointer: 1916 bytes spilled; the register
    path 176; Triton 3.6 255 registers, 196 bytes spilled)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, stats = _compile_other("tf32", False, config)
    assert stats["pipelined"] == 1 and stats["buffers"] == 2 and not stats["skipped"], stats
    loop = _wgmma_loop(ck.asm["ptx"])
    assert _count(r"^\s*cp\.async\.cg\.shared\.global.*, 16", loop) > 0  # A: 16-byte copies
    assert _count(r"^\s*cp\.async\.ca\.shared\.global.*, 4", loop) > 0  # B: one element each
    assert _count(r"^\s*st\.shared", loop) == 0 and _count(r"^\s*ld\.global", loop) == 0
    assert "cvt.rna.tf32" not in loop and ck.n_spills == 0, (ck.n_regs, ck.n_spills)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("b_k_major", [True, False], ids=["Bkmajor", "Bnmajor"])
@pytest.mark.parametrize("kind", ["tf32", "int8"])
@pytest.mark.parametrize("shape", [(256, 256, 512), (70, 50, 90), (193, 130, 1040)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_tf32_and_int8_with_either_b_layout(shape, kind, b_k_major):
    """tests/test_gpu_matmul.py's check (float64 reference, poisoned output) at 3 stages: B K-major (pipelined as
    it lies), B N-contiguous (tf32: copied element by element into a K-major stage; int8: the register path)."""
    from tests.test_gpu_matmul import check, run_matmul

    M, N, K = shape
    config = (128, 128, 64, 4) if kind == "tf32" else (128, 128, 128, 4)
    got, ref = run_matmul(kind, M, N, K, config, 3, trans_b=b_k_major, seed=M + N + K)
    check(kind, got, ref, K)


# ------------------------------------------------------------------ max_num_imprecise_acc (Triton's fp8 promotion)
@kl.jit
def _imprecise_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, LPA: tl.constexpr):
    pid = tl.program_id(0)
    npn = tl.cdiv(N, BN)
    rm = (pid // npn) * BM + tl.arange(0, BM)
    rn = (pid % npn) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, max_num_imprecise_acc=LPA)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc)


def _imprecise_args(dtype, device, M=128, N=256, K=256, seed=4):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 3).to(dtype).to(device)
    b = (torch.randn(K, N, generator=g) * 3).to(dtype).to(device)
    c = torch.full((M, N), float("nan"), device=device)
    return a, b, c, (M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


@needs_ptxas
@pytest.mark.parametrize("lpa, adds", [(32, 512), (64, 256), (128, 128), (None, 0)])
def test_max_num_imprecise_acc_promotes_partial_sums(lpa, adds, tmp_path, monkeypatch):
    """Triton's sm_90 semantics: an fp8 wgmma dot adds its partial sum into the fp32 accumulator on the CUDA
    cores after every `max_num_imprecise_acc` products of K (128x256x128 tile, 8 warps: 128 accumulator
    registers per thread, K/lpa promotions); without it the tensor cores accumulate the whole dot."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a, b, c, rest = _imprecise_args(torch.float8_e4m3fn, "cpu")
    ck = _imprecise_mm.warmup(a, b, c, *rest, 128, 256, 128, lpa, num_warps=8, num_stages=3, grid=(1,))
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async" in ptx
    assert ptx.count("add.f32") == adds


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lpa", [0, 32, 128, None])
@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
def test_gpu_max_num_imprecise_acc_against_float64(fp8, lpa):
    a, b, c, rest = _imprecise_args(FP8[fp8], "cuda")
    _imprecise_mm[(2,)](a, b, c, *rest, 128, 128, 128, lpa, num_warps=8, num_stages=3)
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any()
    # the tensor cores accumulate fp8 products with fewer mantissa bits than fp32 (2^-8 of |a|@|b| over a whole
    # dot); promoted every <= 128 products the bound is tighter
    bound = (2.0 ** -8 if lpa is None else 2.0 ** -10) * (a.double().abs() @ b.double().abs())
    assert ((c.double() - ref).abs() <= bound + 1e-6).all()


def test_interpreter_takes_max_num_imprecise_acc():
    """The interpreter accumulates in full precision whatever the limit (as Triton's interpreter does)."""
    a, b, c, rest = _imprecise_args(torch.float8_e5m2, "cpu", M=64, N=64, K=128)
    _imprecise_mm[(1,)](a, b, c, *rest, 64, 64, 64, 32)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-6, atol=1e-5)
